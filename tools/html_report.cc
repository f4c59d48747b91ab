#include "tools/html_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "embedded/heterps_chartjs.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/launcher/job_status.h"

namespace heterps::tools {
namespace {

// What both pages' scripts share: script errors caught, a chart made, a canvas checked.
constexpr char kPrelude[] = R"js(
const errors = [];
window.addEventListener('error', e => errors.push(String(e.message)));
const charts = [];
const $ = id => document.getElementById(id);
const fmt = x => x == null ? '-' : (Math.abs(x) >= 100 ? Math.round(x).toLocaleString('en') : Number(x).toPrecision(4));
// Dollars: cents from a dollar up, three significant digits below (a short run costs fractions of a
// cent).
const usd = x => x == null ? '-' : '$' + (Math.abs(x) >= 1 ? x.toLocaleString('en', {minimumFractionDigits: 2, maximumFractionDigits: 2}) : Number(x).toPrecision(3));
function chart(id, config) {
  try {
    // Each canvas fills its grid cell (.chart sets the height).
    config.options = Object.assign({animation: false, responsive: true, maintainAspectRatio: false,
                                    plugins: {legend: {position: 'bottom'}}}, config.options || {});
    charts.push(new Chart($(id), config));
  } catch (e) { errors.push(id + ': ' + e.message); }
}
function blank(canvas) {
  const g = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < g.length; i += 4) painted += g[i] > 0;
  return painted < 0.005 * canvas.width * canvas.height;
}
)js";

// What the page drew, for a headless browser to read (#report-check).
constexpr char kCheck[] = R"js(
const drawn = charts.filter(c => c.data.datasets.some(d => d.data.some(v => v != null)) && !blank(c.canvas)).length;
const check = $('report-check');
check.dataset.charts = charts.length; check.dataset.drawn = drawn; check.dataset.errors = errors.length;
check.textContent = `ReportCheck charts=${charts.length} drawn=${drawn} errors=${errors.length} ${errors.join('; ')}`;
)js";

// The job report's script: reads REPORT and draws.
constexpr char kScript[] = R"js(
const R = REPORT, M = R.metrics, S = R.status || {};
// The plans the job ran, each from its start (seconds), and what the run had spent by time t: the
// sum over plans of $/hour times the hours each ran before t.
const plans = R.plans && R.plans.length ? R.plans : [{seconds: 0, plan: R.plan}];
const lastSeconds = () => R.series.length ? R.series[R.series.length - 1].seconds : 0;
function spent(t) {
  let usd = 0;
  plans.forEach((e, i) => {
    const end = i + 1 < plans.length ? Math.min(t, plans[i + 1].seconds) : t;
    if (end > e.seconds) usd += (e.plan.cost_per_hour_usd || 0) * (end - e.seconds) / 3600;
  });
  return usd;
}
$('title').textContent = `${R.model} — ${R.state}` + (R.error ? `: ${R.error}` : '');
const facts = [['state', R.state], ['step', S.step != null ? `${S.step} / ${S.total_steps}` : '-'],
  ['samples/s', fmt(M ? M.samples_per_second : S.samples_per_second)],
  ['predicted samples/s', fmt(R.plan.predicted_samples_per_second)],
  ['train logloss', fmt(M ? M.train_logloss : S.loss)], ['eval logloss', fmt(M && M.eval_logloss)],
  ['eval AUC', fmt(M && M.eval_auc)], ["teacher's AUC", fmt(M && M.teacher_auc)],
  ['restarts', M ? M.restarts : S.restarts], ['$/hour', usd(R.plan.cost_per_hour_usd)],
  ['cost of the run', M && M.cost_usd != null ? usd(M.cost_usd) : `${usd(spent(lastSeconds()))} so far`],
  ['scheduler', R.plan.scheduler], ['updated', R.updated]];
$('facts').innerHTML = facts.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('');
$('pipeline').innerHTML = R.plan.stages.map((s, i) =>
  `<div class="stage"><b>stage ${i}</b><br>${s.layers}<br>${s.units} × ${s.type}` +
  `${s.device ? ' (' + s.device + ')' : ''}<br>${usd(s.usd_per_hour)}/hour<br>` +
  `predicted ${fmt(1000 * s.predicted_seconds_per_batch)} ms/batch</div>`).join('<div class="arrow">→</div>');
