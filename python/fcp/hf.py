"""fcp.hf: train any Hugging Face transformers causal LM on fcp plans.

Three pieces (docs/huggingface.md):

* :func:`register` adds the attention implementation ``"fcp"`` to
  transformers' own ``AttentionInterface`` (and a mask function that builds no
  mask to its ``AttentionMaskInterface``): load or build a model with
  ``attn_implementation="fcp"`` (or ``model.set_attn_implementation("fcp")``).
  No model class or global is patched.
* :class:`PackedLoader` turns global batches (token lists, or dicts with
  ``input_ids`` as a ``datasets`` dataset yields them) into this rank's packed
  micro-batches: one :class:`MicroBatch` per micro-batch of the plan, holding
  this rank's zigzag shard of each of its group's sequences, concatenated in
  the group's sequence order, with global ``position_ids`` and ``labels``
  shifted on the whole sequence before sharding. The next global batch is
  planned on a worker thread while this one trains.
* :func:`train_step` runs one forward and one backward per micro-batch and
  reduces the gradients once per global batch, for a plain module, DDP
  (``no_sync`` until the last micro-batch) or FSDP2 (``fully_shard``; gradient
  sync only on the last micro-batch). The loss is the per-token mean over the
  whole global batch, whatever each group's degree.

How the per-micro-batch group reaches attention: through the keyword
argument ``fcp_context`` of ``model(...)`` (:meth:`MicroBatch.model_inputs`),
which transformers forwards through every decoder layer to the attention
function. Unlike state kept on the model, a keyword argument belongs to one
call: it survives DDP/FSDP wrappers, activation checkpointing (the recompute
sees the same arguments) and two models trained side by side.

Thread-safety: as ``torch.distributed``, use from the training thread; only
planning runs on the loader's worker thread (the C++ planner releases the GIL).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import numbers
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import torch as ft

__all__ = [
    "ATTN_IMPLEMENTATION",
    "CONTEXT_KWARG",
    "IGNORE_INDEX",
    "PackedContext",
    "MicroBatch",
    "GlobalBatch",
    "PackedLoader",
    "register",
    "shifted_labels",
    "pack_micro_batch",
    "idle_micro_batch",
    "global_batches",
    "layout",
    "train_step",
]

ATTN_IMPLEMENTATION = "fcp"
CONTEXT_KWARG = "fcp_context"
IGNORE_INDEX = -100


# ---------------------------------------------------------------------------
# Attention through transformers' AttentionInterface
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedContext:
    """What the attention of one micro-batch needs besides q, k, v: the
    group (``fcp.torch.CPGroup``, ring order), its ``comm`` (the plan
    group's ``CommKind``, or ``"ring"`` / ``"all-to-all"``) and the *global* cumulative
    lengths ``[0, s0, s0+s1, ...]`` of the group's packed sequences."""

    group: object
    comm: object
    cu_seqlens: Tuple[int, ...]


def _is_all_to_all(comm) -> bool:
    return ft.comm_name(comm) == "all-to-all"


def _unsupported(kwargs, module, dropout) -> Optional[str]:
    """The attention features fcp's kernels do not implement, named."""
    if dropout and module is not None and module.training:
        return "attention dropout: not supported (set config.attention_dropout = 0.0)"
    if kwargs.get("sliding_window") is not None:
        return "sliding_window: sliding-window attention is not supported"
    if kwargs.get("softcap") is not None:
        return "softcap: logit soft-capping is not supported"
    if kwargs.get("s_aux") is not None:
        return "s_aux: attention sinks are not supported"
    if kwargs.get("position_bias") is not None:
        return "position_bias: additive position biases are not supported"
    if kwargs.get("output_attentions"):
        return "output_attentions: fcp never materialises attention weights"
    return None


def _packed_attention(q, k, v, ctx: PackedContext, scale, causal):
    """(heads, tokens, head_dim) in, same layout out; fcp.torch dispatches on
    the group's comm (ring P2P or Ulysses all-to-all)."""
    return ft.attention(
        q, k, v, ctx.group, ctx.comm, causal=causal, softmax_scale=scale, cu_seqlens=ctx.cu_seqlens
    )


def attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """transformers' attention signature: ``query`` ``(1, heads, tokens,
    head_dim)``, ``key``/``value`` ``(1, kv_heads, tokens, head_dim)``;
    returns ``((1, tokens, heads, head_dim), None)``. The tokens are this
    rank's packed zigzag shards; ``kwargs["fcp_context"]`` says how."""
    ctx = kwargs.get(CONTEXT_KWARG)
    if not isinstance(ctx, PackedContext):
        raise ValueError(
            f"{CONTEXT_KWARG}: the 'fcp' attention needs model(..., "
            f"{CONTEXT_KWARG}=micro_batch.context) (fcp.hf.MicroBatch.model_inputs)"
        )
    problem = _unsupported(kwargs, module, dropout)
    if problem:
        raise ValueError(problem)
    if attention_mask is not None:
        raise ValueError(
            "attention_mask: fcp masks by cu_seqlens (causal per sequence); pass no attention_mask"
        )
    if query.dim() != 4 or query.shape[0] != 1:
        raise ValueError(
            f"input_ids: fcp runs a packed micro-batch as batch size 1, got "
            f"query shape {tuple(query.shape)}"
        )
    if key.shape[-2] != query.shape[-2]:
        raise ValueError("past_key_values: fcp trains without a key/value cache (use_cache=False)")
    causal = bool(getattr(module, "is_causal", True))
    out = _packed_attention(query[0], key[0], value[0], ctx, scaling, causal)
    return out.transpose(0, 1).unsqueeze(0).contiguous(), None


def _no_mask(attention_mask=None, **_):
    """The mask function of "fcp": the mask is implied by cu_seqlens, so none
    is built (transformers would otherwise materialise a dense one)."""
    if attention_mask is not None and not bool(attention_mask.all()):
        raise ValueError(
            "attention_mask: padding masks are not supported by fcp "
            "(sequences are packed, not padded)"
        )
    return None


def register() -> str:
    """Registers ``"fcp"`` with transformers' ``AttentionInterface`` and
    ``AttentionMaskInterface`` (idempotent) and returns the name, for
    ``from_config(config, attn_implementation=fcp.hf.register())``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _no_mask)
    return ATTN_IMPLEMENTATION


# ---------------------------------------------------------------------------
# Packing: labels, zigzag shards, micro-batches
# ---------------------------------------------------------------------------


def _token_list(values, where: str) -> List[int]:
    if isinstance(values, torch.Tensor):
        if values.dim() != 1 or values.dtype.is_floating_point:
            raise ValueError(
                f"{where}: must be a 1-D integer tensor, got {tuple(values.shape)} {values.dtype}"
            )
        return [int(x) for x in values.tolist()]
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{where}: must be a list of token ids, got {type(values).__name__}")
    out = []
    for j, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise ValueError(f"{where}[{j}]: must be an integer token id, got {x!r}")
        out.append(int(x))
    return out


def shifted_labels(input_ids: Sequence[int], labels: Optional[Sequence[int]] = None) -> List[int]:
    """Next-token targets of one whole sequence, aligned with ``input_ids``:
    position ``j`` is trained to predict ``labels[j + 1]`` (``labels``
    defaults to ``input_ids``; ``-100`` is ignored, as in transformers); the
    last position has no target. Computed before sharding, so a token whose
    successor lives on another rank still gets the right target."""
    target = list(input_ids) if labels is None else list(labels)
    if len(target) != len(input_ids):
        raise ValueError(f"labels: has {len(target)} entries, input_ids {len(input_ids)}")
    return target[1:] + [IGNORE_INDEX] if target else []


@dataclass(frozen=True)
class _Example:
    input_ids: Tuple[int, ...]
    labels: Tuple[int, ...]  # shifted (shifted_labels)
    plan_length: int
    vision_tokens: int = 0  # of plan_length, priced by alpha2_vision

    @property
    def num_targets(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


def _count(value, where: str, low: int, high: Optional[int] = None) -> int:
    """``value`` as an int in [low, high], else a ValueError naming ``where``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{where}: must be an integer {bounds}, got {value!r}")
    return int(value)


def _example(item, where: str) -> _Example:
    """A token list / 1-D tensor, or a dict with ``input_ids`` and optional
    ``labels`` (aligned with input_ids, unshifted, -100 ignored),
    ``plan_length`` (the length the planner costs it at) and
    ``vision_tokens`` (how many of those are image or frame tokens)."""
    labels, plan_length, vision_tokens = None, None, None
    if isinstance(item, dict):
        if "input_ids" not in item:
            raise ValueError(f"{where}.input_ids: missing")
        ids = _token_list(item["input_ids"], f"{where}.input_ids")
        if item.get("labels") is not None:
            labels = _token_list(item["labels"], f"{where}.labels")
        plan_length = item.get("plan_length")
        vision_tokens = item.get("vision_tokens")
    else:
        ids = _token_list(item, where)
    if not ids:
        raise ValueError(f"{where}: empty sequence (at least one token)")
    if labels is not None and len(labels) != len(ids):
        raise ValueError(f"{where}.labels: has {len(labels)} entries, input_ids {len(ids)}")
    if plan_length is None:
        plan_length = len(ids)
    plan_length = _count(plan_length, f"{where}.plan_length", 1)
    if vision_tokens is not None:
        vision_tokens = _count(vision_tokens, f"{where}.vision_tokens", 0, plan_length)
    return _Example(tuple(ids), tuple(shifted_labels(ids, labels)), plan_length, vision_tokens or 0)


def _plan_vision_tokens(examples) -> Optional[List[int]]:
    """Each example's vision tokens, or None when none has any (the planner is
    then asked as before: any object with ``fcp.Scheduler``'s ``plan`` will do)."""
    counts = [e.vision_tokens for e in examples]
    return counts if any(counts) else None


def _examples(batch) -> List[_Example]:
    try:
        items = list(batch)
    except TypeError:
        raise ValueError(
            f"batch: must be a list of sequences, got {type(batch).__name__}"
        ) from None
    if not items:
        raise ValueError("batch: must not be empty")
    return [_example(x, f"batch[{i}]") for i, x in enumerate(items)]


@dataclass
class MicroBatch:
    """This rank's part of one micro-batch of the plan: ``input_ids``,
    ``position_ids`` (global positions, per sequence) and ``labels`` of shape
    ``(1, tokens)``, the attention ``context``, the global batch indices of
    the ``sequences`` and whether the rank is ``idle`` (then one filler token
    without target, on a degree-1 group of its own: wrapped models still
    join every collective of the micro-batch)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor
    context: PackedContext
    sequences: Tuple[int, ...]
    idle: bool = False

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def model_inputs(self) -> dict:
        """Keyword arguments for ``model(**mb.model_inputs())``."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "use_cache": False,
            CONTEXT_KWARG: self.context,
        }


