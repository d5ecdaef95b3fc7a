"""fcp.megatron in one process, against the real megatron-core 0.19.2 classes.

Runs in the Megatron venv (.venv312, ctest python_megatron): a missing
megatron-core or fcp module fails here, it is never skipped. Multi-process
checks (process groups, RoPE, loss) are in test_megatron_dist.py.
"""

import copy
import inspect
import threading

import pytest
import torch

import fcp
import fcp.megatron as fm
from megatron.core.packed_seq_params import PackedSeqParams

assert fcp._fcp is not None, f"fcp._fcp is not built for this interpreter: {fcp._IMPORT_ERROR}"

TOY_COST = {"mem_per_token": 1.0, "mem_static": 1.0, "mem_capacity": 65.0}
LENGTHS = [150, 20, 33, 7, 90, 12, 40, 64, 5, 100]


def toy_scheduler(ranks=4):
    return fcp.Scheduler(
        cluster={"ranks": ranks, "ranks_per_node": ranks},
        model="qwen3-1.7b",
        strategy="fcp-ring",
        cost_model=TOY_COST,
    )


def test_supported_version_is_installed():
    assert fm.SUPPORTED_MEGATRON_CORE == "0.19.2"
    assert fm.check_megatron_version(strict=True) == "0.19.2"


@pytest.mark.parametrize(
    "n,d,m,want",
    [
        (1, 1, 1, 1),
        (7, 1, 1, 7),
        (7, 1, 4, 8),
        (5, 2, 1, 8),
        (8, 2, 1, 8),
        (9, 3, 1, 12),
        (9, 3, 2, 12),
        (13, 3, 2, 24),
    ],
)
def test_padded_length(n, d, m, want):
    assert fm.padded_length(n, d, m) == want


def test_padded_length_rejects_bad_input():
    with pytest.raises(ValueError, match="seq_len/degree/multiple"):
        fm.padded_length(0, 2)


@pytest.mark.parametrize("degree", [1, 2, 3, 5])
def test_partition_is_te_rule_and_covers_everything(degree):
    padded = [fm.padded_length(n, degree) for n in (3, 17, 40)]
    seen = []
    for r in range(degree):
        idx = fm.thd_partition_indices(padded, degree, r)
        # Oracle: each sequence viewed as [2d, n/(2d)]; rows r and 2d-1-r.
        want, off = [], 0
        for n in padded:
            if degree == 1:
                want += list(range(off, off + n))
                off += n
                continue
            rows = torch.arange(off, off + n).view(2 * degree, -1)
            want += rows[r].tolist() + rows[2 * degree - 1 - r].tolist()
            off += n
        assert idx.tolist() == want
        seen += want
    assert sorted(seen) == list(range(sum(padded)))


def test_partition_rejects_undivisible_lengths():
    with pytest.raises(ValueError, match="padded_lengths"):
        fm.thd_partition_indices([10], 3, 0)


def _samples(lengths):
    return [
        {
            "tokens": torch.arange(n) + 1000 * i,
            "labels": torch.arange(n) + 1,
            "loss_mask": torch.ones(n),
        }
        for i, n in enumerate(lengths)
    ]


def test_packer_fills_megatron_packed_seq_params():
    batch, p = fm.MicroBatchPacker(pad_token=7).pack(
        _samples([5, 9]), degree=2, cp_rank=1, cp_group="group-object"
    )
    assert isinstance(p, PackedSeqParams) and isinstance(p, fm.FcpPackedSeqParams)
    assert p.qkv_format == "thd" and p.local_cp_size == 2 and p.cp_group == "group-object"
    assert p.cp_comm_type == "p2p" and p.pad_between_seqs is None
    # Megatron 0.19.2 (pretrain_gpt.py, forward_step): cu_seqlens_q is the
    # padded boundaries too; sequences padded to a multiple of 2*degree.
    assert p.cu_seqlens_q.tolist() == [0, 8, 20] == p.cu_seqlens_kv.tolist()
    assert p.cu_seqlens_q_padded.tolist() == [0, 8, 20] == p.cu_seqlens_kv_padded.tolist()
    assert p.cu_seqlens_q.dtype == torch.int32
    assert p.max_seqlen_q == p.max_seqlen_kv == 12
    # rank 1 of 2: chunks 1 and 2 of 4 of each padded sequence
    assert batch["position_ids"].tolist() == [[2, 3, 4, 5, 3, 4, 5, 6, 7, 8]]
    assert batch["tokens"].tolist() == [[2, 3, 4, 7, 1003, 1004, 1005, 1006, 1007, 1008]]
    assert batch["loss_mask"].tolist() == [[1, 1, 1, 0, 1, 1, 1, 1, 1, 1]]
    assert all(v.shape == (1, 10) for v in batch.values())


