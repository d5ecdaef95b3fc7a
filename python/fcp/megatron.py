"""fcp.megatron: let a Megatron-LM training loop change its context-parallel
(CP) group every micro-batch, as an fcp plan asks.

Importable without Megatron; Megatron is imported only when an adapter is
built without an explicit ``parallel_state`` module.

What Megatron-Core does, and what this adapter changes
------------------------------------------------------
Megatron-Core builds one static CP group in ``initialize_model_parallel`` and
keeps it in module globals of ``megatron.core.parallel_state``:

* ``_CONTEXT_PARALLEL_GROUP`` -- read by ``get_context_parallel_group()``,
  and through it by ``get_context_parallel_world_size()`` and
  ``get_context_parallel_rank()``;
* ``_CONTEXT_PARALLEL_GLOBAL_RANKS`` -- read by
  ``get_context_parallel_global_ranks()``.

Every consumer calls these getters at run time, so :meth:`MegatronCPAdapter.use`
swaps the two *globals* for the duration of a micro-batch (patching the getter
functions would miss modules that did ``from ... import get_...``), and
restores them afterwards. Models whose attention was built with a CP group
baked in -- TransformerEngine's ``DotProductAttention`` (wrapped by
Megatron's ``TEDotProductAttention``) -- are re-pointed with TE's
``set_context_parallel_group(cp_group, cp_global_ranks, cp_stream[, cp_comm_type])``,
called on every module of ``model`` that has it.

The batch: Megatron's ``get_batch_on_this_cp_rank`` (``megatron.training.utils``,
``megatron.core.utils`` in newer releases) cuts each sequence into ``2*cp``
*equal* chunks. :meth:`MegatronCPAdapter.shard_batch` replaces it with
:func:`fcp.torch.shard` (zigzag, uneven tail allowed) over the current group.
TransformerEngine's ring attention still requires the sequence length to be
a multiple of ``2*cp``: use ``pad_to_multiple`` for it (pad tokens must carry
``loss_mask = 0``).

Ring order: Megatron/TE derive a rank's CP position from
``torch.distributed.get_rank(cp_group)`` -- the position in the *sorted* rank
list -- so the adapter always uses the group's ranks in ascending order.

Loss and gradients: let the loss function return per-token sums and set
``calculate_per_token_loss=True`` in the Megatron config (or scale with
:func:`fcp.torch.per_token_loss`), so groups of different degrees weigh tokens
equally; gradients are reduced once per global batch over all ranks
(Megatron's data-parallel group with CP, when TP = PP = 1 per fcp rank).

Typical loop::

    adapter = fcp.megatron.MegatronCPAdapter(model)
    plan = fcp.Scheduler(cluster=..., model=...).plan(lengths)   # same on all ranks
    adapter.prepare(plan)                                        # collective, cached
    for mb in plan.micro_batches:
        with adapter.use(mb) as group:
            seqs = [s for g in mb.groups if rank in g.ranks for s in g.sequences]
            batch = adapter.shard_batch(make_batch(seqs), seq_dim=1)
            forward_backward(model, batch)
    optimizer.step()

Not thread-safe (module globals are process-wide).
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterable, List, Optional

__all__ = ["MegatronCPAdapter", "PATCHED_GLOBALS", "PATCHED_GETTERS", "pad_to_multiple"]

# The megatron.core.parallel_state globals swapped per micro-batch ...
PATCHED_GLOBALS = ("_CONTEXT_PARALLEL_GROUP", "_CONTEXT_PARALLEL_GLOBAL_RANKS")
# ... and the public getters whose results change through them.
PATCHED_GETTERS = (
    "get_context_parallel_group",
    "get_context_parallel_global_ranks",
    "get_context_parallel_world_size",
    "get_context_parallel_rank",
)
# Method of TransformerEngine attention modules re-pointed per micro-batch.
TE_SET_CP_GROUP = "set_context_parallel_group"


def pad_to_multiple(seq_len: int, degree: int) -> int:
    """Smallest length >= seq_len divisible by 2*degree (TransformerEngine's
    ring attention needs it; fcp.torch.ring_attention does not)."""
    if seq_len < 0 or degree < 1:
        raise ValueError(f"seq_len/degree: need seq_len >= 0 and degree >= 1, got {seq_len}, {degree}")
    m = 2 * degree
    return -(-seq_len // m) * m


def _import_parallel_state():
    try:
        from megatron.core import parallel_state  # type: ignore
    except ImportError as e:
        raise ImportError("fcp.megatron: Megatron-Core is not installed; pass parallel_state= "
                          "explicitly to use the adapter without it") from e
    return parallel_state


class MegatronCPAdapter:
    """Swaps Megatron's CP group per micro-batch (see the module docstring).

    ``model``: a module or list of modules (Megatron's model chunks); every
    submodule with ``set_context_parallel_group`` is re-pointed. ``parallel_state``:
    the ``megatron.core.parallel_state`` module (imported when None).
    ``cache``: an :class:`fcp.torch.GroupCache` (new when None). ``rank``:
    this process's global rank (``torch.distributed.get_rank()`` when None).
    ``cp_stream``: passed to TE (a CUDA stream; None on CPU).
    """

    def __init__(self, model=None, parallel_state=None, cache=None, rank: Optional[int] = None,
                 cp_stream=None, cp_comm_type: Optional[str] = None):
        from . import torch as fcp_torch
        self._ft = fcp_torch
        self.parallel_state = parallel_state if parallel_state is not None else _import_parallel_state()
        self.cache = cache if cache is not None else fcp_torch.GroupCache()
        if model is None:
            model = []
        self._models = list(model) if isinstance(model, (list, tuple)) else [model]
        self._rank = rank
        self._cp_stream = cp_stream
        self._cp_comm_type = cp_comm_type
        self.current = None  # the CPGroup of the micro-batch in progress

    @property
    def rank(self) -> int:
        if self._rank is None:
            import torch.distributed as dist
            self._rank = dist.get_rank()
        return self._rank

    def _attention_modules(self) -> List[object]:
        mods = []
        for m in self._models:
            it = m.modules() if hasattr(m, "modules") else [m]
            mods.extend(x for x in it if callable(getattr(x, TE_SET_CP_GROUP, None)))
        return mods

    def prepare(self, plan) -> int:
        """Collective: creates the process groups of every micro-batch of
        ``plan`` (same plan on all ranks). Returns the number created now."""
        return self.cache.prepare(plan)

    def group_for(self, micro_batch) -> "object":
        """Collective on a cache miss: the CPGroup (sorted ranks) of this rank
        in ``micro_batch`` (plan object, dict, or list of rank lists)."""
        group = self.cache.for_micro_batch(micro_batch, self.rank)
        return self._ft.CPGroup(sorted(group.ranks), group.process_group)

    def _point_attention(self, group) -> None:
        for mod in self._attention_modules():
            args = [group.process_group, list(group.ranks), self._cp_stream]
            if self._cp_comm_type is not None:
                args.append(self._cp_comm_type)
            getattr(mod, TE_SET_CP_GROUP)(*args)

    @contextlib.contextmanager
    def use(self, micro_batch):
        """Context manager: during the block Megatron's CP getters return this
        rank's group of ``micro_batch`` and TE attention uses it; the previous
        globals (and TE groups) are restored on exit, also on error."""
        ps = self.parallel_state
        group = self.group_for(micro_batch)
        saved = {name: getattr(ps, name, None) for name in PATCHED_GLOBALS}
        previous = self.current
        setattr(ps, "_CONTEXT_PARALLEL_GROUP", group.process_group)
        setattr(ps, "_CONTEXT_PARALLEL_GLOBAL_RANKS", list(group.ranks))
        self._point_attention(group)
        self.current = group
        try:
            yield group
        finally:
            for name, value in saved.items():
                setattr(ps, name, value)
            self.current = previous
            if saved["_CONTEXT_PARALLEL_GROUP"] is not None and saved["_CONTEXT_PARALLEL_GLOBAL_RANKS"] is not None:
                prev = self._ft.CPGroup(saved["_CONTEXT_PARALLEL_GLOBAL_RANKS"],
                                        saved["_CONTEXT_PARALLEL_GROUP"])
                self._point_attention(prev)

    def shard_batch(self, batch: Dict[str, object], seq_dim: int = 1,
                    group=None) -> Dict[str, object]:
        """Replacement for Megatron's ``get_batch_on_this_cp_rank``: every
        tensor of ``batch`` with a sequence dimension ``seq_dim`` (tokens,
        labels, loss_mask, position_ids; attention_mask is left as is) is cut
        to this rank's zigzag shard of ``group`` (default: the current one).
        Position ids stay global. Non-tensors pass through."""
        import torch
        group = group if group is not None else self.current
        if group is None:
            raise ValueError("group: no micro-batch in progress (use `with adapter.use(mb):`)")
        out = {}
        for key, value in batch.items():
            if key != "attention_mask" and isinstance(value, torch.Tensor) and value.dim() > seq_dim:
                out[key] = self._ft.shard(value, group, self.rank, dim=seq_dim)
            else:
                out[key] = value
        return out