// An elastic job's plans, each from the time it started.
if (R.plans && R.plans.length > 1) {
  const segs = M && M.segments && M.segments.length == R.plans.length ? M.segments : null;
  $('plans').innerHTML = '<tr><th>from (s)</th><th>$/hour</th><th>predicted samples/s</th><th>cost</th><th>stages</th></tr>' +
    R.plans.map((e, i) => `<tr><td>${fmt(e.seconds)}</td><td>${usd(e.plan.cost_per_hour_usd)}</td>` +
      `<td>${fmt(e.plan.predicted_samples_per_second)}</td><td>${segs ? usd(segs[i].cost_usd) : '-'}</td>` +
      `<td>${e.plan.stages.map(s => s.units + ' × ' + s.type).join(' → ')}</td></tr>`).join('');
} else {
  $('plans-section').style.display = 'none';
}

// Losses against samples.
const perStep = M && M.steps > 0 ? M.train_samples / M.steps : 0;
const loss = M && M.losses && M.losses.length
  ? M.losses.map((y, i) => ({x: (i + 1) * perStep, y}))
  : R.series.map(p => ({x: p.samples, y: p.loss}));
const lossSets = [{label: 'train logloss', data: loss, borderColor: '#1f77b4', pointRadius: 0}];
const lastX = loss.length ? loss[loss.length - 1].x : 0;
// Evaluations during training (--eval-interval), then the end's.
const evalLoss = (R.evals || []).map(e => ({x: e.samples, y: e.logloss}));
const evalAuc = (R.evals || []).map(e => ({x: e.samples, y: e.auc}));
if (M && M.eval_logloss != null) evalLoss.push({x: lastX, y: M.eval_logloss});
if (M && M.eval_auc != null) evalAuc.push({x: lastX, y: M.eval_auc});
if (evalLoss.length) lossSets.push({label: 'eval logloss', data: evalLoss,
  borderColor: '#d62728', backgroundColor: '#d62728', pointRadius: 4, showLine: evalLoss.length > 1});
const aucSets = [];
if (evalAuc.length) aucSets.push({label: 'eval AUC', data: evalAuc,
  borderColor: '#2ca02c', backgroundColor: '#2ca02c', pointRadius: 4, showLine: evalAuc.length > 1, yAxisID: 'auc'});
if (M && M.teacher_auc != null) aucSets.push({label: "teacher's AUC", data: [{x: 0, y: M.teacher_auc}, {x: lastX, y: M.teacher_auc}],
  borderColor: '#7f7f7f', borderDash: [6, 4], pointRadius: 0, yAxisID: 'auc'});
chart('loss', {type: 'line', data: {datasets: lossSets.concat(aucSets)}, options: {scales: {
  x: {type: 'linear', title: {display: true, text: 'samples'}},
  y: {title: {display: true, text: 'logloss'}},
  auc: {position: 'right', min: 0.5, max: 1, display: aucSets.length > 0, title: {display: true, text: 'AUC'}}}}});

// Throughput over time, restarts and plan switches marked.
const sps = R.series.filter(p => p.samples_per_second != null).map(p => ({x: p.seconds, y: p.samples_per_second}));
const tEnd = R.series.length ? R.series[R.series.length - 1].seconds : 0;
const events = R.events.map(e => ({x: e.seconds, y: 0, label: e.text}));
chart('throughput', {type: 'line', data: {datasets: [
  {label: 'samples/s', data: sps, borderColor: '#1f77b4', pointRadius: 0},
  {label: 'predicted', data: [{x: 0, y: R.plan.predicted_samples_per_second}, {x: tEnd, y: R.plan.predicted_samples_per_second}],
   borderColor: '#ff7f0e', borderDash: [6, 4], pointRadius: 0},
  {label: 'restarts and re-plans', data: events, borderColor: '#d62728', backgroundColor: '#d62728',
   pointRadius: 7, pointStyle: 'triangle', showLine: false}]},
  options: {scales: {x: {type: 'linear', title: {display: true, text: 'seconds'}}, y: {beginAtZero: true}},
            plugins: {tooltip: {callbacks: {label: c => c.raw.label || `${fmt(c.raw.y)} samples/s`}}}}});

