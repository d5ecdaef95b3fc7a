// fcp profile: sample a target over lengths × degrees, fit the cost model,
// report standard errors and held-out error. See include/fcp/profiler.h.
#include "fcp/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "fcp/cost_model.h"
#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/simulator.h"
#include "fcp/unknown_names.h"
#include "profile/cpu_info.h"
#include "profile/cpu_target.h"

namespace fcp {
namespace {

constexpr std::string_view kCpuModel = "cpu-tiny";

void Validate(const ProfileOptions& o) {
  if (o.min_tokens_per_rank < 0)
    throw InputError("min_tokens_per_rank", "must be >= 0");
  if (o.repeats < 1 || o.repeats > 1000)
    throw InputError("repeats", "must be in [1, 1000]");
  if (!(o.noise_rel >= 0 && o.noise_rel <= 1))
    throw InputError("noise", "must be in [0, 1]");
  if (!(o.heldout_fraction >= 0 && o.heldout_fraction < 1))
    throw InputError("heldout_fraction", "must be in [0, 1)");
  for (size_t i = 0; i < o.lengths.size(); ++i)
    if (o.lengths[i] < 8 || o.lengths[i] > (int64_t{1} << 24))
      throw InputError("lengths[" + std::to_string(i) + "]",
                       "must be in [8, 2^24]");
  for (size_t i = 0; i < o.degrees.size(); ++i)
    if (o.degrees[i] < 1 || o.degrees[i] > 4096)
      throw InputError("degrees[" + std::to_string(i) + "]",
                       "must be in [1, 4096]");
  // The cpu target holds a whole sequence's fp32 activations in this process
  // and runs its attention on one core: 3,000,000 tokens ran out of memory
  // (issue 18). 2^16 tokens need about 1.1 GB.
  constexpr int64_t kMaxCpuLength = int64_t{1} << 16;
  if (o.target == "cpu") {
    for (size_t i = 0; i < o.lengths.size(); ++i) {
      if (o.lengths[i] > kMaxCpuLength) {
        throw InputError(
            "lengths[" + std::to_string(i) + "]",
            fmt::format(
                "the cpu target measures at most {} tokens (2^16) per sequence "
                "(about {:.1f} GB of activations at that length), got {}",
                kMaxCpuLength,
                profile::CpuLayerMemPerToken(profile::CpuLayerShape{}) *
                    static_cast<double>(kMaxCpuLength) / 1e9,
                o.lengths[i]));
      }
    }
  }
}

// The groups sampled at one grid point: one sequence of `len`, and (packed)
// four sequences of len/4, alternating two kinds. Text models: causal, the
// packed group alternating causal and full masks. Multimodal models
// (`tokens_per_tile` > 0): video-like sequences, all vision tokens, full
// attention inside frame blocks of tokens_per_tile tokens on top of the
// causal mask, eta = tokens_per_tile / len (docs/design.md §2), which is what
// the MLLM datasets produce; the packed group alternates them with causal
// text, so that the fit can tell the vision encoder's cost (alpha2_vision)
// from every token's (alpha2).
std::vector<std::vector<Sequence>> GroupsAt(int64_t len, bool packed,
                                            int tokens_per_tile) {
  auto seq = [&](int64_t l, bool other_kind) {
    if (tokens_per_tile <= 0) return Sequence{l, other_kind ? 1.0 : 0.0};
    if (other_kind) return Sequence{l, 0.0};
    return Sequence{l, std::min(1.0, static_cast<double>(tokens_per_tile) / l),
                    l};
  };
  std::vector<std::vector<Sequence>> g = {{seq(len, false)}};
  if (packed && len >= 32) {
    std::vector<Sequence> p;
    for (int k = 0; k < 4; ++k) p.push_back(seq(len / 4, k % 2 == 1));
    g.push_back(p);
  }
  return g;
}

GroupLoad LoadOf(const std::vector<Sequence>& seqs) {
  GroupLoad l;
  for (const auto& s : seqs) l.Add(s);
  return l;
}

std::string Describe(const std::vector<Sequence>& seqs) {
  const bool mixed = seqs.size() > 1 && seqs[0].eta != seqs[1].eta;
  const bool text_and_vision =
      mixed && seqs[0].vision_tokens != seqs[1].vision_tokens;
  return fmt::format("{}x{}{}", seqs.size(), seqs[0].length_tokens,
                     text_and_vision ? " (text and vision)"
                     : mixed         ? " (mixed masks)"
                                     : "");
}

struct Collected {
  std::vector<FitSample> samples;
  std::vector<std::string> what;  // description per sample
  CostModel base;
  std::string hardware;
  std::string model;
  std::string transport;
};

Collected CollectSim(const ProfileOptions& o, const std::string& cluster_name) {
  const ClusterPreset* cluster = FindClusterPreset(cluster_name);
  if (!cluster)
    throw InputError("target", UnknownClusterPresetMessage(cluster_name));
  const std::string model_name =
      o.model.empty() ? std::string(kDefaultModel) : o.model;
  const ModelPreset* model = FindModelPreset(model_name);
  if (!model) throw InputError("model", UnknownModelPresetMessage(model_name));
  const sim::HardwareModel hw = sim::MakeHardwareModel(*model, *cluster);
  Collected c;
  c.base = DeriveCostModel(*model, *cluster);
  c.model = model_name;
  c.hardware =
      fmt::format("simulated: {} ({} ranks, {} per node), noise sigma {:.3f}",
                  cluster->name, hw.num_ranks, hw.ranks_per_node, o.noise_rel);
  const Cluster cl{hw.num_ranks, hw.ranks_per_node};
  std::vector<int64_t> lengths = o.lengths;
  if (lengths.empty())
    lengths = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  std::vector<int> degrees = o.degrees;
  if (degrees.empty()) degrees = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> z(0.0, 1.0);
  auto noisy = [&](double t) { return t * std::exp(o.noise_rel * z(rng)); };
  size_t length_index = 0;
  for (int64_t len : lengths) {
    ++length_index;
    if (o.progress) {
      o.progress("[profile] " +
                 (o.model.empty() ? std::string(kDefaultModel) : o.model) +
                 ": length " + std::to_string(len) + " (" +
                 std::to_string(length_index) + "/" +
                 std::to_string(lengths.size()) + ")");
    }
    for (int d : degrees) {
      if (d > hw.num_ranks || len < o.min_tokens_per_rank * d) continue;
      for (const auto& seqs :
           GroupsAt(len, o.packed_groups,
                    model->multimodal ? model->vision_tokens_per_tile : 0)) {
        std::vector<int> ranks(d);
        std::iota(ranks.begin(), ranks.end(), 0);
        const sim::GroupSimResult r =
            sim::SimulateGroup(hw, seqs, ranks, CommKind::kRing);
        if (r.oom) continue;
        FitSample s;
        s.load = LoadOf(seqs);
        s.degree = d;
        s.link = RangeOnOneNode(cl, 0, d) ? Link::kIntraNode : Link::kInterNode;
        s.bw_bytes_per_s = s.link == Link::kIntraNode ? c.base.bw_intra_node
                                                      : c.base.bw_inter_node;
        double tot = 0, comp = 0, comm = 0;
        for (int k = 0; k < o.repeats; ++k) {
          tot += noisy(r.time_s);
          comp += noisy(r.time_s - r.exposed_comm_s);
          if (d > 1) comm += noisy(r.comm_s);
        }
        s.total_s = tot / o.repeats;
        s.compute_s = comp / o.repeats;
        if (d > 1) s.comm_s = comm / o.repeats;
        s.label = model_name;
        c.samples.push_back(s);
        c.what.push_back(fmt::format("d={} {}", d, Describe(seqs)));
      }
    }
  }
  return c;
}

// Long because: the measurement grid loop with its ring transport and warm-up.
Collected CollectCpu(const ProfileOptions& o) {
  const std::string model_name =
      o.model.empty() ? std::string(kCpuModel) : o.model;
  if (model_name != kCpuModel)
    throw InputError("model", "the cpu target runs the built-in '" +
                                  std::string(kCpuModel) + "' layer; got '" +
                                  model_name + "'");
  const profile::CpuLayerShape shape;
  const profile::CpuInfo cpu = profile::ReadCpuInfo();
  Collected c;
  c.model = model_name;
  // The ring traffic: through the given transport (e.g. MPI; every rank runs
  // this same loop in lockstep), else in-process copies on a helper thread.
  profile::RingTransport* transport = o.ring_transport;
  std::unique_ptr<profile::RingTransport> own;
  if (!transport) {
    own = profile::MakeInProcessCopyTransport();
    transport = own.get();
  }
  c.transport = transport->Describe();
  const double bw =
      o.ring_transport
          ? profile::MeasureTransportBandwidth(*transport, size_t{16} << 20, 5)
          : profile::MeasureCopyBandwidth(size_t{16} << 20, 5);
  c.hardware = fmt::format(
      "measured: {} ({} cores, {:.2f} GHz nominal), fp32 kernels on 1 core, "
      "ring "
      "traffic through {} ({:.2f} GB/s)",
      cpu.model_name, cpu.physical_cores, cpu.ghz,
      o.ring_transport ? c.transport : "in-process copies on a helper thread",
      bw / 1e9);
  c.base.bw_intra_node = bw;
  c.base.bw_inter_node = bw;
  c.base.mem_per_token = profile::CpuLayerMemPerToken(shape);
  c.base.mem_static = profile::CpuLayerStaticBytes(shape);
  // Memory per rank: this machine's RAM split over its cores.
  double mem_total = 8e9;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    double kb;
    std::string unit;
    while (f >> key >> kb >> unit)
      if (key == "MemTotal:") mem_total = kb * 1024.0;
  }
  c.base.mem_capacity = std::max(c.base.mem_static * 2,
                                 mem_total / std::max(1, cpu.logical_cpus));
  std::vector<int64_t> lengths = o.lengths;
  if (lengths.empty()) lengths = {512, 1024, 2048, 3072, 4096};
  std::vector<int> degrees = o.degrees;
  if (degrees.empty()) degrees = {1, 2, 3, 4};
  size_t length_index = 0;
  for (int64_t len : lengths) {
    ++length_index;
    if (o.progress) {
      o.progress("[profile] " +
                 (o.model.empty() ? std::string(kDefaultModel) : o.model) +
                 ": length " + std::to_string(len) + " (" +
                 std::to_string(length_index) + "/" +
                 std::to_string(lengths.size()) + ")");
    }
    for (int d : degrees) {
      if (2 * d > len || len < o.min_tokens_per_rank * d) continue;
      for (const auto& seqs : GroupsAt(len, o.packed_groups, 0)) {
        const profile::CpuRankTiming t =
            profile::MeasureCpuRank(shape, seqs, d, o.repeats, transport);
        FitSample s;
        s.load = LoadOf(seqs);
        s.degree = d;
        s.bw_bytes_per_s = bw;
        s.compute_s = t.compute_s;
        if (d > 1) s.comm_s = t.comm_s;
        s.total_s = t.total_s;
        s.label = model_name;
        c.samples.push_back(s);
        c.what.push_back(fmt::format("d={} {}", d, Describe(seqs)));
      }
    }
  }
  return c;
}

}  // namespace