def test_packer_degree_one_carries_its_group_and_idle_is_masked():
    pk = fm.MicroBatchPacker(multiple=2)
    batch, p = pk.pack(_samples([3, 5]), 1, 0, cp_group="one-rank-group")
    # Every micro-batch carries a cp_group (Megatron dev asserts it whenever
    # local_cp_size is set); a one-rank group runs TE without CP.
    assert p.cp_group == "one-rank-group" and p.local_cp_size == 1
    assert batch["tokens"].shape == (1, 10)  # padded to multiple=2 only
    assert p.cu_seqlens_q.tolist() == [0, 4, 10] == p.cu_seqlens_q_padded.tolist()
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 5]]
    _, q1 = fm.MicroBatchPacker().pack(_samples([3, 5]))
    assert q1.cu_seqlens_q_padded.tolist() == q1.cu_seqlens_q.tolist() == [0, 3, 8]
    idle, q = pk.idle(_samples([3])[0], cp_group="one-rank-group")
    assert q.local_cp_size == 1 and q.cp_group == "one-rank-group"
    assert idle["loss_mask"].sum() == 0 and idle["tokens"].shape == (1, 4)
    with pytest.raises(ValueError, match="cp_comm_type"):
        pk.pack(_samples([3]), 1, 0, "g", cp_comm_type="ring")


def test_packer_rejects_mismatched_sample():
    s = _samples([4])
    s[0]["labels"] = torch.arange(3)
    with pytest.raises(ValueError, match="samples\\[labels\\]"):
        fm.MicroBatchPacker().pack(s)


def test_rank_grid_validation():
    with pytest.raises(ValueError, match="rank"):
        fm.RankGrid([[0, 2], [1, 3]], 5)
    with pytest.raises(ValueError, match="coordinates"):
        fm.RankGrid([[0, 2], [1]], 0)
    with pytest.raises(ValueError, match="coordinates"):
        fm.RankGrid([[0, 1], [1, 3]], 0)
    g = fm.RankGrid([[1, 3, 5, 7], [0, 2, 4, 6]], 5)
    assert g.coordinates == [(0, 2, 4, 6), (1, 3, 5, 7)] and g.plan_rank == 2 and g.size == 4
    assert g.global_ranks([0, 3]) == [1, 7] and g.global_ranks([0, 3], 0) == [0, 6]


def _scheduler_on(grid, created, **kw):
    cache = fm.CPGroupCache(grid, new_group=lambda r: created.append(tuple(r)) or ("pg", tuple(r)))
    return fm.FcpCPScheduler(toy_scheduler(grid.size), grid=grid, cache=cache, verify=False, **kw)


def test_cluster_must_match_dp_cp_size():
    with pytest.raises(ValueError, match="cluster.ranks"):
        fm.FcpCPScheduler(toy_scheduler(4), grid=fm.RankGrid([[0, 1]], 0), verify=False)


def test_megatron_scheduler_interface_follows_the_plan():
    sched = _scheduler_on(fm.RankGrid([[0, 1, 2, 3]], 0), [], background=False)
    ids = [10 + i for i in range(len(LENGTHS))]
    groups, sample_id_groups = sched.get_groups_and_subsamples(list(zip(ids, LENGTHS)), None)
    plan = toy_scheduler().plan(LENGTHS)
    assert len(sample_id_groups) == len(plan.micro_batches) == len(groups)
    for j, mb in enumerate(plan.micro_batches):
        assert len(sample_id_groups[j]) == 4
        for g in mb.groups:
            for s in g.sequences:
                # Megatron's hybrid schedule derives local_cp_size as the number
                # of ranks listing a sample in the micro-batch.
                holders = [p for p in range(4) if ids[s] in sample_id_groups[j][p]]
                assert holders == sorted(g.ranks)
        for p in range(4):
            assert groups[j][p] == [LENGTHS[ids.index(i)] for i in sample_id_groups[j][p]]
    assert sorted(i for mb in sample_id_groups for i in set().union(*map(set, mb))) == ids


