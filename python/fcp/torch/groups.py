"""Process groups of a plan: the one group cache (fcp.torch and fcp.megatron),
the plan's rank lists and the one gather of measured group times."""

from __future__ import annotations

import collections
import datetime
import hashlib
import math
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

# Bounded default for every group fcp.torch creates: a rank that died or
# exited early ends its peers' collectives with an error after this long,
# instead of torch's 30-minute default (NCCL: 10 minutes).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)

COMMS = ("ring", "all-to-all")


def comm_name(comm) -> str:
    """A plan group's ``comm`` as the plan's JSON spells it (``"ring"`` or
    ``"all-to-all"``); accepts that string or the ``fcp.CommKind`` enum."""
    name = str(getattr(comm, "name", comm)).lower().replace("_", "-")
    if name not in COMMS:
        raise ValueError(f"comm: must be 'ring' or 'all-to-all', got {comm!r}")
    return name


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


class CPGroup:
    """A context-parallel group: global ``ranks`` in ring order and its
    ``process_group`` (a ``torch.distributed`` group over the same set).
    The rank at position ``i`` of ``ranks`` is ring index ``i``: it holds
    zigzag chunks ``i`` and ``2d-1-i`` and sends to ``ranks[(i+1) % d]``.

    ``comm``: how the plan runs the group's attention (``"ring"`` or
    ``"all-to-all"``), what :func:`fcp.torch.attention` dispatches on.
    A CPGroup also keeps the per-micro-batch contexts of the attention calls
    made with it (:func:`fcp.torch.plan_micro_batch`): :meth:`GroupCache.for_micro_batch`
    returns a fresh one per micro-batch."""

    __slots__ = ("ranks", "process_group", "comm", "_contexts")

    def __init__(self, ranks: Sequence[int], process_group=None, comm="ring"):
        self.ranks = tuple(int(r) for r in ranks)
        if not self.ranks:
            raise ValueError("ranks: a group needs at least one rank")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"ranks: duplicate rank in {list(self.ranks)}")
        self.process_group = process_group
        self.comm = comm_name(comm)
        self._contexts = {}

    @property
    def degree(self) -> int:
        return len(self.ranks)

    def index(self, rank: int) -> int:
        return _ring_index(self.ranks, rank)

    def __contains__(self, rank: int) -> bool:
        return int(rank) in self.ranks

    def __repr__(self) -> str:
        return f"CPGroup(ranks={list(self.ranks)}, comm={self.comm!r})"


def _plan_micro_batch_groups(plan) -> list:
    """The group objects of every micro-batch of ``plan``, in order: plan
    objects, their ``to_dict()`` form or plain nested rank lists."""
    if isinstance(plan, dict):
        mbs = plan["micro_batches"]
    elif hasattr(plan, "micro_batches"):
        mbs = plan.micro_batches
    else:
        mbs = plan
    return [mb["groups"] if isinstance(mb, dict) else getattr(mb, "groups", mb) for mb in mbs]


def _group_ranks(g):
    """A group's ranks: a dict's ``"ranks"``, an object's ``.ranks``, or the
    bare rank list itself."""
    return g["ranks"] if isinstance(g, dict) else getattr(g, "ranks", g)


def _group_comm(g) -> str:
    """A group's ``comm``; groups without one (bare rank lists) are rings."""
    return g.get("comm", "ring") if isinstance(g, dict) else getattr(g, "comm", "ring")


def plan_groups(plan) -> List[List[List[int]]]:
    """Rank lists of every group of every micro-batch of ``plan``.

    Accepts an ``fcp`` plan object (``.micro_batches[i].groups[j].ranks``), its
    ``to_dict()`` form, or a plain ``[[ranks, ...], ...]`` list (one list of
    rank lists per micro-batch).
    """
    return [
        [[int(r) for r in _group_ranks(g)] for g in groups]
        for groups in _plan_micro_batch_groups(plan)
    ]


def plan_group_comms(plan) -> List[List[str]]:
    """``comm`` (``"ring"`` / ``"all-to-all"``) of every group of every
    micro-batch of ``plan``, in the order of :func:`plan_groups`; groups given
    as bare rank lists are rings."""
    return [
        [comm_name(_group_comm(g)) for g in groups] for groups in _plan_micro_batch_groups(plan)
    ]


