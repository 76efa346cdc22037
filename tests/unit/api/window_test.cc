// Event-time windows (weir/window.h): assignment, and the window operator
// in a real operator chain with keyed state and timers — fired by
// watermarks, results at the window's last millisecond, allowed lateness and
// late records.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "taskmanager/state/keyed_state_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/http/metric_families.h"
#include "common/logging/logging.h"
#include "taskmanager/metrics/task_metrics.h"
#include "taskmanager/network/result_partition.h"
#include "taskmanager/operator_chain.h"
#include "tests/testing/log_capture.h"
#include "weir/datastream.h"
#include "weir/window.h"

namespace weir {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<TimeWindow> Windows(const auto& assigner, int64_t timestamp) {
  std::vector<TimeWindow> out;
  internal::AssignWindows(assigner, timestamp, &out);
  return out;
}

TEST(WindowAssignerTest, TumblingAndSlidingWindowsCoverEachTimeOnceOrSizeOverSlideTimes) {
  const TumblingWindows tumbling{.size = std::chrono::milliseconds(10)};
  EXPECT_THAT(Windows(tumbling, 0), ElementsAre(TimeWindow{0, 10}));
  EXPECT_THAT(Windows(tumbling, 9), ElementsAre(TimeWindow{0, 10}));
  EXPECT_THAT(Windows(tumbling, 10), ElementsAre(TimeWindow{10, 20}));
  EXPECT_THAT(Windows(tumbling, -1), ElementsAre(TimeWindow{-10, 0}));
  const TumblingWindows shifted{.size = std::chrono::milliseconds(10), .offset = std::chrono::milliseconds(3)};
  EXPECT_THAT(Windows(shifted, 2), ElementsAre(TimeWindow{-7, 3}));
  EXPECT_THAT(Windows(shifted, 3), ElementsAre(TimeWindow{3, 13}));

  const SlidingWindows sliding{.size = std::chrono::milliseconds(10), .slide = std::chrono::milliseconds(5)};
  EXPECT_THAT(Windows(sliding, 7), ElementsAre(TimeWindow{5, 15}, TimeWindow{0, 10}));
  EXPECT_THAT(Windows(sliding, 10), ElementsAre(TimeWindow{10, 20}, TimeWindow{5, 15}));
  EXPECT_THAT(Windows(sliding, -3), ElementsAre(TimeWindow{-5, 5}, TimeWindow{-10, 0}));

  EXPECT_THROW(internal::CheckAssigner(TumblingWindows{}), std::invalid_argument);
  EXPECT_THROW(internal::CheckAssigner(SlidingWindows{.size = std::chrono::milliseconds(10)}),
               std::invalid_argument);
  EXPECT_THROW(internal::CheckAssigner(TumblingWindows{.size = shifted.size, .offset = shifted.size}),
               std::invalid_argument);
  const TimeWindow w{-10, 20};
  EXPECT_EQ(internal::DecodeWindow(internal::EncodeWindow(w)), w);
  EXPECT_LT(internal::EncodeWindow({-10, 0}), internal::EncodeWindow({0, 10}));
}

// A keyed window vertex and a sink that notes "<value>@<event time>" and
// watermarks, run as one chain fed directly.
class Harness {
 public:
  // `define` attaches the window to the keyed stream of int64_t records
  // (key: value % 2, as "even"/"odd") and returns the result stream of
  // strings.
  template <typename Define>
  explicit Harness(Define define) {
    StreamEnvironment env(&job_.graph);
    auto keyed = env.AddSource<int64_t>("numbers", [] { return std::unique_ptr<SourceFunction<int64_t>>(); })
                     .KeyBy([](const int64_t& v) { return v % 2 == 0 ? std::string("even") : std::string("odd"); });
    VertexSpec sink;
    sink.name = "sink";
    sink.kind = VertexSpec::Kind::kSink;
    sink.operator_factory = [this] { return std::make_unique<Sink>(&events_); };
    define(keyed).Attach(std::move(sink));

    tdd_.set_job_id("job-1");
    tdd_.set_attempt(1);
    tdd_.set_task_id("job-1/1/c1s0");
    // Everything after the source, chained.
    for (size_t v = 1; v < job_.graph.vertices.size(); ++v) tdd_.add_vertex_ids(static_cast<int>(v));
    tdd_.set_parallelism(1);
    tdd_.set_input_vertex(0);
    tdd_.set_max_parallelism(128);
    Open(nullptr);
  }

