"""fcp.torch: run an fcp plan on ``torch.distributed`` (pure Python, PyTorch 2).

Pieces (docs/python.md):

* :class:`GroupCache` maps the rank sets of a plan onto ``torch.distributed``
  process groups. Every rank creates (and, with a bound, destroys) every group
  in one identical, deterministic order; hits, misses, evictions and creation
  time are counted in :meth:`GroupCache.stats`.
* :func:`shard` / :func:`unshard` / :func:`zigzag_positions` implement the
  zigzag layout of the C++ executor: a sequence of ``s`` tokens on a group of
  degree ``d`` is cut into ``2d`` chunks, chunk ``c`` covering the global token
  positions ``[floor(c*s/(2d)), floor((c+1)*s/(2d)))``; the rank at ring index
  ``i`` holds chunk ``i`` followed by chunk ``2d-1-i``. No padding: chunks may
  differ by one token and may be empty when ``s < 2d``.
* :func:`ring_attention` is exact softmax attention over the sharded sequence,
  a ``torch.autograd.Function`` built from block-attention kernels that return
  the log-sum-exp (PyTorch's flash / memory-efficient SDPA kernels, or a
  chunked fallback). Block results are merged online in fp32 (fp64 for fp64
  inputs), so memory per block is O(chunk), never O(s^2). Key/value blocks
  (and, backward, their fp32 gradient accumulators) travel around the ring
  with ``batch_isend_irecv`` on the tensors' device while the current block
  is computed. Grouped-query attention: K/V may have fewer heads (dim -3)
  than Q when their count divides Q's.
* :func:`per_token_loss` / :func:`global_token_count` /
  :func:`reduce_gradients`: the loss normalisation that stays correct when
  groups of one step have different degrees, and a gradient reduction that
  works on ranks left idle by a micro-batch.

Thread-safety: none of these objects is thread-safe; use them from the
training thread, like ``torch.distributed`` itself.
"""

from __future__ import annotations

import collections
import math
import time
import warnings
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
    "blockwise_attention",
    "block_kernel_name",
    "KERNELS",
    "attention_reference",
    "global_token_count",
    "per_token_loss",
    "reduce_gradients",
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


def _require_ring(group) -> None:
    """fcp.torch runs ring attention only: a group the planner put on
    all-to-all (strategy ``fcp`` may, where Ulysses is cheaper) is refused
    rather than silently run at another cost. Plan with ``fcp-ring``."""
    comm = group.get("comm", "ring") if isinstance(group, dict) else getattr(group, "comm", None)
    if comm is not None and str(getattr(comm, "name", comm)).lower().replace("_", "-") in (
            "all-to-all", "all-to-all".upper()):
        raise ValueError("plan: group uses all-to-all; fcp.torch runs ring attention only "
                         "(plan with strategy='fcp-ring')")


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
            _require_ring(g)
            if isinstance(g, dict):
                g = g["ranks"]
            elif hasattr(g, "ranks"):
                g = g.ranks
            ranks.append([int(r) for r in g])
        out.append(ranks)
    return out


def _is_flat(plan) -> bool:
    """True for a flat list of rank lists ([[0, 1], [2]])."""
    return (isinstance(plan, (list, tuple)) and len(plan) > 0
            and isinstance(plan[0], (list, tuple)) and len(plan[0]) > 0
            and isinstance(plan[0][0], int))


