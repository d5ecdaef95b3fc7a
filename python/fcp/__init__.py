"""fcp: Flexible Context Parallelism planner (Python API).

    import fcp
    sched = fcp.Scheduler(cluster="ascend910c-4x16", model="qwen3-8b")
    plan = sched.plan([131072, 8192, 4096, 512])       # list or numpy array
    plan.micro_batches[0].groups[0].ranks              # global ranks, ring order
    plan.est_ms, plan.lower_bound_ms, plan.to_dict()   # to_dict() == `fcp plan --format json`
    fcp.presets()                                      # {"models": [...], "clusters": [...]}

The planner is C++ (module ``fcp._fcp``; ``pip install .`` builds and installs
it with the ``fcp`` command, ``make build`` lays it out in build/python/fcp);
``fcp.torch`` (torch.distributed glue) and ``fcp.megatron`` are pure Python and
are imported on demand: ``import fcp.torch``. ``fcp.__version__`` is the
project version (CMake's project(VERSION)), as ``fcp --version`` prints it.
Plans, cost models and clusters pickle; ``fcp.Plan.from_dict(plan.to_dict())``
rebuilds a plan.

Errors: bad input raises ValueError whose message starts with the field
("sequences[3]: must be >= 1", "cluster: unknown preset ..."); an internal
failure raises RuntimeError. A batch that cannot fit is not an error: the plan's
``status`` is ``PlanStatus.INFEASIBLE`` and ``message`` says why.
Thread-safety: a Scheduler's cluster, model and planning options are fixed at
construction. Only ``observe`` changes it: it replaces the learnt coefficients
(a new request object, never the old one modified), so a ``plan`` running
meanwhile on another thread plans with the coefficients before or after, never
a mix; call ``observe`` from one thread at a time. ``plan`` releases the GIL
while planning, so several threads may plan concurrently.
"""

from __future__ import annotations

import copy as _copy
import json as _json
import numbers as _numbers
import operator as _operator

try:
    from . import _fcp  # noqa: F401  (C++ planner)
except ImportError as _err:  # the pure-Python parts (fcp.torch) still work
    _fcp = None
    _IMPORT_ERROR = _err
    try:  # an installed package's metadata; the module carries the same
        from importlib.metadata import version as _dist_version

        __version__ = _dist_version("fcp")
    except Exception:  # a source tree without the module
        __version__ = "0+unknown"
else:
    _IMPORT_ERROR = None
    # One source of truth: CMake's project(VERSION), compiled into the module
    # (the `fcp --version` of the CLI prints the same string).
    __version__ = _fcp.__version__
    from ._fcp import (  # noqa: F401  (re-exported plain structs)
        BatchInput,
        CommKind,
        CostModel,
        GroupPlan,
        MicroBatchPlan,
        ModelShape,
        Plan,
        PlanOptions,
        PlanRequest,
        PlanStatus,
        Sequence,
    )

__all__ = [
    "Scheduler",
    "presets",
    "strategies",
    "plan_json",
    "validate_plan",
    "Plan",
    "PlanStatus",
    "CostModel",
    "Cluster",
    "Sequence",
    "GroupPlan",
    "MicroBatchPlan",
    "MAX_SEQUENCES",
    "__version__",
]

# Limits of `fcp plan`'s input, applied to Python input the same way.
MAX_SEQUENCES = 10_000_000
_MAX_LENGTH = 1 << 40
_INT_MAX = 2**31 - 1

# The cost model's fields, from the C++ table (fcp/cost_coefficients.h).
_COST_FIELDS = tuple(c["name"] for c in _fcp.cost_coefficients) if _fcp is not None else ()


def _core():
    if _fcp is None:
        raise ImportError(
            "fcp._fcp (the C++ planner) is not built; run `make build` and set "
            f"PYTHONPATH=build/python ({_IMPORT_ERROR})"
        )
    return _fcp


def presets() -> dict:
    """Built-in presets: {"models": [names], "clusters": [names], "strategies": [names]}."""
    core = _core()
    return {
        "models": [p.shape.name for p in core.model_presets()],
        "clusters": [p.name for p in core.cluster_presets()],
        "strategies": list(core.strategy_names()),
    }


def strategies() -> list:
    """Registered planning strategies, default ("fcp") first."""
    return list(_core().strategy_names())


def _plan_to_dict(plan) -> dict:
    return _json.loads(plan.to_json(-1))


def _plan_repr(plan) -> str:
    return (
        f"<fcp.Plan strategy={plan.strategy!r} status={plan.status.name} "
        f"micro_batches={len(plan.micro_batches)} est_ms={plan.est_ms:.3f} "
        f"lower_bound_ms={plan.lower_bound_ms:.3f}>"
    )


