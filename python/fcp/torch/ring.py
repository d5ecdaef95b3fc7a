"""Ring attention: exact softmax attention over zigzag-sharded sequences —
one sequence, or a packed (THD) micro-batch of several — with key/value
blocks travelling around the group's ring (``batch_isend_irecv``)."""

from __future__ import annotations

import math
from typing import Optional

import torch

from .context import MicroBatchContext, _Geometry, _Ring, context_for
from .kernels import _acc_dtype, _select_kernel, _VarlenRefused, exact_attention
from .layout import normalize_cu_seqlens, packed_index

_KV_TAG = 0
_DKV_TAG = 1


def _pack(k, v, max_len, dtype):
    """k, v (B, Hkv, L, D*) -> one flat buffer of (B, Hkv, max_len, Dk + Dv)."""
    b, h, n, _ = k.shape
    buf = torch.zeros(b, h, max_len, k.shape[-1] + v.shape[-1], dtype=dtype, device=k.device)
    buf[:, :, :n, : k.shape[-1]] = k
    buf[:, :, :n, k.shape[-1] :] = v
    return buf


def _merge(out_acc, lse_acc, rows, o, lse, first):
    """Online softmax merge of a block result into rows [r0, r1), in place.
    ``first``: nothing merged into these rows yet (decided by the step, not
    by inspecting values: no device synchronisation); the block is copied."""
    r0, r1 = rows
    old_lse = lse_acc[..., r0:r1]
    acc = out_acc[..., r0:r1, :]
    if first:
        acc.copy_(o)
        old_lse.copy_(lse)
        return
    new_lse = torch.logaddexp(old_lse, lse)
    acc.mul_(torch.exp(old_lse - new_lse).unsqueeze(-1))
    acc.add_(o.to(acc.dtype) * torch.exp(lse - new_lse).unsqueeze(-1))
    old_lse.copy_(new_lse)


def _kv_piece(kv, cols, dk_):
    return (
        kv[:, :, cols[0] : cols[1], :dk_].contiguous(),
        kv[:, :, cols[0] : cols[1], dk_:].contiguous(),
    )


class _VarlenBlock:
    """A step's pieces as one varlen call (THD, flash-attn's layout): the
    query rows and key/value columns of every piece gathered in piece order,
    their cumulative lengths, and the one causal flag all pieces of a step
    share (the own block is causal, every other block full). Resolved once
    per (block, device) and reused by every layer."""

    def __init__(self, pieces, device):
        def index(ranges):
            return torch.cat(
                [torch.arange(a, b, device=device) for a, b in ranges]
                or [torch.zeros(0, dtype=torch.int64, device=device)]
            )

        def cumulative(ranges):
            cu = [0]
            for a, b in ranges:
                cu.append(cu[-1] + b - a)
            return torch.tensor(cu, dtype=torch.int32, device=device)

        rows, cols = [p[0] for p in pieces], [p[1] for p in pieces]
        self.rows, self.cols = index(rows), index(cols)
        self.cu_q, self.cu_k = cumulative(rows), cumulative(cols)
        self.max_q = max((b - a for a, b in rows), default=0)
        self.max_k = max((b - a for a, b in cols), default=0)
        self.causal = pieces[0][2] if pieces else False


def _varlen_block(ring, src, causal, kernel, q):
    """The step's :class:`_VarlenBlock` when ``kernel`` runs varlen blocks
    (``kernel.varlen``) on a packed batch (batch dim 1) and the step's pieces
    share one causal flag; else None (one kernel call per piece)."""
    if not getattr(kernel, "varlen", False) or q.shape[0] != 1:
        return None
    pieces = ring.pieces(src, causal)
    if not pieces or len({c for _, _, c in pieces}) != 1:
        return None
    key = ("varlen", src, bool(causal), q.device)
    if key not in ring._varlen:
        ring._varlen[key] = _VarlenBlock(pieces, q.device)
    return ring._varlen[key]


def _thd(t, index):
    """Rows ``index`` of (1, H, T, D) as (len(index), H, D), contiguous."""
    return t[0].index_select(1, index).transpose(0, 1).contiguous()


