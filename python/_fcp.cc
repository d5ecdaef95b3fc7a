// pybind11 bindings of the fcp planner (module `fcp._fcp`). Bindings only:
// plain structs bound field by field, free functions bound 1:1, blocking calls
// release the GIL, and one exception translator maps C++ errors to Python
// (InputError / std::invalid_argument -> ValueError with the field name first,
// any other std::exception -> RuntimeError). The user-facing API
// (fcp.Scheduler, fcp.presets) is Python in python/fcp/__init__.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "fcp/cost_coefficients.h"
#include "fcp/io.h"
#include "fcp/plan_check.h"
#include "fcp/presets.h"
#include "fcp/profiler.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
#include "fcp/types.h"
#include "fcp/unknown_names.h"
#include "fcp/version.h"

namespace py = pybind11;

namespace {

// The lengths and eta arrays every binding takes, converted by pybind11.
using LengthArray =
    py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using EtaArray = std::optional<
    py::array_t<double, py::array::c_style | py::array::forcecast>>;
using VisionArray = std::optional<
    py::array_t<int64_t, py::array::c_style | py::array::forcecast>>;

// Builds request.sequences from int64/float64 arrays (already converted and
// range-checked by pybind11's array_t casters). Validation of the values is
// MakePlan's (InputError "sequences[i]: ...").
std::vector<fcp::Sequence> SequencesFromArrays(LengthArray lengths,
                                               EtaArray etas,
                                               VisionArray visions = {}) {
  if (lengths.ndim() != 1)
    throw fcp::InputError("sequences", "lengths must be one-dimensional");
  const auto n = static_cast<size_t>(lengths.shape(0));
  if (etas && (etas->ndim() != 1 || static_cast<size_t>(etas->shape(0)) != n)) {
    throw fcp::InputError(
        "eta", "must have one value per sequence (" + std::to_string(n) + ")");
  }
  if (visions &&
      (visions->ndim() != 1 || static_cast<size_t>(visions->shape(0)) != n)) {
    throw fcp::InputError(
        "vision_tokens",
        "must have one value per sequence (" + std::to_string(n) + ")");
  }
  std::vector<fcp::Sequence> out(n);
  const int64_t* len = lengths.data();
  const double* eta = etas ? etas->data() : nullptr;
  const int64_t* vision = visions ? visions->data() : nullptr;
  for (size_t i = 0; i < n; ++i) {
    out[i].length_tokens = len[i];
    out[i].eta = eta ? eta[i] : 0.0;
    out[i].vision_tokens = vision ? vision[i] : 0;
  }
  return out;
}

// Sets the sequences from the arrays, validates the request and checks `plan`
// against it before anything is indexed by the plan: a plan from outside
// (from_dict, unpickling) with out-of-range ranks must be a ValueError, not a
// crash.
void CheckPlanFor(fcp::PlanRequest& request, const LengthArray& lengths,
                  const EtaArray& etas, const VisionArray& visions,
                  const fcp::Plan& plan) {
  request.sequences = SequencesFromArrays(lengths, etas, visions);
  fcp::ValidateRequest(request);
  fcp::CheckPlanShape(request, plan);
}

}  // namespace

