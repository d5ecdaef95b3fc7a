"""Body of the 4-process gloo test (spawned by test_torch_dist.py).

One training "step" of several micro-batches whose plans use CP groups of
degree 1, 2, 3 and 4 (uneven lengths, a sequence shorter than 2d, a
non-ascending ring order, a non-causal sequence). Each rank records, as plain
numbers in out_dir/rank<r>.pt, how far its results are from single-process
oracles; the pytest functions assert on them.
"""

import os

import torch
import torch.distributed as dist

import fcp.torch as ft

WORLD_SIZE = 4
HEADS, HEAD_DIM, EMBED = 2, 4, 6

# sequence id -> (length in tokens, causal)
SEQUENCES = {
    0: (53, True), 1: (19, True), 2: (41, True), 3: (12, False), 4: (30, True),
    5: (7, True), 6: (6, True), 7: (25, True), 8: (3, True), 9: (3, True),
}
# Micro-batches of one step: (ring-ordered ranks, sequence ids) per group.
MICRO_BATCHES = [
    [([0, 1, 2, 3], [0])],                       # degree 4
    [([0], [1]), ([1, 2, 3], [2, 3])],           # degrees 1 and 3; two sequences in a group
    [([3, 2], [4]), ([0, 1], [5])],              # degree 2, descending ring order
    [([1, 3, 0, 2], [6, 9])],                    # degree 4, 6 and 3 tokens < 2d: empty chunks/shards
    [([1, 2, 3], [7]), ([0], [8])],              # rank sets seen before: cached
]
DISTINCT_RANK_SETS = sorted({tuple(sorted(r)) for mb in MICRO_BATCHES for r, _ in mb})


def _qkvg(seq_id):
    """Full-sequence q, k, v and an output-gradient seed, same on every rank."""
    length, _ = SEQUENCES[seq_id]
    gen = torch.Generator().manual_seed(1000 + seq_id)
    return [torch.randn(HEADS, length, HEAD_DIM, generator=gen, dtype=torch.float64) for _ in range(4)]


def _inputs(seq_id):
    length, _ = SEQUENCES[seq_id]
    gen = torch.Generator().manual_seed(5000 + seq_id)
    return torch.randn(length, EMBED, generator=gen, dtype=torch.float64)


def _params():
    gen = torch.Generator().manual_seed(7)
    shape = [(EMBED, HEADS * HEAD_DIM)] * 3 + [(HEADS * HEAD_DIM,)]
    return [(0.5 * torch.randn(*s, generator=gen, dtype=torch.float64)).requires_grad_() for s in shape]


def _token_losses(x, params, attend):
    """Tiny one-layer model: per-token loss (out_t . w)^2 of attention over x."""
    wq, wk, wv, w = params
    def heads(t):
        return t.view(t.shape[0], HEADS, HEAD_DIM).transpose(0, 1)  # (H, s, Dh)
    out = attend(heads(x @ wq), heads(x @ wk), heads(x @ wv))
    out = out.transpose(0, 1).reshape(x.shape[0], HEADS * HEAD_DIM)
    return (out @ w) ** 2


def _max_err(a, b):
    return float((a - b).abs().max()) if a.numel() else 0.0


