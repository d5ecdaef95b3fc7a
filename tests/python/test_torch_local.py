"""fcp.torch pieces that need no process group: layout, degree-1 ring
attention, the group cache's creation order, loss normalisation."""

import itertools

import pytest
import torch

import fcp.torch as ft


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5, 8])
def test_chunk_bounds_rule_and_partition(degree):
    n = 2 * degree
    for s in range(0, 70):
        bounds = ft.zigzag_chunk_bounds(s, degree)
        assert len(bounds) == n
        assert bounds[0][0] == 0 and bounds[-1][1] == s
        for c, (a, b) in enumerate(bounds):
            assert (a, b) == (c * s // n, (c + 1) * s // n)  # the documented rule
            assert b - a in (s // n, s // n + 1)  # sizes differ by <= 1
            if c:
                assert a == bounds[c - 1][1]  # contiguous
        # The shards of all ring indices partition [0, s).
        held = torch.cat([ft.zigzag_positions(s, degree, i) for i in range(degree)])
        assert sorted(held.tolist()) == list(range(s))
        for i in range(degree):
            assert ft.local_num_tokens(s, degree, i) == len(ft.zigzag_positions(s, degree, i))


def test_zigzag_pairs_early_and_late_chunks():
    # 16 tokens on 4 ranks: rank i holds chunks i and 7-i (2 tokens each).
    assert ft.zigzag_positions(16, 4, 0).tolist() == [0, 1, 14, 15]
    assert ft.zigzag_positions(16, 4, 3).tolist() == [6, 7, 8, 9]
    # Uneven: 10 tokens on 3 ranks -> bounds floor(c*10/6).
    assert ft.zigzag_chunk_bounds(10, 3) == [(0, 1), (1, 3), (3, 5), (5, 6), (6, 8), (8, 10)]
    assert ft.zigzag_positions(10, 3, 1).tolist() == [1, 2, 6, 7]


def test_shard_unshard_round_trip_in_ring_order():
    x = torch.arange(23 * 3).view(23, 3)
    ranks = [5, 2, 7]  # ring order, not sorted
    shards = [ft.shard(x, ranks, r, dim=0) for r in ranks]
    for i, _r in enumerate(ranks):
        assert torch.equal(shards[i], x[ft.zigzag_positions(23, 3, i)])
    assert torch.equal(ft.unshard(shards, dim=0), x)
    with pytest.raises(ValueError, match="rank"):
        ft.shard(x, ranks, 3)
    with pytest.raises(ValueError, match=r"shards\[0\]"):
        ft.unshard([shards[1], shards[0], shards[2][:-1]], dim=0)


def _assert_matches_sdpa(attend, q, k, v, g, causal):
    """attend(q, k, v) and its gradients equal PyTorch's SDPA (fp64, GQA via
    enable_gqa) to 1e-12; returns SDPA's output."""
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
    out = attend(qa, ka, va)
    ref = torch.nn.functional.scaled_dot_product_attention(
        qb, kb, vb, is_causal=causal, enable_gqa=q.shape[-3] != k.shape[-3]
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    for a, b in ((qa, qb), (ka, kb), (va, vb)):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-12)
    return ref.detach()


KERNELS = ["auto", "chunked", ft._ChunkedKernel(chunk=4)]


@pytest.mark.parametrize("kernel", KERNELS, ids=["auto", "chunked", "chunked4"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_degree_one_ring_attention_is_sdpa(kernel, causal, kv_heads):
    """Degree 1 against PyTorch's own SDPA (fp64, GQA expanded by SDPA)."""
    gen = torch.Generator().manual_seed(3)
    q, g = (torch.randn(2, 4, 17, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, kv_heads, 17, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    ref = _assert_matches_sdpa(
        lambda a, b, c: ft.ring_attention(a, b, c, [0], causal=causal, rank=0, kernel=kernel),
        q,
        k,
        v,
        g,
        causal,
    )
    # The oracle itself: causal output of position 0 is v[0] (of its kv head).
    if causal:
        torch.testing.assert_close(ref[:, 0, 0], v[:, 0, 0])


def test_fp16_and_bf16_keep_fp32_accumulators():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 300, 16, generator=gen) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=True
    )
    for dtype in (torch.bfloat16, torch.float16):
        for kernel in ("auto", ft._ChunkedKernel(chunk=32)):
            out = ft.ring_attention(
                q.to(dtype), k.to(dtype), v.to(dtype), [0], rank=0, kernel=kernel
            )
            assert out.dtype == dtype
            own = torch.nn.functional.scaled_dot_product_attention(
                q.to(dtype), k.to(dtype), v.to(dtype), is_causal=True
            )
            err = float((out.double() - ref).abs().max())
            assert err <= 2 * float((own.double() - ref).abs().max()) + 1e-3, (dtype, kernel, err)


def test_kernel_selection():
    assert ft.block_kernel_name(torch.zeros(1, 1, 2, 8)) == "cpu_flash"
    assert ft.block_kernel_name(torch.zeros(1, 1, 2, 8), "chunked") == "chunked"
    with pytest.raises(ValueError, match="kernel"):
        ft.block_kernel_name(torch.zeros(1, 1, 2, 8), "magic")


def test_ring_attention_checks_its_inputs():
    q = torch.zeros(1, 4, 2)
    with pytest.raises(ValueError, match="q"):
        ft.ring_attention(q, torch.zeros(1, 5, 2), torch.zeros(1, 5, 2), [0], rank=0)
    with pytest.raises(ValueError, match="q: holds 4 tokens"):
        ft.ring_attention(q, q, q, [0, 1], seq_len=10, rank=1)
    with pytest.raises(ValueError, match="group"):
        ft.ring_attention(q, q, q, [0, 1], seq_len=8, rank=1)
    q4 = torch.zeros(1, 6, 4, 2)
    with pytest.raises(ValueError, match="k: 4 key/value heads"):
        ft.ring_attention(q4, torch.zeros(1, 4, 4, 2), torch.zeros(1, 4, 4, 2), [0], rank=0)
    with pytest.raises(ValueError, match="dtype"):
        ft.ring_attention(q4, q4.double(), q4, [0], rank=0)
    # (s_local, head_dim): one head.
    x = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(
        ft.ring_attention(x, x, x, [0], rank=0),
        torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True),
    )


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, ranks):
        self.calls.append(tuple(ranks))
        return ("pg", tuple(ranks))


def test_group_cache_canonical_order_and_reuse():
    rec = _Recorder()
    cache = ft.GroupCache(new_group=rec)
    plan = {
        "micro_batches": [
            {"groups": [{"ranks": [3, 2]}, {"ranks": [0]}, {"ranks": [1]}]},
            {"groups": [{"ranks": [0, 1, 2, 3]}]},
            {"groups": [{"ranks": [2, 3]}, {"ranks": [1, 0]}]},
        ]
    }
    assert cache.prepare(plan) == 5
    # Ascending degree, then ascending sorted ranks: independent of plan order.
    assert rec.calls == [(0,), (1,), (0, 1), (2, 3), (0, 1, 2, 3)]
    assert cache.created == rec.calls
    assert cache.prepare(plan) == 0
    g = cache.for_micro_batch(plan["micro_batches"][0], rank=2)
    assert g.ranks == (3, 2) and g.index(2) == 1 and g.degree == 2
    assert g.process_group == ("pg", (2, 3))
    assert cache.num_created == 5
    # A permutation of a known set reuses its process group.
    assert cache.get([3, 1, 0, 2]).process_group == ("pg", (0, 1, 2, 3))
    assert cache.num_created == 5
    # Another rank order of preparing yields the same creation order.
    rec2 = _Recorder()
    other = ft.GroupCache(new_group=rec2)
    other.prepare(
        list(reversed([[g["ranks"] for g in mb["groups"]] for mb in plan["micro_batches"]]))
    )
    assert rec2.calls == rec.calls
    assert cache.for_micro_batch([[0, 1]], rank=3) is None  # idle in this micro-batch
    with pytest.raises(ValueError, match="ranks"):
        cache.get([1, 1])


def test_per_token_loss_weighs_every_token_equally():
    # Two groups of one step holding 3 and 1 tokens: the global mean is the
    # sum of the shares, not the mean of the group means.
    a = torch.tensor([1.0, 2.0, 3.0])
    b = torch.tensor([10.0])
    total = ft.per_token_loss(a, 4) + ft.per_token_loss(b, 4)
    assert total.item() == pytest.approx(16.0 / 4)
    assert ((a.mean() + b.mean()) / 2).item() != pytest.approx(total.item())
    # With gradients averaged over W ranks the share is scaled by W.
    assert ft.per_token_loss(a, 4, "mean", world_size=2).item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="global_num_tokens"):
        ft.per_token_loss(a, 0)
    with pytest.raises(ValueError, match="grad_reduction"):
        ft.per_token_loss(a, 4, "avg")
    assert ft.global_token_count(7) == 7  # no process group: local count


def test_plan_groups_accepts_all_plan_forms():
    flat = [[[0, 1], [2]], [[2, 1, 0]]]
    as_dict = {"micro_batches": [{"groups": [{"ranks": r} for r in mb]} for mb in flat]}
    assert ft.plan_groups(flat) == flat
    assert ft.plan_groups(as_dict) == flat
    assert list(itertools.chain(*ft.plan_groups(as_dict))) == [[0, 1], [2], [2, 1, 0]]


def test_group_cache_lru_bound_destroys_in_order():
    rec = _Recorder()
    destroyed = []
    cache = ft.GroupCache(max_groups=2, new_group=rec, destroy_group=destroyed.append)
    cache.prepare([[[0, 1]], [[2]]])  # creates (2,), (0, 1)
    cache.prepare([[[0, 1], [2, 3]]])  # hit (0, 1); creates (2, 3); evicts (2,)
    assert destroyed == [("pg", (2,))] and cache.evicted == [(2,)]
    cache.prepare([[[0], [1], [2], [3]]])  # needs 4 > bound: keeps all 4, evicts the rest
    assert cache.evicted == [(2,), (0, 1), (2, 3)]
    assert len(cache) == 4
    cache.prepare([[[3, 2]]])  # (2, 3) again: re-created; LRU singletons go
    assert cache.created[-1] == (2, 3)
    assert cache.evicted[3:] == [(0,), (1,), (2,)]
    # get() is not collective: it never changes recency.
    cache.get([3])
    cache.prepare([[[0, 1]]])
    assert cache.evicted[-1] == (3,)
    s = cache.stats()
    assert s["hits"] == 1 and s["misses"] == len(cache.created) == 9
    assert s["evicted"] == len(cache.evicted) and s["groups"] == len(cache) == 2
    assert s["create_s"] >= 0
    cache.clear()
    assert len(cache) == 0 and destroyed[-2:] == [("pg", (2, 3)), ("pg", (0, 1))]
    with pytest.raises(ValueError, match="max_groups"):
        ft.GroupCache(max_groups=0)


def test_reduce_gradients_fills_missing_grads_without_process_group():
    a = torch.zeros(3, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    b.grad = torch.full((2,), 5.0)
    ft.reduce_gradients([a, b])
    assert torch.equal(a.grad, torch.zeros(3)) and torch.equal(b.grad, torch.full((2,), 5.0))


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("causal", [True, False])
def test_in_process_blocks_are_sdpa(degree, causal):
    """The ring's block decomposition for every virtual rank, in one process:
    uneven lengths (and s < 2d for degree 7), GQA, against SDPA."""
    gen = torch.Generator().manual_seed(degree)
    s = 13 if degree == 7 else 45
    q, g = (torch.randn(2, 4, s, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, 2, s, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    _assert_matches_sdpa(
        lambda a, b, c: ft.blockwise_attention(a, b, c, degree, causal=causal), q, k, v, g, causal
    )


class _RefusingKernel:
    """Stands for a PyTorch kernel that rejects a shape at run time."""

    name = "refusing"

    def forward(self, *args):
        raise RuntimeError("No available kernel. Aborting execution.")

    backward = forward


def test_auto_kernel_falls_back_to_chunked_with_a_warning():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (
        torch.randn(1, 2, 9, 4, generator=gen, dtype=torch.float64).requires_grad_()
        for _ in range(3)
    )
    guarded = ft._GuardedKernel(_RefusingKernel())
    with pytest.warns(RuntimeWarning, match="refusing forward failed"):
        out = ft.ring_attention(q, k, v, [0], rank=0, kernel=guarded)
    assert guarded.name == "refusing->chunked"
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    assert ft.block_kernel_name(torch.zeros(1, 1, 2, 8)) == "cpu_flash"


def test_group_times_in_one_process():
    # Without a process group this rank's times are the world's (rank 0).
    import math

    got = ft.group_times([[[0]], [[0]]], [0.25, float("nan")])
    assert got[0] == [0.25] and math.isnan(got[1][0])
    with pytest.raises(ValueError, match="^my_times_s"):
        ft.group_times([[[0]], [[0]]], [0.25])


# --- packed (THD) micro-batches ---------------------------------------------

PACKED_LENGTHS = [13, 1, 0, 40, 5, 2]


def _cu(lengths):
    cu = [0]
    for s in lengths:
        cu.append(cu[-1] + s)
    return cu


def _packed_inputs(cu, kv_heads, seed):
    """Random float64 q (4 heads), k and v (kv_heads) over the packed tokens of
    `cu`, leaves that need gradients, and an output gradient g like q."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(4, cu[-1], 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k, v = (
        torch.randn(kv_heads, cu[-1], 8, generator=gen, dtype=torch.float64, requires_grad=True)
        for _ in range(2)
    )
    g = torch.randn(4, cu[-1], 8, generator=gen, dtype=torch.float64)
    return q, k, v, g


def _softmax_per_sequence(q, k, v, cu, causal):
    """float64 oracle: explicit softmax per whole sequence, GQA by repetition."""
    q, k, v = q.double(), k.double(), v.double()
    k = k.repeat_interleave(q.shape[0] // k.shape[0], 0)
    v = v.repeat_interleave(q.shape[0] // v.shape[0], 0)
    outs = []
    for a, b in zip(cu[:-1], cu[1:]):
        scores = q[:, a:b] @ k[:, a:b].transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            scores = scores.masked_fill(
                torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf")
            )
        outs.append(torch.softmax(scores, dim=-1) @ v[:, a:b])
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_packed_shards_partition_the_batch(degree):
    cu = _cu(PACKED_LENGTHS)
    x = torch.arange(cu[-1] * 2).view(cu[-1], 2)
    shards = [ft.packed_shard(x, cu, list(range(degree)), rank=i) for i in range(degree)]
    assert torch.equal(ft.packed_unshard(shards, cu), x)
    for i, s in enumerate(shards):
        local = ft.local_cu_seqlens(cu, degree, i)
        assert local[-1] == s.shape[0]
        # Every sequence's piece is its zigzag shard; positions are per sequence.
        for j, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
            assert torch.equal(s[local[j] : local[j + 1]], ft.shard(x[a:b], list(range(degree)), i))
        assert torch.equal(
            ft.packed_positions(cu, degree, i),
            torch.cat([ft.zigzag_positions(b - a, degree, i) for a, b in zip(cu[:-1], cu[1:])]),
        )


@pytest.mark.parametrize(
    "degree,causal,kv_heads", [(1, True, 2), (2, True, 1), (3, False, 2), (4, True, 4)]
)
def test_packed_blocks_match_softmax_per_sequence(degree, causal, kv_heads):
    cu = _cu(PACKED_LENGTHS)
    q, k, v, g = _packed_inputs(cu, kv_heads, seed=degree)
    out = ft.blockwise_attention(q, k, v, degree, causal=causal, cu_seqlens=cu)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    ref = _softmax_per_sequence(q, k, v, cu, causal)
    ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("comm", ["ring", "all-to-all"])
def test_degree_one_packed_call_matches_softmax(comm):
    cu = _cu(PACKED_LENGTHS)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, cu[-1], 8, generator=gen, dtype=torch.float64, requires_grad=True)
    k, v = (
        torch.randn(1, 2, cu[-1], 8, generator=gen, dtype=torch.float64, requires_grad=True)
        for _ in range(2)
    )
    out = ft.attention(
        q, k, v, ft.CPGroup([0], comm=comm), causal=True, cu_seqlens=torch.tensor(cu)
    )
    ref = _softmax_per_sequence(q[0], k[0], v[0], cu, True)[None]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), q)[0],
        torch.autograd.grad(ref.sum(), q)[0],
        rtol=0,
        atol=1e-12,
    )


def test_packed_calls_check_their_inputs():
    q = torch.zeros(2, 10, 4)
    with pytest.raises(ValueError, match=r"cu_seqlens\[0\]: must be 0"):
        ft.ring_attention(q, q, q, [0], cu_seqlens=[1, 10], rank=0)
    with pytest.raises(ValueError, match=r"cu_seqlens\[2\]: must be >="):
        ft.ring_attention(q, q, q, [0], cu_seqlens=[0, 6, 5, 10], rank=0)
    with pytest.raises(ValueError, match="cu_seqlens: needs at least 2"):
        ft.ulysses_attention(q, q, q, [0], cu_seqlens=[0], rank=0)
    with pytest.raises(ValueError, match="q: holds 10 tokens"):
        ft.ring_attention(q, q, q, [0], cu_seqlens=[0, 4, 9], rank=0)
    with pytest.raises(ValueError, match="q: with cu_seqlens"):
        ft.ring_attention(
            q.expand(2, 2, 10, 4),
            q.expand(2, 2, 10, 4),
            q.expand(2, 2, 10, 4),
            [0],
            cu_seqlens=[0, 10],
            rank=0,
        )
    with pytest.raises(ValueError, match="group: all-to-all over 2 ranks"):
        ft.ulysses_attention(
            torch.zeros(3, 5, 4),
            torch.zeros(1, 5, 4),
            torch.zeros(1, 5, 4),
            [0, 1],
            cu_seqlens=[0, 10],
            rank=0,
        )
    with pytest.raises(ValueError, match="comm: must be 'ring' or 'all-to-all'"):
        ft.attention(q, q, q, [0], "ulysses", cu_seqlens=[0, 10], rank=0)
    with pytest.raises(ValueError, match="rank: 2 is not in the group"):
        ft.ring_attention(q, q, q, [0, 1], cu_seqlens=[0, 20], rank=2)


def test_all_to_all_groups_of_a_plan_are_accepted():
    plan = {
        "micro_batches": [{"groups": [{"ranks": [0, 1], "comm": "all-to-all"}, {"ranks": [2]}]}]
    }
    assert ft.plan_groups(plan) == [[[0, 1], [2]]]
    assert ft.plan_group_comms(plan) == [["all-to-all", "ring"]]
    cache = ft.GroupCache(new_group=lambda ranks: tuple(ranks), destroy_group=lambda pg: None)
    group = cache.for_micro_batch(plan["micro_batches"][0], rank=1)
    assert group.comm == "all-to-all" and group.ranks == (0, 1)


def test_group_cache_timeout_defaults_to_five_minutes():
    assert ft.GroupCache()._timeout == ft.DEFAULT_TIMEOUT
    assert ft.DEFAULT_TIMEOUT.total_seconds() == 300
    assert ft.GroupCache(timeout=15)._timeout.total_seconds() == 15
    with pytest.raises(ValueError, match="timeout"):
        ft.GroupCache(timeout=0)


def test_group_cache_over_coordinates_keeps_this_copy():
    # fcp.megatron's rank grid: plan ranks 0..1 repeat over two copies
    # (global ranks [0, 2] and [1, 3]); each set gets one group per copy, in
    # copy order, and the cache keeps the group of this process's copy.
    made = []
    cache = ft.GroupCache(
        max_groups=None,
        coordinates=[[0, 2], [1, 3]],
        rank=3,
        new_group=lambda r: made.append(tuple(r)) or ("pg", tuple(r)),
    )
    cache.prepare([[[1, 0]], [[0], [1]]])
    assert made == [(0,), (1,), (2,), (3,), (0, 2), (1, 3)]
    assert cache.get([1]).process_group == ("pg", (3,))
    assert cache.get([1, 0]).process_group == ("pg", (1, 3))
    assert cache.get([1, 0]).ranks == (1, 0) and cache.rank_sets() == [[0, 1]]
    with pytest.raises(ValueError, match="^rank"):
        ft.GroupCache(coordinates=[[0, 2]], rank=1)


def test_group_times_over_coordinates_takes_the_slowest_copy():
    plan = [[[0, 1]], [[0], [1]]]
    rows = {0: [1.0, 5.0], 1: [2.0, float("nan")], 2: [3.0, 4.0], 3: [0.5, float("nan")]}
    seen = []
    times = ft.group_times(
        plan,
        [9.0, 9.0],
        coordinates=[[0, 2], [1, 3]],
        gather=lambda mine: seen.append(mine) or [rows[r] for r in range(4)],
    )
    assert seen == [[9.0, 9.0]]
    assert times == [[3.0], [5.0, 4.0]]  # max over both copies; plan rank 1 = ranks 2, 3


# --- plans from outside the planner: the one validator ------------------------


def _bad_plans():
    """(plan dict, field the error names): out-of-range rank, out-of-range
    sequence index, a plan of another (8-rank) cluster, for a 4-rank world."""
    import copy

    import fcp

    lengths = [4096, 2048, 1024, 512, 300, 200, 100]
    good = fcp.Scheduler(cluster={"ranks": 4, "ranks_per_node": 4}).plan(lengths).to_dict()
    rank = copy.deepcopy(good)
    rank["micro_batches"][0]["groups"][0]["ranks"][0] = 10**6
    seq = copy.deepcopy(good)
    seq["micro_batches"][0]["groups"][0]["sequences"][0] = 10**6
    other = fcp.Scheduler(cluster={"ranks": 8, "ranks_per_node": 8}).plan(lengths).to_dict()
    return lengths, good, [(rank, "ranks"), (seq, "sequences"), (other, "num_ranks|ranks")]


def test_group_cache_checks_a_plan_from_outside_before_creating_groups():
    lengths, good, bad = _bad_plans()
    for plan, field in bad:
        made = []
        cache = ft.GroupCache(new_group=lambda r: made.append(r))
        with pytest.raises(ValueError, match=rf"^plan.*({field})"):
            cache.prepare(plan, lengths=lengths, cluster=4)
        assert made == []  # nothing created from a bad plan
        with pytest.raises(ValueError, match="^plan"):
            ft.check_plan(plan, lengths, 4)
    cache = ft.GroupCache(new_group=lambda r: tuple(r))
    assert cache.prepare(good, lengths=lengths, cluster=4) > 0
    with pytest.raises(ValueError, match="^plan"):  # the same plan on a batch one shorter
        ft.check_plan(good, lengths[:-1], 4)
    with pytest.raises(ValueError, match="^cluster"):  # no world to default to
        ft.check_plan(good, lengths)


def test_layers_of_a_micro_batch_resolve_nothing_again(monkeypatch):
    # FlashInfer's plan/run split: the layout (plan_micro_batch) and the block
    # kernel are resolved once per micro-batch; every later layer's call
    # reuses them. Counted by wrapping the two resolvers.
    import fcp.torch.context as fctx
    import fcp.torch.kernels as fk

    calls = {"plan": 0, "kernel": 0}
    plan, select = fctx.plan_micro_batch, fk._select_kernel

    def counting_plan(*a, **kw):
        calls["plan"] += 1
        return plan(*a, **kw)

    def counting_select(*a, **kw):
        calls["kernel"] += 1
        return select(*a, **kw)

    monkeypatch.setattr(fctx, "plan_micro_batch", counting_plan)
    monkeypatch.setattr(fk, "_select_kernel", counting_select)
    torch.manual_seed(0)
    group = ft.CPGroup([0])
    for mb, lengths in enumerate(([5, 9, 2], [7, 7])):
        cu = _cu(lengths)
        q, k, v = (torch.randn(2, cu[-1], 8, dtype=torch.float64) for _ in range(3))
        x = q.clone().requires_grad_()
        for _layer in range(4):
            x = ft.ring_attention(x, k, v, group, cu_seqlens=cu, kernel="chunked")
        x.sum().backward()
        assert calls == {"plan": mb + 1, "kernel": mb + 1}
    ctx = fctx.plan_micro_batch([0], cu_seqlens=_cu([3, 4]))  # explicit: counted too
    q = torch.randn(2, 7, 8, dtype=torch.float64)
    for _layer in range(3):
        ft.ring_attention(q, q, q, ctx, kernel="chunked")
    assert calls == {"plan": 3, "kernel": 3}
    # The varlen kernels' int32 cu_seqlens: one tensor per micro-batch and device.
    made = ctx.cu_tensor(q.device)
    assert made.tolist() == [0, 3, 7] and made.dtype == torch.int32
    assert ctx.cu_tensor(q.device) is made


class _ReferenceVarlen:
    """A varlen block kernel with flash-attn's interface (THD layout,
    cumulative lengths, log-sum-exp (heads, tokens)), written out in plain
    float64 torch: what the CUDA varlen kernels do, runnable on CPU. Counts
    its varlen calls; single pieces go to the chunked kernel."""

    varlen = True
    name = "reference_varlen"

    def __init__(self):
        self.blocks = ft._ChunkedKernel()
        self.calls = {"forward_varlen": 0, "backward_varlen": 0, "pieces": 0}

    def forward(self, *a):
        self.calls["pieces"] += 1
        return self.blocks.forward(*a)

    def backward(self, *a):
        self.calls["pieces"] += 1
        return self.blocks.backward(*a)

    @staticmethod
    def _scores(q, k, a, b, c, d, causal, scale):
        group = q.shape[1] // k.shape[1]
        kk = k[c:d].repeat_interleave(group, 1)
        s = torch.einsum("qhd,khd->hqk", q[a:b], kk) * scale
        if causal:  # the own block: square, top-left
            s = s.masked_fill(torch.ones(b - a, d - c, dtype=torch.bool).triu(1), float("-inf"))
        return s

    def forward_varlen(self, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale):
        self.calls["forward_varlen"] += 1
        group = q.shape[1] // k.shape[1]
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
        lse = torch.zeros(q.shape[1], q.shape[0], dtype=torch.float64)
        bounds = list(
            zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), cu_k[:-1].tolist(), cu_k[1:].tolist())
        )
        assert max_q == max(b - a for a, b, _, _ in bounds)
        for a, b, c, d in bounds:
            s = self._scores(q, k, a, b, c, d, causal, scale)
            lse[:, a:b] = torch.logsumexp(s, -1)
            vv = v[c:d].repeat_interleave(group, 1)
            out[a:b] = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv)
        return out, lse

    def backward_varlen(self, dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale):
        self.calls["backward_varlen"] += 1
        group = q.shape[1] // k.shape[1]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for a, b, c, d in zip(
            cu_q[:-1].tolist(), cu_q[1:].tolist(), cu_k[:-1].tolist(), cu_k[1:].tolist()
        ):
            p = torch.exp(self._scores(q, k, a, b, c, d, causal, scale) - lse[:, a:b, None])
            vv = v[c:d].repeat_interleave(group, 1)
            kk = k[c:d].repeat_interleave(group, 1)
            dp = torch.einsum("qhd,khd->hqk", dout[a:b], vv)
            rowsum = (dout[a:b] * out[a:b]).sum(-1).transpose(0, 1)[..., None]
            ds = p * (dp - rowsum) * scale
            dq[a:b] = torch.einsum("hqk,khd->qhd", ds, kk)
            dkk = torch.einsum("hqk,qhd->khd", ds, q[a:b])
            dvv = torch.einsum("hqk,qhd->khd", p, dout[a:b])
            dk[c:d] += dkk.view(d - c, k.shape[1], group, -1).sum(2)
            dv[c:d] += dvv.view(d - c, v.shape[1], group, -1).sum(2)
        return dq, dk, dv


@pytest.mark.parametrize("degree,causal,kv_heads", [(2, True, 1), (3, True, 2), (4, False, 4)])
def test_varlen_block_kernel_runs_each_ring_step_in_one_call(degree, causal, kv_heads):
    # The CUDA varlen path (flash-attn's flash_attn_varlen_func, PyTorch's
    # varlen flash) at degree > 1: every ring step's pieces (all sequences)
    # in one call, gathered into the THD layout and merged back. Injected
    # here as a float64 kernel with the same interface; against the float64
    # softmax on whole sequences, forward and gradients.
    cu = _cu(PACKED_LENGTHS)
    q, k, v, g = _packed_inputs(cu, kv_heads, seed=degree)
    kernel = _ReferenceVarlen()
    out = ft.blockwise_attention(q, k, v, degree, causal=causal, cu_seqlens=cu, kernel=kernel)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    ref = _softmax_per_sequence(q, k, v, cu, causal)
    ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # At most one call per (rank, step); steps without a piece make none.
    assert kernel.calls["pieces"] == 0
    assert 0 < kernel.calls["forward_varlen"] <= degree * degree
    assert kernel.calls["backward_varlen"] == kernel.calls["forward_varlen"]


def test_a_varlen_kernel_that_fails_falls_back_to_one_call_per_piece():
    # A guarded varlen kernel whose varlen call raises (e.g. a build without
    # it, or a log-sum-exp layout it does not return) warns once and runs
    # the step's pieces one by one: the result stays exact.
    from fcp.torch.kernels import _GuardedKernel

    class Broken(_ReferenceVarlen):
        def forward_varlen(self, *a):
            raise NotImplementedError("no varlen here")

    cu = _cu(PACKED_LENGTHS)
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, cu[-1], 8, generator=gen, dtype=torch.float64) for _ in range(3))
    guarded = _GuardedKernel(Broken())
    with pytest.warns(RuntimeWarning, match="one call per piece"):
        out = ft.blockwise_attention(q, k, v, 2, cu_seqlens=cu, kernel=guarded)
    torch.testing.assert_close(out, _softmax_per_sequence(q, k, v, cu, True), rtol=0, atol=1e-12)
    assert guarded.varlen is False and guarded.primary.calls["pieces"] > 0


def test_varlen_kernels_are_refused_off_cuda():
    q = torch.zeros(2, 4, 8)
    for name in ("flash_attn_varlen", "cuda_flash_varlen"):
        with pytest.raises(ValueError, match=f"^kernel: {name} needs CUDA"):
            ft.ring_attention(q, q, q, [0], kernel=name)


def test_plan_digest_sees_ranks_sequences_and_comm():
    # check_same_plan's digest (fcp.hf and fcp.megatron compare it across
    # ranks): equal for equal plans, different when any group's ring order,
    # sequences or comm differs, or a group moves to another micro-batch.
    import copy

    import fcp

    lengths = [65536] * 8
    d = fcp.Scheduler(cluster="h100-8x8", model="qwen3-8b").plan(lengths).to_dict()
    base = ft.plan_digest(fcp.Plan.from_dict(d))
    assert ft.plan_digest(fcp.Plan.from_dict(copy.deepcopy(d))) == base
    g = d["micro_batches"][0]["groups"][0]
    assert len(g["ranks"]) > 1
    changes = [
        lambda x: x["ranks"].reverse(),
        lambda x: x["sequences"].append(99),
        lambda x: x.update(comm="all-to-all" if x.get("comm", "ring") == "ring" else "ring"),
    ]
    for change in changes:
        other = copy.deepcopy(d)
        change(other["micro_batches"][0]["groups"][0])
        assert ft.plan_digest(fcp.Plan.from_dict(other)) != base
    ft.check_same_plan(fcp.Plan.from_dict(d))  # no process group: nothing to compare
