#!/usr/bin/env bash
# GPU checks, run by hand on a machine with an NVIDIA GPU:  bash scripts/device_check.sh
# Each section is independent, bounded in time, and says SKIP with the reason
# when something it needs is missing.
set -u
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

# --- section: torch ---
# fcp.torch on one CUDA device (<= 2 min, installs nothing): which torch and
# GPU are there, then forward+backward of ring attention at degree 1 and of
# the in-process multi-block path (the blocks 2/4/8 ranks would compute) vs
# PyTorch's own SDPA in fp64 (accuracy, every kernel: flash bf16/fp16,
# memory-efficient fp32), then bench/torch_ring_bench.py (throughput and peak
# memory beside single-process SDPA). fcp.torch is pure Python: no build needed.
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
for dtype, kernels, tol in ((torch.bfloat16, ("auto", "cuda_flash", "cuda_efficient", "chunked"), 2e-2),
                            (torch.float16, ("auto", "cuda_flash", "cuda_efficient"), 5e-3),
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
                    ok = ok and kernel != "auto"
                    break
                err = max(float((x.double() - y).abs().max() / y.abs().max())
                          for x, y in ((out, ref), (a.grad, q64.grad), (b.grad, k64.grad),
                                       (c.grad, v64.grad)))
                name = ft.block_kernel_name(a, kernel)
                verdict = "ok" if err <= tol else "FAIL"
                ok = ok and (err <= tol or kernel != "auto")
                print(f"{str(dtype)[6:]:8} d={head_dim:3} {kernel:14} ({name:14}) degree {degree}: "
                      f"max rel err {err:.1e} (tol {tol:.0e}) {verdict}")
print("torch accuracy:", "PASS" if ok else "FAIL (the auto kernel)")
raise SystemExit(0 if ok else 1)
PYEOF
  echo "== torch: throughput and peak memory (bf16, causal, fwd+bwd)"
  timeout 50 "$PY" bench/torch_ring_bench.py --device cuda --dtype bf16 \
    --lengths 8192,32768 --degrees 1,2,4,8 --heads 32 --kv-heads 8 --head-dim 128 --reps 3 \
    || bench_rc=$?
  if [ "$accuracy_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ]; then
    echo "torch: FAIL (accuracy rc=$accuracy_rc, benchmark rc=$bench_rc; 124 = timed out)"
    return 1
  fi
  echo "torch: PASS"
)
torch_section || echo "torch: FAIL (rc=$?)"