def _group_repr(g) -> str:
    return (
        f"<fcp.GroupPlan ranks={list(g.ranks)} sequences={list(g.sequences)} est_ms={g.est_ms:.3f}>"
    )


def _field(d, key, where, kinds, default=None, required=True):
    if key not in d:
        if required:
            raise ValueError(f"{where}{key}: missing")
        return default
    v = d[key]
    if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
        raise ValueError(f"{where}{key}: must be {kinds[0].__name__}, got {type(v).__name__}")
    return v


def _int_list(v, field):
    if not isinstance(v, (list, tuple)) or any(
        isinstance(x, bool) or not isinstance(x, _numbers.Integral) for x in v
    ):
        raise ValueError(f"{field}: must be a list of integers")
    for i, x in enumerate(v):  # the C++ fields are int; ranges are checked there
        if not -(2**31) <= int(x) < 2**31:
            raise ValueError(f"{field}[{i}]: out of range, got {int(x)}")
    return [int(x) for x in v]


def _plan_from_dict(d):
    """Rebuilds an ``fcp.Plan`` from :meth:`Plan.to_dict` (the JSON of
    ``fcp plan``). ``gap`` is derived, so it is ignored. Raises ValueError
    naming the field."""
    core = _core()
    if not isinstance(d, dict):
        raise ValueError(f"plan: must be a dict, got {type(d).__name__}")
    num = (int, float)
    plan = core.Plan()
    plan.strategy = _field(d, "strategy", "", (str,))
    plan.num_ranks = _check_int(_field(d, "ranks", "", (int,)), "ranks", 0, _INT_MAX)
    status = _field(d, "status", "", (str,))
    if status not in ("ok", "infeasible"):
        raise ValueError(f"status: must be 'ok' or 'infeasible', got {status!r}")
    plan.status = core.PlanStatus.OK if status == "ok" else core.PlanStatus.INFEASIBLE
    plan.est_ms = float(_field(d, "est_ms", "", num))
    plan.lower_bound_ms = float(_field(d, "lower_bound_ms", "", num))
    plan.solver_ms = float(_field(d, "solver_ms", "", num, 0.0, required=False))
    notes = _field(d, "notes", "", (dict,), {}, required=False)
    if any(not isinstance(k, str) or not isinstance(v, str) for k, v in notes.items()):
        raise ValueError("notes: must map strings to strings")
    plan.notes = dict(notes)
    plan.message = _field(d, "message", "", (str,), "", required=False)
    plan.infeasible_sequence = _check_int(
        _field(d, "infeasible_sequence", "", (int,), -1, required=False),
        "infeasible_sequence",
        -1,
        _INT_MAX,
    )
    mbs = []
    for i, m in enumerate(_field(d, "micro_batches", "", (list,))):
        where = f"micro_batches[{i}]."
        if not isinstance(m, dict):
            raise ValueError(f"micro_batches[{i}]: must be a dict")
        mb = core.MicroBatchPlan()
        mb.est_ms = float(_field(m, "est_ms", where, num))
        groups = []
        for j, g in enumerate(_field(m, "groups", where, (list,))):
            gw = f"{where}groups[{j}]."
            if not isinstance(g, dict):
                raise ValueError(f"{gw[:-1]}: must be a dict")
            gp = core.GroupPlan()
            gp.ranks = _int_list(_field(g, "ranks", gw, (list,)), gw + "ranks")
            gp.sequences = _int_list(_field(g, "sequences", gw, (list,)), gw + "sequences")
            gp.est_ms = float(_field(g, "est_ms", gw, num))
            gp.mem_bytes = _check_int(
                _field(g, "mem_bytes", gw, (int,)), gw + "mem_bytes", 0, 2**63 - 1
            )
            comm = _field(g, "comm", gw, (str,), "ring", required=False)
            if comm not in ("ring", "all-to-all"):
                raise ValueError(f"{gw}comm: must be 'ring' or 'all-to-all', got {comm!r}")
            gp.comm = core.CommKind.RING if comm == "ring" else core.CommKind.ALL_TO_ALL
            groups.append(gp)
        mb.groups = groups
        mbs.append(mb)
    plan.micro_batches = mbs
    return plan


def _plan_state(plan) -> dict:
    d = _plan_to_dict(plan)
    d["message"] = plan.message  # kept by pickle even on an OK plan
    d["infeasible_sequence"] = plan.infeasible_sequence
    return d


def _cost_model_from_dict(d):
    if not isinstance(d, dict):
        raise ValueError(f"cost_model: must be a dict, got {type(d).__name__}")
    cm = _core().CostModel()
    for f in _COST_FIELDS:
        if f not in d:
            raise ValueError(f"cost_model.{f}: missing")
        v = d[f]
        if isinstance(v, bool) or not isinstance(v, _numbers.Real):
            raise ValueError(f"cost_model.{f}: must be a number, got {type(v).__name__}")
        setattr(cm, f, float(v))
    unknown = sorted(set(d) - set(_COST_FIELDS), key=str)
    if unknown:
        raise ValueError(f"cost_model.{unknown[0]}: unknown key")
    return cm