class GroupCache:
    """Creates, caches and (with a bound) destroys one ``torch.distributed``
    group per rank set.

    ``new_group`` is a collective over the default group: every rank must call
    it for every group, in the same order; destroying an NCCL communicator must
    happen in the same order on its members too. :meth:`prepare` guarantees
    both as long as all ranks pass the same plan (the planner is deterministic,
    or the plan is broadcast): it visits the plan's rank sets in a canonical
    order (ascending degree, then ascending sorted ranks), creates the missing
    ones and marks all of them most recently used; then, while more than
    ``max_groups`` groups are cached, it destroys the least recently used group
    that the plan does not need. Recency changes only in collective calls
    (:meth:`prepare`, :meth:`for_micro_batch`), never in :meth:`get`, so every
    rank evicts the same sets in the same order. ``max_groups=None``: no bound.

    Groups are cached by their rank *set*; the returned :class:`CPGroup` keeps
    the plan's ring order. Degree-1 groups get a process group too (Megatron
    asks the world size of its CP group). ``created`` / ``evicted`` list rank
    sets in creation / destruction order; :meth:`stats` reports hits, misses,
    evictions and the seconds spent in ``new_group``.

    ``new_group`` / ``destroy_group`` may be replaced (testing without a
    process group); ``backend`` and ``timeout`` are passed to
    ``torch.distributed.new_group``.
    """

    def __init__(self, max_groups: Optional[int] = 64, backend: Optional[str] = None,
                 timeout=None, new_group: Optional[Callable] = None,
                 destroy_group: Optional[Callable] = None):
        if max_groups is not None and int(max_groups) < 1:
            raise ValueError(f"max_groups: must be >= 1 or None, got {max_groups}")
        self.max_groups = None if max_groups is None else int(max_groups)
        self._backend = backend
        self._timeout = timeout
        self._new_group = new_group
        self._destroy_group = destroy_group
        self._groups: "collections.OrderedDict[Tuple[int, ...], object]" = collections.OrderedDict()
        self.created: List[Tuple[int, ...]] = []
        self.evicted: List[Tuple[int, ...]] = []
        self.hits = 0
        self.misses = 0
        self.create_seconds = 0.0

    @property
    def num_created(self) -> int:
        return len(self.created)

    def __len__(self) -> int:
        return len(self._groups)

    def __contains__(self, ranks) -> bool:
        return self._key(ranks) in self._groups

    def stats(self) -> Dict[str, float]:
        """{"groups": cached now, "hits", "misses", "created", "evicted",
        "create_s": seconds spent creating groups (wall clock)}."""
        return {"groups": len(self._groups), "hits": self.hits, "misses": self.misses,
                "created": len(self.created), "evicted": len(self.evicted),
                "create_s": self.create_seconds}

    def _create(self, key: Tuple[int, ...]):
        start = time.perf_counter()
        if self._new_group is not None:
            pg = self._new_group(list(key))
        else:
            kwargs = {}
            if self._backend is not None:
                kwargs["backend"] = self._backend
            if self._timeout is not None:
                kwargs["timeout"] = self._timeout
            pg = dist.new_group(ranks=list(key), **kwargs)
        self.create_seconds += time.perf_counter() - start
        self.created.append(key)
        self.misses += 1
        self._groups[key] = pg
        return pg

    def _destroy(self, key: Tuple[int, ...]) -> None:
        pg = self._groups.pop(key)
        self.evicted.append(key)
        if self._destroy_group is not None:
            self._destroy_group(pg)
        elif pg is not None and pg is not dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(pg)

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
        :func:`plan_groups` accepts, or a flat list of rank lists), marks the
        plan's groups most recently used and evicts beyond ``max_groups``.
        All ranks must call it with the same plan. Returns the number created
        now."""
        rank_sets = set()
        for mb in plan_groups(plan) if not _is_flat(plan) else [plan]:
            for ranks in mb:
                rank_sets.add(self._key(ranks))
        before = self.num_created
        for key in sorted(rank_sets, key=lambda k: (len(k), k)):
            if key in self._groups:
                self.hits += 1
                self._groups.move_to_end(key)
            else:
                self._create(key)
        if self.max_groups is not None:
            # Oldest first; the plan's own groups are never evicted (a plan
            # that alone needs more than max_groups keeps them all).
            for key in [k for k in self._groups if k not in rank_sets]:
                if len(self._groups) <= self.max_groups:
                    break
                self._destroy(key)
        return self.num_created - before

    def get(self, ranks: Sequence[int]) -> CPGroup:
        """The cached group for ``ranks`` (ring order kept). A miss creates
        it, which is a collective: call :meth:`prepare` first."""
        key = self._key(ranks)
        pg = self._groups[key] if key in self._groups else self._create(key)
        return CPGroup(ranks, pg)

    def for_micro_batch(self, micro_batch_groups, rank: Optional[int] = None) -> Optional[CPGroup]:
        """Collective: prepares all groups of one micro-batch (a list of rank
        lists, or a plan's micro-batch object/dict) and returns the group that
        contains ``rank`` (default: this process's rank), or None when the
        rank is idle in this micro-batch (it then skips the micro-batch's
        compute but still joins the gradient reduction)."""
        mb = plan_groups([micro_batch_groups])[0]
        self.prepare([mb])
        if rank is None:
            rank = dist.get_rank()
        for ranks in mb:
            if int(rank) in ranks:
                return self.get(ranks)
        return None

    def clear(self) -> None:
        """Collective: destroys every cached group (oldest first)."""
        for key in list(self._groups):
            self._destroy(key)


# ---------------------------------------------------------------------------
# Block attention kernels (one block = one query tile x one key/value tile)
# ---------------------------------------------------------------------------
#
# Every kernel takes q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv)
# with Hkv dividing H (see _Kernel for grouped-query attention), a causal flag
# meaning the
# top-left-aligned mask of a square diagonal block (row r sees columns <= r),
# and returns the block's output and its log-sum-exp (B, H, Sq) in the
# accumulation dtype. Backward takes the *final* (merged) output and
# log-sum-exp of the rows: then P = exp(S - lse) is the true global softmax
# restricted to the block, so block gradients add up to the exact ones.


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows_heads_layout(t):
    """``t`` (B, H, S, D) with (B, S, H, D) memory order, as the CUDA
    memory-efficient and cuDNN backward kernels read their output and its
    gradient whatever the strides say."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _expand_heads(t, group):
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _reduce_heads(t, group):
    if group == 1:
        return t
    b, h, n, d = t.shape
    return t.view(b, h // group, group, n, d).sum(dim=2)


class _Kernel:
    """Grouped-query attention for every kernel: K/V come with their own head
    count; kernels without native GQA get them expanded (query head h uses
    key/value head h // group) and their dK/dV summed back."""

    def native_gqa(self, dtype) -> bool:
        return False

    def forward(self, q, k, v, causal, scale):
        group = 1 if self.native_gqa(q.dtype) else q.shape[1] // k.shape[1]
        return self._forward(q, _expand_heads(k, group), _expand_heads(v, group), causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal, scale):
        group = 1 if self.native_gqa(q.dtype) else q.shape[1] // k.shape[1]
        dq, dk, dv = self._backward(dout, q, _expand_heads(k, group), _expand_heads(v, group),
                                    out, lse, causal, scale)
        return dq, _reduce_heads(dk, group), _reduce_heads(dv, group)


class _ChunkedKernel(_Kernel):
    """Plain PyTorch: query and key tiles of ``chunk`` rows, online softmax in
    the accumulation dtype. Memory O(chunk^2) per head."""

    name = "chunked"

    def __init__(self, chunk: int = 512):
        self.chunk = int(chunk)

    def _tiles(self, n):
        return [(a, min(a + self.chunk, n)) for a in range(0, n, self.chunk)]

    def _forward(self, q, k, v, causal, scale):
        acc = _acc_dtype(q.dtype)
        sq = q.shape[-2]
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)
        for q0, q1 in self._tiles(sq):
            qt = q[..., q0:q1, :].to(acc)
            o = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=acc, device=q.device)
            m = torch.full(qt.shape[:-1], float("-inf"), dtype=acc, device=q.device)
            s = torch.zeros(qt.shape[:-1], dtype=acc, device=q.device)
            for k0, k1 in self._tiles(q1 if causal else k.shape[-2]):
                scores = torch.matmul(qt, k[..., k0:k1, :].to(acc).transpose(-1, -2)) * scale
                if causal and k1 > q0:
                    rows = torch.arange(q0, q1, device=q.device)[:, None]
                    cols = torch.arange(k0, k1, device=q.device)[None, :]
                    scores = scores.masked_fill(cols > rows, float("-inf"))
                new_m = torch.maximum(m, scores.amax(dim=-1))
                p = torch.exp(scores - new_m[..., None])
                alpha = torch.exp(m - new_m)
                s = s * alpha + p.sum(dim=-1)
                o = o * alpha[..., None] + torch.matmul(p, v[..., k0:k1, :].to(acc))
                m = new_m
            out[..., q0:q1, :] = o / s[..., None]
            lse[..., q0:q1] = m + torch.log(s)
        return out, lse

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        acc = _acc_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for q0, q1 in self._tiles(q.shape[-2]):
            qt = q[..., q0:q1, :].to(acc)
            do = dout[..., q0:q1, :].to(acc)
            delta = (do * out[..., q0:q1, :].to(acc)).sum(dim=-1)
            lt = lse[..., q0:q1].to(acc)
            for k0, k1 in self._tiles(q1 if causal else k.shape[-2]):
                kt = k[..., k0:k1, :].to(acc)
                vt = v[..., k0:k1, :].to(acc)
                scores = torch.matmul(qt, kt.transpose(-1, -2)) * scale
                if causal and k1 > q0:
                    rows = torch.arange(q0, q1, device=q.device)[:, None]
                    cols = torch.arange(k0, k1, device=q.device)[None, :]
                    scores = scores.masked_fill(cols > rows, float("-inf"))
                p = torch.exp(scores - lt[..., None])
                dv[..., k0:k1, :] += torch.matmul(p.transpose(-1, -2), do)
                ds = p * (torch.matmul(do, vt.transpose(-1, -2)) - delta[..., None])
                dq[..., q0:q1, :] += torch.matmul(ds, kt) * scale
                dk[..., k0:k1, :] += torch.matmul(ds.transpose(-1, -2), qt) * scale
        return dq, dk, dv


class _CpuFlashKernel(_Kernel):
    """``aten::_scaled_dot_product_flash_attention_for_cpu`` (+ its backward):
    PyTorch's tiled CPU flash attention, fp32 accumulation inside."""

    name = "cpu_flash"

    def native_gqa(self, dtype) -> bool:
        # K/V with fewer heads natively (less memory); but for bf16/fp16 it
        # sums a group's dK/dV in the input dtype (3x the error): expanded.
        return dtype in (torch.float32, torch.float64)

    @staticmethod
    def available(device, dtype) -> bool:
        return (device.type == "cpu"
                and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
                and dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16))

    def _forward(self, q, k, v, causal, scale):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, scale=scale)
        return out, lse.to(_acc_dtype(q.dtype))

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal, scale=scale)


