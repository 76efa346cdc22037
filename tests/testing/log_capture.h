// Keeps what a logger writes, for tests of log lines:
//
//   auto capture = std::make_shared<weir::testing::LogCapture>();
//   logging::Get("kafka")->sinks().push_back(capture);
//   ... EXPECT_THAT(capture->text(), HasSubstr("idle"));
//
// Thread-safety: written by any thread (the logger's), read by any.
#pragma once

#include <mutex>
#include <string>

#include "spdlog/sinks/base_sink.h"

namespace weir::testing {

class LogCapture final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Every message so far, one per line (payload only).
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    text_.append(msg.payload.data(), msg.payload.size());
    text_ += '\n';
  }
  void flush_() override {}

 private:
  std::string text_;
};

}  // namespace weir::testing