// What the run cost as it went, one colour per plan (an elastic job's segments), scaled so that it
// ends at the job's own account of its cost (the ledger's, which also counts the time before the
// first step and after the last progress point).
const times = [0].concat(R.series.map(p => p.seconds)).concat(plans.map(e => e.seconds)).sort((a, b) => a - b);
const scale = M && M.cost_usd > 0 && spent(tEnd) > 0 ? M.cost_usd / spent(tEnd) : 1;
const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b'];
chart('cost', {type: 'line', data: {datasets: plans.map((e, i) => {
  const end = i + 1 < plans.length ? plans[i + 1].seconds : tEnd;
  const pts = times.filter(t => t >= e.seconds && t <= end).map(t => ({x: t, y: scale * spent(t)}));
  const segment = M && M.segments && M.segments.length == plans.length ? M.segments[i].cost_usd : null;
  return {label: `plan ${i + 1}: ${usd(e.plan.cost_per_hour_usd)}/hour` + (segment != null ? `, ${usd(segment)}` : ''),
          data: pts, borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length] + '40',
          fill: 'origin', pointRadius: 0};
})}, options: {scales: {x: {type: 'linear', title: {display: true, text: 'seconds'}},
                        y: {beginAtZero: true, title: {display: true, text: 'dollars spent'}}},
               plugins: {tooltip: {callbacks: {label: c => usd(c.raw.y)}}}}});

// Stages: predicted against measured time per batch.
const stageRows = M && M.stages ? M.stages : R.plan.stages;
const measured = stageRows.map((s, i) => {
  if (s.measured_seconds_per_batch != null) return 1000 * s.measured_seconds_per_batch;
  const reps = (S.replicas || []).filter(r => r.stage == i && r.micro_batches > 0);
  return reps.length ? Math.max(...reps.map(r => 1000 * r.busy_seconds / Math.max(1, S.step))) : null;
});
chart('stages', {type: 'bar', data: {labels: stageRows.map((s, i) => `stage ${i}: ${s.layers}`), datasets: [
  {label: 'predicted ms/batch', data: R.plan.stages.map(s => 1000 * s.predicted_seconds_per_batch), backgroundColor: '#ff7f0e'},
  {label: 'measured ms/batch', data: measured, backgroundColor: '#1f77b4'}]}});

// Each replica's time: computing, parameter servers, sending, idle.
const reps = S.replicas || [];
const part = (f, label, color) => ({label, data: reps.map(f), backgroundColor: color});
chart('replicas', {type: 'bar', data: {labels: reps.map(r => `stage ${r.stage} replica ${r.replica}`), datasets: [
  part(r => Math.max(0, r.busy_seconds - r.ps_seconds), 'computing', '#1f77b4'),
  part(r => r.ps_seconds, 'parameter servers', '#9467bd'),
  part(r => r.send_seconds, 'sending', '#8c564b'),
  part(r => r.idle_seconds, 'idle (upstream, downstream, barrier)', '#c7c7c7')]},
  options: {scales: {x: {stacked: true}, y: {stacked: true, title: {display: true, text: 'seconds'}}}}});

// Parameter servers: rows per tier, hit rates.
const tables = [];
for (const shard of S.parameter_servers || []) for (const t of shard.tables) tables.push(Object.assign({shard: shard.shard}, t));
chart('tiers', {type: 'bar', data: {labels: tables.map(t => `shard ${t.shard} table ${t.table}`), datasets: [
  {label: 'rows in memory', data: tables.map(t => t.memory_rows), backgroundColor: '#2ca02c'},
  {label: 'rows on SSD', data: tables.map(t => t.cold_rows), backgroundColor: '#bcbd22'}]},
  options: {scales: {x: {stacked: true}, y: {stacked: true}}}});
$('tier-table').innerHTML = '<tr><th>shard</th><th>table</th><th>memory MB</th><th>hit rate</th><th>spills</th></tr>' +
  tables.map(t => `<tr><td>${t.shard}</td><td>${t.table}</td><td>${fmt(t.memory_bytes / 1e6)}</td>` +
    `<td>${t.hits + t.misses > 0 ? (100 * t.hits / (t.hits + t.misses)).toFixed(2) + '%' : '-'}</td><td>${t.spills}</td></tr>`).join('');