ProfileReport RunProfile(const ProfileOptions& options) {
  Validate(options);
  const auto t0 = std::chrono::steady_clock::now();
  Collected c;
  if (options.target == "cpu") {
    c = CollectCpu(options);
  } else if (options.target.rfind("sim:", 0) == 0) {
    c = CollectSim(options, options.target.substr(4));
  } else {
    throw InputError("target",
                     "expected 'cpu' or 'sim:<cluster preset>', got '" +
                         options.target + "'");
  }
  if (c.samples.size() < 4)
    throw InputError(
        "lengths",
        fmt::format("the grid yields only {} usable samples (need >= 4; "
                    "out-of-memory points are skipped)",
                    c.samples.size()));
  MeasuredProfile m;
  m.target = options.target;
  m.model = c.model;
  m.hardware = c.hardware;
  m.transport = c.transport;
  m.samples = std::move(c.samples);
  m.what = std::move(c.what);
  m.base = c.base;
  m.heldout_fraction = options.heldout_fraction;
  m.seed = options.seed;
  m.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return FitMeasuredProfile(m);
}

ProfileReport FitMeasuredProfile(const MeasuredProfile& c) {
  const auto t0 = std::chrono::steady_clock::now();
  if (c.samples.size() < 4)
    throw InputError(
        "samples", fmt::format("need >= 4 samples, got {}", c.samples.size()));
  if (c.what.size() != c.samples.size())
    throw InputError("samples", "one description (what) per sample");
  if (!(c.heldout_fraction >= 0 && c.heldout_fraction < 1))
    throw InputError("heldout_fraction", "must be in [0, 1)");
  ProfileReport rep;
  rep.target = c.target;
  rep.model = c.model;
  rep.hardware = c.hardware;
  rep.transport = c.transport;
  rep.samples = c.samples;
  rep.model_shape = c.model_shape;
  // Held-out split over sample indices (seeded); keep >= 3 d = 1 samples in
  // training.
  const size_t n = c.samples.size();
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(c.seed ^ 0x686f6c646f7574ULL);
  std::shuffle(idx.begin(), idx.end(), rng);
  rep.is_heldout.assign(n, false);
  const size_t want = static_cast<size_t>(std::floor(c.heldout_fraction * n));
  size_t held = 0;
  for (size_t i : idx) {
    if (held >= want) break;
    rep.is_heldout[i] = true;
    ++held;
  }
  std::vector<FitSample> train, test;
  for (size_t i = 0; i < n; ++i)
    (rep.is_heldout[i] ? test : train).push_back(c.samples[i]);
  FitOptions options;
  options.model = c.model_shape;
  if (!test.empty()) {
    try {
      const FitResult f = FitCostCoefficients(train, options);
      rep.heldout = EvaluateRelativeError(f.Apply(c.base), test, c.model_shape);
    } catch (const InputError&) {
      // Too few training compute samples: report the in-sample error instead.
      test.clear();
    }
  }
  rep.fit = FitCostCoefficients(c.samples, options);
  rep.cost_model = rep.fit.Apply(c.base);
  if (test.empty())
    rep.heldout =
        EvaluateRelativeError(rep.cost_model, c.samples, c.model_shape);
  // What dominates the residual: the worst samples under the final fit.
  std::vector<std::pair<double, size_t>> errs;
  for (size_t i = 0; i < n; ++i) {
    const FitSample& s = c.samples[i];
    const double pred = PredictTotalS(rep.cost_model, s, c.model_shape);
    errs.emplace_back((pred - s.total_s) / s.total_s, i);
  }
  std::sort(errs.begin(), errs.end(), [](const auto& a, const auto& b) {
    return std::fabs(a.first) > std::fabs(b.first);
  });
  std::ostringstream note;
  note << "largest residuals (final fit):";
  for (size_t k = 0; k < std::min<size_t>(3, errs.size()); ++k)
    note << fmt::format(" {} {:+.1f}%;", c.what[errs[k].second],
                        100 * errs[k].first);
  rep.residual_note = note.str();
  rep.wall_s = c.wall_s + std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
  return rep;
}