def test_groups_created_once_per_set_and_coordinate_in_plan_order():
    created = []
    grid = fm.RankGrid([[0, 2, 4, 6], [1, 3, 5, 7]], 3)  # TP = 2: two coordinates
    sched = _scheduler_on(grid, created, background=False)
    plan = sched.take(LENGTHS)
    steps = sched.assignments(plan)
    # fcp.torch.GroupCache's canonical order, the same on every rank: the
    # one-rank groups first, then the plan's sets by degree, then by ranks.
    sets = {(p,) for p in range(grid.size)}
    sets |= {tuple(sorted(g.ranks)) for mb in plan.micro_batches for g in mb.groups}
    sets = sorted(sets, key=lambda k: (len(k), k))
    assert created == [tuple(c[p] for p in key) for key in sets for c in grid.coordinates]
    sched.assignments(plan)
    assert len(created) == 2 * len(sets)  # cached on the second pass
    for a, mb in zip(steps, plan.micro_batches):
        g = [g for g in mb.groups if 1 in g.ranks]
        if not g:
            assert a.sequences == [] and a.degree == 1
            assert a.cp_group == ("pg", (grid.global_ranks([1])[0],))  # idle: own group
            continue
        assert a.sequences == list(g[0].sequences) and a.plan_ranks == sorted(g[0].ranks)
        assert a.cp_rank == a.plan_ranks.index(1) and a.cp_comm_type == "p2p"
        want = ("pg", tuple(grid.global_ranks(a.plan_ranks)))
        assert a.cp_group == want  # this rank's TP coordinate


class _BlockingScheduler:
    """fcp.Scheduler that holds each plan until released, and notes the thread."""

    def __init__(self):
        self.inner = toy_scheduler()
        self.cluster = self.inner.cluster
        self.release = threading.Event()
        self.threads = []

    def plan(self, lengths):
        self.threads.append(threading.current_thread().name)
        self.release.wait(60)
        return self.inner.plan(lengths)


def test_planning_runs_off_the_training_thread():
    blocking = _BlockingScheduler()
    grid = fm.RankGrid([[0, 1, 2, 3]], 0)
    sched = fm.FcpCPScheduler(
        blocking, grid=grid, verify=False, cache=fm.CPGroupCache(grid, new_group=lambda r: None)
    )
    loader = fm.FcpMegatronLoader(sched, [fm.GlobalBatch.from_samples(_samples(LENGTHS))] * 2)
    # The constructor returned while batch 0 was still being planned.
    assert not blocking.release.is_set()
    blocking.release.set()
    it, n = loader.next_global_batch()
    assert n == len(list(it))
    loader.next_global_batch()
    with pytest.raises(StopIteration):
        loader.next_global_batch()
    sched.close()
    assert blocking.threads and all(t.startswith("fcp-plan") for t in blocking.threads)
    assert len(sched.exposed_planning_s) == 2 and len(sched.planning_s) == 2


class _RecordingScheduler:
    """fcp.Scheduler that charges new communicators and notes the rank sets
    each plan call was told the cache holds."""

    def __init__(self):
        self.inner = fcp.Scheduler(
            cluster={"ranks": 4, "ranks_per_node": 4},
            model="qwen3-1.7b",
            strategy="fcp-ring",
            cost_model=TOY_COST,
            communicators={"create_s": 0.001},
        )
        self.cluster = self.inner.cluster
        self.charges_communicators = True
        self.held = []

    def plan(self, lengths, existing_communicators=None):
        self.held.append(existing_communicators)
        return self.inner.plan(lengths, existing_communicators=existing_communicators)


