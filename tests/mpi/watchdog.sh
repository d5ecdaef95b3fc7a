#!/usr/bin/env bash
# CTest (label mpi): a rank stopped with SIGSTOP at step 2 (fcp-train
# --stop-at 1:2 raises SIGSTOP in that rank: every thread of it stops, as with
# `kill -STOP`) makes the watchdog end the job with exit code 3 and a message
# naming rank 1 and step 2, well within the test's timeout, instead of the
# job hanging forever.
# Usage: watchdog.sh MPIEXEC FCP_TRAIN
set -uo pipefail
MPIEXEC=$1
TRAIN=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 9); do
  head -c $((300 + 97 * i)) /dev/zero | tr '\0' 'a' >"$DIR/f$i.txt"
done
START=$(date +%s)
OUT=$(timeout 90 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 3 "$TRAIN" \
      --data-dir "$DIR" --max-len 400 --gbs 6 --steps 50 --dim 16 --heads 2 \
      --layers 1 --ffn 32 --mem-mb 2 --no-calibrate --watchdog-s 4 \
      --stop-at 1:2 2>&1)
RC=$?
END=$(date +%s)
echo "$OUT" | grep -v '^\s*$' | tail -12
echo "exit code $RC after $((END - START)) s"
[ "$RC" -ne 124 ] || { echo "FAIL: job hung until the timeout"; exit 1; }
[ "$RC" -eq 3 ] || { echo "FAIL: expected exit code 3 (watchdog), got $RC"; exit 1; }
grep -q 'stopping itself (SIGSTOP) at step 2' <<<"$OUT" || { echo "FAIL: stop not reached"; exit 1; }
grep -Eq 'watchdog: rank 1 made no progress .*step 2' <<<"$OUT" ||
  { echo "FAIL: no watchdog line naming rank 1 and step 2"; exit 1; }
echo PASS
