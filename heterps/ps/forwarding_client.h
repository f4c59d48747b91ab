// A PsClient that hands every call to another: the base of clients that wrap one (the GPU
// embedding tier in front of the parameter servers, docs/gpu.md; counting or fault-injecting
// clients in tests), which override only what they change. The stages reach embeddings and dense
// parameters through the PsClient interface alone, so a wrapper sees all their traffic. Every
// call is forwarded as it came, the several-block dense calls included: a wrapper that changes
// PullDense or PushDense changes PullDenseBlocks or PushDenseBlocks as well (or hands them to
// PsClient's, which make one PullDense or PushDense per block).
//
//   class CountingClient : public ForwardingPsClient {
//    public:
//     using ForwardingPsClient::ForwardingPsClient;
//     Ticket PullSparse(int t, absl::Span<const uint64_t> k, absl::Span<float> v) override {
//       pulled_ += k.size();
//       return ForwardingPsClient::PullSparse(t, k, v);
//     }
//   };
//
// Thread safety: as the wrapped client.
#pragma once

#include "heterps/ps/ps_client.h"

namespace heterps::ps {

class ForwardingPsClient : public PsClient {
 public:
  // `target` must outlive this client.
  explicit ForwardingPsClient(PsClient* target) : target_(target) {}

  int num_servers() const override { return target_->num_servers(); }
  absl::Status CreateSparseTable(int table, const SparseTableOptions& options) override {
    return target_->CreateSparseTable(table, options);
  }
  absl::Status CreateDenseTable(int table, const DenseTableOptions& options) override {
    return target_->CreateDenseTable(table, options);
  }
  Ticket PullSparse(int table, absl::Span<const uint64_t> keys, absl::Span<float> values) override {
    return target_->PullSparse(table, keys, values);
  }
  Ticket PushSparse(int table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override {
    return target_->PushSparse(table, keys, grads);
  }
  Ticket PullDense(int table, int block, absl::Span<float> values) override {
    return target_->PullDense(table, block, values);
  }
  Ticket PushDense(int table, int block, absl::Span<const float> grads) override {
    return target_->PushDense(table, block, grads);
  }
  std::vector<Ticket> PullDenseBlocks(int table, absl::Span<const DensePull> blocks) override {
    return target_->PullDenseBlocks(table, blocks);
  }
  std::vector<Ticket> PushDenseBlocks(int table, absl::Span<const DensePush> blocks) override {
    return target_->PushDenseBlocks(table, blocks);
  }
  Ticket AccumulateSparse(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                          int part) override {
    return target_->AccumulateSparse(table, keys, grads, part);
  }
  Ticket AccumulateDense(int table, int block, absl::Span<const double> grads, int part) override {
    return target_->AccumulateDense(table, block, grads, part);
  }
  absl::Status Commit() override { return target_->Commit(); }
  Ticket ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) override {
    return target_->ExportRows(table, keys, out);
  }
  Ticket ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) override {
    return target_->ImportRows(table, keys, rows);
  }
  Ticket ExportDense(int table, int block, int64_t offset, int64_t count,
                     DenseSlice* out) override {
    return target_->ExportDense(table, block, offset, count, out);
  }
  Ticket ImportDense(int table, int block, int64_t offset, const DenseSlice& slice) override {
    return target_->ImportDense(table, block, offset, slice);
  }
  absl::Status Prefetch(int table, absl::Span<const uint64_t> keys) override {
    return target_->Prefetch(table, keys);
  }
  absl::Status Anticipate(int table, absl::Span<const uint64_t> keys) override {
    return target_->Anticipate(table, keys);
  }
  absl::Status Flush() override { return target_->Flush(); }
  absl::Status TrackDeltas() override { return target_->TrackDeltas(); }
  absl::Status ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override {
    return target_->ExportDeltas(table, threshold, keys, deltas);
  }
  absl::Status AddDeltas(int table, absl::Span<const uint64_t> keys,
                         absl::Span<const float> deltas) override {
    return target_->AddDeltas(table, keys, deltas);
  }
  absl::Status ExportDenseDeltas(int table, int block, float threshold,
                                 std::vector<float>* delta) override {
    return target_->ExportDenseDeltas(table, block, threshold, delta);
  }
  absl::Status AddDenseDeltas(int table, int block, absl::Span<const float> delta) override {
    return target_->AddDenseDeltas(table, block, delta);
  }
  absl::Status ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override {
    return target_->ExportWindow(table, threshold, keys, deltas);
  }
  absl::Status ApplyWindow(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> merged, absl::Span<const float> own) override {
    return target_->ApplyWindow(table, keys, merged, own);
  }
  absl::Status ExportDenseWindow(int table, int block, float threshold,
                                 std::vector<float>* delta) override {
    return target_->ExportDenseWindow(table, block, threshold, delta);
  }
  absl::Status ApplyDenseWindow(int table, int block, absl::Span<const float> merged,
                                absl::Span<const float> own) override {
    return target_->ApplyDenseWindow(table, block, merged, own);
  }
  absl::Status ExportPending(PendingParts* out) override { return target_->ExportPending(out); }
  absl::Status Wait(Ticket ticket) override { return target_->Wait(ticket); }

 protected:
  PsClient* target() const { return target_; }

 private:
  PsClient* const target_;
};

}  // namespace heterps::ps