def _merge_rows(out_acc, lse_acc, rows, o, lse, first):
    """:func:`_merge` for gathered rows (an index tensor)."""
    o = o.to(out_acc.dtype)
    if first:
        out_acc.index_copy_(2, rows, o)
        lse_acc.index_copy_(-1, rows, lse)
        return
    old_lse = lse_acc.index_select(-1, rows)
    new_lse = torch.logaddexp(old_lse, lse)
    merged = out_acc.index_select(2, rows) * torch.exp(old_lse - new_lse).unsqueeze(-1)
    merged += o * torch.exp(lse - new_lse).unsqueeze(-1)
    out_acc.index_copy_(2, rows, merged)
    lse_acc.index_copy_(-1, rows, new_lse)


def _varlen_forward(q, kv, block, ring, src, scale, kernel, out_acc, lse_acc):
    dk_ = q.shape[-1]
    o, lse = kernel.forward_varlen(
        _thd(q, block.rows),
        _thd(kv[..., :dk_], block.cols),
        _thd(kv[..., dk_:], block.cols),
        block.cu_q,
        block.cu_k,
        block.max_q,
        block.max_k,
        block.causal,
        scale,
    )
    _merge_rows(
        out_acc,
        lse_acc,
        block.rows,
        o.transpose(0, 1)[None],
        lse.to(lse_acc.dtype)[None],
        first=src == ring.index,
    )


def _varlen_backward(dout, q, out, lse, kv, block, scale, kernel, dq):
    acc = dq.dtype
    dk_ = q.shape[-1]
    gq, gk, gv = kernel.backward_varlen(
        _thd(dout, block.rows),
        _thd(q, block.rows),
        _thd(kv[..., :dk_], block.cols),
        _thd(kv[..., dk_:], block.cols),
        _thd(out, block.rows),
        lse[0].index_select(-1, block.rows).contiguous(),
        block.cu_q,
        block.cu_k,
        block.max_q,
        block.max_k,
        block.causal,
        scale,
    )
    dq.index_add_(2, block.rows, gq.transpose(0, 1)[None].to(acc))
    return [(block.cols, gk.transpose(0, 1)[None].to(acc), gv.transpose(0, 1)[None].to(acc))]


def _block_forward(q, kv, src, ring, causal, scale, kernel, out_acc, lse_acc):
    """Merges the pieces of key/value block ``src`` into the accumulators.
    The first step (this rank's own block) always covers every query row
    with one piece, so its result is copied instead of merged. A varlen
    kernel runs all pieces of the step in one call."""
    block = _varlen_block(ring, src, causal, kernel, q)
    if block is not None:
        try:
            _varlen_forward(q, kv, block, ring, src, scale, kernel, out_acc, lse_acc)
            return
        except _VarlenRefused:  # the guard warned; nothing was merged
            pass
    dk_ = q.shape[-1]
    for rows, cols, piece_causal in ring.pieces(src, causal):
        kb, vb = _kv_piece(kv, cols, dk_)
        o, lse = kernel.forward(
            q[:, :, rows[0] : rows[1]].contiguous(), kb, vb, piece_causal, scale
        )
        _merge(out_acc, lse_acc, rows, o, lse, first=src == ring.index)


def _block_backward(dout, q, out, lse, kv, src, ring, causal, scale, kernel, dq):
    """Adds block ``src``'s share of dQ into ``dq``; returns its dK/dV pieces
    [(columns, dk, dv)] in the accumulation dtype, key/value heads."""
    block = _varlen_block(ring, src, causal, kernel, q)
    if block is not None:
        try:
            return _varlen_backward(dout, q, out, lse, kv, block, scale, kernel, dq)
        except _VarlenRefused:  # the guard warned; nothing was added
            pass
    acc = dq.dtype
    dk_ = q.shape[-1]
    grads = []
    for (r0, r1), cols, piece_causal in ring.pieces(src, causal):
        kb, vb = _kv_piece(kv, cols, dk_)
        gq, gk, gv = kernel.backward(
            dout[:, :, r0:r1].contiguous(),
            q[:, :, r0:r1].contiguous(),
            kb,
            vb,
            out[:, :, r0:r1].contiguous(),
            lse[..., r0:r1].contiguous(),
            piece_causal,
            scale,
        )
        dq[:, :, r0:r1] += gq.to(acc)
        grads.append((cols, gk.to(acc), gv.to(acc)))
    return grads


