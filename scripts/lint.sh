#!/usr/bin/env bash
# The project's formatting and lint checks, each a few seconds:
#   scripts/lint.sh format   clang-format (.clang-format, Google style) on every C++ file
#   scripts/lint.sh ruff     ruff lint (ruff.toml) on every Python file
#   scripts/lint.sh ruff-format  ruff format --check on every Python file
#   scripts/lint.sh tidy     clang-tidy (.clang-tidy) on the planner core, needs build/compile_commands.json
#   scripts/lint.sh long-functions  no function in src/, apps/, python/ over 80 lines without a
#                            `// Long because:` (`# Long because:`) line above it (scripts/long_functions.py)
#   scripts/lint.sh          all five
#   scripts/lint.sh fix      rewrite: clang-format -i, ruff check --fix, ruff format
# `make test` runs each as a CTest test (label lint).
set -euo pipefail
cd "$(dirname "$0")/.."
RUFF=${RUFF:-.venv/bin/ruff}
PY_DIRS=(python tests scripts bench examples)
cxx_files() { git ls-files '*.cc' '*.h' '*.inc' | grep -v '^fuzz/corpus/'; }
# The planner core, where a change is most often made: clang-tidy parses these
# translation units (the whole tree would take minutes, not seconds).
TIDY_FILES=(src/planner/scheduler.cc src/planner/microbatch.cc src/cost/cost_model.cc)

check_format() { cxx_files | xargs clang-format --dry-run --Werror; }
check_ruff() { "$RUFF" check --no-cache "${PY_DIRS[@]}"; }
check_ruff_format() { "$RUFF" format --no-cache --check "${PY_DIRS[@]}"; }
check_long_functions() { "${PYTHON:-python3}" scripts/long_functions.py; }
check_tidy() {
  local db=${BUILD_DIR:-build}
  [ -f "$db/compile_commands.json" ] || { echo "error: $db/compile_commands.json missing: configure the build first (make build)" >&2; exit 2; }
  clang-tidy --quiet -p "$db" "${TIDY_FILES[@]}"
}

case "${1:-all}" in
  format) check_format ;;
  ruff) check_ruff ;;
  ruff-format) check_ruff_format ;;
  tidy) check_tidy ;;
  long-functions) check_long_functions ;;
  all) check_format; check_ruff; check_ruff_format; check_long_functions; check_tidy ;;
  fix)
    cxx_files | xargs clang-format -i
    "$RUFF" check --no-cache --fix "${PY_DIRS[@]}" || true
    "$RUFF" format --no-cache "${PY_DIRS[@]}" ;;
  -h|--help) sed -n '2,11p' "$0" ;;
  *) echo "error: unknown check '$1' (format, ruff, ruff-format, tidy, long-functions, all, fix)" >&2; exit 2 ;;
esac
