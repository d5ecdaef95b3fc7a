"""``python -m fcp profile --target torch``: fit fcp's cost model to this
machine's PyTorch kernels (docs/profiler.md, "PyTorch target").

Launched as ``torchrun --nproc-per-node P -m fcp profile --target torch
--model MODEL --out cost_model.json`` (or with one process, ``python -m fcp
...``). Over a grid of lengths x degrees it times one rank's share of a
transformer layer of the model's shape (fcp._torch_work): single sequences
and packed groups of four (causal and full masks mixed), as ring groups and,
at degrees that divide the query heads, as all-to-all (Ulysses) groups.
Degrees up to P run on real process groups of ranks 0..d-1: the total is the
layer with packed ``fcp.torch.attention(..., "ring" | "all-to-all",
cu_seqlens=...)`` over the group (one call per mask), the communication the
ring's messages sent point to point or the all-to-alls' bytes. With
``--in-process`` a single process times degrees above P as well: each ring
rank's share of the blocks or a Ulysses rank's heads, the messages as device
copies, and the total composed as the ring overlaps them (an all-to-all
overlaps nothing). The
samples go to fcp's C++ fit (the same one `fcp profile` uses) through the
bindings; the table and the JSON are `fcp profile`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import List, Optional, Sequence, Tuple

from fcp._cli import OneLineErrorParser

DEFAULT_LENGTHS = (512, 1024, 2048, 3072, 4096)


def _parse_ints(text: str, flag: str, lo: int, hi: int) -> List[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: must be a comma list of integers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag}: must not be empty")
    for i, v in enumerate(values):
        if not lo <= v <= hi:
            raise ValueError(f"{flag}: element {i} ({v}) must be in [{lo}, {hi}]")
    return values


# Long because: one add_argument per flag, in the order --help lists them.
def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="python -m fcp profile --target torch",
        description="Measure one CP rank's step time of a transformer layer on PyTorch kernels "
        "(ring and all-to-all attention through fcp.torch, packed sequences) over "
        "lengths x degrees on the launched processes, fit every cost-model coefficient with "
        "fcp's fit, print the held-out error table and write the cost_model JSON "
        "that fcp plan/simulate --cost-model and fcp.Scheduler(cost_model=...) read. "
        "Run under torchrun --nproc-per-node P to measure degrees up to P on real "
        "process groups.",
    )
    p.add_argument("--target", required=True, choices=["torch"])
    p.add_argument(
        "-m",
        "--model",
        default=None,
        help="model preset or cpu-tiny (default: cpu-tiny on cpu, qwen3-8b on cuda)",
    )
    p.add_argument(
        "--hf-config",
        default=None,
        help="a Hugging Face config.json whose shape replaces --model's (default: none)",
    )
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available"
    )
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "fp16"],
        default=None,
        help="default: fp32 on cpu, bf16 on cuda",
    )
    p.add_argument(
        "--recompute",
        choices=["full", "selective", "none"],
        default="full",
        help="activation recompute of the timed layer",
    )
    p.add_argument(
        "--lengths",
        default=None,
        help="comma list of sequence lengths (tokens; default: "
        + ",".join(map(str, DEFAULT_LENGTHS))
        + ")",
    )
    p.add_argument(
        "--degrees",
        default=None,
        help="comma list of CP degrees (default 1..P; 1,2,3,4 with --in-process)",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="time degrees above the process count in this process (ring ranks' "
        "shares one at a time, messages as device copies)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=None,
        help="time scale: the model's layers (default: the model's)",
    )
    p.add_argument("-r", "--repeats", type=int, default=3, help="measurements per point (min)")
    p.add_argument(
        "--min-chunk",
        type=int,
        default=128,
        help="skip points with fewer than this many tokens per rank",
    )
    p.add_argument("--no-packed", action="store_true", help="no packed groups")
    p.add_argument(
        "--packs",
        default="4",
        help="comma list of k: a packed group of k sequences of length/k per grid point "
        "(plans pack many short sequences; a cost per sequence shows only in such groups)",
    )
    p.add_argument("--heldout", type=float, default=0.25, help="fraction of samples held out")
    p.add_argument("--seed", type=int, default=1, help="seed of the held-out split")
    p.add_argument(
        "-o", "--out", default=None, help="write the report JSON here (default: print only)"
    )
    p.add_argument(
        "-f", "--format", choices=["table", "json"], default="table", help="output format"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


class _World:
    """The launched processes: torch.distributed when torchrun set WORLD_SIZE."""

    def __init__(self, device):
        import torch.distributed as dist

        self.dist = dist
        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.groups = {}
        if self.size > 1 and not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            try:
                dist.init_process_group(backend)
            except Exception as e:  # noqa: BLE001 - any failure is the environment's
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise RuntimeError(
                    f"no process group: torch.distributed.init_process_group"
                    f"({backend!r}) failed under WORLD_SIZE={self.size} (launch "
                    f"with torchrun): {first}"
                ) from None
        if self.size > 1:
            self.size, self.rank = dist.get_world_size(), dist.get_rank()

    def group(self, degree: int):
        """The process group of ranks 0..degree-1 (every rank creates it)."""
        if degree not in self.groups:
            self.groups[degree] = self.dist.new_group(list(range(degree)))
        return self.groups[degree]

    def barrier(self):
        if self.size > 1:
            self.dist.barrier()


def _grid_groups(length: int, packs: Sequence[int]) -> List[List[Tuple[int, float]]]:
    """One causal sequence, and for each k of ``packs`` k sequences of
    length/k alternating causal and full (k = 4 by default)."""
    groups = [[(length, 0.0)]]
    for k in packs:
        if k > 1 and length >= 8 * k:
            groups.append([(length // k, float(i % 2)) for i in range(k)])
    return groups


def _describe(seqs, degree) -> str:
    mixed = len(seqs) > 1 and seqs[0][1] != seqs[1][1]
    return f"d={degree} {len(seqs)}x{seqs[0][0]}{' (mixed masks)' if mixed else ''}"


def _local_packs(work, world, seqs, degree):
    """This process's zigzag shard of the group's sequences, one packed
    (cu_seqlens) set of q, k, v per mask: the causal sequences, the full ones."""
    s = work.shape
    return work._packs(seqs, s.q_heads, s.kv_heads, shard=(degree, world.rank))


def _ring_messages(work, world, pg, local: int, degree: int):
    """The ring's messages, point to point to the next rank of the group."""
    import torch

    dist, dev, idx = world.dist, work.device, world.rank
    fwd_b, bwd_b = work.ring_message_bytes(local)
    fwd_n, bwd_n = work.ring_steps(degree)
    nxt, prv = (idx + 1) % degree, (idx - 1) % degree
    bufs = []
    for b, k in ((fwd_b, fwd_n), (bwd_b, bwd_n)):
        send = torch.empty(b, dtype=torch.uint8, device=dev)
        bufs.append((send, torch.empty_like(send), k))

    def messages():
        for send, recv, k in bufs:
            for _ in range(k):
                ops = [dist.P2POp(dist.isend, send, nxt, pg), dist.P2POp(dist.irecv, recv, prv, pg)]
                for r in dist.batch_isend_irecv(ops):
                    r.wait()

    return messages


