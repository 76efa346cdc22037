// A private temporary directory for a fuzz target's files, made on first
// use and removed when the process exits.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace weir::fuzz {

inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "weir-fuzz-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary directory");
    auto* made = new std::string(pattern);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return made;
  }();
  return *dir;
}

}  // namespace weir::fuzz
