#include "heterps/ps/rpc/internal/convert.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::ps::rpc::internal {
namespace {

OptimizerConfig ToProto(const OptimizerOptions& o) {
  OptimizerConfig c;
  c.set_kind(std::string(OptimizerName(o.kind)));
  c.set_learning_rate(o.learning_rate);
  c.set_initial_accumulator(o.initial_accumulator);
  c.set_beta1(o.beta1);
  c.set_beta2(o.beta2);
  c.set_epsilon(o.epsilon);
  return c;
}

absl::StatusOr<OptimizerOptions> FromProto(const OptimizerConfig& c) {
  OptimizerOptions o;
  HETERPS_ASSIGN_OR_RETURN(o.kind, ParseOptimizerKind(c.kind()));
  o.learning_rate = c.learning_rate();
  o.initial_accumulator = c.initial_accumulator();
  o.beta1 = c.beta1();
  o.beta2 = c.beta2();
  o.epsilon = c.epsilon();
  return o;
}

}  // namespace

SparseTableConfig ToProto(const SparseTableOptions& o) {
  SparseTableConfig c;
  c.set_dim(o.dim);
  *c.mutable_optimizer() = ToProto(o.optimizer);
  c.set_seed(o.seed);
  c.set_init_range(o.init_range);
  c.set_lock_shards(o.lock_shards);
  c.set_memory_budget_bytes(o.memory_budget_bytes);
  return c;
}

DenseTableConfig ToProto(const DenseTableOptions& o) {
  DenseTableConfig c;
  for (int64_t size : o.block_sizes) c.add_block_sizes(size);
  for (float range : o.init_ranges) c.add_init_ranges(range);
  *c.mutable_optimizer() = ToProto(o.optimizer);
  c.set_seed(o.seed);
  c.set_init_range(o.init_range);
  return c;
}

absl::StatusOr<SparseTableOptions> FromProto(const SparseTableConfig& c) {
  SparseTableOptions o;
  o.dim = c.dim();
  HETERPS_ASSIGN_OR_RETURN(o.optimizer, FromProto(c.optimizer()));
  o.seed = c.seed();
  o.init_range = c.init_range();
  o.lock_shards = c.lock_shards();
  o.memory_budget_bytes = c.memory_budget_bytes();
  return o;
}

absl::StatusOr<DenseTableOptions> FromProto(const DenseTableConfig& c) {
  DenseTableOptions o;
  o.block_sizes.assign(c.block_sizes().begin(), c.block_sizes().end());
  o.init_ranges.assign(c.init_ranges().begin(), c.init_ranges().end());
  HETERPS_ASSIGN_OR_RETURN(o.optimizer, FromProto(c.optimizer()));
  o.seed = c.seed();
  o.init_range = c.init_range();
  return o;
}

template <typename T>
absl::StatusOr<size_t> CountOf(absl::string_view bytes, absl::string_view what) {
  if (bytes.size() % sizeof(T) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bytes.size(), " bytes is not a whole number of ", sizeof(T), "-byte elements"));
  }
  return bytes.size() / sizeof(T);
}

template <typename T>
absl::Status FromBytes(absl::string_view bytes, absl::Span<T> out, absl::string_view what) {
  if (bytes.size() != out.size() * sizeof(T)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected ", out.size() * sizeof(T), " bytes, got ", bytes.size()));
  }
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

template absl::StatusOr<size_t> CountOf<uint64_t>(absl::string_view, absl::string_view);
template absl::StatusOr<size_t> CountOf<float>(absl::string_view, absl::string_view);
template absl::Status FromBytes<uint64_t>(absl::string_view, absl::Span<uint64_t>,
                                          absl::string_view);
template absl::Status FromBytes<float>(absl::string_view, absl::Span<float>, absl::string_view);
template absl::Status FromBytes<double>(absl::string_view, absl::Span<double>, absl::string_view);
template absl::Status FromBytes<int64_t>(absl::string_view, absl::Span<int64_t>, absl::string_view);

}  // namespace heterps::ps::rpc::internal
