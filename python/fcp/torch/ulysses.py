"""Ulysses (all-to-all) attention: the same arguments and token layout as
ring attention; one all-to-all scatters heads and gathers the group's tokens,
exact attention runs per sequence on whole sequences, one all-to-all brings
the outputs back."""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.distributed as dist

from .context import MicroBatchContext, context_for
from .groups import _ring_ranks
from .kernels import exact_attention
from .layout import packed_index
from .ring import _as_batched, _scale


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` on flat buffers; its gradient is the reverse
    all-to-all (the split sizes swapped)."""

    @staticmethod
    def forward(ctx, x, out_splits: List[int], in_splits: List[int], pg):
        out = x.new_empty(sum(out_splits))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=pg)
        ctx.splits, ctx.pg = (out_splits, in_splits), pg
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        grad_in = grad.new_empty(sum(in_splits))
        dist.all_to_all_single(grad_in, grad.contiguous(), in_splits, out_splits, group=ctx.pg)
        return grad_in, None, None, None


def _kv_head_slices(heads: int, kv_heads: int, degree: int) -> List[List[int]]:
    """Key/value heads each head slice needs: query heads ``[g*H/d,
    (g+1)*H/d)`` use the kv heads ``h // (H/kv)``. When every slice needs the
    same number of heads in plain GQA order, those (replicated on several
    ranks when kv_heads < degree, as the planner's cost model assumes); else
    one kv head per query head."""
    per, ratio = heads // degree, heads // kv_heads
    slices = [sorted({h // ratio for h in range(g * per, (g + 1) * per)}) for g in range(degree)]
    n = len(slices[0])
    if (
        all(len(s) == n for s in slices)
        and per % n == 0
        and all(
            s[i // (per // n)] == (g * per + i) // ratio
            for g, s in enumerate(slices)
            for i in range(per)
        )
    ):
        return slices
    return [[(g * per + i) // ratio for i in range(per)] for g in range(degree)]


def _group_ranks(ctx: MicroBatchContext) -> List[int]:
    """Global ranks in the process group's own order (all-to-all slots)."""
    pg_ranks = list(dist.get_process_group_ranks(ctx.process_group))
    if sorted(pg_ranks) != sorted(ctx.ranks):
        raise ValueError(f"group: ranks {list(ctx.ranks)} are not its process group's {pg_ranks}")
    return pg_ranks


def _gathered_to_global(ctx: MicroBatchContext, slot_ring_index: List[int], device) -> torch.Tensor:
    """``perm`` with ``gathered[perm]`` in global packed order, where
    ``gathered`` concatenates the packed shards of the ring indices
    ``slot_ring_index`` (zigzag undone, sequences in order)."""
    perm = torch.empty(ctx.cu_seqlens[-1], dtype=torch.int64)
    base = 0
    for ri in slot_ring_index:
        idx = packed_index(ctx.cu_seqlens, ctx.degree, ri)
        perm[idx] = torch.arange(base, base + idx.numel())
        base += idx.numel()
    return perm.to(device)


def _scatter_heads(t, degree, pg, local_sizes):
    """(B, d, h, T, D) head slices, slot g for rank slot g -> (B, h, N, D):
    the slot's head slice of every rank's tokens, in slot order."""
    b, _, h, n, dim = t.shape
    send = t.permute(1, 0, 2, 3, 4).reshape(-1)
    out_splits = [b * h * m * dim for m in local_sizes]
    got = _AllToAll.apply(send, out_splits, [b * h * n * dim] * degree, pg)
    pieces = torch.split(got, out_splits)
    return torch.cat([p.view(b, h, m, dim) for p, m in zip(pieces, local_sizes)], dim=2)


def _gather_heads(t, degree, pg, local_sizes, my_tokens):
    """Inverse of :func:`_scatter_heads`: (B, h, N, D) in slot order ->
    (B, d*h, T, D), this rank's tokens of every slot's head slice."""
    b, h, _, dim = t.shape
    send = torch.cat([p.reshape(-1) for p in torch.split(t, local_sizes, dim=2)])
    got = _AllToAll.apply(
        send, [b * h * my_tokens * dim] * degree, [b * h * m * dim for m in local_sizes], pg
    )
    return (
        got.view(degree, b, h, my_tokens, dim)
        .permute(1, 0, 2, 3, 4)
        .reshape(b, degree * h, my_tokens, dim)
    )


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group,
    causal: bool = True,
    softmax_scale: Optional[float] = None,
    cu_seqlens=None,
    *,
    seq_len: Optional[int] = None,
    rank: Optional[int] = None,
) -> torch.Tensor:
    """Exact attention over zigzag-sharded sequences, all-to-all over ``group``.

    Same arguments, shapes and token layout as :func:`ring_attention` (so
    the data path does not depend on the group's kind). One all-to-all sends
    head slice ``g`` of this rank's tokens to the process group's ``g``-th
    rank and gathers that slice of every rank's tokens; the zigzag layout is
    undone, attention runs exactly per sequence on whole sequences
    (flash-attn's varlen kernel on CUDA when installed, else PyTorch's
    ``scaled_dot_product_attention``), and a second all-to-all returns each
    rank's tokens. Key/value heads follow their query heads: with fewer
    key/value heads than ranks they are replicated (every rank receives the
    one its query heads use). The degree must divide the number of query
    heads: otherwise ValueError naming ``group`` (fcp plans never do this:
    the planner refuses such all-to-all groups too). Differentiable;
    collective over the group.
    """
    packed = cu_seqlens is not None or (isinstance(group, MicroBatchContext) and group.packed)
    qb, kb, vb, restore = _as_batched(q, k, v, packed)
    degree = group.degree if isinstance(group, MicroBatchContext) else len(_ring_ranks(group))
    heads, kv_heads = qb.shape[1], kb.shape[1]
    if heads % degree:
        raise ValueError(
            f"group: all-to-all over {degree} ranks needs the query heads (dim -3) "
            f"to be a multiple of the degree, q has {heads}"
        )
    ctx = context_for(group, cu_seqlens, causal, seq_len, rank, qb.shape[-2], qb.device)
    scale = _scale(q, softmax_scale)
    cu = ctx.cu_seqlens
    if cu[-1] == 0:
        zero = qb.new_zeros(*qb.shape[:-1], vb.shape[-1])
        return restore(zero + 0 * (qb.sum() + kb.sum() + vb.sum()))
    if ctx.degree == 1:
        return restore(exact_attention(qb, kb, vb, cu, ctx.causal, scale, ctx.cu_tensor(qb.device)))
    pg_ranks = _group_ranks(ctx)
    slots = [ctx.ranks.index(r) for r in pg_ranks]  # ring index of each all-to-all slot
    sizes = [ctx.geometry.lengths[ri] for ri in slots]
    perm = ctx.cached(
        ("ulysses_perm", str(qb.device)), lambda: _gathered_to_global(ctx, slots, qb.device)
    )
    inverse = ctx.cached(("ulysses_inv", str(qb.device)), lambda: torch.argsort(perm))
    kv_slices = ctx.cached(
        ("ulysses_kv", heads, kv_heads), lambda: _kv_head_slices(heads, kv_heads, degree)
    )
    b, t = qb.shape[0], qb.shape[2]
    per = heads // degree
    q_slots = qb.reshape(b, degree, per, t, qb.shape[-1])
    kv_index = ctx.cached(
        ("ulysses_kv_index", heads, kv_heads, str(qb.device)),
        lambda: torch.tensor([h for s in kv_slices for h in s], device=qb.device),
    )
    n = len(kv_slices[0])

    def kv_slots(x):
        return x.index_select(1, kv_index).reshape(b, degree, n, t, x.shape[-1])

    pg = ctx.process_group
    qg, kg, vg = (
        _scatter_heads(x, degree, pg, sizes).index_select(2, perm)
        for x in (q_slots, kv_slots(kb), kv_slots(vb))
    )
    out = exact_attention(qg, kg, vg, cu, ctx.causal, scale, ctx.cu_tensor(qb.device))
    out = out.index_select(2, inverse)
    return restore(_gather_heads(out.contiguous(), degree, pg, sizes, t))
