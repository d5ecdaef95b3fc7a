#!/usr/bin/env bash
# Regenerates every figure in the README and docs/: builds, rewrites results/
# (the simulated paper evaluation and the "where flexible CP pays" study), then
# reruns the command of every figure block and writes what it printed.
#   scripts/figures.sh            # all figures (about an hour on the project's 2-core VM,
#                                 # 63 min in the last full run; among them the CPU profile
#                                 # in-process and over MPI ~7 min, the torch CPU
#                                 # benchmark ~4 min;
#                                 # MPI, torch and megatron-core blocks need `make test`'s setup)
#   scripts/figures.sh --check    # compare instead of write (what `make test` does for the cheap ones)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=--write
if [ "${1:-}" = --check ]; then mode=--check; fi
make build >/dev/null
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ "$mode" = --write ]; then
  # results/: the paper's evaluation against the balanced baselines (simulated);
  # results/study.*: written by the study-summary block below.
  build/fcp eval paper --out results >/dev/null
fi
exec "$PY" scripts/figures.py "$mode"
