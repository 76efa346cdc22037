// Fuzz target: the configuration file (YAML) and -Dkey=value overrides, as
// a daemon reads them at start. Input: lines starting with "-D" are
// overrides; everything else is the file. Any input must give a
// Configuration or an error, never a crash or an exception.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/config/configuration.h"
#include "tests/fuzz/scratch_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = weir::fuzz::ScratchDir() + "/weir.yaml";
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string file;
  std::vector<std::string> overrides;
  for (absl::string_view line : absl::StrSplit(input, '\n')) {
    if (line.size() >= 2 && line.substr(0, 2) == "-D") {
      overrides.emplace_back(line.substr(2));
    } else {
      file.append(line.data(), line.size());
      file.push_back('\n');
    }
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << file;
  }
  auto loaded = weir::config::Configuration::Load(path, overrides);
  if (loaded.ok()) {
    // Reading every key back must work for whatever was accepted.
    (void)loaded->StartupLines(~0u);
  }
  return 0;
}
