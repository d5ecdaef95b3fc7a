"""Body of the multi-process fcp.torch tests (gloo on CPU).

Runs as a user runs a training script, under ``torchrun``:

    torchrun --standalone --nproc-per-node 4 tests/python/ring_worker.py OUT_DIR

(RANK / WORLD_SIZE / MASTER_ADDR from torchrun's environment), or through
``torch.multiprocessing.spawn`` via :func:`spawn_main`. Every rank walks the
same micro-batches; each records, as plain numbers in OUT_DIR/rank<r>.pt, how
far ring attention (forward and gradients) is from PyTorch's own
``scaled_dot_product_attention`` on the whole sequence, plus a training step
with idle ranks, the group cache's history, and (``--memory``) the peak
memory of a 32k-token sequence on 4 ranks. The pytest files assert on them.
"""

import os
import time
import sys

import torch
import torch.distributed as dist

import fcp.torch as ft
from fcp._memory import peak_rss, reset_peak_rss

DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}
HEAD_DIM = 8


def attention_cases(world):
    """Micro-batches: a list of groups (ring-ordered ranks, case) where a case
    is (seq_len, heads, kv_heads, dtype, causal). Ranks of no group are idle.
    Covers degrees 1..world, GQA/MQA, uneven lengths, s < 2d (empty shards),
    non-ascending ring orders, bf16 / fp32 / fp64, causal and full masks."""
    r = list(range(world))
    mbs = [
        [(r, (61, 4, 2, "fp32", True))],
        [([i], (17 + 3 * i, 4, 4, "bf16", False)) for i in r],
        [(r[::-1], (max(world - 1, 1), 2, 1, "fp32", True))],  # empty shards
        [(r, (77, 4, 4, "bf16", True))],
        [(r[1:] + r[:1], (45, 6, 3, "fp64", False))],
        [(r, (203, 4, 1, "bf16", True))],
    ]
    if world >= 3:
        # One rank idle; the others split into a pair and the rest.
        mbs.append(
            [(r[1:3][::-1], (29, 4, 2, "fp32", True)), (r[3:] or [r[0]], (13, 4, 2, "fp32", False))]
            if world >= 4
            else [(r[1:][::-1], (29, 4, 2, "fp32", True))]
        )
        mbs.append([(r[:-1], (58, 4, 2, "bf16", True))])
    if world >= 4:
        mbs.append([([0, 2], (31, 2, 2, "fp64", True)), ([3, 1], (24, 4, 1, "fp32", True))])
        mbs.append([([2, 0, 3], (100, 4, 2, "fp32", True)), ([1], (12, 4, 2, "fp64", True))])
    # Repeat the first micro-batches: with a small cache bound these groups
    # were evicted meanwhile and come back.
    return mbs + mbs[:3]


def _full_inputs(case, seed):
    seq_len, heads, kv_heads, dtype, _ = case
    gen = torch.Generator().manual_seed(seed)
    shapes = [
        (2, heads, seq_len, HEAD_DIM),
        (2, kv_heads, seq_len, HEAD_DIM),
        (2, kv_heads, seq_len, HEAD_DIM),
        (2, heads, seq_len, HEAD_DIM),
    ]
    return [torch.randn(*s, generator=gen, dtype=torch.float64).to(DTYPES[dtype]) for s in shapes]