def _attention_checks(rank, cache):
    """Ring attention vs the single-process oracle, forward and backward."""
    errors = []
    for mb_index, mb in enumerate(MICRO_BATCHES):
        group = cache.for_micro_batch([ranks for ranks, _ in mb], rank)
        seq_ids = next(ids for ranks, ids in mb if rank in ranks)
        for sid in seq_ids:
            causal = SEQUENCES[sid][1]
            q, k, v, g = _qkvg(sid)
            qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
            ref = ft.attention_reference(qr, kr, vr, causal=causal)
            (ref * g).sum().backward()
            ql, kl, vl = (ft.shard(t, group, rank, dim=-2).requires_grad_() for t in (q, k, v))
            seq_len = None if sid % 2 else SEQUENCES[sid][0]  # both code paths
            out = ft.ring_attention(ql, kl, vl, group, causal=causal, seq_len=seq_len)
            (out * ft.shard(g, group, rank, dim=-2)).sum().backward()
            errors.append({
                "micro_batch": mb_index, "sequence": sid, "degree": group.degree,
                "local_tokens": ql.shape[-2],
                "out": _max_err(out.detach(), ft.shard(ref.detach(), group, rank, dim=-2)),
                "dq": _max_err(ql.grad, ft.shard(qr.grad, group, rank, dim=-2)),
                "dk": _max_err(kl.grad, ft.shard(kr.grad, group, rank, dim=-2)),
                "dv": _max_err(vl.grad, ft.shard(vr.grad, group, rank, dim=-2)),
            })
    return errors


def _training_step(rank, cache):
    """One step over all micro-batches with per-token loss normalisation and a
    single gradient all-reduce, vs the single-process loss over all tokens."""
    params = _params()
    naive = _params()
    local_tokens = 0
    for mb in MICRO_BATCHES:
        ids = next(ids for ranks, ids in mb if rank in ranks)
        ranks = next(ranks for ranks, ids in mb if rank in ranks)
        local_tokens += sum(ft.local_num_tokens(SEQUENCES[s][0], len(ranks), ranks.index(rank)) for s in ids)
    total_tokens = ft.global_token_count(local_tokens)
    loss_value = torch.zeros((), dtype=torch.float64)
    for mb in MICRO_BATCHES:
        group = cache.for_micro_batch([ranks for ranks, _ in mb], rank)
        ids = next(ids for ranks, ids in mb if rank in ranks)
        group_tokens = sum(SEQUENCES[s][0] for s in ids)
        for p_set, is_naive in ((params, False), (naive, True)):
            losses = []
            for sid in ids:
                causal = SEQUENCES[sid][1]
                x = ft.shard(_inputs(sid), group, rank, dim=0)
                attend = lambda q, k, v, c=causal, n=SEQUENCES[sid][0]: ft.ring_attention(
                    q, k, v, group, causal=c, seq_len=n)
                losses.append(_token_losses(x, p_set, attend))
            token_losses = torch.cat(losses)
            if is_naive:  # mean over the group's tokens, then averaged over ranks
                loss = token_losses.sum() / group_tokens / WORLD_SIZE
            else:
                loss = ft.per_token_loss(token_losses, total_tokens)
                loss_value += loss.detach()
            loss.backward()
    for p in params + naive:
        dist.all_reduce(p.grad)
    dist.all_reduce(loss_value)

    ref_params = _params()
    ref_losses = []
    for sid, (length, causal) in SEQUENCES.items():
        ref_losses.append(_token_losses(_inputs(sid), ref_params,
                                        lambda q, k, v, c=causal: ft.attention_reference(q, k, v, causal=c)))
    ref_loss = torch.cat(ref_losses).mean()
    ref_loss.backward()
    scale = max(float(p.grad.abs().max()) for p in ref_params)
    return {
        "total_tokens": total_tokens,
        "expected_tokens": sum(length for length, _ in SEQUENCES.values()),
        "loss_err": abs(float(loss_value) - float(ref_loss)),
        "grad_err": max(_max_err(p.grad, r.grad) for p, r in zip(params, ref_params)) / scale,
        "naive_grad_err": max(_max_err(p.grad, r.grad) for p, r in zip(naive, ref_params)) / scale,
    }


def run(rank, port, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD_SIZE)
    try:
        cache = ft.GroupCache()
        result = {"attention": _attention_checks(rank, cache)}
        created_after_first_pass = list(cache.created)
        result["training"] = _training_step(rank, cache)
        result["created"] = list(cache.created)
        result["created_after_first_pass"] = created_after_first_pass
        result["group_members"] = {
            key: sorted(dist.get_process_group_ranks(cache.get(list(key)).process_group))
            for key in cache.created if rank in key}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
