// The small embedding model the cost tests work out by hand: batch 100, two slots of 1000 rows of
// 4 floats, pooled and concatenated into an fc of 8 x 1 weights and a bias.
#pragma once

namespace heterps::cost::testing {

inline constexpr char kEmbModelYaml[] = R"(name: emb
batch_size: 100
layers:
  - {name: input, kind: input, dense: 0, sparse: 2}
  - {name: emb, kind: embedding, rows: 1000, dim: 4}
  - {name: cat, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 8, out: 1}
  - {name: loss, kind: logloss}
)";

}  // namespace heterps::cost::testing