def test_plans_are_told_the_groups_the_cache_holds():
    grid = fm.RankGrid([[0, 1, 2, 3]], 0)
    rec = _RecordingScheduler()
    sched = fm.FcpCPScheduler(
        rec,
        grid=grid,
        verify=False,
        background=False,
        cache=fm.CPGroupCache(grid, new_group=lambda r: ("pg", tuple(r))),
    )
    sched.assignments(sched.take(LENGTHS))
    held_after_first = sched.cache.rank_sets()
    assert held_after_first  # the first plan created groups
    sched.take(LENGTHS[::-1])
    assert rec.held == [[], held_after_first]
    # A plain fcp.Scheduler (no communicators) is called as before.
    plain = _scheduler_on(grid, [], background=False)
    assert plain._held_sets() is None


def test_take_checks_submission_order():
    sched = _scheduler_on(fm.RankGrid([[0, 1, 2, 3]], 0), [])
    sched.submit(LENGTHS)
    with pytest.raises(ValueError, match="lengths"):
        sched.take(LENGTHS[:-1])
    sched.close()


def test_loss_func_is_megatron_per_token_triple():
    loss, n, report = fm.loss_func(
        torch.tensor([[1.0, 0.0, 1.0]]),
        torch.tensor([[2.0, float("nan"), 3.0]], dtype=torch.float64),
    )
    assert float(loss) == 5.0 and int(n) == 2 and report["lm loss"].tolist() == [5.0, 2.0]


def test_no_megatron_globals_are_assigned():
    src = inspect.getsource(fm)
    assert not hasattr(fm, "MegatronCPAdapter")
    assert "parallel_state._" not in src and "setattr(" not in src


def _plan_with_all_to_all(lengths):
    sched = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b", strategy="fcp")
    plan = sched.plan(lengths)
    kinds = {g.comm.name for mb in plan.micro_batches for g in mb.groups}
    assert "ALL_TO_ALL" in kinds, f"this batch must plan all-to-all groups, got {kinds}"
    return sched, plan


def test_all_to_all_groups_run_as_te_a2a():
    # strategy="fcp" puts some groups on all-to-all (Ulysses); each micro-batch
    # tells TE its comm type: "a2a" for those, "p2p" for ring groups.
    lengths = [65536] * 8  # qwen3-8b on h100-8x8: ring and all-to-all groups of 8
    sched, plan = _plan_with_all_to_all(lengths)
    n = sched.cluster.num_ranks
    for me in range(0, n, 4):
        grid = fm.RankGrid([list(range(n))], me)
        cache = fm.CPGroupCache(grid, new_group=lambda r: ("pg", tuple(r)))
        wrapped = fm.FcpCPScheduler(sched, grid=grid, verify=False, background=False, cache=cache)
        steps = wrapped.assignments(wrapped.take(lengths))
        for a, mb in zip(steps, plan.micro_batches):
            g = [g for g in mb.groups if me in g.ranks]
            if not g:
                continue
            want = {"RING": "p2p", "ALL_TO_ALL": "a2a"}[g[0].comm.name]
            assert a.cp_comm_type == want
            data, params = fm.MicroBatchPacker().pack(
                _samples([lengths[s] for s in a.sequences]),
                a.degree,
                a.cp_rank,
                a.cp_group,
                a.cp_comm_type,
            )
            assert params.cp_comm_type == want and params.local_cp_size == a.degree
            # same THD layout as a ring group: TE's a2a reorders chunks itself
            assert (
                data["tokens"].shape[1]
                == sum(fm.padded_length(lengths[s], a.degree) for s in a.sequences) // a.degree
            )


class _ObservingScheduler:
    """fcp.Scheduler stand-in that records what observe() is given."""

    def __init__(self, ranks):
        self.inner = toy_scheduler(ranks)
        self.cluster = self.inner.cluster
        self.seen = []

    def plan(self, lengths):
        return self.inner.plan(lengths)

    def observe(self, lengths, plan, times):
        self.seen.append((lengths, times))
        return {"groups": sum(len(mb) for mb in times)}


