// Batch / cost-model / plan JSON. Parsing is strict: unknown keys, duplicate
// keys, wrong types and out-of-range values are InputErrors naming the field.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fcp/cost_coefficients.h"
#include "fcp/cost_model.h"
#include "fcp/io.h"
#include "fcp/plan_check.h"
#include "fcp/presets.h"
#include "fcp/unknown_names.h"
#include "io/byte_source.h"
#include "io/strict_json.h"

namespace fcp {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr int kMaxDepth = 16;
constexpr size_t kMaxSequences = 10'000'000;
constexpr int64_t kMaxLength = int64_t{1} << 40;
constexpr int64_t kMaxRanks = int64_t{1} << 20;

constexpr size_t kMaxValuesOutsideSequences = size_t{1} << 16;

// Parse error text without nlohmann's "[json.exception...]" prefix.
std::string JsonErrorText(const std::string& message) {
  // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
  const auto pos = message.find("parse error");
  if (pos != std::string::npos) return message.substr(pos);
  // E.g. out_of_range.406 "number overflow parsing '2e308'" (issue 8: found
  // by fuzz/batch_json_fuzz; it escaped as an internal error before).
  const auto end = message.find("] ");
  return end == std::string::npos ? message : message.substr(end + 2);
}

// A SAX handler that builds the DOM of a JSON text strictly: nesting at most
// kMaxDepth containers, no duplicate keys (nlohmann silently keeps the last
// one, which would make two ranks read different batches if their parsers
// differed), at most kMaxValuesOutsideSequences values in the DOM at any time.
// The elements of a top-level "sequences" array are not kept: each is handed
// to `on_sequence` as soon as it is complete and dropped, so memory stays
// bounded by the parsed batch, not by the JSON document (issue 18).
class StrictDomSax {
 public:
  using SequenceFn = std::function<void(const json& element, size_t index)>;
  using KeyFn = std::function<void(const std::string& key)>;

  StrictDomSax(std::string what, SequenceFn on_sequence, KeyFn on_top_level_key,
               size_t max_values = kMaxValuesOutsideSequences)
      : what_(std::move(what)),
        on_sequence_(std::move(on_sequence)),
        on_top_level_key_(std::move(on_top_level_key)),
        max_values_(max_values) {}

  bool null() { return Value(nullptr); }
  bool boolean(bool v) { return Value(v); }
  bool number_integer(json::number_integer_t v) { return Value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(v); }
  bool number_float(json::number_float_t v, const std::string&) {
    return Value(v);
  }
  bool string(std::string& v) { return Value(std::move(v)); }
  bool binary(json::binary_t&) {
    throw InputError(what_, "invalid JSON: binary value");
  }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& key) {
    json& object = *stack_.back();
    if (object.contains(key))
      throw InputError(what_, "duplicate key \"" + key + "\"");
    if (stack_.size() == 1) {
      if (on_top_level_key_) on_top_level_key_(key);
      top_level_key_ = key;
    }
    object_element_ = &object[key];
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& e) {
    throw InputError(what_, "invalid JSON: " + JsonErrorText(e.what()));
  }

  json TakeRoot() { return std::move(root_); }

 private:
  json* Place(json&& value) {
    if (++values_ > max_values_) {
      const std::string limit =
          "more than " + std::to_string(max_values_) + " JSON values";
      if (stack_.size() >= 2 && stack_[1] == sequences_) {
        throw InputError("sequences[" + std::to_string(sequence_index_) + "]",
                         limit + " in one sequence");
      }
      throw InputError(top_level_key_.empty() ? what_ : top_level_key_, limit);
    }
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *object_element_ = std::move(value);
    return object_element_;
  }

  template <typename T>
  bool Value(T&& v) {
    Place(json(std::forward<T>(v)));
    if (!stack_.empty() && stack_.back() == sequences_) ConsumeSequence();
    return true;
  }