// Long because: the bindings, one def or class_ per exposed API; pybind11 wants
// them in the module body.
PYBIND11_MODULE(_fcp, m) {
  m.doc() = "fcp planner bindings (see the fcp package for the Python API)";
  m.attr("__version__") = FCP_VERSION_STRING;  // CMake's project(VERSION)

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const fcp::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::out_of_range& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::enum_<fcp::CommKind>(m, "CommKind")
      .value("RING", fcp::CommKind::kRing)
      .value("ALL_TO_ALL", fcp::CommKind::kAllToAll);
  py::enum_<fcp::PlanStatus>(m, "PlanStatus")
      .value("OK", fcp::PlanStatus::kOk)
      .value("INFEASIBLE", fcp::PlanStatus::kInfeasible);
  py::enum_<fcp::Dealing>(m, "Dealing")
      .value("BALANCED", fcp::Dealing::kBalanced)
      .value("LOADER", fcp::Dealing::kLoader);

  py::class_<fcp::Sequence>(m, "Sequence")
      .def(py::init<>())
      .def(py::init(
               [](int64_t length_tokens, double eta, int64_t vision_tokens) {
                 return fcp::Sequence{length_tokens, eta, vision_tokens};
               }),
           py::arg("length_tokens"), py::arg("eta") = 0.0,
           py::arg("vision_tokens") = 0)
      .def_readwrite("length_tokens", &fcp::Sequence::length_tokens)
      .def_readwrite("eta", &fcp::Sequence::eta)
      .def_readwrite("vision_tokens", &fcp::Sequence::vision_tokens)
      .def("__repr__", [](const fcp::Sequence& s) {
        return "Sequence(length_tokens=" + std::to_string(s.length_tokens) +
               ", eta=" + py::repr(py::float_(s.eta)).cast<std::string>() +
               ", vision_tokens=" + std::to_string(s.vision_tokens) + ")";
      });

  py::class_<fcp::Cluster>(m, "Cluster")
      .def(py::init<>())
      .def(py::init([](int num_ranks, int ranks_per_node) {
             return fcp::Cluster{num_ranks, ranks_per_node};
           }),
           py::arg("num_ranks"), py::arg("ranks_per_node"))
      .def_readwrite("num_ranks", &fcp::Cluster::num_ranks)
      .def_readwrite("ranks_per_node", &fcp::Cluster::ranks_per_node)
      .def("__repr__", [](const fcp::Cluster& c) {
        return "Cluster(num_ranks=" + std::to_string(c.num_ranks) +
               ", ranks_per_node=" + std::to_string(c.ranks_per_node) + ")";
      });

  py::class_<fcp::CostModel> cost_model(m, "CostModel");
  cost_model.def(py::init<>())
      .def("to_json", &fcp::CostModelToJson, py::arg("indent") = 2);
  // The fields and their description come from the one table
  // (fcp/cost_coefficients.h); fcp.CostModel's Python helpers read
  // cost_coefficients() rather than a list of their own.
  py::list coefficients;
  for (const fcp::CostCoefficient& c : fcp::kCostCoefficients) {
    cost_model.def_readwrite(c.name.data(), c.member);
    py::dict entry;
    entry["name"] = std::string(c.name);
    entry["unit"] = std::string(c.unit);
    entry["meaning"] = std::string(c.meaning);
    entry["v2"] = c.v2;
    entry["fitted"] = c.fitted;
    entry["positive"] = c.positive;
    coefficients.append(entry);
  }
  m.attr("cost_coefficients") = coefficients;

  py::class_<fcp::ModelShape>(m, "ModelShape")
      .def(py::init<>())
      .def_readwrite("name", &fcp::ModelShape::name)
      .def_readwrite("layers", &fcp::ModelShape::layers)
      .def_readwrite("hidden", &fcp::ModelShape::hidden)
      .def_readwrite("q_heads", &fcp::ModelShape::q_heads)
      .def_readwrite("kv_heads", &fcp::ModelShape::kv_heads)
      .def_readwrite("head_dim", &fcp::ModelShape::head_dim)
      .def_readwrite("ffn", &fcp::ModelShape::ffn)
      .def_readwrite("vocab", &fcp::ModelShape::vocab)
      .def_readwrite("vision_layers", &fcp::ModelShape::vision_layers)
      .def_readwrite("vision_hidden", &fcp::ModelShape::vision_hidden);

  py::class_<fcp::GroupPlan>(m, "GroupPlan")
      .def(py::init<>())
      .def_readwrite("ranks", &fcp::GroupPlan::ranks)
      .def_readwrite("sequences", &fcp::GroupPlan::sequences)
      .def_readwrite("comm", &fcp::GroupPlan::comm)
      .def_readwrite("est_ms", &fcp::GroupPlan::est_ms)
      .def_readwrite("mem_bytes", &fcp::GroupPlan::mem_bytes)
      .def_property_readonly("degree", &fcp::GroupPlan::degree);

  py::class_<fcp::MicroBatchPlan>(m, "MicroBatchPlan")
      .def(py::init<>())
      .def_readwrite("groups", &fcp::MicroBatchPlan::groups)
      .def_readwrite("est_ms", &fcp::MicroBatchPlan::est_ms);

  py::class_<fcp::Plan>(m, "Plan")
      .def(py::init<>())
      .def_readwrite("strategy", &fcp::Plan::strategy)
      .def_readwrite("num_ranks", &fcp::Plan::num_ranks)
      .def_readwrite("status", &fcp::Plan::status)
      .def_readwrite("message", &fcp::Plan::message)
      .def_readwrite("infeasible_sequence", &fcp::Plan::infeasible_sequence)
      .def_readwrite("micro_batches", &fcp::Plan::micro_batches)
      .def_readwrite("est_ms", &fcp::Plan::est_ms)
      .def_readwrite("lower_bound_ms", &fcp::Plan::lower_bound_ms)
      .def_readwrite("solver_ms", &fcp::Plan::solver_ms)
      .def_readwrite("notes", &fcp::Plan::notes)
      .def_property_readonly("gap", &fcp::Plan::gap)
      .def("to_json", &fcp::PlanToJson, py::arg("indent") = 2,
           "The plan as `fcp plan --format json` prints it (indent < 0: one "
           "line).");

  // Learning from measured steps (fcp.Scheduler.observe).
  py::class_<fcp::FitSample>(m, "FitSample")
      .def_readonly("degree", &fcp::FitSample::degree)
      .def_readonly("comm", &fcp::FitSample::comm)
      .def_readonly("total_s", &fcp::FitSample::total_s);
  py::class_<fcp::Recalibration>(m, "Recalibration")
      .def_readonly("cost_model", &fcp::Recalibration::cost_model)
      .def_readonly("scale", &fcp::Recalibration::scale)
      .def_readonly("samples", &fcp::Recalibration::samples)
      .def_readonly("rms_rel_before", &fcp::Recalibration::rms_rel_before)
      .def_readonly("rms_rel_after", &fcp::Recalibration::rms_rel_after);
  m.attr("timing_coefficients") = std::vector<std::string>(
      std::begin(fcp::kTimingCoefficients), std::end(fcp::kTimingCoefficients));

  py::class_<fcp::PlanRequest>(m, "PlanRequest")
      .def(py::init<>())
      .def_readwrite("cluster", &fcp::PlanRequest::cluster)
      .def_readwrite("cost", &fcp::PlanRequest::cost)
      .def_readwrite("sequences", &fcp::PlanRequest::sequences)
      .def_readwrite("model", &fcp::PlanRequest::model)
      .def("__copy__", [](const fcp::PlanRequest& r) { return r; })
      .def("__deepcopy__",
           [](const fcp::PlanRequest& r, py::dict) { return r; });

  py::class_<fcp::PlanOptions>(m, "PlanOptions")
      .def(py::init<>())
      .def_readwrite("strategy", &fcp::PlanOptions::strategy)
      .def_readwrite("cp_degree", &fcp::PlanOptions::cp_degree)
      .def_readwrite("max_seqlen_per_rank",
                     &fcp::PlanOptions::max_seqlen_per_rank)
      .def_readwrite("capacity_tokens", &fcp::PlanOptions::capacity_tokens)
      .def_readwrite("time_limit_s", &fcp::PlanOptions::time_limit_s)
      .def_readwrite("seed", &fcp::PlanOptions::seed)
      .def_readwrite("dealing", &fcp::PlanOptions::dealing);

  py::class_<fcp::BatchInput>(m, "BatchInput")
      .def_readwrite("request", &fcp::BatchInput::request)
      .def_readwrite("cluster_name", &fcp::BatchInput::cluster_name)
      .def_readwrite("model_name", &fcp::BatchInput::model_name)
      .def_property_readonly("cost_model_sources",
                             [](const fcp::BatchInput& b) {
                               return fcp::CostSourcesNote(b.cost_sources);
                             });

  py::class_<fcp::ClusterPreset>(m, "ClusterPreset")
      .def_readonly("name", &fcp::ClusterPreset::name)
      .def_readonly("num_ranks", &fcp::ClusterPreset::num_ranks)
      .def_readonly("ranks_per_node", &fcp::ClusterPreset::ranks_per_node)
      .def_readonly("peak_flops", &fcp::ClusterPreset::peak_flops)
      .def_readonly("mem_bytes", &fcp::ClusterPreset::mem_bytes)
      .def_readonly("bw_intra_node", &fcp::ClusterPreset::bw_intra_node)
      .def_readonly("bw_inter_node", &fcp::ClusterPreset::bw_inter_node);

  py::class_<fcp::ModelPreset>(m, "ModelPreset")
      .def_readonly("shape", &fcp::ModelPreset::shape)
      .def_readonly("multimodal", &fcp::ModelPreset::multimodal)
      .def_readonly("vision_tokens_per_tile",
                    &fcp::ModelPreset::vision_tokens_per_tile)
      .def("params", &fcp::ModelPreset::params)
      .def("vision_params", &fcp::ModelPreset::vision_params);

  m.def("strategy_names", &fcp::StrategyNames,
        "Registered strategies, default first.");
  m.def("unknown_strategy_message", &fcp::UnknownStrategyMessage,
        py::arg("name"),
        "Why a strategy name is not registered: the known names, or the "
        "missing library.");
  m.def("model_presets", &fcp::ModelPresets, py::return_value_policy::copy);
  m.def("cluster_presets", &fcp::ClusterPresets, py::return_value_policy::copy);
  m.def("derive_cost_model", &fcp::DeriveCostModel, py::arg("model"),
        py::arg("cluster"), py::arg("vision_frozen") = false);
  m.def("parse_batch_json", &fcp::ParseBatchJson, py::arg("text"),
        "Parses `fcp plan`'s input JSON; ValueError naming the field.");
  m.def(
      "parse_cost_model_json",
      [](std::string_view text, const fcp::CostModel& base) {
        return fcp::ParseCostModelJson(text, base);
      },
      py::arg("text"), py::arg("base"));
  m.def("plan_to_json", &fcp::PlanToJson, py::arg("plan"),
        py::arg("indent") = 2);
  m.def("validate_request", &fcp::ValidateRequest, py::arg("request"),
        py::call_guard<py::gil_scoped_release>());
  m.def("validate_plan", &fcp::ValidatePlan, py::arg("request"),
        py::arg("plan"), py::call_guard<py::gil_scoped_release>());
  m.def("lower_bound_ms", &fcp::LowerBoundMs, py::arg("request"),
        py::arg("all_to_all") = false,
        py::call_guard<py::gil_scoped_release>());
  m.def("make_plan", &fcp::MakePlan, py::arg("request"),
        py::arg("options") = fcp::PlanOptions{},
        py::call_guard<py::gil_scoped_release>(),
        "MakePlan; releases the GIL while planning.");
  m.def("sequences_from_arrays", &SequencesFromArrays, py::arg("lengths"),
        py::arg("eta") = py::none(), py::arg("vision_tokens") = py::none());
  // MakePlan on `request` with its sequences replaced by the arrays; the
  // conversion holds the GIL, planning releases it.
  m.def(
      "make_plan_lengths",
      [](fcp::PlanRequest request, const fcp::PlanOptions& options,
         LengthArray lengths, EtaArray etas,
         std::optional<std::vector<std::vector<int>>> existing_communicators,
         VisionArray visions) {
        request.sequences = SequencesFromArrays(lengths, etas, visions);
        // The rank sets the runtime holds now (per call); what creating one
        // costs comes with the request (Scheduler(communicators=...)).
        if (existing_communicators) {
          if (!request.communicators) {
            throw fcp::InputError(
                "existing_communicators",
                "the Scheduler was made without communicators "
                "(communicators={\"create_s\": S})");
          }
          request.communicators->existing = std::move(*existing_communicators);
        }
        py::gil_scoped_release release;
        return fcp::MakePlan(request, options);
      },
      py::arg("request"), py::arg("options"), py::arg("lengths"),
      py::arg("eta") = py::none(),
      py::arg("existing_communicators") = py::none(),
      py::arg("vision_tokens") = py::none());
  // MeasuredGroupSamples for `plan` of `request` with its sequences replaced
  // by the arrays.
  m.def(
      "measured_group_samples",
      [](fcp::PlanRequest request, LengthArray lengths, EtaArray etas,
         const fcp::Plan& plan, const std::vector<double>& group_times_s,
         VisionArray visions) {
        request.sequences = SequencesFromArrays(lengths, etas, visions);
        fcp::ValidateRequest(request);
        return fcp::MeasuredGroupSamples(request, plan, group_times_s);
      },
      py::arg("request"), py::arg("lengths"), py::arg("eta"), py::arg("plan"),
      py::arg("group_times_s"), py::arg("vision_tokens") = py::none());
  m.def(
      "recalibrate",
      [](const fcp::CostModel& prior,
         const std::vector<fcp::FitSample>& samples, double prior_sigma,
         double measurement_sigma, std::optional<fcp::ModelShape> model) {
        fcp::RecalibrationOptions options;
        options.prior_sigma = prior_sigma;
        options.measurement_sigma = measurement_sigma;
        options.model = std::move(model);
        py::gil_scoped_release release;
        return fcp::RecalibrateCostModel(prior, samples, options);
      },
      py::arg("prior"), py::arg("samples"), py::arg("prior_sigma"),
      py::arg("measurement_sigma"), py::arg("model") = py::none());
  m.def(
      "evaluate_plan",
      [](fcp::PlanRequest request, LengthArray lengths, EtaArray etas,
         fcp::Plan plan, VisionArray visions) {
        CheckPlanFor(request, lengths, etas, visions, plan);
        fcp::EvaluatePlan(request, plan);
        return plan;
      },
      py::arg("request"), py::arg("lengths"), py::arg("eta"), py::arg("plan"),
      py::arg("vision_tokens") = py::none(),
      "The plan with every estimate recomputed under request's cost model.");
  m.def(
      "check_plan",
      [](fcp::PlanRequest request, LengthArray lengths, EtaArray etas,
         const fcp::Plan& plan, VisionArray visions) {
        CheckPlanFor(request, lengths, etas, visions, plan);
      },
      py::arg("request"), py::arg("lengths"), py::arg("eta"), py::arg("plan"),
      py::arg("vision_tokens") = py::none(),
      "CheckPlanShape of `plan` for `request` with these sequences: ValueError "
      "naming the field (plan.micro_batches[m].groups[g].ranks[i], ...).");

  // --- Measured profiles and plan replay (fcp.profile_torch, fcp.replay) ---
  py::class_<fcp::GroupLoad>(m, "GroupLoad")
      .def(py::init<>())
      .def_readwrite("sum_tokens", &fcp::GroupLoad::sum_tokens)
      .def_readwrite("sum_attn", &fcp::GroupLoad::sum_attn)
      .def_readwrite("sum_attn_tokens", &fcp::GroupLoad::sum_attn_tokens)
      .def_readwrite("sum_vision", &fcp::GroupLoad::sum_vision)
      .def("add", &fcp::GroupLoad::Add, py::arg("sequence"));
  // A FitSample from Python (NaN = not measured); `across_nodes` picks the
  // inter-node step latency (gamma_inter); `all_to_all` makes it a Ulysses
  // sample (bw_bytes_per_s its all-to-all bandwidth).
  m.def(
      "make_fit_sample",
      [](const fcp::GroupLoad& load, int degree, double bw_bytes_per_s,
         bool across_nodes, double compute_s, double comm_s, double total_s,
         const std::string& label, bool all_to_all) {
        fcp::FitSample s;
        s.load = load;
        s.degree = degree;
        s.bw_bytes_per_s = bw_bytes_per_s;
        s.link = across_nodes ? fcp::Link::kInterNode : fcp::Link::kIntraNode;
        s.comm = all_to_all ? fcp::CommKind::kAllToAll : fcp::CommKind::kRing;
        s.compute_s = compute_s;
        s.comm_s = comm_s;
        s.total_s = total_s;
        s.label = label;
        return s;
      },
      py::arg("load"), py::arg("degree"), py::arg("bw_bytes_per_s"),
      py::arg("across_nodes") = false, py::arg("compute_s") = std::nan(""),
      py::arg("comm_s") = std::nan(""), py::arg("total_s") = std::nan(""),
      py::arg("label") = "", py::arg("all_to_all") = false);
  // FitCostCoefficients(samples).Apply(base): the profiler's fit; `model`
  // (head counts) is needed for all-to-all samples.
  m.def(
      "fit_cost_model",
      [](const std::vector<fcp::FitSample>& samples, const fcp::CostModel& base,
         std::optional<fcp::ModelShape> model) {
        fcp::FitOptions options;
        options.model = std::move(model);
        py::gil_scoped_release release;
        return fcp::FitCostCoefficients(samples, options).Apply(base);
      },
      py::arg("samples"), py::arg("base"), py::arg("model") = py::none());
  // FitMeasuredProfile: returns (table, json, cost_model) as `fcp profile`
  // prints and writes them.
  m.def(
      "fit_measured_profile",
      [](const std::string& target, const std::string& model,
         const std::string& hardware, const std::string& transport,
         const std::vector<fcp::FitSample>& samples,
         const std::vector<std::string>& what, const fcp::CostModel& base,
         double heldout_fraction, uint64_t seed, double wall_s,
         std::optional<fcp::ModelShape> model_shape) {
        fcp::MeasuredProfile mp{target,
                                model,
                                hardware,
                                transport,
                                samples,
                                what,
                                base,
                                heldout_fraction,
                                seed,
                                wall_s,
                                std::move(model_shape)};
        fcp::ProfileReport rep;
        {
          py::gil_scoped_release release;
          rep = fcp::FitMeasuredProfile(mp);
        }
        return py::make_tuple(fcp::ProfileReportToTable(rep),
                              fcp::ProfileReportToJson(rep), rep.cost_model);
      },
      py::arg("target"), py::arg("model"), py::arg("hardware"),
      py::arg("transport"), py::arg("samples"), py::arg("what"),
      py::arg("base"), py::arg("heldout_fraction") = 0.25, py::arg("seed") = 1,
      py::arg("wall_s") = 0.0, py::arg("model_shape") = py::none());
  // The cost model's parts of one ring group: (attn_s, compute_s, comm_s,
  // total_s).
  m.def(
      "group_time_parts",
      [](const fcp::CostModel& cm, const fcp::GroupLoad& load, int degree,
         bool across_nodes) {
        const fcp::GroupTimeParts p = fcp::GroupTimePartsS(
            cm, load, degree,
            across_nodes ? fcp::Link::kInterNode : fcp::Link::kIntraNode);
        return py::make_tuple(p.attn_s, p.compute_s, p.comm_s, p.total_s);
      },
      py::arg("cost_model"), py::arg("load"), py::arg("degree"),
      py::arg("across_nodes") = false);
  m.def("all_to_all_group_time_s", &fcp::AllToAllGroupTimeS,
        py::arg("cost_model"), py::arg("shape"), py::arg("load"),
        py::arg("degree"), py::arg("bw_bytes_per_s"));
  // The same in parts: (attn_s, compute_s, comm_s, total_s).
  m.def(
      "all_to_all_group_time_parts",
      [](const fcp::CostModel& cm, const fcp::ModelShape& shape,
         const fcp::GroupLoad& load, int degree, double bw_bytes_per_s) {
        const fcp::GroupTimeParts p = fcp::AllToAllGroupTimePartsS(
            cm, shape, load, degree, bw_bytes_per_s);
        return py::make_tuple(p.attn_s, p.compute_s, p.comm_s, p.total_s);
      },
      py::arg("cost_model"), py::arg("shape"), py::arg("load"),
      py::arg("degree"), py::arg("bw_bytes_per_s"));
  m.def(
      "all_to_all_bandwidth_on_ranks",
      [](const fcp::CostModel& cm, const fcp::Cluster& cluster,
         const std::vector<int>& ranks) {
        return fcp::AllToAllBandwidthOnRanks(cm, cluster, ranks);
      },
      py::arg("cost_model"), py::arg("cluster"), py::arg("ranks"));
  // ListScheduleMs: the makespan (ms) of the micro-batches' groups, each
  // running for its est_ms, as the planner and the simulator compose them.
  m.def(
      "list_schedule_ms",
      [](int num_ranks, const std::vector<fcp::MicroBatchPlan>& micro_batches) {
        return fcp::ListScheduleMs(num_ranks, micro_batches);
      },
      py::arg("num_ranks"), py::arg("micro_batches"));
  // The simulator on one plan: (iter_s, compute_s, group times in plan order,
  // NaN for groups that did not run); ValueError when the plan does not fit
  // the simulated memory ("plan: ...").
  m.def(
      "simulate_plan",
      [](const std::string& model, const std::string& cluster, int num_ranks,
         const std::string& recompute, const fcp::Plan& plan,
         LengthArray lengths, EtaArray etas, VisionArray visions) {
        const fcp::ModelPreset* mp = fcp::FindModelPreset(model);
        if (!mp)
          throw fcp::InputError("model",
                                "unknown model preset '" + model + "'");
        const fcp::ClusterPreset* cp = fcp::FindClusterPreset(cluster);
        if (!cp)
          throw fcp::InputError("cluster",
                                "unknown cluster preset '" + cluster + "'");
        fcp::sim::HardwareModel hw =
            fcp::sim::MakeHardwareModel(*mp, *cp, num_ranks);
        hw.recompute = fcp::sim::ParseRecompute(recompute);
        const std::vector<fcp::Sequence> seqs =
            SequencesFromArrays(lengths, etas, visions);
        py::gil_scoped_release release;
        const fcp::sim::SimResult r = fcp::sim::SimulatePlan(hw, plan, seqs);
        if (r.oom)
          throw fcp::InputError(
              "plan", "out of memory in the simulator: " + r.oom_message);
        return std::make_tuple(r.iter_s, r.compute_s,
                               fcp::sim::MeasuredGroupTimesS(plan, r));
      },
      py::arg("model"), py::arg("cluster"), py::arg("num_ranks"),
      py::arg("recompute"), py::arg("plan"), py::arg("lengths"),
      py::arg("eta") = py::none(), py::arg("vision_tokens") = py::none());
}
