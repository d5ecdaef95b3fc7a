"""fcp.megatron: fcp plans through Megatron-Core's own per-micro-batch CP path.

Supported Megatron-Core: 0.19.2 (``SUPPORTED_MEGATRON_CORE``). Usage and limits:
docs/megatron.md. No Megatron class, module global or shared object is
assigned: fcp works through nn.Module hooks and per-instance state (below).

How the pieces meet Megatron-Core 0.19.2 (file and function cited):

* THD micro-batches as Megatron builds them. ``pretrain_gpt.py``
  ``forward_step`` passes the *padded* boundaries as ``cu_seqlens_q`` and
  ``cu_seqlens_q_padded`` alike (its comment: "a bug forcing cu_seqlens to be
  cu_seqlens_padded"); ``training/datasets/sft_dataset.py``
  ``SFTDataset.__getitem__`` pads every sequence to a multiple of 2*CP when
  CP > 1, with position ids running on through the padding and the padding's
  loss_mask 0. :class:`MicroBatchPacker` does the same per micro-batch,
  with the micro-batch's degree, and cuts each sequence as
  ``utils._get_batch_on_this_cp_rank_per_document_balancing`` does (TE's
  ``thd_get_partitioned_indices``: 2*d equal chunks, CP rank r holds chunks r
  and 2d-1-r).
* Per-micro-batch CP group. ``TEDotProductAttention.forward``
  (``extensions/transformer_engine.py``) re-points TE's attention at
  ``PackedSeqParams.cp_group``. Every micro-batch carries a group, degree 1
  and idle ones included (a one-rank group: Megatron dev's ``Attention.forward``
  asserts "cp_group must be set in dynamic-cp mode" whenever ``local_cp_size``
  is set).
* TE's CP stream and all-to-all. Megatron 0.19.2 hands TE the class attribute
  ``TEDotProductAttention.cp_stream`` (made only for static CP > 1) and the
  layer's construction-time ``cp_comm_type``. :func:`prepare_model` puts a
  forward pre-hook on each TE core-attention instance that calls TE's public
  ``DotProductAttention.set_context_parallel_group(group, ranks, stream,
  comm_type)`` with fcp's own CUDA stream and the micro-batch's comm type
  (``"p2p"`` for ring groups, ``"a2a"`` for all-to-all groups;
  :class:`FcpPackedSeqParams` carries it) and hands Megatron's forward a copy of
  the parameters without ``cp_group``/``local_cp_size``, so it keeps that
  setting.
* RoPE. ``Attention.forward`` (``transformer/attention.py``) applies THD RoPE
  with ``self.pg_collection.cp``, the group the layer was built with. A forward
  pre-hook gives that attention instance, for the duration of its call, its own
  copy of ``pg_collection`` whose ``cp`` is the micro-batch's group (the shared
  ``ProcessGroupCollection`` object is never changed); the post-hook restores it.
* Schedule and gradients. The data iterator yields one THD micro-batch per
  plan micro-batch on every rank (the same count everywhere), so Megatron's
  ``get_forward_backward_func()`` runs it unchanged (TP and PP included) and
  reduces gradients once per global batch in ``finalize_model_grads``; with
  ``config.calculate_per_token_loss = True`` the loss is a per-token mean
  over the whole global batch whatever the degrees.
* Rank grid. Plan rank ``p`` is position ``p`` of this rank's data-parallel
  group *with context parallelism* (``parallel_state.get_data_parallel_group(
  with_context_parallel=True)``): TP and PP coordinates stay intact, each
  (TP, PP) coordinate gets its own copy of every CP group.
* Scheduler interfaces. :meth:`FcpCPScheduler.get_groups_and_subsamples`
  answers 0.19.2's ``BalancedCPScheduler.get_groups_and_subsamples(
  sample_id_seqlens, config)`` (``pipeline_parallel/hybrid_cp_schedule.py``);
  :class:`FcpPackingScheduler` has the constructor and the call of Megatron
  dev's ``BasePackingScheduler`` (``datasets/data_schedule.py``).

Thread-safety: planning runs on a background thread (the C++ planner
releases the GIL); process groups are created only on the calling thread.
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

__all__ = [
    "SUPPORTED_MEGATRON_CORE",
    "check_megatron_version",
    "padded_length",
    "thd_partition_indices",
    "RankGrid",
    "grid_group_cache",
    "CPGroupCache",
    "Assignment",
    "FcpCPScheduler",
    "MicroBatchPacker",
    "GlobalBatch",
    "FcpMegatronLoader",
    "prepare_model",
    "hook_rope",
    "hook_te_attention",
    "loss_func",
    "FcpPackingScheduler",
]  # FcpPackedSeqParams too, defined on first use (module __getattr__)

SUPPORTED_MEGATRON_CORE = "0.19.2"

log = logging.getLogger("fcp.megatron")


def check_megatron_version(strict: bool = False) -> str:
    """The installed megatron-core version; logs a warning (or raises
    RuntimeError when ``strict``) if it is not ``SUPPORTED_MEGATRON_CORE``."""
    from importlib.metadata import version

    found = version("megatron-core")
    if found != SUPPORTED_MEGATRON_CORE:
        msg = (
            f"megatron-core {found} is installed; fcp.megatron is tested against "
            f"{SUPPORTED_MEGATRON_CORE}"
        )
        if strict:
            raise RuntimeError(msg)
        log.warning(msg)
    return found


# --------------------------------------------------------------------------- THD layout


def padded_length(seq_len: int, degree: int, multiple: int = 1) -> int:
    """Length of a sequence once padded for TE's THD path (tokens): for a
    group of degree > 1, the smallest length >= seq_len divisible by
    2*degree*multiple (TE's THD context parallelism cuts it into 2*degree equal
    chunks); for degree 1 only a multiple of ``multiple`` (no padding between
    sequences, which TE's non-CP THD kernels need not handle). ``multiple`` =
    the TP size under sequence parallelism, else 1."""
    if seq_len < 1 or degree < 1 or multiple < 1:
        raise ValueError(
            f"seq_len/degree/multiple: must be >= 1, got {seq_len}, {degree}, {multiple}"
        )
    m = multiple if degree == 1 else 2 * degree * multiple
    return -(-seq_len // m) * m


def thd_partition_indices(padded_lengths: Sequence[int], degree: int, cp_rank: int):
    """Indices into the packed, padded sequences that CP rank ``cp_rank`` of a
    group of ``degree`` holds: each padded sequence is cut into 2*degree equal
    chunks and the rank takes chunks ``cp_rank`` and ``2*degree-1-cp_rank``
    (the rule of TE's ``thd_get_partitioned_indices``); degree 1: all
    tokens. int64 tensor."""
    import torch

    if not 0 <= cp_rank < degree:
        raise ValueError(f"cp_rank: must be in [0, {degree}), got {cp_rank}")
    if degree == 1:  # no CP: everything, in order
        return torch.arange(sum(int(n) for n in padded_lengths))
    parts = []
    offset = 0
    for n in padded_lengths:
        if n % (2 * degree):
            raise ValueError(f"padded_lengths: {n} is not divisible by 2*degree = {2 * degree}")
        c = n // (2 * degree)
        parts.append(torch.arange(offset + cp_rank * c, offset + (cp_rank + 1) * c))
        hi = 2 * degree - 1 - cp_rank
        parts.append(torch.arange(offset + hi * c, offset + (hi + 1) * c))
        offset += n
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


# --------------------------------------------------------------------------- rank grid


class RankGrid:
    """Plan ranks onto Megatron global ranks.

    ``coordinates``: one list per (TP, PP, ...) coordinate: the global ranks of
    that coordinate's DP x CP group, in Megatron's order (plan rank p =
    position p). ``rank``: this process's global rank. Plain data: usable
    without torch.distributed (tests build it by hand)."""

    def __init__(self, coordinates: Sequence[Sequence[int]], rank: int):
        coords = sorted({tuple(int(r) for r in c) for c in coordinates})
        if not coords or len({len(c) for c in coords}) != 1:
            raise ValueError("coordinates: need lists of equal length (one per TP x PP coordinate)")
        seen = [r for c in coords for r in c]
        if len(seen) != len(set(seen)):
            raise ValueError("coordinates: a global rank appears twice")
        mine = [c for c in coords if rank in c]
        if len(mine) != 1:
            raise ValueError(f"rank: {rank} is not in the grid")
        self.coordinates: List[Tuple[int, ...]] = coords
        self.rank = int(rank)
        self.dp_cp_ranks: Tuple[int, ...] = mine[0]
        self.plan_rank = self.dp_cp_ranks.index(self.rank)

    @property
    def size(self) -> int:
        """N: the number of plan ranks (the DP x CP size)."""
        return len(self.dp_cp_ranks)

    @classmethod
    def from_parallel_state(cls) -> "RankGrid":
        """Collective over the world: gathers every rank's DP x CP group from
        ``megatron.core.parallel_state`` (must be initialised)."""
        import torch.distributed as dist
        from megatron.core import parallel_state

        group = parallel_state.get_data_parallel_group(with_context_parallel=True)
        mine = dist.get_process_group_ranks(group)
        everyone: List[Optional[List[int]]] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        return cls(everyone, dist.get_rank())

    def global_ranks(
        self, plan_ranks: Sequence[int], coordinate: Optional[int] = None
    ) -> List[int]:
        """Global ranks of ``plan_ranks`` at a coordinate (default: this rank's)."""
        coord = self.dp_cp_ranks if coordinate is None else self.coordinates[coordinate]
        return [coord[p] for p in plan_ranks]


def grid_group_cache(grid: RankGrid, new_group: Optional[Callable] = None, **kwargs):
    """The one group cache of fcp.torch and fcp.megatron, ``fcp.torch.GroupCache``,
    over a :class:`RankGrid`.

    Keys are plan-rank sets; each set gets one ``torch.distributed`` group per
    grid coordinate (``new_group`` is collective over the world, so every
    process creates the same groups in the same order: the cache's canonical
    order, degree-1 sets first) and the cache keeps this process's.
    ``kwargs`` go to ``GroupCache``: ``max_groups`` defaults to None here
    (every group kept for the whole run: fcp plans reuse few distinct
    contiguous ranges, at most N*(N+1)/2), ``timeout`` to its 5 minutes.
    Training thread only."""
    from .torch.groups import GroupCache

    kwargs.setdefault("max_groups", None)
    return GroupCache(new_group=new_group, coordinates=grid.coordinates, rank=grid.rank, **kwargs)


# Kept importable: the name earlier fcp.megatron releases gave the cache.
CPGroupCache = grid_group_cache


def _process_group_of(cache, plan_ranks: Sequence[int]):
    """This rank's process group for the set (its one-rank group included);
    the cache already holds it (prepared)."""
    return cache.get(sorted(int(p) for p in plan_ranks)).process_group


# --------------------------------------------------------------------------- scheduler


@dataclass
class Assignment:
    """What one rank does in one micro-batch: ``sequences`` (indices into the
    global batch, planner order), ``plan_ranks`` of its CP group (ascending),
    ``degree``, ``cp_rank`` (this rank's position in the group: Megatron and
    TE use the rank within the process group, i.e. ascending global rank), and
    ``cp_group`` (a one-rank group for degree 1), ``cp_comm_type`` (TE's:
    ``"p2p"`` for a ring group, ``"a2a"`` for an all-to-all group). Empty
    ``sequences``: the rank idles (in its one-rank group)."""

    sequences: List[int]
    plan_ranks: List[int]
    degree: int
    cp_rank: int
    cp_group: object = None
    cp_comm_type: str = "p2p"


class FcpCPScheduler:
    """fcp as a Megatron-Core CP scheduler.

    ``scheduler``: an ``fcp.Scheduler`` whose cluster has exactly N = DP x CP
    ranks (``ranks_per_node`` = DP x CP ranks per node). ``grid``: a
    :class:`RankGrid` (default: from parallel_state, collective). ``verify``:
    check once per global batch that all ranks hold the same plan (an
    all-reduce of a digest over ``verify_group``, default the world; needs a
    CPU-capable backend such as gloo, or pass a group). ``background``: plan
    the next batch on a worker thread while this one trains. When
    ``scheduler`` was made with ``communicators={"create_s": S}`` (what a new
    process group costs here), every plan is told the rank sets ``cache``
    holds when its batch is submitted, so fcp charges only groups it would
    have to create.

    Two ways in:
    * :meth:`get_groups_and_subsamples` -- the call and answer format of
      Megatron's ``BalancedCPScheduler`` (what ``HybridCPDataLoaderWrapper``
      asks its ``cp_balancing_scheduler``). Megatron 0.19.2's hybrid schedule
      then finds each sample's group by size alone (power-of-two aligned
      blocks), which cannot carry fcp's groups: train through the loader;
    * :meth:`submit` / :meth:`take` / :meth:`assignments` -- used by
      :class:`FcpMegatronLoader`, which feeds Megatron's standard schedule.
    """

    def __init__(
        self,
        scheduler,
        grid: Optional[RankGrid] = None,
        cache=None,
        background: bool = True,
        verify: bool = True,
        verify_group=None,
        gather_times: Optional[Callable[[List[float]], List[List[float]]]] = None,
    ):
        self.scheduler = scheduler
        self._gather_times = gather_times
        self.grid = grid if grid is not None else RankGrid.from_parallel_state()
        n = int(scheduler.cluster.num_ranks)
        if n != self.grid.size:
            raise ValueError(
                f"cluster.ranks: the fcp cluster has {n} ranks but Megatron's DP x CP "
                f"group has {self.grid.size}"
            )
        self.cache = cache if cache is not None else grid_group_cache(self.grid)
        self.verify = verify
        self._verify_group = verify_group
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "fcp-plan") if background else None
        self._pending: List[Tuple[Tuple[int, ...], object]] = []
        self.exposed_planning_s: List[float] = []  # per global batch: time the training waited
        self.planning_s: List[float] = []  # per global batch: planner wall time

    # -- Megatron's BalancedCPScheduler interface ------------------------------
    def get_groups_and_subsamples(self, sample_id_seqlens, config=None):
        """``sample_id_seqlens``: [(sample_id, seq_len)], the whole global batch.
        Returns ``(groups, sample_id_groups)`` as Megatron's scheduler does:
        ``sample_id_groups[j][p]`` = sample ids plan rank p runs in micro-batch
        j (a sample on d ranks is listed on each of them, so Megatron derives
        ``local_cp_size`` = d); ``groups[j][p]`` = their lengths (tokens)."""
        ids = [int(i) for i, _ in sample_id_seqlens]
        lengths = [int(s) for _, s in sample_id_seqlens]
        plan = self._plan_now(lengths)
        groups, sample_id_groups = [], []
        for mb in plan.micro_batches:
            per_rank = [[] for _ in range(self.grid.size)]
            for g in mb.groups:
                for p in g.ranks:
                    per_rank[p].extend(ids[s] for s in g.sequences)
            sample_id_groups.append(per_rank)
            groups.append([[lengths[ids.index(i)] for i in r] for r in per_rank])
        return groups, sample_id_groups

    # -- planning pipeline ---------------------------------------------------
    def _plan_now(self, lengths):
        return self._plan_timed(lengths, self._held_sets())[0]

    @staticmethod
    def _batch_key(lengths, vision_tokens):
        """What a submitted batch is known by: its lengths and vision tokens."""
        visions = None if vision_tokens is None else tuple(int(v) for v in vision_tokens)
        return tuple(int(x) for x in lengths), visions

    def _held_sets(self):
        """The rank sets the cache holds now, when the fcp.Scheduler charges
        new communicators (made with ``communicators={"create_s": S}``), else
        None. Taken on the training thread, where the cache grows, so every
        rank passes the same sets."""
        from .torch.groups import held_rank_sets

        return held_rank_sets(self.scheduler, self.cache)

    def _planner_now(self):
        """The fcp.Scheduler as it is now: a copy when it can learn
        (:meth:`observe`), so that a plan on the worker thread uses the
        coefficients of the moment it was submitted, the same on every rank."""
        return copy.copy(self.scheduler) if hasattr(self.scheduler, "observe") else self.scheduler

    def _plan_timed(self, lengths, held=None, planner=None, vision_tokens=None):
        from .torch.groups import plan_with_held

        planner = planner or self.scheduler
        t0 = time.perf_counter()
        plan = plan_with_held(planner, lengths, held, vision_tokens)
        if plan.status.name != "OK":
            raise RuntimeError(f"fcp: no feasible plan for this global batch: {plan.message}")
        plan = _checked(plan, lengths, planner)
        for mb in plan.micro_batches:
            for g in mb.groups:
                _te_comm_type(g)  # a kind TE cannot run stops here, not in attention
        return plan, time.perf_counter() - t0

    def submit(self, lengths: Sequence[int], vision_tokens: Optional[Sequence[int]] = None) -> None:
        """Starts planning a global batch (on the worker thread when
        ``background``). ``vision_tokens``: optional image or frame tokens per
        sequence, as ``fcp.Scheduler.plan`` takes them. Batches are taken back
        in submission order."""
        key = self._batch_key(lengths, vision_tokens)
        if self._pool is not None:
            self._pending.append(
                (
                    key,
                    self._pool.submit(
                        self._plan_timed, key[0], self._held_sets(), self._planner_now(), key[1]
                    ),
                )
            )
        else:
            self._pending.append((key, None))

    def take(self, lengths: Sequence[int], vision_tokens: Optional[Sequence[int]] = None):
        """The plan of the oldest submitted batch (which must have these
        lengths and vision tokens); waits for it if needed and records the
        exposed time."""
        key = self._batch_key(lengths, vision_tokens)
        if not self._pending:
            self.submit(*key)
        pending_key, fut = self._pending.pop(0)
        for i, field in enumerate(("lengths", "vision_tokens")):
            if pending_key[i] != key[i]:
                raise ValueError(f"{field}: differ from the batch submitted first")
        t0 = time.perf_counter()
        plan, spent = (
            fut.result()
            if fut is not None
            else self._plan_timed(key[0], self._held_sets(), vision_tokens=key[1])
        )
        exposed = time.perf_counter() - t0
        self.exposed_planning_s.append(exposed)
        self.planning_s.append(spent)
        log.info(
            "fcp plan: %d micro-batches, est %.3f ms, planning %.3f ms, exposed %.3f ms",
            len(plan.micro_batches),
            plan.est_ms,
            spent * 1e3,
            exposed * 1e3,
        )
        if self.verify:
            self._check_agreement(plan)
        return plan

    def observe(
        self,
        plan,
        lengths: Sequence[int],
        my_times_s: Sequence[float],
        vision_tokens: Optional[Sequence[int]] = None,
    ) -> dict:
        """Learns from a global batch that ran (``fcp.Scheduler.observe``).

        ``lengths``, ``vision_tokens``: the batch as submitted.
        ``my_times_s``: this rank's time (s) in each micro-batch of ``plan``
        (NaN where it was idle or not measured). Every rank's list is gathered
        (one all-gather over the world; ``gather_times`` replaces it), each
        group's time is the slowest of its ranks over every TP x PP coordinate,
        and the fcp.Scheduler recalibrates its coefficients from them. Batches
        submitted after this call plan with what was learnt; one already
        submitted keeps the coefficients it started with. Collective; call it
        at the same point on every rank. Returns the Scheduler's calibration."""
        from .torch.groups import group_times, observe_with

        plan = _checked(plan, lengths, self.scheduler)
        times = group_times(
            plan, my_times_s, coordinates=self.grid.coordinates, gather=self._gather_times
        )
        return observe_with(self.scheduler, lengths, plan, times, vision_tokens)

    def _check_agreement(self, plan) -> None:
        import torch

        from .torch.groups import check_same_plan

        # CPU tensors: verify_group must run them (gloo), as documented.
        check_same_plan(plan, self._verify_group, torch.device("cpu"))

    def assignments(self, plan, lengths: Optional[Sequence[int]] = None) -> List[Assignment]:
        """This rank's :class:`Assignment` in every micro-batch of ``plan``.
        Collective the first time a rank set occurs (creates its groups).
        ``lengths``: the batch of a plan that :meth:`take` did not return
        (e.g. read from JSON); the plan is checked against it first
        (``fcp.torch.check_plan``, ValueError naming the field)."""
        if lengths is not None:
            plan = _checked(plan, lengths, self.scheduler)
        out = []
        me = self.grid.plan_rank
        # Every rank creates every group (one-rank ones included), same order.
        self.cache.prepare([[p] for p in range(self.grid.size)])
        self.cache.prepare(plan)
        for mb in plan.micro_batches:
            mine = Assignment([], [me], 1, 0, _process_group_of(self.cache, [me]))
            for g in mb.groups:
                ranks = sorted(int(p) for p in g.ranks)
                if me in ranks:
                    mine = Assignment(
                        [int(s) for s in g.sequences],
                        ranks,
                        len(ranks),
                        ranks.index(me),
                        _process_group_of(self.cache, ranks),
                        _te_comm_type(g),
                    )
            out.append(mine)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _checked(plan, lengths, planner):
    """``plan`` checked by fcp's one plan validator (``fcp.torch.check_plan``)
    against the batch and ``planner``'s cluster: a custom scheduler's, or a
    JSON plan's, bad rank or sequence index is a ValueError here, not an
    IndexError (or a wrong group) later."""
    from .torch.groups import check_plan

    return check_plan(plan, [int(x) for x in lengths], planner.cluster)


_TE_COMM_TYPES = {"RING": "p2p", "ALL_TO_ALL": "a2a"}


def _te_comm_type(group) -> str:
    """TE's ``cp_comm_type`` for a plan group: ring -> "p2p" (KV exchanged
    around the ring), all-to-all -> "a2a" (Ulysses: heads scattered)."""
    name = getattr(getattr(group, "comm", None), "name", "RING")
    if name not in _TE_COMM_TYPES:
        raise ValueError(
            f"plan: group communication {name} has no TransformerEngine "
            f"cp_comm_type (known: {sorted(_TE_COMM_TYPES)})"
        )
    return _TE_COMM_TYPES[name]


# --------------------------------------------------------------------------- dev's door


class FcpPackingScheduler:
    """fcp behind Megatron-LM dev's sequence-packing door.

    Checked against Megatron-LM ``dev`` at commit d48bd6be0a85 (2026-08-21):
    ``datasets/data_schedule.py`` ``wrap_data_iterator`` builds
    ``scheduler_map[config.sequence_packing_scheduler](max_seqlen_per_dp_cp_rank,
    cp_size, dp_size, microbatch_group_size_per_vp_stage, max_num_seqs=...)``
    and its ``run`` calls ``get_groups_and_subsamples(sample_id_seqlens)``
    with ``[(global sample id, padded length)]`` for the whole global batch. The
    answer is ``sample_id_groups[micro_batch][dp_cp_rank] -> [sample ids]``:
    every sample once, a sample on d ranks listed on each of them
    (``build_packed_microbatches`` counts them as ``local_cp_size``), no rank
    without a sample. Megatron then looks each group up *by size*
    (``parallel_state.get_dynamic_data_context_parallel_groups``: aligned
    power-of-two blocks of the DP x CP ranks), so a plan whose groups are not
    such blocks, or that leaves a rank idle, is refused with ValueError here
    rather than run in other groups than planned. Once that door ships in a
    release, register :meth:`bind`'s class under a name of your own in the
    ``scheduler_map`` of your training script's copy of Megatron-LM (or pass
    it where that release takes a scheduler); until then
    :class:`FcpMegatronLoader` is the way in.

    ``planner``: an ``fcp.Scheduler`` whose cluster has ``cp_size * dp_size``
    ranks. This class only plans and translates; it does not subclass
    Megatron's ``BasePackingScheduler`` (not in 0.19.2), whose ``run`` it needs
    in dev: :meth:`megatron_class` builds that subclass when dev is installed.
    """

    planner = None  # set by bind()

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank: int,
        cp_size: int,
        dp_size: int,
        microbatch_group_size_per_vp_stage: Optional[int] = None,
        max_num_seqs: Optional[int] = None,
        min_cp_size: int = 1,
        planner=None,
    ):
        self.max_seqlen_per_dp_cp_rank = int(max_seqlen_per_dp_cp_rank)
        self.cp_size, self.dp_size = int(cp_size), int(dp_size)
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_num_seqs = max_num_seqs
        self.min_cp_size = int(min_cp_size)
        self.fcp_planner = planner if planner is not None else type(self).planner
        if self.fcp_planner is None:
            raise ValueError(
                "planner: FcpPackingScheduler needs an fcp.Scheduler (planner= or bind())"
            )
        n = int(self.fcp_planner.cluster.num_ranks)
        if n != self.cp_size * self.dp_size:
            raise ValueError(
                f"cluster.ranks: the fcp cluster has {n} ranks but Megatron's DP x CP "
                f"group has {self.cp_size * self.dp_size}"
            )
        if microbatch_group_size_per_vp_stage not in (None, 1):
            raise ValueError(
                "microbatch_group_size_per_vp_stage: virtual pipeline stages are not "
                "supported by FcpPackingScheduler"
            )

    @classmethod
    def bind(cls, planner) -> type:
        """A subclass whose instances plan with ``planner`` (what
        ``scheduler_map`` needs: Megatron constructs the class itself)."""
        return type(cls.__name__, (cls,), {"planner": planner})

    @classmethod
    def megatron_class(cls, planner) -> type:
        """:meth:`bind`, also deriving from Megatron dev's
        ``DefaultDynamicCPScheduler`` (its ``run``: rerouting, packing, THD
        padding). ImportError on a megatron-core without that door."""
        from megatron.core.datasets.data_schedule import DefaultDynamicCPScheduler

        def __init__(self, *args, **kwargs):
            DefaultDynamicCPScheduler.__init__(self, *args, **kwargs)
            cls.__init__(self, *args, **kwargs)

        return type(
            cls.__name__,
            (cls, DefaultDynamicCPScheduler),
            {"planner": planner, "__init__": __init__},
        )

    def get_groups_and_subsamples(self, sample_id_seqlens):
        """``sample_id_seqlens``: ``[(sample_id, seq_len)]``. Returns
        ``sample_id_groups[j][p]``: the sample ids DP x CP rank ``p`` runs in
        micro-batch ``j`` (Megatron dev's format)."""
        ids = [int(i) for i, _ in sample_id_seqlens]
        lengths = [int(n) for _, n in sample_id_seqlens]
        plan = self.fcp_planner.plan(lengths)
        if plan.status.name != "OK":
            raise RuntimeError(f"fcp: no feasible plan for this global batch: {plan.message}")
        n = self.cp_size * self.dp_size
        out = []
        for j, mb in enumerate(plan.micro_batches):
            per_rank: List[Optional[List[int]]] = [None] * n
            for g in mb.groups:
                ranks = sorted(int(p) for p in g.ranks)
                _check_dev_group(ranks, n, j)
                if len(ranks) < self.min_cp_size:
                    raise ValueError(
                        f"min_cp_size: micro-batch {j} has a group of degree "
                        f"{len(ranks)} < {self.min_cp_size} on ranks {ranks}"
                    )
                if self.max_num_seqs is not None and len(g.sequences) > self.max_num_seqs:
                    raise ValueError(
                        f"max_num_seqs: micro-batch {j} puts {len(g.sequences)} "
                        f"sequences on ranks {ranks}, more than {self.max_num_seqs}"
                    )
                for p in ranks:
                    per_rank[p] = [ids[s] for s in g.sequences]
            idle = [p for p, r in enumerate(per_rank) if not r]
            if idle:
                raise ValueError(
                    f"plan: micro-batch {j} leaves ranks {idle} idle; Megatron dev's "
                    f"packing path needs a sample on every DP x CP rank"
                )
            out.append(per_rank)
        return out


def _check_dev_group(ranks: List[int], n: int, micro_batch: int) -> None:
    """Megatron dev finds a group by its size alone: the aligned power-of-two
    block of that size holding the rank, or all N ranks."""
    d = len(ranks)
    block = d == n or (d & (d - 1) == 0 and ranks[0] % d == 0)
    if not block or ranks != list(range(ranks[0], ranks[0] + d)):
        raise ValueError(
            f"plan: micro-batch {micro_batch} has a group of degree {d} on ranks "
            f"{ranks}; Megatron dev looks groups up by size (aligned power-of-two "
            f"blocks), so it would run them elsewhere: use FcpMegatronLoader"
        )


# --------------------------------------------------------------------------- data path

_PACKED_SEQ_PARAMS_CLASS = None


def _packed_seq_params_class():
    """:class:`FcpPackedSeqParams`, defined on first use (it subclasses
    Megatron's dataclass, imported lazily like all of Megatron here)."""
    global _PACKED_SEQ_PARAMS_CLASS
    if _PACKED_SEQ_PARAMS_CLASS is None:
        import dataclasses

        from megatron.core.packed_seq_params import PackedSeqParams

        @dataclasses.dataclass
        class FcpPackedSeqParams(PackedSeqParams):
            """Megatron's ``PackedSeqParams`` plus the micro-batch's TE
            ``cp_comm_type`` ("p2p" or "a2a"), read by :func:`prepare_model`'s
            core-attention hook. Megatron reads only its own fields."""

            cp_comm_type: str = "p2p"

        FcpPackedSeqParams.__module__ = __name__
        FcpPackedSeqParams.__qualname__ = "FcpPackedSeqParams"
        _PACKED_SEQ_PARAMS_CLASS = FcpPackedSeqParams
    return _PACKED_SEQ_PARAMS_CLASS


def __getattr__(name):
    if name == "FcpPackedSeqParams":
        return _packed_seq_params_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MicroBatchPacker:
    """Packs one rank's sequences of a micro-batch in THD format.

    Samples are dicts of 1-D tensors of one sequence (``tokens``, ``labels``,
    ``loss_mask``; other keys of the same length are carried along).
    ``multiple``: extra divisibility of every padded sequence (the TP size
    under sequence parallelism). ``pad_token``: token id of padding (labels
    of padding are ``pad_token`` too; their loss_mask is 0).
    ``device``: where the output tensors go."""

    def __init__(self, multiple: int = 1, pad_token: int = 0, device=None):
        if multiple < 1:
            raise ValueError(f"multiple: must be >= 1, got {multiple}")
        self.multiple = multiple
        self.pad_token = pad_token
        self.device = device

    def pack(
        self,
        samples: Sequence[Dict[str, object]],
        degree: int = 1,
        cp_rank: int = 0,
        cp_group=None,
        cp_comm_type: str = "p2p",
    ):
        """Returns ``(batch, packed_seq_params)``: ``batch`` holds ``tokens``,
        ``labels``, ``loss_mask``, ``position_ids`` (positions inside each
        sequence, running on through its padding) and any other per-token key,
        each ``[1, local_tokens]``; ``packed_seq_params`` is an
        :class:`FcpPackedSeqParams` (Megatron's ``PackedSeqParams``, THD) with
        ``cu_seqlens_q`` = ``cu_seqlens_q_padded`` = the padded boundaries, as
        Megatron-Core 0.19.2's ``pretrain_gpt.py`` ``forward_step`` builds it
        (padding is masked by ``loss_mask``; causal attention keeps it out of
        the real tokens, which come first)."""
        import torch

        if cp_comm_type not in _TE_COMM_TYPES.values():
            raise ValueError(
                f"cp_comm_type: must be one of {sorted(_TE_COMM_TYPES.values())}, "
                f"got {cp_comm_type!r}"
            )
        if not samples:
            raise ValueError("samples: need at least one sequence")
        lengths = [int(s["tokens"].numel()) for s in samples]
        padded = [padded_length(n, degree, self.multiple) for n in lengths]
        keys = list(samples[0].keys())
        full: Dict[str, List[object]] = {k: [] for k in keys}
        full["position_ids"] = []
        for s, n, p in zip(samples, lengths, padded):
            for k in keys:
                v = s[k].reshape(-1)
                if v.numel() != n:
                    raise ValueError(f"samples[{k}]: length {v.numel()} != tokens length {n}")
                fill = 0 if k == "loss_mask" else self.pad_token
                full[k].append(torch.cat([v, v.new_full((p - n,), fill)]))
            full["position_ids"].append(torch.arange(p, dtype=torch.int64))
        idx = thd_partition_indices(padded, degree, cp_rank) if degree > 1 else None
        batch = {}
        for k, parts in full.items():
            t = torch.cat(parts)
            if idx is not None:
                t = t.index_select(0, idx)
            batch[k] = t.unsqueeze(0).to(self.device) if self.device is not None else t.unsqueeze(0)
        cu_padded = torch.tensor([0] + padded, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        if self.device is not None:
            cu_padded = cu_padded.to(self.device)
        max_len = max(padded)
        params = _packed_seq_params_class()(
            qkv_format="thd",
            cu_seqlens_q=cu_padded,
            cu_seqlens_kv=cu_padded,
            cu_seqlens_q_padded=cu_padded,
            cu_seqlens_kv_padded=cu_padded,
            max_seqlen_q=max_len,
            max_seqlen_kv=max_len,
            local_cp_size=degree,
            cp_group=cp_group,
            cp_comm_type=cp_comm_type,
        )
        return batch, params

    def idle(self, like: Dict[str, object], cp_group=None):
        """A micro-batch for a rank that has no sequence: 2*multiple padding
        tokens on degree 1 in ``cp_group`` (the rank's one-rank group),
        loss_mask 0 (zero loss, zero gradient)."""
        n = 2 * self.multiple
        sample = {
            k: v.reshape(-1)[:1].new_full((n,), 0 if k == "loss_mask" else self.pad_token)
            for k, v in like.items()
        }
        return self.pack([sample], 1, 0, cp_group)


@dataclass
class GlobalBatch:
    """One global batch: ``lengths`` (tokens per sequence, the same list on
    every rank), ``get_sample(i)`` returning sequence i as a dict of 1-D
    tensors (called only for the sequences this rank runs) and, optionally,
    ``vision_tokens`` (image or frame tokens per sequence, in [0, length]:
    the cost model prices them with ``alpha2_vision``)."""

    lengths: List[int]
    get_sample: Callable[[int], Dict[str, object]]
    vision_tokens: Optional[List[int]] = None

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[Dict[str, object]],
        vision_tokens: Optional[Sequence[int]] = None,
    ) -> "GlobalBatch":
        samples = list(samples)
        visions = None if vision_tokens is None else [int(v) for v in vision_tokens]
        return cls([int(s["tokens"].numel()) for s in samples], samples.__getitem__, visions)


class FcpMegatronLoader:
    """Global batches -> Megatron micro-batches, planned one batch ahead.

    ``batches``: an iterable of :class:`GlobalBatch`. :meth:`next_global_batch`
    returns ``(data_iterator, num_microbatches)`` for Megatron's
    ``forward_backward_func``; the iterator yields dicts with ``tokens``,
    ``labels``, ``loss_mask``, ``position_ids`` ([1, T] each) and
    ``packed_seq_params``. When a batch is handed out, the next one is read
    and its plan starts on the worker thread, so planning overlaps training.
    """

    def __init__(
        self, scheduler: FcpCPScheduler, batches, packer: Optional[MicroBatchPacker] = None
    ):
        self.scheduler = scheduler
        self.packer = packer or MicroBatchPacker()
        self._batches = iter(batches)
        self._current = None  # (batch, plan, steps) of the batch handed out last
        self._stamps: List[object] = []  # when each of its micro-batches was handed out
        self._end = None
        self._next: Optional[GlobalBatch] = self._read_ahead()

    def _read_ahead(self) -> Optional[GlobalBatch]:
        try:
            b = next(self._batches)
        except StopIteration:
            return None
        self.scheduler.submit(b.lengths, b.vision_tokens)
        return b

    def next_global_batch(self) -> Tuple[Iterator[Dict[str, object]], int]:
        """Raises StopIteration after the last batch. Collective (verification
        and, for new rank sets, group creation)."""
        batch = self._next
        if batch is None:
            raise StopIteration
        plan = self.scheduler.take(batch.lengths, batch.vision_tokens)
        self._next = self._read_ahead()  # plan i+1 while i trains
        steps = self.scheduler.assignments(plan)
        self._current, self._stamps, self._end = (batch, plan, steps), [], None
        return self._micro_batches(batch, steps), len(steps)

    # -- learning from the steps that ran -------------------------------------
    def _stamp(self):
        """Now, on the device's stream (a CUDA event) or the host clock."""
        import torch

        if torch.cuda.is_available() and torch.device(self.packer.device or "cpu").type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def mark_end(self) -> None:
        """Marks the end of the last micro-batch's backward. Call it from
        Megatron's ``config.finalize_model_grads_func`` (see
        :meth:`finalize_model_grads_hook`) or right after
        ``forward_backward_func`` returns."""
        self._end = self._stamp()

    def finalize_model_grads_hook(self, finalize):
        """Wraps Megatron's ``finalize_model_grads`` (set the result as
        ``config.finalize_model_grads_func``) so that the last micro-batch
        ends before the gradient reduction, not after it."""

        def wrapped(*args, **kwargs):
            self.mark_end()
            return finalize(*args, **kwargs)

        return wrapped

    def micro_batch_times(self) -> List[float]:
        """This rank's time (s) in each micro-batch of the batch handed out
        last: from the hand-out of one micro-batch to the next (the last to
        :meth:`mark_end`); NaN where the rank was idle. Assumes Megatron's
        schedule without pipeline parallelism (forward and backward of one
        micro-batch before the next is taken); with PP pass your own times to
        :meth:`observe`. Synchronizes the device once."""
        if self._current is None:
            raise RuntimeError("micro_batch_times: no batch has been handed out")
        steps = self._current[2]
        if len(self._stamps) != len(steps) or self._end is None:
            raise RuntimeError(
                "micro_batch_times: the batch has not finished (every micro-batch "
                "taken and mark_end() called)"
            )
        marks = self._stamps + [self._end]
        if not isinstance(self._end, float):
            self._end.synchronize()
            seconds = [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        else:
            seconds = [b - a for a, b in zip(marks, marks[1:])]
        return [t if a.sequences else float("nan") for t, a in zip(seconds, steps)]

    def observe(self, my_times_s: Optional[Sequence[float]] = None) -> dict:
        """The fcp.Scheduler learns from the batch handed out last
        (:meth:`FcpCPScheduler.observe`): ``my_times_s`` default
        :meth:`micro_batch_times`. Collective; batches read ahead after this
        call plan with what was learnt. Returns the Scheduler's calibration."""
        if self._current is None:
            raise RuntimeError("observe: no batch has been handed out")
        batch, plan, _ = self._current
        times = self.micro_batch_times() if my_times_s is None else my_times_s
        return self.scheduler.observe(plan, batch.lengths, times, batch.vision_tokens)

    def _micro_batches(self, batch: GlobalBatch, steps: List[Assignment]):
        like = None
        for a in steps:
            self._stamps.append(self._stamp())
            if a.sequences:
                samples = [batch.get_sample(i) for i in a.sequences]
                like = samples[0]
                data, params = self.packer.pack(
                    samples, a.degree, a.cp_rank, a.cp_group, a.cp_comm_type
                )
            else:
                if like is None:
                    like = batch.get_sample(0)
                data, params = self.packer.idle(like, a.cp_group)
            data["packed_seq_params"] = params
            yield data


# --------------------------------------------------------------------------- model side


def _attention_layers(model):
    from megatron.core.transformer.attention import Attention

    return [m for m in _modules(model) if isinstance(m, Attention)]


def _transformer_engine_attention():
    """Megatron's ``TEDotProductAttention`` class, or RuntimeError when
    TransformerEngine is missing: megatron-core then defines the class on a
    ``MagicMock`` (``extensions/transformer_engine.py``, ``HAVE_TE = False``)."""
    from unittest import mock

    try:
        from megatron.core.extensions import transformer_engine as mte
    except ImportError as err:
        raise RuntimeError(
            f"prepare_model: fcp.megatron needs TransformerEngine (THD context "
            f"parallelism); importing Megatron's TE extension failed: "
            f"{err}"
        ) from err
    cls = getattr(mte, "TEDotProductAttention", None)
    mocked = (
        not isinstance(cls, type) or issubclass(cls, mock.Mock) or isinstance(mte.te, mock.Mock)
    )
    if not getattr(mte, "HAVE_TE", False) or mocked:
        raise RuntimeError(
            "prepare_model: fcp.megatron needs TransformerEngine >= 2.16 (THD "
            "context parallelism, 'a2a' with THD); megatron-core found none and "
            "runs on a MagicMock stand-in (install transformer-engine[pytorch])"
        )
    return cls


def prepare_model(model) -> int:
    """Makes a Megatron model follow each micro-batch's ``PackedSeqParams``:
    RoPE with the micro-batch's CP group (:func:`hook_rope`) and TE's core
    attention in that group with fcp's CUDA stream and the micro-batch's
    ``cp_comm_type`` (:func:`hook_te_attention`). Raises RuntimeError when
    TransformerEngine is missing or mocked, or when the model has no TE core
    attention. Returns the number of attention layers hooked. Call once, after
    building the model, before wrapping it in DDP."""
    te_attention = _transformer_engine_attention()
    layers = hook_rope(model)
    cores = hook_te_attention(model, te_attention)
    if not cores:
        raise RuntimeError(
            "prepare_model: the model has no TEDotProductAttention: build it with "
            "get_gpt_layer_with_transformer_engine_spec()"
        )
    return len(layers)


def _modules(model):
    models = model if isinstance(model, (list, tuple)) else [model]
    return [m for chunk in models for m in chunk.modules()]


def hook_rope(model) -> list:
    """Forward hooks on each ``Attention`` layer: for its call, the layer
    applies THD RoPE in ``packed_seq_params.cp_group`` (Megatron 0.19.2 reads
    ``self.pg_collection.cp``). Per-instance state: the layer gets its own
    copy of ``pg_collection`` for the call; the shared collection is untouched.
    Needs no TransformerEngine. Returns the layers hooked."""
    layers = _attention_layers(model)
    for layer in layers:
        layer.register_forward_pre_hook(_use_packed_cp_group, with_kwargs=True)
        layer.register_forward_hook(_restore_cp_group, always_call=True)
    return layers


def hook_te_attention(model, te_attention, stream=None) -> list:
    """Forward pre-hooks on each ``te_attention`` instance (Megatron's
    ``TEDotProductAttention``): before the call, TE's public
    ``set_context_parallel_group(group, ranks, stream, comm_type)`` with the
    micro-batch's group and comm type and fcp's stream (default: one new CUDA
    stream); Megatron's forward gets the parameters without ``cp_group`` and
    ``local_cp_size``, so it keeps that setting instead of re-pointing TE with
    its class-level stream (None when static CP is 1). Returns the instances."""
    cores = [m for m in _modules(model) if isinstance(m, te_attention)]
    if cores and stream is None:
        import torch

        stream = torch.cuda.Stream()
    for core in cores:
        core.register_forward_pre_hook(_te_cp_hook(stream), with_kwargs=True)
    return cores


def _te_cp_hook(stream):
    import dataclasses

    import torch.distributed as dist

    def hook(module, args, kwargs):
        params = kwargs.get("packed_seq_params")
        group = getattr(params, "cp_group", None)
        if group is None:
            return None
        comm = getattr(params, "cp_comm_type", "p2p")
        degree = dist.get_world_size(group)
        if comm == "a2a":
            _check_heads_divisible(module, degree)
        if degree > 1:
            ranks = dist.get_process_group_ranks(group)
            module.set_context_parallel_group(group, ranks, stream, comm)
        else:
            module.set_context_parallel_group(None, None, None, comm)
        out = dict(kwargs)
        out["packed_seq_params"] = dataclasses.replace(params, cp_group=None, local_cp_size=None)
        return args, out

    return hook


def _check_heads_divisible(module, degree: int) -> None:
    """TE's all-to-all scatters heads: query and key/value heads of this TP
    rank must be divisible by the group's degree (TE asserts it in
    ``AttnFuncWithCPAndQKVOA2A.forward``; fcp refuses such groups)."""
    tp = int(getattr(module, "tp_size", 1) or 1)
    heads = getattr(module, "num_attention_heads", None)  # TE keeps the total
    heads = None if heads is None else int(heads) // tp
    kv = getattr(module, "num_gqa_groups_per_partition", None)
    for name, n in (("query heads per TP rank", heads), ("key/value heads per TP rank", kv)):
        if n is not None and int(n) % degree:
            raise ValueError(
                f"packed_seq_params.cp_comm_type: 'a2a' over {degree} ranks needs "
                f"{name} divisible by {degree}; this layer has {n}"
            )


def _use_packed_cp_group(module, args, kwargs):
    params = kwargs.get("packed_seq_params")
    group = getattr(params, "cp_group", None) if params is not None else None
    if group is None:
        return None
    module._fcp_saved_pg_collection = module.pg_collection
    pgs = copy.copy(module.pg_collection)
    pgs.cp = group
    module.pg_collection = pgs
    return None


def _restore_cp_group(module, args, output):
    saved = module.__dict__.pop("_fcp_saved_pg_collection", None)
    if saved is not None:
        module.pg_collection = saved
    return None


def loss_func(loss_mask, output_tensor):
    """Megatron loss function for per-token loss (use with
    ``config.calculate_per_token_loss = True``): returns ``(sum of masked
    token losses, number of tokens, {"lm loss": [sum, tokens]})``; Megatron
    adds the token counts of all micro-batches and ranks and divides the
    gradients once per global batch (``finalize_model_grads``)."""
    import torch

    # fp32 at least (Megatron's own loss functions do the same); fp64 stays.
    losses = output_tensor.reshape(-1)
    if losses.dtype != torch.float64:
        losses = losses.float()
    mask = loss_mask.reshape(-1).to(losses.dtype)
    # where, not a product: whatever a kernel leaves at padding (even NaN) stays out
    total = torch.sum(torch.where(mask > 0, losses, torch.zeros_like(losses)))
    num_tokens = mask.sum().to(torch.int)
    report = torch.cat([total.detach().view(1), num_tokens.detach().float().view(1)])
    return total, num_tokens, {"lm loss": report}
