"""Loss normalisation and gradient reduction of a training step whose groups
differ in degree and leave some ranks idle."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.distributed as dist

from .groups import _collective_device


def global_token_count(
    local_num_tokens_: int, group=None, device: Optional[torch.device] = None
) -> int:
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


def per_token_loss(
    token_losses: torch.Tensor,
    global_num_tokens: int,
    grad_reduction: str = "sum",
    world_size: Optional[int] = None,
) -> torch.Tensor:
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
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
