"""python -m fcp profile --target torch and python -m fcp replay: the fit
through the bindings against the cost formula written out here, the replay's
step time against a list schedule computed here, bad environments, and a tiny
end-to-end run on the CPU."""

import json
import math
import os
import pathlib
import random
import subprocess
import sys

import pytest

import fcp
from fcp import replay

ROOT = pathlib.Path(__file__).resolve().parents[2]
core = fcp._core()

TRUE = dict(
    alpha1=2.5e-8,
    alpha2=3.0e-5,
    beta1=1.0e-3,
    alpha3=3000.0,
    beta2=5.0e-4,
    attn_overhead_tokens=50.0,
    gamma_intra=1.0e-4,
    gamma_inter=3.0e-4,
    gamma_serial=2.0e-4,
)


def _formula(c, seqs, d, bw, inter, tail=1.0):
    """T(G, d) of docs/design.md §2, written out independently of the C++."""
    tokens = sum(n for n, _ in seqs)
    attn2 = sum((1 + e) * n * n for n, e in seqs)
    attn1 = sum((1 + e) * n for n, e in seqs)
    attn = c["alpha1"] * (attn2 / d + c["attn_overhead_tokens"] * attn1)
    comp = attn + c["alpha2"] * tokens / d + c["beta1"] + (d - 1) * c["gamma_serial"]
    gamma = c["gamma_inter"] if inter else c["gamma_intra"]
    comm = 0.0 if d == 1 else c["alpha3"] * tokens * (d - 1) / d / bw + c["beta2"] + (d - 1) * gamma
    return comp, comm, comp + comm - min(attn * (d - tail) / d, comm)


def _load(seqs):
    """The GroupLoad of (length, eta) pairs."""
    load = core.GroupLoad()
    for n, e in seqs:
        load.add(core.Sequence(n, e))
    return load