class _CudaFlashKernel(_Kernel):
    """``aten::_scaled_dot_product_flash_attention`` (FlashAttention-2 in
    PyTorch; fp16/bf16, head_dim a multiple of 8 up to 256)."""

    name = "cuda_flash"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return (device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
                and head_dim % 8 == 0 and head_dim <= 256)

    def _forward(self, q, k, v, causal, scale):
        res = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False, scale=scale)
        # RNG state: unused without dropout, but the backward asks for it.
        self._rng = (res[6], res[7])
        return res[0], res[1].float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        seed, offset = getattr(self, "_rng", (torch.empty((), dtype=torch.int64, device=q.device),) * 2)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, lse.contiguous(), None, None, q.shape[-2], k.shape[-2], 0.0,
            causal, seed, offset, scale=scale)
        return dq, dk, dv


class _CudaEfficientKernel(_Kernel):
    """``aten::_scaled_dot_product_efficient_attention`` (memory-efficient
    attention; fp32 too). Its log-sum-exp may be padded to a multiple of 32
    rows: trimmed on the way out, padded again for the backward. Its fp16/bf16
    backward reads the output as (batch, rows, heads, dim) in memory whatever
    the strides say (measured on an H200, torch 2.11: a (batch, heads, rows,
    dim)-contiguous output gave wrong dQ/dK and illegal memory accesses), so
    the output and its gradient are handed over in that layout."""

    name = "cuda_efficient"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return device.type == "cuda" and dtype in (torch.float32, torch.float16, torch.bfloat16)

    def _forward(self, q, k, v, causal, scale):
        out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal, scale=scale)
        self._rng = (seed, offset)
        return out, lse[..., :q.shape[-2]].float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        rows = (q.shape[-2] + 31) // 32 * 32  # the forward's padded length for these rows
        if rows > lse.shape[-1]:
            lse = torch.nn.functional.pad(lse, (0, rows - lse.shape[-1]))
        seed, offset = getattr(self, "_rng", (torch.empty((), dtype=torch.int64, device=q.device),) * 2)
        out, dout = _rows_heads_layout(out), _rows_heads_layout(dout)
        dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            dout, q, k, v, None, out,
            lse.contiguous(), seed, offset, 0.0, [True, True, True, False], causal, scale=scale)
        return dq, dk, dv


