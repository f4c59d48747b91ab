#include "heterps/worker/dense_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/block_tree.h"

namespace heterps::worker {
namespace {

// Floats per piece of a range, so that a piece's slice (values and Adam's two state arrays)
// stays far below the largest message the servers take.
constexpr int64_t kPieceFloats = int64_t{1} << 20;

absl::Status WaitAll(ps::PsClient* client, const std::vector<ps::Ticket>& tickets) {
  absl::Status status;
  for (ps::Ticket t : tickets) status.Update(client->Wait(t));
  return status;
}

}  // namespace

DenseGroup::DenseGroup(int table, std::vector<std::pair<int, int64_t>> blocks,
                       const ps::OptimizerOptions& optimizer, int replica, int replicas,
                       DensePeers* peers, ps::PsClient* client, absl::Duration timeout)
    : table_(table),
      blocks_(std::move(blocks)),
      optimizer_(optimizer),
      replica_(replica),
      replicas_(replicas),
      peers_(peers),
      client_(client),
      timeout_(timeout) {
  for (const auto& [id, size] : blocks_) total_ += size;
  for (int r = 0; r < replicas_; ++r) pieces_.push_back(Pieces(r));
}

std::vector<DenseGroup::Piece> DenseGroup::Pieces(int r) const {
  std::vector<Piece> pieces;
  const int64_t begin = RangeBegin(r), end = RangeEnd(r);
  int64_t block_start = 0;
  for (int b = 0; b < static_cast<int>(blocks_.size()); ++b) {
    const int64_t size = blocks_[b].second;
    const int64_t lo = std::max(begin, block_start), hi = std::min(end, block_start + size);
    for (int64_t at = lo; at < hi; at += kPieceFloats) {
      pieces.push_back({b, at - block_start, std::min(kPieceFloats, hi - at), at - begin});
    }
    block_start += size;
  }
  return pieces;
}

absl::Status DenseGroup::Load(std::vector<AlignedFloats>& values) {
  values.resize(blocks_.size());
  std::vector<ps::DensePull> pulls;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    values[b].resize(blocks_[b].second);
    pulls.push_back({blocks_[b].first, absl::MakeSpan(values[b])});
  }
  std::vector<ps::Ticket> tickets = client_->PullDenseBlocks(table_, pulls);
  std::vector<ps::DenseSlice> slices(mine().size());
  for (size_t i = 0; i < mine().size(); ++i) {
    const Piece& p = mine()[i];
    tickets.push_back(
        client_->ExportDense(table_, blocks_[p.block].first, p.offset, p.count, &slices[i]));
  }
  HETERPS_RETURN_IF_ERROR(WaitAll(client_, tickets));
  state_.clear();
  steps_.clear();
  for (ps::DenseSlice& slice : slices) {
    state_.push_back(std::move(slice.state));
    steps_.push_back(slice.steps);
  }
  loaded_ = true;
  return absl::OkStatus();
}