def test_observe_takes_each_groups_slowest_rank_over_every_coordinate():
    # Two TP coordinates; rank r measured 1 + r/10 s in micro-batch j (NaN on
    # ranks 5 and 7). A group's time is the largest over its plan ranks in
    # both coordinates, NaN ignored (the oracle below recomputes it).
    grid = fm.RankGrid([[0, 2, 4, 6], [1, 3, 5, 7]], 3)
    rec = _ObservingScheduler(4)
    sent = []

    def gather(mine):
        sent.append(mine)
        return [
            [float("nan") if r in (5, 7) else 1 + r / 10 + j for j in range(len(mine))]
            for r in range(8)
        ]

    sched = fm.FcpCPScheduler(
        rec,
        grid=grid,
        verify=False,
        background=False,
        gather_times=gather,
        cache=fm.CPGroupCache(grid, new_group=lambda r: None),
    )
    plan = sched.take(LENGTHS)
    n = len(plan.micro_batches)
    with pytest.raises(ValueError, match="^my_times_s"):
        sched.observe(plan, LENGTHS, [0.5] * (n + 1))
    assert sched.observe(plan, LENGTHS, [0.5] * n)["groups"] > 0
    assert sent == [[0.5] * n]
    lengths, times = rec.seen[0]
    assert lengths == LENGTHS
    for j, mb in enumerate(plan.micro_batches):
        for g, t in zip(mb.groups, times[j]):
            members = [c[p] for c in grid.coordinates for p in g.ranks if c[p] not in (5, 7)]
            assert t == max(1 + r / 10 + j for r in members)


def test_loader_times_its_micro_batches_and_learns(monkeypatch):
    # On CPU the loader times micro-batches with the host clock: from one
    # hand-out to the next, the last to mark_end(); idle micro-batches are NaN.
    # observe() recalibrates the fcp.Scheduler; the batch already read ahead
    # keeps the coefficients it was submitted with.
    grid = fm.RankGrid([[0, 1, 2, 3]], 0)
    planner = toy_scheduler()
    sched = fm.FcpCPScheduler(
        planner,
        grid=grid,
        verify=False,
        background=True,
        gather_times=lambda mine: [mine] * 4,
        cache=fm.CPGroupCache(grid, new_group=lambda r: None),
    )
    batches = [
        fm.GlobalBatch.from_samples(_samples(LENGTHS)),
        fm.GlobalBatch.from_samples(_samples(LENGTHS[::-1])),
    ]
    loader = fm.FcpMegatronLoader(sched, batches)
    with pytest.raises(RuntimeError, match="^observe"):
        loader.observe()
    assert isinstance(loader._stamp(), float)  # the host clock on CPU
    clock = iter(range(100))
    monkeypatch.setattr(loader, "_stamp", lambda: 0.25 * next(clock))
    it, n = loader.next_global_batch()
    with pytest.raises(RuntimeError, match="^micro_batch_times"):
        loader.micro_batch_times()
    for _ in it:
        pass
    loader.mark_end()
    steps = sched.assignments(loader._current[1])
    times = loader.micro_batch_times()
    assert len(times) == n
    for t, a in zip(times, steps):
        assert (t != t) if not a.sequences else t == 0.25
    before = planner.cost_model
    got = loader.observe([0.5] * n)
    assert got["groups"] > 0 and planner.calibration == got
    assert planner.cost_model.alpha2 != before.alpha2
    # The read-ahead batch was planned with the coefficients before observe().
    plan2 = sched.take(LENGTHS[::-1])
    stale = fcp.Scheduler(
        cluster={"ranks": 4, "ranks_per_node": 4},
        model="qwen3-1.7b",
        strategy="fcp-ring",
        cost_model=TOY_COST,
    ).plan(LENGTHS[::-1])
    assert plan2.to_dict()["micro_batches"] == stale.to_dict()["micro_batches"]
    sched.close()


