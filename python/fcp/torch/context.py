"""The per-micro-batch context of attention calls (FlashInfer's plan/run
split): what every layer of one micro-batch shares is resolved once — the
group's ranks, this rank's ring index, the zigzag geometry of every sequence,
the padded message size — and the ranks' agreement on it is checked once,
with one small all-gather. Layers then only run kernels and messages."""

from __future__ import annotations

import hashlib
from array import array
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import kernels as _kernels
from .groups import CPGroup, _collective_device, _ring_index, _ring_ranks
from .layout import normalize_cu_seqlens

_MAX_CONTEXTS_PER_GROUP = 16


class _Geometry:
    """Zigzag geometry of a packed batch on ``degree`` ranks: for every ring
    index and sequence, where the sequence's shard starts in the index's
    packed buffer and how many tokens its early and late chunks hold."""

    def __init__(self, seq_lens: Sequence[int], degree: int):
        self.seq_lens = [int(s) for s in seq_lens]
        self.degree = int(degree)
        n = 2 * self.degree
        self.chunks: List[List[Tuple[int, int, int]]] = []
        self.lengths: List[int] = []
        for r in range(self.degree):
            row, offset = [], 0
            for s in self.seq_lens:
                early = ((r + 1) * s) // n - (r * s) // n
                late = ((n - r) * s) // n - ((n - 1 - r) * s) // n
                row.append((offset, early, late))
                offset += early + late
            self.chunks.append(row)
            self.lengths.append(offset)
        # Messages are padded to the largest shard: at every ring step every
        # rank sends and receives the same non-zero size (NCCL needs every
        # rank of a group in its first P2P call; no zero-size transfers).
        self.max_len = max(max(self.lengths), 1)


class _Ring:
    """One rank's view of a ring over a packed batch: neighbours, messages
    and the block pieces of every step (computed once, reused by layers)."""

    def __init__(self, geometry: _Geometry, ranks: Sequence[int], index: int, process_group):
        self.geo = geometry
        self.ranks = tuple(ranks)
        self.degree = len(self.ranks)
        self.index = index
        self.pg = process_group
        self.max_len = geometry.max_len
        self.next_rank = self.ranks[(index + 1) % self.degree]
        self.prev_rank = self.ranks[(index - 1) % self.degree]
        self._pieces: Dict[Tuple[int, bool], list] = {}
        self._varlen: Dict[tuple, object] = {}  # ring._varlen_block's, per device

    def origin(self, step: int) -> int:
        """Ring index whose key/value block this rank holds at ``step``."""
        return (self.index - step) % self.degree

    def length(self, index: int) -> int:
        return self.geo.lengths[index]

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, tag: int):
        """Starts send to next / receive from previous; returns the handles."""
        ops = [
            dist.P2POp(dist.isend, send, self.next_rank, self.pg, tag),
            dist.P2POp(dist.irecv, recv, self.prev_rank, self.pg, tag),
        ]
        return dist.batch_isend_irecv(ops)

    def pieces(self, src: int, causal: bool):
        """(query rows, key/value columns, causal) pieces, in packed buffer
        offsets, of the step whose key/value block comes from ring index
        ``src``: one or none per sequence, never across sequences."""
        key = (src, bool(causal))
        if key not in self._pieces:
            self._pieces[key] = [
                p
                for mine, theirs in zip(self.geo.chunks[self.index], self.geo.chunks[src])
                for p in self._sequence_pieces(mine, theirs, src, causal)
            ]
        return self._pieces[key]

    def _sequence_pieces(self, mine, theirs, src, causal):
        """Under zigzag and a causal mask, with this rank holding chunks i,
        2d-1-i of a sequence and the block chunks j, 2d-1-j: j == i is plain
        causal on the concatenation (positions ascend with the local index);
        j < i: every query row sees chunk j only (full); j > i: only the late
        chunk's rows see the whole block (full)."""
        (oq, eq, late_q), (ok, ek, late_k) = mine, theirs
        lq, lk = eq + late_q, ek + late_k
        if lq == 0 or lk == 0:
            return []
        if not causal:
            return [((oq, oq + lq), (ok, ok + lk), False)]
        if src == self.index:
            return [((oq, oq + lq), (ok, ok + lk), True)]
        if src < self.index:
            return [((oq, oq + lq), (ok, ok + ek), False)] if ek else []
        return [((oq + eq, oq + lq), (ok, ok + lk), False)] if late_q else []


