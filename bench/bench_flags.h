// BenchFlags: the "--name value" flags of the benchmarks.
//
//   BenchFlags flags("bench");
//   flags.Int("--records", &records);          // a positive integer
//   flags.Int("--snapshot-every", &every, 0);  // at least 0
//   flags.String("--state-backend", &backend);
//   if (!flags.Parse(argc, argv)) return 2;
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/numbers.h"

namespace weir::bench {

class BenchFlags {
 public:
  explicit BenchFlags(std::string program) : program_(std::move(program)) {}

  template <typename Integer>
  void Int(const std::string& name, Integer* target, int64_t min = 1) {
    setters_[name] = [target, min](const std::string& text) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(text, &v) || v < min) return false;
      *target = static_cast<Integer>(v);
      return true;
    };
  }
  void String(const std::string& name, std::string* target) {
    setters_[name] = [target](const std::string& text) {
      *target = text;
      return true;
    };
  }
  // A comma-separated list ("-Da=1,-Db=2"); empty items are dropped.
  void List(const std::string& name, std::vector<std::string>* target) {
    setters_[name] = [target](const std::string& text) {
      target->clear();
      for (size_t pos = 0; pos <= text.size();) {
        size_t end = text.find(',', pos);
        if (end == std::string::npos) end = text.size();
        if (end > pos) target->push_back(text.substr(pos, end - pos));
        pos = end + 1;
      }
      return true;
    };
  }

  // False, after saying what was wrong on stderr, for an unknown flag or a
  // bad value.
  bool Parse(int argc, char** argv) const {
    if (argc % 2 == 0) {  // flags come in pairs: the last one has no value
      std::fprintf(stderr, "%s: flag %s has no value (flags are --name value)\n", program_.c_str(), argv[argc - 1]);
      return false;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string name = argv[i];
      auto it = setters_.find(name);
      if (it == setters_.end()) {
        std::fprintf(stderr, "%s: unknown flag %s\n", program_.c_str(), name.c_str());
        return false;
      }
      if (!it->second(argv[i + 1])) {
        std::fprintf(stderr, "%s: bad value for %s\n", program_.c_str(), name.c_str());
        return false;
      }
    }
    return true;
  }

 private:
  const std::string program_;
  std::map<std::string, std::function<bool(const std::string&)>> setters_;
};

}  // namespace weir::bench