def test_loader_plans_and_learns_with_the_vision_tokens_given():
    # A GlobalBatch may say how many of each sequence's tokens are image or
    # frame tokens: the scheduler plans, checks and learns with them as
    # fcp.Scheduler.plan / observe(..., vision_tokens=) do.
    def vl_scheduler():
        return fcp.Scheduler(
            cluster={"ranks": 4, "ranks_per_node": 4}, model="internvl3-2b", strategy="fcp-ring"
        )

    lengths = [60000, 4000, 3000, 200, 100, 50]
    visions = [50000, 0, 3000, 0, 100, 0]
    grid = fm.RankGrid([[0, 1, 2, 3]], 0)
    sched = fm.FcpCPScheduler(
        vl_scheduler(),
        grid=grid,
        verify=False,
        gather_times=lambda mine: [mine] * 4,
        cache=fm.CPGroupCache(grid, new_group=lambda r: None),
    )
    samples = [{"tokens": torch.arange(3), "labels": torch.arange(3)} for _ in lengths]
    batch = fm.GlobalBatch(lengths, samples.__getitem__, visions)
    assert fm.GlobalBatch.from_samples(samples, visions).vision_tokens == visions
    loader = fm.FcpMegatronLoader(sched, [batch])
    with pytest.raises(ValueError, match="^vision_tokens: differ from the batch submitted first"):
        sched.take(lengths)
    loader = fm.FcpMegatronLoader(sched, [batch])
    loader.next_global_batch()
    plan = loader._current[1]
    want = vl_scheduler()
    assert plan.est_ms == want.plan(lengths, vision_tokens=visions).est_ms
    assert plan.est_ms > want.plan(lengths).est_ms  # the vision encoder is priced
    mine = [2.0 * mb.est_ms / 1000 for mb in plan.micro_batches]
    learnt = loader.observe(mine)
    times = [[t] * len(mb.groups) for t, mb in zip(mine, plan.micro_batches)]
    assert learnt == want.observe(lengths, plan, times, vision_tokens=visions)
    assert learnt != vl_scheduler().observe(lengths, plan, times)
    sched.close()


# --------------------------------------------------------------------------- TransformerEngine side


def test_prepare_model_says_transformer_engine_is_missing():
    # This venv has no TransformerEngine: megatron-core defines its TE classes
    # on a MagicMock, and prepare_model must say so instead of an AttributeError.
    from megatron.core.extensions import transformer_engine as mte

    assert not mte.HAVE_TE
    with pytest.raises(RuntimeError, match="prepare_model: fcp.megatron needs TransformerEngine"):
        fm.prepare_model(torch.nn.Linear(2, 2))


class _FakeTEAttention(torch.nn.Module):
    """Stands in for Megatron's TEDotProductAttention: records what TE's
    set_context_parallel_group gets and what Megatron's forward then sees."""

    def __init__(self, heads=4, kv_heads=2, tp=1):
        super().__init__()
        self.num_attention_heads, self.tp_size = heads, tp
        self.num_gqa_groups_per_partition = kv_heads // tp
        self.calls, self.seen = [], []

    def set_context_parallel_group(self, group, ranks, stream, comm_type):
        self.calls.append((group, ranks, stream, comm_type))

    def forward(self, query, packed_seq_params=None):
        self.seen.append(packed_seq_params)
        return query


def test_te_hook_sets_group_stream_and_comm_type_per_call(monkeypatch):
    import torch.distributed as dist

    sizes = {"g2": 2, "g4": 4, "g1": 1}
    monkeypatch.setattr(dist, "get_world_size", lambda g: sizes[g])
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda g: list(range(sizes[g])))
    model = torch.nn.Sequential(_FakeTEAttention(), _FakeTEAttention())
    cores = fm.hook_te_attention(model, _FakeTEAttention, stream="fcp-stream")
    assert len(cores) == 2
    pk = fm.MicroBatchPacker()
    for group, degree, comm in (("g2", 2, "a2a"), ("g4", 4, "p2p"), ("g1", 1, "p2p")):
        _, params = pk.pack(_samples([8]), degree, 0, group, comm)
        model[0](torch.zeros(1), packed_seq_params=params)
        ranks = list(range(degree)) if degree > 1 else None
        want = (group if degree > 1 else None, ranks, "fcp-stream" if degree > 1 else None, comm)
        assert cores[0].calls[-1] == want
        seen = cores[0].seen[-1]
        # Megatron's forward gets no group to re-point TE with (its class-level
        # stream would be None); the micro-batch's own parameters are untouched.
        assert seen.cp_group is None and seen.local_cp_size is None
        assert params.cp_group == group and params.local_cp_size == degree
        assert seen.cu_seqlens_q is params.cu_seqlens_q
    assert cores[1].calls == []