def pack_micro_batch(
    examples: Sequence,
    sequences: Sequence[int],
    ranks: Sequence[int],
    rank: int,
    group=None,
    comm=None,
    device=None,
) -> MicroBatch:
    """Packs this ``rank``'s zigzag shards of ``examples[i]`` for ``i`` in
    ``sequences`` (a plan group's sequences, in that order) on the group of
    ``ranks`` (ring order). ``examples``: a global batch as :class:`PackedLoader`
    takes it. ``group``: the ``fcp.torch.CPGroup`` (default: one without a
    process group, e.g. for tests); ``comm``: the plan group's comm
    (default ring). No communication."""
    exs = [
        e if isinstance(e, _Example) else _example(e, f"batch[{i}]") for i, e in enumerate(examples)
    ]
    ranks = tuple(int(r) for r in ranks)
    index = ft.CPGroup(ranks).index(rank)
    ids, pos, labels, cu = [], [], [], [0]
    for i in sequences:
        ex = exs[int(i)]
        s = len(ex.input_ids)
        p = ft.zigzag_positions(s, len(ranks), index)
        ids.append(torch.tensor(ex.input_ids, dtype=torch.long)[p])
        labels.append(torch.tensor(ex.labels, dtype=torch.long)[p])
        pos.append(p)
        cu.append(cu[-1] + s)
    ctx = PackedContext(
        group if group is not None else ft.CPGroup(ranks),
        comm if comm is not None else "ring",
        tuple(cu),
    )

    def row(parts):
        return (
            torch.cat(parts).unsqueeze(0).to(device)
            if parts
            else torch.zeros(1, 0, dtype=torch.long, device=device)
        )

    return MicroBatch(row(ids), row(pos), row(labels), ctx, tuple(int(i) for i in sequences))