  // A checkpoint of the chain, then a new chain restored from it (as after a
  // failure): what was in memory only is gone.
  void Restart() {
    absl::StatusOr<taskmanager::ChainSnapshot> taken = chain_->SnapshotState(CheckpointInfo{1, 0});
    ASSERT_TRUE(taken.ok()) << taken.status();
    taskmanager::ChainSnapshot restored;
    for (taskmanager::OperatorSnapshot& op : taken->operators) {
      taskmanager::OperatorSnapshot& next = restored.operators.emplace_back();
      next.operator_state = op.operator_state;
      if (op.keyed != nullptr) {
        taskmanager::KeyedStateRestore part;
        ASSERT_TRUE(op.keyed->Write(::testing::TempDir(), "window-test", &part.snapshot).ok());
        part.checkpoint_dir = ::testing::TempDir();
        next.keyed_restore.push_back(std::move(part));
      }
    }
    chain_.reset();
    Open(&restored);
  }

  void Record(int64_t value, int64_t timestamp) {
    chain_->SetElementTimestamp(timestamp);
    chain_->input()->Emit(&value);
    chain_->SetElementTimestamp(kNoTimestamp);
  }
  void Watermark(int64_t watermark) { chain_->ProcessWatermark(watermark); }
  // What reached the sink since the last call.
  std::vector<std::string> Take() { return std::exchange(events_, {}); }
  std::string Metrics() const {
    http::MetricFamilies out;
    metrics_.Export(out, {});
    return out.Text();
  }

 private:
  void Open(const taskmanager::ChainSnapshot* restored) {
    taskmanager::OperatorChainOptions options;
    options.partitions = &partitions_;
    options.state_backend = "hashmap";
    options.metrics = &metrics_;
    auto chain =
        taskmanager::OperatorChain::Create(tdd_, job_, options, taskmanager::ChainCounters{&in_, &out_}, restored);
    ASSERT_TRUE(chain.ok()) << chain.status();
    chain_ = std::move(*chain);
    chain_->InitializeStateAndOpen();
  }

  class Sink final : public StreamOperator {
   public:
    explicit Sink(std::vector<std::string>* events) : events_(events) {}
    void Open(OperatorContext& context, RecordOutput*) override { context_ = &context; }
    void Process(void* record) override {
      events_->push_back(absl::StrCat(*static_cast<std::string*>(record), "@", context_->current_timestamp()));
    }
    int64_t OnWatermark(int64_t watermark) override {
      events_->push_back(absl::StrCat("watermark ", watermark));
      return watermark;
    }

   private:
    std::vector<std::string>* const events_;
    OperatorContext* context_ = nullptr;
  };

  jobgraph::LoadedJob job_;
  v1::TaskDeploymentDescriptor tdd_;
  taskmanager::network::PartitionManager partitions_;
  taskmanager::TaskMetrics metrics_;
  std::atomic<int64_t> in_{0}, out_{0};
  std::unique_ptr<taskmanager::OperatorChain> chain_;
  std::vector<std::string> events_;
};

using Keyed = KeyedStream<int64_t, std::string, Serializer<std::string>>;

// "<key> <window> <result>" from an aggregate's window function.
auto Describe() {
  return [](const std::string& key, const TimeWindow& w, int64_t n, Collector<std::string>& out) {
    out.Collect(absl::StrCat(key, " [", w.start, ",", w.end, ") ", n));
  };
}

TEST(WindowOperatorTest, TumblingCountsFireWhenTheWatermarkPassesAndCarryTheLastMillisecond) {
  Harness h([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(10)})
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  for (const auto& [value, time] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {2, 4}, {3, 12}, {5, 9}, {4, 0}}) {
    h.Record(value, time);
  }
  EXPECT_TRUE(h.Take().empty()) << "nothing fires before a watermark";
  h.Watermark(8);
  EXPECT_THAT(h.Take(), ElementsAre("watermark 8"));
  h.Watermark(9);
  // The windows [0, 10) of both keys, in key order, before the watermark.
  EXPECT_THAT(h.Take(), ElementsAre("even [0,10) 2@9", "odd [0,10) 2@9", "watermark 9"));
  h.Record(7, 15);
  h.Watermark(kMaxWatermark);
  EXPECT_THAT(h.Take(), ElementsAre("odd [10,20) 2@19", "watermark " + absl::StrCat(kMaxWatermark)));
  EXPECT_THAT(h.Metrics(), HasSubstr("weir_window_fired_total{operator=\"Window\"} 3"));
}