std::string ProfileReportToJson(const ProfileReport& r, int indent) {
  nlohmann::ordered_json j;
  j["target"] = r.target;
  j["model"] = r.model;
  j["hardware"] = r.hardware;
  if (!r.transport.empty()) j["transport"] = r.transport;
  auto coef = [](const FittedCoefficient& c) {
    nlohmann::ordered_json o;
    o["value"] = c.value;
    o["std_error"] = c.std_error;
    return o;
  };
  j["coefficients"]["alpha1"] = coef(r.fit.alpha1);
  j["coefficients"]["alpha2"] = coef(r.fit.alpha2);
  j["coefficients"]["beta1"] = coef(r.fit.beta1);
  j["coefficients"]["alpha3"] = coef(r.fit.alpha3);
  j["coefficients"]["beta2"] = coef(r.fit.beta2);
  j["coefficients"]["attn_overhead_tokens"] = coef(r.fit.attn_overhead_tokens);
  j["coefficients"]["gamma_intra"] = coef(r.fit.gamma_intra);
  j["coefficients"]["gamma_inter"] = coef(r.fit.gamma_inter);
  j["coefficients"]["gamma_serial"] = coef(r.fit.gamma_serial);
  j["coefficients"]["alpha3_home"] = coef(r.fit.alpha3_home);
  j["coefficients"]["alpha2_vision"] = coef(r.fit.alpha2_vision);
  j["heldout_error"]["mean"] = r.heldout.overall.mean;
  j["heldout_error"]["max"] = r.heldout.overall.max;
  j["heldout_error"]["points"] = r.heldout.overall.count;
  for (const auto& [label, e] : r.heldout.by_label) {
    j["heldout_error"]["by_label"][label]["mean"] = e.mean;
    j["heldout_error"]["by_label"][label]["max"] = e.max;
  }
  j["samples"] = r.samples.size();
  j["fit_rms_rel_residual"] = r.fit.rms_rel_residual;
  j["refined_on_total"] = r.fit.refined;
  j["residual_note"] = r.residual_note;
  j["wall_s"] = r.wall_s;
  j["cost_model"] =
      nlohmann::ordered_json::parse(CostModelToJson(r.cost_model, -1));
  return j.dump(indent);
}