  bool Open(json&& container) {
    // Containers may nest kMaxDepth deep; a value inside the deepest is fine.
    if (stack_.size() >= static_cast<size_t>(kMaxDepth)) {
      throw InputError(
          what_, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    const bool is_sequences = on_sequence_ && container.is_array() &&
                              stack_.size() == 1 && stack_[0]->is_object() &&
                              top_level_key_ == "sequences";
    json* node = Place(std::move(container));
    stack_.push_back(node);
    if (is_sequences) {
      sequences_ = node;
      values_at_sequences_ = values_;
    }
    return true;
  }

  bool Close() {
    stack_.pop_back();
    if (!stack_.empty() && stack_.back() == sequences_) ConsumeSequence();
    return true;
  }

  // The last element of "sequences" is complete: hand it over and drop it.
  void ConsumeSequence() {
    auto& elements = sequences_->get_ref<json::array_t&>();
    on_sequence_(elements.back(), sequence_index_++);
    elements.pop_back();
    values_ = values_at_sequences_;
  }

  std::string what_;
  SequenceFn on_sequence_;
  KeyFn on_top_level_key_;
  json root_;
  std::vector<json*> stack_;  // the open containers, outermost first
  json* object_element_ = nullptr;
  std::string top_level_key_;
  json* sequences_ = nullptr;
  size_t values_at_sequences_ = 0;
  size_t sequence_index_ = 0;
  size_t values_ = 0;
  size_t max_values_;
};

// Runs `sax` over the bytes of `source` (strict: nothing may follow the value).
void SaxParse(io::ByteSource& source, StrictDomSax& sax,
              const std::string& what) {
  try {
    json::sax_parse(source.begin(), source.end(), &sax);
  } catch (const json::exception& e) {
    throw InputError(what, "invalid JSON: " + JsonErrorText(e.what()));
  }
}

// The whole document of a small JSON input (a cost model) as a DOM.
json ParseStrict(io::ByteSource& source, const std::string& what) {
  StrictDomSax sax(what, nullptr, nullptr);
  SaxParse(source, sax, what);
  return sax.TakeRoot();
}

}  // namespace

json ParseJsonStrict(std::string_view text, const std::string& what,
                     size_t max_values) {
  io::ByteSource source(text, what, /*reject_nul=*/true);
  StrictDomSax sax(what, nullptr, nullptr, max_values);
  SaxParse(source, sax, what);
  return sax.TakeRoot();
}

namespace {

std::string TypeName(const json& j) { return j.type_name(); }

// A JSON integer in [lo, hi]; floats with an integral value are accepted.
int64_t GetInt(const json& j, const std::string& field, int64_t lo,
               int64_t hi) {
  int64_t v = 0;
  if (j.is_number_integer()) {
    if (j.is_number_unsigned()) {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) {
        throw InputError(field, "must be <= " + std::to_string(hi));
      }
      v = static_cast<int64_t>(u);
    } else {
      v = j.get<int64_t>();
    }
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      throw InputError(field, "must be an integer");
    }
    if (d > static_cast<double>(hi))
      throw InputError(field, "must be <= " + std::to_string(hi));
    if (d < static_cast<double>(lo))
      throw InputError(field, "must be >= " + std::to_string(lo));
    v = static_cast<int64_t>(d);
  } else {
    throw InputError(field, "must be an integer, got " + TypeName(j));
  }
  if (v < lo) throw InputError(field, "must be >= " + std::to_string(lo));
  if (v > hi) throw InputError(field, "must be <= " + std::to_string(hi));
  return v;
}

double GetNumber(const json& j, const std::string& field) {
  if (!j.is_number())
    throw InputError(field, "must be a number, got " + TypeName(j));
  const double v = j.get<double>();
  if (!std::isfinite(v)) throw InputError(field, "must be finite");
  return v;
}

