#include "benchmarks/zoo_instances.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace heterps::benchmarks {
namespace {

// A 46-layer model: input, embedding, concat, 42 fc layers (41 of width 256 and the logit), the
// loss.
std::string DeepYaml() {
  std::vector<std::string> sizes = {"320"};
  for (int i = 0; i < 41; ++i) sizes.push_back("256");
  sizes.push_back("1");
  return absl::StrCat(
      "name: deep-46\nbatch_size: 1024\nlayers:\n"
      "  - {name: in, kind: input, dense: 64, sparse: 16}\n"
      "  - {name: emb, kind: embedding, rows: 2000000, dim: 16}\n"
      "  - {name: cat, kind: interaction, op: concat}\n"
      "  - {name: tower, kind: mlp, sizes: [",
      absl::StrJoin(sizes, ", "),
      "], last_activation: none}\n"
      "  - {name: loss, kind: logloss}\n");
}

std::string ModelYaml(const std::string& name) {
  if (name == "two-tower") {
    // A user tower and an item tower in a chain: two tables of different sizes, then two MLPs.
    return "name: two-tower\nbatch_size: 2048\nlayers:\n"
           "  - {name: in, kind: input, dense: 16, sparse: 24}\n"
           "  - {name: user_emb, kind: embedding, rows: 20000000, dim: 32, slots: 12}\n"
           "  - {name: item_emb, kind: embedding, rows: 2000000, dim: 32, slots: 12}\n"
           "  - {name: cat, kind: interaction, op: concat}\n"
           "  - {name: user_tower, kind: mlp, sizes: [784, 1024, 512, 256]}\n"
           "  - {name: item_tower, kind: mlp, sizes: [256, 512, 256, 128]}\n"
           "  - {name: score, kind: fc, in: 128, out: 1}\n"
           "  - {name: loss, kind: logloss}\n";
  }
  if (name == "deepfm") {
    // The FM part as a dot interaction of the 39 embeddings and the projected dense features.
    return "name: deepfm\nbatch_size: 2048\nlayers:\n"
           "  - {name: in, kind: input, dense: 13, sparse: 39}\n"
           "  - {name: emb, kind: embedding, rows: 5000000, dim: 10}\n"
           "  - {name: proj, kind: fc, in: 13, out: 10}\n"
           "  - {name: fm, kind: interaction, op: dot}\n"
           "  - {name: deep, kind: mlp, sizes: [790, 400, 400, 400, 1], last_activation: none}\n"
           "  - {name: loss, kind: logloss}\n";
  }
  if (name == "dcn") {
    // Six cross layers on the 429-wide concat (x0 (w . x) + b + x: 4 d FLOPs, 2 d parameters).
    std::string y =
        "name: dcn\nbatch_size: 1024\nlayers:\n"
        "  - {name: in, kind: input, dense: 13, sparse: 26}\n"
        "  - {name: emb, kind: embedding, rows: 3000000, dim: 16}\n"
        "  - {name: cat, kind: interaction, op: concat}\n";
    for (int i = 0; i < 6; ++i) {
      absl::StrAppend(&y, "  - {name: cross", i,
                      ", kind: custom, flops: 1716, params: 858, in: 429, out: 429}\n");
    }
    return y + "  - {name: deep, kind: mlp, sizes: [429, 1024, 1024, 512, 1], " +
           "last_activation: none}\n  - {name: loss, kind: logloss}\n";
  }
  if (name == "nce") {
    // A sampled output layer: 1,024 sampled classes of a million, each a 256-float row of a
    // dense output matrix (a gigabyte of parameters).
    return "name: nce\nbatch_size: 1024\nlayers:\n"
           "  - {name: in, kind: input, sparse: 8}\n"
           "  - {name: emb, kind: embedding, rows: 10000000, dim: 64}\n"
           "  - {name: cat, kind: interaction, op: concat}\n"
           "  - {name: hidden, kind: mlp, sizes: [512, 512, 256]}\n"
           "  - {name: sampled, kind: custom, flops: 524800, params: 256000000, in: 256, out: 1}\n"
           "  - {name: loss, kind: logloss}\n";
  }
  if (name == "multi-hot") {
    return "name: multi-hot\nbatch_size: 1024\nlayers:\n"
           "  - {name: in, kind: input, dense: 13, sparse: 10}\n"
           "  - {name: emb, kind: embedding, rows: 1000000, dim: 16, ids_per_slot: 50, "
           "pooling: mean}\n"
           "  - {name: cat, kind: interaction, op: concat}\n"
           "  - {name: top, kind: mlp, sizes: [173, 256, 128, 1], last_activation: none}\n"
           "  - {name: loss, kind: logloss}\n";
  }
  if (name == "deep-46") return DeepYaml();
  if (name == "compute-heavy") {
    return "name: compute-heavy\nbatch_size: 256\nlayers:\n"
           "  - {name: in, kind: input, dense: 256}\n"
           "  - {name: block1, kind: custom, flops: 2.0e9, params: 5.0e6, in: 256, out: 1024}\n"
           "  - {name: block2, kind: custom, flops: 4.0e9, params: 2.0e7, out: 512}\n"
           "  - {name: attention, kind: custom, flops: 1.0e9, params: 1.0e7, out: 256}\n"
           "  - {name: head, kind: mlp, sizes: [256, 128, 1], last_activation: none}\n"
           "  - {name: loss, kind: logloss}\n";
  }
  return "";
}

// One kind of hardware, at AWS-like on-demand prices.
struct Hardware {
  const char* name;
  bool gpu;
  double tflops, mem_gbs, lookup_mrows, memory_gib, network_gbps, overhead_us, latency_us;
  double price;  // USD per unit-hour, on demand
  int units;     // a region's quota
  double dp_loss, ssd_gib, ssd_kiops;
};

const std::vector<Hardware>& Bases() {
  static const std::vector<Hardware> bases = {
      {"c5.4xl", false, 1.74, 57, 60, 32, 5, 2, 50, 0.68, 64, 0.04, 0, 0},
      {"m5.8xl", false, 3.5, 110, 100, 128, 10, 2, 40, 1.54, 48, 0.04, 0, 0},
      {"r5.16xl", false, 7, 200, 150, 512, 20, 2, 40, 4.03, 24, 0.05, 0, 0},
      {"c6i.32xl", false, 14, 300, 250, 256, 50, 2, 30, 5.44, 16, 0.05, 0, 0},
      {"i4i.8xl", false, 4, 120, 100, 256, 25, 2, 40, 2.75, 24, 0.04, 6984, 800},
      {"t4", true, 8, 300, 800, 16, 25, 8, 30, 0.53, 16, 0.06, 0, 0},
      {"l4", true, 30, 300, 1000, 24, 50, 6, 25, 0.80, 16, 0.06, 0, 0},
      {"a10g", true, 31, 600, 1500, 24, 50, 6, 25, 1.01, 12, 0.06, 0, 0},
      {"a100", true, 40, 1555, 3000, 40, 400, 5, 15, 4.10, 8, 0.05, 0, 0},
      {"h100", true, 67, 3350, 5000, 80, 400, 5, 10, 12.29, 8, 0.05, 0, 0},
  };
  return bases;
}

std::string TypeYaml(const std::string& name, const Hardware& h, double price, int units,
                     double dp_loss) {
  std::string ssd =
      h.ssd_gib > 0 ? absl::StrFormat(", ssd_gib: %.6g, ssd_kiops: %.6g", h.ssd_gib, h.ssd_kiops)
                    : std::string();
  return absl::StrFormat(
      "  - {name: %s, kind: %s, tflops: %.6g, mem_gbs: %.6g, lookup_mrows: %.6g, memory_gib: "
      "%.6g, network_gbps: %.6g, overhead_us: %.6g, latency_us: %.6g, price_per_hour: %.6g, "
      "units: %d, dp_loss: %.4g%s}\n",
      name, h.gpu ? "gpu" : "cpu", h.tflops, h.mem_gbs, h.lookup_mrows, h.memory_gib,
      h.network_gbps, h.overhead_us, h.latency_us, price, std::max(units, 1),
      std::min(dp_loss, 0.5), ssd);
}

double LogUniform(std::mt19937_64& rng, double lo, double hi) {
  return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
}

// `kind_index`: the kind's place in ZooCatalogs(), which with the size seeds the draws (the same
// catalogs with every standard library).
std::string CatalogYaml(const std::string& kind, uint64_t kind_index, int types) {
  const std::vector<Hardware>& bases = Bases();
  const int n = static_cast<int>(bases.size());
  std::mt19937_64 rng(kind_index * 1000 + static_cast<uint64_t>(types));
  std::string y = absl::StrFormat("name: %s-%d\ntypes:\n", kind, types);
  for (int i = 0; i < types; ++i) {
    const Hardware& h = bases[i % n];
    const int variant = i / n;  // a region, or a purchase option, per round over the bases
    const double region = 1 + 0.07 * variant;
    const std::string name = absl::StrFormat("%s-%s%d", h.name, kind, variant);
    if (kind == "onprem") {
      // Bought hardware: a few generations (the older half), prices amortised over three years
      // with power and staff (about a third of the cloud's on demand), large pools.
      const Hardware& old = bases[(i % 3) + (h.gpu ? 5 : 0)];
      y += TypeYaml(name, old, old.price * 0.33 * region, old.units * 4 / (1 + variant), 0.03);
    } else if (kind == "gcp" || kind == "azure") {
      // The same hardware at the cloud's own price ratios (GPUs relatively cheaper on one,
      // CPUs on the other), in regions that cost more and hold less.
      const double ratio = kind == "gcp" ? (h.gpu ? 0.88 : 1.04) : (h.gpu ? 1.12 : 0.93);
      y += TypeYaml(name, h, h.price * ratio * region, h.units / (1 + variant),
                    h.dp_loss + 0.005 * variant);
    } else if (kind == "spot") {
      // One on-demand pool per hardware kind, every other type a spot pool: 25-45% of the
      // price, a few units each, restarts cost data-parallel efficiency.
      if (variant == 0 && i % 2 == 0) {
        y += TypeYaml(name, h, h.price * region, h.units / 2, h.dp_loss);
      } else {
        const double discount = std::uniform_real_distribution<double>(0.25, 0.45)(rng);
        const int units = std::uniform_int_distribution<int>(1, std::max(2, h.units / 6))(rng);
        y += TypeYaml(name, h, h.price * discount * region, units, h.dp_loss + 0.08);
      }
    } else {  // random: every figure drawn, spanning two orders of magnitude
      Hardware r = h;
      const double scale = h.gpu ? 10 : 1;
      r.tflops = scale * LogUniform(rng, 0.2, 4);
      r.mem_gbs = scale * LogUniform(rng, 20, 200);
      r.lookup_mrows = scale * LogUniform(rng, 20, 400);
      r.memory_gib = LogUniform(rng, 4, 512);
      r.network_gbps = LogUniform(rng, 5, 400);
      r.overhead_us = LogUniform(rng, 0.5, 20);
      r.latency_us = LogUniform(rng, 5, 80);
      y += TypeYaml(name, r, scale * LogUniform(rng, 0.1, 3),
                    std::uniform_int_distribution<int>(1, 32)(rng), LogUniform(rng, 0.001, 0.3));
    }
  }
  return y;
}

}  // namespace

std::vector<std::string> ZooModels() {
  return {"two-tower", "deepfm", "dcn", "ctr-dnn", "nce", "multi-hot", "deep-46", "compute-heavy"};
}

absl::StatusOr<config::ModelSpec> ZooModel(const std::string& name) {
  if (name == "ctr-dnn") return config::LoadModelSpec("examples/models/ctr-dnn.yaml");
  const std::string yaml = ModelYaml(name);
  if (yaml.empty()) return absl::InvalidArgumentError("no zoo model named " + name);
  return config::ParseModelSpec(yaml, "zoo/" + name + ".yaml");
}

std::vector<std::string> ZooCatalogs() { return {"onprem", "gcp", "azure", "spot", "random"}; }

absl::StatusOr<config::ClusterSpec> ZooCatalog(const std::string& kind, int types) {
  const std::vector<std::string> kinds = ZooCatalogs();
  const auto found = std::find(kinds.begin(), kinds.end(), kind);
  if (found == kinds.end() || types < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no zoo catalog %s of %d types", kind, types));
  }
  return config::ParseClusterSpec(CatalogYaml(kind, found - kinds.begin(), types),
                                  absl::StrFormat("zoo/%s-%d.yaml", kind, types));
}

}  // namespace heterps::benchmarks
