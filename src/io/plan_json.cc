// ParsePlanJson: a plan as `fcp plan --format json` prints it, read back for
// `fcp simulate --plan` (plans made elsewhere). Structural checks only; the
// estimates in the text are ignored and recomputed.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fcp/io.h"

namespace fcp {
namespace {

using nlohmann::json;

const json& Need(const json& obj, const char* key, const std::string& field) {
  if (!obj.contains(key)) throw InputError(field + "." + key, "missing");
  return obj[key];
}

int64_t IntIn(const json& j, const std::string& field, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) throw InputError(field, "must be an integer");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) {
    throw InputError(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

Plan ParsePlanJson(const json& j, const PlanRequest& request, const std::string& field) {
  if (!j.is_object()) throw InputError(field, "must be an object (fcp plan --format json)");
  static const char* const kKeys[] = {"strategy", "ranks",      "status",   "est_ms",
                                      "lower_bound_ms", "gap",  "solver_ms", "notes",
                                      "micro_batches",  "message", "infeasible_sequence"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known |= it.key() == k;
    if (!known) throw InputError(field + "." + it.key(), "unknown key");
  }
  Plan plan;
  const json& status = Need(j, "status", field);
  if (!status.is_string() || status.get<std::string>() != "ok") {
    throw InputError(field + ".status", "must be \"ok\" (an infeasible plan cannot run)");
  }
  const int n = request.cluster.num_ranks;
  plan.num_ranks = static_cast<int>(IntIn(Need(j, "ranks", field), field + ".ranks", n, n));
  if (j.contains("strategy")) {
    if (!j["strategy"].is_string()) throw InputError(field + ".strategy", "must be a string");
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
  if (!mbs.is_array() || mbs.empty()) {
    throw InputError(field + ".micro_batches", "must be a non-empty array");
  }
  const int64_t k = static_cast<int64_t>(request.sequences.size());
  std::vector<int> seen(k, -1);  // micro-batch of each sequence
  for (size_t m = 0; m < mbs.size(); ++m) {
    const std::string mf = field + ".micro_batches[" + std::to_string(m) + "]";
    if (!mbs[m].is_object()) throw InputError(mf, "must be an object");
    const json& groups = Need(mbs[m], "groups", mf);
    if (!groups.is_array() || groups.empty()) throw InputError(mf + ".groups", "must be a non-empty array");
    std::vector<char> used(n, 0);
    MicroBatchPlan mb;
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string gf = mf + ".groups[" + std::to_string(g) + "]";
      if (!groups[g].is_object()) throw InputError(gf, "must be an object");
      GroupPlan gp;
      const json& ranks = Need(groups[g], "ranks", gf);
      if (!ranks.is_array() || ranks.empty()) throw InputError(gf + ".ranks", "must be a non-empty array");
      for (size_t r = 0; r < ranks.size(); ++r) {
        const int rank = static_cast<int>(
            IntIn(ranks[r], gf + ".ranks[" + std::to_string(r) + "]", 0, n - 1));
        if (used[rank]++) {
          throw InputError(gf + ".ranks", "rank " + std::to_string(rank) +
                                              " is used twice in this micro-batch");
        }
        gp.ranks.push_back(rank);
      }
      const json& seqs = Need(groups[g], "sequences", gf);
      if (!seqs.is_array() || seqs.empty()) {
        throw InputError(gf + ".sequences", "must be a non-empty array");
      }
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int idx = static_cast<int>(
            IntIn(seqs[s], gf + ".sequences[" + std::to_string(s) + "]", 0, k - 1));
        if (seen[idx] >= 0) {
          throw InputError(gf + ".sequences", "sequence " + std::to_string(idx) +
                                                  " is scheduled twice");
        }
        seen[idx] = static_cast<int>(m);
        gp.sequences.push_back(idx);
      }
      if (groups[g].contains("comm")) {
        const json& c = groups[g]["comm"];
        if (!c.is_string() || (c.get<std::string>() != "all-to-all" && c.get<std::string>() != "ring")) {
          throw InputError(gf + ".comm", "must be \"all-to-all\" or \"ring\"");
        }
        gp.comm = c.get<std::string>() == "all-to-all" ? CommKind::kAllToAll : CommKind::kRing;
      }
      for (auto it = groups[g].begin(); it != groups[g].end(); ++it) {
        const std::string& key = it.key();
        if (key != "ranks" && key != "sequences" && key != "comm" && key != "est_ms" &&
            key != "mem_bytes") {
          throw InputError(gf + "." + key, "unknown key");
        }
      }
      mb.groups.push_back(std::move(gp));
    }
    plan.micro_batches.push_back(std::move(mb));
  }
  for (int64_t s = 0; s < k; ++s) {
    if (seen[s] < 0) {
      throw InputError(field + ".micro_batches",
                       "sequence " + std::to_string(s) + " of the batch is not scheduled");
    }
  }
  EvaluatePlan(request, plan);  // estimates from the cost model, as MakePlan does
  return plan;
}

}  // namespace fcp