def _synthetic_samples(bw=2e10):
    samples, what = [], []
    for length in (1024, 2048, 4096, 8192, 16384):
        for d in (1, 2, 3, 4, 8):
            for inter in (False, True) if d > 1 else (False,):
                for seqs in ([(length, 0.0)], [(length // 4, float(k % 2)) for k in range(4)]):
                    comp, comm, total = _formula(TRUE, seqs, d, bw, inter)
                    samples.append(
                        core.make_fit_sample(
                            _load(seqs),
                            d,
                            bw,
                            inter,
                            compute_s=comp,
                            comm_s=comm if d > 1 else math.nan,
                            total_s=total,
                            label="synthetic",
                        )
                    )
                    what.append(f"d={d} {len(seqs)}x{seqs[0][0]}")
    return samples, what


def test_fit_recovers_known_coefficients():
    samples, _ = _synthetic_samples()
    cm = core.fit_cost_model(samples, core.CostModel())
    for name, value in TRUE.items():
        assert getattr(cm, name) == pytest.approx(value, rel=1e-6), name
    assert cm.ring_tail_steps == 1.0


def _a2a_formula(c, seqs, d, bw, q_heads, kv_heads):
    """A Ulysses group's (compute, comm, total) of src/cost/alltoall.cc,
    written out here: whole sequences with heads / d, the all-to-all's
    rho·alpha3 bytes per token of its Σs/d, nothing overlapped."""
    pad = math.ceil(q_heads / d) * d / q_heads
    kv_held = max(1, math.ceil(kv_heads / d)) * d
    rho = 0.75 * (pad * q_heads + kv_held) / kv_heads
    tokens = sum(n for n, _ in seqs)
    attn2 = sum((1 + e) * n * n for n, e in seqs)
    attn1 = sum((1 + e) * n for n, e in seqs)
    attn = pad * c["alpha1"] * (attn2 + c["attn_overhead_tokens"] * attn1) / d
    comp = attn + c["alpha2"] * tokens / d + c["beta1"]
    comm = 0.0 if d == 1 else rho * c["alpha3"] * tokens / d * (d - 1) / d / bw + c["beta2"]
    return comp, comm, comp + comm


def _shape(q_heads=8, kv_heads=2):
    s = core.ModelShape()
    s.name, s.layers, s.hidden = "synthetic", 1, 256
    s.q_heads, s.kv_heads, s.head_dim, s.ffn = q_heads, kv_heads, 32, 768
    return s


def _a2a_samples(shape, bw=2e10, degrees=(1, 2, 4, 8), split=True):
    samples, what = [], []
    for length in (1024, 2048, 4096, 8192, 16384):
        for d in degrees:
            for seqs in ([(length, 0.0)], [(length // 4, float(k % 2)) for k in range(4)]):
                comp, comm, total = _a2a_formula(TRUE, seqs, d, bw, shape.q_heads, shape.kv_heads)
                samples.append(
                    core.make_fit_sample(
                        _load(seqs),
                        d,
                        bw,
                        compute_s=comp if split or d == 1 else math.nan,
                        comm_s=comm if split and d > 1 else math.nan,
                        total_s=total,
                        label="synthetic all-to-all",
                        all_to_all=True,
                    )
                )
                what.append(f"d={d} {len(seqs)}x{seqs[0][0]} all-to-all")
    return samples, what


def test_fit_recovers_known_coefficients_with_all_to_all_samples():
    shape = _shape()
    ring, _ = _synthetic_samples()
    a2a, _ = _a2a_samples(shape)
    cm = core.fit_cost_model(ring + a2a, core.CostModel(), shape)
    for name, value in TRUE.items():
        assert getattr(cm, name) == pytest.approx(value, rel=1e-6), name
    # Only d = 1 ring groups beside the all-to-all ones: alpha3 and beta2 come
    # from the all-to-all samples alone (through rho), the ring-step terms
    # stay unidentified (0).
    d1 = [s for s in ring if s.degree == 1]
    cm = core.fit_cost_model(d1 + a2a, core.CostModel(), shape)
    for name in ("alpha1", "alpha2", "beta1", "alpha3", "beta2", "attn_overhead_tokens"):
        assert getattr(cm, name) == pytest.approx(TRUE[name], rel=1e-6), name
    assert cm.gamma_intra == 0 and cm.gamma_inter == 0 and cm.gamma_serial == 0
    # All-to-all totals only (no compute/communication split at d > 1): the
    # communication derived from them and the refinement recover the same.
    totals, _ = _a2a_samples(shape, split=False)
    cm = core.fit_cost_model(d1 + totals, core.CostModel(), shape)
    for name in ("alpha1", "alpha2", "beta1", "alpha3", "beta2", "attn_overhead_tokens"):
        assert getattr(cm, name) == pytest.approx(TRUE[name], rel=1e-6), name
    with pytest.raises(ValueError, match="model shape"):
        core.fit_cost_model(a2a, core.CostModel())


def test_fit_measured_profile_reports_and_writes_a_readable_cost_model():
    samples, what = _synthetic_samples()
    base = core.CostModel()
    base.bw_intra_node = base.bw_inter_node = 2e10
    base.mem_per_token, base.mem_static, base.mem_capacity = 1e4, 1e8, 1e10
    table, report, cm = core.fit_measured_profile(
        "torch:cpu", "synthetic", "measured: test", "none", samples, what, base, 0.25, 1, 0.0
    )
    assert "held-out relative error of T(G, d)" in table
    j = json.loads(report)
    assert j["heldout_error"]["max"] < 1e-6
    assert j["heldout_error"]["points"] == len(samples) // 4
    back = core.parse_cost_model_json(report, core.CostModel())
    for name, value in TRUE.items():
        assert getattr(back, name) == pytest.approx(value, rel=1e-6), name
    assert back.mem_capacity == 1e10
    with pytest.raises(ValueError, match="samples"):
        core.fit_measured_profile("t", "m", "h", "", samples[:3], what[:3], base)


def test_fit_measured_profile_with_all_to_all_samples():
    shape = _shape()
    ring, what = _synthetic_samples()
    a2a, a2a_what = _a2a_samples(shape)
    base = core.CostModel()
    base.bw_intra_node = base.bw_inter_node = 2e10
    table, report, cm = core.fit_measured_profile(
        "torch:cpu",
        "synthetic",
        "measured: test",
        "none",
        ring + a2a,
        what + a2a_what,
        base,
        0.25,
        1,
        0.0,
        shape,
    )
    j = json.loads(report)
    assert j["heldout_error"]["max"] < 1e-6
    assert set(j["heldout_error"]["by_label"]) == {"synthetic", "synthetic all-to-all"}
    assert "all-to-all d=4" in table and "  d=4" in table
    assert cm.alpha3 == pytest.approx(TRUE["alpha3"], rel=1e-6)
    with pytest.raises(ValueError, match="model shape"):
        core.fit_measured_profile(
            "t", "m", "h", "", ring + a2a, what + a2a_what, base, 0.25, 1, 0.0
        )


def _list_schedule_oracle(num_ranks, plan, times_ms):
    free = [0.0] * num_ranks
    k = 0
    for mb in plan.micro_batches:
        for g in mb.groups:
            start = max(free[r] for r in g.ranks)
            for r in g.ranks:
                free[r] = start + times_ms[k]
            k += 1
    return max(free)


def _fake_clock():
    """Group time (s): a fixed pseudo-random draw per distinct group."""
    draws = {}
    rng = random.Random(7)

    def time_group(seqs, ranks, all_to_all):
        key = (tuple(seqs), tuple(ranks), all_to_all)
        if key not in draws:
            draws[key] = rng.uniform(0.001, 0.5)
        return draws[key]

    return time_group, draws


def _plans_file(tmp_path, strategy="fcp", gbs=48, ranks=16, seed=3):
    """{batch, plan} lines made by the planner for a long-tailed batch."""
    rng = random.Random(seed)
    lengths = [int(min(65536, 256 * rng.paretovariate(1.1))) for _ in range(gbs)]
    batch = {
        "cluster": {"ranks": ranks, "ranks_per_node": 8},
        "model": "qwen3-8b",
        "sequences": lengths,
    }
    request = core.parse_batch_json(json.dumps(batch)).request
    options = core.PlanOptions()
    options.strategy = strategy
    plan = core.make_plan(request, options)
    assert plan.status == core.PlanStatus.OK
    path = tmp_path / f"{strategy}.jsonl"
    path.write_text(json.dumps({"batch": batch, "plan": json.loads(plan.to_json(-1))}) + "\n")
    return path


@pytest.mark.parametrize("strategy", ["fcp", "megatron"])
def test_replay_with_a_fake_clock_is_the_list_schedule(tmp_path, strategy):
    batches = replay.read_plans(str(_plans_file(tmp_path, strategy)))
    time_group, _ = _fake_clock()
    b = batches[0]
    measured_ms, times = replay.replay_plan(b, time_group)
    assert len(times) == sum(len(mb.groups) for mb in b.plan.micro_batches)
    assert len(times) > 1
    oracle = _list_schedule_oracle(b.plan.num_ranks, b.plan, [1000.0 * t for t in times])
    assert measured_ms == pytest.approx(oracle, rel=1e-12)


def _hand_plan(tmp_path, micro_batches, lengths, ranks=4, name="hand"):
    """A {batch, plan} file of groups given as (ranks, sequences, comm), each
    estimated at 1 ms (the plan's est_ms their list schedule)."""
    free = [0.0] * ranks
    for groups in micro_batches:
        for r, _, _ in groups:
            start = max(free[i] for i in r)
            for i in r:
                free[i] = start + 1.0
    batch = {
        "cluster": {"ranks": ranks, "ranks_per_node": ranks},
        "model": "qwen3-8b",
        "sequences": lengths,
    }
    plan = {
        "strategy": name,
        "ranks": ranks,
        "status": "ok",
        "est_ms": max(free),
        "lower_bound_ms": 0.0,
        "micro_batches": [
            {
                "est_ms": 1.0,
                "groups": [
                    {"ranks": r, "sequences": q, "comm": c, "est_ms": 1.0, "mem_bytes": 1}
                    for r, q, c in groups
                ],
            }
            for groups in micro_batches
        ],
    }
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps({"batch": batch, "plan": plan}) + "\n")
    return path


def test_replay_with_a_fake_clock_times_all_to_all_groups_as_such(tmp_path):
    # Ring and all-to-all groups mixed over three micro-batches: the timer
    # sees each group's kind, and the step is the list schedule.
    path = _hand_plan(
        tmp_path,
        [
            [([0, 1], [0], "all-to-all"), ([2, 3], [1, 2], "ring")],
            [([0, 1, 2, 3], [3], "all-to-all")],
            [([0], [4], "ring"), ([1, 2], [5], "all-to-all"), ([3], [6], "ring")],
        ],
        [4096, 1024, 512, 2048, 300, 700, 900],
    )
    b = replay.read_plans(str(path))[0]
    time_group, draws = _fake_clock()
    measured_ms, times = replay.replay_plan(b, time_group)
    kinds = [a2a for (_, _, a2a) in draws]
    assert kinds == [True, False, True, False, True, False]
    oracle = _list_schedule_oracle(4, b.plan, [1000.0 * t for t in times])
    assert measured_ms == pytest.approx(oracle, rel=1e-12)


def test_replay_overlapping_micro_batches_do_not_wait_at_boundaries(tmp_path):
    # Two micro-batches: ranks 0-1 (slow) and 2-3 (fast), then 2-3 again; the
    # second group on 2-3 starts when 2-3 are free, not when the slow one ends.
    batch = {
        "cluster": {"ranks": 4, "ranks_per_node": 4},
        "model": "qwen3-8b",
        "sequences": [4096, 1024, 1024],
    }
    g = lambda ranks, seqs: {
        "ranks": ranks,
        "sequences": seqs,
        "est_ms": 1.0,  # noqa: E731
        "mem_bytes": 1,
    }
    plan = {
        "strategy": "hand",
        "ranks": 4,
        "status": "ok",
        "est_ms": 2.0,
        "lower_bound_ms": 0.0,
        "micro_batches": [
            {"est_ms": 1.0, "groups": [g([0, 1], [0]), g([2, 3], [1])]},
            {"est_ms": 1.0, "groups": [g([2, 3], [2])]},
        ],
    }
    path = tmp_path / "hand.jsonl"
    path.write_text(json.dumps({"batch": batch, "plan": plan}) + "\n")
    b = replay.read_plans(str(path))[0]
    times = {4096: 0.9, 1024: 0.2}
    measured_ms, _ = replay.replay_plan(b, lambda seqs, ranks, a2a: times[seqs[0][0]])
    assert measured_ms == pytest.approx(900.0, rel=1e-12)  # max(0.9, 0.2 + 0.2) s


def _run(args, env=None, timeout=300):
    e = dict(os.environ)
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fcp", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd=ROOT,
    )


def _one_error_line(res, *words):
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for w in words:
        assert w in lines[0], res.stderr


def test_profile_one_process_asked_for_degree_4():
    res = _run(["profile", "--target", "torch", "--device", "cpu", "--degrees", "1,4"])
    _one_error_line(res, "--degrees", "degree 4 needs 4 processes, 1 launched", "torchrun")


def test_profile_without_a_process_group():
    # torchrun's variables without its rendezvous: init_process_group fails.
    res = _run(
        ["profile", "--target", "torch", "--device", "cpu"],
        env={"WORLD_SIZE": "2", "RANK": "0"},
        timeout=120,
    )
    _one_error_line(res, "no process group")


def test_profile_bad_model_and_config(tmp_path):
    _one_error_line(
        _run(["profile", "--target", "torch", "--device", "cpu", "--model", "nope"]),
        "--model",
        "nope",
    )
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 3,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
            }
        )
    )
    _one_error_line(
        _run(["profile", "--target", "torch", "--device", "cpu", "--hf-config", str(cfg)]),
        "--hf-config",
        "num_key_value_heads",
    )


def test_cpp_cli_points_to_python():
    cli = os.environ.get("FCP_CLI")
    if not cli:
        pytest.skip("FCP_CLI not set")
    res = subprocess.run([cli, "profile", "--target", "torch"], capture_output=True, text=True)
    _one_error_line(res, "python -m fcp profile --target torch", "torchrun")


def test_replay_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"batch": {}}\n')
    prof = tmp_path / "p.json"
    prof.write_text("{}")
    _one_error_line(
        _run(["replay", str(bad), "--cost-model", str(prof), "--model", "cpu-tiny"]), "bad.jsonl[0]"
    )
    _one_error_line(
        _run(
            [
                "replay",
                str(tmp_path / "missing.jsonl"),
                "--cost-model",
                str(prof),
                "--model",
                "cpu-tiny",
            ]
        ),
        "missing.jsonl",
    )


