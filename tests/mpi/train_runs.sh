#!/usr/bin/env bash
# CTest (label mpi): fcp-train under mpirun -np 4 trains on a small generated
# corpus (loss must fall), and bad input exits 2 with one `error:` line.
# Usage: train_runs.sh MPIEXEC FCP_TRAIN
set -euo pipefail
MPIEXEC=$1
TRAIN=$2
MPIRUN=("$MPIEXEC" --allow-run-as-root --oversubscribe -np 4)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 19); do
  for j in $(seq 0 $((i % 7 + 1))); do
    echo "static int add$((j % 3))(int x) { return x + $((j % 2)); }"
  done >"$DIR/f$i.h"
done
for strategy in fcp megatron; do
  OUT=$(timeout 100 "${MPIRUN[@]}" "$TRAIN" --strategy "$strategy" --data-dir "$DIR" \
        --max-len 200 --gbs 6 --steps 12 --dim 16 --heads 2 --layers 1 --ffn 32 \
        --lr 0.01 --mem-mb 2 --no-calibrate --seed 3)
  echo "$OUT"
  grep -q '^summary:' <<<"$OUT"
  FIRST=$(grep '^step' <<<"$OUT" | head -1 | awk '{print $4}')
  LAST=$(grep '^step' <<<"$OUT" | tail -1 | awk '{print $4}')
  awk -v f="$FIRST" -v l="$LAST" 'BEGIN { if (!(l < f - 0.5)) { print "loss did not fall: " f " -> " l; exit 1 } }'
done
# Bad input: exit 2, one error line naming the field.
set +e
ERR=$(timeout 60 "${MPIRUN[@]}" "$TRAIN" --strategy no-such --data-dir "$DIR" --steps 1 2>&1 >/dev/null)
RC=$?
set -e
echo "$ERR"
[ "$RC" -eq 2 ] || { echo "expected exit 2, got $RC"; exit 1; }
grep -q '^error: strategy' <<<"$ERR"
echo PASS