// Between regions: what crossed each link of a plan across regions (by kind, against the cost
// model), or what a region's windows sent each link; the egress, and whether the ids stayed home.
const crossed = M && M.links ? M.links : [], windows = M && M.regions ? M.regions.links || [] : [];
const bytes = x => x == null ? '-' : Math.round(x).toLocaleString('en');
if (crossed.length) {
  $('links').innerHTML = '<tr><th>from</th><th>to</th><th>activations</th><th>gradients</th><th>rows</th>' +
    '<th>dense</th><th>bytes/step</th><th>predicted/batch</th><th>egress</th></tr>' +
    crossed.map(l => `<tr><td>${l.from}</td><td>${l.to}</td><td>${bytes(l.activations_bytes_per_step)}</td>` +
      `<td>${bytes(l.gradients_bytes_per_step)}</td><td>${bytes(l.rows_bytes_per_step)}</td>` +
      `<td>${bytes(l.dense_bytes_per_step)}</td><td>${bytes(l.bytes_per_step)}</td>` +
      `<td>${bytes(l.predicted_bytes_per_batch)}</td><td>${usd(l.egress_usd)}</td></tr>`).join('');
  const rows = crossed.reduce((a, l) => a + l.rows_bytes_per_step, 0);
  $('links-note').textContent = `egress ${usd(M.egress_usd)}; ` + (rows > 0
    ? `calls that carry keys crossed: ${bytes(rows)} bytes a step`
    : "no call that carries keys crossed a link" +
      (M.data_region ? `: the data's ids stayed in region ${M.data_region}` : ''));
} else if (windows.length) {
  $('links').innerHTML = '<tr><th>from</th><th>to</th><th>bytes</th><th>messages</th><th>egress</th></tr>' +
    windows.map(l => `<tr><td>${l.from}</td><td>${l.to}</td><td>${bytes(l.bytes)}</td>` +
      `<td>${fmt(l.messages)}</td><td>${l.egress_usd != null ? usd(l.egress_usd) : '-'}</td></tr>`).join('');
  $('links-note').textContent = `windows of parameter deltas only: ${M.regions.windows} of them` +
    (M.regions.egress_usd != null ? `, egress ${usd(M.regions.egress_usd)}` : '');
} else {
  $('links-section').style.display = 'none';
}

)js";

// The plan report's script.
constexpr char kPlanScript[] = R"js(
const R = REPORT, P = R.plan;
$('title').textContent = `${P.model} on ${P.cluster}: ${fmt(P.throughput_limit)} samples/s needed`;
const gap = P.certified_optimal ? 'certified optimal' : P.optimality_gap != null ? `at most ${(100 * P.optimality_gap).toFixed(2)}% above the optimum` : 'not certified';
$('facts').innerHTML = [['scheduler', `${P.scheduler} (${gap})`], ['feasible', P.feasible ? 'yes' : 'no: ' + (P.infeasible ? P.infeasible.reason : '')],
  ['pipeline samples/s', fmt(P.throughput)], ['job cost', usd(P.cost_usd)], ['$/hour', usd(P.cost_per_hour_usd)],
  ['job hours', fmt(P.job_seconds / 3600)], ['lower bound', usd(P.lower_bound_usd)]]
  .map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('');
$('pipeline').innerHTML = P.stages.map(s =>
  `<div class="stage"><b>stage ${s.index}</b><br>${s.layers[0]}..${s.layers[s.layers.length - 1]}<br>` +
  `${s.units} × ${s.type}<br>${usd(s.usd_per_hour)}/hour<br>${fmt(1000 * s.seconds_per_batch)} ms/batch</div>`)
  .join('<div class="arrow">→</div>');
const S = P.parameter_servers;  // the shards that hold the tables, beside the pipeline
if (S) {
  $('pipeline').innerHTML += `<div class="arrow">|</div><div class="stage"><b>parameter servers</b><br>` +
    `${fmt(S.table_gib)} GiB of tables<br>${S.shards} × ${S.type}<br>${usd(S.usd_per_hour)}/hour<br>` +
    `${fmt(1000 * S.seconds_per_batch)} ms/batch` +
    (S.ssd_gib_per_shard > 0 ? `<br>${fmt(S.ssd_gib_per_shard)} GiB/shard on SSD, ${(100 * S.hit_rate).toFixed(1)}% from memory` : '') +
    `</div>`;
}
const all = [P].concat(R.baselines || []).filter(p => p.feasible);
chart('costs', {type: 'bar', data: {labels: all.map(p => p.scheduler), datasets: [
  {label: 'job cost, $', data: all.map(p => p.cost_usd), backgroundColor: all.map((p, i) => i == 0 ? '#1f77b4' : '#c7c7c7')}]},
  options: {indexAxis: 'y'}});
