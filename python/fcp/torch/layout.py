"""Zigzag layout of the C++ executor, for one sequence and for packed (THD)
micro-batches of several sequences (``cu_seqlens``)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from .groups import _ring_index, _ring_ranks


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


def zigzag_positions(
    seq_len: int, degree: int, index: int, device: Optional[torch.device] = None
) -> torch.Tensor:
    """Global token positions (int64, ascending) held by ring index ``index``."""
    (a0, a1), (b0, b1) = _index_chunks(seq_len, degree, index)
    return torch.cat([torch.arange(a0, a1, device=device), torch.arange(b0, b1, device=device)])


def shard(
    sequence_tensor: torch.Tensor, group, rank: Optional[int] = None, dim: int = 0
) -> torch.Tensor:
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
    return torch.cat(
        [sequence_tensor.narrow(dim, a0, a1 - a0), sequence_tensor.narrow(dim, b0, b1 - b0)],
        dim=dim,
    )


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
            raise ValueError(
                f"shards[{i}]: has {t.shape[dim]} tokens, zigzag "
                f"layout of {seq_len} on {degree} needs {(a1 - a0) + (b1 - b0)}"
            )
        pieces[i] = t.narrow(dim, 0, a1 - a0)
        pieces[2 * degree - 1 - i] = t.narrow(dim, a1 - a0, b1 - b0)
    return torch.cat(pieces, dim=dim)


# ---------------------------------------------------------------------------
# Packed (THD) micro-batches: several sequences, each in its own zigzag layout
# ---------------------------------------------------------------------------


def normalize_cu_seqlens(cu_seqlens) -> Tuple[int, ...]:
    """``cu_seqlens`` (list, tuple or 1-D integer tensor of the *global*
    cumulative lengths ``[0, s_0, s_0+s_1, ...]``) as a tuple of ints.
    Raises ValueError naming ``cu_seqlens`` unless it starts at 0, is
    non-decreasing and has at least two entries (one sequence)."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() or cu_seqlens.is_complex():
            raise ValueError("cu_seqlens: must be a 1-D integer tensor or a list of ints")
        values = cu_seqlens.tolist()
    else:
        try:
            values = list(cu_seqlens)
        except TypeError:
            raise ValueError(f"cu_seqlens: must be a list of ints, got {cu_seqlens!r}") from None
    if len(values) < 2:
        raise ValueError(f"cu_seqlens: needs at least 2 entries ([0, s_0, ...]), got {values}")
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, int):
            raise ValueError(f"cu_seqlens[{i}]: must be an int, got {x!r}")
    if values[0] != 0:
        raise ValueError(f"cu_seqlens[0]: must be 0, got {values[0]}")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            raise ValueError(
                f"cu_seqlens[{i}]: must be >= cu_seqlens[{i - 1}] "
                f"({values[i - 1]}), got {values[i]}"
            )
    return tuple(values)


def _seq_lens(cu: Sequence[int]) -> List[int]:
    return [cu[j + 1] - cu[j] for j in range(len(cu) - 1)]


def local_cu_seqlens(cu_seqlens, degree: int, index: int) -> List[int]:
    """Cumulative lengths of the *local* packed shard of ring index ``index``:
    where each sequence's zigzag shard starts in the rank's buffer."""
    cu = normalize_cu_seqlens(cu_seqlens)
    out = [0]
    for s in _seq_lens(cu):
        out.append(out[-1] + local_num_tokens(s, degree, index))
    return out


def packed_index(
    cu_seqlens, degree: int, index: int, device: Optional[torch.device] = None
) -> torch.Tensor:
    """Indices (int64) into the whole packed batch of the tokens ring index
    ``index`` holds, in its local order: for every sequence ``j``,
    ``cu_seqlens[j] + zigzag_positions(s_j, degree, index)``."""
    cu = normalize_cu_seqlens(cu_seqlens)
    parts = [
        cu[j] + zigzag_positions(s, degree, index, device=device)
        for j, s in enumerate(_seq_lens(cu))
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=device)


def packed_positions(
    cu_seqlens, degree: int, index: int, device: Optional[torch.device] = None
) -> torch.Tensor:
    """Position ids (int64) of ring index ``index``'s packed shard: each
    token's global position *within its own sequence* (for rotary
    embeddings), the concatenation of :func:`zigzag_positions` per sequence."""
    cu = normalize_cu_seqlens(cu_seqlens)
    parts = [zigzag_positions(s, degree, index, device=device) for s in _seq_lens(cu)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=device)


def packed_shard(
    packed_tensor: torch.Tensor, cu_seqlens, group, rank: Optional[int] = None, dim: int = 0
) -> torch.Tensor:
    """This rank's packed shard of a whole packed batch (sequences
    concatenated along ``dim`` as ``cu_seqlens`` says): every sequence's
    zigzag shard (:func:`shard`), concatenated in sequence order. The layout
    :func:`ring_attention` and :func:`ulysses_attention` take with
    ``cu_seqlens``. Differentiable."""
    cu = normalize_cu_seqlens(cu_seqlens)
    if packed_tensor.shape[dim] != cu[-1]:
        raise ValueError(
            f"packed_tensor: has {packed_tensor.shape[dim]} tokens along dim {dim}, "
            f"cu_seqlens[-1] is {cu[-1]}"
        )
    ranks = _ring_ranks(group)
    idx = packed_index(cu, len(ranks), _ring_index(ranks, rank), device=packed_tensor.device)
    return packed_tensor.index_select(dim, idx)


def packed_unshard(shards: Sequence[torch.Tensor], cu_seqlens, dim: int = 0) -> torch.Tensor:
    """Inverse of :func:`packed_shard`: ``shards[i]`` is ring index ``i``'s
    packed shard; returns the whole packed batch."""
    cu = normalize_cu_seqlens(cu_seqlens)
    degree = len(shards)
    if degree < 1:
        raise ValueError("shards: must not be empty")
    idx = []
    for i, t in enumerate(shards):
        expected = local_cu_seqlens(cu, degree, i)[-1]
        if t.shape[dim] != expected:
            raise ValueError(
                f"shards[{i}]: has {t.shape[dim]} tokens, the packed zigzag shard "
                f"of ring index {i} on {degree} ranks has {expected}"
            )
        idx.append(packed_index(cu, degree, i, device=t.device))
    order = torch.argsort(torch.cat(idx))
    return torch.cat(list(shards), dim=dim).index_select(dim, order)