def test_te_hook_refuses_a2a_when_heads_do_not_divide(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_world_size", lambda g: 3)
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda g: [0, 1, 2])
    core = _FakeTEAttention(heads=12, kv_heads=4)
    fm.hook_te_attention(core, _FakeTEAttention, stream="s")
    _, params = fm.MicroBatchPacker().pack(_samples([12]), 3, 0, "g3", "a2a")
    with pytest.raises(ValueError, match="key/value heads per TP rank divisible by 3"):
        core(torch.zeros(1), packed_seq_params=params)
    _, ring = fm.MicroBatchPacker().pack(_samples([12]), 3, 0, "g3", "p2p")
    core(torch.zeros(1), packed_seq_params=ring)  # a ring group does not care
    assert core.calls[-1][3] == "p2p"


def test_no_megatron_class_attribute_is_assigned():
    src = inspect.getsource(fm)
    assert "TEDotProductAttention.cp_stream =" not in src and ".pg_collection.cp =" not in src


# --------------------------------------------------------------------------- dev's door


def _dev_contract(sample_id_groups, sample_id_seqlens, n, min_cp=1):
    """What Megatron-LM dev (d48bd6be0a85) needs from get_groups_and_subsamples,
    re-derived from its data_schedule.py: a list over micro-batches of N lists
    of sample ids; every sample exactly once over the batch; no empty list
    (build_packed_microbatches reads list[0]); a sample's holders form the
    group parallel_state.get_dynamic_data_context_parallel_groups(size) gives
    each holder (aligned power-of-two block, or all N ranks)."""
    seen = set()
    for mb in sample_id_groups:
        assert len(mb) == n and all(isinstance(r, list) and r for r in mb)
        for p, ids in enumerate(mb):
            holders = [q for q in range(n) if ids[0] in mb[q]]
            d = len(holders)
            assert d >= min_cp and (d == n or (d & (d - 1) == 0 and holders[0] % d == 0))
            assert holders == list(range(holders[0], holders[0] + d)) and p in holders
            assert all(mb[q] == ids for q in holders)  # one group per rank per micro-batch
        seen.update(i for ids in mb for i in ids)
    assert seen == {i for i, _ in sample_id_seqlens}


class _FixedPlanner:
    """fcp.Scheduler stand-in returning a given plan (ranks, sequences per group)."""

    def __init__(self, n, micro_batches):
        from types import SimpleNamespace as NS

        self.cluster = NS(num_ranks=n)
        self._plan = NS(
            status=NS(name="OK"),
            message="",
            micro_batches=[
                NS(groups=[NS(ranks=r, sequences=s) for r, s in mb]) for mb in micro_batches
            ],
        )

    def plan(self, lengths):
        return self._plan


def test_packing_scheduler_has_dev_constructor_and_answer():
    seqlens = [(100 + i, n) for i, n in enumerate([4000, 900, 800, 700, 600, 500])]
    planner = _FixedPlanner(
        4, [[([0, 1, 2, 3], [0])], [([0, 1], [1]), ([2], [2, 3]), ([3], [4, 5])]]
    )
    cls = fm.FcpPackingScheduler.bind(planner)
    # wrap_data_iterator's call: (max_seqlen_per_dp_cp_rank, cp_size, dp_size,
    # microbatch_group_size_per_vp_stage, max_num_seqs=..., min_cp_size=...)
    sched = cls(2048, 2, 2, None, max_num_seqs=None, min_cp_size=1)
    groups = sched.get_groups_and_subsamples(seqlens)
    _dev_contract(groups, seqlens, 4)
    assert groups == [[[100]] * 4, [[101], [101], [102, 103], [104, 105]]]


@pytest.mark.parametrize(
    "mb,match",
    [
        ([([1, 2], [0, 1, 2, 3, 4, 5])], "ranks \\[1, 2\\]"),  # not an aligned block
        ([([0, 1, 2], [0, 1, 2, 3, 4, 5])], "degree 3"),  # not a power of two
        ([([0, 1], [0, 1, 2, 3, 4, 5])], "idle"),  # ranks 2, 3 idle
    ],
)
def test_packing_scheduler_refuses_what_dev_cannot_run(mb, match):
    seqlens = [(i, 100) for i in range(6)]
    sched = fm.FcpPackingScheduler(2048, 4, 1, planner=_FixedPlanner(4, [mb]))
    with pytest.raises(ValueError, match=match):
        sched.get_groups_and_subsamples(seqlens)


