#include "heterps/dense/embedding.h"

#include "absl/strings/str_cat.h"

namespace heterps::dense {

absl::Status EmbeddingBag::Forward(absl::Span<const uint64_t> keys, int64_t batch,
                                   Matrix<float>* vectors) {
  if (static_cast<int64_t>(keys.size()) != batch * slots_) {
    return absl::InvalidArgumentError(absl::StrCat("embedding: ", keys.size(), " keys for ", batch,
                                                   " samples of ", slots_, " slots"));
  }
  keys_.assign(keys.begin(), keys.end());
  vectors->resize(batch, slots_ * dim_);
  return client_->Wait(client_->PullSparse(
      table_, keys_, absl::MakeSpan(vectors->data(), static_cast<size_t>(vectors->size()))));
}

absl::Status EmbeddingBag::Backward(const Matrix<float>& d_vectors) {
  if (d_vectors.size() != static_cast<int64_t>(keys_.size()) * dim_) {
    return absl::InvalidArgumentError(absl::StrCat("embedding: ", d_vectors.size(),
                                                   " gradient floats for ", keys_.size(),
                                                   " keys of dim ", dim_));
  }
  return client_->Wait(client_->PushSparse(
      table_, keys_, absl::MakeConstSpan(d_vectors.data(), static_cast<size_t>(d_vectors.size()))));
}

}  // namespace heterps::dense
