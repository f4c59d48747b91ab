#include "heterps/data/synthetic.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/env.h"
#include "heterps/base/mix_key.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/auc.h"
#include "heterps/data/byte_sink.h"
#include "heterps/data/criteo.h"
#include "nlohmann/json.hpp"

namespace heterps::data {
namespace {

constexpr int kFactors = 4;

// A uniform number in [0, 1) and a standard normal one, from a hash of the arguments.
double Unit(uint64_t a, uint64_t b, uint64_t c) {
  return static_cast<double>(base::MixKey(a ^ base::MixKey(b ^ base::MixKey(c))) >> 11) * 0x1.0p-53;
}
double Normal(uint64_t a, uint64_t b, uint64_t c) {
  const double u = std::max(Unit(a, b, c), 1e-300), v = Unit(a, b, c + 0x5bd1e995u);
  return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
}

struct Teacher {
  uint64_t seed;
  std::vector<double> mu, w;
  double bias = -1.4;

  Teacher(uint64_t s, int dense) : seed(s), mu(dense), w(dense) {
    for (int j = 0; j < dense; ++j) {
      mu[j] = 0.5 + 2.5 * Unit(seed, 1000 + j, 1);
      w[j] = 0.15 * Normal(seed, 2000 + j, 2);
    }
  }
  // How much of the signal rank k carries: the 30 most frequent ids of a slot all of it, rarer
  // ones less and less (30 / k), so that what decides a click can be learned from a few hundred
  // thousand rows (every head id is seen hundreds of times) rather than hidden in ids seen once.
  static double Weight(int64_t k) { return k <= 30 ? 1.0 : 30.0 / static_cast<double>(k); }
  // Parameters of rank k in slot s (k = 0: the empty field).
  double First(int s, int64_t k) const { return 0.4 * Weight(k) * Normal(seed, 3000 + s, 2 * k); }
  double Factor(int s, int64_t k, int f) const {
    return 0.3 * Weight(k) * Normal(seed, 4000 + s * kFactors + f, 2 * k + 1);
  }
};

// The text of id rank k of slot s in a column's id format.
std::string IdText(const Column& column, uint64_t seed, int s, int64_t k) {
  const uint32_t value =
      static_cast<uint32_t>(base::MixKey(seed ^ base::MixKey((uint64_t(s) << 40) | k)));
  switch (column.ids) {
    case IdFormat::kHex:
      return absl::StrFormat("%08x", value);
    case IdFormat::kDecimal:
      return absl::StrCat(value);
    case IdFormat::kString:
      return absl::StrCat("s", s, "-", absl::Hex(value));
  }
  return "";
}

}  // namespace

absl::StatusOr<SyntheticSummary> WriteSynthetic(const SyntheticOptions& options,
                                                const std::string& path) {
  if (options.rows < 1 || options.vocab < 1 || options.zipf <= 0 || options.ids_per_slot <= 0) {
    return absl::InvalidArgumentError(
        "synthetic data: rows, vocab, zipf and ids_per_slot must be positive");
  }
  const Schema& schema = options.schema;
  HETERPS_RETURN_IF_ERROR(CheckSchema(schema));
  for (const Column& c : schema.columns) {
    // Generated string ids are "s<slot>-<hex>": a separator among those characters would split
    // them when read back.
    if (c.role == ColumnRole::kMultiHot &&
        (std::isxdigit(static_cast<unsigned char>(c.separator)) || c.separator == 's' ||
         c.separator == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "synthetic data: column ", c.name, ": the separator '", std::string(1, c.separator),
          "' occurs in the generated ids (hex digits, 's', '-'); choose another"));
    }
  }
  const int dense = schema.dense_features(), slots = schema.slots();
  // Per column: its dense feature or slot.
  std::vector<int> index(schema.columns.size(), 0);
  std::vector<const Column*> dense_columns, slot_columns;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const Column& c = schema.columns[i];
    if (c.role == ColumnRole::kDense) {
      index[i] = static_cast<int>(dense_columns.size());
      dense_columns.push_back(&c);
    } else if (c.role == ColumnRole::kSparse || c.role == ColumnRole::kMultiHot) {
      index[i] = static_cast<int>(slot_columns.size());
      slot_columns.push_back(&c);
    }
  }
  const Teacher teacher(options.seed, dense);
  // The first-order terms scaled so that a layout of few slots carries as much signal as
  // Criteo's 26 (1 for 26 slots).
  const double spread = std::sqrt(static_cast<double>(kSparseSlots) / std::max(slots, 1));
  // Zipf over ranks 1..vocab.
  std::vector<double> cdf(options.vocab);
  double total = 0;
  for (int64_t k = 1; k <= options.vocab; ++k) {
    total += std::pow(static_cast<double>(k), -options.zipf);
    cdf[k - 1] = total;
  }
  for (double& c : cdf) c /= total;
  // A multi-hot field holds 0 .. 2m ids, uniformly (m = ids_per_slot, rounded), at most max_ids.
  const int64_t longest = std::max<int64_t>(1, std::llround(2 * options.ids_per_slot));

  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> out, ByteSink::Create(path, options.env));
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::normal_distribution<double> normal;
  std::vector<float> probabilities(options.rows), labels(options.rows);
  std::string buffer;
  if (schema.header) {
    for (size_t i = 0; i < schema.columns.size(); ++i) {
      if (i > 0) buffer += schema.delimiter;
      buffer += schema.columns[i].name;
    }
    buffer += '\n';
  }
  std::vector<std::string> dense_text(dense), slot_text(slots);
  int64_t positives = 0;
  for (int64_t row = 0; row < options.rows; ++row) {
    double logit = teacher.bias;
    for (int j = 0; j < dense; ++j) {
      dense_text[j].clear();
      if (uniform(rng) < 0.03) continue;  // empty: the model sees 0
      const double draw = std::exp(teacher.mu[j] + 1.2 * normal(rng));
      if (dense_columns[j]->integer) {
        const int64_t x = static_cast<int64_t>(std::floor(draw)) - 1;
        dense_text[j] = std::to_string(x);
        logit += teacher.w[j] * (DenseTransform(x) - teacher.mu[j]);
      } else {
        const double x = draw - 1;
        dense_text[j] = absl::StrFormat("%.4f", x);
        logit += teacher.w[j] * (std::log1p(std::max(x, 0.0)) - teacher.mu[j]);
      }
    }
    std::array<double, kFactors> sum{};
    double squares = 0;
    for (int s = 0; s < slots; ++s) {
      const Column& column = *slot_columns[s];
      slot_text[s].clear();
      if (column.role == ColumnRole::kSparse) {
        int64_t k = 0;
        if (uniform(rng) >= 0.05) {
          k = 1 + (std::lower_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin());
          k = std::min(k, options.vocab);
          slot_text[s] = IdText(column, options.seed, s, k);
        }
        logit += spread * teacher.First(s, k);
        for (int f = 0; f < kFactors; ++f) {
          const double v = teacher.Factor(s, k, f);
          sum[f] += v;
          squares += v * v;
        }
        continue;
      }
      // Multi-hot: the teacher sees the mean of the ids' parameters (none: nothing).
      const int64_t n = std::min<int64_t>(
          column.max_ids, static_cast<int64_t>(uniform(rng) * static_cast<double>(longest + 1)));
      std::array<double, kFactors> pooled{};
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = 1 + (std::lower_bound(cdf.begin(), cdf.end(), uniform(rng)) - cdf.begin());
        k = std::min(k, options.vocab);
        if (i > 0) slot_text[s] += column.separator;
        slot_text[s] += IdText(column, options.seed, s, k);
        logit += spread * teacher.First(s, k) / static_cast<double>(n);
        for (int f = 0; f < kFactors; ++f)
          pooled[f] += teacher.Factor(s, k, f) / static_cast<double>(n);
      }
      for (int f = 0; f < kFactors; ++f) {
        sum[f] += pooled[f];
        squares += pooled[f] * pooled[f];
      }
    }
    double pairs = -squares;
    for (double x : sum) pairs += x * x;
    logit += 0.5 * pairs / std::sqrt(static_cast<double>(std::max(slots, 1)));
    const double p = 1 / (1 + std::exp(-logit));
    const bool click = uniform(rng) < p;
    positives += click;
    probabilities[row] = static_cast<float>(p);
    labels[row] = click ? 1.0f : 0.0f;
    for (size_t i = 0; i < schema.columns.size(); ++i) {
      if (i > 0) buffer += schema.delimiter;
      switch (schema.columns[i].role) {
        case ColumnRole::kLabel:
          if (schema.columns[i].threshold.has_value()) {  // a number on the right side of it
            const double t = *schema.columns[i].threshold;
            absl::StrAppend(&buffer, click ? t : t - 1);
          } else {
            buffer += click ? '1' : '0';
          }
          break;
        case ColumnRole::kDense:
          buffer += dense_text[index[i]];
          break;
        case ColumnRole::kSparse:
        case ColumnRole::kMultiHot:
          buffer += slot_text[index[i]];
          break;
        case ColumnRole::kIgnore:
          absl::StrAppend(&buffer, "r", row);
          break;
      }
    }
    buffer += '\n';
    if (buffer.size() > (1 << 20) || row + 1 == options.rows) {
      HETERPS_RETURN_IF_ERROR(out->Append(buffer));
      buffer.clear();
      if (options.progress) options.progress(row + 1);
    }
  }
  HETERPS_RETURN_IF_ERROR(out->Close());
  SyntheticSummary summary;
  summary.rows = options.rows;
  summary.positive_rate = static_cast<double>(positives) / options.rows;
  absl::StatusOr<double> auc = ExactAuc(probabilities, labels);
  summary.teacher_auc = auc.ok() ? *auc : 0.5;  // one class only (tiny data): no better than chance
  nlohmann::ordered_json sidecar = {{"rows", summary.rows},
                                    {"seed", options.seed},
                                    {"vocab", options.vocab},
                                    {"zipf", options.zipf},
                                    {"positive_rate", summary.positive_rate},
                                    {"teacher_auc", summary.teacher_auc}};
  bool multi_hot = false;
  for (const Column* c : slot_columns) multi_hot |= c->role == ColumnRole::kMultiHot;
  if (multi_hot) sidecar["ids_per_slot"] = options.ids_per_slot;
  HETERPS_RETURN_IF_ERROR(
      base::WriteFileAtomically(options.env, path + ".teacher.json", sidecar.dump(2) + "\n"));
  return summary;
}

}  // namespace heterps::data
