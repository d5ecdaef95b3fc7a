// Helpers shared by the baseline strategies (docs/design.md §4). Internal to
// src/baselines. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp::baselines {

// The contiguous ranks [first, first + degree).
std::vector<int> RankRange(int first, int degree);

// True if the sequences of `members` fit in memory on `degree` ranks.
bool FitsOn(const PlanRequest& request, const std::vector<int>& members,
            int degree);
bool FitsOnLoad(const CostModel& cm, double sum_tokens, int degree);

// Index of the first sequence whose d_min exceeds `degree`, or -1.
int FirstNotFitting(const PlanRequest& request, int64_t degree);

// A kInfeasible plan naming `sequence` and why.
Plan InfeasiblePlan(std::string_view strategy, const PlanRequest& request,
                    int sequence, const std::string& message);

// Smallest power of two >= x (x >= 1); saturates at 2^62.
int64_t NextPowerOfTwo(int64_t x);
bool IsPowerOfTwo(int64_t x);

// The model shape to use for head-count rules and the all-to-all cost: the
// request's, or the default model preset's (qwen3-8b: 32 q heads, 8 kv heads)
// when absent or when its head counts are unset. Sets *fallback accordingly.
ModelShape ShapeOrDefault(const PlanRequest& request, bool* fallback);

// The plan estimate (ms) of `plan` from the cost model and placement, as
// MakePlan reports it (EstimateMicroBatches on a copy: the list-schedule
// makespan).
double EstimateMs(const PlanRequest& request, const Plan& plan);

// Static data-parallel CP (Megatron CP / DeepSpeed-Ulysses): DP = N / cp
// replicas on the contiguous rank blocks [j*cp, (j+1)*cp). The global batch
// is dealt to the replicas in data-loader order in contiguous shares (the
// first K mod DP replicas get one extra sequence); each replica packs its
// share in order into micro-batches while its memory cap holds (a full
// micro-batch is closed, the next sequence opens a new one). Micro-batch i of
// every replica runs at the same time. Requires cp | N and every sequence to
// fit on cp ranks.
Plan StaticDataParallelPlan(const PlanRequest& request, int cp, CommKind comm);

std::string FormatDouble(double x, int precision = 6);

}  // namespace fcp::baselines