class _CudnnKernel(_Kernel):
    """``aten::_scaled_dot_product_cudnn_attention`` (cuDNN's fused flash
    attention; fp16/bf16). On Hopper it is the fastest of PyTorch's kernels
    (it is what ``scaled_dot_product_attention`` picks there). Output and
    output gradient go to the backward in the forward's (batch, rows, heads,
    dim) memory layout, as for the memory-efficient kernel."""

    name = "cuda_cudnn"

    @staticmethod
    def available(device, dtype, head_dim) -> bool:
        return (device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
                and head_dim % 8 == 0 and head_dim <= 128
                and hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention")
                and torch.backends.cudnn.is_available())

    def _forward(self, q, k, v, causal, scale):
        res = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, causal, False, scale=scale)
        self._aux = (res[2], res[3], res[4], res[5], res[6], res[7])
        return res[0], res[1].reshape(q.shape[:-1]).float()

    def _backward(self, dout, q, k, v, out, lse, causal, scale):
        empty = torch.empty(0, device=q.device)
        zero = torch.zeros((), dtype=torch.int64, device=q.device)
        cum_q, cum_k, _, _, seed, offset = getattr(self, "_aux", (empty, empty, 0, 0, zero, zero))
        out, dout = _rows_heads_layout(out), _rows_heads_layout(dout)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            dout, q, k, v, out, lse.reshape(*lse.shape, 1).contiguous(), seed, offset, None,
            cum_q, cum_k, q.shape[-2], k.shape[-2], 0.0, causal, scale=scale)
        return dq, dk, dv


class _CudaBySizeKernel:
    """``kernel="auto"`` on CUDA for fp16/bf16: cuDNN for blocks of at least
    ``min_cudnn_rows`` query and key rows, FlashAttention-2 below. Measured on
    an H200 (bf16, 32/8 heads x 128, fwd+bwd; docs/python.md): cuDNN is 1.7x
    faster at 32k-row blocks and 1.4x at 4k-row blocks, but 1.4x slower at
    1k-row blocks, where its per-call overhead dominates. Each call picks by
    its own block; any kernel's backward is exact given the merged output and
    log-sum-exp, so forward and backward need not agree."""

    def __init__(self, min_cudnn_rows: int = 2048):
        self.min_cudnn_rows = min_cudnn_rows
        self.cudnn, self.flash = _CudnnKernel(), _CudaFlashKernel()
        self.name = "cudnn+flash"

    def _pick(self, q, k):
        return self.cudnn if min(q.shape[-2], k.shape[-2]) >= self.min_cudnn_rows else self.flash

    def forward(self, q, k, v, causal, scale):
        return self._pick(q, k).forward(q, k, v, causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal, scale):
        return self._pick(q, k).backward(dout, q, k, v, out, lse, causal, scale)


