"""CTest python_hf_train: examples/hf/train.py on 4 gloo processes with
--check (loss and every gradient against one process running the plain
model with SDPA, 1e-5): FSDP2 + Qwen3 on plans that mix degrees, leave a
rank idle and use all-to-all groups (the printed layouts are asserted to
have all of them, so the test cannot silently run easier plans), DDP +
Llama with activation checkpointing (the ring's collectives rerun in the
backward) on ring plans of mixed degrees. Plus the script of
docs/huggingface.md on 2 processes and the example's flag errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "hf" / "train.py"
LENGTHS = Path(__file__).resolve().parent / "data" / "hf_lengths.txt"
WORLD = 4


def run_example(*flags, nproc=WORLD):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(EXAMPLE),
        "--lengths",
        str(LENGTHS),
        "--in-order",
        "--global-batch",
        "4",
        "--ranks-per-node",
        "2",
        "--max-tokens",
        "256",
        "--steps",
        "3",
        "--check",
        *flags,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def micro_batches(stdout):
    """[[(degree, all_to_all), ...] per micro-batch] per step."""
    steps = re.findall(r"^step \d+: ((?:\[[0-9u,]+\] ?)+) ", stdout, re.M)
    assert len(steps) == 3, stdout
    return [
        [
            [(int(g.rstrip("u")), g.endswith("u")) for g in mb.split(",")]
            for mb in re.findall(r"\[([0-9u,]+)\]", s)
        ]
        for s in steps
    ]


def assert_hard_plans(stdout):
    """Mixed degrees, an idle rank, an all-to-all group and a ring group > 1."""
    mbs = [mb for step in micro_batches(stdout) for mb in step]
    assert any(len({d for d, _ in mb}) > 1 for mb in mbs), f"no mixed degrees: {mbs}"
    assert any(sum(d for d, _ in mb) < WORLD for mb in mbs), f"no idle rank: {mbs}"
    assert any(a2a for mb in mbs for _, a2a in mb), f"no all-to-all group: {mbs}"
    assert any(d > 1 and not a2a for mb in mbs for d, a2a in mb), f"no ring group: {mbs}"


def assert_check_passed(stdout):
    m = re.search(r"^check: loss rel diff (\S+), max grad rel diff (\S+)$", stdout, re.M)
    assert m, stdout
    assert float(m.group(1)) <= 1e-5 and float(m.group(2)) <= 1e-5, m.group(0)


def test_qwen3_fsdp2_trains_mixed_idle_all_to_all_plans_like_one_process_and_learns():
    out = run_example("--model", "qwen3", "--wrap", "fsdp2", "--learn")
    assert_hard_plans(out)
    assert_check_passed(out)
    learnt = re.findall(
        r"^learn: (\d+) groups, RMS log error of their estimates (\S+) -> (\S+)$", out, re.M
    )
    assert len(learnt) == 3 and int(learnt[-1][0]) >= 3, out
    assert float(learnt[-1][2]) < float(learnt[-1][1]), out


def test_llama_ddp_with_activation_checkpointing_trains_ring_plans_like_one_process():
    out = run_example(
        "--model", "llama", "--wrap", "ddp", "--strategy", "fcp-ring", "--activation-checkpointing"
    )
    mbs = [mb for step in micro_batches(out) for mb in step]
    assert any(len({d for d, _ in mb}) > 1 for mb in mbs), f"no mixed degrees: {mbs}"
    assert not any(a2a for mb in mbs for _, a2a in mb), mbs
    assert_check_passed(out)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "error: --steps: must be >= 1, got 0"),
        (["--model", "gpt2"], "error: argument --model: invalid choice: 'gpt2'"),
        (["--lengths", "/nonexistent/lengths.txt"], "error: --lengths: "),
        (["--wrap", "zero3"], "error: argument --wrap: invalid choice: 'zero3'"),
        (["--hardware", "tpu-v9"], "error: cluster.hardware: "),
        (["--strategy", "best"], "error: strategy: "),
    ],
)
def test_bad_flags_give_one_error_line(flags, message):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr


def test_help_shows_defaults():
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    assert "--max-tokens MAX_TOKENS" in proc.stdout and "(default: 1024)" in proc.stdout


def docs_script():
    text = (REPO / "docs" / "huggingface.md").read_text(encoding="utf-8")
    section = text.split("## A complete script", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_script_of_the_docs_page_runs(tmp_path):
    script = tmp_path / "train_hf.py"
    script.write_text(docs_script(), encoding="utf-8")
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = re.findall(r"^step (\d+): (?:\[[0-9u,]+\] ?)+ loss (\S+)$", proc.stdout, re.M)
    assert [s for s, _ in steps] == ["0", "1", "2"], proc.stdout
    assert all(0 < float(loss) < 10 for _, loss in steps), proc.stdout