def idle_micro_batch(rank: int, device=None) -> MicroBatch:
    """The filler of a rank idle in a micro-batch: one token (id 0, no
    target) attending to itself on a degree-1 group."""
    z = torch.zeros(1, 1, dtype=torch.long, device=device)
    ctx = PackedContext(ft.CPGroup([int(rank)]), "ring", (0, 1))
    return MicroBatch(z, z.clone(), torch.full_like(z, IGNORE_INDEX), ctx, (), idle=True)


def layout(plan) -> str:
    """The plan's micro-batches as group degrees, ``u`` marking all-to-all
    groups: ``[4] [2,1,1] [4u]``."""
    return " ".join(
        "["
        + ",".join(f"{g.degree}{'u' if _is_all_to_all(g.comm) else ''}" for g in mb.groups)
        + "]"
        for mb in plan.micro_batches
    )


@dataclass
class GlobalBatch:
    """One global batch for this rank: the ``plan``, one :class:`MicroBatch`
    per micro-batch of the plan, and ``global_num_tokens`` (tokens with a
    target in the whole global batch, the loss denominator; every rank knows
    the whole batch, so no collective is needed). ``lengths``: token counts;
    ``plan_lengths`` and ``plan_vision_tokens`` (None: none given): what the
    planner was given. ``micro_batch_times_s``:
    set by :func:`train_step` (this rank's seconds per micro-batch, NaN where
    idle), read by :meth:`PackedLoader.observe`."""

    plan: object
    micro_batches: List[MicroBatch]
    global_num_tokens: int
    lengths: List[int]
    plan_lengths: List[int]
    planning_s: float = 0.0
    exposed_planning_s: float = 0.0
    micro_batch_times_s: Optional[List[float]] = None
    plan_vision_tokens: Optional[List[int]] = None

    @property
    def layout(self) -> str:
        return layout(self.plan)

    @property
    def local_num_tokens(self) -> int:
        return sum(mb.num_tokens for mb in self.micro_batches if not mb.idle)


