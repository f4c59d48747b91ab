#include "tools/train_common.h"

#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "heterps/base/file.h"
#include "heterps/base/fnv.h"
#include "heterps/base/numbers.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/byte_sink.h"
#include "heterps/data/line_source.h"
#include "heterps/data/synthetic.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {

namespace {

// A name for a declared layout: a hash of everything that changes what the generator writes.
std::string LayoutName(const data::Schema& schema) {
  std::string text = absl::StrCat(static_cast<int>(schema.delimiter), schema.header);
  for (const data::Column& c : schema.columns) {
    absl::StrAppend(&text, "|", c.name, ",", static_cast<int>(c.role), ",", c.integer, ",",
                    static_cast<int>(c.ids), ",", static_cast<int>(c.separator), ",", c.max_ids);
  }
  return absl::StrFormat("-layout%016x", base::Fnv1a64(text.data(), text.size()));
}

}  // namespace

absl::StatusOr<DataFile> PrepareData(const TrainFlags& flags, const config::ModelSpec& spec) {
  DataFile file;
  const bool synthetic = flags.data.empty() || flags.data == std::vector<std::string>{"synthetic"};
  if (!synthetic) {
    HETERPS_ASSIGN_OR_RETURN(file.paths, data::ExpandDataPaths(flags.data));
    if (file.paths.size() > 1) return file;
  } else {
    file.paths = {
        (std::filesystem::temp_directory_path() /
         absl::StrCat("heterps-synthetic-", data::kSyntheticVersion, "-seed", flags.job.tables.seed,
                      "-rows", flags.rows, spec.data_declared ? LayoutName(spec.data) : "",
                      spec.data_declared ? ".txt" : ".tsv"))
            .string()};
  }
  const std::string& path = file.paths.front();
  // The sidecar of the file's own name, or of its uncompressed name: `gzip train.tsv` leaves
  // train.tsv.teacher.json beside train.tsv.gz.
  for (const std::string& named : {path, data::UncompressedName(path)}) {
    auto sidecar = base::ReadTextFile(named + ".teacher.json");
    if (!sidecar.ok()) continue;
    auto json = nlohmann::json::parse(*sidecar, nullptr, false);
    if (json.is_object() && json.contains("teacher_auc") && std::filesystem::exists(path)) {
      file.teacher_auc = json.value("teacher_auc", -1.0);
      return file;
    }
  }
  if (!synthetic) return file;
  data::SyntheticOptions options;
  options.rows = flags.rows;
  options.seed = flags.job.tables.seed;
  options.schema = spec.data;
  ProgressLine progress(true);
  options.progress = [&](int64_t rows) {
    progress.Show(absl::StrFormat("generating %s %s / %s rows", Bar(rows, flags.rows),
                                  WithCommas(rows), WithCommas(flags.rows)));
  };
  HETERPS_ASSIGN_OR_RETURN(data::SyntheticSummary summary, data::WriteSynthetic(options, path));
  file.teacher_auc = summary.teacher_auc;
  return file;
}

namespace {

// One optimizer: the flag's kind and rate where given, else the spec's, else the defaults (the
// rate: default_lr(kind)); the spec's other settings over ps::OptimizerOptions' defaults.
absl::StatusOr<ps::OptimizerOptions> Optimizer(
    const std::string& flag_kind, double flag_lr, const config::OptimizerSpec& spec,
    const char* default_kind, const std::function<double(ps::OptimizerKind)>& default_lr,
    const char* flag) {
  const std::string name = !flag_kind.empty()   ? flag_kind
                           : !spec.kind.empty() ? spec.kind
                                                : default_kind;
  absl::StatusOr<ps::OptimizerKind> kind = ps::ParseOptimizerKind(name);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", kind.status().message()));
  }
  ps::OptimizerOptions options;
  options.kind = *kind;
  options.learning_rate = static_cast<float>(flag_lr > 0              ? flag_lr
                                             : spec.learning_rate > 0 ? spec.learning_rate
                                                                      : default_lr(*kind));
  if (spec.initial_accumulator >= 0) {
    options.initial_accumulator = static_cast<float>(spec.initial_accumulator);
  }
  if (spec.beta1 >= 0) options.beta1 = static_cast<float>(spec.beta1);
  if (spec.beta2 >= 0) options.beta2 = static_cast<float>(spec.beta2);
  if (spec.epsilon > 0) options.epsilon = static_cast<float>(spec.epsilon);
  return options;
}

}  // namespace

