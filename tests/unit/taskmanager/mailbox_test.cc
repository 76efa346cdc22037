#include "taskmanager/mailbox/mailbox.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::taskmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MailboxTest, RunsMailsInOrderOnTheCallingThreadIncludingMailsTheyPut) {
  Mailbox mailbox(std::make_shared<Wakeup>());
  std::vector<std::string> ran;
  const std::thread::id task_thread = std::this_thread::get_id();
  std::thread other([&] {
    mailbox.Put("first", [&] {
      EXPECT_EQ(std::this_thread::get_id(), task_thread);
      ran.push_back("first");
      mailbox.Put("nested", [&] {
        ran.push_back("nested");
        return absl::OkStatus();
      });
      return absl::OkStatus();
    });
    mailbox.Put("second", [&] {
      ran.push_back("second");
      return absl::OkStatus();
    });
  });
  other.join();
  EXPECT_TRUE(mailbox.HasMail());
  EXPECT_TRUE(mailbox.RunPending().ok());
  EXPECT_THAT(ran, ElementsAre("first", "second", "nested"));
  EXPECT_FALSE(mailbox.HasMail());
}

TEST(MailboxTest, AFailingMailStopsTheRunAndNamesItself) {
  Mailbox mailbox(std::make_shared<Wakeup>());
  int later = 0;
  mailbox.Put("trigger checkpoint 7", [] { return absl::InternalError("disk full"); });
  mailbox.Put("later", [&] {
    ++later;
    return absl::OkStatus();
  });
  absl::Status status = mailbox.RunPending();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("trigger checkpoint 7: disk full"));
  EXPECT_EQ(later, 0);
  EXPECT_TRUE(mailbox.RunPending().ok());
  EXPECT_EQ(later, 1);
}

TEST(MailboxTest, PutWakesAWaitingTaskThread) {
  auto wakeup = std::make_shared<Wakeup>();
  Mailbox mailbox(wakeup);
  std::atomic<bool> ran{false};
  std::thread task([&] {
    // The task loop: look for work, else wait for the wake-up; no fixed sleep.
    while (!ran) {
      const uint64_t seen = wakeup->generation();
      ASSERT_TRUE(mailbox.RunPending().ok());
      if (ran) break;
      wakeup->WaitForChange(seen, absl::InfiniteFuture());
    }
  });
  mailbox.Put("wake", [&] {
    ran = true;
    return absl::OkStatus();
  });
  task.join();
  EXPECT_TRUE(ran);
}

// Several threads put while the task thread runs mails: each runs exactly
// once, on the task thread. (Under ThreadSanitizer, scripts/test-tsan.sh,
// this is also the test that catches a Put without the mailbox's lock.)
TEST(MailboxTest, ConcurrentPutsFromManyThreadsEachRunOnce) {
  auto wakeup = std::make_shared<Wakeup>();
  Mailbox mailbox(wakeup);
  constexpr int kThreads = 4, kMailsEach = 2000;
  int ran = 0;  // only the task thread touches it
  std::atomic<int> producers_done{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < kMailsEach; ++i) {
        EXPECT_TRUE(mailbox.Put("count", [&] {
          ++ran;
          return absl::OkStatus();
        }));
      }
      producers_done.fetch_add(1);  // always, or the task loop below would wait forever
    });
  }
  while (producers_done.load() < kThreads || mailbox.HasMail()) {
    const uint64_t seen = wakeup->generation();
    ASSERT_TRUE(mailbox.RunPending().ok());
    if (producers_done.load() < kThreads && !mailbox.HasMail()) {
      wakeup->WaitForChange(seen, absl::Now() + absl::Milliseconds(10));
    }
  }
  for (std::thread& p : producers) p.join();
  ASSERT_TRUE(mailbox.RunPending().ok());
  EXPECT_EQ(ran, kThreads * kMailsEach);
}

TEST(MailboxTest, ClosedMailboxRefusesAndDropsMails) {
  Mailbox mailbox(std::make_shared<Wakeup>());
  int runs = 0;
  auto count = [&] {
    ++runs;
    return absl::OkStatus();
  };
  EXPECT_TRUE(mailbox.Put("pending", count));
  mailbox.Close();
  EXPECT_FALSE(mailbox.HasMail());
  EXPECT_FALSE(mailbox.Put("late", count));
  EXPECT_TRUE(mailbox.RunPending().ok());
  EXPECT_EQ(runs, 0);
}

}  // namespace
}  // namespace weir::taskmanager