// Applies the keys of `obj` to `cm` (their source: `given_as`); returns how
// many were given. Timing coefficients describe a model as a whole (hand
// values, a fit, a fit made before cost model v2): the base's v2 terms would
// not match them, so an object that sets any leaves each v2 term it does not
// set at 0 (docs/design.md §2: 0 unless set).
int ApplyCostModel(const json& obj, CostModel& cm, CoefficientSource given_as,
                   CostSources* sources) {
  if (!obj.is_object())
    throw InputError("cost_model", "must be an object, got " + TypeName(obj));
  bool given[kNumCostCoefficients] = {};
  int count = 0;
  bool sets_timing = false;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const CostCoefficient* c = FindCostCoefficient(it.key());
    if (!c) throw InputError("cost_model." + it.key(), "unknown coefficient");
    cm.*(c->member) = GetNumber(it.value(), "cost_model." + it.key());
    given[c - kCostCoefficients] = true;
    sets_timing |= c->fitted;
    ++count;
  }
  for (size_t i = 0; i < kNumCostCoefficients; ++i) {
    const bool zeroed = !given[i] && sets_timing && kCostCoefficients[i].v2;
    if (zeroed) cm.*(kCostCoefficients[i].member) = 0;
    if (sources && (given[i] || zeroed))
      (*sources)[i] = given[i] ? given_as : CoefficientSource::kUnsetZero;
  }
  return count;
}

Sequence ParseSequence(const json& j, size_t index) {
  const std::string field = "sequences[" + std::to_string(index) + "]";
  Sequence s;
  if (j.is_object()) {
    bool has_eta = false, has_attention = false;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key == "length") {
        s.length_tokens = GetInt(it.value(), field + ".length", 1, kMaxLength);
      } else if (key == "eta") {
        s.eta = GetNumber(it.value(), field + ".eta");
        if (s.eta < 0 || s.eta > 1)
          throw InputError(field + ".eta", "must be in [0, 1]");
        has_eta = true;
      } else if (key == "vision_tokens") {
        s.vision_tokens =
            GetInt(it.value(), field + ".vision_tokens", 0, kMaxLength);
      } else if (key == "attention") {
        if (!it.value().is_string()) {
          throw InputError(field + ".attention",
                           "must be \"causal\" or \"full\"");
        }
        const std::string mask = it.value().get<std::string>();
        if (mask == "causal") {
          s.eta = 0;
        } else if (mask == "full") {
          s.eta = 1;
        } else {
          throw InputError(field + ".attention",
                           "must be \"causal\" or \"full\"");
        }
        has_attention = true;
      } else {
        throw InputError(field + "." + key,
                         "unknown key (expected length, attention, eta, "
                         "vision_tokens)");
      }
    }
    if (!j.contains("length")) throw InputError(field + ".length", "missing");
    if (s.vision_tokens > s.length_tokens) {
      throw InputError(
          field + ".vision_tokens",
          "must not exceed length (" + std::to_string(s.length_tokens) + ")");
    }
    if (has_eta && has_attention) {
      throw InputError(field, "give either attention or eta, not both");
    }
  } else {
    s.length_tokens = GetInt(j, field, 1, kMaxLength);
  }
  return s;
}

