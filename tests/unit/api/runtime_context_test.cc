// Map, Filter, FlatMap and Sink functions that take a RuntimeContext as
// their last argument see the job's configuration and their metrics; the
// ones that do not work as before.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_operator_context.h"
#include "weir/job.h"

namespace weir {
namespace {

// A context whose job configuration is {"offset": "100"}.
class ConfiguredContext : public testing::FakeOperatorContext {
 public:
  std::string JobConfig(std::string_view key, std::string_view fallback) const override {
    return key == "offset" ? "100" : std::string(fallback);
  }
};

template <typename T>
class Collect : public RecordOutput {
 public:
  void Emit(void* record) override { records.push_back(*static_cast<T*>(record)); }
  std::vector<T> records;
};

// The operator of vertex `v` of `graph`, opened on `context`.
std::unique_ptr<StreamOperator> Open(const JobGraph& graph, size_t v, OperatorContext& context, RecordOutput* out) {
  std::unique_ptr<StreamOperator> op = graph.vertices.at(v).operator_factory();
  op->Open(context, out);
  return op;
}

TEST(RuntimeContextTest, FunctionsMayTakeTheContextLast) {
  JobGraph graph;
  StreamEnvironment env(&graph);
  auto numbers = env.AddSource<int64_t>("Numbers", [] { return std::unique_ptr<SourceFunction<int64_t>>(); });
  auto shifted = numbers.Map([](int64_t x, RuntimeContext& ctx) { return x + std::stoll(ctx.JobConfig("offset", "0")); });
  auto plain = numbers.Map([](int64_t x) { return x * 2; });
  auto big = numbers.Filter([](const int64_t& x, RuntimeContext& ctx) {
    ctx.metrics().counter("test_filtered_total", "Records looked at.").Inc();
    return x >= std::stoll(ctx.JobConfig("offset", "0"));
  });
  auto twice = numbers.FlatMap<std::string>([](int64_t x, Collector<std::string>& out, RuntimeContext& ctx) {
    out.Collect(absl::StrCat(ctx.subtask_index(), ":", x));
    out.Collect(absl::StrCat(ctx.parallelism(), ":", x));
  });
  std::vector<int64_t> sunk;
  big.Sink("Sink", [&sunk](const int64_t& x, RuntimeContext& ctx) { sunk.push_back(x + ctx.subtask_index()); });
  ASSERT_EQ(graph.vertices.size(), 6u);

  ConfiguredContext context;
  Collect<int64_t> shifted_out, plain_out, big_out;
  Collect<std::string> twice_out;
  auto map = Open(graph, 1, context, &shifted_out);
  auto plain_map = Open(graph, 2, context, &plain_out);
  auto filter = Open(graph, 3, context, &big_out);
  auto flat = Open(graph, 4, context, &twice_out);
  auto sink = Open(graph, 5, context, nullptr);
  for (int64_t x : {7, 150}) {
    int64_t a = x, b = x, c = x, d = x, e = x;
    map->Process(&a);
    plain_map->Process(&b);
    filter->Process(&c);
    flat->Process(&d);
    sink->Process(&e);
  }
  EXPECT_EQ(shifted_out.records, (std::vector<int64_t>{107, 250}));
  EXPECT_EQ(plain_out.records, (std::vector<int64_t>{14, 300}));
  EXPECT_EQ(big_out.records, (std::vector<int64_t>{150}));
  EXPECT_EQ(twice_out.records, (std::vector<std::string>{"0:7", "1:7", "0:150", "1:150"}));
  EXPECT_EQ(sunk, (std::vector<int64_t>{7, 150}));
  EXPECT_TRUE(absl::StrContains(context.MetricsText(), "test_filtered_total{operator=\"test-operator\"} 2"))
      << context.MetricsText();
}

// Keyed state names starting "weir." are the runtime's (timers, window
// contents): a user's state there would corrupt them, so the keyed context
// refuses them by name, and takes any other.
TEST(KeyedContextTest, RefusesStateNamesReservedForTheRuntime) {
  testing::FakeOperatorContext context;
  KeyedContext<std::string> ctx("k", &context);
  for (const std::string name : {"weir.timers.event", "weir.window.contents", "weir."}) {
    try {
      ctx.State<int64_t>(name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "'" + name + "' is reserved")) << e.what();
    }
    EXPECT_THROW(ctx.ListState<int64_t>(name), std::invalid_argument);
    EXPECT_THROW((ctx.MapState<std::string, int64_t>(name)), std::invalid_argument);
    EXPECT_THROW(ctx.ReducingState<int64_t>(name, [](int64_t a, int64_t b) { return a + b; }), std::invalid_argument);
  }
  EXPECT_NO_THROW(ctx.State<int64_t>("weirdness"));
  EXPECT_NO_THROW(ctx.State<int64_t>("my.weir.count"));
}

}  // namespace
}  // namespace weir
