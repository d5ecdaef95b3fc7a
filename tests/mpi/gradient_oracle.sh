#!/usr/bin/env bash
# CTest (label mpi): gradient equivalence of the MPI executor (4 ranks; ring
# and Ulysses groups; causal, full and mixed masks) against a float64 PyTorch
# model written independently of the executor (torch_oracle.py), on real text
# lengths (tests/mpi/data: a sample of Go's source tree tokenized with the
# Qwen3 tokenizer) cut from real text (this repository's sources).
# Usage: gradient_oracle.sh MPIEXEC EXEC_MPITEST PYTHON SOURCE_DIR
set -euo pipefail
MPIEXEC=$1
BIN=$2
PYTHON=$3
SRC=$4
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat "$SRC"/src/exec/*.cc >"$DIR/text.txt"
MPIRUN=("$MPIEXEC" --allow-run-as-root --oversubscribe)
"${MPIRUN[@]}" -np 1 "$BIN" dump "$SRC/tests/mpi/data/go-src-qwen3-lengths-sample.csv" \
  "$DIR/text.txt" "$DIR"
"$PYTHON" "$SRC/tests/mpi/torch_oracle.py" "$DIR"
"${MPIRUN[@]}" -np 4 "$BIN" gradients "$DIR"
