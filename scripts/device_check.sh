#!/usr/bin/env bash
# GPU checks, run once on a machine with an NVIDIA GPU:  bash scripts/device_check.sh
# Each section is independent, bounded in time, prints what it measured, and
# says SKIP with the reason when something it needs is missing. Results the
# sections write go to $OUT (default /tmp/fcp-device-check).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/fcp-device-check}"
mkdir -p "$OUT"
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

# --- section: sim-calibration ---
# Measures what the simulator's hardware constants describe (docs/simulator.md):
# BF16 GEMM efficiency by rows, attention forward/backward throughput causal
# and unmasked (the FlashAttention-3 paper's setup: batch x seqlen = 16k
# tokens, 16 heads x 128), and sustained HBM copy bandwidth. Writes
# $OUT/sim_calibration.json; medians of 10 timed repetitions after warm-up.
# About 1-2 minutes. These are MEASURED figures of the device that runs them
# (an H200, not the H100 the presets describe): compare fractions of peak.
timeout 300 "$PY" - "$OUT/sim_calibration.json" <<'PYEOF' || echo "sim-calibration: FAILED"
import json, sys, torch
import torch.nn.functional as F
assert torch.cuda.is_available(), "no GPU"
dev = torch.device("cuda")
def bench(fn, reps=10):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort(); return times[len(times) // 2]
res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "gemm": [], "attention": []}
# GEMM: rows x 4096 @ 4096 x 14336 (Llama-3-8B MLP up-projection), bf16.
w = torch.randn(4096, 14336, device=dev, dtype=torch.bfloat16)
for m in (256, 512, 1024, 2048, 4096, 8192, 16384):
    x = torch.randn(m, 4096, device=dev, dtype=torch.bfloat16)
    t = bench(lambda: x @ w)
    res["gemm"].append({"rows": m, "tflops": 2 * m * 4096 * 14336 / t / 1e12})
# Attention (SDPA; flash backend where available), 16 heads x 128, B*S = 16k.
for causal in (True, False):
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        b = 16384 // s
        q, k, v = (torch.randn(b, 16, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        flops = 4 * b * 16 * s * s * 128 / (2 if causal else 1)
        fwd = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.randn_like(o)
        bwd = bench(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
        res["attention"].append({"causal": causal, "seqlen": s, "fwd_tflops": flops / fwd / 1e12,
                                 "bwd_tflops": 2.5 * flops / bwd / 1e12})
# HBM: copy of 4 GiB (read + write).
src = torch.empty(1 << 31, device=dev, dtype=torch.int16); dst = torch.empty_like(src)
t = bench(lambda: dst.copy_(src))
res["hbm_copy_bytes_per_s"] = 2 * src.numel() * 2 / t
json.dump(res, open(sys.argv[1], "w"), indent=1)
print(json.dumps(res, indent=1))
PYEOF
# --- end section: sim-calibration ---

# --- section: megatron ---
# fcp.megatron on one GPU through Megatron-Core + TransformerEngine: degree-1
# groups, THD packing, Megatron's own schedule (<= 2 min). Needs the fcp
# planner module (build/python/fcp/_fcp*.so: `cmake --build build --target _fcp`),
# CUDA torch, megatron-core==0.16.1, transformer-engine[pytorch] >= 1.10.
megatron_section() {
  echo "== megatron: environment"
  "$PY" - <<'PYEOF'
import importlib.metadata as md
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU {gpu}")
except ImportError:
    print("torch MISSING")
for pkg in ("megatron-core", "transformer-engine", "transformer-engine-torch",
            "transformer-engine-cu12", "flash-attn", "numpy"):
    try:
        print(f"{pkg} {md.version(pkg)}")
    except md.PackageNotFoundError:
        print(f"{pkg} MISSING")
PYEOF
  if ! PYTHONPATH=build/python "$PY" -c "import fcp; assert fcp._fcp is not None" 2>/dev/null; then
    echo "megatron: SKIP (fcp._fcp not built: /usr/bin/cmake --build build --target _fcp)"
    return 0
  fi
  if ! "$PY" -c "import torch, megatron.core, transformer_engine.pytorch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "megatron: SKIP (needs CUDA torch, megatron-core==0.16.1 and transformer-engine[pytorch];"
    echo "          wheels to carry: megatron_core-0.16.1, transformer_engine, transformer_engine_torch,"
    echo "          transformer_engine_cu12 matching this torch/CUDA)"
    return 0
  fi
  echo "== megatron: 1-GPU smoke test (THD check + 3 training steps, timeout 120 s)"
  PYTHONPATH=build/python OMP_NUM_THREADS=1 timeout 120 "$PY" -m torch.distributed.run \
    --nproc-per-node 1 examples/megatron/train_gpt.py --check-thd --steps 3 --seqs 16 \
    --max-len 2048 --tokens-per-rank 16384
  local rc=$?
  if [ $rc -eq 0 ]; then echo "megatron: PASS"; else echo "megatron: FAIL (rc=$rc)"; fi
}
megatron_section
