#!/usr/bin/env bash
# Builds the `asan` preset (clang, ASan + UBSan, -O1) and runs the unit and
# cli CTest labels under it. Any sanitizer report fails the run (UBSan is
# built with -fno-sanitize-recover; ASan aborts on the first error).
#
#   scripts/asan_test.sh                # build-asan, all unit + cli tests
#   FCP_ASAN_BUILD_DIR=build-x scripts/asan_test.sh   # another build folder
#   FCP_ASAN_LABELS='unit' scripts/asan_test.sh       # a subset of labels
#   FCP_ASAN_CTEST_ARGS='-E cli_limits' scripts/asan_test.sh
#   FCP_ASAN_TARGETS='fcp planner_test io_test cost_test' scripts/asan_test.sh
#       # build only these targets; CTest then runs only their tests (tests of
#       # unbuilt GoogleTest binaries are never discovered), a faster subset
# By default only `unit_cli_tests` is built: every GoogleTest binary and the
# CLI, which is all that the unit and cli labels run (no MPI drivers).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FCP_ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
LABELS=${FCP_ASAN_LABELS:-unit|cli}

start=$(date +%s)
/usr/bin/cmake --preset asan -B "$BUILD_DIR" >/dev/null
# shellcheck disable=SC2086
/usr/bin/cmake --build "$BUILD_DIR" -j "$JOBS" --target ${FCP_ASAN_TARGETS:-unit_cli_tests}
built=$(date +%s)

# detect_leaks: the planner must not leak. OpenMPI (exec tests) keeps global
# allocations alive at exit; its known leak frames are suppressed below.
supp=$(mktemp)
trap 'rm -f "$supp"' EXIT
cat >"$supp" <<'SUPP'
leak:libmpi
leak:libopen-pal
leak:libopen-rte
leak:libhwloc
leak:libevent
leak:libCbc
leak:libCoinUtils
leak:libOsi
leak:libClp
leak:libCgl
SUPP
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

rc=0
# shellcheck disable=SC2086
/usr/bin/ctest --test-dir "$BUILD_DIR" -L "$LABELS" --output-on-failure -j "$JOBS" ${FCP_ASAN_CTEST_ARGS:-} || rc=$?
end=$(date +%s)
echo "asan_test: build $((built - start)) s, tests $((end - built)) s (labels: $LABELS, $JOBS jobs)"
exit $rc
