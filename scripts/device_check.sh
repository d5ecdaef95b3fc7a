#!/usr/bin/env bash
# GPU checks, run by hand on a machine with an NVIDIA GPU:  bash scripts/device_check.sh
# Each section is independent, bounded in time, and says SKIP with the reason
# when something it needs is missing.
set -u
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

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
