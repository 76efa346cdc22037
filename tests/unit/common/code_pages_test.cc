// ReleaseCodePages: read-only pages leave the resident set and come back
// with their contents on the next access; written memory (globals, heap,
// stacks) is never touched, also while other threads run.
#include "common/process/code_pages.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/process/proc_status.h"
#include "gtest/gtest.h"

namespace weir::process {
namespace {

// A constant table in the binary's read-only data, and a global it writes.
constexpr int kTableSize = 64 * 1024;
constexpr std::array<uint32_t, kTableSize> MakeTable() {
  std::array<uint32_t, kTableSize> table{};
  uint32_t x = 2463534242u;
  for (auto& v : table) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v = x;
  }
  return table;
}
constexpr std::array<uint32_t, kTableSize> kTable = MakeTable();
uint32_t g_written[kTableSize];

uint64_t Sum(const uint32_t* values, int n) {
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) sum = sum * 31 + values[i];
  return sum;
}

TEST(CodePagesTest, ReleasedPagesLeaveTheResidentSetAndReadBackUnchanged) {
  for (int i = 0; i < kTableSize; ++i) g_written[i] = kTable[i] ^ 0x5a5a5a5au;
  std::vector<uint32_t> heap(g_written, g_written + kTableSize);
  const uint64_t table_sum = Sum(kTable.data(), kTableSize);
  const uint64_t written_sum = Sum(g_written, kTableSize);

  absl::StatusOr<ReleasedCodePages> released = ReleaseCodePages();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_GE(released->objects, 2);  // this binary and at least libc
  EXPECT_GT(released->bytes_advised, 0);
  ASSERT_GT(released->rss_file_before_kib, 0);
  EXPECT_LT(released->rss_file_after_kib, released->rss_file_before_kib);

  // The constants read back from the file, the written global and the heap
  // kept what was written into them.
  EXPECT_EQ(Sum(kTable.data(), kTableSize), table_sum);
  EXPECT_EQ(Sum(g_written, kTableSize), written_sum);
  EXPECT_EQ(Sum(heap.data(), kTableSize), written_sum);
  EXPECT_EQ(g_written[17], kTable[17] ^ 0x5a5a5a5au);
}

TEST(CodePagesTest, OtherThreadsRunOnWhilePagesAreReleased) {
  const uint64_t expected = Sum(kTable.data(), kTableSize);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      std::string text;  // heap written while pages go
      while (!stop.load()) {
        text = std::to_string(Sum(kTable.data(), kTableSize));
        if (text != std::to_string(expected)) wrong.fetch_add(1);
        rounds.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<ReleasedCodePages> released = ReleaseCodePages();
    ASSERT_TRUE(released.ok()) << released.status();
    while (rounds.load() < (i + 1) * 4) std::this_thread::yield();
  }
  stop = true;
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(rounds.load(), 80);
}

TEST(CodePagesTest, ReadsFieldsOfAProcessStatus) {
  EXPECT_GT(ProcStatusField(0, "VmRSS"), 0);
  EXPECT_EQ(ProcStatusField(0, "Threads"), ProcStatusField(getpid(), "Threads"));
  EXPECT_EQ(ProcStatusField(0, "NoSuchField"), -1);
}

}  // namespace
}  // namespace weir::process
