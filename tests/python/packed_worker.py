"""Body of the multi-process tests of packed (THD) micro-batches, Ulysses
groups, the dispatch on a plan group's ``comm``, a whole ``strategy="fcp"``
plan, and ranks that disagree (gloo on CPU).

    torchrun --standalone --nproc-per-node 4 tests/python/packed_worker.py OUT_DIR

Every rank records plain numbers in OUT_DIR/rank<r>.pt; test_torch_packed.py
asserts on them. Oracle: a float64 softmax written out here (scores, mask,
softmax, weighted sum) on each whole sequence, and its autograd gradients.
"""

import os
import sys
import traceback

import torch
import torch.distributed as dist

import fcp.torch as ft

HEAD_DIM = 8
DTYPES = {"fp64": torch.float64, "fp32": torch.float32}


def softmax_reference(q, k, v, cu, causal):
    """float64 attention per sequence, (H, N, D) packed, GQA by repetition."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    outs = []
    for a, b in zip(cu[:-1], cu[1:]):
        if b == a:
            continue
        scores = q[:, a:b] @ k[:, a:b].transpose(-1, -2) / HEAD_DIM**0.5
        if causal:
            mask = torch.ones(b - a, b - a, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ v[:, a:b])
    return torch.cat(outs, dim=1)


# Micro-batches: groups (ring-ordered ranks, comm, lengths, heads, kv_heads,
# causal, dtype). Ranks in no group are idle. Lengths include sequences
# shorter than 2d (empty shards) and of length 1.
def attention_cases():
    return [
        [([0, 1, 2, 3], "ring", [37, 5, 1, 64, 3], 4, 2, True, "fp64")],
        [([0, 1, 2, 3], "all-to-all", [37, 5, 1, 64, 3], 4, 1, True, "fp64")],
        [
            ([3, 1], "ring", [9, 2, 20], 2, 2, False, "fp64"),
            ([0, 2], "all-to-all", [7, 15], 4, 4, False, "fp64"),
        ],
        [
            ([2, 0, 3], "all-to-all", [11, 4, 30], 6, 3, True, "fp64"),
            ([1], "ring", [10, 20, 5], 4, 2, True, "fp64"),
        ],
        [([0, 1, 2, 3], "all-to-all", [17, 40], 12, 3, True, "fp64")],  # kv slices uneven
        [
            ([1, 0], "all-to-all", [33, 6], 4, 2, True, "fp32"),
            ([2, 3], "ring", [33, 6], 4, 2, True, "fp32"),
        ],
        [([0, 1, 2], "ring", [50, 3, 12], 4, 4, True, "fp64")],  # rank 3 idle
        [([1, 2], "all-to-all", [3, 1], 2, 1, False, "fp64")],  # ranks 0, 3 idle
    ]


def _inputs(lengths, heads, kv_heads, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    shapes = [
        (heads, n, HEAD_DIM),
        (kv_heads, n, HEAD_DIM),
        (kv_heads, n, HEAD_DIM),
        (heads, n, HEAD_DIM),
    ]
    return [torch.randn(*s, generator=gen, dtype=torch.float64).to(DTYPES[dtype]) for s in shapes]


def _rel_err(a, b, scale):
    return float((a.double() - b.double()).abs().max()) / scale if a.numel() else 0.0


def _grad(leaf, used):
    """The leaf's gradient in the (heads, tokens, dim) order of ``used``."""
    return leaf.grad if leaf.shape == used.shape else leaf.grad.transpose(0, 1)


def attention_checks(rank, cache):
    rows = []
    for index, mb in enumerate(attention_cases()):
        group = cache.for_micro_batch(
            {"groups": [{"ranks": r, "comm": c} for r, c, *_ in mb]}, rank
        )
        if group is None:
            rows.append({"micro_batch": index, "idle": True})
            continue
        _, comm, lengths, heads, kv_heads, causal, dtype = next(c for c in mb if rank in c[0])
        cu = [0]
        for s in lengths:
            cu.append(cu[-1] + s)
        q, k, v, g = _inputs(lengths, heads, kv_heads, dtype, 100 + index)
        q64, k64, v64 = (t.double().clone().requires_grad_() for t in (q, k, v))
        ref = softmax_reference(q64, k64, v64, cu, causal)
        (ref * g.double()).sum().backward()
        # Alternate the forms: list or tensor cu_seqlens, with or without a batch dim of 1,
        # contiguous or (tokens, heads, dim) memory as models lay out projections.
        cu_arg = torch.tensor(cu) if index % 2 else cu
        if index in (0, 4):
            leaves = [
                ft.packed_shard(t, cu, group, rank, dim=1)
                .transpose(0, 1)
                .contiguous()
                .requires_grad_()
                for t in (q, k, v)
            ]
            ql, kl, vl = (t.transpose(0, 1) for t in leaves)
        else:
            leaves = [
                ft.packed_shard(t, cu, group, rank, dim=1).requires_grad_() for t in (q, k, v)
            ]
            ql, kl, vl = leaves
        if index % 3 == 0:
            out = ft.attention(
                ql[None], kl[None], vl[None], group, causal=causal, cu_seqlens=cu_arg
            )[0]
        else:
            out = ft.attention(ql, kl, vl, group, comm, causal=causal, cu_seqlens=cu_arg)
        (out * ft.packed_shard(g, cu, group, rank, dim=1)).sum().backward()
        scale_out = float(ref.detach().abs().max())
        scale_grad = max(float(t.grad.abs().max()) for t in (q64, k64, v64))
        sh = lambda t: ft.packed_shard(t, cu, group, rank, dim=1)  # noqa: E731
        rows.append(
            {
                "micro_batch": index,
                "idle": False,
                "comm": group.comm,
                "degree": group.degree,
                "dtype": dtype,
                "heads": heads,
                "kv_heads": kv_heads,
                "causal": causal,
                "out_shape": tuple(out.shape),
                "local_shape": tuple(ql.shape[:-1]) + (HEAD_DIM,),
                "out": _rel_err(out.detach(), sh(ref.detach()), scale_out),
                "contiguous": ql.is_contiguous(),
                "dq": _rel_err(_grad(leaves[0], ql), sh(q64.grad), scale_grad),
                "dk": _rel_err(_grad(leaves[1], kl), sh(k64.grad), scale_grad),
                "dv": _rel_err(_grad(leaves[2], vl), sh(v64.grad), scale_grad),
            }
        )
    return rows