absl::Status DenseGroup::Step(int64_t step, const StepGrads& sums,
                              std::vector<AlignedFloats>& values, const Cancelled& cancelled) {
  if (!loaded_) return absl::FailedPreconditionError("dense group: Step before Load");
  for (const auto& [part, node] : sums.nodes) {
    if (node.dense.size() != blocks_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dense group: node ", part, " has ", node.dense.size(), " blocks for ", blocks_.size()));
    }
  }
  if (values.size() != blocks_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense group: ", values.size(), " value blocks for ", blocks_.size()));
  }
  // Replica c's range of node `node`'s sums, appended to `out`.
  auto range_of = [&](int c, const StepGrads::Node& node, std::vector<double>* out) {
    const size_t at = out->size();
    out->resize(at + RangeSize(c));
    for (const Piece& p : pieces_[c]) {
      std::copy_n(node.dense[p.block].begin() + p.offset, p.count, out->begin() + at + p.at);
    }
  };
  // Every other replica gets this one's nodes over its range.
  for (int c = 0; c < replicas_; ++c) {
    if (c == replica_) continue;
    DenseMessage m;
    m.step = step;
    m.from = replica_;
    m.kind = DenseMessage::Kind::kGradients;
    for (const auto& [part, node] : sums.nodes) {
      m.parts.push_back(part);
      range_of(c, node, &m.grads);
    }
    HETERPS_RETURN_IF_ERROR(peers_->Send(c, m));
  }
  std::vector<DenseMessage> parts;
  HETERPS_RETURN_IF_ERROR(Await(step, DenseMessage::Kind::kGradients, cancelled, &parts));
  const int64_t mine_size = RangeSize(replica_);
  for (const DenseMessage& m : parts) {
    if (static_cast<int64_t>(m.grads.size()) != mine_size * static_cast<int64_t>(m.parts.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dense group: replica ", m.from, " sent ", m.grads.size(), " gradient sums for ",
          m.parts.size(), " nodes of replica ", replica_, "'s ", mine_size));
    }
  }
  // Every replica's nodes merged up the block tree, rounded once, the optimizer applied: a
  // server's commit.
  std::vector<std::pair<int, std::vector<double>>> nodes;
  for (const auto& [part, node] : sums.nodes) {
    nodes.emplace_back(part, std::vector<double>());
    range_of(replica_, node, &nodes.back().second);
  }
  for (const DenseMessage& m : parts) {
    for (size_t i = 0; i < m.parts.size(); ++i) {
      nodes.emplace_back(m.parts[i], std::vector<double>(m.grads.begin() + i * mine_size,
                                                         m.grads.begin() + (i + 1) * mine_size));
    }
  }
  if (nodes.empty()) {
    return absl::InternalError(absl::StrCat("dense group: step ", step, ": no replica sent sums"));
  }
  ps::MergeNodes(&nodes, /*to_root=*/true, ps::AddDoubles);
  const std::vector<double>& sum = nodes.front().second;
  std::vector<float> rounded;
  for (size_t i = 0; i < mine().size(); ++i) {
    const Piece& p = mine()[i];
    rounded.assign(sum.begin() + p.at, sum.begin() + p.at + p.count);
    ++steps_[i];
    ps::ApplyUpdate(optimizer_, values[p.block].data() + p.offset, state_[i].data(), rounded.data(),
                    static_cast<int>(p.count), steps_[i]);
  }
  // Every other replica gets this one's range, updated; this one gets theirs.
  if (replicas_ > 1) {
    DenseMessage m;
    m.step = step;
    m.from = replica_;
    m.kind = DenseMessage::Kind::kValues;
    m.values.resize(RangeSize(replica_));
    for (const Piece& p : mine()) {
      std::copy_n(values[p.block].begin() + p.offset, p.count, m.values.begin() + p.at);
    }
    for (int c = 0; c < replicas_; ++c) {
      if (c != replica_) HETERPS_RETURN_IF_ERROR(peers_->Send(c, m));
    }
  }
  HETERPS_RETURN_IF_ERROR(Await(step, DenseMessage::Kind::kValues, cancelled, &parts));
  for (const DenseMessage& m : parts) {
    if (static_cast<int64_t>(m.values.size()) != RangeSize(m.from)) {
      return absl::InvalidArgumentError(absl::StrCat("dense group: replica ", m.from, " sent ",
                                                     m.values.size(), " values for its ",
                                                     RangeSize(m.from)));
    }
    for (const Piece& p : pieces_[m.from]) {
      std::copy_n(m.values.begin() + p.at, p.count, values[p.block].begin() + p.offset);
    }
  }
  absl::MutexLock lock(&mu_);
  done_ = step;
  inbox_.erase(inbox_.begin(), inbox_.upper_bound({step, 2}));
  aborted_.erase(aborted_.begin(), aborted_.upper_bound(step));
  return absl::OkStatus();
}

absl::Status DenseGroup::WriteBack(const std::vector<AlignedFloats>& values) {
  if (!loaded_) return absl::OkStatus();  // nothing changed since the servers' values
  std::vector<ps::DenseSlice> slices(mine().size());
  std::vector<ps::Ticket> tickets;
  for (size_t i = 0; i < mine().size(); ++i) {
    const Piece& p = mine()[i];
    slices[i].value.assign(values[p.block].begin() + p.offset,
                           values[p.block].begin() + p.offset + p.count);
    slices[i].state = state_[i];
    slices[i].steps = steps_[i];
    tickets.push_back(client_->ImportDense(table_, blocks_[p.block].first, p.offset, slices[i]));
  }
  return WaitAll(client_, tickets);
}

absl::Status DenseGroup::LoadHeld(Stage& stage) {
  if (replicas_ != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dense group: one replica holds the parameters on its device, not ", replicas_));
  }
  if (held_) return absl::FailedPreconditionError("dense group: held already");
  std::vector<AlignedFloats> values;
  HETERPS_RETURN_IF_ERROR(Load(values));
  std::vector<std::vector<float>> state(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b) {
    state[b].resize(ps::StateFloats(optimizer_.kind) * blocks_[b].second);
  }
  ForEachStateRun(state,
                  [](float* piece, float* block, int64_t n) { std::copy_n(piece, n, block); });
  const absl::Status held = stage.HoldDense(optimizer_, values, state);
  loaded_ = held_ = held.ok();
  return held;
}