absl::StatusOr<worker::ModelOptions> ModelOptionsFrom(const TrainFlags& flags,
                                                      const config::ModelSpec& spec,
                                                      int64_t batch) {
  worker::ModelOptions options;
  options.seed = flags.job.tables.seed;
  options.sparse_memory_budget_bytes = flags.ps_memory_mib > 0
                                           ? static_cast<int64_t>(flags.ps_memory_mib * (1 << 20))
                                           : flags.job.tables.sparse_memory_budget_bytes;
  // The embeddings' rate: Adagrad (its accumulator starting at 0) and Adam divide a gradient by
  // its own running size, so their step does not shrink with the batch and 0.05 holds at every
  // batch size (docs/benchmarks.md, "The first epoch on real data"); SGD's step is the gradient
  // itself, 1 / batch per sample under a mean loss, so its rate grows with the batch.
  auto sparse_lr = [batch](ps::OptimizerKind kind) {
    return kind == ps::OptimizerKind::kSgd ? 0.05 * static_cast<double>(batch) / 256.0 : 0.05;
  };
  HETERPS_ASSIGN_OR_RETURN(options.sparse_optimizer,
                           Optimizer(flags.optimizer, flags.lr, spec.embedding_optimizer, "adagrad",
                                     sparse_lr, "--optimizer"));
  HETERPS_ASSIGN_OR_RETURN(options.dense_optimizer,
                           Optimizer(
                               flags.dense_optimizer, flags.dense_lr, spec.dense_optimizer, "adam",
                               [](ps::OptimizerKind) { return 0.001; }, "--dense-optimizer"));
  return options;
}

namespace {

double LinkEgressUsd(const RegionFigures& f, const worker::RegionTraffic& t) {
  const auto it = f.egress_per_byte.find({t.from, t.to});
  return it == f.egress_per_byte.end() ? 0.0 : it->second * static_cast<double>(t.bytes);
}

}  // namespace

std::string RegionsSummary(const RegionFigures& f) {
  std::vector<std::string> names;
  for (size_t r = 0; r < f.names.size(); ++r) {
    names.push_back(r < f.shares.size()
                        ? absl::StrFormat("%s %.0f%%", f.names[r], 100 * f.shares[r])
                        : f.names[r]);
  }
  const std::string eager =
      f.eager_threshold > 0
          ? absl::StrFormat(", and after each step between rows past %g", f.eager_threshold)
          : std::string();
  std::string out = absl::StrFormat(
      "  regions         %s (%s)\n"
      "  windows         %s of deltas, every %d steps, threshold %g%s, delay %d, %s (the final "
      "flush's included)\n",
      absl::StrJoin(names, ", "), f.where, WithCommas(f.windows), f.sync_steps, f.threshold, eager,
      f.delay, f.hub.empty() ? std::string("peer to peer") : absl::StrCat("through ", f.hub));
  const bool priced = !f.egress_per_byte.empty();
  std::vector<std::string> header = {"from", "to", "bytes", "per step", "messages"};
  std::vector<bool> right = {false, false, true, true, true};
  if (priced) {
    header.push_back("egress");
    right.push_back(true);
  }
  Table table(header, right);
  double usd = 0;
  for (const worker::RegionTraffic& t : f.traffic) {
    std::vector<std::string> row = {f.names[t.from], f.names[t.to], WithCommas(t.bytes),
                                    WithCommas(f.steps > 0 ? t.bytes / f.steps : 0),
                                    WithCommas(t.messages)};
    if (priced) {
      const double link = LinkEgressUsd(f, t);
      usd += link;
      row.push_back(base::HumanUsd(link));
    }
    table.AddRow(std::move(row));
  }
  out += table.Render();
  if (priced) {
    out += absl::StrFormat("  egress          %s between regions (at the prices of cluster %s)\n",
                           base::HumanUsd(usd), f.priced_by);
  }
  return out;
}

nlohmann::ordered_json RegionsJson(const RegionFigures& f,
                                   const std::vector<std::vector<std::string>>& files) {
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  double usd = 0;
  for (const worker::RegionTraffic& t : f.traffic) {
    links.push_back({{"from", f.names[t.from]},
                     {"to", f.names[t.to]},
                     {"bytes", t.bytes},
                     {"messages", t.messages}});
    if (!f.egress_per_byte.empty()) {
      links.back()["egress_usd"] = LinkEgressUsd(f, t);
      usd += LinkEgressUsd(f, t);
    }
  }
  nlohmann::ordered_json out = {{"names", f.names},
          {"shares", f.shares},
          {"files", files},
          {"sync_steps", f.sync_steps},
          {"threshold", f.threshold},
          {"eager_threshold", f.eager_threshold},
          {"delay", f.delay},
          {"hub", f.hub},
          {"windows", f.windows},
          {"links", links}};
  if (!f.egress_per_byte.empty()) out["egress_usd"] = usd;
  return out;
}

}  // namespace heterps::tools
