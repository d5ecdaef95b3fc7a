// `fcp eval calibrate`: published measurements beside the simulator's
// prediction (include/fcp/calibration.h, docs/calibration.md).
//
// Every published figure below was read from the cited page, paper table or
// figure; nothing here is tuned to make a ratio come out. How each row is
// simulated is data too (RowSpec): a kernel row evaluates the simulator's
// efficiency curve, a training row builds the published static configuration
// (data parallel × context parallel, micro-batches of a fixed size) and runs
// it through SimulatePlan, a ratio row divides two training rows.
#include "fcp/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <variant>

#include "fcp/check.h"
#include "fcp/presets.h"
#include "fcp/simulator.h"

namespace fcp::sim {
namespace {

// --- sources ---------------------------------------------------------------
constexpr const char* kFa3Fwd =
    "FlashAttention-3, arXiv 2407.08608 (https://arxiv.org/abs/2407.08608), "
    "Fig. 5: "
    "attention forward speed, BF16, head dim 128, H100 80GB SXM5";
constexpr const char* kFa3Bwd =
    "FlashAttention-3, arXiv 2407.08608 (https://arxiv.org/abs/2407.08608), "
    "Fig. 6: "
    "attention backward speed, BF16, head dim 128, H100 80GB SXM5";
constexpr const char* kTitan =
    "TorchTitan H100 benchmarks, "
    "https://github.com/pytorch/torchtitan/blob/main/benchmarks/"
    "llama3_h100_202412_torchtitan.md";
constexpr const char* kLlama3 =
    "The Llama 3 Herd of Models, arXiv 2407.21783 "
    "(https://arxiv.org/abs/2407.21783), Table 4";
constexpr const char* kBridge =
    "Megatron-Bridge performance summary, 25.11 container, DGX-H100 table "
    "(https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/"
    "performance-summary.md)";
constexpr const char* kNemoLong =
    "NeMo long-sequence performance, Llama 2 7B FP8 with CP "
    "(https://docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/"
    "performance/"
    "performance_long_sequence.html)";

// Attention kernels of the published runs. FA3: the cluster preset's curves.
// FA2: least-squares fits, like the preset's FA3 curves, to the
// FlashAttention-2 bars of the same FA3 paper figures (forward unmasked
// 309-370, causal 191-335, backward 214-322 TFLOPS/s over 512-16k tokens; every
// point within 5 %): PyTorch's scaled_dot_product_attention ran FA2 kernels on
// H100 in the TorchTitan runs of Dec 2024.
enum class Kernel { kFa3, kFa2 };

void UseKernel(Kernel kernel, HardwareModel& hw) {
  if (kernel != Kernel::kFa2) return;
  hw.attn_fwd_eff_max = 0.381;
  hw.attn_fwd_half_tokens = 104;
  hw.attn_bwd_eff_max = 0.333;
  hw.attn_bwd_half_tokens = 274;
  hw.attn_causal_gain = 0.586;
  hw.attn_causal_exponent = 0.642;
}

struct KernelSpec {
  bool backward = false;
  bool causal = false;
  double tokens = 0;
  Kernel kernel = Kernel::kFa3;
};

struct TrainingSpec {
  std::string model;
  std::string cluster = "h100-8x8";
  int ranks = 8;
  int64_t seq_len = 8192;
  int global_batch = 8;  // sequences
  int cp = 1;
  int mbs = 1;  // sequences per micro-batch per replica
  Recompute recompute = Recompute::kFull;
  double linear_recompute_fraction = -1;
  Kernel kernel = Kernel::kFa3;
  double hbm_bytes_per_s = 0;  // > 0: overrides the preset
  double mem_bytes = 0;        // > 0: overrides the preset
};

struct RatioSpec {
  std::string numerator, denominator;  // ids of training rows
};

struct NotExpressible {};

using RowSpec =
    std::variant<KernelSpec, TrainingSpec, RatioSpec, NotExpressible>;

struct Row {
  PublishedMeasurement published;
  RowSpec spec;
};

// TorchTitan's Grand Teton H100s: 96 GB HBM2e at 2.4 TB/s peak, taken at the
// same sustained fraction as the H100 SXM preset (2.93 / 3.35); 500 W power
// limit (not modelled: the simulator runs them at the 989 TFLOPS peak).
TrainingSpec TitanH100(int ranks, int64_t seq_len, int global_batch, int cp,
                       int mbs) {
  TrainingSpec t;
  t.model = "llama3-8b";
  t.ranks = ranks;
  t.seq_len = seq_len;
  t.global_batch = global_batch;
  t.cp = cp;
  t.mbs = mbs;
  t.kernel = Kernel::kFa2;
  t.hbm_bytes_per_s = 2.4e12 * 2.93 / 3.35;
  t.mem_bytes = 96e9;
  return t;
}

PublishedMeasurement M(std::string id, std::string source, std::string config,
                       std::string unit, double measured,
                       std::string not_expressible = "", bool fitted = false) {
  PublishedMeasurement m;
  m.id = std::move(id);
  m.source = std::move(source);
  m.config = std::move(config);
  m.unit = std::move(unit);
  m.measured = measured;
  m.not_expressible = std::move(not_expressible);
  m.fitted = fitted;
  return m;
}

// Long because: a data table, one entry per published measurement with its
// source.
const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = [] {
    std::vector<Row> r;
    // FA3 figures: batch × seqlen = 16k tokens, 16 heads × 128 (hidden 2048).
    const int64_t lens[] = {512, 1024, 2048, 4096, 8192, 16384};
    const double fwd_full[] = {467, 565, 625, 638, 646, 648};
    const double fwd_causal[] = {292, 423, 521, 579, 602, 616};
    const double bwd_full[] = {316, 424, 501, 542, 559, 561};
    const double fa2_fwd_causal[] = {191, 260, 298, 319, 333, 335};
    const double fa2_bwd_full[] = {214, 260, 291, 310, 318, 322};
    for (int i = 0; i < 6; ++i) {
      const std::string n = std::to_string(lens[i]);
      r.push_back({M("fa3-fwd-causal-" + n, kFa3Fwd,
                     "FlashAttention-3 forward, causal mask, seqlen " + n,
                     "TFLOPS/s", fwd_causal[i], "", true),
                   KernelSpec{false, true, double(lens[i]), Kernel::kFa3}});
    }
    for (int i = 0; i < 6; ++i) {
      const std::string n = std::to_string(lens[i]);
      r.push_back({M("fa3-fwd-full-" + n, kFa3Fwd,
                     "FlashAttention-3 forward, no mask, seqlen " + n,
                     "TFLOPS/s", fwd_full[i], "", true),
                   KernelSpec{false, false, double(lens[i]), Kernel::kFa3}});
    }
    for (int i = 0; i < 6; ++i) {
      const std::string n = std::to_string(lens[i]);
      r.push_back({M("fa3-bwd-" + n, kFa3Bwd,
                     "FlashAttention-3 backward, no mask, seqlen " + n,
                     "TFLOPS/s", bwd_full[i], "", true),
                   KernelSpec{true, false, double(lens[i]), Kernel::kFa3}});
    }
    for (int i : {0, 5}) {
      const std::string n = std::to_string(lens[i]);
      r.push_back({M("fa2-fwd-causal-" + n, kFa3Fwd,
                     "FlashAttention-2 forward, causal mask, seqlen " + n,
                     "TFLOPS/s", fa2_fwd_causal[i], "", true),
                   KernelSpec{false, true, double(lens[i]), Kernel::kFa2}});
      r.push_back({M("fa2-bwd-" + n, kFa3Bwd,
                     "FlashAttention-2 backward, no mask, seqlen " + n,
                     "TFLOPS/s", fa2_bwd_full[i], "", true),
                   KernelSpec{true, false, double(lens[i]), Kernel::kFa2}});
    }

    // TorchTitan, Llama 3.1 8B (= llama3-8b), seq_len 8192
    // (train_configs/llama3_8b.toml of the time), selective AC 'op': every
    // second matmul recomputed (3 of 7 per layer), attention outputs saved
    // (parallelize_llama.py).
    const char* kTitanApprox =
        "500 W power limit (the simulated H100 runs at its 989 TFLOPS peak; no "
        "sustained "
        "clock is published), eager-mode (uncompiled) elementwise kernels and "
        "FSDP (ZeRO-3) "
        "gathers are not modelled; simulated for reference only";
    {
      TrainingSpec t = TitanH100(8, 8192, 16, 1, 2);
      t.recompute = Recompute::kNone;
      t.linear_recompute_fraction = 3.0 / 7.0;
      r.push_back(
          {M("titan-t1-fsdp-8", std::string(kTitan) + ", Table 1 (FSDP)",
             "Llama 3.1 8B, 8 H100 (96 GB, 500 W), FSDP, local batch 2 x 8192, "
             "selective (op) AC, BF16",
             "tokens/s/GPU", 5762, kTitanApprox),
           t});
      TrainingSpec t3 = TitanH100(128, 8192, 256, 1, 2);
      t3.recompute = Recompute::kNone;
      t3.linear_recompute_fraction = 3.0 / 7.0;
      r.push_back(
          {M("titan-t3-fsdp-128", std::string(kTitan) + ", Table 3 (FSDP)",
             "Llama 3.1 8B, 128 H100 (96 GB, 500 W), FSDP, local batch 2 x "
             "8192, "
             "selective (op) AC, BF16",
             "tokens/s/GPU", 5605, kTitanApprox),
           t3});
    }
    r.push_back(
        {M("titan-t1-compile",
           std::string(kTitan) + ", Table 1 (FSDP + torch.compile)",
           "as titan-t1-fsdp-8 with torch.compile", "tokens/s/GPU", 6667,
           "torch.compile fuses elementwise kernels; the simulator has no "
           "fusion knob"),
         NotExpressible{}});
    // Table 2: CP weak scaling, 32k tokens per GPU, full AC, Float8 linears.
    const char* t2 = ", Table 2 (FSDP + CP + torch.compile + Float8, full AC)";
    const int64_t t2_len[] = {32768, 65536, 131072, 262144};
    const double t2_tps[] = {3890, 2540, 1071, 548};
    for (int i = 0; i < 4; ++i) {
      const int cp = 1 << i;
      TrainingSpec t = TitanH100(8, t2_len[i], 8 / cp, cp, 1);
      t.recompute = Recompute::kFull;
      r.push_back({M(fmt::format("titan-t2-cp{}", cp), std::string(kTitan) + t2,
                     fmt::format("Llama 3.1 8B, 8 H100, FSDP {} x CP {}, 1 x "
                                 "{} tokens, full AC",
                                 8 / cp, cp, t2_len[i]),
                     "tokens/s/GPU", t2_tps[i],
                     "Float8 linear layers and torch.compile (the simulator "
                     "runs BF16 GEMMs); "
                     "only the CP-scaling ratios below are compared"),
                   t});
    }
    for (int i = 1; i < 4; ++i) {
      const int cp = 1 << i;
      r.push_back(
          {M(fmt::format("titan-t2-cp{}-vs-cp1", cp), std::string(kTitan) + t2,
             fmt::format("CP weak scaling: CP{}@{} / CP1@32768 tokens/s/GPU",
                         cp, t2_len[i]),
             "ratio", t2_tps[i] / t2_tps[0]),
           RatioSpec{fmt::format("titan-t2-cp{}", cp), "titan-t2-cp1"}});
      if (i >= 2) {
        r.push_back(
            {M(fmt::format("titan-t2-cp{}-vs-cp{}", cp, cp / 2),
               std::string(kTitan) + t2,
               fmt::format("CP weak scaling step: CP{} / CP{} tokens/s/GPU", cp,
                           cp / 2),
               "ratio", t2_tps[i] / t2_tps[i - 1]),
             RatioSpec{fmt::format("titan-t2-cp{}", cp),
                       fmt::format("titan-t2-cp{}", cp / 2)}});
      }
    }

    // Rows the simulator cannot express (listed with the reason).
    const char* tp_pp =
        "needs tensor and pipeline parallelism (out of scope: the simulator "
        "models data x context parallelism only)";
    // Table 6: the same team's CP weak scaling of Llama 3.1 405B (same
    // software, TP 8 x PP 8): its steps, beside Table 2's.
    const double t6_tps[] = {76, 47, 31, 16};
    for (int i = 1; i < 4; ++i) {
      const int cp = 1 << i;
      r.push_back({M(fmt::format("titan-t6-cp{}-vs-cp{}", cp, cp / 2),
                     std::string(kTitan) + ", Table 6 (FSDP + TP + PP + CP + "
                                           "torch.compile + Float8, full AC)",
                     fmt::format("CP weak scaling step: CP{}@{} / CP{}@{} "
                                 "tokens/s/GPU, Llama 3.1 "
                                 "405B, 512 H100, TP 8, PP 8, FSDP {}",
                                 cp, t2_len[i], cp / 2, t2_len[i - 1], 8 / cp),
                     "ratio", t6_tps[i] / t6_tps[i - 1], tp_pp),
                   NotExpressible{}});
    }
    r.push_back(
        {M("llama3-405b-8192gpu", kLlama3,
           "Llama 3 405B, 8192 H100, TP 8, CP 1, PP 16, DP 64, seq 8192, BF16",
           "TFLOPS/GPU", 430, tp_pp),
         NotExpressible{}});
    r.push_back({M("llama3-405b-16384gpu", kLlama3,
                   "Llama 3 405B, 16384 H100, TP 8, CP 1, PP 16, DP 128, seq "
                   "8192, BF16",
                   "TFLOPS/GPU", 400, tp_pp),
                 NotExpressible{}});
    r.push_back({M("llama3-405b-cp16", kLlama3,
                   "Llama 3 405B, 16384 H100, TP 8, CP 16, PP 16, DP 8, seq "
                   "131072, BF16",
                   "TFLOPS/GPU", 380, tp_pp),
                 NotExpressible{}});
    r.push_back(
        {M("bridge-llama3-8b-h100", kBridge,
           "LLAMA3_8B, 8 H100, FP8-CS, GBS 128, MBS 1, seq 8192, FSDP, TP 1, "
           "PP 1, CP 1",
           "tokens/s/GPU", 14451, "FP8 GEMMs (the simulator models BF16 only)"),
         NotExpressible{}});
    r.push_back({M("bridge-llama3-70b-h100", kBridge,
                   "LLAMA3_70B, 64 H100, FP8-CS, GBS 128, MBS 1, seq 8192, TP "
                   "4, PP 8, VP 5",
                   "tokens/s/GPU", 1602, std::string("FP8 GEMMs; ") + tp_pp),
                 NotExpressible{}});
    r.push_back(
        {M("nemo-llama2-7b-cp4-128k", kNemoLong,
           "Llama 2 7B, 128 H100, seq 128k, TP 4, PP 1, DP 8, CP 4, FP8",
           "TFLOPS/GPU", 555, std::string("FP8 GEMMs; ") + tp_pp),
         NotExpressible{}});
    return r;
  }();
  return rows;
}

HardwareModel KernelHardware(Kernel kernel) {
  const ModelPreset* model = FindModelPreset("llama3-8b");
  const ClusterPreset* cluster = FindClusterPreset("h100-8x8");
  HardwareModel hw = MakeHardwareModel(*model, *cluster);
  UseKernel(kernel, hw);
  return hw;
}

double SimulateKernel(const KernelSpec& k) {
  const HardwareModel hw = KernelHardware(k.kernel);
  const double eta = k.causal ? 0.0 : 1.0;
  const double eff = k.backward ? AttentionBackwardEfficiency(hw, k.tokens, eta)
                                : AttentionForwardEfficiency(hw, k.tokens, eta);
  return hw.peak_flops * eff / 1e12;
}

// Attention pairs (query x key, causal) per GPU of one sequence of the row.
double AttentionPairsPerGpu(const TrainingSpec& t) {
  const double s = static_cast<double>(t.seq_len);
  return s * s / 2.0 / t.cp;
}

double TokensPerGpu(const TrainingSpec& t) {
  return static_cast<double>(t.seq_len) * t.global_batch / t.ranks;
}

// tokens/s/GPU of the static configuration, simulated. NaN on OOM.
double SimulateTraining(const TrainingSpec& t) {
  const ModelPreset* model = FindModelPreset(t.model);
  const ClusterPreset* cluster = FindClusterPreset(t.cluster);
  FCP_CHECK(model != nullptr && cluster != nullptr);
  HardwareModel hw = MakeHardwareModel(*model, *cluster, t.ranks);
  UseKernel(t.kernel, hw);
  hw.recompute = t.recompute;
  hw.linear_recompute_fraction = t.linear_recompute_fraction;
  if (t.hbm_bytes_per_s > 0) hw.hbm_bytes_per_s = t.hbm_bytes_per_s;
  // Memory is not compared: the published runs shard weights and gradients
  // (FSDP) where the simulator models a distributed optimizer (ZeRO-1), and
  // report a few GB below capacity; a simulated OOM must not hide the timing.
  (void)t.mem_bytes;
  hw.mem_capacity_bytes = std::numeric_limits<double>::infinity();

  FCP_CHECK(t.ranks % t.cp == 0);
  const int dp = t.ranks / t.cp;
  FCP_CHECK(t.global_batch % dp == 0);
  const int per_replica = t.global_batch / dp;
  std::vector<Sequence> seqs(static_cast<size_t>(t.global_batch),
                             Sequence{t.seq_len, 0.0});
  Plan plan;
  plan.strategy = "published-static";
  plan.num_ranks = t.ranks;
  const int num_mb = (per_replica + t.mbs - 1) / t.mbs;
  plan.micro_batches.resize(static_cast<size_t>(num_mb));
  for (int j = 0; j < dp; ++j) {
    for (int i = 0; i < per_replica; ++i) {
      auto& groups = plan.micro_batches[static_cast<size_t>(i / t.mbs)].groups;
      if (i % t.mbs == 0) {
        GroupPlan g;
        g.ranks.resize(static_cast<size_t>(t.cp));
        std::iota(g.ranks.begin(), g.ranks.end(), j * t.cp);
        groups.push_back(std::move(g));
      }
      groups.back().sequences.push_back(j * per_replica + i);
    }
  }
  const SimResult r = SimulatePlan(hw, plan, seqs);
  if (r.oom) return std::nan("");
  return r.tokens / r.iter_s / t.ranks;
}

}  // namespace

