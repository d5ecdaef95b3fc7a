"""fcp.torch: run an fcp plan on ``torch.distributed`` (pure Python).

Pieces (DESIGN.md section 9; layout rules in docs/python.md):

* :class:`GroupCache` maps the rank sets of a plan onto ``torch.distributed``
  process groups. Every rank creates every group with ``new_group`` in one
  identical, deterministic order and reuses it afterwards (keyed by rank set).
* :func:`shard` / :func:`unshard` / :func:`zigzag_positions` implement the
  zigzag layout of the C++ executor: a sequence of ``s`` tokens on a group of
  degree ``d`` is cut into ``2d`` chunks, chunk ``c`` covering the global token
  positions ``[floor(c*s/(2d)), floor((c+1)*s/(2d)))``; the rank at ring index
  ``i`` holds chunk ``i`` followed by chunk ``2d-1-i``. No padding: chunks may
  differ by one token and may be empty when ``s < 2d``.
* :func:`ring_attention` is exact softmax attention over the sharded sequence,
  a ``torch.autograd.Function`` that passes key/value blocks (and, backward,
  their gradient accumulators) around the ring with ``batch_isend_irecv``.
  Causal masking uses global positions, so it is exact under zigzag.
* :func:`per_token_loss` / :func:`global_token_count`: the loss normalisation
  that stays correct when groups of one step have different degrees.

Thread-safety: none of these objects is thread-safe; use them from the
training thread, like ``torch.distributed`` itself.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

__all__ = [
    "CPGroup",
    "GroupCache",
    "zigzag_chunk_bounds",
    "zigzag_positions",
    "local_num_tokens",
    "shard",
    "unshard",
    "ring_attention",
    "attention_reference",
    "global_token_count",
    "per_token_loss",
    "plan_groups",
]


# ---------------------------------------------------------------------------
# Zigzag layout
# ---------------------------------------------------------------------------


def _check_layout_args(seq_len: int, degree: int) -> None:
    if int(seq_len) < 0:
        raise ValueError(f"seq_len: must be >= 0, got {seq_len}")
    if int(degree) < 1:
        raise ValueError(f"degree: must be >= 1, got {degree}")


def zigzag_chunk_bounds(seq_len: int, degree: int) -> List[Tuple[int, int]]:
    """The ``2*degree`` chunks ``[start, end)`` (token positions) of a sequence.

    Chunk ``c`` is ``[floor(c*s/(2d)), floor((c+1)*s/(2d)))``: chunks partition
    ``[0, s)`` in order, their sizes differ by at most one token, and a chunk is
    empty only when ``s < 2d``. Raises ValueError naming the bad argument.
    """
    _check_layout_args(seq_len, degree)
    s, n = int(seq_len), 2 * int(degree)
    return [((c * s) // n, ((c + 1) * s) // n) for c in range(n)]


def _index_chunks(seq_len: int, degree: int, index: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    if not 0 <= int(index) < int(degree):
        raise ValueError(f"index: must be in [0, {degree}), got {index}")
    bounds = zigzag_chunk_bounds(seq_len, degree)
    return bounds[index], bounds[2 * degree - 1 - index]


def local_num_tokens(seq_len: int, degree: int, index: int) -> int:
    """Tokens held by ring index ``index`` of a degree-``degree`` group."""
    (a0, a1), (b0, b1) = _index_chunks(seq_len, degree, index)
    return (a1 - a0) + (b1 - b0)


def zigzag_positions(seq_len: int, degree: int, index: int,
                     device: Optional[torch.device] = None) -> torch.Tensor:
    """Global token positions (int64, ascending) held by ring index ``index``."""
    (a0, a1), (b0, b1) = _index_chunks(seq_len, degree, index)
    return torch.cat([torch.arange(a0, a1, device=device),
                      torch.arange(b0, b1, device=device)])


def _ring_ranks(group) -> Tuple[int, ...]:
    """Ring-ordered global ranks of a CPGroup, a rank list, or a ProcessGroup."""
    if isinstance(group, CPGroup):
        return group.ranks
    if isinstance(group, (list, tuple)):
        return tuple(int(r) for r in group)
    if group is None:
        return (dist.get_rank() if dist.is_initialized() else 0,)
    return tuple(dist.get_process_group_ranks(group))


def _ring_index(ranks: Sequence[int], rank: Optional[int]) -> int:
    if rank is None:
        if len(ranks) == 1:
            return 0
        rank = dist.get_rank()
    try:
        return list(ranks).index(int(rank))
    except ValueError:
        raise ValueError(f"rank: {rank} is not in the group {list(ranks)}") from None


def shard(sequence_tensor: torch.Tensor, group, rank: Optional[int] = None,
          dim: int = 0) -> torch.Tensor:
    """This rank's zigzag shard of a full sequence along ``dim``.

    ``group`` is a :class:`CPGroup`, a list of global ranks in ring order, or a
    ``ProcessGroup`` (ring order = ascending ranks); ``rank`` is the global rank
    (default: ``dist.get_rank()``). Differentiable (narrow + cat). The result
    holds chunk ``i`` then chunk ``2d-1-i`` (see :func:`zigzag_chunk_bounds`).
    """
    ranks = _ring_ranks(group)
    index = _ring_index(ranks, rank)
    seq_len = sequence_tensor.shape[dim]
    (a0, a1), (b0, b1) = _index_chunks(seq_len, len(ranks), index)
    return torch.cat([sequence_tensor.narrow(dim, a0, a1 - a0),
                      sequence_tensor.narrow(dim, b0, b1 - b0)], dim=dim)


def unshard(shards: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Inverse of :func:`shard`: ``shards[i]`` is ring index ``i``'s shard."""
    degree = len(shards)
    if degree < 1:
        raise ValueError("shards: must not be empty")
    seq_len = sum(t.shape[dim] for t in shards)
    bounds = zigzag_chunk_bounds(seq_len, degree)
    pieces: List[Optional[torch.Tensor]] = [None] * (2 * degree)
    for i, t in enumerate(shards):
        (a0, a1), (b0, b1) = bounds[i], bounds[2 * degree - 1 - i]
        if t.shape[dim] != (a1 - a0) + (b1 - b0):
            raise ValueError(f"shards[{i}]: has {t.shape[dim]} tokens, zigzag "
                             f"layout of {seq_len} on {degree} needs {(a1 - a0) + (b1 - b0)}")
        pieces[i] = t.narrow(dim, 0, a1 - a0)
        pieces[2 * degree - 1 - i] = t.narrow(dim, a1 - a0, b1 - b0)
    return torch.cat(pieces, dim=dim)