def check_plan(plan, lengths, cluster=None):
    """The plan, checked before anything indexes by it, as an ``fcp.Plan``.

    The one door through which fcp.torch, fcp.hf and fcp.megatron take a plan
    they did not make themselves (``Plan.from_dict``, unpickled, another
    process's, a custom scheduler's): ``fcp.validate_plan`` (C++
    ``CheckPlanShape``, what ``Scheduler.estimate`` / ``observe`` and
    ``fcp simulate --plan`` use). ``plan``: an ``fcp.Plan`` or its
    ``to_dict()`` form; ``lengths``: the batch it was made for; ``cluster``:
    what ``fcp.validate_plan`` takes (a preset, an ``fcp.Cluster``, a dict, a
    rank count), default the ``torch.distributed`` world's size. Raises
    ValueError naming the field (``plan.micro_batches[0].groups[1].ranks[0]:
    ...``): an out-of-range rank or sequence index, or a plan of another
    cluster, never an IndexError later."""
    import fcp

    if isinstance(plan, dict):
        plan = fcp.Plan.from_dict(plan)
    if cluster is None:
        if not dist.is_initialized():
            raise ValueError("cluster: needed to check a plan outside torch.distributed")
        cluster = dist.get_world_size()
    fcp.validate_plan(lengths, plan, cluster)
    return plan


def plan_digest(plan) -> int:
    """A 56-bit digest (fits int64) of what a plan makes ranks do: every
    group's ranks (ring order), sequences and comm, per micro-batch."""
    h = hashlib.sha256()
    for ranks, sequences, comm in _plan_rows(plan):
        h.update(repr((ranks, sequences, comm)).encode() if ranks is not None else b"|")
    return int.from_bytes(h.digest()[:7], "little")


def _plan_rows(plan):
    for mb in plan.micro_batches:
        for g in mb.groups:
            yield [int(r) for r in g.ranks], [int(s) for s in g.sequences], comm_name(g.comm)
        yield None, None, None


