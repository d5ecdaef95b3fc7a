// ParsePlanJson: a plan as `fcp plan --format json` prints it, read back for
// `fcp simulate --plan` (plans made elsewhere). Structural checks only; the
// estimates in the text are ignored and recomputed.
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "fcp/plan_check.h"

namespace fcp {
namespace {

using nlohmann::json;

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

const json& Need(const json& obj, const char* key, const std::string& field) {
  if (!obj.contains(key)) throw InputError(field + "." + key, "missing");
  return obj[key];
}

int64_t IntIn(const json& j, const std::string& field, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) throw InputError(field, "must be an integer");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) {
    throw InputError(field, "must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  }
  return v;
}

// A JSON array of int-range integers (ranges are CheckPlanShape's).
std::vector<int> IntList(const json& j, const std::string& field) {
  if (!j.is_array()) throw InputError(field, "must be an array");
  std::vector<int> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    out.push_back(static_cast<int>(IntIn(
        j[i], field + "[" + std::to_string(i) + "]", -kMaxInt - 1, kMaxInt)));
  }
  return out;
}

}  // namespace

// Long because: the plan's fields in document order, each with its type check.
Plan ParsePlanJson(const json& j, const PlanRequest& request,
                   const std::string& field) {
  if (!j.is_object())
    throw InputError(field, "must be an object (fcp plan --format json)");
  static const char* const kKeys[] = {"strategy",
                                      "ranks",
                                      "status",
                                      "est_ms",
                                      "lower_bound_ms",
                                      "gap",
                                      "solver_ms",
                                      "notes",
                                      "micro_batches",
                                      "message",
                                      "infeasible_sequence"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known |= it.key() == k;
    if (!known) throw InputError(field + "." + it.key(), "unknown key");
    // Recomputed, but typed as `fcp plan` prints them.
    const std::string& key = it.key();
    if ((key == "est_ms" || key == "lower_bound_ms" || key == "gap") &&
        !it.value().is_number())
      throw InputError(field + "." + key, "must be a number");
    if (key == "notes" && !it.value().is_object())
      throw InputError(field + ".notes", "must be an object");
    if (key == "message" && !it.value().is_string())
      throw InputError(field + ".message", "must be a string");
    if (key == "infeasible_sequence" && !it.value().is_number_integer())
      throw InputError(field + ".infeasible_sequence", "must be an integer");
  }
  Plan plan;
  const json& status = Need(j, "status", field);
  if (!status.is_string() || status.get<std::string>() != "ok") {
    throw InputError(field + ".status",
                     "must be \"ok\" (an infeasible plan cannot run)");
  }
  plan.num_ranks = static_cast<int>(
      IntIn(Need(j, "ranks", field), field + ".ranks", 0, kMaxInt));
  if (j.contains("strategy")) {
    if (!j["strategy"].is_string())
      throw InputError(field + ".strategy", "must be a string");
    plan.strategy = j["strategy"].get<std::string>();
  }
  if (j.contains("solver_ms")) {
    const json& s = j["solver_ms"];
    if (!s.is_number() || !(s.get<double>() >= 0)) {
      throw InputError(field + ".solver_ms", "must be a number >= 0");
    }
    plan.solver_ms = s.get<double>();
  }
  const json& mbs = Need(j, "micro_batches", field);
  if (!mbs.is_array())
    throw InputError(field + ".micro_batches", "must be an array");
  // Types here; ranges, duplicates and coverage in CheckPlanShape, the check
  // every entry point that takes a plan shares.
  for (size_t m = 0; m < mbs.size(); ++m) {
    const std::string mf = field + ".micro_batches[" + std::to_string(m) + "]";
    if (!mbs[m].is_object()) throw InputError(mf, "must be an object");
    for (auto it = mbs[m].begin(); it != mbs[m].end(); ++it) {
      if (it.key() != "groups" && it.key() != "est_ms")
        throw InputError(mf + "." + it.key(), "unknown key");
      if (it.key() == "est_ms" && !it.value().is_number())
        throw InputError(mf + ".est_ms", "must be a number");
    }
    const json& groups = Need(mbs[m], "groups", mf);
    if (!groups.is_array())
      throw InputError(mf + ".groups", "must be an array");
    MicroBatchPlan mb;
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string gf = mf + ".groups[" + std::to_string(g) + "]";
      if (!groups[g].is_object()) throw InputError(gf, "must be an object");
      GroupPlan gp;
      gp.ranks = IntList(Need(groups[g], "ranks", gf), gf + ".ranks");
      gp.sequences =
          IntList(Need(groups[g], "sequences", gf), gf + ".sequences");
      if (groups[g].contains("comm")) {
        const json& c = groups[g]["comm"];
        if (!c.is_string() || (c.get<std::string>() != "all-to-all" &&
                               c.get<std::string>() != "ring")) {
          throw InputError(gf + ".comm", "must be \"all-to-all\" or \"ring\"");
        }
        gp.comm = c.get<std::string>() == "all-to-all" ? CommKind::kAllToAll
                                                       : CommKind::kRing;
      }
      for (auto it = groups[g].begin(); it != groups[g].end(); ++it) {
        const std::string& key = it.key();
        if (key != "ranks" && key != "sequences" && key != "comm" &&
            key != "est_ms" && key != "mem_bytes") {
          throw InputError(gf + "." + key, "unknown key");
        }
        // Estimates are recomputed, but what is written must still be what
        // `fcp plan` prints: numbers, not strings.
        if ((key == "est_ms" || key == "mem_bytes") &&
            !it.value().is_number()) {
          throw InputError(gf + "." + key, "must be a number");
        }
      }
      mb.groups.push_back(std::move(gp));
    }
    plan.micro_batches.push_back(std::move(mb));
  }
  CheckPlanShape(request, plan, field);
  EvaluatePlan(request,
               plan);  // estimates from the cost model, as MakePlan does
  return plan;
}

}  // namespace fcp