# --- a whole strategy="fcp" plan, trained one step ------------------------

EMBED, HEADS, KV_HEADS = 6, 4, 2


def _params():
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


def _tokens(lengths):
    gen = torch.Generator().manual_seed(4242)
    return torch.randn(sum(lengths), EMBED, generator=gen, dtype=torch.float64)


def _token_losses(x, params, attend):
    wq, wk, wv, w = params

    def heads(t, n):
        return t.view(t.shape[0], n, HEAD_DIM).transpose(0, 1)

    out = attend(heads(x @ wq, HEADS), heads(x @ wk, KV_HEADS), heads(x @ wv, KV_HEADS))
    return (out.transpose(0, 1).reshape(x.shape[0], HEADS * HEAD_DIM) @ w) ** 2


def plan_step(rank, cache, plan, lengths):
    """One training step of a plan, as docs/python.md's loop: each rank
    packs its group's sequences of a micro-batch into one forward and one
    backward, the group's comm picks ring or all-to-all attention."""
    params = _params()
    cu_all = [0]
    for s in lengths:
        cu_all.append(cu_all[-1] + s)
    x_all = _tokens(lengths)
    local_tokens = 0
    for mb in plan.micro_batches:
        for g in mb.groups:
            if rank in g.ranks:
                local_tokens += sum(
                    ft.local_num_tokens(lengths[i], g.degree, list(g.ranks).index(rank))
                    for i in g.sequences
                )
    total = ft.global_token_count(local_tokens)
    loss_value = torch.zeros((), dtype=torch.float64)
    comms = set()
    for mb in plan.micro_batches:
        group = cache.for_micro_batch(mb, rank)
        if group is None:
            continue
        ids = list(next(g for g in mb.groups if rank in g.ranks).sequences)
        x = torch.cat([x_all[cu_all[i] : cu_all[i + 1]] for i in ids])
        cu = [0]
        for i in ids:
            cu.append(cu[-1] + lengths[i])
        x_local = ft.packed_shard(x, cu, group, rank, dim=0)
        comms.add(group.comm)
        losses = _token_losses(
            x_local,
            params,
            lambda q, k, v: ft.attention(q, k, v, group, causal=True, cu_seqlens=cu),
        )
        loss = ft.per_token_loss(losses, total)
        loss_value += loss.detach()
        loss.backward()
    ft.reduce_gradients(params)
    dist.all_reduce(loss_value)
    ref_params = _params()
    ref = _token_losses(x_all, ref_params, lambda q, k, v: softmax_reference(q, k, v, cu_all, True))
    ref_loss = ref.mean()
    ref_loss.backward()
    scale = max(float(p.grad.abs().max()) for p in ref_params)
    return {
        "comms": sorted(comms),
        "total": total,
        "expected_total": sum(lengths),
        "loss_rel_err": abs(float(loss_value) - float(ref_loss.detach()))
        / abs(float(ref_loss.detach())),
        "grad_rel_err": max(_rel_err(p.grad, r.grad, scale) for p, r in zip(params, ref_params)),
    }


def fcp_plans():
    """Real strategy="fcp" plans on 4 ranks: the first of some candidate
    batches whose plan mixes ring and all-to-all groups, and the first whose
    plan leaves a rank idle (every rank computes the same plans)."""
    import fcp

    sched = fcp.Scheduler(
        cluster={"ranks": 4, "ranks_per_node": 2, "hardware": "h100-8x8"},
        model="qwen3-1.7b",
        strategy="fcp",
    )
    candidates = [
        [3000, 2000, 20],
        [3000, 1500, 40],
        [2500, 2500, 30],
        [2000, 2000, 2000],
        [3648, 1299, 254],
        [100],
    ]
    mixed = idle = None
    for lengths in candidates:
        plan = sched.plan(lengths)
        kinds = {ft.comm_name(g.comm) for mb in plan.micro_batches for g in mb.groups}
        busy = min(sum(g.degree for g in mb.groups) for mb in plan.micro_batches)
        if mixed is None and kinds == {"ring", "all-to-all"}:
            mixed = (lengths, plan)
        if idle is None and busy < 4:
            idle = (lengths, plan)
    return {"mixed": mixed, "idle": idle}