def _all_to_all_messages(work, world, pg, local: int, degree: int):
    """The Ulysses all-to-alls' bytes (fcp.torch.ulysses_attention's calls,
    every pass), as all_to_all_single over the group with equal splits."""
    import torch

    dist, dev = world.dist, work.device
    bufs = []
    for sent in work.all_to_all_call_bytes(local, degree):
        n = -(-sent // (degree - 1)) * degree  # whole buffer, 1/d kept
        send = torch.empty(n, dtype=torch.uint8, device=dev)
        bufs.append((send, torch.empty_like(send)))
    passes = work.all_to_all_passes()

    def messages():
        for _ in range(passes):
            for send, recv in bufs:
                dist.all_to_all_single(recv, send, group=pg)

    return messages


def _on_group(work, world, seqs, degree, comm="ring") -> Tuple[float, float]:
    """(total_s, comm_s) of ranks 0..d-1 running the layer with packed
    ``fcp.torch.attention(..., comm, cu_seqlens=...)`` over a process group,
    and its messages alone (ring: point to point; all-to-all: the
    all-to-alls); wall time, every layer. Other processes get NaN."""
    import torch
    from fcp.torch import CPGroup, attention

    dist = world.dist
    pg = world.group(degree)
    if world.rank >= degree:
        return math.nan, math.nan
    group = CPGroup(list(range(degree)), pg, comm)
    packs = _local_packs(work, world, seqs, degree)
    local = sum(p[0].shape[1] for p in packs)
    linear = work._linear_step(local)
    recompute = work.recompute in ("full", "selective")

    def layer():
        linear()
        for q, k, v, cu, causal in packs:
            if recompute:
                with torch.no_grad():
                    attention(q, k, v, group, comm, causal=causal, cu_seqlens=cu)
            out = attention(q, k, v, group, comm, causal=causal, cu_seqlens=cu)
            out.backward(torch.ones_like(out))

    make = _ring_messages if comm == "ring" else _all_to_all_messages
    messages = make(work, world, pg, local, degree)

    def timed(fn):
        sync = torch.cuda.synchronize if work.device.type == "cuda" else (lambda: None)
        fn()
        best = math.inf
        for _ in range(max(1, work.repeats)):
            dist.barrier(group=pg)
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - t0)
        return best * work.shape.layers

    return timed(layer), timed(messages)


