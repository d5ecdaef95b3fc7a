#!/usr/bin/env bash
# CTest (label mpi): a rank that dies mid-run (rank 2 exits without
# MPI_Finalize at step 2) makes the whole job exit non-zero well within the
# 60 s timeout instead of hanging in a ring receive or the all-reduce.
# Usage: rank_death.sh MPIEXEC FCP_TRAIN
set -uo pipefail
MPIEXEC=$1
TRAIN=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 9); do
  head -c $((300 + 97 * i)) /dev/zero | tr '\0' 'a' >"$DIR/f$i.txt"
done
START=$(date +%s)
OUT=$(timeout 60 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$TRAIN" \
      --data-dir "$DIR" --max-len 400 --gbs 6 --steps 50 --dim 16 --heads 2 \
      --layers 1 --ffn 32 --mem-mb 2 --no-calibrate --die-at 2:2 2>&1)
RC=$?
END=$(date +%s)
echo "$OUT" | tail -15
echo "exit code $RC after $((END - START)) s"
[ "$RC" -ne 0 ] || { echo "FAIL: job exited 0 although rank 2 died"; exit 1; }
[ "$RC" -ne 124 ] || { echo "FAIL: job hung until the timeout"; exit 1; }
grep -q 'simulated crash at step 2' <<<"$OUT" || { echo "FAIL: crash not reached"; exit 1; }
echo PASS
