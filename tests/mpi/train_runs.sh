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
# Bad input or configuration: found before training, exit 2, exactly one
# `error:` line (rank 0 only) naming the field with the reason.
bad_input() {  # EXPECTED_FIELD ARGS...
  local field=$1
  shift
  set +e
  ERR=$(timeout 60 "${MPIRUN[@]}" "$TRAIN" --data-dir "$DIR" --steps 1 --no-calibrate "$@" 2>&1 >/dev/null)
  RC=$?
  set -e
  echo "[$*] -> exit $RC: $(grep '^error:' <<<"$ERR")"
  [ "$RC" -eq 2 ] || { echo "FAIL: expected exit 2, got $RC"; echo "$ERR"; exit 1; }
  [ "$(grep -c 'error' <<<"$ERR")" -eq 1 ] || { echo "FAIL: not exactly one error line"; echo "$ERR"; exit 1; }
  grep -q "^error: $field: ..." <<<"$ERR" || { echo "FAIL: field $field not named"; exit 1; }
}
bad_input strategy --strategy no-such
bad_input model.dim --dim -8
bad_input mem_mb --mem-mb 0.01
bad_input mem_mb --mem-mb 1.6 --max-len 200000
bad_input gbs --strategy optimal --gbs 16
bad_input cp_degree --strategy megatron --cp-degree 3
bad_input stop_at --stop-at x
set +e
ERR=$(timeout 60 "${MPIRUN[@]}" "$TRAIN" --bogus 2>&1 >/dev/null)
RC=$?
set -e
[ "$RC" -eq 2 ] && [ "$(grep -c '^error:' <<<"$ERR")" -eq 1 ] || { echo "FAIL: flag error: exit $RC"; echo "$ERR"; exit 1; }
HELP=$("$TRAIN" --help)
grep -q -- '--mem-mb FLOAT=256' <<<"$HELP" || { echo "FAIL: --help does not show defaults"; exit 1; }
echo PASS
