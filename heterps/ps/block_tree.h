// The order in which a synchronous step's gradients (and its loss) are summed, fixed by the
// samples alone (docs/runtime.md, "Synchronous mode"): whatever the micro-batch size, the number
// of replicas or stages, the transport or who adds what, a step's sums come out the same to the
// bit.
//
// A step's samples are cut into *blocks* of a fixed number of consecutive samples (the job's block
// size; the step's last block may be shorter). Each block's gradient is computed on its own (its
// float sums over its samples in order). The blocks are then combined in one fixed binary tree:
// node (level, index) covers blocks [index * 2^level, (index + 1) * 2^level); its value is the
// sum of its two children's (left + right), or the one child's where the other holds nothing (a
// key no sample of that half touched, blocks past the step's end). Float addition is commutative,
// so the tree's shape alone fixes every rounding: the leaves can be computed anywhere and the
// nodes merged by anyone, in any order.
//
//   std::vector<std::pair<int, std::vector<double>>> nodes;   // (part, value)
//   for (int part : CoverNodes(4, 7)) ...                     // a holder of blocks 4..6
//   MergeNodes(&nodes, /*to_root=*/true, add);                // the step's sum: nodes[0]
//
// A node travels as a contribution's `part` (ps_client.h, pending.h): level << kNodeIndexBits |
// index, so that block b alone is part b.
//
// Thread safety: functions of their arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace heterps::ps {

inline constexpr int kNodeIndexBits = 24;
// Blocks a step may have.
inline constexpr int64_t kMaxStepBlocks = int64_t{1} << kNodeIndexBits;

inline int NodePart(int level, int64_t index) {
  return (level << kNodeIndexBits) | static_cast<int>(index);
}
inline int NodeLevel(int part) { return part >> kNodeIndexBits; }
inline int64_t NodeIndex(int part) { return part & (kMaxStepBlocks - 1); }
inline int NodeParent(int part) { return NodePart(NodeLevel(part) + 1, NodeIndex(part) >> 1); }
// The blocks node `part` covers: [first, first + 2^level).
inline int64_t NodeFirstBlock(int part) { return NodeIndex(part) << NodeLevel(part); }

// The fewest nodes that cover blocks [begin, end) exactly, in block order: the largest aligned
// node at each point.
inline std::vector<int> CoverNodes(int64_t begin, int64_t end) {
  std::vector<int> out;
  while (begin < end) {
    int level = 0;
    while (level < kNodeIndexBits && (begin & ((int64_t{1} << (level + 1)) - 1)) == 0 &&
           begin + (int64_t{2} << level) <= end) {
      ++level;
    }
    out.push_back(NodePart(level, begin >> level));
    begin += int64_t{1} << level;
  }
  return out;
}

// The addition of dense nodes (a node's sums in double): `into` += `more`, element by element.
inline void AddDoubles(std::vector<double>& into, const std::vector<double>& more) {
  for (size_t i = 0; i < into.size(); ++i) into[i] += more[i];
}

// Merges `nodes` ((part, value) of disjoint block ranges, any order) up the tree: two siblings
// that are both present become their parent, `add(left, right)` leaving left + right in `left`.
// With `to_root`, a node whose sibling is absent also passes up unchanged, until one node is left:
// the sum of them all (a caller that holds every contribution of a step). Without, the nodes that
// could not be merged are left, in part order (a holder of some of a step's blocks, whose
// contribution another adds to). A parent that is already present (contributions that overlap,
// which the runtime never sends) gets the merged value added in.
template <typename Value, typename Add>
void MergeNodes(std::vector<std::pair<int, Value>>* nodes, bool to_root, Add add) {
  auto by_part = [](const std::pair<int, Value>& a, const std::pair<int, Value>& b) {
    return a.first < b.first;
  };
  std::vector<std::pair<int, Value>> pending = std::move(*nodes);
  nodes->clear();
  std::sort(pending.begin(), pending.end(), by_part);
  // Parts order by level, then index: the front is always the lowest node left, so that a node
  // is looked at only after every node below it has moved up.
  auto insert = [&](int part, Value value) {
    auto at =
        std::lower_bound(pending.begin(), pending.end(), std::make_pair(part, Value()), by_part);
    if (at != pending.end() && at->first == part) {
      add(at->second, value);
    } else {
      pending.insert(at, {part, std::move(value)});
    }
  };
  while (!pending.empty()) {
    if (to_root && pending.size() == 1) break;
    const int part = pending.front().first;
    if (pending.size() > 1 && pending[1].first == (part ^ 1)) {
      // The front is the lowest, so it is the left child.
      Value left = std::move(pending[0].second);
      add(left, pending[1].second);
      pending.erase(pending.begin(), pending.begin() + 2);
      insert(NodeParent(part), std::move(left));
    } else if (to_root) {
      Value alone = std::move(pending.front().second);
      pending.erase(pending.begin());
      insert(NodeParent(part), std::move(alone));
    } else {
      nodes->push_back(std::move(pending.front()));
      pending.erase(pending.begin());
    }
  }
  if (to_root) *nodes = std::move(pending);
}

}  // namespace heterps::ps