def _max_err(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _sdpa(q, k, v, causal):
    """PyTorch's attention on the whole sequence (GQA via enable_gqa)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=q.shape[-3] != k.shape[-3]
    )


def _attention_checks(rank, cache, world, kernel):
    rows = []
    for mb_index, mb in enumerate(attention_cases(world)):
        group = cache.for_micro_batch([ranks for ranks, _ in mb], rank)
        if group is None:
            rows.append({"micro_batch": mb_index, "idle": True})
            continue
        case = next(c for ranks, c in mb if rank in ranks)
        seq_len, heads, kv_heads, dtype, causal = case
        q, k, v, g = _full_inputs(case, 1000 + mb_index)
        # Oracle: SDPA in fp64 on the whole sequence; and SDPA in the case's
        # own dtype, whose error is what a single process gets.
        q64, k64, v64 = (t.double().clone().requires_grad_() for t in (q, k, v))
        ref = _sdpa(q64, k64, v64, causal)
        (ref * g.double()).sum().backward()
        same_dtype = _sdpa(q, k, v, causal)
        ql, kl, vl = (ft.shard(t, group, rank, dim=-2).requires_grad_() for t in (q, k, v))
        out = ft.ring_attention(
            ql,
            kl,
            vl,
            group,
            causal=causal,
            seq_len=None if mb_index % 2 else seq_len,
            kernel=kernel,
        )
        (out * ft.shard(g, group, rank, dim=-2)).sum().backward()
        sh = lambda t: ft.shard(t, group, rank, dim=-2)  # noqa: E731
        rows.append(
            {
                "micro_batch": mb_index,
                "idle": False,
                "degree": group.degree,
                "dtype": dtype,
                "seq_len": seq_len,
                "heads": heads,
                "kv_heads": kv_heads,
                "causal": causal,
                "local_tokens": ql.shape[-2],
                "out_dtype": str(out.dtype),
                "out": _max_err(out.detach(), sh(ref.detach())),
                "dq": _max_err(ql.grad, sh(q64.grad)),
                "dk": _max_err(kl.grad, sh(k64.grad)),
                "dv": _max_err(vl.grad, sh(v64.grad)),
                "sdpa_same_dtype_out": _max_err(same_dtype, ref.detach()),
                "scale_out": float(ref.detach().abs().max()),
                "scale_grad": max(float(t.grad.abs().max()) for t in (q64, k64, v64)),
            }
        )
    return rows


# --- a training step in which some ranks are idle -------------------------

EMBED, HEADS, KV_HEADS = 6, 2, 1
TRAIN_SEQUENCES = {0: (53, True), 1: (19, True), 2: (41, False), 3: (7, True), 4: (3, True)}


def train_micro_batches(world):
    """The last rank is idle in every micro-batch (its p.grad stays None);
    with 3+ ranks another one is idle in some micro-batch."""
    busy = list(range(max(world - 1, 1)))
    if len(busy) == 1:
        return [[([0], [0, 1])], [([0], [2, 3, 4])]]
    return [[(busy, [0])], [([busy[0]], [1]), (busy[1:][::-1], [2, 4])], [(busy[:1], [3])]]


def _train_params():
    gen = torch.Generator().manual_seed(7)
    shapes = [
        (EMBED, HEADS * HEAD_DIM),
        (EMBED, KV_HEADS * HEAD_DIM),
        (EMBED, KV_HEADS * HEAD_DIM),
        (HEADS * HEAD_DIM,),
    ]
    return [
        (0.5 * torch.randn(*s, generator=gen, dtype=torch.float64)).requires_grad_() for s in shapes
    ]


def _train_inputs(seq_id):
    gen = torch.Generator().manual_seed(5000 + seq_id)
    return torch.randn(TRAIN_SEQUENCES[seq_id][0], EMBED, generator=gen, dtype=torch.float64)


def _token_losses(x, params, attend):
    wq, wk, wv, w = params

    def heads(t, n):
        return t.view(t.shape[0], n, HEAD_DIM).transpose(0, 1)

    out = attend(heads(x @ wq, HEADS), heads(x @ wk, KV_HEADS), heads(x @ wv, KV_HEADS))
    out = out.transpose(0, 1).reshape(x.shape[0], HEADS * HEAD_DIM)
    return (out @ w) ** 2


def _training_step(rank, world, cache):
    """The documented loop: per-token loss over the global batch, idle ranks
    skip compute, one gradient reduction (reduce_gradients) at the end."""
    mbs = train_micro_batches(world)
    params = _train_params()
    local_tokens = 0
    for mb in mbs:
        for ranks, ids in mb:
            if rank in ranks:
                local_tokens += sum(
                    ft.local_num_tokens(TRAIN_SEQUENCES[s][0], len(ranks), ranks.index(rank))
                    for s in ids
                )
    total_tokens = ft.global_token_count(local_tokens)
    loss_value = torch.zeros((), dtype=torch.float64)
    idle_micro_batches = 0
    my_times = []  # this rank's seconds per micro-batch, NaN when idle
    for mb in mbs:
        group = cache.for_micro_batch([ranks for ranks, _ in mb], rank)
        if group is None:
            idle_micro_batches += 1
            my_times.append(float("nan"))
            continue
        started = time.perf_counter()
        ids = next(ids for ranks, ids in mb if rank in ranks)
        losses = []
        for sid in ids:
            length, causal = TRAIN_SEQUENCES[sid]
            x = ft.shard(_train_inputs(sid), group, rank, dim=0)
            attend = lambda q, k, v, c=causal, n=length: ft.ring_attention(  # noqa: E731
                q, k, v, group, causal=c, seq_len=n
            )
            losses.append(_token_losses(x, params, attend))
        loss = ft.per_token_loss(torch.cat(losses), total_tokens)
        loss_value += loss.detach()
        loss.backward()
        my_times.append(time.perf_counter() - started)
    # What fcp.Scheduler.observe takes: each group's time, gathered.
    gathered = ft.group_times([[ranks for ranks, _ in mb] for mb in mbs], my_times)
    had_grad = [p.grad is not None for p in params]
    ft.reduce_gradients(params)
    dist.all_reduce(loss_value)

    ref_params = _train_params()
    ref_losses = [
        _token_losses(_train_inputs(sid), ref_params, lambda q, k, v, c=causal: _sdpa(q, k, v, c))
        for sid, (_, causal) in TRAIN_SEQUENCES.items()
    ]
    ref_loss = torch.cat(ref_losses).mean()
    ref_loss.backward()
    scale = max(float(p.grad.abs().max()) for p in ref_params)
    return {
        "total_tokens": total_tokens,
        "expected_tokens": sum(n for n, _ in TRAIN_SEQUENCES.values()),
        "idle_micro_batches": idle_micro_batches,
        "my_times": my_times,
        "group_times": gathered,
        "had_grad": had_grad,
        "loss_err": abs(float(loss_value) - float(ref_loss)),
        "grad_err": max(_max_err(p.grad, r.grad) for p, r in zip(params, ref_params)) / scale,
    }


# --- memory: a 32k-token sequence on 4 ranks -------------------------------

MEMORY_SEQ_LEN = 32768
MEMORY_HEADS, MEMORY_KV_HEADS, MEMORY_HEAD_DIM = 2, 1, 16


def _memory_check(rank, world, cache):
    """Forward + backward of one causal 32k-token sequence on all ranks
    (GQA, fp32). Records the peak RSS growth; the O(s^2)-per-step design it
    replaces needed one (heads x s/d x s/d) fp32 score block per step."""
    group = cache.for_micro_batch([list(range(world))], rank)
    n = ft.local_num_tokens(MEMORY_SEQ_LEN, world, group.index(rank))
    gen = torch.Generator().manual_seed(11 + rank)
    q = torch.randn(1, MEMORY_HEADS, n, MEMORY_HEAD_DIM, generator=gen).requires_grad_()
    k = torch.randn(1, MEMORY_KV_HEADS, n, MEMORY_HEAD_DIM, generator=gen).requires_grad_()
    v = torch.randn(1, MEMORY_KV_HEADS, n, MEMORY_HEAD_DIM, generator=gen).requires_grad_()
    dist.barrier()
    before = reset_peak_rss()
    out = ft.ring_attention(q, k, v, group, causal=True, seq_len=MEMORY_SEQ_LEN)
    out.sum().backward()
    after = peak_rss()
    finite = bool(
        torch.isfinite(out).all() and torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    )
    return {
        "seq_len": MEMORY_SEQ_LEN,
        "local_tokens": n,
        "peak_growth_bytes": after - before,
        "finite": finite,
        "score_block_bytes": MEMORY_HEADS * (MEMORY_SEQ_LEN // world) ** 2 * 4,
    }


MAX_GROUPS = 2  # GroupCache bound: every run evicts and re-creates groups


def run(rank, world, out_dir, memory=False, max_groups=MAX_GROUPS, kernel="auto"):
    torch.set_num_threads(1)
    cache = ft.GroupCache(max_groups=max_groups)
    result = {"world": world}
    result["attention"] = _attention_checks(rank, cache, world, kernel)
    result["training"] = _training_step(rank, world, cache)
    if memory:
        m = result["memory"] = _memory_check(rank, world, cache)
        line = (
            f"rank {rank}: {m['seq_len']} tokens causal on {world} ranks, {m['local_tokens']} "
            f"local: peak resident memory +{m['peak_growth_bytes'] / 2**20:.1f} MiB "
            f"(one score block: {m['score_block_bytes'] / 2**20:.0f} MiB)"
        )
        # Rank 0 prints every rank's line: lines written by several processes
        # to one pipe can run into each other.
        lines = [None] * world
        dist.all_gather_object(lines, line)
        if rank == 0:
            print("\n".join(lines), flush=True)
    result["created"] = list(cache.created)
    result["evicted"] = list(cache.evicted)
    result["stats"] = cache.stats()
    # Process groups alive in torch.distributed besides the default one.
    result["live_groups"] = len(dist.distributed_c10d._world.pg_map) - 1
    cache.clear()
    result["live_groups_after_clear"] = len(dist.distributed_c10d._world.pg_map) - 1
    dist.barrier()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def spawn_main(rank, world, out_dir, memory=False, kernel="auto"):
    """Entry point for torch.multiprocessing.spawn. The ranks meet through a file
    in OUT_DIR (no TCP port picked and released before they bind it)."""
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(out_dir, "rendezvous"),
        rank=rank,
        world_size=world,
    )
    try:
        run(rank, world, out_dir, memory, kernel=kernel)
    finally:
        dist.destroy_process_group()


def main(argv):
    """Entry point under torchrun: ring_worker.py OUT_DIR [--memory]."""
    out_dir = argv[1]
    dist.init_process_group("gloo")
    try:
        run(dist.get_rank(), dist.get_world_size(), out_dir, memory="--memory" in argv)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv)