def _add_grads(dkv, grads, dk_):
    for cols, gk, gv in grads:
        if isinstance(cols, torch.Tensor):  # a varlen block's gathered columns
            dkv[..., :dk_].index_add_(2, cols, gk)
            dkv[..., dk_:].index_add_(2, cols, gv)
            continue
        c0, c1 = cols
        dkv[:, :, c0:c1, :dk_] += gk
        dkv[:, :, c0:c1, dk_:] += gv


class _RingAttention(torch.autograd.Function):
    """One rank's shard; key/value blocks arrive over the ring."""

    @staticmethod
    def forward(ctx, q, k, v, ring: _Ring, causal: bool, scale: float, kernel):
        acc = _acc_dtype(q.dtype)
        out_acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
        lse_acc = torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=q.device)
        kv = _pack(k, v, ring.max_len, q.dtype)
        for step in range(ring.degree):
            reqs = []
            if step + 1 < ring.degree:  # prefetch the next block while computing
                nxt = torch.empty_like(kv)
                reqs = ring.exchange(kv, nxt, _KV_TAG)
            _block_forward(q, kv, ring.origin(step), ring, causal, scale, kernel, out_acc, lse_acc)
            for r in reqs:
                r.wait()
            if step + 1 < ring.degree:
                kv = nxt
        out = out_acc.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse_acc)
        ctx.ring, ctx.causal, ctx.scale, ctx.kernel = ring, causal, scale, kernel
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring, causal, scale, kernel = ctx.ring, ctx.causal, ctx.scale, ctx.kernel
        acc = _acc_dtype(q.dtype)
        dk_ = k.shape[-1]
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        kv = _pack(k, v, ring.max_len, q.dtype)
        dkv_reqs, dkv_incoming = [], None
        for step in range(ring.degree):
            reqs = []
            if step + 1 < ring.degree:
                nxt = torch.empty_like(kv)
                reqs = ring.exchange(kv, nxt, _KV_TAG)
            grads = _block_backward(
                dout, q, out, lse, kv, ring.origin(step), ring, causal, scale, kernel, dq
            )
            # The fp32 accumulator travels with its block: take the one that
            # came with this block (sent by the previous rank last step), add,
            # pass it on; after d steps each is back at its owner.
            for r in dkv_reqs:
                r.wait()
            dkv = (
                dkv_incoming
                if dkv_incoming is not None
                else torch.zeros(kv.shape, dtype=acc, device=q.device)
            )
            _add_grads(dkv, grads, dk_)
            if ring.degree > 1:
                dkv_incoming = torch.empty_like(dkv)
                dkv_reqs = ring.exchange(dkv, dkv_incoming, _DKV_TAG)
            for r in reqs:
                r.wait()
            if step + 1 < ring.degree:
                kv = nxt
        if ring.degree > 1:
            for r in dkv_reqs:
                r.wait()
            dkv = dkv_incoming
        n = ring.length(ring.index)
        return (
            dq.to(q.dtype),
            dkv[:, :, :n, :dk_].to(k.dtype),
            dkv[:, :, :n, dk_:].to(v.dtype),
            None,
            None,
            None,
            None,
        )