absl::Status DenseGroup::StepHeld(Stage& stage) {
  if (!held_) return absl::FailedPreconditionError("dense group: StepHeld before LoadHeld");
  std::vector<int64_t> steps(blocks_.size(), 0);
  for (size_t i = 0; i < mine().size(); ++i) steps[mine()[i].block] = steps_[i] + 1;
  HETERPS_RETURN_IF_ERROR(stage.ApplyHeldDense(steps));
  for (int64_t& s : steps_) ++s;
  return absl::OkStatus();
}

absl::Status DenseGroup::WriteBackHeld(Stage& stage) {
  if (!held_) return absl::FailedPreconditionError("dense group: WriteBackHeld before LoadHeld");
  std::vector<AlignedFloats> values;
  std::vector<std::vector<float>> state;
  HETERPS_RETURN_IF_ERROR(stage.ReadHeldDense(&values, &state));
  ForEachStateRun(state,
                  [](float* piece, float* block, int64_t n) { std::copy_n(block, n, piece); });
  return WriteBack(values);
}

void DenseGroup::Abort(int64_t step, const absl::Status& why) {
  DenseMessage m;
  m.step = step;
  m.from = replica_;
  m.kind = DenseMessage::Kind::kAbort;
  m.error = std::string(why.message());
  for (int c = 0; c < replicas_; ++c) {
    if (c != replica_) peers_->Send(c, m).IgnoreError();  // a peer gone is a failure of its own
  }
}

void DenseGroup::Deliver(DenseMessage message) {
  absl::MutexLock lock(&mu_);
  if (message.step <= done_) return;
  if (message.kind == DenseMessage::Kind::kAbort) {
    aborted_.emplace(message.step,
                     absl::StrCat("replica ", message.from, " gave it up: ", message.error));
    return;
  }
  std::vector<DenseMessage>& box = inbox_[{message.step, static_cast<int>(message.kind)}];
  for (DenseMessage& m : box) {
    if (m.from == message.from) {  // sent again: the newer one counts
      m = std::move(message);
      return;
    }
  }
  box.push_back(std::move(message));
}

absl::Status DenseGroup::Await(int64_t step, DenseMessage::Kind kind, const Cancelled& cancelled,
                               std::vector<DenseMessage>* out) {
  out->clear();
  const size_t wanted = static_cast<size_t>(replicas_ - 1);
  if (wanted == 0) return absl::OkStatus();
  const std::pair<int64_t, int> key{step, static_cast<int>(kind)};
  const absl::Time deadline = absl::Now() + timeout_;
  absl::MutexLock lock(&mu_);
  auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (aborted_.count(step) > 0) return true;
    auto it = inbox_.find(key);
    return it != inbox_.end() && it->second.size() >= wanted;
  };
  while (!arrived()) {
    if (cancelled && cancelled()) {
      return absl::CancelledError("dense group: the replica is stopping, or the caller left");
    }
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int q = 0; q < replicas_; ++q) {
        if (q == replica_) continue;
        bool here = false;
        if (auto it = inbox_.find(key); it != inbox_.end()) {
          for (const DenseMessage& m : it->second) here |= m.from == q;
        }
        if (!here) missing.push_back(q);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("dense group: step ", step, ": no ",
                       kind == DenseMessage::Kind::kGradients ? "gradient sums" : "updated values",
                       " from replica(s) ", absl::StrJoin(missing, ", "), " within ",
                       absl::FormatDuration(timeout_)));
    }
    mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Milliseconds(100));
  }
  if (auto it = aborted_.find(step); it != aborted_.end()) {
    return absl::AbortedError(absl::StrCat("dense group: step ", step, ": ", it->second));
  }
  auto node = inbox_.extract(key);
  *out = std::move(node.mapped());
  for (const DenseMessage& m : *out) {
    if (m.from < 0 || m.from >= replicas_ || m.from == replica_) {
      return absl::InvalidArgumentError(absl::StrCat("dense group: step ", step,
                                                     ": a message from replica ", m.from,
                                                     ", not another of the stage's ", replicas_));
    }
  }
  std::sort(out->begin(), out->end(),
            [](const DenseMessage& a, const DenseMessage& b) { return a.from < b.from; });
  return absl::OkStatus();
}

}  // namespace heterps::worker