def _grid(args, world) -> Tuple[List[int], List[int]]:
    """(lengths, degrees) of --lengths/--degrees; ValueError for a degree
    above the process count without --in-process."""
    lengths = (
        _parse_ints(args.lengths, "--lengths", 8, 1 << 22)
        if args.lengths
        else list(DEFAULT_LENGTHS)
    )
    if args.degrees:
        degrees = _parse_ints(args.degrees, "--degrees", 1, 4096)
    else:
        degrees = list(range(1, max(world.size, 4 if args.in_process else 1) + 1))
    for d in degrees:
        if d > world.size and not args.in_process:
            raise ValueError(
                f"--degrees: degree {d} needs {d} processes, {world.size} launched "
                f"(run under torchrun --nproc-per-node {d}, or pass --in-process to "
                "time the group's ranks one at a time in this process)"
            )
    return lengths, degrees


def _measure(work, world, seqs, d: int, all_to_all: bool) -> Tuple[float, float, float]:
    """(compute_s, comm_s, total_s) of one rank of a group: on processes
    0..d-1 when d <= P (total and communication measured), else in this
    process (messages as device copies; a ring overlaps them with its
    attention, an all-to-all does not)."""
    rank = work.rank_time(seqs, d, all_to_all)
    local = -(-sum(n for n, _ in seqs) // d)
    if d == 1:
        return rank.compute_s, math.nan, rank.compute_s
    if d <= world.size:
        total, comm = _on_group(work, world, seqs, d, "all-to-all" if all_to_all else "ring")
        return rank.compute_s, comm, total
    if all_to_all:
        comm = work.copy_all_to_all_s(local, d)
        return rank.compute_s, comm, rank.compute_s + comm
    comm = work.copy_comm_s(local, d)
    hideable = rank.attn_s * (d - 1) / d
    return rank.compute_s, comm, rank.compute_s + comm - min(hideable, comm)


def _kinds(work, length: int, d: int, min_chunk: int) -> List[bool]:
    """Which groups of degree d a grid length gets: ring (False) when every
    rank holds two chunks of at least min_chunk tokens together, all-to-all
    (True) when d also divides the query heads."""
    if 2 * d > length or length < min_chunk * d:
        return []
    return [False] + ([True] if work.shape.q_heads % d == 0 else [])


def collect(args, work, world, progress) -> Tuple[list, List[str], float]:
    """Measures the grid (ring and all-to-all groups); returns (FitSamples,
    descriptions, bandwidth)."""
    from fcp import _core

    core = _core()
    lengths, degrees = _grid(args, world)
    packs = [] if args.no_packed else _parse_ints(args.packs, "--packs", 1, 4096)
    bw = work.copy_bandwidth()
    samples, what = [], []
    for i, length in enumerate(lengths):
        progress(f"[profile] {work.shape.name}: length {length} ({i + 1}/{len(lengths)})")
        for d in degrees:
            for all_to_all in _kinds(work, length, d, args.min_chunk):
                for seqs in _grid_groups(length, packs):
                    compute, comm, total = _measure(work, world, seqs, d, all_to_all)
                    if world.rank != 0:
                        continue
                    load = core.GroupLoad()
                    for n, eta in seqs:
                        load.add(core.Sequence(n, eta))
                    kind = " all-to-all" if all_to_all else ""
                    samples.append(
                        core.make_fit_sample(
                            load,
                            d,
                            bw,
                            False,
                            compute_s=compute,
                            comm_s=comm,
                            total_s=total,
                            label=work.shape.name + kind,
                            all_to_all=all_to_all,
                        )
                    )
                    what.append(_describe(seqs, d) + kind)
    world.barrier()
    return samples, what, bw


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    import torch
    from fcp import _core
    from fcp import _torch_work as tw

    device = tw.resolve_device(args.device)
    dtype = tw.DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    if device.type == "cpu":
        torch.set_num_threads(1)
    if args.repeats < 1 or args.repeats > 1000:
        raise ValueError("--repeats: must be in [1, 1000]")
    if not 0 <= args.heldout < 1:
        raise ValueError("--heldout: must be in [0, 1)")
    if args.hf_config:
        shape = tw.shape_from_hf_config(args.hf_config)
    else:
        shape = tw.shape_from_preset(
            args.model or ("qwen3-8b" if device.type == "cuda" else "cpu-tiny")
        )
    if args.layers is not None:
        if args.layers < 1:
            raise ValueError("--layers: must be >= 1")
        shape.layers = args.layers
    world = _World(device)
    quiet = args.quiet or world.rank != 0
    progress = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    work = tw.LayerWork(shape, device, dtype, args.recompute, args.repeats)
    t0 = time.perf_counter()
    samples, what, bw = collect(args, work, world, progress)
    if world.rank != 0:
        return 0
    base = _core().CostModel()
    base.bw_intra_node = base.bw_inter_node = bw
    base.mem_per_token, base.mem_static = tw.mem_estimates(shape, dtype)
    base.mem_capacity = max(2 * base.mem_static, tw.device_memory_bytes(device))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    transport = (
        f"torch.distributed {world.dist.get_backend()}, {world.size} processes"
        if world.size > 1
        else "device copies in this process"
    )
    hardware = (
        f"measured: {name}, {args.dtype or ('bf16' if device.type == 'cuda' else 'fp32')} "
        f"PyTorch {torch.__version__} kernels ({work.clock.describe()}), "
        f"{world.size} process(es), copies {bw / 1e9:.2f} GB/s"
    )
    table, report, _ = _core().fit_measured_profile(
        f"torch:{device.type}",
        shape.name,
        hardware,
        transport,
        samples,
        what,
        base,
        args.heldout,
        args.seed,
        time.perf_counter() - t0,
        shape.model_shape(),
    )
    out = json.loads(report)
    out["torch"] = {
        "shape": shape.to_dict(),
        "device": device.type,
        "dtype": args.dtype or ("bf16" if device.type == "cuda" else "fp32"),
        "recompute": args.recompute,
        "processes": world.size,
    }
    text = json.dumps(out, indent=2)
    print(text if args.format == "json" else table, end="" if args.format == "table" else "\n")
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, args.out)
    return 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return "cpu"


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