const std::vector<PublishedMeasurement>& PublishedMeasurements() {
  static const std::vector<PublishedMeasurement> all = [] {
    std::vector<PublishedMeasurement> out;
    for (const auto& row : Rows()) out.push_back(row.published);
    return out;
  }();
  return all;
}

std::vector<CalibrationRow> RunCalibration() {
  std::vector<CalibrationRow> out;
  std::map<std::string, double> training;  // id -> simulated tokens/s/GPU
  std::map<std::string, const TrainingSpec*> specs;
  for (const auto& row : Rows()) {
    if (const auto* t = std::get_if<TrainingSpec>(&row.spec)) {
      training[row.published.id] = SimulateTraining(*t);
      specs[row.published.id] = t;
    }
  }
  for (const auto& row : Rows()) {
    CalibrationRow c;
    c.published = row.published;
    double sim = std::nan("");
    if (const auto* k = std::get_if<KernelSpec>(&row.spec)) {
      sim = SimulateKernel(*k);
    } else if (std::get_if<TrainingSpec>(&row.spec)) {
      sim = training.at(row.published.id);
    } else if (const auto* q = std::get_if<RatioSpec>(&row.spec)) {
      sim = training.at(q->numerator) / training.at(q->denominator);
      const TrainingSpec& num = *specs.at(q->numerator);
      const TrainingSpec& den = *specs.at(q->denominator);
      if (TokensPerGpu(num) == TokensPerGpu(den))
        c.work_floor = AttentionPairsPerGpu(den) / AttentionPairsPerGpu(num);
    }
    c.expressible = row.published.not_expressible.empty() && std::isfinite(sim);
    if (c.expressible) c.simulated = sim;
    if (!c.expressible && std::isfinite(sim)) c.approximate = sim;
    if (row.published.not_expressible.empty() && !std::isfinite(sim))
      c.published.not_expressible =
          "the simulated configuration runs out of memory";
    if (c.expressible) c.ratio = c.simulated / c.published.measured;
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

struct Summary {
  int rows = 0, expressible = 0, within = 0, held_out = 0, held_out_within = 0;
  int sources = 0;
  double worst = 0;  // max |ratio - 1| over expressible rows
  std::vector<std::string> below_floor;  // published ratio under its work floor
};

Summary Summarize(const std::vector<CalibrationRow>& rows) {
  Summary s;
  std::map<std::string, int> sources;
  for (const auto& r : rows) {
    ++s.rows;
    ++sources[r.published.source.substr(0, r.published.source.find(','))];
    if (r.work_floor > 0 && r.published.measured < r.work_floor)
      s.below_floor.push_back(r.published.id);
    if (!r.expressible) continue;
    ++s.expressible;
    const double err = std::abs(r.ratio - 1.0);
    s.worst = std::max(s.worst, err);
    s.within += err <= 0.10;
    if (!r.published.fitted) {
      ++s.held_out;
      s.held_out_within += err <= 0.10;
    }
  }
  s.sources = static_cast<int>(sources.size());
  return s;
}

}  // namespace

std::string CalibrationToJson(const std::vector<CalibrationRow>& rows,
                              int indent) {
  using json = nlohmann::ordered_json;
  json arr = json::array();
  for (const auto& r : rows) {
    json j = {{"id", r.published.id},
              {"source", r.published.source},
              {"config", r.published.config},
              {"unit", r.published.unit},
              {"measured", r.published.measured},
              {"simulated", r.expressible ? json(r.simulated) : json(nullptr)},
              {"ratio", r.expressible ? json(r.ratio) : json(nullptr)},
              {"fitted", r.published.fitted}};
    if (!r.published.not_expressible.empty())
      j["not_expressible"] = r.published.not_expressible;
    if (r.approximate > 0) j["approximate_simulated"] = r.approximate;
    if (r.work_floor > 0) j["work_floor"] = r.work_floor;
    arr.push_back(j);
  }
  const Summary s = Summarize(rows);
  json summary = {{"rows", s.rows},
                  {"expressible", s.expressible},
                  {"within_10_percent", s.within},
                  {"held_out", s.held_out},
                  {"held_out_within_10_percent", s.held_out_within},
                  {"worst_abs_error", s.worst},
                  {"published_below_work_floor", s.below_floor}};
  json out = {
      {"simulated",
       "the simulated column is fcp's simulator; measured is as published"},
      {"rows", arr},
      {"summary", summary}};
  return out.dump(indent);
}

std::string CalibrationToTable(const std::vector<CalibrationRow>& rows) {
  std::string out =
      "Published H100 measurements vs the SIMULATED figure (ratio = simulated "
      "/ measured; "
      "fit = used to fit a constant, not a prediction; (~x): nearest simulated "
      "configuration "
      "of a row that is not expressible, for reference, not counted)\n";
  out +=
      fmt::format("{:<24} {:>13} {:>10} {:>10} {:>7} {:>4}  {}\n", "id", "unit",
                  "measured", "simulated", "ratio", "fit", "configuration");
  std::string last_source;
  for (const auto& r : rows) {
    if (r.published.source != last_source) {
      out += "# " + r.published.source + "\n";
      last_source = r.published.source;
    }
    if (r.expressible) {
      const std::string floor =
          r.work_floor > 0 ? fmt::format(" (work floor {:.3f}{})", r.work_floor,
                                         r.published.measured < r.work_floor
                                             ? ": published is BELOW it"
                                             : "")
                           : "";
      out += fmt::format(
          "{:<24} {:>13} {:>10.4g} {:>10.4g} {:>7.3f} {:>4}  {}{}\n",
          r.published.id, r.published.unit, r.published.measured, r.simulated,
          r.ratio, r.published.fitted ? "fit" : "", r.published.config, floor);
    } else {
      out += fmt::format(
          "{:<24} {:>13} {:>10.4g} {:>10} {:>7} {:>4}  {} -- not expressible: "
          "{}\n",
          r.published.id, r.published.unit, r.published.measured,
          r.approximate > 0 ? fmt::format("(~{:.4g})", r.approximate) : "-",
          r.approximate > 0
              ? fmt::format("({:.2f})", r.approximate / r.published.measured)
              : "-",
          "", r.published.config, r.published.not_expressible);
    }
  }
  const Summary s = Summarize(rows);
  out += fmt::format(
      "{} rows from {} sources; {} expressible, {} within +-10 %; held out "
      "(not fitted): {}, "
      "{} within +-10 %; worst |ratio - 1| = {:.1f} %\n",
      s.rows, s.sources, s.expressible, s.within, s.held_out, s.held_out_within,
      100.0 * s.worst);
  if (!s.below_floor.empty()) {
    std::string ids;
    for (const auto& id : s.below_floor) ids += (ids.empty() ? "" : ", ") + id;
    out += fmt::format(
        "published ratios below their work floor (same tokens per GPU, "
        "attention pairs per GPU "
        "grown by 1/floor; reaching them needs per-GPU efficiency to fall with "
        "length): {}\n",
        ids);
  }
  return out;
}

}  // namespace fcp::sim
