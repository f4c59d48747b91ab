// The `heterps` Python package's native part (heterps._core): specs, plans and the Pareto frontier
// from the same C++ as the command line, and a job's status and metrics (python/README.md; tests:
// python/tests/).
//
//   import heterps
//   model = heterps.load_model("examples/models/dlrm-small.yaml")   # or a dict
//   cluster = heterps.load_cluster("examples/clusters/cloud.yaml")
//   plan = heterps.plan(model, cluster, throughput=1e6, scheduler="rl", time_limit=5)
//   plan.cost_usd, plan.optimality_gap, plan.stages[0]["type"]
//   plan.save("plan.json")                     # for heterps train --plan plan.json
//
// Errors become exceptions with the library's message: ValueError for bad input
// (InvalidArgument, OutOfRange), FileNotFoundError (NotFound), RuntimeError otherwise. Functions
// that search release the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedded/heterps_examples.h"
#include "heterps/base/file.h"
#include "heterps/base/numbers.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/profile.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/scheduler.h"

namespace py = pybind11;

namespace heterps::python {
namespace {

[[noreturn]] void Raise(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      throw py::value_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(message);
  }
}

template <typename T>
T Take(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

// A spec given as a path or as a dict (written out as JSON, which YAML reads as it is).
std::pair<std::string, std::string> SpecText(const py::object& spec, const char* what) {
  if (py::isinstance<py::dict>(spec)) {
    py::object dumps = py::module_::import("json").attr("dumps");
    return {dumps(spec).cast<std::string>(), absl::StrCat("<", what, " dict>")};
  }
  if (py::isinstance<py::str>(spec) || py::hasattr(spec, "__fspath__")) {
    const std::string path = py::str(py::module_::import("os").attr("fspath")(spec));
    return {Take(base::ReadTextFile(path)), path};
  }
  throw py::type_error(absl::StrCat(what, ": a path or a dict, not ",
                                    py::str(spec.get_type().attr("__name__")).cast<std::string>()));
}

struct Model {
  config::ModelSpec spec;
  std::string text;  // as read, for a job started from Python
};
struct Cluster {
  config::ClusterSpec spec;
  std::string text;
};

Model LoadModel(const py::object& spec, int64_t batch_size) {
  auto [text, source] = SpecText(spec, "model");
  Model model{Take(config::ParseModelSpec(text, source)), text};
  if (batch_size < 0) throw py::value_error("batch_size: must be positive (0: the spec's)");
  if (batch_size > 0) model.spec.batch_size = batch_size;
  return model;
}

Cluster LoadCluster(const py::object& spec) {
  if (spec.is_none()) {
    const std::string text(embedded::cloud());
    return Cluster{Take(config::ParseClusterSpec(text, "<embedded>/cloud.yaml")), text};
  }
  auto [text, source] = SpecText(spec, "cluster");
  return Cluster{Take(config::ParseClusterSpec(text, source)), text};
}

// A plan: its JSON (docs/plan_format.md) as a dict, with the usual fields as attributes.
struct Plan {
  std::string json;
  py::dict data;

  py::object Get(const char* key) const {
    if (data.contains(key)) return py::object(data[key]);
    return py::none();
  }
};

Plan MakePlan(const std::string& json) {
  Plan plan;
  plan.json = json;
  plan.data = py::module_::import("json").attr("loads")(json);
  return plan;
}

// "<heterps.Plan exact: $1,234.56 for the job, $12.30/hour, 3 stages, 1,000,000 samples/s>", or
// for a plan that meets no limit "<heterps.Plan auto: infeasible: <the reason>>".
std::string PlanRepr(const Plan& p) {
  const std::string scheduler = py::str(p.Get("scheduler")).cast<std::string>();
  if (!p.Get("feasible").cast<bool>()) {
    std::string why = "no reason given";
    const py::object infeasible = p.Get("infeasible");
    if (py::isinstance<py::dict>(infeasible) && infeasible.cast<py::dict>().contains("reason")) {
      why = py::str(infeasible["reason"]).cast<std::string>();
    }
    return absl::StrCat("<heterps.Plan ", scheduler, ": infeasible: ", why, ">");
  }
  const size_t stages = py::len(p.Get("stages"));
  return absl::StrCat("<heterps.Plan ", scheduler, ": ",
                      base::HumanUsd(p.Get("cost_usd").cast<double>()), " for the job, ",
                      base::HumanUsd(p.Get("cost_per_hour_usd").cast<double>()), "/hour, ", stages,
                      stages == 1 ? " stage, " : " stages, ",
                      base::WithCommas(p.Get("throughput").cast<double>()), " samples/s>");
}

struct PlanRequest {
  double throughput;
  double samples;
  std::string scheduler;
  double time_limit;
  uint64_t seed;
  int64_t max_plans;
  std::string profile;
  std::string data_region;  // empty: no residency rule (cost::Workload::data_region)
  bool activations_may_cross = false;  // cost::Workload::activations_may_cross
};

// Plans `model` on `cluster` (GIL released while it searches).
std::string Schedule(const Model& model, const Cluster& cluster, const PlanRequest& r) {
  if (!(r.throughput > 0) || !std::isfinite(r.throughput)) {
    throw py::value_error(
        absl::StrCat("throughput: must be a positive number, got ", r.throughput));
  }
  if (!(r.time_limit > 0) || !std::isfinite(r.time_limit)) {
    throw py::value_error(absl::StrCat("time_limit: must be positive seconds, got ", r.time_limit));
  }
  if (r.max_plans < 0) throw py::value_error("max_plans: must be >= 0 (0: the default)");
  if (!(r.samples > 0) || !std::isfinite(r.samples)) {
    throw py::value_error("samples: must be a positive number");
  }
  absl::StatusOr<std::string> json;
  {
    py::gil_scoped_release release;
    json = [&]() -> absl::StatusOr<std::string> {
      std::optional<cost::Profile> profile;
      if (!r.profile.empty()) {
        absl::StatusOr<cost::Profile> loaded = cost::LoadProfile(r.profile);
        if (!loaded.ok()) return loaded.status();
        profile = *std::move(loaded);
      }
      cost::Workload workload{r.throughput, r.samples};
      workload.data_region = r.data_region;
      workload.activations_may_cross = r.activations_may_cross;
      absl::StatusOr<cost::CostModel> cost_model = cost::CostModel::Create(
          model.spec, cluster.spec, workload, profile ? &*profile : nullptr);
      if (!cost_model.ok()) return cost_model.status();
      sched::SchedulerRegistry registry = sched::DefaultSchedulers();
      absl::StatusOr<std::unique_ptr<sched::Scheduler>> scheduler = registry.Create(r.scheduler);
      if (!scheduler.ok()) return absl::InvalidArgumentError(scheduler.status().message());
      sched::SchedulerOptions options;
      options.seed = r.seed;
      options.time_limit_seconds = r.time_limit;
      options.max_plans = r.max_plans;
      absl::StatusOr<sched::PricedPlan> plan = (*scheduler)->Schedule(*cost_model, options);
      if (!plan.ok()) return plan.status();
      return sched::PlanToJson(*cost_model, *plan);
    }();
  }
  return Take(std::move(json));
}

}  // namespace
}  // namespace heterps::python