def global_batches(dataset: Iterable, size: int, drop_last: bool = False) -> Iterator[list]:
    """Groups an iterable of examples (e.g. a ``datasets.Dataset``) into
    global batches of ``size`` examples."""
    _count(size, "size", 1)
    batch = []
    for item in dataset:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


class PackedLoader:
    """Iterates over ``batches`` (an iterable of global batches, each a list
    of token lists, 1-D tensors or dicts with ``input_ids`` and optional
    ``labels``/``plan_length``) and yields this rank's :class:`GlobalBatch`.

    ``scheduler``: an ``fcp.Scheduler`` whose cluster has the world's ranks;
    plan rank ``p`` is global rank ``p``. ``cache``: the
    ``fcp.torch.GroupCache`` (default: a new one, 64 groups). ``device``:
    where the tensors go (default: the current CUDA device under NCCL, else
    CPU). ``background``: plan the next global batch on a worker thread while
    this one trains. ``verify``: check that every rank planned the same
    batch (one all-reduce). Creating process groups is collective, so every
    rank must iterate in step. Without ``torch.distributed`` (tests, or a
    look at another rank's share) pass ``rank`` and a ``cache`` whose
    ``new_group`` makes no process group."""

    def __init__(
        self,
        batches: Iterable,
        scheduler,
        cache=None,
        rank: Optional[int] = None,
        device=None,
        background: bool = True,
        verify: bool = True,
    ):
        self.scheduler = scheduler
        self.cache = cache if cache is not None else ft.GroupCache(max_groups=64)
        self.rank = (
            int(rank) if rank is not None else (dist.get_rank() if dist.is_initialized() else 0)
        )
        n = int(scheduler.cluster.num_ranks)
        if dist.is_initialized() and n != dist.get_world_size():
            raise ValueError(
                f"scheduler.cluster: plans {n} ranks, the world has {dist.get_world_size()}"
            )
        if not 0 <= self.rank < n:
            raise ValueError(f"rank: {self.rank} is not a rank of the {n}-rank plan")
        self.device = torch.device(device) if device is not None else _default_device()
        self.verify = verify
        self._source = iter(batches)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "fcp-hf-plan") if background else None
        self._next = None

    def _prepare(self, planner, held):
        """Reads the next global batch and plans it (worker thread), telling
        the planner the rank sets ``held`` (see :meth:`_submit`)."""
        try:
            raw = next(self._source)
        except StopIteration:
            return None
        examples = _examples(raw)
        t0 = time.perf_counter()
        plan = ft.plan_with_held(
            planner,
            [e.plan_length for e in examples],
            held,
            vision_tokens=_plan_vision_tokens(examples),
        )
        spent = time.perf_counter() - t0
        if plan.status.name != "OK":
            raise RuntimeError(f"fcp: no feasible plan for this global batch: {plan.message}")
        return examples, plan, spent

    def _submit(self):
        planner = copy.copy(self.scheduler)  # observe() later does not change this plan
        # The groups the cache holds, taken here on the training thread (the
        # same sets on every rank): a Scheduler made with communicators=
        # charges only the groups this batch would have to create.
        held = ft.held_rank_sets(self.scheduler, self.cache)
        if self._pool is None:
            return self._prepare(planner, held)
        return self._pool.submit(self._prepare, planner, held)

    def __iter__(self):
        return self

    def __next__(self) -> GlobalBatch:
        pending = self._next if self._next is not None else self._submit()
        t0 = time.perf_counter()
        ready = pending.result() if isinstance(pending, concurrent.futures.Future) else pending
        exposed = time.perf_counter() - t0
        if ready is None:
            self._next = None
            raise StopIteration
        examples, plan, spent = ready
        if self.verify:
            ft.check_same_plan(plan, device=self.device)
        batch = self._build(examples, plan, spent, exposed)
        # Plan the next batch while this one trains, told the groups this
        # one made.
        self._next = self._submit()
        return batch

    def _build(self, examples, plan, spent, exposed) -> GlobalBatch:
        # Collective: every rank, same order; the plan checked first (the
        # scheduler may be any object with fcp.Scheduler's plan()).
        plan_lengths = [e.plan_length for e in examples]
        self.cache.prepare(plan, lengths=plan_lengths, cluster=self.scheduler.cluster)
        mbs = []
        for mb in plan.micro_batches:
            mine = next((g for g in mb.groups if self.rank in g.ranks), None)
            if mine is None:
                mbs.append(idle_micro_batch(self.rank, self.device))
                continue
            group = self.cache.get(list(mine.ranks), mine.comm)
            mbs.append(
                pack_micro_batch(
                    examples,
                    list(mine.sequences),
                    list(mine.ranks),
                    self.rank,
                    group,
                    mine.comm,
                    self.device,
                )
            )
        total = sum(e.num_targets for e in examples)
        return GlobalBatch(
            plan,
            mbs,
            total,
            [len(e.input_ids) for e in examples],
            plan_lengths,
            spent,
            exposed,
            plan_vision_tokens=_plan_vision_tokens(examples),
        )

    def observe(self, batch: GlobalBatch) -> dict:
        """The Scheduler learns from a global batch that ran
        (``fcp.Scheduler.observe``, docs/python.md): every rank's
        ``batch.micro_batch_times_s`` (from :func:`train_step`) are gathered
        (one all-gather, ``fcp.torch.group_times``), each group's time is its
        slowest rank's. Batches submitted for planning after this call use the
        learnt coefficients (the one already planning keeps the old ones).
        Collective; every rank must call it. Returns the calibration."""
        if batch.micro_batch_times_s is None:
            raise ValueError(
                "batch: has no micro_batch_times_s (run fcp.hf.train_step on it first)"
            )
        times = ft.group_times(batch.plan, batch.micro_batch_times_s, device=self.device)
        return ft.observe_with(
            self.scheduler, batch.plan_lengths, batch.plan, times, batch.plan_vision_tokens
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _default_device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------
# Training step: loss over the global batch, gradient reduction
# ---------------------------------------------------------------------------


def _wrapper_kind(model) -> str:
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "ddp"
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        FSDPModule = ()
    if isinstance(model, FSDPModule):
        return "fsdp2"
    return "plain"


def _sync_context(model, kind: str, last: bool):
    if kind == "ddp" and not last:
        return model.no_sync()
    if kind == "fsdp2":
        model.set_requires_gradient_sync(last)
    return contextlib.nullcontext()


def micro_batch_loss(model, mb: MicroBatch) -> torch.Tensor:
    """Sum of this rank's token losses (cross-entropy in fp32 at least) in ``mb``."""
    logits = model(**mb.model_inputs()).logits[0]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits, mb.labels[0], ignore_index=IGNORE_INDEX, reduction="sum")


