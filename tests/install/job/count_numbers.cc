// A job with no external system: a source of the numbers 1..N (--count N),
// a keyed running sum per number modulo 10, and a sink that drops the sums.
// Built by install_test.sh against an installed Weir.
#include <memory>
#include <string>

#include "weir/job.h"

namespace {

class Numbers : public weir::SourceFunction<int64_t> {
 public:
  explicit Numbers(int64_t count) : count_(count) {}
  weir::SourceStatus Poll(weir::Collector<int64_t>& out) override {
    if (next_ > count_) return weir::SourceStatus::kEndOfInput;
    out.Collect(next_++);
    return weir::SourceStatus::kMoreAvailable;
  }

 private:
  const int64_t count_;
  int64_t next_ = 1;
};

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const int64_t count = std::stoll(args.Get("--count", "1000"));
  env.AddSource<int64_t>("Numbers", [count] { return std::make_unique<Numbers>(count); })
      .KeyBy([](const int64_t& n) { return std::to_string(n % 10); })
      .Process<int64_t>([](const int64_t& n, weir::KeyedContext<std::string>& ctx, weir::Collector<int64_t>& out) {
        auto sum = ctx.State<int64_t>("sum");
        const int64_t next = sum.Get().value_or(0) + n;
        sum.Set(next);
        out.Collect(next);
      })
      .Sink("Discard", [](const int64_t&) {});
}

}  // namespace

WEIR_JOB(BuildJob)
