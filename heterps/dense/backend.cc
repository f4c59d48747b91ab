#include "heterps/dense/backend.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterps::dense {

bool IsDenseLayer(config::LayerKind kind) {
  return kind == config::LayerKind::kFc || kind == config::LayerKind::kInteraction ||
         kind == config::LayerKind::kLogloss;
}

absl::StatusOr<float*> DenseChain::DeviceVectors(int, int64_t, int64_t) {
  return absl::UnimplementedError(consumes_vectors()
                                      ? "chain: its vectors come from host memory on this backend"
                                      : "chain: it does not consume vectors");
}

absl::StatusOr<const Matrix<float>*> DenseChain::ForwardDeviceVectors(int ctx,
                                                                      const Matrix<float>& dense,
                                                                      bool train) {
  return DeviceVectors(ctx, dense.rows(), 0).status();
}

absl::Status DenseChain::Hold(const HeldOptimizer&, absl::Span<const float* const>,
                              absl::Span<const float* const>) {
  return absl::UnimplementedError("chain: its parameters stay in host memory on this backend");
}

absl::Status DenseChain::ApplyHeld(absl::Span<const int64_t>) { return Hold({}, {}, {}); }

absl::Status DenseChain::ReadHeld(absl::Span<float* const>, absl::Span<float* const>) {
  return Hold({}, {}, {});
}

void BackendRegistry::Register(std::string kind, Factory factory) {
  factories_[std::move(kind)] = std::move(factory);
}

std::vector<std::string> BackendRegistry::kinds() const {
  std::vector<std::string> out;
  for (const auto& [kind, factory] : factories_) out.push_back(kind);
  return out;
}

absl::StatusOr<std::unique_ptr<DenseBackend>> BackendRegistry::Create(
    absl::string_view device, const BackendOptions& options) const {
  const size_t colon = device.find(':');
  const std::string kind(device.substr(0, colon));
  int index = 0;
  if (colon != absl::string_view::npos &&
      (!absl::SimpleAtoi(device.substr(colon + 1), &index) || index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", device, "': expected <kind>:<index>, e.g. cuda:0"));
  }
  auto it = factories_.find(kind);
  if (it == factories_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device '", device,
        "': no backend for it in this build (it has: ", absl::StrJoin(kinds(), ", "), ")"));
  }
  return it->second(index, options);
}

}  // namespace heterps::dense
