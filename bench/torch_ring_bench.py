#!/usr/bin/env python3
"""Ring attention (fcp.torch) throughput and peak memory vs sequence length
and degree, beside single-process PyTorch SDPA on the whole sequence.

CPU (default): every degree d runs as d gloo processes (torch.multiprocessing,
one thread each unless --threads), each holding its zigzag shard of one
sequence; degree 1 and the SDPA baseline run in a fresh process of their own.
A step is forward + backward of one causal attention layer. Reported per
configuration: the median step time over --reps (after --warmup; the slowest
rank's time), tokens/s = s / step, the CPU seconds of a step summed over the
ranks (gloo's threads included) and tokens per CPU second -- the figure that
stays meaningful on a loaded machine -- and the peak resident memory growth of the
busiest process (inputs, outputs, gradients and workspace included).

Packed micro-batches (--packed): one group of each degree runs a micro-batch
of --packed-sequences sequences of --packed-min..--packed-max tokens (uniform,
seeded) three ways, forward + backward: the per-sequence loop (one
ring_attention call and one backward per sequence, the loop fcp.torch
documented before packing), one packed ring_attention call (cu_seqlens) and
one packed ulysses_attention call; at degree 1 also PyTorch's SDPA alone per
sequence (the kernel work both paths share: what no packing can remove); plus
the cost of the once-per-micro-batch agreement check (plan_micro_batch with
and without it).

CUDA (--device cuda): one device; degree 1 of ring_attention, the in-process
multi-block path (blockwise_attention: the blocks d ranks would compute, all
in this process, no communication) for each degree, and SDPA; peak memory is
torch.cuda.max_memory_allocated.

    .venv/bin/python bench/torch_ring_bench.py                      # CPU, gloo
    .venv/bin/python bench/torch_ring_bench.py --lengths 4096,16384 --degrees 1,2,4
    .venv/bin/python bench/torch_ring_bench.py --packed --degrees 1,2,4
    python3 bench/torch_ring_bench.py --device cuda --dtype bf16 --lengths 8192,32768

Needs `fcp` importable (PYTHONPATH=build/python, or `pip install .`).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import fcp.torch as ft
from fcp._memory import peak_rss, reset_peak_rss

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _ints(text):
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be integers >= 1, got {text!r}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--lengths", type=_ints, default=[4096, 8192, 16384], help="sequence lengths in tokens"
    )
    p.add_argument("--degrees", type=_ints, default=[1, 2, 4], help="ring degrees")
    p.add_argument("--heads", type=int, default=8, help="query heads")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--reps", type=int, default=3, help="timed steps (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    p.add_argument(
        "--kernel",
        choices=ft.KERNELS,
        default="auto",
        help="fcp.torch block kernel (auto: the fastest PyTorch kernel for the device)",
    )
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument(
        "--packed",
        action="store_true",
        help="packed micro-batches: per-sequence loop vs packed ring vs Ulysses",
    )
    p.add_argument("--packed-sequences", type=int, default=64, help="sequences per micro-batch")
    p.add_argument("--packed-min", type=int, default=256, help="shortest sequence (tokens)")
    p.add_argument("--packed-max", type=int, default=2048, help="longest sequence (tokens)")
    p.add_argument("--seed", type=int, default=0, help="seed of the packed lengths")
    args = p.parse_args(argv)
    if args.packed and not 1 <= args.packed_min <= args.packed_max:
        p.error("--packed-min must be >= 1 and <= --packed-max")
    if args.packed and args.packed_sequences < 1:
        p.error("--packed-sequences must be >= 1")
    if args.heads % args.kv_heads:
        p.error("--kv-heads must divide --heads")
    for name in ("heads", "kv_heads", "head_dim", "reps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    return args


def _inputs(args, seq_len, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = DTYPES[args.dtype]

    def make(heads):
        return torch.randn(
            1, heads, seq_len, args.head_dim, generator=gen, device=device, dtype=torch.float32
        ).to(dtype)

    return make(args.heads), make(args.kv_heads), make(args.kv_heads)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_steps(step, args, device, barrier=None):
    """Wall-clock seconds and this process's CPU seconds of each timed step."""
    times, cpu = [], []
    for i in range(args.warmup + args.reps):
        if barrier:
            barrier()
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        _sync(device)
        c1 = time.process_time()
        if barrier:
            barrier()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(c1 - c0)
    return times, cpu


def _sdpa_step(q, k, v):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
    )
    out.sum().backward()


# --- CPU: one process per rank --------------------------------------------


