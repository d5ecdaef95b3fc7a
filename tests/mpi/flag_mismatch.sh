#!/usr/bin/env bash
# CTest (label mpi), issue 30: ranks started with different flags. Each case
# starts two ranks (MPMD: one command line per rank) that differ in one flag;
# the job must end within the timeout (no hang, no abort) with exit 2 and one
# `error:` line naming the flag and rank 1; a flag that fails to parse on some
# ranks only is one `error:` line naming those ranks. Then --lr inf and
# --seed -1 are rejected, and equal flags still train.
# Usage: flag_mismatch.sh MPIEXEC FCP_TRAIN
set -uo pipefail
MPIEXEC=$1
TRAIN=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for i in $(seq 0 5); do
  head -c $((300 + 97 * i)) /dev/zero | tr '\0' 'a' >"$DIR/f$i.txt"
done
# The flags varied below are not in COMMON (a flag given twice is a parse
# error of its own).
COMMON=(--data-dir "$DIR" --gbs 4 --steps 2 --dim 16 --layers 1 --ffn 32 --mem-mb 2
        --no-calibrate)
BASE=("${COMMON[@]}" --max-len 400 --heads 2)
FAIL=0
run() {  # run NAME WANT_RC WANT_TEXT -- MPIEXEC ARGS...
  local name=$1 want_rc=$2 want=$3
  shift 4
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  local errors
  errors=$(grep -c '^error: ' <<<"$out")
  if [ "$rc" -ne "$want_rc" ] || ! grep -q -- "$want" <<<"$out" ||
      { [ "$want_rc" -eq 2 ] && [ "$errors" -ne 1 ]; }; then
    echo "FAIL $name: exit $rc, want $want_rc and '$want'"
    echo "$out" | tail -5
    FAIL=1
  else
    echo "ok $name"
  fi
}
M=("$MPIEXEC" --allow-run-as-root --oversubscribe)
# name, rank 0's value, rank 1's value, the flags both share besides COMMON
for case in "--seed 1 2 --max-len 400 --heads 2" "--max-len 400 300 --heads 2" \
            "--heads 2 4 --max-len 400" "--lr 0.001 0.01 --max-len 400 --heads 2" \
            "--watchdog-s 5 0 --max-len 400 --heads 2"; do
  read -r name v0 v1 rest <<<"$case"
  read -r -a shared <<<"$rest"
  run "$name differs on rank 1" 2 "error: $name: not the same on every rank (rank 1 differs" -- \
    "${M[@]}" -np 1 "$TRAIN" "${COMMON[@]}" "${shared[@]}" "$name" "$v0" \
    : -np 1 "$TRAIN" "${COMMON[@]}" "${shared[@]}" "$name" "$v1"
done
# A flag that does not parse on one rank only: that rank's error, once,
# naming it (the other ranks used to wait and nothing was printed).
run "--seed -1 on rank 1 only" 2 \
  "error: --seed: must be a non-negative decimal integer (rank 1 only" -- \
  "${M[@]}" -np 1 "$TRAIN" "${BASE[@]}" --seed 1 : -np 1 "$TRAIN" "${BASE[@]}" --seed -1
run "--lr x on ranks 1 and 2 of 3" 2 "error: .*--lr.* (ranks 1, 2 only" -- \
  "${M[@]}" -np 1 "$TRAIN" "${BASE[@]}" : -np 2 "$TRAIN" "${BASE[@]}" --lr x
run "--lr inf" 2 "error: lr: must be a finite number > 0" -- \
  "${M[@]}" -np 2 "$TRAIN" "${BASE[@]}" --lr inf
run "--seed -1" 2 "error: --seed: must be a non-negative decimal integer" -- \
  "${M[@]}" -np 2 "$TRAIN" "${BASE[@]}" --seed -1
run "equal flags train" 0 "^summary:" -- "${M[@]}" -np 2 "$TRAIN" "${BASE[@]}"
exit $FAIL