def train_step(model, batch: GlobalBatch) -> float:
    """Forward and backward of this rank's micro-batches of ``batch``, then
    one gradient reduction; returns the global per-token loss (the same on
    every rank). The optimizer step is the caller's.

    ``model``: the plain module (gradients summed over the world by
    ``fcp.torch.reduce_gradients`` after the last micro-batch; idle ranks skip
    their micro-batches), a ``DistributedDataParallel`` (``no_sync`` until the
    last micro-batch, whose backward all-reduces) or an FSDP2 module
    (``fully_shard``: gradient sync on the last micro-batch only). Wrapped
    models run a one-token filler where the rank is idle, so every rank issues
    the wrapper's collectives in the same order. Each rank's loss is
    ``Σ its token losses / global tokens`` (× world size for the averaging
    wrappers): the gradients are those of the global per-token mean. Sets
    ``batch.micro_batch_times_s`` (forward + backward of each micro-batch,
    after a device synchronisation on CUDA; NaN where idle) for
    :meth:`PackedLoader.observe`."""
    kind = _wrapper_kind(model)
    world = dist.get_world_size() if dist.is_initialized() else 1
    reduction = "sum" if kind == "plain" else "mean"
    device = _loss_device(batch)
    local = torch.zeros((), dtype=torch.float64, device=device)
    last = len(batch.micro_batches) - 1
    times = []
    for j, mb in enumerate(batch.micro_batches):
        if kind == "plain" and mb.idle:
            times.append(float("nan"))
            continue
        start = _now(device)
        with _sync_context(model, kind, j == last):
            token_loss_sum = micro_batch_loss(model, mb)
            ft.per_token_loss(token_loss_sum, batch.global_num_tokens, reduction, world).backward()
        local += token_loss_sum.detach().double()
        times.append(float("nan") if mb.idle else _now(device) - start)
    batch.micro_batch_times_s = times
    if kind == "plain":
        ft.reduce_gradients(model.parameters())
    if dist.is_initialized():
        dist.all_reduce(local)
    return float(local) / batch.global_num_tokens


def _now(device: torch.device) -> float:
    """Wall clock after the device's queued work (a micro-batch's time)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _loss_device(batch: GlobalBatch) -> torch.device:
    return batch.micro_batches[0].input_ids.device if batch.micro_batches else torch.device("cpu")
