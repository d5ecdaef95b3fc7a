"""``python -m fcp replay``: run plans' groups on this machine's kernels
(docs/replay.md).

Reads ``{batch, plan}`` JSON lines (what ``fcp simulate --save-plans``
writes), and for every group of every plan times one rank's real work on this
device (fcp._torch_work: the layer's GEMMs on its tokens, its share of the
ring's attention blocks, or its heads of a Ulysses group through
fcp.torch.ulysses_attention, forward, recompute and backward, times the
layers). Ranks run one at a time; the zigzag layout
gives every rank of a ring group the same work, so one rank's time is the
group's. The group's communication is charged from the profiled cost model
(its link terms, with the profiled or the plan's bandwidths): a ring group
takes ``T = compute + Tcm - min(attention (d - tail)/d, Tcm)``, an
all-to-all group ``compute + Tcm_a2a``, the formulas of docs/design.md §2.
Under torchrun, a group (ring or all-to-all) of degree d <= P runs on
processes 0..d-1 instead and its time, communication included, is measured.
The measured step is the list schedule of the measured group times
(fcp.ListScheduleMs, as the planner and the simulator compose them), printed
beside the profiled cost model's estimate of the same plan, the simulator's
prediction (``--sim-model``/``--sim-cluster``) and the planner's estimate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fcp._cli import OneLineErrorParser

#: (lengths and etas of the group's sequences, degree, all_to_all) -> seconds
GroupTimer = Callable[[Sequence[Tuple[int, float]], Sequence[int], bool], float]


@dataclasses.dataclass
class ReplayedPlan:
    """One plan replayed: times in milliseconds."""

    strategy: str
    measured_ms: float  # list schedule of the measured group times
    model_ms: float  # the profiled cost model's estimate (EvaluatePlan)
    planned_ms: float  # the plan file's est_ms (the planner's cost model)
    sim_ms: float = math.nan  # the simulator's makespan (compute_s), when asked
    groups: List[dict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class PlannedBatch:
    request: object  # fcp._fcp.PlanRequest (sequences, cluster, cost, model)
    plan: object  # fcp.Plan
    lengths: List[int]
    etas: List[float]
    visions: List[int]  # vision tokens per sequence (0 for text)


def read_plans(path: str, limit: Optional[int] = None) -> List[PlannedBatch]:
    """{batch, plan} JSON lines (or a JSON array); ValueError naming the line."""
    import fcp

    core = fcp._core()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"plans: cannot read '{path}': {e.strerror}") from None
    stripped = text.lstrip()
    try:
        items = (
            json.loads(text)
            if stripped.startswith("[")
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
    except ValueError as e:
        raise ValueError(f"plans: {path}: invalid JSON: {e}") from None
    if not items:
        raise ValueError(f"plans: {path}: no batches")
    out = []
    for i, item in enumerate(items[:limit] if limit else items):
        where = f"{path}[{i}]"
        if not isinstance(item, dict) or "batch" not in item or "plan" not in item:
            raise ValueError(f'{where}: must be an object {{"batch", "plan"}}')
        try:
            request = core.parse_batch_json(json.dumps(item["batch"])).request
            plan = fcp.Plan.from_dict(item["plan"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        problem = core.validate_plan(request, plan)
        if problem:
            raise ValueError(f"{where}.plan: {problem}")
        lengths = [s.length_tokens for s in request.sequences]
        etas = [s.eta for s in request.sequences]
        visions = [s.vision_tokens for s in request.sequences]
        out.append(PlannedBatch(request, plan, lengths, etas, visions))
    return out


def replay_plan(batch: PlannedBatch, time_group: GroupTimer) -> Tuple[float, List[float]]:
    """(makespan ms, group times s in plan order) of ``batch.plan`` with every
    group timed by ``time_group``; the makespan is fcp's ListScheduleMs."""
    import fcp

    core = fcp._core()
    micro_batches = batch.plan.micro_batches
    times = []
    for mb in micro_batches:
        groups = mb.groups
        for g in groups:
            seqs = [(batch.lengths[k], batch.etas[k]) for k in g.sequences]
            t = time_group(seqs, list(g.ranks), g.comm == core.CommKind.ALL_TO_ALL) if seqs else 0.0
            times.append(t)
            g.est_ms = 1000.0 * t
        mb.groups = groups
        mb.est_ms = max((g.est_ms for g in groups), default=0.0)
    return core.list_schedule_ms(batch.plan.num_ranks, micro_batches), times