# ---------------------------------------------------------------------------
# Process groups
# ---------------------------------------------------------------------------


class CPGroup:
    """A context-parallel group: global ``ranks`` in ring order and its
    ``process_group`` (a ``torch.distributed`` group over the same set).
    The rank at position ``i`` of ``ranks`` is ring index ``i``: it holds
    zigzag chunks ``i`` and ``2d-1-i`` and sends to ``ranks[(i+1) % d]``."""

    __slots__ = ("ranks", "process_group")

    def __init__(self, ranks: Sequence[int], process_group=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.process_group = process_group

    @property
    def degree(self) -> int:
        return len(self.ranks)

    def index(self, rank: int) -> int:
        return _ring_index(self.ranks, rank)

    def __contains__(self, rank: int) -> bool:
        return int(rank) in self.ranks

    def __repr__(self) -> str:
        return f"CPGroup(ranks={list(self.ranks)})"


def plan_groups(plan) -> List[List[List[int]]]:
    """Rank lists of every group of every micro-batch of ``plan``.

    Accepts an ``fcp`` plan object (``.micro_batches[i].groups[j].ranks``), its
    ``to_dict()`` form, or a plain ``[[ranks, ...], ...]`` list (one list of
    rank lists per micro-batch).
    """
    if isinstance(plan, dict):
        mbs = plan["micro_batches"]
    elif hasattr(plan, "micro_batches"):
        mbs = plan.micro_batches
    else:
        mbs = plan
    out = []
    for mb in mbs:
        groups = mb["groups"] if isinstance(mb, dict) else getattr(mb, "groups", mb)
        ranks = []
        for g in groups:
            if isinstance(g, dict):
                g = g["ranks"]
            elif hasattr(g, "ranks"):
                g = g.ranks
            ranks.append([int(r) for r in g])
        out.append(ranks)
    return out


class GroupCache:
    """Creates and caches one ``torch.distributed`` group per rank set.

    ``new_group`` is a collective over the default group: every rank must call
    it for every group, in the same order. :meth:`prepare` guarantees that as
    long as all ranks pass the same plan (the planner is deterministic, or the
    plan is broadcast): it visits the plan's rank sets in a canonical order
    (ascending degree, then ascending sorted ranks) and creates the missing ones.
    Groups are cached by their rank *set*; the returned :class:`CPGroup` keeps
    the plan's ring order. Degree-1 groups get a process group too (Megatron
    asks the world size of its CP group). ``created`` lists the created rank
    sets in creation order; ``num_created`` counts ``new_group`` calls.

    ``new_group`` may be replaced (testing without a process group); ``backend``
    and ``timeout`` are passed to ``torch.distributed.new_group``.
    """

    def __init__(self, backend: Optional[str] = None, timeout=None,
                 new_group: Optional[Callable] = None):
        self._backend = backend
        self._timeout = timeout
        self._new_group = new_group
        self._groups: Dict[Tuple[int, ...], object] = {}
        self.created: List[Tuple[int, ...]] = []

    @property
    def num_created(self) -> int:
        return len(self.created)

    def __len__(self) -> int:
        return len(self._groups)

    def _create(self, key: Tuple[int, ...]):
        if self._new_group is not None:
            return self._new_group(list(key))
        kwargs = {}
        if self._backend is not None:
            kwargs["backend"] = self._backend
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        return dist.new_group(ranks=list(key), **kwargs)

    @staticmethod
    def _key(ranks: Iterable[int]) -> Tuple[int, ...]:
        key = tuple(sorted(int(r) for r in ranks))
        if not key:
            raise ValueError("ranks: a group needs at least one rank")
        if len(set(key)) != len(key):
            raise ValueError(f"ranks: duplicate rank in {list(key)}")
        return key

    def prepare(self, plan) -> int:
        """Collective: creates every missing group of ``plan`` (any form
        :func:`plan_groups` accepts, or a flat list of rank lists). All ranks
        must call it with the same plan. Returns the number created now."""
        rank_sets = set()
        for mb in plan_groups(plan) if not _is_flat(plan) else [plan]:
            for ranks in mb:
                rank_sets.add(self._key(ranks))
        before = self.num_created
        for key in sorted(rank_sets, key=lambda k: (len(k), k)):
            if key not in self._groups:
                self._groups[key] = self._create(key)
                self.created.append(key)
        return self.num_created - before

    def get(self, ranks: Sequence[int]) -> CPGroup:
        """The cached group for ``ranks`` (ring order kept). A miss creates
        it, which is a collective: prefer :meth:`prepare` first."""
        key = self._key(ranks)
        if key not in self._groups:
            self._groups[key] = self._create(key)
            self.created.append(key)
        return CPGroup(ranks, self._groups[key])

    def for_micro_batch(self, micro_batch_groups, rank: Optional[int] = None) -> CPGroup:
        """Collective: prepares all groups of one micro-batch (a list of rank
        lists, or a plan's micro-batch object/dict) and returns the group that
        contains ``rank`` (default: this process's rank). Raises ValueError
        when the rank is idle in this micro-batch."""
        mb = plan_groups([micro_batch_groups])[0]
        self.prepare([mb])
        if rank is None:
            rank = dist.get_rank()
        for ranks in mb:
            if int(rank) in ranks:
                return self.get(ranks)
        raise ValueError(f"rank: {rank} is in no group of this micro-batch")


def _is_flat(plan) -> bool:
    """True for a flat list of rank lists ([[0, 1], [2]])."""
    return (isinstance(plan, (list, tuple)) and len(plan) > 0
            and isinstance(plan[0], (list, tuple)) and len(plan[0]) > 0
            and isinstance(plan[0][0], int))


# ---------------------------------------------------------------------------
# Ring attention
# ---------------------------------------------------------------------------


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool = True, softmax_scale: Optional[float] = None) -> torch.Tensor:
    """Single-process ``softmax(q k^T * scale [+ causal mask]) v``; shapes
    ``(..., s, head_dim)``. The oracle of the tests."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class _Ring:
    """Static description of one ring for one sequence."""

    def __init__(self, ranks, index, seq_len, process_group):
        self.ranks = ranks
        self.degree = len(ranks)
        self.index = index
        self.seq_len = seq_len
        self.pg = process_group
        self.next_rank = ranks[(index + 1) % self.degree]
        self.prev_rank = ranks[(index - 1) % self.degree]

    def origin(self, step: int) -> int:
        """Ring index whose key/value block this rank holds at ``step``."""
        return (self.index - step) % self.degree

    def length(self, index: int) -> int:
        return local_num_tokens(self.seq_len, self.degree, index)

    def positions(self, index: int, device) -> torch.Tensor:
        return zigzag_positions(self.seq_len, self.degree, index, device=device)

    def exchange(self, send: Optional[torch.Tensor], recv_numel: int, like: torch.Tensor, tag: int):
        """Starts send to next / receive from previous. Zero-size messages are
        skipped on both sides (both know every block's size)."""
        recv = torch.empty(recv_numel, dtype=like.dtype, device=like.device)
        ops = []
        if send is not None and send.numel() > 0:
            ops.append(dist.P2POp(dist.isend, send, self.next_rank, self.pg, tag))
        if recv_numel > 0:
            ops.append(dist.P2POp(dist.irecv, recv, self.prev_rank, self.pg, tag))
        reqs = dist.batch_isend_irecv(ops) if ops else []
        return recv, reqs


def _split_kv(buf, lead, kv_len, dk, dv):
    n_k = math.prod(lead) * kv_len * dk
    k = buf[:n_k].view(*lead, kv_len, dk)
    v = buf[n_k:n_k + math.prod(lead) * kv_len * dv].view(*lead, kv_len, dv)
    return k, v


def _block_scores(q, k, q_pos, k_pos, causal, scale):
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        allowed = q_pos[:, None] >= k_pos[None, :]
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


_KV_TAG = 0
_DKV_TAG = 1


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, ring: _Ring, causal: bool, scale: float):
        lead, dk, dv = q.shape[:-2], q.shape[-1], v.shape[-1]
        q_pos = ring.positions(ring.index, q.device)
        neg_inf = torch.tensor(float("-inf"), dtype=q.dtype, device=q.device)
        row_max = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        row_sum = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)
        acc = torch.zeros(*q.shape[:-1], dv, dtype=q.dtype, device=q.device)
        kv = torch.cat([k.reshape(-1), v.reshape(-1)])
        for step in range(ring.degree):
            src = ring.origin(step)
            reqs = []
            if step + 1 < ring.degree:  # prefetch the next block while computing
                nxt_len = ring.length(ring.origin(step + 1))
                nxt, reqs = ring.exchange(kv, math.prod(lead) * nxt_len * (dk + dv), q, _KV_TAG)
            kv_len = ring.length(src)
            if kv_len > 0 and q.shape[-2] > 0:
                kb, vb = _split_kv(kv, lead, kv_len, dk, dv)
                scores = _block_scores(q, kb, q_pos, ring.positions(src, q.device), causal, scale)
                new_max = torch.maximum(row_max, scores.amax(dim=-1))
                safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
                rescale = torch.exp(row_max - safe_max)
                p = torch.exp(scores - safe_max[..., None])
                row_sum = row_sum * rescale + p.sum(dim=-1)
                acc = acc * rescale[..., None] + torch.matmul(p, vb)
                row_max = new_max
            for r in reqs:
                r.wait()
            if step + 1 < ring.degree:
                kv = nxt
        out = acc / row_sum[..., None]
        lse = torch.where(row_sum > 0, row_max + torch.log(row_sum), neg_inf)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.causal, ctx.scale = ring, causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring, causal, scale = ctx.ring, ctx.causal, ctx.scale
        lead, dk, dv = q.shape[:-2], q.shape[-1], v.shape[-1]
        dout = dout.contiguous()
        q_pos = ring.positions(ring.index, q.device)
        delta = (dout * out).sum(dim=-1)  # rowsum(dO * O)
        dq = torch.zeros_like(q)
        kv = torch.cat([k.reshape(-1), v.reshape(-1)])
        dkv = torch.zeros_like(kv)  # travelling gradient accumulator of block `src`
        for step in range(ring.degree):
            src = ring.origin(step)
            reqs = []
            if step + 1 < ring.degree:
                nxt_len = ring.length(ring.origin(step + 1))
                nxt, reqs = ring.exchange(kv, math.prod(lead) * nxt_len * (dk + dv), q, _KV_TAG)
            kv_len = ring.length(src)
            if kv_len > 0 and q.shape[-2] > 0:
                kb, vb = _split_kv(kv, lead, kv_len, dk, dv)
                dkb, dvb = _split_kv(dkv, lead, kv_len, dk, dv)
                scores = _block_scores(q, kb, q_pos, ring.positions(src, q.device), causal, scale)
                p = torch.exp(scores - lse[..., None])  # masked entries: exp(-inf) = 0
                dvb += torch.matmul(p.transpose(-1, -2), dout)
                ds = p * (torch.matmul(dout, vb.transpose(-1, -2)) - delta[..., None])
                dq += torch.matmul(ds, kb) * scale
                dkb += torch.matmul(ds.transpose(-1, -2), q) * scale
            for r in reqs:
                r.wait()
            if ring.degree > 1:
                # The accumulator follows its block; after the last step it
                # reaches the block's owner (this rank receives its own).
                recv_len = ring.length(ring.origin(step + 1))
                dkv, dreqs = ring.exchange(dkv, math.prod(lead) * recv_len * (dk + dv), q, _DKV_TAG)
                for r in dreqs:
                    r.wait()
            if step + 1 < ring.degree:
                kv = nxt
        dk_own, dv_own = _split_kv(dkv, lead, ring.length(ring.index), dk, dv)
        return dq, dk_own.clone(), dv_own.clone(), None, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group,
                   causal: bool = True, softmax_scale: Optional[float] = None,
                   seq_len: Optional[int] = None, rank: Optional[int] = None) -> torch.Tensor:
    """Exact attention over one zigzag-sharded sequence, ring P2P over ``group``.

    ``q``, ``k``, ``v``: this rank's shard, shape ``(..., s_local, head_dim)``
    (any leading batch/head dims, identical on all ranks of the group), as
    :func:`shard` lays it out. ``group``: a :class:`CPGroup` (or list of ranks /
    ProcessGroup; a degree-1 group needs no process group). ``seq_len``: the
    full sequence length; when omitted it is summed over the group (one
    all-reduce). ``rank``: global rank, default ``dist.get_rank()``.
    Returns this rank's shard of ``softmax(q k^T * scale + mask) v`` where
    the causal mask compares *global* positions. Differentiable in q, k, v;
    backward is a second ring that also returns dK/dV to their owners.
    Collective over the group: all its ranks must call it (and its backward)
    for the same sequence in the same order.
    """
    if q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError("q, k, v: must have the same local length (dim -2)")
    if q.shape[:-2] != k.shape[:-2] or q.shape[:-2] != v.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k, v: leading dims and q/k head_dim must match")
    ranks = _ring_ranks(group)
    pg = group.process_group if isinstance(group, CPGroup) else (
        None if isinstance(group, (list, tuple)) else group)
    index = _ring_index(ranks, rank)
    if seq_len is None:
        if len(ranks) == 1:
            seq_len = q.shape[-2]
        else:
            t = torch.tensor([q.shape[-2]], dtype=torch.int64)
            dist.all_reduce(t, group=pg)
            seq_len = int(t.item())
    expected = local_num_tokens(seq_len, len(ranks), index)
    if q.shape[-2] != expected:
        raise ValueError(f"q: holds {q.shape[-2]} tokens, the zigzag shard of ring index "
                         f"{index} of a {seq_len}-token sequence on {len(ranks)} ranks has {expected}")
    if len(ranks) > 1 and pg is None:
        raise ValueError("group: a group of degree > 1 needs a process group")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    ring = _Ring(ranks, index, int(seq_len), pg)
    return _RingAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), ring, bool(causal), scale)


