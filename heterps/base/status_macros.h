// Status propagation helpers used across heterps.
//
//   HETERPS_RETURN_IF_ERROR(DoThing());
//   HETERPS_ASSIGN_OR_RETURN(auto spec, ParseSpec(path));
//
// Both return the failing absl::Status unchanged from the enclosing function, which must return
// absl::Status or absl::StatusOr<T>.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HETERPS_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::absl::Status heterps_status_ = (expr);          \
    if (!heterps_status_.ok()) return heterps_status_; \
  } while (0)

#define HETERPS_STATUS_CONCAT_INNER_(a, b) a##b
#define HETERPS_STATUS_CONCAT_(a, b) HETERPS_STATUS_CONCAT_INNER_(a, b)

#define HETERPS_ASSIGN_OR_RETURN(lhs, expr) \
  HETERPS_ASSIGN_OR_RETURN_IMPL_(HETERPS_STATUS_CONCAT_(heterps_statusor_, __LINE__), lhs, expr)

#define HETERPS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()