if (R.frontier && R.frontier.length) {
  const f = R.frontier.filter(p => p.feasible);
  chart('frontier', {type: 'line', data: {datasets: [
    {label: 'cheapest plan', data: f.map(p => ({x: p.throughput_limit, y: p.cost_usd})), borderColor: '#1f77b4', stepped: false},
    {label: 'this plan', data: [{x: P.throughput_limit, y: P.cost_usd}], borderColor: '#d62728', backgroundColor: '#d62728',
     pointRadius: 8, showLine: false}]},
    options: {scales: {x: {type: 'logarithmic', title: {display: true, text: 'samples/s needed'}},
                       y: {title: {display: true, text: 'job cost, $'}}}}});
} else {
  $('frontier-section').style.display = 'none';
}
)js";

// The page uses the window's width: the facts beside the plan, the charts two (or more) abreast
// on a wide screen and one above the other on a narrow one.
constexpr char kStyle[] = R"css(
body { font-family: sans-serif; margin: 20px 28px; color: #222; }
h1 { font-size: 22px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 0 0 8px; }
table { border-collapse: collapse; } th, td { padding: 3px 10px; text-align: left; border-bottom: 1px solid #ddd; }
.top { display: flex; flex-wrap: wrap; gap: 12px 40px; align-items: flex-start; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(520px, 100%), 1fr)); gap: 28px 36px; margin-top: 24px; }
.chart { position: relative; height: 300px; }
.stage { display: inline-block; border: 1px solid #888; border-radius: 6px; padding: 8px; margin: 4px; vertical-align: middle; font-size: 13px; }
.arrow { display: inline-block; font-size: 22px; vertical-align: middle; }
#report-check { display: none; }
)css";

}  // namespace

JobReport::JobReport(std::string job_dir, nlohmann::ordered_json plan)
    : job_dir_(std::move(job_dir)), path_(job_dir_ + "/report.html"), plan_(std::move(plan)) {
  plans_.push_back({{"seconds", 0.0}, {"plan", plan_}});
}

void JobReport::Running(nlohmann::ordered_json plan) {
  if (plan == plan_) return;
  plan_ = std::move(plan);
  plans_.push_back({{"seconds", last_seconds_}, {"plan", plan_}});
}

void JobReport::Progress(const launcher::JobProgress& p) {
  last_seconds_ = std::max(last_seconds_, p.seconds);
  if (p.eval.has_value()) {
    // A restart trains (and evaluates) again from its checkpoint: its evaluations replace those
    // made after it.
    while (!evals_.empty() && evals_.back()["step"].get<int64_t>() >= p.eval->step) {
      evals_.erase(evals_.size() - 1);
    }
    if (evals_.size() < kMaxPoints) {
      evals_.push_back({{"step", p.eval->step},
                        {"samples", p.eval->samples},
                        {"logloss", p.eval->logloss},
                        {"auc", p.eval->auc}});
    }
  } else if (!p.event.empty()) {
    events_.push_back({{"seconds", p.seconds}, {"text", p.event}});
  } else {
    nlohmann::ordered_json point = {
        {"seconds", p.seconds}, {"step", p.step}, {"samples", p.samples}, {"loss", p.loss}};
    if (!series_.empty()) {
      const double dt = p.seconds - series_.back()["seconds"].get<double>();
      const double dn = static_cast<double>(p.samples - series_.back()["samples"].get<int64_t>());
      if (dt > 0 && dn >= 0) point["samples_per_second"] = dn / dt;
    }
    // At most kMaxPoints, evenly spread: past it, every other point goes and the spacing
    // doubles, so that a long job's page stays as cheap to write as a short one's.
    if (series_.empty() || p.seconds - series_.back()["seconds"].get<double>() >= min_gap_) {
      series_.push_back(std::move(point));
    }
    if (series_.size() > kMaxPoints) {
      nlohmann::ordered_json thinned = nlohmann::ordered_json::array();
      for (size_t i = 0; i < series_.size(); i += 2) thinned.push_back(std::move(series_[i]));
      series_ = std::move(thinned);
      min_gap_ *= 2;
    }
    if (p.restarts > restarts_) {
      events_.push_back({{"seconds", p.seconds}, {"text", absl::StrCat("restart ", p.restarts)}});
      restarts_ = p.restarts;
    }
  }
  if (absl::Now() - last_write_ < absl::Seconds(5)) return;
  Write(nullptr, "running", "", true).IgnoreError();  // a view: the job goes on regardless
}