def _cpu_worker(rank, world, rendezvous, args, seq_len, mode, out_path):
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if world > 1:
        # A file rendezvous: no TCP port picked and released before the ranks bind it.
        dist.init_process_group(
            "gloo", init_method="file://" + rendezvous, rank=rank, world_size=world
        )
    base = reset_peak_rss()
    try:
        q, k, v = _inputs(args, seq_len, device)
        if mode == "sdpa":
            step = lambda: _sdpa_step(q, k, v)  # noqa: E731
            kernel = "sdpa"
        else:
            ranks = list(range(world))
            group = ft.CPGroup(ranks, dist.group.WORLD if world > 1 else None)
            ql, kl, vl = (ft.shard(t, ranks, rank, dim=-2).contiguous() for t in (q, k, v))
            del q, k, v
            kernel = ft.block_kernel_name(ql, args.kernel)
            if world == 1 and args.kernel == "auto" and ql.dtype in (torch.float32, torch.float64):
                kernel = "sdpa"  # degree 1, auto: no ring, PyTorch's attention

            def step():
                a, b, c = (t.detach().requires_grad_() for t in (ql, kl, vl))
                ft.ring_attention(
                    a, b, c, group, causal=True, seq_len=seq_len, rank=rank, kernel=args.kernel
                ).sum().backward()

        barrier = dist.barrier if world > 1 else None
        times, cpu = _time_steps(step, args, device, barrier)
        row = {"times": times, "cpu": cpu, "peak_bytes": peak_rss() - base, "kernel": kernel}
        if world > 1:
            gathered = [None] * world
            dist.all_gather_object(gathered, row)
        else:
            gathered = [row]
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(gathered, f)
    finally:
        if world > 1:
            dist.destroy_process_group()


def _cpu_run(args, seq_len, world, mode):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        rendezvous = os.path.join(tmp, "rendezvous")
        mp.spawn(
            _cpu_worker, args=(world, rendezvous, args, seq_len, mode, out), nprocs=world, join=True
        )
        with open(out) as f:
            rows = json.load(f)
    step_s = statistics.median(max(r["times"][i] for r in rows) for i in range(args.reps))
    cpu_s = statistics.median(sum(r["cpu"][i] for r in rows) for i in range(args.reps))
    return {
        "step_s": step_s,
        "cpu_s": cpu_s,
        "peak_bytes": max(r["peak_bytes"] for r in rows),
        "kernel": rows[0]["kernel"],
    }


# --- CUDA: one device, in-process blocks ------------------------------------


def _cuda_run(args, seq_len, degree, mode):
    device = torch.device("cuda", torch.cuda.current_device())
    q, k, v = _inputs(args, seq_len, device)
    if mode == "sdpa":
        step = lambda: _sdpa_step(q, k, v)  # noqa: E731
        kernel = "sdpa"
    else:
        kernel = (
            "sdpa"
            if degree == 1 and args.kernel == "auto"
            else ft.block_kernel_name(q, args.kernel)
        )

        def step():
            a, b, c = (t.detach().requires_grad_() for t in (q, k, v))
            if degree == 1:
                out = ft.ring_attention(a, b, c, [0], causal=True, rank=0, kernel=args.kernel)
            else:
                out = ft.blockwise_attention(a, b, c, degree, causal=True, kernel=args.kernel)
            out.sum().backward()

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    times, _ = _time_steps(step, args, device)
    peak = torch.cuda.max_memory_allocated(device) - base
    q = k = v = step = None  # free the inputs before empty_cache()
    torch.cuda.empty_cache()
    return {"step_s": statistics.median(times), "cpu_s": None, "peak_bytes": peak, "kernel": kernel}


def _check_accuracy(args):
    """One small in-process comparison against SDPA in fp64 before timing, so
    a broken kernel cannot produce a fast row."""
    device = torch.device(args.device if args.device == "cpu" else "cuda")
    q, k, v = _inputs(args, 1000, device, seed=1)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=True, enable_gqa=args.heads != args.kv_heads
    )
    worst = 0.0
    for degree in sorted(set(args.degrees)):
        out = ft.blockwise_attention(q, k, v, degree, causal=True, kernel=args.kernel)
        worst = max(worst, float((out.double() - ref).abs().max() / ref.abs().max()))
    limit = 1e-4 if args.dtype == "fp32" else 2e-2
    print(
        f"# accuracy: blockwise vs fp64 SDPA, s=1000, degrees {sorted(set(args.degrees))}: "
        f"max rel err {worst:.1e} (limit {limit:.0e})",
        flush=True,
    )
    if not worst <= limit:
        sys.exit(f"error: accuracy: {worst:.1e} above {limit:.0e}")


# --- packed micro-batches (CPU, gloo) ---------------------------------------


def _packed_lengths(args):
    gen = torch.Generator().manual_seed(args.seed)
    span = args.packed_max - args.packed_min + 1
    return [
        args.packed_min + int(x)
        for x in torch.randint(span, (args.packed_sequences,), generator=gen)
    ]