KERNELS = ("auto", "cpu_flash", "cuda_cudnn", "cuda_flash", "cuda_efficient", "chunked")


class _GuardedKernel:
    """``kernel="auto"``: PyTorch's kernel, and the chunked fallback for the
    rest of the call (with one warning per kernel and error) when PyTorch's
    refuses a shape or build. Mixing is exact: any kernel's backward is
    correct given the merged output and log-sum-exp."""

    _warned = set()

    def __init__(self, primary):
        self.primary = primary
        self.fallback = None
        self.name = primary.name

    def _run(self, method, *args):
        if self.fallback is None:
            try:
                return getattr(self.primary, method)(*args)
            except (RuntimeError, NotImplementedError) as e:
                key = (self.primary.name, type(e).__name__, str(e).split("\n")[0][:200])
                if key not in self._warned:
                    self._warned.add(key)
                    warnings.warn(f"fcp.torch: {self.primary.name} {method} failed "
                                  f"({key[2]}); using the chunked kernel", RuntimeWarning)
                self.fallback = _ChunkedKernel()
                self.name = f"{self.primary.name}->chunked"
        return getattr(self.fallback, method)(*args)

    def forward(self, *args):
        return self._run("forward", *args)

    def backward(self, *args):
        return self._run("backward", *args)


def _select_kernel(name, device, dtype, head_dim: int):
    if not isinstance(name, str) and hasattr(name, "forward") and hasattr(name, "backward"):
        return name  # a kernel object (tests pass a small-tile chunked kernel)
    if name not in KERNELS:
        raise ValueError(f"kernel: must be one of {', '.join(KERNELS)}, got {name!r}")
    if name == "auto":
        if _CpuFlashKernel.available(device, dtype):
            return _GuardedKernel(_CpuFlashKernel())
        if (_CudnnKernel.available(device, dtype, head_dim)
                and _CudaFlashKernel.available(device, dtype, head_dim)):
            return _GuardedKernel(_CudaBySizeKernel())
        if _CudaFlashKernel.available(device, dtype, head_dim):
            return _GuardedKernel(_CudaFlashKernel())
        if _CudaEfficientKernel.available(device, dtype, head_dim):
            return _GuardedKernel(_CudaEfficientKernel())
        return _ChunkedKernel()
    return {"cpu_flash": _CpuFlashKernel, "cuda_cudnn": _CudnnKernel, "cuda_flash": _CudaFlashKernel,
            "cuda_efficient": _CudaEfficientKernel, "chunked": _ChunkedKernel}[name]()


def block_kernel_name(q: torch.Tensor, kernel: str = "auto") -> str:
    """Name of the block kernel :func:`ring_attention` uses for ``q``."""
    return _select_kernel(kernel, q.device, q.dtype, q.shape[-1]).name


# ---------------------------------------------------------------------------
# Ring attention
# ---------------------------------------------------------------------------


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool = True, softmax_scale: Optional[float] = None) -> torch.Tensor:
    """Single-process ``torch.nn.functional.scaled_dot_product_attention`` on
    ``(..., heads, s, head_dim)`` with grouped-query K/V expanded: the oracle
    of the tests (an independent implementation: PyTorch's own)."""
    if k.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, scale=softmax_scale)


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
        self.bounds = zigzag_chunk_bounds(seq_len, self.degree)
        # Every message is padded to the largest shard: all ranks send and
        # receive the same non-zero size at every step (NCCL needs every rank
        # of a group in its first P2P call; no zero-size transfers).
        self.max_len = max(self.length(i) for i in range(self.degree))

    def origin(self, step: int) -> int:
        """Ring index whose key/value block this rank holds at ``step``."""
        return (self.index - step) % self.degree

    def chunks(self, index: int) -> Tuple[int, int]:
        """Token counts of ring index ``index``'s two chunks (early, late)."""
        (a0, a1), (b0, b1) = self.bounds[index], self.bounds[2 * self.degree - 1 - index]
        return a1 - a0, b1 - b0

    def length(self, index: int) -> int:
        return sum(self.chunks(index))

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, tag: int):
        """Starts send to next / receive from previous; returns the handles."""
        ops = [dist.P2POp(dist.isend, send, self.next_rank, self.pg, tag),
               dist.P2POp(dist.irecv, recv, self.prev_rank, self.pg, tag)]
        return dist.batch_isend_irecv(ops)

    def pieces(self, src: int, causal: bool):
        """(query rows, key/value columns, causal) block pieces of step with
        key/value origin ``src``. Under zigzag and a causal mask, with this
        rank holding chunks i, 2d-1-i and the block chunks j, 2d-1-j:
        j == i is plain causal on the concatenation (positions ascend with the
        local index); j < i: every query row sees chunk j only (full);
        j > i: only the late chunk's rows see the whole block (full)."""
        lq = self.length(self.index)
        lk = self.length(src)
        if lq == 0 or lk == 0:
            return []
        if not causal:
            return [((0, lq), (0, lk), False)]
        if src == self.index:
            return [((0, lq), (0, lk), True)]
        if src < self.index:
            early = self.chunks(src)[0]
            return [((0, lq), (0, early), False)] if early else []
        early_q = self.chunks(self.index)[0]
        return [((early_q, lq), (0, lk), False)] if lq > early_q else []


