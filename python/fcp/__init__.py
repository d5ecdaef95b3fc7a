"""fcp: Flexible Context Parallelism planner (Python API).

    import fcp
    sched = fcp.Scheduler(cluster="ascend910c-4x16", model="qwen3-8b")
    plan = sched.plan([131072, 8192, 4096, 512])       # list or numpy array
    plan.micro_batches[0].groups[0].ranks              # global ranks, ring order
    plan.est_ms, plan.lower_bound_ms, plan.to_dict()   # to_dict() == `fcp plan --format json`
    fcp.presets()                                      # {"models": [...], "clusters": [...]}

The planner is C++ (module ``fcp._fcp``, built by CMake into build/python/fcp);
``fcp.torch`` (torch.distributed glue) and ``fcp.megatron`` are pure Python and
are imported on demand: ``import fcp.torch``.

Errors: bad input raises ValueError whose message starts with the field
("sequences[3]: must be >= 1", "cluster: unknown preset ..."); an internal
failure raises RuntimeError. A batch that cannot fit is not an error: the plan's
``status`` is ``PlanStatus.INFEASIBLE`` and ``message`` says why.
Thread-safety: a Scheduler is immutable after construction; ``plan`` releases
the GIL while planning, so several threads may plan concurrently.
"""

from __future__ import annotations

import json as _json
import numbers as _numbers

__version__ = "0.1.0"

try:
    from . import _fcp  # noqa: F401  (C++ planner)
except ImportError as _err:  # the pure-Python parts (fcp.torch) still work
    _fcp = None
    _IMPORT_ERROR = _err
else:
    _IMPORT_ERROR = None
    from ._fcp import (  # noqa: F401  (re-exported plain structs)
        BatchInput, Cluster, CommKind, CostModel, GroupPlan, MicroBatchPlan, ModelShape,
        Plan, PlanOptions, PlanRequest, PlanStatus, Sequence)

__all__ = ["Scheduler", "presets", "strategies", "plan_json", "Plan", "PlanStatus", "CostModel",
           "Cluster", "Sequence", "GroupPlan", "MicroBatchPlan"]

_COST_FIELDS = ("alpha1", "alpha2", "beta1", "alpha3", "beta2", "bw_intra_node",
                "bw_inter_node", "mem_per_token", "mem_static", "mem_capacity",
                "attn_overhead_tokens", "gamma_intra", "gamma_inter")


def _core():
    if _fcp is None:
        raise ImportError("fcp._fcp (the C++ planner) is not built; run `make build` and set "
                          f"PYTHONPATH=build/python ({_IMPORT_ERROR})")
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
    return (f"<fcp.Plan strategy={plan.strategy!r} status={plan.status.name} "
            f"micro_batches={len(plan.micro_batches)} est_ms={plan.est_ms:.3f} "
            f"lower_bound_ms={plan.lower_bound_ms:.3f}>")


def _group_repr(g) -> str:
    return f"<fcp.GroupPlan ranks={list(g.ranks)} sequences={list(g.sequences)} est_ms={g.est_ms:.3f}>"


if _fcp is not None:
    # Python conveniences on the bound structs (no logic: JSON comes from C++).
    Plan.to_dict = _plan_to_dict
    Plan.to_dict.__doc__ = "The plan as a dict, identical to `fcp plan --format json`."
    Plan.__repr__ = _plan_repr
    GroupPlan.__repr__ = _group_repr
    CostModel.to_dict = lambda self: {f: getattr(self, f) for f in _COST_FIELDS}
    CostModel.__repr__ = lambda self: "CostModel(" + ", ".join(
        f"{f}={getattr(self, f)!r}" for f in _COST_FIELDS) + ")"


def _cluster_spec(cluster):
    if cluster is None or isinstance(cluster, str):
        return cluster
    if isinstance(cluster, dict):
        return dict(cluster)
    if hasattr(cluster, "num_ranks"):
        return {"ranks": int(cluster.num_ranks),
                "ranks_per_node": int(getattr(cluster, "ranks_per_node", cluster.num_ranks))}
    raise ValueError(f"cluster: must be a preset name, a dict or an fcp.Cluster, got {type(cluster).__name__}")


def _cost_spec(cost_model):
    if cost_model is None:
        return None
    if isinstance(cost_model, dict):
        return dict(cost_model)
    if hasattr(cost_model, "alpha1"):
        return {f: getattr(cost_model, f) for f in _COST_FIELDS}
    raise ValueError(f"cost_model: must be a dict or an fcp.CostModel, got {type(cost_model).__name__}")