def test_all_to_all_degree_must_divide_heads():
    from fcp import _torch_work as tw
    import torch

    work = tw.LayerWork(
        tw.shape_from_preset("cpu-tiny"), torch.device("cpu"), torch.float32, repeats=1
    )
    with pytest.raises(ValueError, match="divide the 4 query heads"):
        work.all_to_all_attn_s([(64, 0.0)], 3)


def test_one_process_all_to_all_rank_runs_ulysses_attention(monkeypatch):
    # A Ulysses rank's attention after its all-to-all: fcp.torch's
    # ulysses_attention on a one-rank group, heads / d, the whole packed
    # sequences, one call per mask.
    import torch

    import fcp.torch
    from fcp import _torch_work as tw

    calls = []
    real = fcp.torch.ulysses_attention

    def spy(q, k, v, group, causal=True, softmax_scale=None, cu_seqlens=None, **kw):
        calls.append((q.shape[0], k.shape[0], q.shape[1], list(cu_seqlens), causal, group.degree))
        return real(q, k, v, group, causal, softmax_scale, cu_seqlens, **kw)

    monkeypatch.setattr(fcp.torch, "ulysses_attention", spy)
    work = tw.LayerWork(
        tw.shape_from_preset("cpu-tiny"), torch.device("cpu"), torch.float32, "none", repeats=1
    )
    assert work.all_to_all_attn_s([(64, 0.0), (32, 1.0), (48, 0.0)], 2) > 0
    assert calls[:2] == [(2, 1, 112, [0, 64, 112], True, 1), (2, 1, 32, [0, 32], False, 1)]
    assert len(calls) == 4  # a warm-up run and one timed run
    # Bytes one rank sends per all-to-all of a pass: Q, K, V (K and V with
    # the heads every slot receives) and the output, 1/d of each kept.
    assert (
        work.all_to_all_call_bytes(100, 4)
        == [4 * 64 * 100 * 4 * 3 // 4, 4 * 64 * 100 * 4 * 3 // 4] * 2
    )
    q, kv = 4 * 64 * 100 * 4 // 2, 2 * 64 * 100 * 4 // 2
    assert work.all_to_all_call_bytes(100, 2) == [q, kv, kv, q]


def test_profile_grid_packs_k_sequences_per_point():
    from fcp.profile_torch import _grid_groups

    assert _grid_groups(1024, []) == [[(1024, 0.0)]]
    groups = _grid_groups(1024, [4, 16])
    assert [len(g) for g in groups] == [1, 4, 16]
    assert groups[2] == [(64, float(i % 2)) for i in range(16)]
    assert [len(g) for g in _grid_groups(64, [4, 16])] == [1, 4]  # 16 x 4 tokens: too short


def test_profile_and_replay_end_to_end_on_cpu(tmp_path):
    prof = tmp_path / "cost_model.json"
    res = _run(
        [
            "profile",
            "--target",
            "torch",
            "--device",
            "cpu",
            "--in-process",
            "--model",
            "cpu-tiny",
            "--lengths",
            "256,512,1024",
            "--degrees",
            "1,2,4",
            "--repeats",
            "1",
            "--min-chunk",
            "64",
            "-q",
            "--out",
            str(prof),
        ]
    )
    assert res.returncode == 0, res.stderr
    assert "held-out relative error" in res.stdout
    # Ring groups at d = 1, 2, 4 and all-to-all groups at the same degrees
    # (they divide cpu-tiny's 4 query heads): 3 lengths x 3 degrees x 2 kinds
    # x 2 groups.
    assert "all-to-all d=4" in res.stdout and "cpu-tiny all-to-all" in res.stdout
    j = json.loads(prof.read_text())
    assert j["samples"] == 36
    assert j["target"] == "torch:cpu" and j["torch"]["shape"]["hidden"] == 256
    cm = core.parse_cost_model_json(prof.read_text(), core.CostModel())
    assert cm.alpha1 > 0 and cm.alpha2 > 0
    # fcp.Scheduler reads its cost_model member.
    sched = fcp.Scheduler(cluster=fcp.Cluster(4, 4, "h100-8x8"), cost_model=j["cost_model"])
    assert sched.cost_model.alpha1 == cm.alpha1
    assert sched.plan([1024, 512, 256, 256]).status == core.PlanStatus.OK
    # The planner reads it, and the replay runs a plan made with it.
    batch = {
        "cluster": {"ranks": 4, "ranks_per_node": 4},
        "sequences": [1024, 512, 256, 256],
        "cost_model": j["cost_model"],
    }
    request = core.parse_batch_json(json.dumps(batch)).request
    plan = core.make_plan(request, core.PlanOptions())
    plans = tmp_path / "fcp.jsonl"
    plans.write_text(json.dumps({"batch": batch, "plan": json.loads(plan.to_json(-1))}) + "\n")
    res = _run(
        [
            "replay",
            str(plans),
            str(plans),
            "--cost-model",
            str(prof),
            "--repeats",
            "1",
            "-q",
            "--format",
            "json",
            "--sim-model",
            "qwen3-8b",
            "--sim-cluster",
            "h100-8x8",
            "--links",
            "plan",
        ]
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = out["files"][0]["plans"]
    assert rows[0]["measured_ms"] > 0 and rows[0]["model_ms"] > 0 and rows[0]["sim_ms"] > 0
    groups = rows[0]["groups"]
    assert len(groups) == sum(len(mb.groups) for mb in plan.micro_batches)
    assert all(g["sim_ms"] > 0 and g["model_ms"] > 0 for g in groups)
    # The step is the list schedule of the printed group times.
    k = iter(g["measured_ms"] for g in groups)
    assert rows[0]["measured_ms"] == pytest.approx(
        _list_schedule_oracle(4, plan, [next(k) for _ in groups]), rel=1e-12
    )
    table = _run(
        ["replay", str(plans), str(plans), "--cost-model", str(prof), "--repeats", "1", "-q"]
    )
    assert table.returncode == 0 and "step ratio" in table.stdout
    # All-to-all groups replay through Ulysses; their time is the measured
    # compute plus the transfer the profiled model charges (nothing hidden).
    hand = _hand_plan(
        tmp_path,
        [
            [([0, 1], [0], "all-to-all"), ([2, 3], [1, 2], "ring")],
            [([0, 1, 2, 3], [3], "all-to-all")],
        ],
        [1024, 512, 256, 768],
    )
    res = _run(["replay", str(hand), "--cost-model", str(prof), "-r", "1", "-q", "-f", "json"])
    assert res.returncode == 0, res.stderr
    groups = json.loads(res.stdout)["files"][0]["plans"][0]["groups"]
    assert [g["comm"] for g in groups] == ["all-to-all", "ring", "all-to-all"]
    assert all(g["measured_ms"] > 0 and g["model_ms"] > 0 for g in groups)


def test_profile_and_replay_on_two_processes_measure_the_ring_over_gloo(tmp_path):
    out = tmp_path / "cm.json"
    e = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    e["OMP_NUM_THREADS"] = "1"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "fcp",
            "profile",
            "--target",
            "torch",
            "--device",
            "cpu",
            "--lengths",
            "256,512,1024",
            "--degrees",
            "1,2",
            "--repeats",
            "1",
            "--min-chunk",
            "64",
            "-q",
            "--format",
            "json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    j = json.loads(out.read_text())
    assert j["transport"] == "torch.distributed gloo, 2 processes"
    # Ring and all-to-all groups at d = 1, 2 (on the two processes).
    assert j["torch"]["processes"] == 2 and j["samples"] == 24
    # Replay under torchrun: groups of degree <= 2 (ring and all-to-all) run
    # on the two processes.
    plans = _hand_plan(
        tmp_path,
        [
            [([0, 1], [0], "ring"), ([2], [1], "ring"), ([3], [2], "ring")],
            [([0, 1], [3], "all-to-all")],
        ],
        [1024, 512, 256, 768],
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "fcp",
            "replay",
            str(plans),
            "--cost-model",
            str(out),
            "--repeats",
            "1",
            "-q",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rep = json.loads(res.stdout)
    assert "2 groups on 2 processes" in rep["header"]
    groups = rep["files"][0]["plans"][0]["groups"]
    assert [gr["degree"] for gr in groups] == [2, 1, 1, 2]
    assert groups[3]["comm"] == "all-to-all"
    assert all(gr["measured_ms"] > 0 for gr in groups)
    t = [gr["measured_ms"] for gr in groups]
    assert rep["files"][0]["plans"][0]["measured_ms"] == pytest.approx(
        max(t[0] + t[3], t[1], t[2]), rel=1e-12
    )


@pytest.mark.parametrize("module", ["fcp.replay", "fcp.profile_torch"])
def test_help_states_every_options_default(module):
    """`python -m fcp replay --help` and `... profile --target torch --help`:
    every option that takes a value and is not required says its default
    (HelpWithDefaults appends the value; an option without one says what
    happens then), as the C++ commands' --help does."""
    import importlib

    parser = importlib.import_module(module).build_parser()
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.required or action.nargs == 0:
            continue
        # What --help prints for the option (an option without help prints none).
        entry = formatter._expand_help(action) if action.help else ""
        assert "default" in entry, (module, action.option_strings, entry)
        if action.default not in (None, False):
            assert f"{action.default}" in entry, (module, action.option_strings, entry)