// More open windows than the window contents' cache holds (100,000): it
// writes part of itself back and drops it, again and again, and every
// window still fires once with every record it got, including records that
// arrived after its accumulator had left the cache.
TEST(WindowOperatorTest, MoreOpenWindowsThanTheCacheHoldsLoseNothing) {
  Harness h([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(1)})
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  constexpr int64_t kTimes = 70000;  // 140,000 windows: two keys
  for (int64_t t = 0; t < kTimes; ++t) {
    h.Record(2, t);
    h.Record(1, t);
  }
  // A second record for every 1000th window of both keys, long after the
  // first (its accumulator written back by then).
  for (int64_t t = 0; t < kTimes; t += 1000) {
    h.Record(4, t);
    h.Record(3, t);
  }
  h.Watermark(kMaxWatermark);
  const std::vector<std::string> fired = h.Take();
  ASSERT_EQ(fired.size(), static_cast<size_t>(2 * kTimes + 1));
  size_t twos = 0;
  for (size_t i = 0; i + 1 < fired.size(); ++i) {
    const bool two = fired[i].find(") 2@") != std::string::npos;
    ASSERT_TRUE(two || fired[i].find(") 1@") != std::string::npos) << fired[i];
    twos += two ? 1 : 0;
  }
  EXPECT_EQ(twos, static_cast<size_t>(2 * (kTimes / 1000)));
  EXPECT_EQ(fired.back(), "watermark " + absl::StrCat(kMaxWatermark));
}

TEST(WindowOperatorTest, LateRecordsUpdateWithinTheAllowedLatenessAndAreDroppedAfter) {
  Harness h([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(10)})
        .AllowedLateness(std::chrono::milliseconds(5))
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  h.Record(1, 3);
  h.Watermark(10);
  EXPECT_THAT(h.Take(), ElementsAre("odd [0,10) 1@9", "watermark 10"));
  // Behind the watermark, within the lateness: the window fires again with
  // the update, at once.
  h.Record(3, 5);
  EXPECT_THAT(h.Take(), ElementsAre("odd [0,10) 2@9"));
  // The lateness ends at 9 + 5: the window's state goes, and a record for it
  // then is late: dropped and counted.
  h.Watermark(14);
  EXPECT_THAT(h.Take(), ElementsAre("watermark 14"));
  h.Record(5, 1);
  h.Watermark(kMaxWatermark);
  EXPECT_THAT(h.Take(), ElementsAre("watermark " + absl::StrCat(kMaxWatermark)));
  EXPECT_THAT(h.Metrics(), HasSubstr("weir_window_late_records_total{operator=\"Window\"} 1"));
}

// Late records are logged as well as counted: a WARN naming the operator,
// the count since the last line and the watermark, then none for the next
// 10 s of processing time however many more come.
TEST(WindowOperatorTest, LateRecordsAreLoggedAtMostOncePerInterval) {
  auto capture = std::make_shared<testing::LogCapture>();
  logging::Get("task")->sinks().push_back(capture);
  const absl::Cleanup remove_capture = [] { logging::Get("task")->sinks().pop_back(); };
  Harness h([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(10)})
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  h.Watermark(100);
  for (int64_t v = 0; v < 3; ++v) h.Record(v, 5);
  EXPECT_THAT(h.Metrics(), HasSubstr("weir_window_late_records_total{operator=\"Window\"} 3"));
  const std::string logged = capture->text();
  EXPECT_THAT(logged, HasSubstr("task job-1/1/c1s0: window operator 'Window' subtask 0: 1 record came after their "
                                "windows' allowed lateness since the last message (watermark at 100 Unix ms"))
      << logged;
  EXPECT_EQ(logged.find("window operator", logged.find("window operator") + 1), std::string::npos)
      << "one line, not one per record: " << logged;
}

