#include "taskmanager/state/in_memory_keyed_state.h"

#include "weir/serializer.h"

namespace weir::taskmanager {

const std::string& InMemoryKeyedState::Slot(std::string_view state_name) {
  slot_.clear();
  weir::internal::WriteVarint(state_name.size(), slot_);
  slot_.append(state_name);
  slot_.append(current_key_);
  return slot_;
}

std::optional<std::string> InMemoryKeyedState::Get(std::string_view state_name) {
  auto it = values_.find(Slot(state_name));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

void InMemoryKeyedState::Put(std::string_view state_name, std::string_view value) {
  values_[Slot(state_name)] = std::string(value);
}

void InMemoryKeyedState::Remove(std::string_view state_name) { values_.erase(Slot(state_name)); }

}  // namespace weir::taskmanager
