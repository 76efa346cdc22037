#include "taskmanager/state/pending_entries.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "weir/serializer.h"

namespace weir::taskmanager {
namespace {

constexpr char kPut = 'p';
constexpr char kRemove = 'r';

void AppendField(std::string_view bytes, std::string& out) {
  weir::internal::WriteVarint(bytes.size(), out);
  out.append(bytes);
}

}  // namespace

void PendingEntries::Add(std::string_view key, std::string_view state_name, std::string_view user_key,
                         const std::string* value) {
  AppendField(key, bytes_);
  size_t name = 0;
  while (name < names_.size() && names_[name] != state_name) ++name;
  weir::internal::WriteVarint(name, bytes_);
  if (name == names_.size()) {
    names_.emplace_back(state_name);
    AppendField(state_name, bytes_);
  }
  AppendField(user_key, bytes_);
  if (value == nullptr) {
    bytes_.push_back(kRemove);
  } else {
    bytes_.push_back(kPut);
    AppendField(*value, bytes_);
  }
}

std::string PendingEntries::Take() {
  names_.clear();
  return std::exchange(bytes_, std::string());
}

absl::Status PendingEntries::ForEach(
    std::string_view bytes,
    absl::FunctionRef<void(std::string_view, std::string_view, std::string_view, const std::string_view*)> fn) {
  size_t pos = 0;
  std::vector<std::string_view> names;
  for (size_t entry = 0; pos < bytes.size(); ++entry) {
    std::string_view key, name, user_key, value;
    bool removed = false;
    try {  // parsing only: what fn throws is its caller's
      key = weir::internal::ReadField(bytes, &pos);
      const uint64_t ref = weir::internal::ReadVarint(bytes, &pos);
      if (ref == names.size()) {
        names.push_back(weir::internal::ReadField(bytes, &pos));
      } else if (ref > names.size()) {
        throw std::runtime_error(absl::StrCat("state name ", ref, " referred to before it was given"));
      }
      name = names[static_cast<size_t>(ref)];
      user_key = weir::internal::ReadField(bytes, &pos);
      if (pos >= bytes.size()) throw std::runtime_error("truncated before its tag");
      const char tag = bytes[pos++];
      if (tag == kPut) {
        value = weir::internal::ReadField(bytes, &pos);
      } else if (tag == kRemove) {
        removed = true;
      } else {
        throw std::runtime_error(absl::StrCat("unknown tag ", static_cast<int>(static_cast<unsigned char>(tag))));
      }
    } catch (const std::runtime_error& e) {
      return absl::DataLossError(absl::StrCat("the snapshot's pending keyed-state entries are malformed at entry ",
                                              entry, ": ", e.what()));
    }
    fn(key, name, user_key, removed ? nullptr : &value);
  }
  return absl::OkStatus();
}

}  // namespace weir::taskmanager
