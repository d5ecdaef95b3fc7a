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

# --- section: torch ---
# fcp.torch on one CUDA device (<= 2 min, installs nothing): which torch and
# GPU are there, then forward+backward of ring attention at degree 1 and of
# the in-process multi-block path (the blocks 2/4/8 ranks would compute) vs
# PyTorch's own SDPA in fp64 (accuracy, every kernel: cuDNN and flash bf16/fp16,
# memory-efficient fp32), then bench/torch_ring_bench.py (throughput and peak
# memory beside single-process SDPA), then packed micro-batches: ring and
# Ulysses at degree 1 against SDPA per whole sequence (one 32k sequence and 64
# sequences of 256-2048 tokens; goal <= 1.05x; flash-attn's varlen kernel
# when installed). fcp.torch is pure Python: no build needed.
torch_section() (
  set -euo pipefail
  echo "== torch: environment"
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "torch: SKIP ($PY cannot import torch)"
    return 0
  fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
        "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")'
  if ! "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "torch: SKIP (no CUDA device visible to this torch)"
    return 0
  fi
  export PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}"
  echo "== torch: accuracy vs fp64 SDPA (s = 3000, GQA 8/2 heads, head_dim 64 and 128)"
  local accuracy_rc=0 bench_rc=0
  timeout 60 "$PY" - <<'PYEOF' || accuracy_rc=$?
import torch, fcp.torch as ft
torch.manual_seed(0)
dev = torch.device("cuda")
ok = True
for dtype, kernels, tol in ((torch.bfloat16, ("auto", "cuda_cudnn", "cuda_flash", "cuda_efficient", "chunked"), 2e-2),
                            (torch.float16, ("auto", "cuda_cudnn", "cuda_flash", "cuda_efficient"), 5e-3),
                            (torch.float32, ("auto", "cuda_efficient", "chunked"), 1e-4)):
    for head_dim in (64, 128):
        q = torch.randn(1, 8, 3000, head_dim, device=dev)
        k, v, g = (torch.randn(1, h, 3000, head_dim, device=dev) for h in (2, 2, 8))
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        ref = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True,
                                                               enable_gqa=True)
        (ref * g.double()).sum().backward()
        for kernel in kernels:
            for degree in (1, 2, 4, 8):
                a, b, c = (t.detach().to(dtype).clone().requires_grad_() for t in (q, k, v))
                try:
                    if degree == 1:
                        out = ft.ring_attention(a, b, c, [0], rank=0, kernel=kernel)
                    else:
                        out = ft.blockwise_attention(a, b, c, degree, kernel=kernel)
                    (out * g.to(dtype)).sum().backward()
                    torch.cuda.synchronize()
                except Exception as e:  # a kernel this GPU/torch lacks
                    print(f"{str(dtype)[6:]:8} d={head_dim:3} {kernel:14} degree {degree}: ERROR "
                          f"{type(e).__name__}: {str(e).splitlines()[0][:150]}")
                    ok = ok and kernel != "auto"  # unavailable: fine unless auto chose it
                    break
                err = max(float((x.double() - y).abs().max() / y.abs().max())
                          for x, y in ((out, ref), (a.grad, q64.grad), (b.grad, k64.grad),
                                       (c.grad, v64.grad)))
                name = ft.block_kernel_name(a, kernel)
                verdict = "ok" if err <= tol else "FAIL"
                ok = ok and err <= tol  # a kernel that runs must be right
                print(f"{str(dtype)[6:]:8} d={head_dim:3} {kernel:14} ({name:14}) degree {degree}: "
                      f"max rel err {err:.1e} (tol {tol:.0e}) {verdict}")
print("torch accuracy:", "PASS" if ok else "FAIL")
raise SystemExit(0 if ok else 1)
PYEOF
  echo "== torch: throughput and peak memory (bf16, causal, fwd+bwd; auto kernel, then each one)"
  for kernel in auto cuda_cudnn cuda_flash; do
    timeout 50 "$PY" bench/torch_ring_bench.py --device cuda --dtype bf16 --kernel $kernel \
      --lengths 8192,32768 --degrees 1,2,4,8 --heads 32 --kv-heads 8 --head-dim 128 --reps 3 \
      || bench_rc=$?
  done
  echo "== torch: packed ring and Ulysses vs SDPA on whole sequences (bf16, 32/8 heads x 128): degree 1, then the blocks of degrees 2 and 4 per kernel (per piece vs varlen)"
  local packed_rc=0
  timeout 150 "$PY" - <<'PYEOF' || packed_rc=$?
