// Timelines of a plan (planner estimate or simulated), their colouring and
// labels. See include/fcp/plot.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fcp/plot.h"
#include "fcp/scheduler.h"

namespace fcp::plot {
namespace {

TimelineSlice SliceOf(const Plan& plan, std::span<const Sequence> sequences,
                      size_t mb, size_t g) {
  const GroupPlan& gp = plan.micro_batches[mb].groups[g];
  TimelineSlice s;
  s.micro_batch = static_cast<int>(mb);
  s.group = static_cast<int>(g);
  s.ranks = gp.ranks;
  s.comm = gp.comm;
  s.num_sequences = static_cast<int>(gp.sequences.size());
  for (int idx : gp.sequences) {
    if (idx < 0 || static_cast<size_t>(idx) >= sequences.size())
      throw InputError(
          "plot",
          fmt::format("micro_batches[{}].groups[{}]: sequence {} outside "
                      "the batch",
                      mb, g, idx));
    s.tokens += sequences[static_cast<size_t>(idx)].length_tokens;
  }
  return s;
}

void CheckPlan(const Plan& plan, int ranks_per_node) {
  if (plan.status != PlanStatus::kOk)
    throw InputError("plot", "plan is not feasible");
  if (plan.micro_batches.empty())
    throw InputError("plot", "plan has no micro-batches");
  if (ranks_per_node < 1)
    throw InputError("plot", "ranks_per_node must be >= 1");
}

// Smallest and largest rank of a slice.
std::pair<int, int> RankSpan(const TimelineSlice& s) {
  const auto [lo, hi] = std::minmax_element(s.ranks.begin(), s.ranks.end());
  return {*lo, *hi};
}

std::string Tokens(int64_t tokens) {
  if (tokens >= 1000000) return fmt::format("{:.1f}M", tokens / 1e6);
  if (tokens >= 1000) return fmt::format("{:.1f}k", tokens / 1e3);
  return std::to_string(tokens);
}

}  // namespace

Timeline PlanTimeline(const Plan& plan, std::span<const Sequence> sequences,
                      int ranks_per_node) {
  CheckPlan(plan, ranks_per_node);
  Timeline t;
  t.name = plan.strategy;
  t.source = "planner estimate";
  t.num_ranks = plan.num_ranks;
  t.ranks_per_node = ranks_per_node;
  for (size_t mb = 0; mb < plan.micro_batches.size(); ++mb) {
    for (size_t g = 0; g < plan.micro_batches[mb].groups.size(); ++g) {
      for (int r : plan.micro_batches[mb].groups[g].ranks) {
        if (r < 0 || r >= plan.num_ranks) {
          throw InputError(
              "plot",
              fmt::format("micro_batches[{}].groups[{}]: rank {} outside "
                          "[0, {})",
                          mb, g, r, plan.num_ranks));
        }
      }
    }
  }
  // The plan estimate's own schedule (ListScheduleMs): a group starts when
  // all its ranks are free.
  std::vector<std::vector<double>> starts;
  t.end_ms = ListScheduleMs(plan.num_ranks, plan.micro_batches, &starts);
  for (size_t mb = 0; mb < plan.micro_batches.size(); ++mb) {
    const auto& groups = plan.micro_batches[mb].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].sequences.empty() || groups[g].ranks.empty()) continue;
      TimelineSlice s = SliceOf(plan, sequences, mb, g);
      s.start_ms = starts[mb][g];
      s.end_ms = s.start_ms + groups[g].est_ms;
      t.slices.push_back(std::move(s));
    }
  }
  return t;
}