if _fcp is not None:
    # Python conveniences on the bound structs (no logic: JSON comes from C++).
    Plan.to_dict = _plan_to_dict
    Plan.to_dict.__doc__ = "The plan as a dict, identical to `fcp plan --format json`."
    Plan.from_dict = staticmethod(_plan_from_dict)
    Plan.__reduce__ = lambda self: (_plan_from_dict, (_plan_state(self),))
    Plan.__eq__ = lambda self, other: (
        isinstance(other, Plan) and _plan_state(self) == _plan_state(other)
    )
    Plan.__repr__ = _plan_repr
    GroupPlan.__repr__ = _group_repr
    CostModel.to_dict = lambda self: {f: getattr(self, f) for f in _COST_FIELDS}
    CostModel.from_dict = staticmethod(_cost_model_from_dict)
    CostModel.__reduce__ = lambda self: (_cost_model_from_dict, (self.to_dict(),))
    CostModel.__eq__ = lambda self, other: (
        isinstance(other, CostModel) and self.to_dict() == other.to_dict()
    )
    CostModel.__repr__ = lambda self: (
        "CostModel(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _COST_FIELDS) + ")"
    )


def _check_int(value, field, lo, hi):
    if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
        raise ValueError(f"{field}: must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{field}: must be in [{lo}, {hi}], got {value}")
    return int(value)


class Cluster:
    """The cluster a :class:`Scheduler` plans for: ``num_ranks`` model
    replicas, ``ranks_per_node`` of them per node, and ``hardware``, the
    cluster preset (``fcp.presets()["clusters"]``) whose device figures
    (FLOP/s, memory, bandwidths) derive the cost model. ``hardware`` is
    required: fcp does not guess it. ``Cluster.preset(name)`` is a preset as
    is. Picklable; equal when all three fields are equal. Raises ValueError
    naming the field."""

    __slots__ = ("num_ranks", "ranks_per_node", "hardware")

    def __init__(self, num_ranks, ranks_per_node=None, hardware=None):
        num_ranks = _check_int(num_ranks, "cluster.ranks", 1, 1 << 20)
        if ranks_per_node is None:
            ranks_per_node = num_ranks
        ranks_per_node = _check_int(ranks_per_node, "cluster.ranks_per_node", 1, 1 << 20)
        known = [p.name for p in _core().cluster_presets()]
        if hardware is None:
            raise ValueError(
                "cluster.hardware: required, fcp does not guess the hardware "
                f"(one of: {', '.join(known)})"
            )
        if hardware not in known:
            raise ValueError(
                f"cluster.hardware: unknown preset {hardware!r} (known: {', '.join(known)})"
            )
        object.__setattr__(self, "num_ranks", num_ranks)
        object.__setattr__(self, "ranks_per_node", ranks_per_node)
        object.__setattr__(self, "hardware", hardware)

    def __setattr__(self, name, value):
        raise AttributeError("fcp.Cluster is immutable; build a new one")

    @classmethod
    def preset(cls, name: str) -> "Cluster":
        """The cluster preset ``name`` with its own rank counts."""
        for p in _core().cluster_presets():
            if p.name == name:
                return cls(p.num_ranks, p.ranks_per_node, p.name)
        known = ", ".join(p.name for p in _core().cluster_presets())
        raise ValueError(f"cluster: unknown preset {name!r} (known: {known})")

    def to_dict(self) -> dict:
        """The cluster as the input JSON's ``cluster`` object."""
        return {
            "ranks": self.num_ranks,
            "ranks_per_node": self.ranks_per_node,
            "hardware": self.hardware,
        }

    def __reduce__(self):
        return (Cluster, (self.num_ranks, self.ranks_per_node, self.hardware))

    def __eq__(self, other):
        return isinstance(other, Cluster) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash((self.num_ranks, self.ranks_per_node, self.hardware))

    def __repr__(self):
        return (
            f"fcp.Cluster(num_ranks={self.num_ranks}, ranks_per_node={self.ranks_per_node}, "
            f"hardware={self.hardware!r})"
        )