class MeasuredGroups:
    """Times groups on this device and charges their communication from
    ``cost_model`` (a profiled fcp CostModel). Identical groups (sequences,
    degree, kind) are measured once."""

    def __init__(self, work, cost_model, cluster, shape, world=None):
        self.work, self.cm, self.cluster, self.shape = work, cost_model, cluster, shape
        self.world = world  # launched processes (profile_torch._World), or None
        self._cache: Dict[tuple, object] = {}
        self.measured = 0
        self.on_processes = 0  # distinct groups run on real process groups

    def across_nodes(self, ranks: Sequence[int]) -> bool:
        return len({r // self.cluster.ranks_per_node for r in ranks}) > 1

    def load(self, seqs):
        import fcp

        core = fcp._core()
        load = core.GroupLoad()
        for n, eta in seqs:
            load.add(core.Sequence(n, eta))
        return load

    def rank_time(self, seqs, degree: int, all_to_all: bool):
        key = (tuple(sorted(seqs)), degree, all_to_all)
        if key not in self._cache:
            self._cache[key] = self.work.rank_time(seqs, degree, all_to_all)
            self.measured += 1
        return self._cache[key]

    def charged_comm_s(self, seqs, ranks: Sequence[int], all_to_all: bool) -> float:
        import fcp

        core = fcp._core()
        d = len(ranks)
        if d < 2:
            return 0.0
        load = self.load(seqs)
        if not all_to_all:
            return core.group_time_parts(self.cm, load, d, self.across_nodes(ranks))[2]
        bw = core.all_to_all_bandwidth_on_ranks(self.cm, self.cluster, list(ranks))
        return core.all_to_all_group_time_parts(self.cm, self.shape.model_shape(), load, d, bw)[2]

    def on_group(self, seqs, degree: int, all_to_all: bool) -> float:
        """A group whose ranks are real processes (0..d-1): its total
        (compute and communication, as they overlap in a ring), measured.
        Every process takes part in the same order; the others get NaN."""
        from fcp.profile_torch import _on_group

        key = (tuple(sorted(seqs)), degree, all_to_all, "processes")
        if key not in self._cache:
            comm = "all-to-all" if all_to_all else "ring"
            self._cache[key] = _on_group(self.work, self.world, seqs, degree, comm)[0]
            self.on_processes += 1
        return self._cache[key]

    def __call__(self, seqs, ranks, all_to_all: bool) -> float:
        d = len(ranks)
        if self.world is not None and 1 < d <= self.world.size:
            return self.on_group(seqs, d, all_to_all)
        rank = self.rank_time(seqs, d, all_to_all)
        comm = self.charged_comm_s(seqs, ranks, all_to_all)
        if all_to_all or d < 2:
            return rank.compute_s + comm
        hideable = rank.attn_s * (d - self.cm.ring_tail_steps) / d
        return rank.compute_s + comm - min(hideable, comm)


def replay_file(
    batches: List[PlannedBatch],
    timer: MeasuredGroups,
    cost_model,
    sim=None,
    progress=lambda m: None,
) -> List[ReplayedPlan]:
    import fcp

    core = fcp._core()
    out = []
    for i, b in enumerate(batches):
        progress(f"[replay] {b.plan.strategy}: batch {i + 1}/{len(batches)}")
        planned = b.plan.est_ms
        request = b.request
        request.cost = cost_model
        estimated = core.evaluate_plan(request, b.lengths, b.etas, b.plan, vision_tokens=b.visions)
        model_ms = estimated.est_ms
        model_groups = [g.est_ms for mb in estimated.micro_batches for g in mb.groups]
        sim_ms, sim_groups = math.nan, None
        if sim:
            _, compute_s, sim_groups = core.simulate_plan(
                sim[0], sim[1], b.plan.num_ranks, sim[2], b.plan, b.lengths, b.etas, b.visions
            )
            sim_ms = 1000.0 * compute_s
        measured_ms, times = replay_plan(b, timer)
        groups = []
        k = 0
        for mb in b.plan.micro_batches:
            for g in mb.groups:
                seqs = [b.lengths[j] for j in g.sequences]
                groups.append(
                    {
                        "degree": len(g.ranks),
                        "tokens": sum(seqs),
                        "sequences": len(seqs),
                        "comm": ("all-to-all" if g.comm == core.CommKind.ALL_TO_ALL else "ring"),
                        "measured_ms": 1000.0 * times[k],
                        "model_ms": model_groups[k],
                        "sim_ms": 1000.0 * sim_groups[k] if sim_groups else None,
                    }
                )
                k += 1
        out.append(ReplayedPlan(b.plan.strategy, measured_ms, model_ms, planned, sim_ms, groups))
    return out


# Long because: one add_argument per flag, in the order --help lists them.
def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="python -m fcp replay",
        description="Replay plans ({batch, plan} JSON lines from fcp simulate --save-plans) on "
        "this device's kernels: every group's real forward + backward, ranks one at "
        "a time, communication charged from the profiled cost model. Prints per "
        "plan the measured step (list schedule of the measured group times), the "
        "profiled cost model's estimate, the simulator's prediction and the "
        "planner's; with two files (two strategies, same batches) the ratios.",
    )
    p.add_argument("plans", nargs="+", help="JSON lines files (one strategy each)")
    p.add_argument(
        "--cost-model",
        required=True,
        help="the JSON of python -m fcp profile --target torch (its shape, dtype and "
        "recompute are replayed unless given here)",
    )
    p.add_argument(
        "-m",
        "--model",
        default=None,
        help="model preset or cpu-tiny to run (default: the profile's shape)",
    )
    p.add_argument(
        "--hf-config",
        default=None,
        help="a Hugging Face config.json to run (default: none; it replaces --model)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=None,
        help="time scale (the model's layers; default: the shape's)",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default=None,
        help="default: the profile's, else cuda when available",
    )
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "fp16"],
        default=None,
        help="default: the profile's, else bf16 on cuda and fp32 on cpu",
    )
    p.add_argument(
        "--recompute",
        choices=["full", "selective", "none"],
        default=None,
        help="default: the profile's, else full",
    )
    p.add_argument(
        "--links",
        choices=["profiled", "plan"],
        default="profiled",
        help="link model that charges communication: the profile's, or the plan's "
        "cluster's (bandwidths, alpha3, beta2, gamma_intra/inter of its batch "
        "cost_model)",
    )
    p.add_argument(
        "--sim-model",
        default=None,
        help="simulator: model preset, with --sim-cluster (default: no simulator column)",
    )
    p.add_argument(
        "--sim-cluster",
        default=None,
        help="simulator: cluster preset, with --sim-model (default: no simulator column)",
    )
    p.add_argument(
        "--batches",
        type=int,
        default=None,
        help="replay only the first N batches (default: all)",
    )
    p.add_argument("-r", "--repeats", type=int, default=3, help="measurements per group (min)")
    p.add_argument(
        "-f", "--format", choices=["table", "json"], default="table", help="output format"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


def _load_profile(path: str):
    import fcp

    core = fcp._core()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        report = json.loads(text)
    except (OSError, ValueError) as e:
        raise ValueError(f"--cost-model: cannot read '{path}': {e}") from None
    cm = core.parse_cost_model_json(text, core.CostModel())
    return cm, report.get("torch", {}) if isinstance(report, dict) else {}


def _shape(args, meta):
    from fcp import _torch_work as tw

    if args.hf_config:
        shape = tw.shape_from_hf_config(args.hf_config)
    elif args.model:
        shape = tw.shape_from_preset(args.model)
    elif "shape" in meta:
        shape = tw.LayerShape(**meta["shape"])
    else:
        raise ValueError(
            '--model: the cost model has no "torch" shape; give --model or --hf-config'
        )
    if args.layers is not None:
        if args.layers < 1:
            raise ValueError("--layers: must be >= 1")
        shape.layers = args.layers
    return shape


def _ms(x: float) -> str:
    return f"{x:10.1f}" if math.isfinite(x) else f"{'n/a':>10}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:8.3f}" if math.isfinite(a) and math.isfinite(b) and b > 0 else f"{'n/a':>8}"


def format_table(files, results, header) -> str:
    lines = [header]
    for path, rows in zip(files, results):
        lines.append(f"\n{path}: strategy {rows[0].strategy if rows else '?'}, {len(rows)} plans")
        lines.append(
            f"{'batch':>5} {'groups':>6} {'measured_ms':>11} {'model_ms':>10} "
            f"{'sim_ms':>10} {'planned_ms':>10}  measured/model"
        )
        for i, r in enumerate(rows):
            lines.append(
                f"{i:>5} {len(r.groups):>6} {r.measured_ms:11.1f} {_ms(r.model_ms)} "
                f"{_ms(r.sim_ms)} {_ms(r.planned_ms)}  "
                f"{_ratio(r.measured_ms, r.model_ms)}"
            )
        tot = {
            k: sum(getattr(r, k) for r in rows)
            for k in ("measured_ms", "model_ms", "sim_ms", "planned_ms")
        }
        lines.append(
            f"{'sum':>5} {sum(len(r.groups) for r in rows):>6} {tot['measured_ms']:11.1f} "
            f"{_ms(tot['model_ms'])} {_ms(tot['sim_ms'])} {_ms(tot['planned_ms'])}  "
            f"{_ratio(tot['measured_ms'], tot['model_ms'])}"
        )
    if len(results) >= 2:
        a, b = results[0], results[1]
        n = min(len(a), len(b))
        lines.append(
            f"\nstep ratio {a[0].strategy} / {b[0].strategy} over {n} batches (sums of step times)"
        )
        for label, key in (
            ("measured", "measured_ms"),
            ("profiled cost model", "model_ms"),
            ("simulator", "sim_ms"),
            ("planner", "planned_ms"),
        ):
            sa = sum(getattr(r, key) for r in a[:n])
            sb = sum(getattr(r, key) for r in b[:n])
            lines.append(f"  {label:<22} {_ratio(sa, sb)}")
    return "\n".join(lines) + "\n"


def _check_args(args) -> None:
    if (args.sim_model is None) != (args.sim_cluster is None):
        raise ValueError("--sim-model/--sim-cluster: give both or neither")
    if args.batches is not None and args.batches < 1:
        raise ValueError("--batches: must be >= 1")
    if args.repeats < 1:
        raise ValueError("--repeats: must be >= 1")


def _read_files(args) -> List[List[PlannedBatch]]:
    """Every plans file; ValueError when they are for different clusters."""
    files = [read_plans(p, args.batches) for p in args.plans]
    cluster = files[0][0].request.cluster
    for path, batches in zip(args.plans, files):
        c = batches[0].request.cluster
        if (c.num_ranks, c.ranks_per_node) != (cluster.num_ranks, cluster.ranks_per_node):
            raise ValueError(f"plans: {path} is for another cluster than {args.plans[0]}")
    return files


def _charge_model(cm, links: str, plan_cost):
    """The cost model that charges communication: the profiled one, or with
    ``--links plan`` the plan's cluster's link terms (its bandwidths, bytes
    per token and latencies: a plan for another machine replayed here)."""
    import fcp

    charge = fcp.CostModel.from_dict(cm.to_dict())
    if links == "plan":
        for f in (
            "bw_intra_node",
            "bw_inter_node",
            "alpha3",
            "beta2",
            "gamma_intra",
            "gamma_inter",
        ):
            setattr(charge, f, getattr(plan_cost, f))
    return charge


def _header(shape, dtype_name, recompute, device, work, cluster, links, timer, world) -> str:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    header = (
        f"fcp replay: {shape.name} layer (hidden {shape.hidden}, {shape.q_heads}/"
        f"{shape.kv_heads} heads x {shape.head_dim}, ffn {shape.ffn}) x {shape.layers} "
        f"layers, {dtype_name}, recompute {recompute}, on {name} ({work.clock.describe()}); "
        f"{cluster.num_ranks} plan ranks run one at a time; communication charged from "
        f"the {links} link model; {timer.measured} distinct groups measured"
    )
    if world.size > 1:
        header += (
            f", {timer.on_processes} groups on {world.size} processes (communication measured)"
        )
    return header


def _print_results(args, results, header) -> None:
    if args.format == "table":
        print(format_table(args.plans, results, header), end="")
        return
    files = [
        {"path": p, "plans": [dataclasses.asdict(r) for r in rows]}
        for p, rows in zip(args.plans, results)
    ]
    print(json.dumps(_finite({"header": header, "files": files}), indent=2))


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    import torch
    from fcp import _torch_work as tw
    from fcp.profile_torch import _World

    _check_args(args)
    cm, meta = _load_profile(args.cost_model)
    shape = _shape(args, meta)
    device = tw.resolve_device(args.device or meta.get("device"))
    dtype_name = args.dtype or meta.get("dtype") or ("bf16" if device.type == "cuda" else "fp32")
    recompute = args.recompute or meta.get("recompute", "full")
    if device.type == "cpu":
        torch.set_num_threads(1)
    files = _read_files(args)
    cluster = files[0][0].request.cluster
    charge = _charge_model(cm, args.links, files[0][0].request.cost)
    work = tw.LayerWork(shape, device, tw.DTYPES[dtype_name], recompute, args.repeats)
    world = _World(device)  # under torchrun: groups of degree <= P run on processes
    timer = MeasuredGroups(work, charge, cluster, shape, world if world.size > 1 else None)
    sim = (args.sim_model, args.sim_cluster, recompute) if args.sim_model else None
    quiet = args.quiet or world.rank != 0
    progress = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    results = [replay_file(b, timer, charge, sim, progress) for b in files]
    world.barrier()
    if world.rank == 0:
        header = _header(
            shape, dtype_name, recompute, device, work, cluster, args.links, timer, world
        )
        _print_results(args, results, header)
    return 0


def _finite(x):
    """JSON has no NaN: not measured becomes null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
