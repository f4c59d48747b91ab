// The embedding layer: one vector per (sample, slot), the rows of a sparse parameter-server table,
// pulled for a batch's keys and updated by pushing their gradients (the server applies its
// optimizer; repeated keys in a batch are summed into one update, ps_client.h).
//
//   EmbeddingBag bag(&client, /*table=*/0, /*slots=*/26, /*dim=*/16);
//   HETERPS_RETURN_IF_ERROR(bag.Forward(batch.keys, batch.size, &vectors));  // batch x 26*16
//   ...
//   HETERPS_RETURN_IF_ERROR(bag.Backward(d_vectors));
//
// One id per slot, as in Criteo data: a slot's pooled vector is its one row (sum and mean pooling
// agree). Thread safety: one thread at a time per object.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "heterps/dense/layers.h"
#include "heterps/ps/ps_client.h"

namespace heterps::dense {

class EmbeddingBag {
 public:
  EmbeddingBag(ps::PsClient* client, int table, int64_t slots, int64_t dim)
      : client_(client), table_(table), slots_(slots), dim_(dim) {}

  // keys: batch x slots (row-major). Writes vectors: batch x (slots dim). Errors are the
  // client's (an unknown table, a server down).
  absl::Status Forward(absl::Span<const uint64_t> keys, int64_t batch, Matrix<float>* vectors);
  // d_vectors: batch x (slots dim), for the last Forward. Pushes and waits.
  absl::Status Backward(const Matrix<float>& d_vectors);

 private:
  ps::PsClient* client_;
  int table_;
  int64_t slots_, dim_;
  std::vector<uint64_t> keys_;  // the last forward's
};

}  // namespace heterps::dense