def plan_checks(rank, cache):
    out = {}
    for name, found in fcp_plans().items():
        if found is None:
            out[name] = None
            continue
        lengths, plan = found
        layout = [
            [(list(g.ranks), ft.comm_name(g.comm)) for g in mb.groups] for mb in plan.micro_batches
        ]
        out[name] = {"lengths": lengths, "layout": layout, **plan_step(rank, cache, plan, lengths)}
    return out


# --- bad input: every rank of the group must see one clear ValueError ------


def _error_of(fn):
    try:
        fn()
    except ValueError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - recorded for the test to show
        return f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    return None


def error_checks(rank, cache):
    pair = cache.for_micro_batch([[0, 1], [2, 3]], rank)
    trio = cache.for_micro_batch([[0, 1, 2], [3]], rank)
    world = cache.for_micro_batch([[0, 1, 2, 3]], rank)
    me = pair.ranks.index(rank)

    def qkv(tokens, heads=2):
        return [torch.zeros(heads, tokens, HEAD_DIM) for _ in range(3)]

    def fresh(group):  # a new CPGroup: a new micro-batch, its context not cached
        return ft.CPGroup(group.ranks, group.process_group, group.comm)

    errors = {}
    # Mismatched cu_seqlens: one rank passes other lengths (40 vs 41 tokens).
    cu = [0, 30, 40 + (me if rank < 2 else 0)]
    errors["cu_seqlens"] = _error_of(
        lambda: ft.ring_attention(
            *qkv(ft.local_cu_seqlens(cu, 2, me)[-1]), fresh(pair), cu_seqlens=cu
        )
    )
    # Three ranks pass seq_len 40, 41, 42 (issue 30's reproducer); rank 3 alone.
    if rank < 3:
        n = 40 + rank
        errors["seq_len"] = _error_of(
            lambda: ft.ring_attention(*qkv(ft.local_num_tokens(n, 3, rank)), fresh(trio), seq_len=n)
        )
    # The ring order: rank 1 passes [1, 0].
    order = [0, 1] if rank != 1 else [1, 0]
    if rank < 2:
        g = ft.CPGroup(order, pair.process_group)
        errors["order"] = _error_of(
            lambda: ft.ring_attention(
                *qkv(ft.local_num_tokens(20, 2, order.index(rank))), g, seq_len=20
            )
        )
    # The causal flag differs per rank.
    errors["causal"] = _error_of(
        lambda: ft.ulysses_attention(
            *qkv(ft.local_num_tokens(20, 2, me)), fresh(pair), causal=rank % 2 == 0, seq_len=20
        )
    )
    # A rank holds the wrong number of tokens for agreed lengths.
    good = ft.local_cu_seqlens([0, 9, 20], 2, me)[-1]
    errors["tokens"] = _error_of(
        lambda: ft.ring_attention(
            *qkv(good + (1 if rank == 1 else 0)), fresh(pair), cu_seqlens=[0, 9, 20]
        )
    )
    # Lengths summed over the group (no seq_len): 5 + 7 tokens, zigzag needs 6 + 6.
    errors["tokens_summed"] = _error_of(lambda: ft.ring_attention(*qkv(5 + 2 * me), fresh(pair)))
    # Heads not divisible by the degree of an all-to-all group (3 heads, 4 ranks).
    errors["heads"] = _error_of(
        lambda: ft.ulysses_attention(
            *qkv(ft.local_num_tokens(16, 4, rank), heads=3), fresh(world), seq_len=16
        )
    )
    # A group this rank is not in.
    other = [2, 3] if rank < 2 else [0, 1]
    errors["not_in_group"] = _error_of(lambda: ft.ring_attention(*qkv(4), other, seq_len=8))
    # After the errors the groups still work (every rank failed at the same point).
    q, k, v = qkv(ft.local_num_tokens(12, 2, me))
    errors["after"] = float(
        ft.attention(q, k, v, fresh(pair), "all-to-all", seq_len=12).abs().sum()
    )
    return errors


def run(rank, world, out_dir):
    torch.set_num_threads(1)
    cache = ft.GroupCache(max_groups=8)
    result = {"world": world, "timeout_s": cache._timeout.total_seconds()}
    result["attention"] = attention_checks(rank, cache)
    result["plans"] = plan_checks(rank, cache)
    result["errors"] = error_checks(rank, cache)
    cache.clear()
    dist.barrier()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def main(argv):
    dist.init_process_group("gloo")
    try:
        run(dist.get_rank(), dist.get_world_size(), argv[1])
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv)
