// Bench job: a generator source of --records records per subtask (keys
// spread over 4096 values, --value-bytes each) keyed by their key into a
// keyed operator that only counts them per subtask, and a sink that drops
// everything. At parallelism p every source subtask sends to every keyed
// subtask: p x p channels, half of them between TaskManagers when the job
// runs on two. Measures the data exchange and nothing else.
#include <cstdint>
#include <memory>
#include <string>

#include "weir/job.h"

namespace {

class Generator final : public weir::SourceFunction<std::string> {
 public:
  Generator(int64_t records, int value_bytes) : records_(records), value_bytes_(value_bytes) {}

  weir::SourceStatus Poll(weir::Collector<std::string>& out) override {
    for (int i = 0; i < 256 && emitted_ < records_; ++i, ++emitted_) {
      std::string record = std::to_string((emitted_ * 2654435761u) % 4096);
      record.push_back('|');
      record.resize(static_cast<size_t>(value_bytes_), 'x');
      out.Collect(std::move(record));
    }
    return emitted_ < records_ ? weir::SourceStatus::kMoreAvailable : weir::SourceStatus::kEndOfInput;
  }

 private:
  const int64_t records_;
  const int value_bytes_;
  int64_t emitted_ = 0;
};

std::string KeyOf(const std::string& record) { return record.substr(0, record.find('|')); }

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const int64_t records = std::stoll(args.Get("--records", "200000"));
  const int value_bytes = std::stoi(args.Get("--value-bytes", "100"));
  env.SetJobName("network_shuffle");
  auto generated = env.AddSource<std::string>(
      "Generator", [records, value_bytes] { return std::make_unique<Generator>(records, value_bytes); });
  auto counted = generated.KeyBy([](const std::string& record) { return KeyOf(record); })
                     .Process<int64_t>([](const std::string&, weir::KeyedContext<std::string>&,
                                          weir::Collector<int64_t>&) {});
  counted.Name("Count").Sink("Drop", [](int64_t) {});
}

}  // namespace

WEIR_JOB(BuildJob)