TEST(WindowOperatorTest, SlidingReduceAndFullWindowProcess) {
  Harness reduce([](const Keyed& keyed) {
    return keyed.Window(SlidingWindows{.size = std::chrono::milliseconds(10), .slide = std::chrono::milliseconds(5)})
        .Reduce([](const int64_t& a, const int64_t& b) { return a + b; })
        .Map([](int64_t sum) { return absl::StrCat("sum ", sum); });
  });
  reduce.Record(2, 7);   // [0,10) and [5,15)
  reduce.Record(4, 12);  // [5,15) and [10,20)
  reduce.Watermark(kMaxWatermark);
  EXPECT_THAT(reduce.Take(), ElementsAre("sum 2@9", "sum 6@14", "sum 4@19", "watermark " + absl::StrCat(kMaxWatermark)));

  Harness process([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(10)})
        .Process<std::string>([](const std::string& key, const TimeWindow& w, const std::vector<int64_t>& records,
                                 Collector<std::string>& out) {
          out.Collect(absl::StrCat(key, " ", w.end, ": ", absl::StrJoin(records, ",")));
        });
  });
  for (int64_t v : {1, 3, 5, 2}) process.Record(v, v);
  process.Record(9, 10);
  process.Watermark(9);
  EXPECT_THAT(process.Take(), ElementsAre("even 10: 2@9", "odd 10: 1,3,5@9", "watermark 9"));
  process.Watermark(19);
  EXPECT_THAT(process.Take(), ElementsAre("odd 20: 9@19", "watermark 19"));
}

