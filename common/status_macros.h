// Helpers for propagating absl::Status values, in the style of
// RETURN_NOT_OK / ASSIGN_OR_RAISE. Every Weir component boundary returns
// absl::Status or absl::StatusOr<T>; these keep the call sites short.
#pragma once

#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define WEIR_STATUS_CONCAT_INNER_(a, b) a##b
#define WEIR_STATUS_CONCAT_(a, b) WEIR_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::absl::Status weir_status_ = (expr);           \
    if (!weir_status_.ok()) return weir_status_;    \
  } while (false)

// `lhs = value of expr`, or returns its status if `expr` failed.
#define ASSIGN_OR_RETURN(lhs, expr) \
  WEIR_ASSIGN_OR_RETURN_IMPL_(WEIR_STATUS_CONCAT_(weir_statusor_, __LINE__), lhs, expr)

#define WEIR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace weir {

// Returns `status` with `context` prepended to its message ("opening x: ...").
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace weir