// The batch from a streamed JSON text. Sequences are converted as they are
// read; the first bad one is reported only after the rest of the document
// parsed and the cluster, model and cost model were checked, so the error
// order is the same as for a whole-document parse.
// Long because: one streamed pass over the document's members, each checked
// where it is read (the error order is documented).
BatchInput ParseBatch(io::ByteSource& source) {
  std::vector<Sequence> sequences;
  std::optional<InputError> sequence_error;
  size_t sequence_count = 0;
  auto on_sequence = [&](const json& element, size_t index) {
    if (++sequence_count > kMaxSequences) {
      throw InputError("sequences", "at most " + std::to_string(kMaxSequences) +
                                        " sequences");
    }
    if (sequence_error) return;
    try {
      sequences.push_back(ParseSequence(element, index));
    } catch (const InputError& e) {
      sequence_error = e;
    }
  };
  auto on_top_level_key = [](const std::string& k) {
    if (k != "cluster" && k != "model" && k != "cost_model" &&
        k != "grad_sync" && k != "group_time_sigma" && k != "communicators" &&
        k != "sequences") {
      throw InputError(
          k,
          "unknown key (expected cluster, model, cost_model, grad_sync, "
          "group_time_sigma, communicators, sequences)");
    }
  };
  StrictDomSax sax("input", on_sequence, on_top_level_key);
  SaxParse(source, sax, "input");
  const json root = sax.TakeRoot();
  if (!root.is_object())
    throw InputError("input", "must be a JSON object, got " + TypeName(root));

  BatchInput in;
  // Cluster: a preset name or {"ranks": N, "ranks_per_node": R[, "hardware":
  // preset]}.
  const ClusterPreset* hardware = FindClusterPreset(kDefaultCluster);
  in.cluster_name = std::string(kDefaultCluster);
  if (root.contains("cluster")) {
    const json& c = root["cluster"];
    if (c.is_string()) {
      hardware = FindClusterPreset(c.get<std::string>());
      if (!hardware) {
        std::string names;
        for (const auto& p : ClusterPresets())
          names += (names.empty() ? "" : ", ") + p.name;
        throw InputError("cluster", "unknown preset \"" + c.get<std::string>() +
                                        "\" (known: " + names + ")");
      }
      in.cluster_name = hardware->name;
      in.request.cluster = {hardware->num_ranks, hardware->ranks_per_node};
    } else if (c.is_object()) {
      in.cluster_name.clear();
      for (auto it = c.begin(); it != c.end(); ++it) {
        if (it.key() != "ranks" && it.key() != "ranks_per_node" &&
            it.key() != "hardware") {
          throw InputError(
              "cluster." + it.key(),
              "unknown key (expected ranks, ranks_per_node, hardware)");
        }
      }
      if (!c.contains("ranks")) throw InputError("cluster.ranks", "missing");
      in.request.cluster.num_ranks =
          static_cast<int>(GetInt(c["ranks"], "cluster.ranks", 1, kMaxRanks));
      in.request.cluster.ranks_per_node =
          c.contains("ranks_per_node")
              ? static_cast<int>(GetInt(c["ranks_per_node"],
                                        "cluster.ranks_per_node", 1, kMaxRanks))
              : in.request.cluster.num_ranks;
      if (c.contains("hardware")) {
        const json& h = c["hardware"];
        hardware =
            h.is_string() ? FindClusterPreset(h.get<std::string>()) : nullptr;
        if (!hardware) {
          throw InputError(
              "cluster.hardware",
              h.is_string() ? UnknownClusterPresetMessage(h.get<std::string>())
                            : "must name a cluster preset, got " + TypeName(h));
        }
      }
    } else {
      throw InputError(
          "cluster", "must be a preset name or an object, got " + TypeName(c));
    }
  } else {
    in.request.cluster = {hardware->num_ranks, hardware->ranks_per_node};
  }

  // Model preset (optional) and cost model overrides.
  const ModelPreset* model = nullptr;
  if (root.contains("model")) {
    const json& m = root["model"];
    if (!m.is_string())
      throw InputError("model", "must be a preset name, got " + TypeName(m));
    model = FindModelPreset(m.get<std::string>());
    if (!model) {
      std::string names;
      for (const auto& p : ModelPresets())
        names += (names.empty() ? "" : ", ") + p.shape.name;
      throw InputError("model", "unknown preset \"" + m.get<std::string>() +
                                    "\" (known: " + names + ")");
    }
    in.model_name = model->shape.name;
  }
  const ModelPreset* base_model =
      model ? model : FindModelPreset(kDefaultModel);
  ClusterPreset sized = *hardware;
  sized.num_ranks = in.request.cluster.num_ranks;
  in.request.cost = DeriveCostModel(*base_model, sized);
  const bool memory_given = root.contains("cost_model") &&
                            root["cost_model"].is_object() &&
                            (root["cost_model"].contains("mem_static") ||
                             root["cost_model"].contains("mem_capacity"));
  if (!memory_given) CheckModelFitsOneRank(in.request.cost, *base_model, sized);
  int given = 0;
  in.cost_sources.assign(kNumCostCoefficients, CoefficientSource::kPreset);
  if (root.contains("cost_model")) {
    given = ApplyCostModel(root["cost_model"], in.request.cost,
                           CoefficientSource::kInput, &in.cost_sources);
  }
  const bool complete = given == static_cast<int>(kNumCostCoefficients);
  if (model || !complete) in.request.model = base_model->shape;
  if (!model && !complete) in.model_name = base_model->shape.name;
  CheckCostModel(in.request.cost);

  // The step's gradient sync (optional): {"collective_s": S[, "buckets": B]
  // [, "forward_share": F]}, with ValidateRequest's ranges.
  if (root.contains("grad_sync")) {
    const json& g = root["grad_sync"];
    if (!g.is_object())
      throw InputError("grad_sync", "must be an object, got " + TypeName(g));
    GradientSync sync;
    for (auto it = g.begin(); it != g.end(); ++it) {
      const std::string field = "grad_sync." + it.key();
      if (it.key() == "collective_s") {
        sync.collective_s = GetNumber(*it, field);
      } else if (it.key() == "buckets") {
        sync.buckets = static_cast<int>(
            GetInt(*it, field, 1, std::numeric_limits<int>::max()));
      } else if (it.key() == "forward_share") {
        sync.forward_share = GetNumber(*it, field);
      } else {
        throw InputError(
            field,
            "unknown key (expected collective_s, buckets, forward_share)");
      }
    }
    if (!g.contains("collective_s"))
      throw InputError("grad_sync.collective_s", "missing");
    CheckGradientSync(sync);
    in.request.grad_sync = sync;
  }
  // The spread of group times around their estimates (optional, log-normal
  // sigma).
  if (root.contains("group_time_sigma")) {
    const double sigma =
        GetNumber(root["group_time_sigma"], "group_time_sigma");
    if (!(sigma >= 0 && sigma <= kMaxGroupTimeSigma)) {
      throw InputError("group_time_sigma", "must be a number in [0, 2]");
    }
    in.request.group_time_sigma = sigma;
  }
  // The runtime's communicators (optional): {"create_s": S, "existing":
  // [[ranks], ...]}.
  if (root.contains("communicators")) {
    const json& c = root["communicators"];
    if (!c.is_object())
      throw InputError("communicators",
                       "must be an object, got " + TypeName(c));
    CommunicatorCache cache;
    for (auto it = c.begin(); it != c.end(); ++it) {
      const std::string field = "communicators." + it.key();
      if (it.key() == "create_s") {
        cache.create_s = GetNumber(*it, field);
      } else if (it.key() == "existing") {
        if (!it->is_array())
          throw InputError(field, "must be an array, got " + TypeName(*it));
        for (size_t i = 0; i < it->size(); ++i) {
          const json& set = (*it)[i];
          const std::string set_field = field + "[" + std::to_string(i) + "]";
          if (!set.is_array())
            throw InputError(set_field, "must be an array of ranks");
          std::vector<int> ranks;
          for (size_t j = 0; j < set.size(); ++j) {
            const std::string rank_field =
                set_field + "[" + std::to_string(j) + "]";
            ranks.push_back(static_cast<int>(GetInt(
                set[j], rank_field, 0, std::numeric_limits<int>::max())));
          }
          cache.existing.push_back(std::move(ranks));
        }
      } else {
        throw InputError(field, "unknown key (expected create_s, existing)");
      }
    }
    if (!c.contains("create_s"))
      throw InputError("communicators.create_s", "missing");
    CheckCommunicatorCache(cache, in.request.cluster.num_ranks);
    in.request.communicators = std::move(cache);
  }

  if (!root.contains("sequences")) throw InputError("sequences", "missing");
  const json& seqs = root["sequences"];
  if (!seqs.is_array())
    throw InputError("sequences", "must be an array, got " + TypeName(seqs));
  if (sequence_count == 0) throw InputError("sequences", "must not be empty");
  if (sequence_error) throw *sequence_error;
  in.request.sequences = std::move(sequences);
  return in;
}