TEST(WindowOperatorTest, SessionsGrowAndMergeWhenARecordBridgesThem) {
  Harness count([](const Keyed& keyed) {
    return keyed.Window(SessionWindows{.gap = std::chrono::milliseconds(10)})
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  // Odd: [1, 11) and [13, 23), then 11 touches both: one session [1, 23).
  // Even: [40, 50) grown by 44 to [40, 54).
  count.Record(1, 1);
  count.Record(3, 13);
  count.Record(40, 40);
  count.Record(44, 44);
  count.Watermark(9);
  EXPECT_THAT(count.Take(), ElementsAre("watermark 9")) << "[1, 11) waits: a record at 10 or 11 may still bridge";
  count.Record(5, 11);
  count.Watermark(30);
  EXPECT_THAT(count.Take(), ElementsAre("odd [1,23) 3@22", "watermark 30"));
  count.Watermark(kMaxWatermark);
  EXPECT_THAT(count.Take(), ElementsAre("even [40,54) 2@53", "watermark " + absl::StrCat(kMaxWatermark)));

  // The records themselves merge too, in arrival order per session.
  Harness process([](const Keyed& keyed) {
    return keyed.Window(SessionWindows{.gap = std::chrono::milliseconds(10)})
        .Process<std::string>([](const std::string& key, const TimeWindow& w, const std::vector<int64_t>& records,
                                 Collector<std::string>& out) {
          out.Collect(absl::StrCat(key, " [", w.start, ",", w.end, "): ", absl::StrJoin(records, ",")));
        });
  });
  process.Record(1, 1);
  process.Record(3, 13);
  process.Record(5, 11);
  process.Record(7, 100);
  process.Watermark(kMaxWatermark);
  EXPECT_THAT(process.Take(), ElementsAre("odd [1,23): 1,3,5@22", "odd [100,110): 7@109",
                                          "watermark " + absl::StrCat(kMaxWatermark)));
  EXPECT_THROW(internal::CheckAssigner(SessionWindows{}), std::invalid_argument);

  Harness reduce([](const Keyed& keyed) {
    return keyed.Window(SessionWindows{.gap = std::chrono::milliseconds(10)})
        .Reduce([](const int64_t& a, const int64_t& b) { return a + b; })
        .Map([](int64_t sum) { return absl::StrCat("sum ", sum); });
  });
  reduce.Record(1, 1);
  reduce.Record(3, 13);
  reduce.Record(5, 11);
  reduce.Watermark(kMaxWatermark);
  EXPECT_THAT(reduce.Take(), ElementsAre("sum 9@22", "watermark " + absl::StrCat(kMaxWatermark)));
}

// Lateness is judged on the session a record ends up in, not on its own
// window (as in Flink): a record whose own session window is past its
// lateness still counts when it merges into a session that is not; one that
// merges into nothing is late.
TEST(WindowOperatorTest, ASessionRecordIsLateOnlyWhenTheSessionItMergesIntoIsLate) {
  for (const int64_t lateness : {0, 5}) {
    SCOPED_TRACE(absl::StrCat("allowed lateness ", lateness));
    Harness h([lateness](const Keyed& keyed) {
      return keyed.Window(SessionWindows{.gap = std::chrono::milliseconds(10)})
          .AllowedLateness(std::chrono::milliseconds(lateness))
          .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
    });
    h.Record(3, 15);  // odd [15, 25)
    h.Watermark(14 + lateness);
    EXPECT_THAT(h.Take(), ElementsAre(absl::StrCat("watermark ", 14 + lateness)));
    // Its own window [5, 15) ends its lateness at 14 + lateness, but it
    // touches [15, 25): one session [5, 25), which is not late.
    h.Record(5, 5);
    // Truly late: [-20, -10) touches no session.
    h.Record(7, -20);
    h.Watermark(kMaxWatermark);
    EXPECT_THAT(h.Take(), ElementsAre("odd [5,25) 2@24", "watermark " + absl::StrCat(kMaxWatermark)));
    EXPECT_THAT(h.Metrics(), HasSubstr("weir_window_late_records_total{operator=\"Window\"} 1"));
  }
}

// Window contents live in a write-back cache between checkpoints: a
// checkpoint must hold them all, and the restored windows fire with every
// record of before and after.
TEST(WindowOperatorTest, WindowContentsAndTimersSurviveACheckpointAndRestore) {
  for (const bool sessions : {false, true}) {
    Harness h([sessions](const Keyed& keyed) -> DataStream<std::string> {
      if (sessions) {
        return keyed.Window(SessionWindows{.gap = std::chrono::milliseconds(10)})
            .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
      }
      return keyed.Window(SlidingWindows{.size = std::chrono::milliseconds(10), .slide = std::chrono::milliseconds(5)})
          .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
    });
    h.Record(1, 1);
    h.Record(3, 6);
    h.Record(2, 7);
    h.Restart();
    h.Record(5, 8);
    h.Watermark(kMaxWatermark);
    if (sessions) {
      EXPECT_THAT(h.Take(), ElementsAre("even [7,17) 1@16", "odd [1,18) 3@17",
                                        "watermark " + absl::StrCat(kMaxWatermark)));
    } else {
      EXPECT_THAT(h.Take(), ElementsAre("odd [-5,5) 1@4", "even [0,10) 1@9", "odd [0,10) 3@9", "even [5,15) 1@14",
                                        "odd [5,15) 2@14", "watermark " + absl::StrCat(kMaxWatermark)));
    }
  }
}

TEST(WindowOperatorTest, ARecordWithoutEventTimeIsRefusedNamingTheFix) {
  Harness h([](const Keyed& keyed) {
    return keyed.Window(TumblingWindows{.size = std::chrono::milliseconds(10)})
        .Aggregate<std::string>(CountAggregate<int64_t>{}, Describe());
  });
  try {
    h.Record(1, kNoTimestamp);
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("without event time"));
    EXPECT_THAT(e.what(), HasSubstr("watermark strategy"));
  }
}

}  // namespace
}  // namespace weir