class _InProcessRing(torch.autograd.Function):
    """All ``degree`` shards of a (packed) batch in one process: every virtual
    rank runs the same block loop as :class:`_RingAttention`, with the key/value
    blocks of the others taken from memory instead of the ring."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens, degree: int, causal: bool, scale: float, kernel):
        geometry = _Geometry(
            [cu_seqlens[j + 1] - cu_seqlens[j] for j in range(len(cu_seqlens) - 1)], degree
        )
        rings = [_Ring(geometry, tuple(range(degree)), i, None) for i in range(degree)]
        pos = [packed_index(cu_seqlens, degree, i, device=q.device) for i in range(degree)]
        acc = _acc_dtype(q.dtype)
        kvs = [_pack(k[:, :, p], v[:, :, p], rings[0].max_len, q.dtype) for p in pos]
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)
        for ring, p in zip(rings, pos):
            qi = q[:, :, p].contiguous()
            out_acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
            lse_acc = torch.full(qi.shape[:-1], float("-inf"), dtype=acc, device=q.device)
            for step in range(degree):
                src = ring.origin(step)
                _block_forward(qi, kvs[src], src, ring, causal, scale, kernel, out_acc, lse_acc)
            out[:, :, p] = out_acc.to(q.dtype)
            lse[:, :, p] = lse_acc
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (rings, pos, causal, scale, kernel)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        rings, pos, causal, scale, kernel = ctx.args
        acc = _acc_dtype(q.dtype)
        dk_ = k.shape[-1]
        kvs = [_pack(k[:, :, p], v[:, :, p], rings[0].max_len, q.dtype) for p in pos]
        dkvs = [torch.zeros(kv.shape, dtype=acc, device=q.device) for kv in kvs]
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        for ring, p in zip(rings, pos):
            dqi = torch.zeros(
                q.shape[0], q.shape[1], len(p), q.shape[-1], dtype=acc, device=q.device
            )
            qi, oi, li, di = (t[:, :, p].contiguous() for t in (q, out, lse, dout))
            for step in range(len(rings)):
                src = ring.origin(step)
                _add_grads(
                    dkvs[src],
                    _block_backward(
                        di, qi, oi, li, kvs[src], src, ring, causal, scale, kernel, dqi
                    ),
                    dk_,
                )
            dq[:, :, p] = dqi
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for p, dkv in zip(pos, dkvs):
            dk[:, :, p] = dkv[:, :, : len(p), :dk_]
            dv[:, :, p] = dkv[:, :, : len(p), dk_:]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def _check_qkv(q, k, v):
    """Shape/dtype rules shared by ring and Ulysses attention."""
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("q, k, v: must have the same number of dims (>= 2)")
    if q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError("q, k, v: must have the same local length (dim -2)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k: must have the same head_dim (dim -1)")
    if q.dim() >= 3:
        heads, kv_heads = q.shape[-3], k.shape[-3]
        if q.shape[:-3] != k.shape[:-3] or k.shape[:-2] != v.shape[:-2]:
            raise ValueError("q, k, v: leading dims (before heads) must match, and k, v heads")
        if kv_heads < 1 or heads % kv_heads:
            raise ValueError(f"k: {kv_heads} key/value heads (dim -3) must divide q's {heads}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError("q, k, v: must have the same dtype")


def _as_batched(q, k, v, packed: bool):
    """(q, k, v) as (B, H, T, D) and a function restoring the caller's
    leading dims. Packed batches: (H, T, D) or (1, H, T, D)."""
    _check_qkv(q, k, v)
    if packed and (q.dim() < 3 or q.dim() > 4 or (q.dim() == 4 and q.shape[0] != 1)):
        raise ValueError(
            "q: with cu_seqlens must be (heads, tokens, head_dim) or "
            f"(1, heads, tokens, head_dim), got {tuple(q.shape)}"
        )
    if q.dim() == 2:
        return q[None, None], k[None, None], v[None, None], lambda o: o[0, 0]
    lead = q.shape[:-3]
    batch = math.prod(lead)

    def flat(t):
        return t.reshape(batch, *t.shape[-3:])

    return flat(q), flat(k), flat(v), lambda o: o.reshape(*lead, *o.shape[-3:])


def _scale(q, softmax_scale):
    return float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group,
    causal: bool = True,
    softmax_scale: Optional[float] = None,
    cu_seqlens=None,
    kernel: str = "auto",
    *,
    seq_len: Optional[int] = None,
    rank: Optional[int] = None,
) -> torch.Tensor:
    """Exact attention over zigzag-sharded sequences, ring P2P over ``group``.

    *Packed* (``cu_seqlens`` given: an int tensor or list of the *global*
    cumulative lengths ``[0, s_0, s_0+s_1, ...]``): ``q`` is
    ``(heads, local_tokens, head_dim)`` (or with a leading batch dim of 1)
    holding, concatenated in sequence order, this rank's zigzag shard of
    every sequence (:func:`packed_shard`). Attention never crosses a
    sequence boundary; causal is per sequence on global positions. One ring
    pass for the whole batch: the key/value shards of all sequences travel
    together.

    *One sequence* (no ``cu_seqlens``): ``q`` is ``(..., heads, s_local,
    head_dim)`` as :func:`shard` lays it out (``(s_local, head_dim)`` is one
    head), the leading dims a batch of sequences of the same length;
    ``seq_len`` is the full length (omitted: summed over the group).

    ``k``, ``v``: as ``q`` with ``kv_heads`` dividing ``heads``
    (grouped-query attention: query head ``h`` uses key/value head
    ``h // (heads // kv_heads)``). ``group``: a :class:`CPGroup`, a ring-ordered
    rank list (degree 1 needs no process group), a ``ProcessGroup``, or a
    :class:`MicroBatchContext`. The first call of a micro-batch on a
    CPGroup plans the layout and checks, with one small all-gather, that the
    group's ranks agree on the ring order, the lengths and ``causal``
    (:func:`plan_micro_batch`); later layers reuse it. ``kernel``: one of
    :data:`KERNELS` (``"auto"``: PyTorch's CPU flash kernel on CPU; on CUDA
    cuDNN for blocks of >= 2,048 rows, flash below, memory-efficient for
    fp32; else the chunked fallback). fp16/bf16 are merged and their
    gradients accumulated in fp32.

    Returns this rank's output, q's shape and dtype. Differentiable in q, k,
    v; backward is a second ring returning dK/dV to their owners.
    Collective over the group: its ranks call it (and its backward) for the
    same micro-batch in the same order. Raises ValueError naming the
    argument on bad shapes, lengths or a rank outside the group.
    """
    packed = cu_seqlens is not None or (isinstance(group, MicroBatchContext) and group.packed)
    qb, kb, vb, restore = _as_batched(q, k, v, packed)
    ctx = context_for(group, cu_seqlens, causal, seq_len, rank, qb.shape[-2], qb.device)
    scale = _scale(q, softmax_scale)
    impl = ctx.block_kernel(kernel, q)  # chosen once per micro-batch
    if ctx.cu_seqlens[-1] == 0:  # nothing to attend; every rank knows it: no messages
        out = qb.new_zeros(*qb.shape[:-1], vb.shape[-1]) + 0 * (qb.sum() + kb.sum() + vb.sum())
    elif (
        ctx.degree == 1
        and kernel == "auto"
        and (q.is_cuda or q.dtype in (torch.float32, torch.float64))
    ):
        # No ring: PyTorch's own attention (flash-attn varlen when installed)
        # per sequence is the fastest exact path; no block merge needed. (CPU
        # fp16/bf16 keep the blocks: PyTorch's CPU kernel would sum grouped
        # dK/dV in the input dtype.)
        out = exact_attention(
            qb, kb, vb, ctx.cu_seqlens, ctx.causal, scale, ctx.cu_tensor(qb.device)
        )
    else:
        out = _RingAttention.apply(qb, kb, vb, ctx.ring, ctx.causal, scale, impl)
    return restore(out)


def blockwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    degree: int,
    causal: bool = True,
    softmax_scale: Optional[float] = None,
    kernel: str = "auto",
    cu_seqlens=None,
) -> torch.Tensor:
    """The in-process multi-block path: attention over *whole* sequences
    ``(..., heads, s, head_dim)`` (or, with ``cu_seqlens``, a whole packed
    batch ``(heads, tokens, head_dim)``) computed exactly as ``degree`` ring
    ranks would (zigzag shards, the same block pieces, kernels and fp32
    merge), all in this process and without communication. For measuring
    the block kernels on one device and as a single-process check of the
    ring's block decomposition. Same GQA rule as :func:`ring_attention`."""
    degree = int(degree)
    if degree < 1:
        raise ValueError(f"degree: must be >= 1, got {degree}")
    if q.dim() < 3:
        raise ValueError("q, k, v: must be (..., heads, s, head_dim) with the same dims")
    qb, kb, vb, restore = _as_batched(q, k, v, cu_seqlens is not None)
    cu = normalize_cu_seqlens(cu_seqlens) if cu_seqlens is not None else (0, qb.shape[-2])
    if cu[-1] != qb.shape[-2]:
        raise ValueError(f"cu_seqlens: ends at {cu[-1]}, q holds {qb.shape[-2]} tokens")
    impl = _select_kernel(kernel, q.device, q.dtype, q.shape[-1])
    out = _InProcessRing.apply(qb, kb, vb, cu, degree, bool(causal), _scale(q, softmax_scale), impl)
    return restore(out)