// Keys an `fcp profile` report has beside its cost_model (ProfileReportToJson),
// with the JSON type each must have. Anything else beside cost_model is an
// error naming the key: a file that is neither a cost model nor a profile
// report must not be half-read.
struct ReportKey {
  const char* name;
  bool (json::*is_type)() const noexcept;
  const char* type_name;
};
constexpr ReportKey kProfileReportKeys[] = {
    {"target", &json::is_string, "a string"},
    {"model", &json::is_string, "a string"},
    {"hardware", &json::is_string, "a string"},
    {"transport", &json::is_string, "a string"},
    {"coefficients", &json::is_object, "an object"},
    {"heldout_error", &json::is_object, "an object"},
    {"samples", &json::is_number_unsigned, "a non-negative integer"},
    {"fit_rms_rel_residual", &json::is_number, "a number"},
    {"refined_on_total", &json::is_boolean, "a boolean"},
    {"residual_note", &json::is_string, "a string"},
    {"wall_s", &json::is_number, "a number"},
    // python -m fcp profile --target torch: the profiled layer's shape, dtype,
    // device.
    {"torch", &json::is_object, "an object"},
};

CostModel ParseCostModel(io::ByteSource& source, const CostModel& base,
                         CostSources* sources) {
  json root = ParseStrict(source, "cost_model");
  CoefficientSource given_as = CoefficientSource::kInput;
  if (root.is_object() && root.contains("cost_model")) {
    given_as = CoefficientSource::kProfile;
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (it.key() == "cost_model") continue;
      const ReportKey* known = nullptr;
      for (const ReportKey& k : kProfileReportKeys) {
        if (it.key() == k.name) known = &k;
      }
      if (!known) {
        throw InputError(
            it.key(),
            "unknown key beside cost_model (a cost-model file is a cost_model "
            "object or an fcp profile report)");
      }
      if (!(it.value().*(known->is_type))()) {
        throw InputError(it.key(), std::string("must be ") + known->type_name +
                                       ", got " + TypeName(it.value()));
      }
    }
    json inner = std::move(root["cost_model"]);
    root = std::move(inner);
  }
  if (sources && sources->size() != kNumCostCoefficients)
    sources->assign(kNumCostCoefficients, CoefficientSource::kPreset);
  CostModel cm = base;
  ApplyCostModel(root, cm, given_as, sources);
  CheckCostModel(cm);
  return cm;
}

}  // namespace

