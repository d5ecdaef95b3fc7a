// Core value types shared by the planner, baselines, simulator and bindings.
// Plain aggregates; no behaviour beyond trivial accessors. Thread-safety:
// values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fcp {

// One training sequence. `length_tokens` > 0. `eta` in [0, 1] is the attention
// mask factor of docs/design.md §2: 0 = causal, 1 = full bidirectional, between
// = mixed (e.g. vision blocks with full attention inside a causal text
// sequence). `vision_tokens` in [0, length_tokens] are the LLM tokens that
// are image or frame tokens (MLLMs; 0 for text): the vision encoder runs on
// them, priced by CostModel::alpha2_vision.
struct Sequence {
  int64_t length_tokens = 0;
  double eta = 0.0;
  int64_t vision_tokens = 0;
};

// The cluster as the planner sees it: `num_ranks` (N) model replicas, of which
// `ranks_per_node` (R) share a node. Rank r lives on node r / R. R need not
// divide N.
struct Cluster {
  int num_ranks = 64;
  int ranks_per_node = 16;
};

// Cost coefficients, SI units, exactly docs/design.md §2. All must be finite
// and >= 0; bandwidths > 0; mem_capacity > mem_static.
struct CostModel {
  double alpha1 =
      0;  // s/token^2: attention compute (fwd+bwd, all layers), causal
  double alpha2 = 0;  // s/token: linear compute (projections, MLP, norms, loss)
  double beta1 = 0;   // s: fixed cost per group per micro-batch
  double alpha3 =
      0;  // bytes/token: ring KV traffic per token of the group per step
  double beta2 = 0;  // s: fixed communication cost of a group with d > 1
  double bw_intra_node = 1;  // bytes/s: P2P bandwidth, group within one node
  double bw_inter_node = 1;  // bytes/s: P2P bandwidth, group spanning nodes
  double mem_per_token = 0;  // bytes/token: activation memory per token
  double mem_static = 0;     // bytes: per-rank model states
  double mem_capacity = 1;   // bytes: per-rank device memory
  // Cost model v2 (docs/design.md §2); all 0 = the paper's model.
  double attn_overhead_tokens = 0;  // tokens: short-chunk attention overhead h
  double gamma_intra = 0;  // s: latency of one ring step, group on one node
  double gamma_inter = 0;  // s: latency of one ring step, group spans nodes
  double gamma_serial =
      0;  // s: per ring step, on the critical path (kernel launches)
  // bytes/token: ring traffic per token of a rank's share sent after the last
  // attention step (the backward's dKV hop home), so never hidden.
  double alpha3_home = 0;
  double ring_tail_steps =
      0;  // steps of a ring whose attention hides no transfer, in [0, 1]
  // s/token: the vision encoder and projector per LLM vision token (MLLMs),
  // on top of alpha2, which every token pays.
  double alpha2_vision = 0;
};

// `cm` with the v2 terms (fcp/cost_coefficients.h) zeroed: the paper's Eq. 8-9
// (what fcp-paper plans with). Defined in src/cost/cost_model.cc.
CostModel PaperTerms(CostModel cm);

// Transformer shape of the model being trained; optional context for strategies
// whose rules depend on it (DeepSpeed-Ulysses needs the head count) and for the
// simulator. Sizes in elements, not bytes.
struct ModelShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int ffn = 0;
  int64_t vocab = 0;
  // Vision encoder (MLLMs only; 0 for text models).
  int vision_layers = 0;
  int vision_hidden = 0;
};

// How a group exchanges data: ring attention P2P (FCP, Megatron CP) or
// Ulysses all-to-all (DeepSpeed, FlexSP).
enum class CommKind { kRing, kAllToAll };

// One CP group of one micro-batch.
struct GroupPlan {
  std::vector<int> ranks;      // global rank ids, distinct, in ring order
  std::vector<int> sequences;  // indices into the request's sequences
  CommKind comm = CommKind::kRing;
  double est_ms = 0;      // 1000 * T(G, d) for these ranks
  int64_t mem_bytes = 0;  // per-rank memory, ceil(mem(G, d))
  int degree() const { return static_cast<int>(ranks.size()); }
};

struct MicroBatchPlan {
  std::vector<GroupPlan> groups;
  double est_ms = 0;  // max over groups
};

enum class PlanStatus {
  kOk,
  kInfeasible,  // some sequence cannot fit even on all N ranks
};

struct Plan {
  std::string strategy;
  int num_ranks = 0;
  PlanStatus status = PlanStatus::kOk;
  std::string message;  // human-readable reason when not kOk
  int infeasible_sequence =
      -1;  // the offending sequence index when kInfeasible
  std::vector<MicroBatchPlan> micro_batches;
  // Makespan of the micro-batches run in order, each group starting when all
  // its ranks are free (no barrier between micro-batches; between the largest
  // micro-batch est_ms and their sum). ListScheduleMs in fcp/scheduler.h.
  double est_ms = 0;
  double lower_bound_ms = 0;  // a valid lower bound on est_ms for this input
  double solver_ms = 0;       // planner wall time (parsing/printing excluded)
  // Strategy-specific facts worth printing (chosen static degree, MILP
  // status...).
  std::map<std::string, std::string> notes;

  // est_ms / lower_bound_ms - 1 (0 when the bound is 0).
  double gap() const {
    return lower_bound_ms > 0 ? est_ms / lower_bound_ms - 1.0 : 0.0;
  }
};

// `text` made safe for a one-line message: control characters (newline, CR,
// ESC, NUL, DEL, the C1 range), line/paragraph separators, bidi overrides and
// bytes that are not UTF-8 become visible escapes (\n, \r, \t, \xHH, \uHHHH);
// backslashes are kept, so escaping twice changes nothing. Texts beyond
// 4 KiB are cut (" [truncated]"). Defined in src/io/escape.cc.
std::string EscapeForMessage(std::string_view text);

// Bad input: names the offending field, e.g. "sequences[3]: length must be >
// 0". Thrown by parsers and by MakePlan's input check; never for infeasibility.
// Field and message are escaped (EscapeForMessage): input echoed into them can
// neither break the one-line `error:` format nor reach a terminal raw.
class InputError : public std::invalid_argument {
 public:
  InputError(const std::string& field, const std::string& what)
      : std::invalid_argument(EscapeForMessage(field) + ": " +
                              EscapeForMessage(what)),
        field_(EscapeForMessage(field)) {}
  const std::string& field() const { return field_; }

  // From a "field: what" message, as the Validate* functions return them.
  static InputError FromMessage(const std::string& message) {
    const auto colon = message.find(": ");
    if (colon == std::string::npos) return InputError("input", message);
    return InputError(message.substr(0, colon), message.substr(colon + 2));
  }

 private:
  std::string field_;
};

}  // namespace fcp