def _packed_paths(args, world, rank, pg, cu):
    """Step functions of the three paths on this rank's packed shard."""
    ranks = list(range(world))
    full = _inputs(args, cu[-1], torch.device("cpu"))
    local = [ft.packed_shard(t[0], cu, ranks, rank, dim=1).contiguous() for t in full]
    offsets = ft.local_cu_seqlens(cu, world, rank)
    del full

    def leaves():
        return [t.detach().requires_grad_() for t in local]

    sizes = [offsets[j + 1] - offsets[j] for j in range(len(cu) - 1)]
    split = [torch.split(t, sizes, dim=1) for t in local]

    def per_sequence():
        group = ft.CPGroup(ranks, pg)  # one micro-batch
        for j in range(len(cu) - 1):  # every sequence its own leaves, as when sharded alone
            a, b, c = (parts[j].detach().requires_grad_() for parts in split)
            ft.ring_attention(
                a,
                b,
                c,
                group,
                causal=True,
                seq_len=cu[j + 1] - cu[j],
                rank=rank,
                kernel=args.kernel,
            ).sum().backward()

    def packed(attend):
        def step():
            a, b, c = leaves()
            attend(
                a, b, c, ft.CPGroup(ranks, pg), causal=True, cu_seqlens=cu, rank=rank
            ).sum().backward()

        return step

    paths = [
        ("per-sequence ring", per_sequence),
        ("packed ring", packed(lambda *a, **kw: ft.ring_attention(*a, kernel=args.kernel, **kw))),
    ]
    if args.heads % world == 0:
        paths.append(("packed Ulysses", packed(ft.ulysses_attention)))
    if world == 1:
        paths.append(("SDPA per sequence, no fcp", _sdpa_per_sequence(split, args.kv_heads)))
    return paths


def _sdpa_per_sequence(split, kv_heads):
    """Degree 1's floor: PyTorch's SDPA alone on each sequence (the kernel
    calls both fcp paths make at degree 1, without fcp's layout, checks or
    split/concatenation), forward + backward."""
    gqa = split[0][0].shape[0] != kv_heads

    def step():
        for parts in zip(*split):
            a, b, c = (t.detach().requires_grad_()[None] for t in parts)
            torch.nn.functional.scaled_dot_product_attention(
                a, b, c, is_causal=True, enable_gqa=gqa
            ).sum().backward()

    return step


def _check_cost_us(args, world, rank, pg, cu):
    """Median microseconds plan_micro_batch spends with the agreement check
    minus without it (degree > 1; 0 at degree 1, where nothing is checked)."""
    ranks = list(range(world))
    local = ft.local_cu_seqlens(cu, world, rank)[-1]
    costs = {}
    for check in (False, True):
        times = []
        for _ in range(50):
            if pg is not None:
                dist.barrier()
            t0 = time.perf_counter()
            ft.plan_micro_batch(
                ft.CPGroup(ranks, pg), cu, True, local_tokens=local, rank=rank, check=check
            )
            times.append(time.perf_counter() - t0)
        costs[check] = statistics.median(times)
    return 1e6 * (costs[True] - costs[False]), 1e6 * costs[False]


def _packed_worker(rank, world, rendezvous, args, cu, out_path):
    torch.set_num_threads(args.threads)
    if world > 1:
        dist.init_process_group(
            "gloo", init_method="file://" + rendezvous, rank=rank, world_size=world
        )
    pg = dist.group.WORLD if world > 1 else None
    try:
        barrier = dist.barrier if world > 1 else None
        rows = {}
        for name, step in _packed_paths(args, world, rank, pg, cu):
            times, cpu = _time_steps(step, args, torch.device("cpu"), barrier)
            rows[name] = {"times": times, "cpu": cpu}
        rows["check"] = _check_cost_us(args, world, rank, pg, cu)
        gathered = [None] * world
        if world > 1:
            dist.all_gather_object(gathered, rows)
        else:
            gathered = [rows]
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(gathered, f)
    finally:
        if world > 1:
            dist.destroy_process_group()