# ---------------------------------------------------------------------------
# Loss normalisation
# ---------------------------------------------------------------------------


def global_token_count(local_num_tokens_: int, group=None) -> int:
    """Loss-bearing tokens of the whole global batch: the sum over all ranks
    (``group``: default world) of the tokens each rank holds across all of its
    micro-batches. Zigzag shards are disjoint, so every token counts once.
    Collective (one all-reduce)."""
    t = torch.tensor([int(local_num_tokens_)], dtype=torch.int64)
    if dist.is_initialized():
        dist.all_reduce(t, group=group)
    return int(t.item())


def per_token_loss(token_losses: torch.Tensor, global_num_tokens: int,
                   grad_reduction: str = "sum", world_size: Optional[int] = None) -> torch.Tensor:
    """This rank's share of the global-batch per-token mean loss.

    Returns ``token_losses.sum() / global_num_tokens`` (times ``world_size``
    when gradients are later *averaged* across ranks, ``grad_reduction="mean"``,
    as Megatron/DDP do). Summed over all ranks and micro-batches it is exactly
    ``sum(all token losses) / all tokens`` whatever the degree of each group,
    so every token has the same weight. Dividing by the tokens of a group or
    micro-batch instead (the usual ``loss.mean()``) over-weights tokens of
    small groups/micro-batches as soon as groups differ. Raises ValueError
    on a bad argument.
    """
    if global_num_tokens <= 0:
        raise ValueError(f"global_num_tokens: must be > 0, got {global_num_tokens}")
    if grad_reduction not in ("sum", "mean"):
        raise ValueError(f"grad_reduction: must be 'sum' or 'mean', got {grad_reduction!r}")
    loss = token_losses.sum() / float(global_num_tokens)
    if grad_reduction == "mean":
        if world_size is None:
            world_size = dist.get_world_size() if dist.is_initialized() else 1
        loss = loss * float(world_size)
    return loss