def check_same_plan(plan, group=None, device: Optional[torch.device] = None) -> None:
    """Collective over ``group`` (default world): one all-reduce of the
    :func:`plan_digest` (MAX of d and -d), so every rank learns whether all
    ranks hold the same plan; raises RuntimeError on every rank when not.
    The check of fcp.hf and fcp.megatron before a global batch runs. No-op
    without ``torch.distributed``."""
    if not dist.is_initialized():
        return
    d = plan_digest(plan)
    dev = torch.device(device) if device is not None else _collective_device(group)
    t = torch.tensor([d, -d], dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    if int(t[0]) != d or int(t[1]) != -d:
        raise RuntimeError(
            "fcp: ranks planned different global batches (pass the same batches, "
            "Scheduler settings and seed on every rank)"
        )


def held_rank_sets(scheduler, cache: "GroupCache") -> Optional[List[List[int]]]:
    """The rank sets ``cache`` holds now (:meth:`GroupCache.rank_sets`) when
    ``scheduler`` charges new communicators (an ``fcp.Scheduler`` made with
    ``communicators={"create_s": S}``), else None. Take it on the training
    thread, where the cache changes, so every rank passes the same sets."""
    if getattr(scheduler, "charges_communicators", False):
        return cache.rank_sets()
    return None


def plan_with_held(
    scheduler,
    lengths: Sequence[int],
    held: Optional[List[List[int]]],
    vision_tokens: Optional[Sequence[int]] = None,
):
    """``scheduler.plan(lengths)``, told the communicators the runtime holds
    (``existing_communicators=held``) unless ``held`` is None, and each
    sequence's ``vision_tokens`` unless None: the one way fcp.hf and
    fcp.megatron ask for a plan, so the planner prefers groups that exist
    over new ones it would have to pay for. Arguments left None are not
    passed, so any object with ``fcp.Scheduler``'s ``plan`` will do."""
    return scheduler.plan(
        list(lengths), **_given(existing_communicators=held, vision_tokens=vision_tokens)
    )


def observe_with(
    scheduler, lengths: Sequence[int], plan, times, vision_tokens: Optional[Sequence[int]] = None
) -> dict:
    """``scheduler.observe(lengths, plan, times)``, told each sequence's
    ``vision_tokens`` unless None (then not passed, as in
    :func:`plan_with_held`): how fcp.hf and fcp.megatron learn from a batch."""
    return scheduler.observe(list(lengths), plan, times, **_given(vision_tokens=vision_tokens))


def _given(**kwargs) -> dict:
    """The keyword arguments that are not None (sequences as lists)."""
    return {k: list(v) for k, v in kwargs.items() if v is not None}


def _is_flat(plan) -> bool:
    """True for a flat list of rank lists ([[0, 1], [2]])."""
    return (
        isinstance(plan, (list, tuple))
        and len(plan) > 0
        and isinstance(plan[0], (list, tuple))
        and len(plan[0]) > 0
        and isinstance(plan[0][0], int)
    )


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

    ``coordinates`` / ``rank`` (fcp.megatron's rank grid): when the plan's
    ranks are positions in a group that repeats over other parallel
    dimensions (tensor, pipeline), ``coordinates`` lists each copy's global
    ranks (plan rank ``p`` of copy ``c`` is global rank ``coordinates[c][p]``)
    and ``rank`` is this process's global rank. Each rank set then gets one
    group per copy, created in copy order (``new_group`` is collective over
    the world), and the cache keeps the group of this process's copy. The
    keys, :meth:`rank_sets` and the :class:`CPGroup` ranks stay plan ranks.

    ``new_group`` / ``destroy_group`` may be replaced (testing without a
    process group; ``new_group`` receives global ranks); ``backend`` and
    ``timeout`` are passed to ``torch.distributed.new_group``. ``timeout``
    (a ``datetime.timedelta`` or seconds) defaults to :data:`DEFAULT_TIMEOUT`,
    5 minutes: a collective on a group whose peer died or exited early fails
    with torch's timeout error after that long instead of hanging for torch's
    30-minute default.
    ``timeout=None`` leaves torch's default.
    """

    def __init__(
        self,
        max_groups: Optional[int] = 64,
        backend: Optional[str] = None,
        timeout=DEFAULT_TIMEOUT,
        new_group: Optional[Callable] = None,
        destroy_group: Optional[Callable] = None,
        coordinates: Optional[Sequence[Sequence[int]]] = None,
        rank: Optional[int] = None,
    ):
        if max_groups is not None and int(max_groups) < 1:
            raise ValueError(f"max_groups: must be >= 1 or None, got {max_groups}")
        self.max_groups = None if max_groups is None else int(max_groups)
        self._backend = backend
        if timeout is not None and not isinstance(timeout, datetime.timedelta):
            seconds = float(timeout)
            if not math.isfinite(seconds) or seconds <= 0:
                raise ValueError(f"timeout: must be > 0 seconds, got {timeout!r}")
            timeout = datetime.timedelta(seconds=seconds)
        self._timeout = timeout
        self._new_group = new_group
        self._destroy_group = destroy_group
        self._coordinates = None
        if coordinates is not None:
            self._coordinates = [tuple(int(r) for r in c) for c in coordinates]
            if rank is None or not any(int(rank) in c for c in self._coordinates):
                raise ValueError(f"rank: {rank} is in none of the coordinates")
            self._own = next(i for i, c in enumerate(self._coordinates) if int(rank) in c)
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
        return {
            "groups": len(self._groups),
            "hits": self.hits,
            "misses": self.misses,
            "created": len(self.created),
            "evicted": len(self.evicted),
            "create_s": self.create_seconds,
        }

    def _new(self, global_ranks: List[int]):
        if self._new_group is not None:
            return self._new_group(global_ranks)
        kwargs = {}
        if self._backend is not None:
            kwargs["backend"] = self._backend
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        return dist.new_group(ranks=global_ranks, **kwargs)

    def _create(self, key: Tuple[int, ...]):
        start = time.perf_counter()
        if self._coordinates is None:
            pg = self._new(list(key))
        else:  # one group per copy, every process in the same order
            for i, coord in enumerate(self._coordinates):
                made = self._new([coord[p] for p in key])
                if i == self._own:
                    pg = made
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

    def rank_sets(self) -> List[List[int]]:
        """The rank sets of two or more ranks cached now, the same list on
        every rank: what ``fcp.Scheduler.plan(existing_communicators=...)``
        charges nothing to reuse."""
        return [list(k) for k in self._groups if len(k) > 1]

    def prepare(self, plan, *, lengths=None, cluster=None) -> int:
        """Collective: creates every missing group of ``plan`` (any form
        :func:`plan_groups` accepts, or a flat list of rank lists), marks the
        plan's groups most recently used and evicts beyond ``max_groups``.
        All ranks must call it with the same plan. Returns the number created
        now. With ``lengths`` (the batch the plan was made for), the plan is
        first checked by :func:`check_plan` on ``cluster`` (default: the
        world's size): pass them for a plan from outside the planner."""
        if lengths is not None:
            plan = check_plan(plan, lengths, cluster)
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

    def get(self, ranks: Sequence[int], comm="ring") -> CPGroup:
        """The cached group for ``ranks`` (ring order kept), as a new
        :class:`CPGroup` with ``comm``. A miss creates it, which is a
        collective: call :meth:`prepare` first."""
        key = self._key(ranks)
        pg = self._groups[key] if key in self._groups else self._create(key)
        return CPGroup(ranks, pg, comm)

    def for_micro_batch(self, micro_batch_groups, rank: Optional[int] = None) -> Optional[CPGroup]:
        """Collective: prepares all groups of one micro-batch (a list of rank
        lists, or a plan's micro-batch object/dict) and returns the group that
        contains ``rank`` (default: this process's rank), or None when the
        rank is idle in this micro-batch (it then skips the micro-batch's
        compute but still joins the gradient reduction). The group's ``comm``
        is the plan group's (``"ring"`` for bare rank lists)."""
        mb = plan_groups([micro_batch_groups])[0]
        comms = plan_group_comms([micro_batch_groups])[0]
        self.prepare([mb])
        if rank is None:
            rank = dist.get_rank()
        for ranks, comm in zip(mb, comms):
            if int(rank) in ranks:
                return self.get(ranks, comm)
        return None

    def clear(self) -> None:
        """Collective: destroys every cached group (oldest first)."""
        for key in list(self._groups):
            self._destroy(key)


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


def gather_times(
    mine: Sequence[float], group=None, device: Optional[torch.device] = None
) -> List[List[float]]:
    """Every rank's list of floats (all the same length), by rank of
    ``group`` (default world): one all-gather on ``device``. Without a
    process group: ``[mine]``."""
    mine = [float(t) for t in mine]
    if not dist.is_initialized():
        return [mine]
    dev = torch.device(device) if device is not None else _collective_device(group)
    t = torch.tensor(mine, dtype=torch.float64, device=dev)
    rows = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, t, group=group)
    return [row.tolist() for row in rows]


def group_times(
    plan,
    my_times_s: Sequence[float],
    group=None,
    device: Optional[torch.device] = None,
    *,
    coordinates: Optional[Sequence[Sequence[int]]] = None,
    gather: Optional[Callable[[List[float]], List[List[float]]]] = None,
) -> List[List[float]]:
    """Each group's measured time (s) for ``fcp.Scheduler.observe``.

    ``my_times_s``: this rank's time in each micro-batch of ``plan`` (e.g. from
    its group's first forward to its last backward, with CUDA events), NaN
    where the rank is idle. Gathers every rank's list over ``group`` (default
    world, whose ranks must be the plan's ranks in order; one all-gather on
    ``device``) and returns, per micro-batch, the time of each of its groups:
    the slowest of the group's ranks (NaN when none of them measured).
    Every rank gets the same lists, so every rank learns the same
    coefficients. Collective; without a process group ``my_times_s`` are the
    times of every rank (a one-rank world). ``coordinates`` (as in
    :class:`GroupCache`): the plan repeats over copies, plan rank ``p`` of
    copy ``c`` is rank ``coordinates[c][p]`` of the gather, and a group's time
    is the slowest of its ranks over every copy. ``gather``: replaces the
    all-gather (a function of this rank's list returning every rank's).
    Raises ValueError when the count is not the plan's micro-batch count."""
    groups = plan_groups(plan)
    mine = [float(t) for t in my_times_s]
    if len(mine) != len(groups):
        raise ValueError(
            f"my_times_s: needs one time per micro-batch ({len(groups)}), got {len(mine)}"
        )
    by_rank = gather(mine) if gather is not None else gather_times(mine, group, device)
    copies = [tuple(c) for c in coordinates] if coordinates is not None else [None]
    out = []
    for j, mb in enumerate(groups):
        times = []
        for ranks in mb:
            members = [r if c is None else c[r] for c in copies for r in ranks]
            seen = [
                by_rank[r][j] for r in members if r < len(by_rank) and not math.isnan(by_rank[r][j])
            ]
            times.append(max(seen) if seen else float("nan"))
        out.append(times)
    return out
