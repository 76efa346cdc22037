// ConnectorRegistry with connectors of the test's own: lookup by name, the
// errors for unknown names and for a connector of the other kind, and that
// what a connector says reaches the caller unchanged.
#include "connectors/registry.h"

#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "connectors/connector.h"
#include "connectors/system_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::connectors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Emits `count` records ("0", "1", ...), then ends.
class CountingSource final : public weir::SourceOperator {
 public:
  CountingSource(int count, bool at_most_once) : count_(count), at_most_once_(at_most_once) {}

  void Open(OperatorContext& context, RecordOutput* output) override { output_ = output; }
  SourceStatus PollNext() override {
    if (next_ == count_) return SourceStatus::kEndOfInput;
    std::string record = std::to_string(next_++);
    output_->Emit(&record);
    return SourceStatus::kMoreAvailable;
  }
  bool at_most_once() const { return at_most_once_; }

 private:
  const int count_;
  const bool at_most_once_;
  RecordOutput* output_ = nullptr;
  int next_ = 0;
};

// "counting-source": property 'count', a number.
class CountingSourceConnector final : public Connector {
 public:
  Kind kind() const override { return Kind::kSource; }
  absl::Status Validate(const Properties& properties) const override {
    auto it = properties.find("count");
    if (it == properties.end() || it->second.empty() ||
        it->second.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError("counting-source: property 'count' must be a number");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(const Properties& properties,
                                                                     const SourceContext& context) const override {
    if (absl::Status valid = Validate(properties); !valid.ok()) return valid;
    return std::make_unique<CountingSource>(std::stoi(properties.at("count")), context.job_at_most_once);
  }
};

// "null-sink": drops every record; claims its 'lane' exclusively.
class NullSinkConnector final : public Connector {
 public:
  Kind kind() const override { return Kind::kSink; }
  absl::Status Validate(const Properties& properties) const override { return absl::OkStatus(); }
  std::optional<ExclusiveNameClaim> ExclusiveName(const Properties& properties) const override {
    const std::string lane = PropertyOr(properties, "lane");
    if (lane.empty()) return std::nullopt;
    return ExclusiveNameClaim{.name = lane, .what = "lane", .use = "drops records on",
                              .conflict = "drop each other's records", .setting = "lane"};
  }
  absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const Properties& properties) const override {
    class Drop final : public weir::StreamOperator {
     public:
      void Open(OperatorContext& context, RecordOutput* output) override {}
      void Process(void* record) override {}
    };
    return std::make_unique<Drop>();
  }
};

class CollectingOutput final : public RecordOutput {
 public:
  void Emit(void* record) override { records.push_back(*static_cast<std::string*>(record)); }
  std::vector<std::string> records;
};

ConnectorRegistry TestConnectors() {
  ConnectorRegistry registry;
  EXPECT_TRUE(registry.Register("counting-source", std::make_unique<CountingSourceConnector>()).ok());
  EXPECT_TRUE(registry.Register("null-sink", std::make_unique<NullSinkConnector>()).ok());
  return registry;
}

TEST(ConnectorRegistryTest, FindsWhatWasRegistered) {
  const ConnectorRegistry registry = TestConnectors();
  EXPECT_THAT(registry.Names(), ElementsAre("counting-source", "null-sink"));
  ASSERT_NE(registry.Find("counting-source"), nullptr);
  EXPECT_EQ(registry.Find("counting-source")->kind(), Connector::Kind::kSource);
  ASSERT_NE(registry.Find("null-sink"), nullptr);
  EXPECT_EQ(registry.Find("null-sink")->kind(), Connector::Kind::kSink);
  EXPECT_EQ(registry.Find("kafka-source"), nullptr);
}

TEST(ConnectorRegistryTest, UnknownNameListsTheKnownOnes) {
  const ConnectorRegistry registry = TestConnectors();
  const absl::Status status = registry.Validate("kafka-source", {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "unknown connector 'kafka-source'; expected one of counting-source, null-sink");
  EXPECT_EQ(registry.CreateSource("kafka-source", {}, {}).status(), status);
  EXPECT_EQ(registry.CreateSink("kafka-source", {}).status(), status);

  const ConnectorRegistry empty;
  EXPECT_THAT(empty.Validate("kafka-source", {}).message(),
              HasSubstr("unknown connector 'kafka-source'; this cluster has no connectors registered"));
}

TEST(ConnectorRegistryTest, RefusesAConnectorOfTheOtherKind) {
  const ConnectorRegistry registry = TestConnectors();
  absl::Status status = registry.CreateSource("null-sink", {}, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "connector 'null-sink' is a sink, not a source");
  status = registry.CreateSink("counting-source", {{"count", "3"}}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "connector 'counting-source' is a source, not a sink");
  // The connector's own defaults refuse too, for callers that bypass the registry.
  EXPECT_EQ(registry.Find("null-sink")->CreateSource({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Find("counting-source")->CreateSink({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConnectorRegistryTest, CreatesThroughTheConnectorWithItsContext) {
  const ConnectorRegistry registry = TestConnectors();
  EXPECT_TRUE(registry.Validate("counting-source", {{"count", "2"}}).ok());
  const absl::Status invalid = registry.Validate("counting-source", {{"count", "two"}});
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.message(), "counting-source: property 'count' must be a number");
  EXPECT_EQ(registry.CreateSource("counting-source", {{"count", "two"}}, {}).status(), invalid);

  absl::StatusOr<std::unique_ptr<weir::SourceOperator>> source =
      registry.CreateSource("counting-source", {{"count", "2"}}, SourceContext{.job_at_most_once = true});
  ASSERT_TRUE(source.ok()) << source.status();
  auto* counting = dynamic_cast<CountingSource*>(source->get());
  ASSERT_NE(counting, nullptr);
  EXPECT_TRUE(counting->at_most_once());
  CollectingOutput output;
  struct : OperatorContext {
    const std::string& operator_name() const override { return name; }
    int subtask_index() const override { return 0; }
    int parallelism() const override { return 1; }
    KeyedStateStore* keyed_state() override { return nullptr; }
    void SetCurrentKey(std::string_view) override {}
    std::string JobConfig(std::string_view, std::string_view fallback) const override { return std::string(fallback); }
    OperatorStateStore* operator_state() override { return nullptr; }
    bool is_restored() const override { return false; }
    MetricGroup& metrics() override { return no_metrics; }
    struct : MetricGroup {
      Counter& counter(std::string_view, std::string_view, const MetricLabels&) override { return c; }
      Gauge& gauge(std::string_view, std::string_view, const MetricLabels&) override { return g; }
      Counter c;
      Gauge g;
    } no_metrics;
    std::string name = "counting";
  } context;
  (*source)->Open(context, &output);
  while ((*source)->PollNext() != SourceStatus::kEndOfInput) {
  }
  EXPECT_THAT(output.records, ElementsAre("0", "1"));

  EXPECT_TRUE(registry.CreateSink("null-sink", {}).ok());
}

TEST(ConnectorRegistryTest, DefaultsAllowEveryJobAndClaimNothing) {
  const ConnectorRegistry registry = TestConnectors();
  const Connector* source = registry.Find("counting-source");
  EXPECT_TRUE(source->ValidateForJob({{"count", "1"}}, JobCheckpointing{}).ok());
  EXPECT_EQ(source->ExclusiveName({{"count", "1"}}), std::nullopt);
  std::optional<ExclusiveNameClaim> claim = registry.Find("null-sink")->ExclusiveName({{"lane", "a"}});
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(claim->name, "a");
  EXPECT_EQ(claim->what, "lane");
}

TEST(ConnectorRegistryTest, RefusesDuplicateEmptyAndNullRegistrations) {
  ConnectorRegistry registry = TestConnectors();
  absl::Status status = registry.Register("null-sink", std::make_unique<NullSinkConnector>());
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("'null-sink' is already registered"));
  EXPECT_EQ(registry.Register("", std::make_unique<NullSinkConnector>()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("nothing", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(registry.Names(), ElementsAre("counting-source", "null-sink"));
}

TEST(ConnectorTest, GuaranteeHelpersReadTheGuaranteeProperty) {
  EXPECT_TRUE(WritesExactlyOnce(Properties{{"guarantee", "exactly-once"}}));
  EXPECT_FALSE(WritesExactlyOnce(Properties{{"guarantee", "at-least-once"}}));
  EXPECT_FALSE(WritesExactlyOnce(Properties{}));
  EXPECT_TRUE(WritesAtMostOnce(Properties{{"guarantee", "at-most-once"}}));
  EXPECT_FALSE(WritesAtMostOnce(Properties{{"guarantee", "exactly-once"}}));
  EXPECT_EQ(PropertyOr(Properties{{"a", "b"}}, "a"), "b");
  EXPECT_EQ(PropertyOr(Properties{{"a", "b"}}, "c"), "");
}

// A connector's system library is loaded when first used: a missing one is a
// clear error naming what needs it and the package to install, and so is a
// symbol the library does not have.
TEST(SystemLibraryTest, OpensLibrariesAndSaysWhatIsMissing) {
  absl::StatusOr<SystemLibrary> missing =
      SystemLibrary::Open("libweir-no-such-library.so.7", "weir-no-such-package", "the test sink");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::AllOf(::testing::HasSubstr("the test sink needs libweir-no-such-library.so.7"),
                               ::testing::HasSubstr("Debian package weir-no-such-package")));

  absl::StatusOr<SystemLibrary> libc = SystemLibrary::Open("libc.so.6", "libc6", "the test sink");
  ASSERT_TRUE(libc.ok()) << libc.status();
  size_t (*length)(const char*) = nullptr;
  ASSERT_TRUE(libc->Bind("strlen", &length).ok());
  EXPECT_EQ(length("weir"), 4u);
  int (*none)() = nullptr;
  const absl::Status status = libc->Bind("weir_no_such_symbol", &none);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("libc.so.6 has no weir_no_such_symbol"));
}

struct LibM {
  double (*cbrt)(double) = nullptr;
};

absl::Status BindLibM(const SystemLibrary& library, LibM* table) { return library.Bind("cbrt", &table->cbrt); }

// A library missing at the first connection and installed afterwards is
// found at the next one, without restarting the daemon: only a success is
// remembered.
TEST(SystemLibraryTest, AMissingLibraryIsLookedForAgainUntilItIsThere) {
  const std::string dir = ::testing::TempDir() + "/weir-lazy-library";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/libweir-later.so.1";
  LazyLibrary<LibM> later(path.c_str(), "weir-later", "the test sink", BindLibM);

  absl::StatusOr<const LibM*> first = later.Load();
  ASSERT_FALSE(first.ok());
  EXPECT_THAT(std::string(first.status().message()),
              ::testing::AllOf(HasSubstr("the test sink needs " + path), HasSubstr("Debian package weir-later")));

  // "Installed": the system's libm under that name.
  absl::StatusOr<SystemLibrary> libm = SystemLibrary::Open("libm.so.6", "libc6", "the test");
  ASSERT_TRUE(libm.ok()) << libm.status();
  LibM system;
  ASSERT_TRUE(BindLibM(*libm, &system).ok());
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(system.cbrt), &info), 0);
  std::filesystem::create_symlink(info.dli_fname, path);
  absl::StatusOr<const LibM*> second = later.Load();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_DOUBLE_EQ((*second)->cbrt(27.0), 3.0);
  EXPECT_EQ(&later.Get(), *second);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weir::connectors