def _lengths_array(lengths, field="sequences"):
    """int64 numpy array of lengths; ValueError naming the element when a value
    is not an integer (values <= 0 are rejected by the planner, by index)."""
    import numpy as np
    if isinstance(lengths, (str, bytes)) or isinstance(lengths, _numbers.Number):
        raise ValueError(f"{field}: must be a sequence of integer lengths, got {type(lengths).__name__}")
    try:
        arr = np.asarray(lengths)
    except Exception as e:  # ragged nested lists and the like
        raise ValueError(f"{field}: not an array of lengths ({e})") from None
    if arr.ndim != 1:
        raise ValueError(f"{field}: must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{field}: must not be empty")
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{field}[{int(arr.argmax())}]: too large")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        raise ValueError(f"{field}: must hold integers, got booleans")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr)) | (np.abs(arr) > 2.0 ** 62)
        if bad.any():
            raise ValueError(f"{field}[{int(np.argmax(bad))}]: must be an integer, got {arr[bad][0]!r}")
        return arr.astype(np.int64)
    # Mixed or non-numeric input: judge the caller's own elements (numpy would
    # have turned [5, "a"] into strings).
    items = list(lengths) if isinstance(lengths, (list, tuple)) else arr.tolist()
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, (_numbers.Integral, _numbers.Real)) \
                or (isinstance(v, _numbers.Real) and not float(v).is_integer()):
            raise ValueError(f"{field}[{i}]: must be an integer, got {v!r}")
    return np.asarray([int(v) for v in items], dtype=np.int64)


class Scheduler:
    """Plans micro-batches of context-parallel groups for batches of sequences.

    ``cluster``: a preset name (``fcp.presets()["clusters"]``), a dict
    ``{"ranks": N, "ranks_per_node": R, "hardware": preset}`` as in the CLI's
    input JSON, or an ``fcp.Cluster``. ``model``: a model preset name or None
    (the default model's coefficients are used then, as the CLI does).
    ``cost_model``: a dict of coefficient overrides (SI units, DESIGN.md §2),
    or an ``fcp.CostModel``, e.g. the output of ``fcp profile``.
    ``strategy``: one of ``fcp.strategies()``. ``cp_degree``, ``time_limit_s``,
    ``seed``: the CLI's options of the same names.

    The configuration is resolved exactly as ``fcp plan`` resolves its input
    JSON (same parser), so ``plan(lengths).to_dict()`` equals the CLI's JSON for
    the same input apart from ``solver_ms``. Raises ValueError naming the field.
    """

    def __init__(self, cluster=None, model=None, cost_model=None, strategy: str = "fcp",
                 cp_degree: int = 0, time_limit_s: float = 10.0, seed: int = 0):
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
        config["sequences"] = [1]  # placeholder: the config is what is parsed here
        batch = core.parse_batch_json(_json.dumps(config))
        self._request = batch.request
        self.cluster_name = batch.cluster_name
        self.model_name = batch.model_name
        names = list(core.strategy_names())
        if not isinstance(strategy, str) or strategy not in names:
            raise ValueError(f"strategy: unknown strategy {strategy!r} (known: {', '.join(names)})")
        opts = core.PlanOptions()
        opts.strategy = strategy
        try:
            opts.cp_degree = int(cp_degree)
            opts.time_limit_s = float(time_limit_s)
            opts.seed = int(seed)
        except (TypeError, ValueError) as e:
            raise ValueError(f"options: {e}") from None
        if opts.cp_degree < 0:
            raise ValueError(f"cp_degree: must be >= 0, got {cp_degree}")
        if not opts.time_limit_s > 0:
            raise ValueError(f"time_limit_s: must be > 0, got {time_limit_s}")
        self._options = opts

    @property
    def cluster(self):
        """The resolved ``fcp.Cluster`` (a copy)."""
        return self._request.cluster

    @property
    def cost_model(self):
        """The resolved ``fcp.CostModel`` (a copy; SI units)."""
        return self._request.cost

    @property
    def strategy(self) -> str:
        return self._options.strategy

    def plan(self, lengths, eta=None):
        """Plans one global batch. ``lengths``: token counts (list, tuple or
        numpy array of integers >= 1). ``eta``: optional mask factor per
        sequence in [0, 1] (0 causal, 1 full). Returns an ``fcp.Plan``.
        Releases the GIL while planning. Raises ValueError naming the field
        (``sequences[i]``, ``eta``)."""
        import numpy as np
        arr = _lengths_array(lengths)
        etas = None
        if eta is not None:
            try:
                etas = np.asarray(eta, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(f"eta: must be numbers ({e})") from None
            if etas.ndim == 0:
                etas = np.full(arr.shape, float(etas))
        return _fcp.make_plan_lengths(self._request, self._options, arr, etas)

    def __repr__(self) -> str:
        c = self._request.cluster
        return (f"fcp.Scheduler(cluster={self.cluster_name or c!r}, model={self.model_name!r}, "
                f"strategy={self.strategy!r}, ranks={c.num_ranks})")


def plan_json(text: str, strategy: str = "fcp", cp_degree: int = 0, time_limit_s: float = 10.0,
              seed: int = 0):
    """Plans a batch given as `fcp plan`'s input JSON text. Returns an fcp.Plan."""
    core = _core()
    batch = core.parse_batch_json(text)
    names = list(core.strategy_names())
    if strategy not in names:
        raise ValueError(f"strategy: unknown strategy {strategy!r} (known: {', '.join(names)})")
    opts = core.PlanOptions()
    opts.strategy, opts.cp_degree, opts.time_limit_s, opts.seed = strategy, int(cp_degree), float(time_limit_s), int(seed)
    return core.make_plan(batch.request, opts)
