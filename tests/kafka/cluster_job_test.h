// ClusterJobTest: the fixture of the tests that run jobs on a real local
// cluster against the test broker — start a cluster, make topics, and wait
// for a job's attempts and checkpoints as `weir --json` reports them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir::testing {

// Writes make(first, 1000) for first = 0, 1000, ... below `records` to `in`
// on a thread, 1000 records every 100 ms, so that faults land while records
// flow; *failed when a write failed. Join the thread.
template <typename MakeBatch>
std::thread WriteSlowly(const std::string& bootstrap, const std::string& in, int records, MakeBatch make,
                        std::atomic<bool>* failed) {
  return std::thread([bootstrap, in, records, make, failed] {
    for (int first = 0; first < records; first += 1000) {
      if (!test::ProduceMessages(bootstrap, in, make(first, 1000)).ok()) *failed = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

// Reads `out` with read_committed into *output until `done(*output)` holds
// or `timeout` passes; returns whether it held.
template <typename Done>
bool ReadUntil(const std::string& bootstrap, const std::string& out, absl::Duration timeout,
               std::vector<test::KafkaMessage>* output, Done done) {
  return WaitFor([&] {
    auto read = test::ReadTopic(bootstrap, out);
    if (!read.ok()) return false;
    *output = *std::move(read);
    return done(*output);
  }, timeout, absl::Seconds(1));
}

// Records "<i>" under key "k<i % 997>" for i in [first, first + n): per
// key, the values only grow.
inline std::vector<test::KafkaMessage> Sequence(int first, int n) {
  std::vector<test::KafkaMessage> batch;
  batch.reserve(n);
  for (int i = first; i < first + n; ++i) batch.push_back({absl::StrCat("k", i % 997), absl::StrCat(i)});
  return batch;
}

// How often each numeric value occurs in `output`.
inline std::map<int, int> CountValues(const std::vector<test::KafkaMessage>& output) {
  std::map<int, int> seen;
  for (const test::KafkaMessage& m : output) {
    int value = -1;
    if (absl::SimpleAtoi(m.value, &value)) ++seen[value];
  }
  return seen;
}

// Whether, within `timeout`, the last stable offset of every partition of
// `out` reaches its high watermark: no transaction stays open on it.
inline bool NoTransactionStaysOpen(const std::string& bootstrap, const std::string& out,
                                   absl::Duration timeout = absl::Seconds(60),
                                   absl::Duration poll = absl::Milliseconds(500)) {
  return WaitFor([&] {
    auto stable = test::EndOffsets(bootstrap, out, /*read_committed=*/true);
    auto high = test::EndOffsets(bootstrap, out, /*read_committed=*/false);
    return stable.ok() && high.ok() && *stable == *high;
  }, timeout, poll);
}

// keyed_count's output: per key, in its partition's order, the counts 1, 2,
// ..., n; a gap is a lost count, a repeat a duplicate. Sorts *output by
// position; sets *last to each key's last count and *out_of_sequence to how
// many counts broke the sequence (the first five are test failures). A
// record without a key or whose value is no number is a fatal failure: call
// it inside ASSERT_NO_FATAL_FAILURE.
inline void CheckCountSequences(std::vector<test::KafkaMessage>* output, std::map<std::string, int>* last,
                                int* out_of_sequence) {
  test::SortByPosition(output);
  last->clear();
  *out_of_sequence = 0;
  for (const test::KafkaMessage& m : *output) {
    int count = 0;
    ASSERT_TRUE(m.key.has_value() && absl::SimpleAtoi(m.value, &count)) << m.value;
    int& previous = (*last)[*m.key];
    if (count != previous + 1 && ++*out_of_sequence <= 5) {
      ADD_FAILURE() << *m.key << ": count " << count << " after " << previous;
    }
    previous = count;
  }
}

// kafka_copy's output of Sequence(0, records): counts the values of
// 0..records-1 that are missing and those there more than once (the first
// five of each are test failures). A value that is no number is a fatal
// failure: call it inside ASSERT_NO_FATAL_FAILURE.
inline void CheckEveryValueOnce(const std::vector<test::KafkaMessage>& output, int records, int* missing,
                                int* duplicated) {
  std::map<int, int> seen;  // value -> times
  for (const test::KafkaMessage& m : output) {
    int value = -1;
    ASSERT_TRUE(absl::SimpleAtoi(m.value, &value)) << m.value;
    ++seen[value];
  }
  *missing = 0;
  *duplicated = 0;
  for (int i = 0; i < records; ++i) {
    auto it = seen.find(i);
    if (it == seen.end()) {
      if (++*missing <= 5) ADD_FAILURE() << "record " << i << " is missing";
    } else if (it->second > 1) {
      if (++*duplicated <= 5) ADD_FAILURE() << "record " << i << " is there " << it->second << " times";
    }
  }
}

// kafka_copy's output of Sequence: within a key's output partition, values
// only grow. Sorts *output by position; counts in *out_of_order the values
// that do not (the first five are test failures). A value that is no number
// is a fatal failure: call it inside ASSERT_NO_FATAL_FAILURE.
inline void CheckOrderPerKey(std::vector<test::KafkaMessage>* output, int* out_of_order) {
  test::SortByPosition(output);
  std::map<std::string, int> last;
  *out_of_order = 0;
  for (const test::KafkaMessage& m : *output) {
    int value = 0;
    ASSERT_TRUE(absl::SimpleAtoi(m.value, &value)) << m.value;
    auto [it, first] = last.emplace(*m.key, value);
    if (!first) {
      if (value <= it->second && ++*out_of_order <= 5) {
        ADD_FAILURE() << *m.key << ": " << value << " after " << it->second;
      }
      it->second = value;
    }
  }
}

// How many values a reader that ran during the faults saw more than once,
// from CountValues of what it read; the first five are test failures.
inline int CountSeenTwiceLive(const std::map<int, int>& live_counts) {
  int live_duplicated = 0;
  for (const auto& [value, times] : live_counts) {
    if (times > 1 && ++live_duplicated <= 5) {
      ADD_FAILURE() << "the live reader saw " << value << " " << times << " times";
    }
  }
  return live_duplicated;
}

// Records "id-<i>" -> "value-<i % distinct>" for i in [first, first + n),
// each counted per value into *truth: the counts keyed_count must end with.
inline std::vector<test::KafkaMessage> KeyedCountBatch(int first, int n, int distinct,
                                                       std::map<std::string, int64_t>* truth) {
  std::vector<test::KafkaMessage> batch;
  for (int i = first; i < first + n; ++i) {
    std::string value = absl::StrCat("value-", i % distinct);
    batch.push_back({absl::StrCat("id-", i), value});
    ++(*truth)[value];
  }
  return batch;
}

class ClusterJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = test::TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
  }

  // `taskmanagers` TaskManagers of one slot each.
  void StartCluster(int taskmanagers) {
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{taskmanagers, 1, {}, ""});
    cluster_->Start();
  }

  // For every key of `out`: the count it was last written with (offset order
  // within its partition; a key always goes to one partition).
  std::map<std::string, int64_t> LastCounts(const std::string& out) {
    std::map<std::string, int64_t> last;
    auto output = test::ReadTopic(bootstrap_, out);
    EXPECT_TRUE(output.ok()) << output.status();
    if (!output.ok()) return last;
    std::vector<test::KafkaMessage> messages = *output;
    test::SortByPosition(&messages);
    for (const test::KafkaMessage& m : messages) {
      int64_t c = 0;
      if (m.key.has_value() && absl::SimpleAtoi(m.value, &c)) last[*m.key] = c;
    }
    return last;
  }

  // A new topic of 4 partitions.
  std::string NewTopic(const std::string& prefix, int partitions = 4) {
    std::string topic = test::UniqueTopicName(prefix);
    absl::Status created = test::CreateTopic(bootstrap_, topic, partitions);
    EXPECT_TRUE(created.ok()) << created;
    return topic;
  }

  // The job and every task RUNNING, in an attempt after `min_attempt - 1`.
  bool WaitUntilRunning(const std::string& job, int min_attempt = 1) {
    return WaitFor([&] {
      nlohmann::json s = cluster_->WeirJson({"status", job});
      if (s.is_null() || s["state"] != "RUNNING" || s["attempt"].get<int>() < min_attempt) return false;
      for (const auto& t : s["tasks"]) {
        if (t["state"] != "RUNNING") return false;
      }
      return true;
    }, absl::Seconds(120));
  }

  // Waits until a checkpoint of attempt >= `attempt` (and id > `after_id`)
  // has completed.
  bool WaitForCompletedCheckpoint(const std::string& job, int attempt, int64_t after_id = 0) {
    return WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
      if (c.is_null()) return false;
      for (const auto& cp : c["checkpoints"]) {
        if (cp["status"] == "COMPLETED" && cp["attempt"].get<int>() >= attempt && cp["id"].get<int64_t>() > after_id) {
          return true;
        }
      }
      return false;
    }, absl::Seconds(60));
  }

  // Records read by the Kafka source tasks of the attempt `status` (a
  // `weir --json status` answer) shows.
  static int64_t SourceRecordsIn(const nlohmann::json& status) {
    int64_t read = 0;
    if (status.is_null()) return read;
    for (const auto& t : status["tasks"]) {
      if (t["name"].get<std::string>().find("KafkaSource") != std::string::npos) read += t["records_in"].get<int64_t>();
    }
    return read;
  }

  // The index of a TaskManager that runs a task of `job`, at random.
  int BusyTaskManager(const std::string& job, std::mt19937& random) {
    nlohmann::json s = cluster_->WeirJson({"status", job});
    std::vector<std::string> ids;
    for (const auto& t : s["tasks"]) ids.push_back(t["taskmanager_id"]);
    std::string id = ids.at(std::uniform_int_distribution<size_t>(0, ids.size() - 1)(random));
    int index = 0;
    EXPECT_TRUE(absl::SimpleAtoi(id.substr(3), &index)) << id;  // "tm-<i>"
    return index;
  }

  // Produces `make(first, n)` batches of `batch` records up to `records`
  // on a writer thread while SIGKILLing a busy TaskManager `kills` times
  // (a replacement started each time; each kill waits for a checkpoint of
  // the attempt before it). False (with a test failure) when the
  // job did not come back. Kill k waits until (k+1)/(kills+2) of the
  // records are written, and the writer holds the last tenth back until the
  // kills are over: every kill lands while input flows and more is to come.
  // Prints how much had been written at each kill.
  template <typename MakeBatch>
  bool WriteWhileKilling(const std::string& job, const std::string& in, int records, int batch, int kills,
                         MakeBatch make, bool then_kill_jobmanager = false) {
    std::atomic<bool> writer_failed{false};
    std::atomic<bool> kills_done{false};
    std::atomic<int> written{0};
    std::thread writer([&] {
      for (int first = 0; first < records; first += batch) {
        if (first >= records - records / 10) {
          while (!kills_done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (!test::ProduceMessages(bootstrap_, in, make(first, batch)).ok()) writer_failed = true;
        written = first + batch;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    struct KillsDone {
      std::atomic<bool>* flag;
      ~KillsDone() { *flag = true; }
    } mark_done{&kills_done};
    std::string written_at_kills;
    std::mt19937 random(std::random_device{}());
    // Attempts are counted from the one running now.
    const nlohmann::json now = cluster_->WeirJson({"status", job});
    const int base = now.is_null() ? 1 : now["attempt"].get<int>();
    bool ok = true;
    for (int kill = 0; kill < kills && ok; ++kill) {
      if (!WaitForCompletedCheckpoint(job, base + kill)) {
        ADD_FAILURE() << "no checkpoint completed before kill " << kill + 1;
        ok = false;
        break;
      }
      // Spread over the input: kill k once (k+1)/(kills+2) of it is written.
      const int due = static_cast<int>(static_cast<int64_t>(records) * (kill + 1) / (kills + 2));
      if (!WaitFor([&] { return written.load() >= due || writer_failed.load(); }, absl::Seconds(120),
                   absl::Milliseconds(20))) {
        ADD_FAILURE() << "the writer did not reach " << due << " records before kill " << kill + 1;
        ok = false;
        break;
      }
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 500)(random)));
      absl::StrAppend(&written_at_kills, " ", written.load());
      cluster_->KillTaskManager(BusyTaskManager(job, random));
      cluster_->StartTaskManager();
      if (!WaitUntilRunning(job, base + kill + 1)) {
        ADD_FAILURE() << "the job did not come back after kill " << kill + 1;
        ok = false;
      }
    }
    if (ok && then_kill_jobmanager) {
      // The JobManager too: SIGKILL and restart, as systemd would. It takes
      // the job back from high-availability.storageDir and restores it from
      // its newest checkpoint once the TaskManagers re-registered.
      if (!WaitForCompletedCheckpoint(job, base + kills)) {
        ADD_FAILURE() << "no checkpoint completed before the JobManager kill";
        ok = false;
      } else {
        absl::StrAppend(&written_at_kills, " ", written.load(), " (JobManager)");
        cluster_->RestartJobManager();
        if (!WaitUntilRunning(job, base + kills + 1)) {
          ADD_FAILURE() << "the job did not come back after the JobManager restart";
          ok = false;
        }
      }
    }
    kills_done = true;
    writer.join();
    std::printf("records written (of %d) at each kill:%s\n", records, written_at_kills.c_str());
    EXPECT_FALSE(writer_failed.load());
    return ok && !writer_failed.load();
  }

  std::string bootstrap_;
  std::unique_ptr<LocalCluster> cluster_;
};

}  // namespace weir::testing