class MicroBatchContext:
    """One micro-batch's attention layout on one rank, shared by all layers.

    Made by :func:`plan_micro_batch` (or implicitly by the first attention
    call of a micro-batch on a :class:`CPGroup`). Attributes: ``ranks`` (ring
    order), ``index`` (this rank's ring index), ``degree``,
    ``process_group``, ``cu_seqlens`` (global, tuple), ``causal``,
    ``local_tokens`` (tokens this rank holds), ``local_cu_seqlens``.
    Pass it as the ``group`` of :func:`ring_attention`,
    :func:`ulysses_attention` or :func:`attention`."""

    def __init__(self, ranks, index, process_group, cu_seqlens, causal: bool, packed: bool):
        self.ranks = tuple(ranks)
        self.index = index
        self.process_group = process_group
        self.cu_seqlens = tuple(cu_seqlens)
        self.causal = bool(causal)
        self.packed = packed
        self.geometry = _Geometry(
            [cu_seqlens[j + 1] - cu_seqlens[j] for j in range(len(cu_seqlens) - 1)], len(self.ranks)
        )
        self.ring = _Ring(self.geometry, self.ranks, index, process_group)
        self._cache: Dict[object, object] = {}

    @property
    def degree(self) -> int:
        return len(self.ranks)

    @property
    def local_tokens(self) -> int:
        return self.geometry.lengths[self.index]

    @property
    def local_cu_seqlens(self) -> List[int]:
        row = self.geometry.chunks[self.index]
        return [off for off, _, _ in row] + [self.local_tokens]

    def cached(self, key, make):
        """Per-context memo (e.g. Ulysses' token permutation per device)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def cu_tensor(self, device) -> torch.Tensor:
        """``cu_seqlens`` as an int32 tensor on ``device`` (varlen kernels'
        argument), made once per micro-batch and device."""
        return self.cached(
            ("cu_int32", str(device)),
            lambda: torch.tensor(self.cu_seqlens, dtype=torch.int32, device=device),
        )

    def block_kernel(self, kernel, q: torch.Tensor):
        """The block kernel for ``kernel`` (a name of :data:`KERNELS` or a
        kernel object) and ``q``'s device, dtype and head size, chosen once
        per micro-batch: every layer's call reuses the same object (and an
        ``"auto"`` kernel that fell back to the chunked one stays there)."""
        name = kernel if isinstance(kernel, str) else id(kernel)
        key = ("kernel", name, q.device, q.dtype, q.shape[-1])
        return self.cached(
            key, lambda: _kernels._select_kernel(kernel, q.device, q.dtype, q.shape[-1])
        )

    def __repr__(self) -> str:
        return (
            f"MicroBatchContext(ranks={list(self.ranks)}, index={self.index}, "
            f"sequences={len(self.cu_seqlens) - 1}, tokens={self.cu_seqlens[-1]}, "
            f"local_tokens={self.local_tokens}, causal={self.causal})"
        )


def _process_group(group):
    if isinstance(group, CPGroup):
        return group.process_group
    if isinstance(group, (list, tuple)) or group is None:
        return None
    return group


def _digest(values: Sequence[int]) -> int:
    """A 56-bit digest of a list of ints (fits int64, same on every rank)."""
    data = array("q", [int(x) for x in values]).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=7).digest(), "little")


def _gather_rows(vec: List[int], pg, device) -> List[List[int]]:
    t = torch.tensor(vec, dtype=torch.int64, device=device)
    rows = [torch.empty_like(t) for _ in range(dist.get_world_size(pg))]
    dist.all_gather(rows, t, group=pg)
    return [r.tolist() for r in rows]


def _disagreement(name: str, values: List, pg_ranks: List[int], describe) -> Optional[str]:
    groups: Dict = {}
    for r, value in zip(pg_ranks, values):
        groups.setdefault(value, []).append(r)
    if len(groups) == 1:
        return None
    parts = "; ".join(f"ranks {rs} passed {describe(value)}" for value, rs in groups.items())
    return f"{name}: the ranks of the group disagree ({parts})"


def _check_agreement(ranks, pg, cu, packed, causal, local_tokens, expected_local, device):
    """Collective over the group: one all-gather of a few int64 per rank.
    Returns the process group's ranks and, in their order, the token
    counts they hold; raises ValueError naming the
    argument and the ranks when the ranks disagree on the ring order, the
    sequence lengths or the causal flag, or hold the wrong token counts."""
    width = dist.get_world_size(pg)
    order = list(ranks)[:width] + [-1] * max(0, width - len(ranks))
    cu_fields = [len(cu) - 1, cu[-1], _digest(cu)] if cu is not None else [-1, -1, -1]
    vec = (
        order
        + cu_fields
        + [
            int(causal),
            -1 if local_tokens is None else int(local_tokens),
            -1 if expected_local is None else int(expected_local),
        ]
    )
    rows = _gather_rows(vec, pg, device)
    pg_ranks = list(dist.get_process_group_ranks(pg)) if pg is not None else list(range(width))
    w = width
    checks = [
        ("group", [tuple(r[:w]) for r in rows], lambda v: f"ring order {[x for x in v if x >= 0]}"),
        (
            "cu_seqlens" if packed else "seq_len",
            [tuple(r[w : w + 3]) for r in rows],
            lambda v: (
                f"{v[0]} sequence(s) of {v[1]} tokens in all (digest {v[2]:x})"
                if v[0] >= 0
                else "no length (to be summed over the group)"
            ),
        ),
        ("causal", [bool(r[w + 3]) for r in rows], lambda v: f"causal={v}"),
    ]
    for name, values, describe in checks:
        message = _disagreement(name, values, pg_ranks, describe)
        if message:
            raise ValueError(message)
    _raise_wrong_tokens([(pg_ranks[i], r[w + 4], r[w + 5]) for i, r in enumerate(rows)])
    return pg_ranks, [r[w + 4] for r in rows]


def _raise_wrong_tokens(held_needed) -> None:
    """Raises on every rank of the group when some rank (any) holds another
    token count than its zigzag shard needs: [(rank, held, needed)]."""
    wrong = [
        (g, have, need) for g, have, need in held_needed if have >= 0 and need >= 0 and have != need
    ]
    if wrong:
        detail = ", ".join(f"rank {g} holds {have}, needs {need}" for g, have, need in wrong)
        raise ValueError(
            f"q: tokens (dim -2) do not match the zigzag shard of the lengths ({detail})"
        )


def plan_micro_batch(
    group,
    cu_seqlens=None,
    causal: bool = True,
    *,
    seq_len: Optional[int] = None,
    local_tokens: Optional[int] = None,
    rank: Optional[int] = None,
    check: bool = True,
    device: Optional[torch.device] = None,
) -> MicroBatchContext:
    """Resolves one micro-batch's attention layout once, for every layer.

    ``group``: a :class:`CPGroup`, a ring-ordered rank list or a
    ``ProcessGroup``; ``cu_seqlens``: the global cumulative lengths of the
    packed sequences (or ``seq_len`` for one sequence; with neither, the
    sequence length is the sum of ``local_tokens`` over the group).
    ``check`` (degree > 1): one all-gather of a few integers on ``device``
    compares the ring order, the lengths and the causal flag across the
    group (and ``local_tokens`` against the layout) and raises ValueError
    naming the argument and the ranks on a mismatch — so ranks that disagree
    fail instead of computing wrong attention. Collective over the group
    when the degree is > 1 and ``check`` is on or the length must be summed.
    """
    ranks = _ring_ranks(group)
    index = _ring_index(ranks, rank)
    pg = _process_group(group)
    packed = cu_seqlens is not None
    if packed:
        if seq_len is not None:
            raise ValueError("seq_len: give cu_seqlens or seq_len, not both")
        cu = normalize_cu_seqlens(cu_seqlens)
    elif seq_len is not None:
        if int(seq_len) < 0:
            raise ValueError(f"seq_len: must be >= 0, got {seq_len}")
        cu = (0, int(seq_len))
    else:
        cu = None
    if len(ranks) == 1:
        if cu is None:
            if local_tokens is None:
                raise ValueError("seq_len: needed (or local_tokens) to plan a micro-batch")
            cu = (0, int(local_tokens))
        ctx = MicroBatchContext(ranks, index, pg, cu, causal, packed)
        _check_local(ctx, local_tokens)
        return ctx
    if pg is None:
        if cu is not None:  # a wrong shard is the clearer message
            _check_local(MicroBatchContext(ranks, index, pg, cu, causal, packed), local_tokens)
        raise ValueError("group: a group of degree > 1 needs a process group")
    if cu is None and local_tokens is None:
        raise ValueError("seq_len: needed (or local_tokens) to plan a micro-batch")
    dev = torch.device(device) if device is not None else _collective_device(pg)
    if cu is not None and not check:
        ctx = MicroBatchContext(ranks, index, pg, cu, causal, packed)
        _check_local(ctx, local_tokens)
        return ctx
    expected = None
    if cu is not None:
        expected = MicroBatchContext(ranks, index, pg, cu, causal, packed).local_tokens
    pg_ranks, held = _check_agreement(ranks, pg, cu, packed, causal, local_tokens, expected, dev)
    if cu is None:  # one sequence, its length summed over the group
        ctx = MicroBatchContext(ranks, index, pg, (0, sum(held)), causal, packed)
        _raise_wrong_tokens(
            [
                (g, n, ctx.geometry.lengths[ranks.index(g)] if g in ranks else -1)
                for g, n in zip(pg_ranks, held)
            ]
        )
        return ctx
    return MicroBatchContext(ranks, index, pg, cu, causal, packed)


def _check_local(ctx: MicroBatchContext, local_tokens: Optional[int]) -> None:
    if local_tokens is not None and int(local_tokens) != ctx.local_tokens:
        what = "cu_seqlens" if ctx.packed else f"a {ctx.cu_seqlens[-1]}-token sequence"
        raise ValueError(
            f"q: holds {local_tokens} tokens, the zigzag shard of ring index "
            f"{ctx.index} of {what} on {ctx.degree} ranks has {ctx.local_tokens}"
        )


def context_for(
    group,
    cu_seqlens,
    causal: bool,
    seq_len: Optional[int],
    rank: Optional[int],
    local_tokens: int,
    device: torch.device,
) -> MicroBatchContext:
    """The context of an attention call: ``group`` itself when it is one,
    else the one this CPGroup made for the same arguments (one per
    micro-batch: the first layer plans and checks, the others reuse it)."""
    if isinstance(group, MicroBatchContext):
        if cu_seqlens is not None and normalize_cu_seqlens(cu_seqlens) != group.cu_seqlens:
            raise ValueError("cu_seqlens: differs from the micro-batch context's")
        if bool(causal) != group.causal:
            raise ValueError(f"causal: {causal} differs from the micro-batch context's")
        _check_local(group, local_tokens)
        return group
    cu_key = normalize_cu_seqlens(cu_seqlens) if cu_seqlens is not None else None
    key = (
        cu_key,
        seq_len,
        bool(causal),
        rank,
        local_tokens if cu_key is None and seq_len is None else None,
    )
    cache = group._contexts if isinstance(group, CPGroup) else None
    if cache is not None and key in cache:
        ctx = cache[key]
        _check_local(ctx, local_tokens)
        return ctx
    ctx = plan_micro_batch(
        group, cu_key, causal, seq_len=seq_len, local_tokens=local_tokens, rank=rank, device=device
    )
    if cache is not None:
        if len(cache) >= _MAX_CONTEXTS_PER_GROUP:
            cache.clear()
        cache[key] = ctx
    return ctx
