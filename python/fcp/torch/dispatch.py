"""One attention call for every kind of plan group."""

from __future__ import annotations

from typing import Optional

import torch

from .groups import comm_name
from .ring import ring_attention
from .ulysses import ulysses_attention


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group,
    comm=None,
    causal: bool = True,
    softmax_scale: Optional[float] = None,
    cu_seqlens=None,
    *,
    seq_len: Optional[int] = None,
    rank: Optional[int] = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """Attention on a plan group: :func:`ring_attention` when ``comm`` is
    ``"ring"``, :func:`ulysses_attention` when it is ``"all-to-all"`` (the
    plan JSON's spellings; ``fcp.CommKind`` values too). ``comm=None`` takes
    the group's own (``CPGroup.comm``, set by
    :meth:`GroupCache.for_micro_batch` from the plan). Same arguments and
    layout as both; ``kernel`` applies to the ring's block kernels."""
    if comm is None:
        comm = getattr(group, "comm", None)
        if comm is None:
            raise ValueError("comm: needed unless group is a CPGroup (which carries its comm)")
    if comm_name(comm) == "ring":
        return ring_attention(
            q, k, v, group, causal, softmax_scale, cu_seqlens, kernel, seq_len=seq_len, rank=rank
        )
    return ulysses_attention(
        q, k, v, group, causal, softmax_scale, cu_seqlens, seq_len=seq_len, rank=rank
    )
