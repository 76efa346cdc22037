// SHA-256 of byte streams and files (OpenSSL), as lowercase hex.
//
// Thread-safety: Sha256 is not thread-safe; the free functions are.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::crypto {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  void Update(absl::string_view data);
  // The digest as 64 lowercase hex characters. It finishes the hash: later
  // calls return the same digest, and Update must not follow.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The SHA-256 of `bytes`, held whole in memory.
std::string Sha256Hex(absl::string_view bytes);

absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

// True for 64 lowercase hex characters: the only form an artifact id takes.
bool IsSha256Hex(absl::string_view text);

}  // namespace weir::crypto