@pytest.mark.parametrize(
    "lengths", [[200, 60, 60, 60, 60, 60, 60, 60, 30, 30, 30, 30], [200, 180, 250, 220], [64] * 8]
)
def test_packing_scheduler_with_the_real_planner(lengths):
    # Oracle: from the fcp plan itself, whether dev could run it as planned
    # (aligned power-of-two groups or all ranks, no idle rank); then either
    # dev's contract holds or the refusal says why.
    plan = toy_scheduler(4).plan(lengths)

    def runnable(mb):
        busy = sorted(p for g in mb.groups for p in g.ranks)
        blocks = all(
            len(g.ranks) == 4
            or (len(g.ranks) & (len(g.ranks) - 1) == 0 and min(g.ranks) % len(g.ranks) == 0)
            for g in mb.groups
        )
        return blocks and busy == [0, 1, 2, 3]

    seqlens = list(enumerate(lengths))
    sched = fm.FcpPackingScheduler(64, 2, 2, planner=toy_scheduler(4))
    if all(runnable(mb) for mb in plan.micro_batches):
        groups = sched.get_groups_and_subsamples(seqlens)
        _dev_contract(groups, seqlens, 4)
        assert len(groups) == len(plan.micro_batches)
    else:
        with pytest.raises(ValueError, match="Megatron dev"):
            sched.get_groups_and_subsamples(seqlens)


def test_packing_scheduler_checks_its_inputs():
    with pytest.raises(ValueError, match="cluster.ranks"):
        fm.FcpPackingScheduler(64, 2, 4, planner=toy_scheduler(4))
    with pytest.raises(ValueError, match="planner"):
        fm.FcpPackingScheduler(64, 2, 2)
    with pytest.raises(ImportError):  # 0.19.2 has no BasePackingScheduler door
        fm.FcpPackingScheduler.megatron_class(toy_scheduler(4))


def _bad_plans():
    """Plans from outside the planner for LENGTHS on 4 plan ranks: an
    out-of-range rank, an out-of-range sequence index, an 8-rank plan."""
    good = toy_scheduler().plan(LENGTHS).to_dict()
    rank = copy.deepcopy(good)
    rank["micro_batches"][0]["groups"][0]["ranks"][0] = 10**6
    seq = copy.deepcopy(good)
    seq["micro_batches"][0]["groups"][0]["sequences"][0] = 10**6
    other = toy_scheduler(8).plan(LENGTHS).to_dict()
    return [(fcp.Plan.from_dict(p), f) for p, f in ((rank, "ranks"), (seq, "sequences"))] + [
        (fcp.Plan.from_dict(other), "ranks")
    ]


class _PlanFromElsewhere:
    """A custom scheduler (e.g. plans read from JSON) that returns a given plan."""

    def __init__(self, plan):
        self.plan_to_return = plan
        self.cluster = toy_scheduler().cluster

    def plan(self, lengths):
        return self.plan_to_return


def test_megatron_checks_every_plan_it_is_given():
    # The one validator (fcp.torch.check_plan -> C++ CheckPlanShape): a bad
    # plan is one ValueError naming the field before any group or sample is
    # looked up, in take() (a custom scheduler's plan), assignments() and
    # observe() (a plan the caller passes).
    grid = fm.RankGrid([[0, 1, 2, 3]], 0)
    for plan, field in _bad_plans():
        created = []
        sched = fm.FcpCPScheduler(
            _PlanFromElsewhere(plan),
            grid=grid,
            verify=False,
            background=False,
            cache=fm.grid_group_cache(grid, new_group=lambda r: created.append(r)),
        )
        with pytest.raises(ValueError, match=rf"^plan\..*{field}"):
            sched.take(LENGTHS)
        with pytest.raises(ValueError, match=rf"^plan\..*{field}"):
            sched.assignments(plan, LENGTHS)
        with pytest.raises(ValueError, match=rf"^plan\..*{field}"):
            sched.observe(plan, LENGTHS, [0.1] * len(plan.micro_batches))
        assert created == []