def _json_value(value, field):
    """``value`` as plain JSON data; ValueError naming the field for what JSON
    cannot carry (NaN, infinities, objects) instead of a parser error."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, _numbers.Integral):
        if not -(2**63) <= int(value) < 2**64:  # beyond what the JSON parser holds
            raise ValueError(f"{field}: out of range, got {value}")
        return int(value)
    if isinstance(value, _numbers.Real):
        f = float(value)
        if f != f or f in (float("inf"), float("-inf")):
            raise ValueError(f"{field}: must be a finite number, got {f}")
        return f
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{field}: keys must be strings, got {k!r}")
            out[k] = _json_value(v, f"{field}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{field}[{i}]") for i, v in enumerate(value)]
    raise ValueError(f"{field}: must be JSON data, got {type(value).__name__}")


_DEALINGS = ("balanced", "loader")


def _plan_options(
    strategy,
    cp_degree,
    time_limit_s,
    seed,
    max_seqlen_per_rank=0,
    capacity_tokens=0,
    dealing="balanced",
):
    """The C++ PlanOptions, every field checked; ValueError naming it."""
    core = _core()
    names = list(core.strategy_names())
    if not isinstance(strategy, str) or strategy not in names:
        if isinstance(strategy, str):
            raise ValueError(f"strategy: {core.unknown_strategy_message(strategy)}")
        raise ValueError(f"strategy: must be a name, got {strategy!r} (known: {', '.join(names)})")
    opts = core.PlanOptions()
    opts.strategy = strategy
    opts.cp_degree = _check_int(cp_degree, "cp_degree", 0, _INT_MAX)
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, _numbers.Real):
        raise ValueError(f"time_limit_s: must be a number, got {time_limit_s!r}")
    try:
        limit = float(time_limit_s)
    except OverflowError:
        limit = float("inf")
    if not 0 < limit <= 86400.0:
        raise ValueError(f"time_limit_s: must be in (0, 86400] s, got {time_limit_s}")
    opts.time_limit_s = limit
    opts.seed = _check_int(seed, "seed", 0, 2**64 - 1)
    opts.max_seqlen_per_rank = _check_int(
        max_seqlen_per_rank, "max_seqlen_per_rank", 0, _MAX_LENGTH
    )
    opts.capacity_tokens = _check_int(capacity_tokens, "capacity_tokens", 0, _MAX_LENGTH)
    name = getattr(dealing, "name", dealing)
    if not isinstance(name, str) or name.lower() not in _DEALINGS:
        raise ValueError(f"dealing: must be 'balanced' or 'loader', got {dealing!r}")
    opts.dealing = getattr(core.Dealing, name.upper())
    return opts


def _options_copy(o):
    return _plan_options(
        o.strategy,
        o.cp_degree,
        o.time_limit_s,
        o.seed,
        o.max_seqlen_per_rank,
        o.capacity_tokens,
        o.dealing,
    )


def _cluster_spec(cluster):
    if cluster is None or isinstance(cluster, str):
        return cluster
    if isinstance(cluster, Cluster):
        return cluster.to_dict()
    if isinstance(cluster, dict):
        return _json_value(cluster, "cluster")
    if _fcp is not None and isinstance(cluster, _fcp.Cluster):
        raise ValueError(
            "cluster: an fcp._fcp.Cluster carries no hardware; pass "
            "fcp.Cluster(num_ranks, ranks_per_node, hardware=...) or a preset name"
        )
    raise ValueError(
        f"cluster: must be a preset name, a dict or an fcp.Cluster, got {type(cluster).__name__}"
    )


def _cost_spec(cost_model):
    if cost_model is None:
        return None
    if isinstance(cost_model, dict):
        return _json_value(cost_model, "cost_model")
    if hasattr(cost_model, "alpha1"):
        return _json_value({f: getattr(cost_model, f) for f in _COST_FIELDS}, "cost_model")
    raise ValueError(
        f"cost_model: must be a dict or an fcp.CostModel, got {type(cost_model).__name__}"
    )


def _lengths_array(lengths, field="sequences"):
    """int64 numpy array of lengths; ValueError naming the element when a value
    is not an integer or does not fit (values <= 0 and > 2^40 are rejected by
    the planner, by index); at most MAX_SEQUENCES of them, as `fcp plan`."""
    import numpy as np

    if isinstance(lengths, (str, bytes)) or isinstance(lengths, _numbers.Number):
        raise ValueError(
            f"{field}: must be a sequence of integer lengths, got {type(lengths).__name__}"
        )
    if hasattr(lengths, "__len__") and len(lengths) > MAX_SEQUENCES:
        raise ValueError(f"{field}: at most {MAX_SEQUENCES} sequences, got {len(lengths)}")
    if isinstance(lengths, (list, tuple)):
        # numpy turns [5, True] into [5, 1]: a boolean is not a length.
        for i, v in enumerate(lengths):
            if isinstance(v, (bool, np.bool_)):
                raise ValueError(f"{field}[{i}]: must be an integer, got {v!r}")
    try:
        arr = np.asarray(lengths)
    except Exception as e:  # ragged nested lists and the like
        raise ValueError(f"{field}: not an array of lengths ({e})") from None
    if arr.ndim != 1:
        raise ValueError(f"{field}: must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{field}: must not be empty")
    if arr.size > MAX_SEQUENCES:
        raise ValueError(f"{field}: at most {MAX_SEQUENCES} sequences, got {arr.size}")
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and int(arr.max()) > _MAX_LENGTH:
            i = int(arr.argmax())
            raise ValueError(f"{field}[{i}]: must be in [1, 2^40], got {int(arr[i])}")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        raise ValueError(f"{field}: must hold integers, got booleans")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            raise ValueError(
                f"{field}[{int(np.argmax(bad))}]: must be an integer, got {arr[bad][0].item()!r}"
            )
        big = np.abs(arr) > _MAX_LENGTH
        if big.any():
            i = int(np.argmax(big))
            raise ValueError(f"{field}[{i}]: must be in [1, 2^40], got {arr[i].item()!r}")
        return arr.astype(np.int64)
    # Mixed or non-numeric input: judge the caller's own elements (numpy would
    # have turned [5, "a"] into strings).
    items = list(lengths) if isinstance(lengths, (list, tuple)) else arr.tolist()
    out = np.empty(len(items), dtype=np.int64)
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, (_numbers.Integral, _numbers.Real)):
            raise ValueError(f"{field}[{i}]: must be an integer, got {v!r}")
        if not isinstance(v, _numbers.Integral):
            f = float(v)
            if not f.is_integer():  # also NaN and infinities
                raise ValueError(f"{field}[{i}]: must be an integer, got {v!r}")
            v = int(f)
        if not -_MAX_LENGTH <= int(v) <= _MAX_LENGTH:
            raise ValueError(f"{field}[{i}]: must be in [1, 2^40], got {v}")
        out[i] = int(v)
    return out


def _per_sequence(values, n, field, what):
    """``values`` as a float64 array, a scalar repeated ``n`` times."""
    import numpy as np

    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{field}: must be {what} ({e})") from None
    return np.full(n, float(out)) if out.ndim == 0 else out


def _eta_array(eta, n):
    import numpy as np

    etas = _per_sequence(eta, n, "eta", "numbers")
    bad = ~np.isfinite(etas) if etas.ndim == 1 else None
    if bad is not None and bad.any():
        raise ValueError(f"eta[{int(np.argmax(bad))}]: must be in [0, 1], got {etas[bad][0]}")
    return etas


def _vision_array(vision_tokens, lengths):
    import numpy as np

    n = lengths.shape[0]
    visions = _per_sequence(vision_tokens, n, "vision_tokens", "integers")
    if visions.ndim != 1 or visions.shape[0] != n:
        raise ValueError(f"vision_tokens: must have one value per sequence ({n})")
    bad = ~((visions >= 0) & (visions <= lengths) & (visions == np.floor(visions)))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"sequences[{i}].vision_tokens: must be an integer in [0, length], got {visions[i]}"
        )
    return visions.astype(np.int64)


def _sequence_arrays(lengths, eta, vision_tokens):
    """The (lengths, eta, vision_tokens) arrays every binding takes; None for
    an array not given."""
    arr = _lengths_array(lengths)
    etas = None if eta is None else _eta_array(eta, arr.shape[0])
    visions = None if vision_tokens is None else _vision_array(vision_tokens, arr)
    return arr, etas, visions


_LEARNING_DEFAULTS = {"prior_sigma": 0.2, "measurement_sigma": 0.03, "window_groups": 4096}


def _learning_options(learning):
    if learning is None:
        return dict(_LEARNING_DEFAULTS)
    if not isinstance(learning, dict):
        raise ValueError(f"learning: must be a dict, got {type(learning).__name__}")
    out = dict(_LEARNING_DEFAULTS)
    for key, value in learning.items():
        if key not in out:
            raise ValueError(f"learning.{key}: unknown key (known: {', '.join(out)})")
        if key == "window_groups":
            _check_int(value, "learning.window_groups", 1, 2**31 - 1)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2:
            raise ValueError(f"learning.{key}: must be a number in (0, 2], got {value!r}")
        out[key] = value
    return out


def _check_plan_type(plan):
    if not isinstance(plan, Plan):
        raise ValueError(
            f"plan: must be an fcp.Plan (Scheduler.plan, Plan.from_dict), got {type(plan).__name__}"
        )


def _flat_group_times(plan, group_times_s):
    counts = [len(mb.groups) for mb in plan.micro_batches]
    try:
        items = list(group_times_s)
    except TypeError:
        raise ValueError("group_times_s: must be a list of times (s)") from None
    if items and all(isinstance(x, (list, tuple)) for x in items):
        if [len(x) for x in items] != counts:
            raise ValueError(
                f"group_times_s: needs one list per micro-batch with one time "
                f"per group ({counts}), got {[len(x) for x in items]}"
            )
        items = [t for mb in items for t in mb]
    try:
        return [float(t) for t in items]
    except (TypeError, ValueError):
        raise ValueError("group_times_s: times must be numbers (s)") from None


def _with_cost_note(plan, sources: str):
    """`plan` with the note cost_model (where each coefficient came from), as
    `fcp plan` writes it."""
    if plan.status == PlanStatus.OK:
        notes = plan.notes
        notes["cost_model"] = sources
        plan.notes = notes
    return plan


class Scheduler:
    """Plans micro-batches of context-parallel groups for batches of sequences.

    ``cluster``: a preset name (``fcp.presets()["clusters"]``), an
    ``fcp.Cluster(num_ranks, ranks_per_node, hardware)``, or a dict
    ``{"ranks": N, "ranks_per_node": R, "hardware": preset}`` as in the CLI's
    input JSON (without "hardware": the CLI's default; ``.cluster`` says which). ``model``: a model preset name or None
    (the default model's coefficients are used then, as the CLI does).
    ``cost_model``: a dict of coefficient overrides (SI units, docs/design.md §2),
    or an ``fcp.CostModel``, e.g. the output of ``fcp profile``.
    ``strategy``: one of ``fcp.strategies()``. ``cp_degree``, ``time_limit_s``,
    ``seed``: the CLI's options of the same names. ``max_seqlen_per_rank``
    (megatron-dcp's ``max_seqlen_per_dp_cp_rank``, ``--max-seqlen``) and
    ``capacity_tokens`` (bytescale's per-rank token capacity, ``--capacity``):
    tokens, 0 = the strategy tunes it per batch. ``dealing`` (megatron,
    deepspeed; ``--dealing``): ``"balanced"`` deals the sequences to the
    data-parallel replicas by work, ``"loader"`` in data-loader order. ``grad_sync``: optional dict
    ``{"collective_s": S, "buckets": B, "forward_share": F}``, the step's
    data-parallel gradient sync (one reduce-scatter in seconds, its buckets, the
    forward share of a group's time; the input JSON's ``grad_sync``): with it
    ``fcp`` ranks its candidate plans by step time (note ``step_ms``).
    ``group_time_sigma``: how far a group's real time strays from its estimate
    (log-normal sigma, [0, 2]; the input JSON's ``group_time_sigma``): above 0
    ``fcp`` ranks its candidates by the expected step (note ``expected_step_ms``).
    ``communicators``: optional dict ``{"create_s": S, "existing": [[ranks],
    ...]}``, the communicators your runtime holds and what creating one costs
    (the input JSON's ``communicators``): ``fcp`` then charges groups on new
    rank sets in its ranking; ``plan(..., existing_communicators=...)`` gives
    the sets held at each call. ``learning``: optional dict
    ``{"prior_sigma": 0.2, "measurement_sigma": 0.03, "window_groups": 4096}``
    for :meth:`observe` (how far the starting coefficients may be off, the
    relative error of one measured group time, how many measured groups are
    kept).

    A ``cost_model`` that sets any timing coefficient leaves every cost-model
    v2 term it does not set at 0 (docs/design.md §2, the unset rule);
    ``cost_model_sources`` says where each coefficient came from (input,
    preset or 0), as the plan note ``cost_model`` does.

    The configuration is resolved exactly as ``fcp plan`` resolves its input
    JSON (same parser), so ``plan(lengths).to_dict()`` equals the CLI's JSON for
    the same input apart from ``solver_ms``. Raises ValueError naming the field.
    """

    def __init__(
        self,
        cluster=None,
        model=None,
        cost_model=None,
        strategy: str = "fcp",
        cp_degree: int = 0,
        time_limit_s: float = 10.0,
        seed: int = 0,
        grad_sync=None,
        group_time_sigma: float = 0.0,
        communicators=None,
        learning=None,
        max_seqlen_per_rank: int = 0,
        capacity_tokens: int = 0,
        dealing: str = "balanced",
    ):
        core = _core()
        config = {}
        spec = _cluster_spec(cluster)
        if spec is not None:
            config["cluster"] = spec
        if model is not None:
            config["model"] = model
        cm = _cost_spec(cost_model)
        if cm is not None:
            config["cost_model"] = cm
        if grad_sync is not None:
            if not isinstance(grad_sync, dict):
                raise ValueError(f"grad_sync: must be a dict, got {type(grad_sync).__name__}")
            config["grad_sync"] = _json_value(grad_sync, "grad_sync")
        if group_time_sigma:
            config["group_time_sigma"] = _json_value(group_time_sigma, "group_time_sigma")
        if communicators is not None:
            if not isinstance(communicators, dict):
                raise ValueError(
                    f"communicators: must be a dict, got {type(communicators).__name__}"
                )
            config["communicators"] = _json_value(communicators, "communicators")
        config["sequences"] = [1]  # placeholder: the config is what is parsed here
        batch = core.parse_batch_json(_json.dumps(config, allow_nan=False))
        self._request = batch.request
        self.cluster_name = batch.cluster_name
        self.model_name = batch.model_name
        # Where each coefficient came from (the plan note cost_model of `fcp plan`).
        self.cost_model_sources = batch.cost_model_sources
        self._options = _plan_options(
            strategy, cp_degree, time_limit_s, seed, max_seqlen_per_rank, capacity_tokens, dealing
        )
        # Whether plans charge new communicators (plan(existing_communicators=...)).
        self.charges_communicators = communicators is not None
        self._hardware = (
            spec.get("hardware", batch.cluster_name)
            if isinstance(spec, dict)
            else batch.cluster_name
        ) or None
        self._learning = _learning_options(learning)
        self._prior_cost = _copy.copy(self._request.cost)  # observe() refines from it
        self._observed = []
        self._calibration = None

    @property
    def cluster(self) -> Cluster:
        """The resolved :class:`fcp.Cluster`, hardware included."""
        c = self._request.cluster
        return Cluster(c.num_ranks, c.ranks_per_node, self._hardware or self._default_hardware())

    @staticmethod
    def _default_hardware() -> str:
        # What `fcp plan` takes for an inline cluster without "hardware": the
        # default preset, i.e. the cluster of an input without "cluster".
        return _core().parse_batch_json('{"sequences": [1]}').cluster_name

    @property
    def cost_model(self):
        """The resolved ``fcp.CostModel`` (a copy; SI units)."""
        return _copy.copy(self._request.cost)

    @property
    def strategy(self) -> str:
        return self._options.strategy

    def plan(self, lengths, eta=None, existing_communicators=None, vision_tokens=None):
        """Plans one global batch. ``lengths``: token counts (list, tuple or
        numpy array of integers >= 1). ``eta``: optional mask factor per
        sequence in [0, 1] (0 causal, 1 full). ``vision_tokens``: optional
        image or frame tokens per sequence in [0, length] (MLLMs: they pay
        the cost model's ``alpha2_vision``). ``existing_communicators``:
        the rank sets (plan ranks) your runtime holds a communicator for now,
        replacing the configuration's ``communicators["existing"]`` for this
        call (the Scheduler must have been made with ``communicators``).
        Returns an ``fcp.Plan``. Releases the GIL while planning. Raises
        ValueError naming the field (``sequences[i]``, ``eta``,
        ``vision_tokens``, ``existing_communicators``,
        ``communicators.existing[i][j]``)."""
        arr, etas, visions = _sequence_arrays(lengths, eta, vision_tokens)
        sets = None
        if existing_communicators is not None:
            try:
                sets = [[_operator.index(r) for r in s] for s in existing_communicators]
            except (TypeError, ValueError, OverflowError):
                raise ValueError(
                    "existing_communicators: must be a list of lists of ranks"
                ) from None
            if any(not -(2**31) <= r < 2**31 for s in sets for r in s):
                raise ValueError("existing_communicators: ranks out of range")
        return _with_cost_note(
            _fcp.make_plan_lengths(
                self._request, self._options, arr, etas, sets, vision_tokens=visions
            ),
            self.cost_model_sources,
        )

    def observe(self, lengths, plan, group_times_s, eta=None, vision_tokens=None) -> dict:
        """Learns from a step that ran: the coefficients are recalibrated from
        the ones the Scheduler was made with and every group observed so far
        (the last ``learning["window_groups"]``), and later ``plan`` calls use
        them (docs/planner/learning.md).

        ``lengths``, ``eta``, ``vision_tokens``: the batch ``plan`` was made
        for. ``group_times_s``:
        the measured time in seconds of each group, per micro-batch
        (``[[t for g in mb.groups] for mb in plan.micro_batches]``) or flat in
        that order; ``float("nan")`` for a group not measured. Every rank that
        plans must observe the same times (e.g. all-gather them first), or
        their plans diverge. Returns (and keeps as ``.calibration``) a dict:
        ``groups`` (kept), ``scale`` (coefficient name -> factor against the
        starting value), ``rms_rel_before`` / ``rms_rel_after`` (RMS log error
        of the kept groups under the starting / the learnt coefficients).
        Raises ValueError naming the field (``group_times_s``,
        ``group_times_s[i]``, ``plan``)."""
        _check_plan_type(plan)
        times = _flat_group_times(plan, group_times_s)
        arr, etas, visions = _sequence_arrays(lengths, eta, vision_tokens)
        samples = _fcp.measured_group_samples(
            self._request, arr, etas, plan, times, vision_tokens=visions
        )
        self._observed = (self._observed + samples)[-self._learning["window_groups"] :]
        rec = _fcp.recalibrate(
            self._prior_cost,
            self._observed,
            self._learning["prior_sigma"],
            self._learning["measurement_sigma"],
            self._request.model,
        )
        # A new request, not the old one changed: a copy of this Scheduler
        # (copy.copy, e.g. one planning on another thread) keeps what it had.
        request = _copy.copy(self._request)
        request.cost = rec.cost_model
        self._request = request
        self._calibration = {
            "groups": rec.samples,
            "scale": dict(zip(_fcp.timing_coefficients, rec.scale)),
            "rms_rel_before": rec.rms_rel_before,
            "rms_rel_after": rec.rms_rel_after,
        }
        return self._calibration

    @property
    def calibration(self):
        """What the last :meth:`observe` learnt (its return value), or None."""
        return self._calibration

    def estimate(self, lengths, plan, eta=None, vision_tokens=None):
        """``plan`` with every estimate (``est_ms`` of groups, micro-batches,
        the plan) recomputed under the Scheduler's current coefficients.
        The plan is checked first as :meth:`validate` checks it."""
        _check_plan_type(plan)
        arr, etas, visions = _sequence_arrays(lengths, eta, vision_tokens)
        return _fcp.evaluate_plan(self._request, arr, etas, plan, vision_tokens=visions)

    def validate(self, lengths, plan, eta=None, vision_tokens=None) -> None:
        """Checks that ``plan`` (e.g. from ``Plan.from_dict``, unpickled, or
        another rank) is a plan of this batch on this Scheduler's cluster
        before anything runs it: status ok, as many ranks as the cluster,
        every group's ranks in [0, N) and used once per micro-batch, every
        sequence index in [0, len(lengths)) scheduled exactly once. The same
        check (C++ ``CheckPlanShape``) guards :meth:`estimate`,
        :meth:`observe` and ``fcp simulate --plan``. Estimates are not read.
        Raises ValueError naming the field
        (``plan.micro_batches[0].groups[1].ranks[2]: ...``)."""
        _check_plan_type(plan)
        arr, etas, visions = _sequence_arrays(lengths, eta, vision_tokens)
        _fcp.check_plan(self._request, arr, etas, plan, vision_tokens=visions)

    def __deepcopy__(self, memo):
        # The bound option struct does not pickle; everything else is values.
        new = _copy.copy(self)
        new._request = _copy.copy(self._request)
        new._options = _options_copy(self._options)
        new._prior_cost = _copy.copy(self._prior_cost)
        new._learning = dict(self._learning)
        new._observed = list(self._observed)  # FitSample is read-only
        new._calibration = _copy.deepcopy(self._calibration, memo)
        return new

    def __repr__(self) -> str:
        c = self._request.cluster
        return (
            f"fcp.Scheduler(cluster={self.cluster_name or c!r}, model={self.model_name!r}, "
            f"strategy={self.strategy!r}, ranks={c.num_ranks})"
        )


def validate_plan(lengths, plan, cluster, eta=None) -> None:
    """Checks a plan from outside the planner (``Plan.from_dict``,
    unpickled, received from another rank) against the batch ``lengths``
    and the cluster it will run on, before anything indexes by it:
    :meth:`Scheduler.validate` on ``cluster`` (a preset name, an
    :class:`fcp.Cluster`, a dict as in ``Scheduler``, or the number of
    ranks). Raises ValueError naming the field. The check reads no
    cost-model coefficient, so no model is asked to fit the cluster: a plan
    for 1 or 2 ranks is checked as one for 64."""
    if isinstance(cluster, _numbers.Integral) and not isinstance(cluster, bool):
        cluster = {"ranks": _check_int(cluster, "cluster.ranks", 1, 1 << 20)}
    # mem_static 0: the default model's states need not fit a small cluster.
    Scheduler(cluster=cluster, cost_model={"mem_static": 0}).validate(lengths, plan, eta)


def plan_json(
    text: str,
    strategy: str = "fcp",
    cp_degree: int = 0,
    time_limit_s: float = 10.0,
    seed: int = 0,
    max_seqlen_per_rank: int = 0,
    capacity_tokens: int = 0,
    dealing: str = "balanced",
):
    """Plans a batch given as `fcp plan`'s input JSON text; the options are
    :class:`Scheduler`'s. Returns an fcp.Plan. Raises ValueError naming the
    field."""
    core = _core()
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ValueError(f"input: must be JSON text, got {type(text).__name__}")
    opts = _plan_options(
        strategy, cp_degree, time_limit_s, seed, max_seqlen_per_rank, capacity_tokens, dealing
    )
    batch = core.parse_batch_json(text)
    return _with_cost_note(core.make_plan(batch.request, opts), batch.cost_model_sources)
