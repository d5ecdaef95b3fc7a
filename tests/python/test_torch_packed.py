"""Packed (THD) micro-batches, Ulysses groups, the dispatch on a plan
group's comm, whole strategy="fcp" plans and ranks that disagree: one
``torchrun`` launch of tests/python/packed_worker.py on 4 gloo processes.

Oracle: a float64 softmax on each whole sequence (written out in the
worker) and its autograd gradients; the single-process per-token mean loss
of the whole global batch.
"""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

import fcp.torch as ft

HERE = pathlib.Path(__file__).resolve().parent
WORLD = 4
REL_TOL = {"fp64": 1e-12, "fp32": 1e-5}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("packed4")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(HERE)) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={WORLD}",
        str(HERE / "packed_worker.py"),
        str(out_dir),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD)]


def test_packed_ring_and_ulysses_match_float64_softmax(results):
    seen = set()
    for rank, r in enumerate(results):
        for e in r["attention"]:
            if e["idle"]:
                continue
            tol = REL_TOL[e["dtype"]]
            for key in ("out", "dq", "dk", "dv"):
                assert e[key] <= tol, (rank, key, e)
            assert e["out_shape"] == e["local_shape"], e
            seen.add((e["comm"], e["degree"], e["kv_heads"] < e["degree"], e["causal"]))
    # Both kinds at degrees 1-4, kv_heads < degree, causal and not.
    assert {c for c, *_ in seen} == {"ring", "all-to-all"}
    assert {d for _, d, *_ in seen} == {1, 2, 3, 4}
    assert ("all-to-all", 4, True, True) in seen
    assert {c for *_, c in seen} == {True, False}
    # Non-contiguous q/k/v (tokens-major memory) on both kinds.
    assert {
        e["comm"] for r in results for e in r["attention"] if not e["idle"] and not e["contiguous"]
    } == {"ring", "all-to-all"}


def test_idle_ranks_skip_micro_batches(results):
    idle = {
        (rank, e["micro_batch"])
        for rank, r in enumerate(results)
        for e in r["attention"]
        if e["idle"]
    }
    assert idle == {(3, 6), (0, 7), (3, 7)}


@pytest.mark.parametrize("which", ["mixed", "idle"])
def test_fcp_plan_trains_like_one_process(results, which):
    runs = [r["plans"][which] for r in results]
    assert runs[0] is not None, f"no candidate batch gave a plan with {which} groups"
    layout = runs[0]["layout"]
    kinds = {comm for mb in layout for _, comm in mb}
    if which == "mixed":
        assert kinds == {"ring", "all-to-all"}, layout
    else:
        assert any(sum(len(ranks) for ranks, _ in mb) < WORLD for mb in layout), layout
    used = set()
    for r in runs:
        assert r["layout"] == layout  # the same plan on every rank
        assert r["total"] == r["expected_total"]
        assert r["loss_rel_err"] <= 1e-12, r
        assert r["grad_rel_err"] <= 1e-12, r
        used.update(r["comms"])
    assert used == kinds


def test_ranks_that_disagree_fail_with_one_clear_error(results):
    errors = [r["errors"] for r in results]
    for rank in (0, 1):  # the pair [0, 1]; rank 1 passed other lengths
        assert errors[rank]["cu_seqlens"].startswith("cu_seqlens: the ranks of the group disagree")
        assert (
            "ranks [0]" in errors[rank]["cu_seqlens"] and "ranks [1]" in errors[rank]["cu_seqlens"]
        )
        assert errors[rank]["order"].startswith("group: the ranks of the group disagree")
        assert "[1, 0]" in errors[rank]["order"]
        assert errors[rank]["tokens"].startswith("q: tokens"), errors[rank]["tokens"]
        assert "rank 1 holds" in errors[rank]["tokens"]
    for rank in (2, 3):  # the pair [2, 3] agreed
        assert errors[rank]["cu_seqlens"] is None and errors[rank]["tokens"] is None
    for rank in range(3):  # issue 30: seq_len 40, 41, 42 on three ranks
        message = errors[rank]["seq_len"]
        assert message.startswith("seq_len: the ranks of the group disagree"), message
        assert all(
            f"ranks [{r}] passed 1 sequence(s) of {40 + r} tokens" in message for r in range(3)
        )
    for rank in range(WORLD):
        message = errors[rank]["tokens_summed"]
        assert message.startswith("q: tokens (dim -2) do not match"), message
        assert "holds 5, needs 6" in message and "holds 7, needs 6" in message
        assert errors[rank]["causal"].startswith("causal: the ranks of the group disagree")
        assert errors[rank]["heads"].startswith("group: all-to-all over 4 ranks"), errors[rank]
        assert "3" in errors[rank]["heads"]
        assert errors[rank]["not_in_group"].startswith(f"rank: {rank} is not in the group")
        assert errors[rank]["after"] == 0.0  # the groups still work after the errors


def test_group_cache_timeout_is_bounded(results):
    assert all(r["timeout_s"] == ft.DEFAULT_TIMEOUT.total_seconds() == 300 for r in results)