Timeline SimulatedTimeline(const Plan& plan,
                           std::span<const Sequence> sequences,
                           const sim::SimResult& result, int ranks_per_node) {
  CheckPlan(plan, ranks_per_node);
  if (result.oom)
    throw InputError("plot", "the simulated plan does not fit in memory");
  Timeline t;
  t.name = plan.strategy;
  t.source = "simulated";
  t.num_ranks = plan.num_ranks;
  t.ranks_per_node = ranks_per_node;
  for (const auto& span : result.group_spans) {
    const auto mb = static_cast<size_t>(span.micro_batch);
    if (span.micro_batch < 0 || mb >= plan.micro_batches.size() ||
        span.group < 0 ||
        static_cast<size_t>(span.group) >= plan.micro_batches[mb].groups.size())
      throw InputError("plot",
                       "simulation result does not belong to this plan");
    TimelineSlice s =
        SliceOf(plan, sequences, static_cast<size_t>(span.micro_batch),
                static_cast<size_t>(span.group));
    s.start_ms = 1e3 * span.start_s;
    s.end_ms = 1e3 * span.end_s;
    t.end_ms = std::max(t.end_ms, s.end_ms);
    t.slices.push_back(std::move(s));
  }
  return t;
}

bool SlicesTouch(const TimelineSlice& a, const TimelineSlice& b) {
  // Relative tolerance: ends computed as sums of durations may differ in the
  // last bits from the next start.
  const double eps =
      1e-9 * std::max({1.0, std::abs(a.end_ms), std::abs(b.end_ms)});
  const bool overlap_time =
      a.start_ms < b.end_ms - eps && b.start_ms < a.end_ms - eps;
  const bool abut_time = std::abs(a.end_ms - b.start_ms) <= eps ||
                         std::abs(b.end_ms - a.start_ms) <= eps;
  bool share_rank = false, neighbour_rank = false;
  for (int r : a.ranks) {
    for (int q : b.ranks) {
      share_rank |= r == q;
      neighbour_rank |= r == q + 1 || r + 1 == q;
    }
  }
  return (share_rank && (abut_time || overlap_time)) ||
         (neighbour_rank && (overlap_time || abut_time));
}

std::vector<int> AssignColours(const Timeline& timeline, int palette_size) {
  const size_t n = timeline.slices.size();
  std::vector<int> colour(n, 0);
  if (palette_size <= 1) return colour;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const auto& a = timeline.slices[x];
    const auto& b = timeline.slices[y];
    if (a.start_ms != b.start_ms) return a.start_ms < b.start_ms;
    return RankSpan(a).first < RankSpan(b).first;
  });
  // Slices indexed by rank so that only candidates sharing or neighbouring a
  // rank are compared (plans with 10^4 groups stay fast).
  std::vector<std::vector<size_t>> by_rank(
      static_cast<size_t>(std::max(1, timeline.num_ranks)));
  std::vector<int> conflicts(static_cast<size_t>(palette_size));
  for (size_t i : order) {
    const auto& s = timeline.slices[i];
    std::fill(conflicts.begin(), conflicts.end(), 0);
    for (int r : s.ranks) {
      for (int q = r - 1; q <= r + 1; ++q) {
        if (q < 0 || static_cast<size_t>(q) >= by_rank.size()) continue;
        for (size_t j : by_rank[static_cast<size_t>(q)]) {
          if (SlicesTouch(s, timeline.slices[j]))
            ++conflicts[static_cast<size_t>(colour[j])];
        }
      }
    }
    // The first free colour, else the least conflicting one.
    int best = 0;
    for (int c = 0; c < palette_size; ++c) {
      if (conflicts[static_cast<size_t>(c)] <
          conflicts[static_cast<size_t>(best)])
        best = c;
      if (conflicts[static_cast<size_t>(c)] == 0) {
        best = c;
        break;
      }
    }
    colour[i] = best;
    for (int r : s.ranks) {
      if (r >= 0 && static_cast<size_t>(r) < by_rank.size())
        by_rank[static_cast<size_t>(r)].push_back(i);
    }
  }
  return colour;
}

std::string FitLabel(const TimelineSlice& slice, double width_px,
                     double height_px, double char_px, double line_px) {
  if (height_px < line_px) return "";
  const int d = static_cast<int>(slice.ranks.size());
  const std::string candidates[] = {
      fmt::format("d={} k={} {} tok", d, slice.num_sequences,
                  Tokens(slice.tokens)),
      fmt::format("d={} k={}", d, slice.num_sequences), fmt::format("d={}", d),
      std::to_string(d)};
  for (const auto& text : candidates) {
    // One character of margin on each side.
    if ((static_cast<double>(text.size()) + 1.0) * char_px <= width_px)
      return text;
  }
  return "";
}

}  // namespace fcp::plot