import os, torch, fcp.torch as ft
dev = torch.device(os.environ.get("FCP_CHECK_DEVICE", "cuda"))
small = dev.type == "cpu"  # a syntax run off the GPU: tiny shapes
try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None
print("flash-attn varlen:", "installed" if flash_attn_varlen_func else "not installed (SDPA per sequence)")
heads, kv_heads, head_dim = (4, 2, 16) if small else (32, 8, 128)
dtype = torch.float32 if small else torch.bfloat16
gen = torch.Generator().manual_seed(0)
one = [512] if small else [32768]
many = [int(x) for x in torch.randint(256, 2049, (8 if small else 64,), generator=gen)]
def timed(fn, reps=5):
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            import time; t0 = time.perf_counter(); fn(); times.append(1e3 * (time.perf_counter() - t0))
    return sorted(times)[len(times) // 2]
ok = True
for name, lengths in (("one sequence", one), (f"{len(many)} sequences of 256-2048", many)):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    q = torch.randn(1, heads, cu[-1], head_dim, device=dev, dtype=dtype)
    k, v = (torch.randn(1, kv_heads, cu[-1], head_dim, device=dev, dtype=dtype) for _ in range(2))
    g = torch.randn_like(q)
    def leaves():
        return [t.detach().requires_grad_() for t in (q, k, v)]
    def sdpa():
        a, b, c = leaves()
        out = torch.cat([torch.nn.functional.scaled_dot_product_attention(
            a[:, :, x:y], b[:, :, x:y], c[:, :, x:y], is_causal=True, enable_gqa=True)
            for x, y in zip(cu[:-1], cu[1:])], dim=2)
        (out * g).sum().backward()
        return out, a.grad
    def fcp_path(attend):
        def step():
            a, b, c = leaves()
            out = attend(a, b, c, [0], causal=True, cu_seqlens=cu, rank=0)
            (out * g).sum().backward()
            return out, a.grad
        return step
    paths = [("ring", fcp_path(ft.ring_attention)), ("ulysses", fcp_path(ft.ulysses_attention))]
    if len(lengths) > 1:
        # Degree > 1: the blocks d ring ranks compute (in this process, no
        # messages), each ring step's pieces one kernel call per piece
        # (cuda_flash) or one varlen call for all sequences (cuda_flash_varlen:
        # PyTorch's; flash_attn_varlen: flash-attn's; auto picks flash-attn's
        # when installed).
        kernels = ["auto"] if small else ["auto", "cuda_flash", "cuda_flash_varlen"]
        if flash_attn_varlen_func and not small:
            kernels.append("flash_attn_varlen")
        def blocks(degree, kernel):
            def step():
                a, b, c = leaves()
                out = ft.blockwise_attention(a, b, c, degree, causal=True, cu_seqlens=cu,
                                             kernel=kernel)
                (out * g).sum().backward()
                return out, a.grad
            return step
        paths += [(f"d{d} {kn}", blocks(d, kn)) for d in (2, 4) for kn in kernels]
    ref_out, ref_dq = sdpa()
    base = timed(sdpa)
    print(f"{name} ({cu[-1]} tokens): SDPA per sequence {base:.2f} ms")
    for label, step in paths:
        try:
            out, dq = step()
        except Exception as e:  # a kernel this GPU/torch lacks: reported, not fatal
            print(f"  {label:26} FAIL {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            ok = False
            continue
        out, ref_out = out.detach(), ref_out.detach()
        err = max(float((out.float() - ref_out.float()).abs().max() / ref_out.float().abs().max()),
                  float((dq.float() - ref_dq.float()).abs().max() / ref_dq.float().abs().max()))
        t = timed(step)
        good = err <= (1e-4 if dtype == torch.float32 else 2e-2)
        ok = ok and good
        goal = ("all d ranks' blocks, one process" if label.startswith("d") else
                f"goal <= 1.05x: {'met' if t / base <= 1.05 else 'missed'}")
        print(f"  {label:26} {t:8.2f} ms  {t / base:.3f}x SDPA ({goal}); max rel err vs SDPA "
              f"{err:.1e} {'ok' if good else 'FAIL'}")
print("torch packed:", "PASS" if ok else "FAIL")
raise SystemExit(0 if ok else 1)
PYEOF
  if [ "$accuracy_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ] || [ "$packed_rc" -ne 0 ]; then
    echo "torch: FAIL (accuracy rc=$accuracy_rc, benchmark rc=$bench_rc, packed rc=$packed_rc; 124 = timed out)"
    return 1
  fi
  echo "torch: PASS"
)
torch_section || echo "torch: FAIL (rc=$?)"

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
# fcp.megatron on one GPU through Megatron-Core 0.19.2 + TransformerEngine:
# degree-1 THD micro-batches in one-rank cp_groups, their losses equal to
# Megatron's own packed run (PackedSeqParams as pretrain_gpt.py's forward_step
# builds them) and to one-sequence-at-a-time losses, then 3 training steps
# through Megatron's schedule (<= 2 min). Interpreter: the Megatron venv
# (.venv312, CPython 3.12; MEGATRON_PY overrides) with CUDA torch,
# megatron-core==0.19.2 and transformer-engine[pytorch] >= 2.16; the fcp module
# for it: `cmake --build build --target _fcp_megatron`.
megatron_section() {
  local mpy=${MEGATRON_PY:-}
  if [ -z "$mpy" ]; then
    mpy=python3
    [ -x .venv312/bin/python ] && mpy=.venv312/bin/python
  fi
  echo "== megatron: environment ($mpy)"
  "$mpy" - <<'PYEOF'
import importlib.metadata as md
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU {gpu}")
except ImportError:
    print("torch MISSING")
for pkg in ("megatron-core", "transformer-engine", "transformer-engine-torch",
            "transformer-engine-cu12", "transformer-engine-cu13", "numpy"):
    try:
        print(f"{pkg} {md.version(pkg)}")
    except md.PackageNotFoundError:
        print(f"{pkg} MISSING")
PYEOF
  if ! "$mpy" -c "import transformer_engine.pytorch" 2>/dev/null; then
    echo "megatron: skipped: no TransformerEngine"
    return 0
  fi
  if ! "$mpy" -c "import torch, megatron.core; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "megatron: SKIP (needs CUDA torch and megatron-core==0.19.2 beside TransformerEngine)"
    return 0
  fi
  if ! PYTHONPATH=build/python "$mpy" -c "import fcp; assert fcp._fcp is not None" 2>/dev/null; then
    echo "megatron: SKIP (fcp._fcp not built for $mpy: /usr/bin/cmake --build build --target _fcp_megatron)"
    return 0
  fi
  echo "== megatron: 1-GPU smoke test (THD check + 3 training steps, timeout 120 s)"
  PYTHONPATH=build/python OMP_NUM_THREADS=1 timeout 120 "$mpy" -m torch.distributed.run \
    --nproc-per-node 1 examples/megatron/train_gpt.py --check-thd --steps 3 --seqs 16 \
    --max-len 2048 --tokens-per-rank 16384
  local rc=$?
  if [ $rc -eq 0 ]; then echo "megatron: PASS"; else echo "megatron: FAIL (rc=$rc)"; fi
}
megatron_section

# --- section: replay ---
# Measured, not simulated (docs/replay.md): profile one GPU through PyTorch
# with a Qwen3-8B layer in bf16 (python -m fcp profile --target torch
# --in-process: ring ranks' shares and Ulysses ranks' heads one at a time,
# messages as device copies),
# then replay fcp's plans and the static baseline's at degrees 4/8/16 for 2
# real batches (data/, Go source lengths) of the 64-rank h100-8x8 cluster:
# every group's forward + recompute + backward of one layer, times 36, ranks
# one at a time, communication charged with the plan's H100 links. Prints the
# measured group times against the simulator's H100 prediction for the same
# groups and the measured fcp / best static step ratio beside the predicted
# ones. Needs the built module and CLI (build/python, build/fcp). About 5 min.
replay_section() {
  echo "== replay: environment"
  if ! PYTHONPATH=build/python "$PY" -c "import fcp, torch; assert fcp._fcp is not None; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "replay: SKIP (needs CUDA torch and the built fcp._fcp: /usr/bin/cmake --build build --target _fcp fcp)"
    return 0
  fi
  [ -x build/fcp ] || { echo "replay: SKIP (build/fcp not built)"; return 0; }
  local R="$OUT/replay"
  mkdir -p "$R"
  echo "== replay: profile (qwen3-8b layer, bf16, one GPU, ring and all-to-all groups, timeout 180 s)"
  PYTHONPATH=build/python FCP_CLI=build/fcp timeout 180 "$PY" -m fcp profile --target torch \
    --device cuda --dtype bf16 --model qwen3-8b --in-process --lengths 2048,4096,8192,16384 \
    --degrees 1,2,4,8 --min-chunk 512 --repeats 2 --out "$R/cost_model.json" \
    || { echo "replay: FAIL (profile)"; return 0; }
  echo "== replay: plans (h100-8x8, 64 ranks, 2 batches of 256 real lengths; simulator preset cost model)"
  local sim=(simulate --lengths data/go-src-qwen3-lengths.csv --model qwen3-8b --cluster h100-8x8
             --ranks 64 --gbs 256 --steps 2 --warmup 0 -q)
  build/fcp "${sim[@]}" --strategies fcp --save-plans "$R/fcp.jsonl" >/dev/null || { echo "replay: FAIL (plans)"; return 0; }
  local files=("$R/fcp.jsonl")
  for d in 4 8 16; do
    build/fcp "${sim[@]}" --strategies megatron --cp $d --save-plans "$R/static-d$d.jsonl" >/dev/null \
      && files+=("$R/static-d$d.jsonl")
  done
  echo "== replay: groups on the GPU (timeout 240 s)"
  PYTHONPATH=build/python FCP_CLI=build/fcp timeout 240 "$PY" -m fcp replay "${files[@]}" \
    --cost-model "$R/cost_model.json" --links plan --sim-model qwen3-8b --sim-cluster h100-8x8 \
    --repeats 2 --format json > "$R/replay.json" || { echo "replay: FAIL (replay)"; return 0; }
  "$PY" - "$R/replay.json" <<'PYEOF'
import json, statistics, sys
rep = json.load(open(sys.argv[1]))
print(rep["header"])
sums = {}
for f in rep["files"]:
    name = f["path"].rsplit("/", 1)[-1].removesuffix(".jsonl")
    plans = f["plans"]
    sums[name] = {k: sum(p[k] for p in plans) for k in ("measured_ms", "model_ms", "sim_ms")}
    print(f"{name:<12} measured {sums[name]['measured_ms'] / 1e3:8.2f} s  profiled model "
          f"{sums[name]['model_ms'] / 1e3:8.2f} s  simulator (H100) {sums[name]['sim_ms'] / 1e3:8.2f} s")
    for lo, hi in ((0, 4096), (4096, 1 << 40)):
        r = [g["measured_ms"] / g["sim_ms"] for p in plans for g in p["groups"]
             if g["sim_ms"] and lo <= g["tokens"] / g["degree"] < hi]
        if r:
            print(f"  groups with {lo}..{hi if hi < 1 << 40 else 'inf'} tokens per rank: {len(r)}, "
                  f"measured / simulated median {statistics.median(r):.3f}, "
                  f"min {min(r):.3f}, max {max(r):.3f}")
statics = [k for k in sums if k != "fcp"]
if "fcp" in sums and statics:
    best = min(statics, key=lambda k: sums[k]["measured_ms"])
    ratio = lambda key: sums["fcp"][key] / sums[best][key]
    print(f"fcp / {best} (best static, measured): measured {ratio('measured_ms'):.3f}, "
          f"profiled model {ratio('model_ms'):.3f}, simulator {ratio('sim_ms'):.3f}")
PYEOF
  echo "replay: DONE (results in $R)"
}
replay_section
# --- end section: replay ---