PYBIND11_MODULE(_core, m) {
  using namespace heterps::python;
  m.doc() = "heterps: plan and run sparse deep-learning training on heterogeneous hardware";

  py::class_<Model>(m, "Model", "A model spec (docs/config.md)")
      .def_property_readonly("name", [](const Model& x) { return x.spec.name; })
      .def_property_readonly("batch_size", [](const Model& x) { return x.spec.batch_size; })
      .def_property_readonly("source", [](const Model& x) { return x.spec.source; })
      .def_readonly("text", &Model::text)
      .def_property_readonly("layers",
                             [](const Model& x) {
                               std::vector<std::string> names;
                               for (const auto& layer : x.spec.layers) names.push_back(layer.name);
                               return names;
                             })
      .def("__repr__", [](const Model& x) {
        return absl::StrCat("<heterps.Model ", x.spec.name, ": ", x.spec.layers.size(),
                            " layers, batch ", x.spec.batch_size, ">");
      });

  py::class_<Cluster>(m, "Cluster", "A cluster spec: the resource types one may rent")
      .def_property_readonly("name", [](const Cluster& x) { return x.spec.name; })
      .def_property_readonly("source", [](const Cluster& x) { return x.spec.source; })
      .def_readonly("text", &Cluster::text)
      .def_property_readonly("types",
                             [](const Cluster& x) {
                               std::vector<std::string> names;
                               for (const auto& type : x.spec.types) names.push_back(type.name);
                               return names;
                             })
      .def("__repr__", [](const Cluster& x) {
        return absl::StrCat("<heterps.Cluster ", x.spec.name, ": ", x.spec.types.size(), " types>");
      });

  py::class_<Plan>(m, "Plan", "A plan (docs/plan_format.md): `data` holds all of its JSON")
      .def_readonly("data", &Plan::data)
      .def_readonly("json", &Plan::json)
      .def_property_readonly("feasible", [](const Plan& p) { return p.Get("feasible"); })
      .def_property_readonly("certified_optimal",
                             [](const Plan& p) { return p.Get("certified_optimal"); })
      .def_property_readonly("scheduler", [](const Plan& p) { return p.Get("scheduler"); })
      .def_property_readonly("cost_usd", [](const Plan& p) { return p.Get("cost_usd"); })
      .def_property_readonly("cost_per_hour_usd",
                             [](const Plan& p) { return p.Get("cost_per_hour_usd"); })
      .def_property_readonly("throughput", [](const Plan& p) { return p.Get("throughput"); })
      .def_property_readonly("lower_bound_usd",
                             [](const Plan& p) { return p.Get("lower_bound_usd"); })
      .def_property_readonly("optimality_gap",
                             [](const Plan& p) { return p.Get("optimality_gap"); })
      .def_property_readonly("stages", [](const Plan& p) { return p.Get("stages"); })
      .def(
          "save",
          [](const Plan& p, const std::string& path) {
            absl::Status s = heterps::base::WriteFileAtomically(path, p.json + "\n");
            if (!s.ok()) Raise(s);
          },
          py::arg("path"), "Writes the plan's JSON, for `heterps train --plan`")
      .def("__repr__", &PlanRepr);

  m.def("load_model", &LoadModel, py::arg("spec"), py::arg("batch_size") = 0,
        "A model spec from a YAML file's path or from a dict of the same fields; batch_size > 0 "
        "replaces the spec's (as `heterps train --batch` does: pass the same to train)");
  m.def("load_cluster", &LoadCluster, py::arg("spec") = py::none(),
        "A cluster spec from a path or a dict; None: the embedded cloud catalog");
  m.def(
      "schedulers",
      [] {
        std::vector<std::pair<std::string, std::string>> out;
        heterps::sched::SchedulerRegistry registry = heterps::sched::DefaultSchedulers();
        for (const std::string& name : registry.Names()) {
          out.emplace_back(name, registry.Description(name));
        }
        return out;
      },
      "The schedulers' names and descriptions");
  m.def(
      "plan",
      [](const Model& model, const Cluster& cluster, double throughput,
         const std::string& scheduler, double time_limit, uint64_t seed, int64_t max_plans,
         double samples, const std::string& profile, const std::string& data_region,
         bool activations_may_cross) {
        if (activations_may_cross && data_region.empty()) {
          throw py::value_error("activations_may_cross: needs data_region");
        }
        return MakePlan(Schedule(model, cluster,
                                 {throughput, samples, scheduler, time_limit, seed, max_plans,
                                  profile, data_region, activations_may_cross}));
      },
      py::arg("model"), py::arg("cluster"), py::kw_only(), py::arg("throughput"),
      py::arg("scheduler") = "auto", py::arg("time_limit") = 60.0, py::arg("seed") = 1,
      py::arg("max_plans") = 0, py::arg("samples") = 4373472329.0, py::arg("profile") = "",
      py::arg("data_region") = "", py::arg("activations_may_cross") = false,
      "The cheapest plan that reaches `throughput` samples/s (an infeasible plan says why in "
      "data['infeasible']['reason']); `data_region`: the region the data is kept in, where "
      "every stage and the servers then run (docs/cost_model.md, \"Data residency\"); "
      "`activations_may_cross`: the stages past the raw features may run elsewhere");
  m.def(
      "pareto",
      [](const Model& model, const Cluster& cluster, double throughput, double start, int points,
         const std::string& scheduler, double time_limit, uint64_t seed, double samples,
         const std::string& data_region, bool activations_may_cross) {
        if (points < 2) throw py::value_error("points: at least 2");
        if (activations_may_cross && data_region.empty()) {
          throw py::value_error("activations_may_cross: needs data_region");
        }
        if (!(throughput > 0)) throw py::value_error("throughput: must be positive");
        const double from = start > 0 ? start : throughput / 100;
        if (!(from < throughput)) throw py::value_error("start: must be below throughput");
        std::vector<Plan> frontier;
        for (int i = 0; i < points; ++i) {
          const double limit = from * std::pow(throughput / from, i / double(points - 1));
          frontier.push_back(
              MakePlan(Schedule(model, cluster,
                                {limit, samples, scheduler, time_limit, seed, 0, std::string(),
                                 data_region, activations_may_cross})));
        }
        return frontier;
      },
      py::arg("model"), py::arg("cluster"), py::kw_only(), py::arg("throughput"),
      py::arg("start") = 0.0, py::arg("points") = 10, py::arg("scheduler") = "auto",
      py::arg("time_limit") = 10.0, py::arg("seed") = 1, py::arg("samples") = 4373472329.0,
      py::arg("data_region") = "", py::arg("activations_may_cross") = false,
      "The cheapest plan at `points` limits spaced geometrically from `start` (default: "
      "throughput / 100) to `throughput`: the cost/throughput frontier; `data_region` and "
      "`activations_may_cross` as plan's");
}