def packed_main(args):
    lengths = _packed_lengths(args)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    print(
        f"# fcp.torch packed micro-batch, causal, fwd+bwd: CPU, {os.cpu_count()} cores, "
        f"{args.threads} thread(s)/process, gloo; torch {torch.__version__}; heads "
        f"{args.heads}/{args.kv_heads} (q/kv), head_dim {args.head_dim}, {args.dtype}; "
        f"{len(lengths)} sequences of {min(lengths)}-{max(lengths)} tokens ({cu[-1]} in all, "
        f"seed {args.seed}); median of {args.reps} after {args.warmup} warm-up",
        flush=True,
    )
    print(
        "| degree | path | step ms | tokens/s | CPU s/step (all ranks) | vs per-sequence (CPU s) |"
    )
    print("|---:|---|---:|---:|---:|---:|", flush=True)
    rows = []
    for degree in args.degrees:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.json")
            mp.spawn(
                _packed_worker,
                args=(degree, os.path.join(tmp, "rendezvous"), args, cu, out),
                nprocs=degree,
                join=True,
            )
            with open(out) as f:
                gathered = json.load(f)
        base_cpu = None
        for name in [k for k in gathered[0] if k != "check"]:
            step_s = statistics.median(
                max(r[name]["times"][i] for r in gathered) for i in range(args.reps)
            )
            cpu_s = statistics.median(
                sum(r[name]["cpu"][i] for r in gathered) for i in range(args.reps)
            )
            base_cpu = cpu_s if base_cpu is None else base_cpu
            rows.append(
                {
                    "degree": degree,
                    "path": name,
                    "step_ms": 1e3 * step_s,
                    "tokens_per_s": cu[-1] / step_s,
                    "cpu_s": cpu_s,
                    "speedup_cpu": base_cpu / cpu_s,
                }
            )
            print(
                f"| {degree} | {name} | {1e3 * step_s:.1f} | {cu[-1] / step_s:.0f} | "
                f"{cpu_s:.2f} | {base_cpu / cpu_s:.2f}x |",
                flush=True,
            )
        extra = max(r["check"][0] for r in gathered)
        plan_us = max(r["check"][1] for r in gathered)
        packed_ms = next(
            r["step_ms"] for r in rows if r["degree"] == degree and r["path"] == "packed ring"
        )
        rows.append({"degree": degree, "path": "agreement check", "check_us": extra})
        if degree == 1:
            print("# degree 1: no agreement check (nothing to compare)", flush=True)
            continue
        print(
            f"# degree {degree}: agreement check (one all-gather) {extra:.0f} us per micro-batch "
            f"(planning without it {plan_us:.0f} us); {100 * extra / (1e3 * packed_ms):.3f} % "
            f"of one packed ring step",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device: CUDA is not available to this torch")
    if args.packed:
        if args.device != "cpu":
            sys.exit("error: --packed: CPU (gloo) only; on CUDA see scripts/device_check.sh")
        return packed_main(args)
    where = (
        torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"CPU, {os.cpu_count()} cores, {args.threads} thread(s)/process, gloo"
    )
    print(
        f"# fcp.torch ring attention, causal, fwd+bwd: {where}; torch {torch.__version__}; "
        f"heads {args.heads}/{args.kv_heads} (q/kv), head_dim {args.head_dim}, {args.dtype}; "
        f"median of {args.reps} after {args.warmup} warm-up",
        flush=True,
    )
    _check_accuracy(args)
    path = "ring (gloo)" if args.device == "cpu" else "in-process blocks"
    print(
        "| tokens | path | degree | kernel | step ms | tokens/s | tokens/s/rank | "
        "CPU s/step (all ranks) | tokens/CPU-s | peak MiB/rank |"
    )
    print("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = []
    for seq_len in args.lengths:
        configs = [("sdpa", 1)] + [("ring", d) for d in args.degrees]
        for mode, degree in configs:
            started = time.perf_counter()
            if args.device == "cpu":
                r = _cpu_run(args, seq_len, 1 if mode == "sdpa" else degree, mode)
            else:
                r = _cuda_run(args, seq_len, degree, mode)
            label = (
                "SDPA, 1 process" if mode == "sdpa" else ("ring, degree 1" if degree == 1 else path)
            )
            row = {
                "tokens": seq_len,
                "path": label,
                "degree": degree,
                "kernel": r["kernel"],
                "step_ms": 1e3 * r["step_s"],
                "tokens_per_s": seq_len / r["step_s"],
                "tokens_per_s_per_rank": seq_len / r["step_s"] / degree,
                "cpu_s": r["cpu_s"],
                "tokens_per_cpu_s": seq_len / r["cpu_s"] if r["cpu_s"] else None,
                "peak_mib_per_rank": r["peak_bytes"] / 2**20,
                "device": where,
                "dtype": args.dtype,
            }
            rows.append(row)
            cpu = (
                ("-", "-")
                if r["cpu_s"] is None
                else (f"{r['cpu_s']:.2f}", f"{row['tokens_per_cpu_s']:.0f}")
            )
            print(
                f"| {seq_len} | {label} | {degree} | {r['kernel']} | {row['step_ms']:.1f} | "
                f"{row['tokens_per_s']:.0f} | {row['tokens_per_s_per_rank']:.0f} | "
                f"{cpu[0]} | {cpu[1]} | {row['peak_mib_per_rank']:.1f} |",
                flush=True,
            )
            print(f"#   ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
