#!/usr/bin/env bash
# GPU checks for the lead to run once on the device machine. Each helper owns
# one section, delimited by a `# --- section: <name> ---` comment.
set -u
OUT="${OUT:-/tmp/fcp-device-check}"
mkdir -p "$OUT"
PY="${PY:-$(pwd)/.venv/bin/python}"
[ -x "$PY" ] || PY=python3

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