BatchInput ParseBatchJson(std::string_view text) {
  io::ByteSource source(text, "input", /*reject_nul=*/true);
  return ParseBatch(source);
}

BatchInput ReadBatchJson(const std::string& path) {
  io::ByteSource source(path, /*reject_nul=*/true);
  return ParseBatch(source);
}

CostModel ParseCostModelJson(std::string_view text, const CostModel& base,
                             CostSources* sources) {
  io::ByteSource source(text, "cost_model", /*reject_nul=*/true);
  return ParseCostModel(source, base, sources);
}

CostModel ReadCostModelJson(const std::string& path, const CostModel& base,
                            CostSources* sources) {
  io::ByteSource source(path, /*reject_nul=*/true);
  return ParseCostModel(source, base, sources);
}

std::string CostSourcesNote(const CostSources& sources) {
  constexpr std::pair<CoefficientSource, const char*> kOrder[] = {
      {CoefficientSource::kInput, "input"},
      {CoefficientSource::kProfile, "fcp profile"},
      {CoefficientSource::kPreset, "preset"},
      {CoefficientSource::kUnsetZero,
       "0 (v2 term unset beside timing coefficients)"},
  };
  std::string note;
  for (const auto& [source, label] : kOrder) {
    std::string names;
    for (size_t i = 0; i < sources.size() && i < kNumCostCoefficients; ++i) {
      if (sources[i] == source)
        names += (names.empty() ? "" : ", ") +
                 std::string(kCostCoefficients[i].name);
    }
    if (!names.empty())
      note += (note.empty() ? "" : "; ") + std::string(label) + ": " + names;
  }
  return note;
}

