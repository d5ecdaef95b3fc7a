#!/usr/bin/env bash
# Builds the libFuzzer targets (the `asan` preset: clang, ASan + UBSan +
# coverage; the same build tree as scripts/asan_test.sh, so the sanitizer
# core is compiled once for both) and runs each for a bounded time on its
# seed corpus.
#
#   scripts/fuzz.sh            # `make fuzz`: 300 s per target
#   scripts/fuzz.sh --short    # `make test`: 20 s per target, ~2 min on 2 cores
#   JOBS=1 scripts/fuzz.sh     # one target at a time (default: nproc at a time)
#   FUZZ_SECONDS=3600 scripts/fuzz.sh     # longer runs
#   FUZZ_TIMEOUT=2 scripts/fuzz.sh        # per-input time limit (default 10 s)
#   FUZZ_TARGETS="planner baselines" scripts/fuzz.sh
#   FCP_FUZZ_BUILD_DIR=build-x scripts/fuzz.sh
#
# Target plan_validator is Python (atheris, fuzz/plan_validator_fuzz.py): the
# plan validator through the bindings of the release build's module
# (FCP_PY_BUILD_DIR, default build: run `make build` first; the sanitizer
# module cannot be loaded into an uninstrumented interpreter).
#
# The repo's seed corpus (fuzz/corpus/<target>/) is read-only input; new
# interesting inputs go to <build>/fuzz/corpus/<target>/ (merge them into the
# repo corpus with `<target> -merge=1 fuzz/corpus/<target> <build>/fuzz/corpus/<target>`).
# A crash leaves <build>/fuzz/artifacts/<target>/crash-*; rerun it with
# `<build>/fuzz/<target>_fuzz <file>`. Exit status: non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FCP_FUZZ_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-300}
if [[ "${1:-}" == --short ]]; then SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}; fi
read -r -a TARGETS <<<"${FUZZ_TARGETS:-batch_json lengths planner baselines sim learn plan_file plan_validator}"
PY_BUILD_DIR=${FCP_PY_BUILD_DIR:-build}
PYTHON=${PYTHON:-.venv/bin/python}
# One input running longer than this is a hang and a finding (libFuzzer
# writes timeout-* to the artifacts and exits non-zero), as is one using more
# than RSS_MB of memory.
TIMEOUT_S=${FUZZ_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}

/usr/bin/cmake --preset asan -B "$BUILD_DIR" >/dev/null
/usr/bin/cmake --build "$BUILD_DIR" --target fuzz_all -j "$JOBS"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Runs one target for SECONDS_PER_TARGET; writes its one-line summary (and, on
# a finding, the log's key lines) to $BUILD_DIR/fuzz/<target>.summary and
# exits non-zero on a finding.
fuzz_one() {
  local t=$1
  local bin="$BUILD_DIR/fuzz/${t}_fuzz"
  local work="$BUILD_DIR/fuzz/corpus/$t"
  local artifacts="$BUILD_DIR/fuzz/artifacts/$t"
  local log="$BUILD_DIR/fuzz/$t.log"
  local summary="$BUILD_DIR/fuzz/$t.summary"
  mkdir -p "$work" "$artifacts"
  local cmd=("$bin")
  if [[ $t == plan_validator ]]; then
    if ! compgen -G "$PY_BUILD_DIR/python/fcp/_fcp*.so" >/dev/null; then
      echo "fuzz $t: FAILED (no fcp._fcp in $PY_BUILD_DIR/python: run make build first)" >"$summary"
      return 1
    fi
    cmd=(env "PYTHONPATH=$PY_BUILD_DIR/python" "$PYTHON" fuzz/plan_validator_fuzz.py)
  fi
  # Inputs stay small (-max_len) so that one execution is milliseconds.
  if "${cmd[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    local execs cov
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]*' || true)
    echo "fuzz $t: ok, ${execs:-?} executions in ${SECONDS_PER_TARGET} s, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) new + $(ls "fuzz/corpus/$t" | wc -l) seeds" >"$summary"
  else
    { echo "fuzz $t: FAILED (log: $log; artifacts: $artifacts)"
      grep -E 'ERROR|runtime error|_fuzz: |FCP_CHECK|invalid plan|SUMMARY|timeout' "$log" | head -20 || true
    } >"$summary"
    return 1
  fi
}

# The targets are independent single-threaded processes: JOBS of them run at
# a time (each still gets its full SECONDS_PER_TARGET), a new one starting as
# soon as any ends. learn goes first: replaying its seed corpus alone takes
# longer than the short run's 20 s (about 80 s under ASan on this project's
# 2-core machines), so the other targets fill the other cores meanwhile.
ordered=()
mkdir -p "$BUILD_DIR/fuzz"
for t in "${TARGETS[@]}"; do rm -f "$BUILD_DIR/fuzz/$t.summary"; done
for t in "${TARGETS[@]}"; do [[ $t == learn ]] && ordered=(learn "${ordered[@]}") || ordered+=("$t"); done
for t in "${ordered[@]}"; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${TARGETS[@]}"; do
  summary="$BUILD_DIR/fuzz/$t.summary"
  if [[ -f $summary ]]; then cat "$summary"; else echo "fuzz $t: FAILED (no summary: the run was killed)"; fi
  grep -q "^fuzz $t: ok" "$summary" 2>/dev/null || status=1
done
exit $status
