// Table options to and from their wire form, and the byte layout of key and
// float arrays. Shared by the server and the client; not part of the public
// API.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/rpc/ps.pb.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps::rpc::internal {

SparseTableConfig ToProto(const SparseTableOptions& options);
DenseTableConfig ToProto(const DenseTableOptions& options);
// InvalidArgument for an unknown optimizer kind.
absl::StatusOr<SparseTableOptions> FromProto(const SparseTableConfig& config);
absl::StatusOr<DenseTableOptions> FromProto(const DenseTableConfig& config);

// Raw little-endian arrays in `bytes` fields (heterps runs on little-endian
// hosts).
template <typename T>
std::string ToBytes(absl::Span<const T> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}
// Copies `bytes` into `out` when the sizes match exactly; InvalidArgument
// naming `what` else.
template <typename T>
absl::Status FromBytes(absl::string_view bytes, absl::Span<T> out, absl::string_view what);
// The number of T in `bytes`; InvalidArgument naming `what` if it is not a
// whole number.
template <typename T>
absl::StatusOr<size_t> CountOf(absl::string_view bytes, absl::string_view what);

}  // namespace heterps::ps::rpc::internal