std::string ProfileReportToTable(const ProfileReport& r) {
  std::ostringstream out;
  out << fmt::format("fcp profile: target {}  model {}\n{}\n", r.target,
                     r.model, r.hardware);
  if (!r.transport.empty())
    out << fmt::format("ring traffic measured by: {}\n", r.transport);
  out << fmt::format("{} samples ({} held out), {:.1f} s\n\n", r.samples.size(),
                     std::count(r.is_heldout.begin(), r.is_heldout.end(), true),
                     r.wall_s);
  out << fmt::format("{:<8} {:>14} {:>12} {:>8}  {}\n", "coef", "value",
                     "std error", "rel", "unit");
  auto row = [&](const char* name, const FittedCoefficient& c,
                 const char* unit) {
    out << fmt::format("{:<8} {:>14.6g} {:>12.3g} {:>7.2f}%  {}\n", name,
                       c.value, c.std_error,
                       c.value > 0 ? 100 * c.std_error / c.value : 0.0, unit);
  };
  row("alpha1", r.fit.alpha1, "s/token^2");
  row("alpha2", r.fit.alpha2, "s/token");
  row("beta1", r.fit.beta1, "s");
  row("alpha3", r.fit.alpha3, "bytes/token");
  row("beta2", r.fit.beta2, "s");
  row("h", r.fit.attn_overhead_tokens, "tokens (attn_overhead_tokens)");
  row("gamma_i", r.fit.gamma_intra, "s per ring step, one node");
  row("gamma_e", r.fit.gamma_inter, "s per ring step, across nodes");
  row("gamma_s", r.fit.gamma_serial,
      "s per ring step, not hidden (gamma_serial)");
  row("alpha3_h", r.fit.alpha3_home,
      "bytes/token of a rank's share, never hidden (alpha3_home)");
  if (r.fit.alpha2_vision.value > 0)  // fitted on multimodal samples only
    row("alpha2_v", r.fit.alpha2_vision,
        "s per vision token, on top of alpha2 (alpha2_vision)");
  out << fmt::format("{:<8} {:>14.6g} {:>30}  {}\n", "tail",
                     r.fit.ring_tail_steps, "(not fitted)",
                     "ring steps (ring_tail_steps)");
  out << "\nheld-out relative error of T(G, d) (paper Table 3: < 8%)\n";
  out << fmt::format("{:<20} {:>8} {:>8} {:>7}\n", "model", "mean", "max",
                     "points");
  for (const auto& [label, e] : r.heldout.by_label)
    out << fmt::format("{:<20} {:>7.2f}% {:>7.2f}% {:>7}\n", label,
                       100 * e.mean, 100 * e.max, e.count);
  // Per kind and degree, in-sample under the final fit (ring groups first).
  std::map<std::pair<CommKind, int>, ErrorStats> by_d;
  for (const auto& s : r.samples) {
    const double err =
        std::fabs(PredictTotalS(r.cost_model, s, r.model_shape) - s.total_s) /
        s.total_s;
    auto& e = by_d[{s.comm, s.degree}];
    e.mean = (e.mean * e.count + err) / (e.count + 1);
    e.max = std::max(e.max, err);
    ++e.count;
  }
  out << "\nin-sample error by degree (final fit)\n";
  for (const auto& [key, e] : by_d)
    out << fmt::format(
        "  {}d={:<4} mean {:>6.2f}%  max {:>6.2f}%  ({} points)\n",
        key.first == CommKind::kAllToAll ? "all-to-all " : "", key.second,
        100 * e.mean, 100 * e.max, e.count);
  out << "\n" << r.residual_note << "\n";
  return out.str();
}

}  // namespace fcp