_KV_TAG = 0
_DKV_TAG = 1


def _pack(k, v, max_len, dtype):
    """k, v (B, Hkv, L, D*) -> one flat buffer of (B, Hkv, max_len, Dk + Dv)."""
    b, h, n, _ = k.shape
    buf = torch.zeros(b, h, max_len, k.shape[-1] + v.shape[-1], dtype=dtype, device=k.device)
    buf[:, :, :n, :k.shape[-1]] = k
    buf[:, :, :n, k.shape[-1]:] = v
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
    return (kv[:, :, cols[0]:cols[1], :dk_].contiguous(),
            kv[:, :, cols[0]:cols[1], dk_:].contiguous())


def _block_forward(q, kv, src, ring, causal, scale, kernel, out_acc, lse_acc):
    """Merges the pieces of key/value block ``src`` into the accumulators.
    The first step (this rank's own block) always covers every query row
    with one piece, so its result is copied instead of merged."""
    dk_ = q.shape[-1]
    for rows, cols, piece_causal in ring.pieces(src, causal):
        kb, vb = _kv_piece(kv, cols, dk_)
        o, lse = kernel.forward(q[:, :, rows[0]:rows[1]].contiguous(), kb, vb, piece_causal, scale)
        _merge(out_acc, lse_acc, rows, o, lse, first=src == ring.index)


def _block_backward(dout, q, out, lse, kv, src, ring, causal, scale, kernel, dq):
    """Adds block ``src``'s share of dQ into ``dq``; returns its dK/dV pieces
    [(columns, dk, dv)] in the accumulation dtype, key/value heads."""
    acc = dq.dtype
    dk_ = q.shape[-1]
    grads = []
    for (r0, r1), cols, piece_causal in ring.pieces(src, causal):
        kb, vb = _kv_piece(kv, cols, dk_)
        gq, gk, gv = kernel.backward(
            dout[:, :, r0:r1].contiguous(), q[:, :, r0:r1].contiguous(), kb, vb,
            out[:, :, r0:r1].contiguous(), lse[..., r0:r1].contiguous(), piece_causal, scale)
        dq[:, :, r0:r1] += gq.to(acc)
        grads.append((cols, gk.to(acc), gv.to(acc)))
    return grads


def _add_grads(dkv, grads, dk_):
    for (c0, c1), gk, gv in grads:
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
            grads = _block_backward(dout, q, out, lse, kv, ring.origin(step), ring, causal, scale,
                                    kernel, dq)
            # The fp32 accumulator travels with its block: take the one that
            # came with this block (sent by the previous rank last step), add,
            # pass it on; after d steps each is back at its owner.
            for r in dkv_reqs:
                r.wait()
            dkv = dkv_incoming if dkv_incoming is not None else torch.zeros(
                kv.shape, dtype=acc, device=q.device)
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
        return (dq.to(q.dtype), dkv[:, :, :n, :dk_].to(k.dtype), dkv[:, :, :n, dk_:].to(v.dtype),
                None, None, None, None)