std::string CostModelToJson(const CostModel& cm, int indent) {
  ordered_json j;
  for (const CostCoefficient& c : kCostCoefficients)
    j[std::string(c.name)] = cm.*(c.member);
  return j.dump(indent);
}

// Like dump(indent), but arrays of numbers stay on one line, so a plan for
// 1,024 ranks is still readable.
static void DumpCompact(const ordered_json& j, int indent, int depth,
                        std::string& out) {
  const auto pad = [&](int d) {
    out.append(static_cast<size_t>(d * indent), ' ');
  };
  if (j.is_object() && !j.empty()) {
    out += "{\n";
    size_t i = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++i) {
      pad(depth + 1);
      out += ordered_json(it.key()).dump() + ": ";
      DumpCompact(it.value(), indent, depth + 1, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    pad(depth);
    out += "}";
  } else if (j.is_array() && !j.empty() &&
             !std::all_of(j.begin(), j.end(), [](const ordered_json& e) {
               return e.is_number();
             })) {
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      pad(depth + 1);
      DumpCompact(j[i], indent, depth + 1, out);
      out += i + 1 < j.size() ? ",\n" : "\n";
    }
    pad(depth);
    out += "]";
  } else {
    std::string flat =
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (j.is_array()) {
      // dump(-1) writes [1,2,3]; add a space after commas for readability.
      std::string spaced;
      for (char c : flat) {
        spaced += c;
        if (c == ',') spaced += ' ';
      }
      flat = std::move(spaced);
    }
    out += flat;
  }
}

std::string PlanToJson(const Plan& plan, int indent) {
  ordered_json j;
  j["strategy"] = plan.strategy;
  j["ranks"] = plan.num_ranks;
  j["status"] = plan.status == PlanStatus::kOk ? "ok" : "infeasible";
  j["est_ms"] = plan.est_ms;
  j["lower_bound_ms"] = plan.lower_bound_ms;
  j["gap"] = plan.gap();
  j["solver_ms"] = plan.solver_ms;
  if (!plan.notes.empty()) {
    ordered_json notes = ordered_json::object();
    for (const auto& [k, v] : plan.notes) notes[k] = v;
    j["notes"] = notes;
  }
  ordered_json mbs = ordered_json::array();
  for (const MicroBatchPlan& mb : plan.micro_batches) {
    ordered_json m;
    m["est_ms"] = mb.est_ms;
    ordered_json groups = ordered_json::array();
    for (const GroupPlan& g : mb.groups) {
      ordered_json gj;
      gj["ranks"] = g.ranks;
      gj["sequences"] = g.sequences;
      gj["est_ms"] = g.est_ms;
      gj["mem_bytes"] = g.mem_bytes;
      if (g.comm == CommKind::kAllToAll) gj["comm"] = "all-to-all";
      groups.push_back(std::move(gj));
    }
    m["groups"] = std::move(groups);
    mbs.push_back(std::move(m));
  }
  j["micro_batches"] = std::move(mbs);
  if (plan.status != PlanStatus::kOk) {
    j["message"] = plan.message;
    j["infeasible_sequence"] = plan.infeasible_sequence;
  }
  if (indent < 0)
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  DumpCompact(j, indent, 0, out);
  return out;
}

}  // namespace fcp
