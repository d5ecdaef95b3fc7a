#!/usr/bin/env bash
# CTest (label mpi), two ways a rank stops making progress mid-run:
#   die:  rank 2 exits without MPI_Finalize at step 2 (--die-at 2:2); the
#         job must exit non-zero well within the timeout instead of hanging
#         in a ring receive or the all-reduce;
#   stop: rank 1 raises SIGSTOP at step 2 (--stop-at 1:2: every thread of it
#         stops, as with `kill -STOP`); the watchdog (--watchdog-s 4) must end
#         the job with exit code 3 and a line naming rank 1 and step 2.
# Usage: rank_death.sh MPIEXEC FCP_TRAIN die|stop
set -uo pipefail
MPIEXEC=$1
TRAIN=$2
MODE=${3:-die}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 9); do
  head -c $((300 + 97 * i)) /dev/zero | tr '\0' 'a' >"$DIR/f$i.txt"
done
if [ "$MODE" = stop ]; then
  FAULT=(--watchdog-s 4 --stop-at 1:2)
else
  FAULT=(--die-at 2:2)
fi
START=$(date +%s)
OUT=$(timeout 60 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$TRAIN" \
      --data-dir "$DIR" --max-len 400 --gbs 6 --steps 50 --dim 16 --heads 2 \
      --layers 1 --ffn 32 --mem-mb 2 --no-calibrate "${FAULT[@]}" 2>&1)
RC=$?
END=$(date +%s)
echo "$OUT" | grep -v '^\s*$' | tail -12
echo "exit code $RC after $((END - START)) s"
[ "$RC" -ne 124 ] || { echo "FAIL: job hung until the timeout"; exit 1; }
if [ "$MODE" = stop ]; then
  [ "$RC" -eq 3 ] || { echo "FAIL: expected exit code 3 (watchdog), got $RC"; exit 1; }
  grep -q 'stopping itself (SIGSTOP) at step 2' <<<"$OUT" || { echo "FAIL: stop not reached"; exit 1; }
  grep -Eq 'watchdog: rank 1 made no progress .* at step 2' <<<"$OUT" ||
    { echo "FAIL: no watchdog line naming rank 1 and step 2"; exit 1; }
else
  [ "$RC" -ne 0 ] || { echo "FAIL: job exited 0 although rank 2 died"; exit 1; }
  grep -q 'simulated crash at step 2' <<<"$OUT" || { echo "FAIL: crash not reached"; exit 1; }
fi
echo PASS