absl::Status JobReport::Finish(const nlohmann::ordered_json& metrics, const std::string& state,
                               const std::string& error) {
  return Write(metrics, state, error, false);
}

absl::Status JobReport::Write(const nlohmann::ordered_json& metrics, const std::string& state,
                              const std::string& error, bool refresh) {
  last_write_ = absl::Now();
  nlohmann::ordered_json data = {
      {"model", plan_.value("model", "")},
      {"state", state},
      {"error", error},
      {"updated", absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone())},
      {"plan", plan_},
      {"series", series_},
      {"events", events_},
      {"evals", evals_},
      {"plans", plans_},
      {"metrics", metrics},
      {"status", nullptr}};
  absl::StatusOr<launcher::JobStatus> status =
      launcher::ReadJobStatus(base::DefaultEnv(), job_dir_);
  if (status.ok()) {
    data["status"] =
        nlohmann::ordered_json::parse(launcher::JobStatusToJson(*status), nullptr, false);
  }
  return base::WriteFileAtomically(path_, Html(data, refresh));
}

namespace {

// One chart in the page's grid: its title and canvas `id`; `section` names the cell (for a
// script that hides it), `after` follows the canvas.
std::string ChartCell(absl::string_view id, absl::string_view title, absl::string_view section = "",
                      absl::string_view after = "") {
  return absl::StrCat("<section", section.empty() ? "" : absl::StrCat(" id=\"", section, "\""),
                      "><h2>", title, "</h2><div class=\"chart\"><canvas id=\"", id,
                      "\"></canvas></div>", after, "</section>\n");
}

// The page around a script: Chart.js inlined, `body`, then REPORT = `data` and `script`.
std::string Page(const nlohmann::ordered_json& data, bool refresh, absl::string_view title,
                 absl::string_view body, absl::string_view script) {
  // JSON inside a script element: "</" would end it.
  const std::string json = absl::StrReplaceAll(
      data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
      {{"</", "<\\/"}});
  const std::string_view chartjs = embedded::chart();
  return absl::StrCat(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
      refresh ? "<meta http-equiv=\"refresh\" content=\"5\">\n" : "", "<title>", title,
      "</title>\n<style>", kStyle, "</style>\n<script>",
      absl::string_view(chartjs.data(), chartjs.size()),
      "</script>\n</head><body>\n<h1 id=\"title\"></h1>\n", body,
      "<div id=\"report-check\"></div>\n<script>\nconst REPORT = ", json, ";\n", kPrelude, script,
      kCheck, "</script>\n</body></html>\n");
}

}  // namespace

std::string PlanReportHtml(const nlohmann::ordered_json& data) {
  return Page(data, false, "heterps plan",
              absl::StrCat("<div class=\"top\"><table id=\"facts\"></table>"
                           "<div><h2>The plan</h2><div id=\"pipeline\"></div></div></div>\n"
                           "<div class=\"grid\">",
                           ChartCell("costs", "Its cost beside the baselines'"),
                           ChartCell("frontier", "Cost against throughput: the frontier",
                                     "frontier-section"),
                           "</div>\n"),
              kPlanScript);
}

std::string JobReport::Html(const nlohmann::ordered_json& data, bool refresh) {
  return Page(
      data, refresh, "heterps job report",
      absl::StrCat(
          "<div class=\"top\"><table id=\"facts\"></table><div><h2>The plan</h2>"
          "<div id=\"pipeline\"></div>\n<div id=\"plans-section\"><h2>Plans the job ran</h2>"
          "<table id=\"plans\"></table></div></div></div>\n<div class=\"grid\">",
          ChartCell("loss", "Loss and AUC against samples"), ChartCell("throughput", "Throughput"),
          ChartCell("cost", "What the run cost"),
          ChartCell("stages", "Stages: predicted against measured time per batch"),
          ChartCell("replicas", "Where each replica's time goes"),
          ChartCell("tiers", "Parameter servers", "", "<table id=\"tier-table\"></table>"),
          "</div>\n<div id=\"links-section\"><h2>Between regions</h2><table id=\"links\">"
          "</table><p id=\"links-note\"></p></div>\n"),
      kScript);
}

}  // namespace heterps::tools