class _InProcessRing(torch.autograd.Function):
    """All ``degree`` shards of one sequence in one process: every virtual
    rank runs the same block loop as :class:`_RingAttention`, with the key/value
    blocks of the others taken from memory instead of the ring."""

    @staticmethod
    def forward(ctx, q, k, v, seq_len: int, degree: int, causal: bool, scale: float, kernel):
        rings = [_Ring(tuple(range(degree)), i, seq_len, None) for i in range(degree)]
        pos = [zigzag_positions(seq_len, degree, i, device=q.device) for i in range(degree)]
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
            dqi = torch.zeros(q.shape[0], q.shape[1], len(p), q.shape[-1], dtype=acc, device=q.device)
            qi, oi, li, di = (t[:, :, p].contiguous() for t in (q, out, lse, dout))
            for step in range(len(rings)):
                src = ring.origin(step)
                _add_grads(dkvs[src], _block_backward(di, qi, oi, li, kvs[src], src, ring, causal,
                                                      scale, kernel, dqi), dk_)
            dq[:, :, p] = dqi
        dk = torch.zeros(k.shape, dtype=acc, device=q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=q.device)
        for p, dkv in zip(pos, dkvs):
            dk[:, :, p] = dkv[:, :, :len(p), :dk_]
            dv[:, :, p] = dkv[:, :, :len(p), dk_:]
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def _collective_device(group, like: Optional[torch.Tensor] = None) -> torch.device:
    """Device for a small collective on ``group``: the tensor's, else CUDA's
    current device for NCCL groups, else CPU."""
    if like is not None:
        return like.device
    if dist.is_initialized():
        try:
            backend = dist.get_backend(group)
        except (RuntimeError, ValueError):
            backend = None
        if backend is not None and "nccl" in str(backend).lower() and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group,
                   causal: bool = True, softmax_scale: Optional[float] = None,
                   seq_len: Optional[int] = None, rank: Optional[int] = None,
                   kernel: str = "auto") -> torch.Tensor:
    """Exact attention over one zigzag-sharded sequence, ring P2P over ``group``.

    ``q``: this rank's shard, shape ``(..., heads, s_local, head_dim)`` as
    :func:`shard` lays it out (``(s_local, head_dim)`` is one head). ``k``,
    ``v``: ``(..., kv_heads, s_local, head_dim)`` with ``kv_heads`` dividing
    ``heads`` (grouped-query attention: query head ``h`` uses key/value head
    ``h // (heads // kv_heads)``, as ``scaled_dot_product_attention(...,
    enable_gqa=True)``). Leading dims equal on q, k, v and on every rank.
    ``group``: a :class:`CPGroup` (or list of ranks / ProcessGroup; degree 1
    needs no process group). ``causal``: causal mask on *global* positions
    (exact under zigzag) or full attention. ``seq_len``: the full sequence
    length; when omitted it is summed over the group (one all-reduce on q's
    device). ``kernel``: one of :data:`KERNELS`; ``"auto"`` takes PyTorch's
    flash kernel on CPU; on CUDA cuDNN attention for blocks of >= 2,048 rows
    and flash below (fp16/bf16), memory-efficient attention (fp32); else the
    chunked fallback. fp16/bf16 inputs are merged and their
    gradients accumulated in fp32.

    Returns this rank's shard of the attention output (q's dtype).
    Differentiable in q, k, v; backward is a second ring that returns dK/dV to
    their owners. Collective over the group: all its ranks must call it (and
    its backward) for the same sequence in the same order. Raises ValueError
    naming the argument on bad shapes.
    """
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("q, k, v: must have the same number of dims (>= 2)")
    if q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError("q, k, v: must have the same local length (dim -2)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k: must have the same head_dim (dim -1)")
    if q.dim() == 2:
        q, k, v = q[None], k[None], v[None]
        squeeze = True
    else:
        squeeze = False
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError("q, k, v: leading dims (before heads) must match, and k, v heads")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"k: {kv_heads} key/value heads (dim -3) must divide q's {heads}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError("q, k, v: must have the same dtype")
    ranks = _ring_ranks(group)
    pg = group.process_group if isinstance(group, CPGroup) else (
        None if isinstance(group, (list, tuple)) else group)
    index = _ring_index(ranks, rank)
    no_pg = len(ranks) > 1 and pg is None
    if seq_len is None:
        if len(ranks) == 1:
            seq_len = q.shape[-2]
        else:
            if no_pg:
                raise ValueError("group: a group of degree > 1 needs a process group")
            t = torch.tensor([q.shape[-2]], dtype=torch.int64, device=q.device)
            dist.all_reduce(t, group=pg)
            seq_len = int(t.item())
    expected = local_num_tokens(seq_len, len(ranks), index)
    if q.shape[-2] != expected:
        raise ValueError(f"q: holds {q.shape[-2]} tokens, the zigzag shard of ring index "
                         f"{index} of a {seq_len}-token sequence on {len(ranks)} ranks has {expected}")
    if no_pg:
        raise ValueError("group: a group of degree > 1 needs a process group")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    impl = _select_kernel(kernel, q.device, q.dtype, q.shape[-1])
    lead = q.shape[:-3]
    out_shape = (*q.shape[:-1], v.shape[-1])
    if int(seq_len) == 0:  # nothing to attend; every rank knows it: no messages
        out = q.new_zeros(out_shape) + 0 * (q.sum() + k.sum() + v.sum())
    else:
        ring = _Ring(ranks, index, int(seq_len), pg)
        batch = math.prod(lead)

        def flat(t):
            return t.reshape(batch, *t.shape[-3:])
        out = _RingAttention.apply(flat(q), flat(k), flat(v), ring, bool(causal), scale, impl)
        out = out.reshape(*lead, *out.shape[-3:])
    return out[0] if squeeze else out


def blockwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, degree: int,
                        causal: bool = True, softmax_scale: Optional[float] = None,
                        kernel: str = "auto") -> torch.Tensor:
    """The in-process multi-block path: attention over a *whole* sequence
    ``(..., heads, s, head_dim)`` computed exactly as ``degree`` ring ranks
    would (zigzag shards, the same block pieces, kernels and fp32 merge), all
    in this process and without communication. For measuring the block
    kernels on one device and as a single-process check of the ring's block
    decomposition. Same arguments and GQA rule as :func:`ring_attention`."""
    degree = int(degree)
    if degree < 1:
        raise ValueError(f"degree: must be >= 1, got {degree}")
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("q, k, v: must be (..., heads, s, head_dim) with the same dims")
    if q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError("q, k, v: must have the same length (dim -2) and q/k head_dim")
    if k.shape[-3] < 1 or q.shape[-3] % k.shape[-3] or q.shape[:-3] != k.shape[:-3]:
        raise ValueError(f"k: {k.shape[-3]} key/value heads (dim -3) must divide q's {q.shape[-3]}")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    impl = _select_kernel(kernel, q.device, q.dtype, q.shape[-1])
    lead, batch = q.shape[:-3], math.prod(q.shape[:-3])
    flat = [t.reshape(batch, *t.shape[-3:]) for t in (q, k, v)]
    out = _InProcessRing.apply(*flat, q.shape[-2], degree, bool(causal), scale, impl)
    return out.reshape(*lead, *out.shape[-3:])


# ---------------------------------------------------------------------------
# Loss normalisation and gradient reduction
# ---------------------------------------------------------------------------


def global_token_count(local_num_tokens_: int, group=None,
                       device: Optional[torch.device] = None) -> int:
    """Loss-bearing tokens of the whole global batch: the sum over all ranks
    (``group``: default world) of the tokens each rank holds across all of its
    micro-batches (0 on a rank idle in every micro-batch). Zigzag shards are
    disjoint, so every token counts once. Collective (one all-reduce on
    ``device``; default: the current CUDA device for NCCL, else CPU)."""
    if not dist.is_initialized():
        return int(local_num_tokens_)
    dev = torch.device(device) if device is not None else _collective_device(group)
    t = torch.tensor([int(local_num_tokens_)], dtype=torch.int64, device=dev)
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


def group_times(plan, my_times_s: Sequence[float], group=None,
                device: Optional[torch.device] = None) -> List[List[float]]:
    """Each group's measured time (s) for ``fcp.Scheduler.observe``.

    ``my_times_s``: this rank's time in each micro-batch of ``plan`` (e.g. from
    its group's first forward to its last backward, with CUDA events), NaN
    where the rank is idle. Gathers every rank's list over ``group`` (default
    world, whose ranks must be the plan's ranks in order; one all-gather on
    ``device``) and returns, per micro-batch, the time of each of its groups:
    the slowest of the group's ranks (NaN when none of them measured).
    Every rank gets the same lists, so every rank learns the same
    coefficients. Collective; without a process group ``my_times_s`` are the
    times of every rank (a one-rank world). Raises ValueError when the count
    is not the plan's micro-batch count."""
    groups = plan_groups(plan)
    mine = [float(t) for t in my_times_s]
    if len(mine) != len(groups):
        raise ValueError(f"my_times_s: needs one time per micro-batch ({len(groups)}), "
                         f"got {len(mine)}")
    if dist.is_initialized():
        dev = torch.device(device) if device is not None else _collective_device(group)
        t = torch.tensor(mine, dtype=torch.float64, device=dev)
        rows = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(rows, t, group=group)
        by_rank = [row.tolist() for row in rows]
    else:
        by_rank = [mine]
    out = []
    for j, mb in enumerate(groups):
        times = []
        for ranks in mb:
            seen = [by_rank[r][j] for r in ranks if r < len(by_rank) and not math.isnan(by_rank[r][j])]
            times.append(max(seen) if seen else float("nan"))
        out.append(times)
    return out


def reduce_gradients(parameters: Iterable[torch.Tensor], group=None) -> None:
    """Collective: sums every parameter's gradient over ``group`` (default
    world), once per global batch. A parameter without a gradient (a rank idle
    in every micro-batch, or a branch it never ran) contributes zeros, so all
    ranks issue the same all-reduces. Gradients of one device and dtype are
    reduced as one flat buffer. No-op without a process group."""
    params = [p for p in parameters if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if not dist.is_initialized():
        return
    buckets: Dict[Tuple, List[torch.Tensor]] = {}
    for p in params:
        buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for key in sorted(buckets, key=str):  # same order on every rank
        grads = buckets[key]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
