"""fcp.torch: run an fcp plan on ``torch.distributed`` (pure Python, PyTorch 2).

Modules (docs/python.md):

* :mod:`.groups` — :class:`GroupCache` maps the rank sets of a plan onto
  ``torch.distributed`` process groups (one deterministic creation and
  eviction order on every rank, a bounded default timeout);
  :class:`CPGroup` is one group in ring order with the plan's ``comm``;
  :func:`plan_groups` / :func:`group_times` read a plan and gather measured
  group times for ``fcp.Scheduler.observe``; :func:`check_plan` is the one
  check of a plan from outside the planner (``fcp.validate_plan``), used by
  fcp.torch, fcp.hf and fcp.megatron.
* :mod:`.layout` — the zigzag layout of the C++ executor: a sequence of
  ``s`` tokens on a group of degree ``d`` is cut into ``2d`` chunks, chunk
  ``c`` covering ``[floor(c*s/(2d)), floor((c+1)*s/(2d)))``; ring index ``i``
  holds chunk ``i`` then chunk ``2d-1-i``. Packed micro-batches
  (``cu_seqlens``) concatenate each sequence's shard in sequence order.
* :mod:`.context` — :func:`plan_micro_batch` resolves a micro-batch's layout
  once for every layer and checks, with one small all-gather, that the
  group's ranks agree on it.
* :mod:`.kernels` — block attention kernels that return the log-sum-exp.
* :mod:`.ring` / :mod:`.ulysses` / :func:`attention` — exact attention over
  one sequence or a packed batch: ring P2P, or all-to-all of heads; the
  dispatch on a plan group's ``comm``.
* :mod:`.loss` — :func:`per_token_loss` / :func:`global_token_count` /
  :func:`reduce_gradients`: the loss normalisation that stays correct when
  groups of one step differ in degree, and a gradient reduction that works
  on ranks left idle by a micro-batch.

Thread-safety: none of these objects is thread-safe; use them from the
training thread, like ``torch.distributed`` itself.
"""

from .context import MicroBatchContext, plan_micro_batch
from .dispatch import attention
from .groups import (
    COMMS,
    DEFAULT_TIMEOUT,
    CPGroup,
    GroupCache,
    check_plan,
    check_same_plan,
    comm_name,
    gather_times,
    group_times,
    held_rank_sets,
    plan_digest,
    plan_group_comms,
    plan_groups,
    observe_with,
    plan_with_held,
)
from .kernels import (
    KERNELS,
    _ChunkedKernel,  # noqa: F401 (tests reach the kernels through fcp.torch)
    _GuardedKernel,  # noqa: F401
    _select_kernel,  # noqa: F401
    attention_reference,
    block_kernel_name,
)
from .layout import (
    local_cu_seqlens,
    local_num_tokens,
    normalize_cu_seqlens,
    packed_index,
    packed_positions,
    packed_shard,
    packed_unshard,
    shard,
    unshard,
    zigzag_chunk_bounds,
    zigzag_positions,
)
from .loss import global_token_count, per_token_loss, reduce_gradients
from .ring import blockwise_attention, ring_attention
from .ulysses import ulysses_attention

__all__ = [
    "CPGroup",
    "GroupCache",
    "DEFAULT_TIMEOUT",
    "COMMS",
    "comm_name",
    "zigzag_chunk_bounds",
    "zigzag_positions",
    "local_num_tokens",
    "shard",
    "unshard",
    "normalize_cu_seqlens",
    "local_cu_seqlens",
    "packed_index",
    "packed_positions",
    "packed_shard",
    "packed_unshard",
    "MicroBatchContext",
    "plan_micro_batch",
    "attention",
    "ring_attention",
    "ulysses_attention",
    "blockwise_attention",
    "block_kernel_name",
    "KERNELS",
    "attention_reference",
    "global_token_count",
    "per_token_loss",
    "reduce_gradients",
    "plan_groups",
    "plan_group_comms",
    "check_plan",
    "check_same_plan",
    "plan_digest",
    "held_rank_sets",
    "plan_with_held",
    "observe_with",
    "gather_times",
    "group_times",
]
