#include "heterps/ps/ps_client.h"

#include "absl/strings/str_cat.h"

namespace heterps::ps {
namespace {

absl::Status Cannot(const char* call) {
  return absl::UnimplementedError(absl::StrCat(call,
                                               ": this client does not reach the servers' "
                                               "deltas between regions"));
}

}  // namespace

absl::Status PsClient::TrackDeltas() { return Cannot("TrackDeltas"); }
absl::Status PsClient::ExportDeltas(int, float, std::vector<uint64_t>*, std::vector<float>*) {
  return Cannot("ExportDeltas");
}
absl::Status PsClient::AddDeltas(int, absl::Span<const uint64_t>, absl::Span<const float>) {
  return Cannot("AddDeltas");
}
absl::Status PsClient::ExportDenseDeltas(int, int, float, std::vector<float>*) {
  return Cannot("ExportDenseDeltas");
}
absl::Status PsClient::AddDenseDeltas(int, int, absl::Span<const float>) {
  return Cannot("AddDenseDeltas");
}
absl::Status PsClient::ExportWindow(int, float, std::vector<uint64_t>*, std::vector<float>*) {
  return Cannot("ExportWindow");
}
absl::Status PsClient::ApplyWindow(int, absl::Span<const uint64_t>, absl::Span<const float>,
                                   absl::Span<const float>) {
  return Cannot("ApplyWindow");
}
absl::Status PsClient::ExportDenseWindow(int, int, float, std::vector<float>*) {
  return Cannot("ExportDenseWindow");
}
absl::Status PsClient::ApplyDenseWindow(int, int, absl::Span<const float>,
                                        absl::Span<const float>) {
  return Cannot("ApplyDenseWindow");
}
absl::Status PsClient::ExportPending(PendingParts*) { return Cannot("ExportPending"); }

std::vector<Ticket> PsClient::PullDenseBlocks(int table, absl::Span<const DensePull> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePull& b : blocks) tickets.push_back(PullDense(table, b.block, b.values));
  return tickets;
}

std::vector<Ticket> PsClient::PushDenseBlocks(int table, absl::Span<const DensePush> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePush& b : blocks) tickets.push_back(PushDense(table, b.block, b.grads));
  return tickets;
}

}  // namespace heterps::ps
