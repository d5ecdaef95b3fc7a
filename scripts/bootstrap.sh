#!/usr/bin/env bash
# Installs what fcp needs on Debian 12. Idempotent: what is already there is
# skipped, so a second run does no network work.
#
#   scripts/bootstrap.sh plan   # `make run`: the Debian packages that building
#                               # the planner CLI (build/fcp) needs, nothing else
#   scripts/bootstrap.sh all    # `make test` (default): also MPI, GoogleTest,
#                               # Google Benchmark, clang (fuzzing), gnuplot, and
#                               # the project virtual environment .venv with the
#                               # Python packages of requirements-test.txt, and
#                               # .venv312 (CPython 3.12, megatron-core 0.19.2)
#                               # with those of requirements-megatron.txt
set -euo pipefail
cd "$(dirname "$0")/.."

LEVEL=${1:-all}
case "$LEVEL" in
  plan|all) ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "error: bootstrap level must be 'plan' or 'all', got '$LEVEL'" >&2; exit 2 ;;
esac

# Building the CLI: compiler, Debian's CMake 3.25 (/usr/bin/cmake; a pip cmake
# earlier on PATH is not used), JSON, flags, formatting, least squares (Eigen),
# the FlexSP baseline's MILP (CBC) and the profiler's GEMMs (OpenBLAS).
PLAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libeigen3-dev
  coinor-libcbc-dev coinor-libclp-dev coinor-libcoinutils-dev coinor-libosi-dev coinor-libcgl-dev
  libopenblas-dev
)
# Everything else `make test` and `make asan-test` build or run.
TEST_PACKAGES=(
  git clang libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  python3-dev python3-venv
  gnuplot-nox
  time  # GNU time (/usr/bin/time): peak memory in docs/reliability.md's figure block
  valgrind  # callgrind: the planner's instruction counts in docs/planner.md
  ccache  # the wheel test's two builds (tests/python/test_wheel.py) share objects
  clang-format clang-tidy  # scripts/lint.sh: formatting and lint checks in `make test`
)

packages=("${PLAN_PACKAGES[@]}")
if [ "$LEVEL" = all ]; then packages+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} Debian packages present ($LEVEL)"
else
  echo "bootstrap: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

[ "$LEVEL" = all ] || exit 0

# The project virtual environment. Its interpreter is the python3 first on
# PATH (3.11 on this project's machines); FCP_PYTHON overrides it. A stamp of
# the requirements file skips the pip step when nothing changed.
VENV=.venv
REQS=requirements-test.txt
WHEEL_REQS=requirements-wheel.txt
stamp="$VENV/.fcp-requirements.sha256"
want=$(cat "$REQS" "$WHEEL_REQS" | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "bootstrap: $VENV up to date ($("$VENV/bin/python" --version))"
else
  PY=${FCP_PYTHON:-python3}
  if [ ! -x "$VENV/bin/python" ]; then
    echo "bootstrap: creating $VENV with $($PY --version)"
    "$PY" -m venv "$VENV"
  fi
  pip_args=(--disable-pip-version-check -q)
  # This project's machines keep the PyTorch CPU wheel in /opt/wheels.
  if [ -d /opt/wheels ]; then pip_args+=(--find-links /opt/wheels); fi
  "$VENV/bin/python" -m pip install "${pip_args[@]}" -r "$REQS"
  # The wheel test (tests/python/test_wheel.py) installs into fresh CPython 3.11
  # and 3.12 environments with no network: their binary wheels, kept here.
  for v in 3.11 3.12; do
    "$VENV/bin/python" -m pip download "${pip_args[@]}" --only-binary=:all: --python-version "$v" \
      --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      -d "$VENV/wheelhouse" -r "$WHEEL_REQS"
  done
  echo "$want" >"$stamp"
  echo "bootstrap: $VENV ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
fi

# The Megatron venv: megatron-core 0.19.2 needs CPython >= 3.12 (pyenv's 3.12
# on this project's machines; FCP_PYTHON312 overrides it) and torch from
# PyPI (its CUDA build, several GB; it runs on CPU). One pip call, skipped when
# the stamp matches requirements-megatron.txt.
VENV=.venv312
REQS=requirements-megatron.txt
stamp="$VENV/.fcp-requirements.sha256"
want=$(sha256sum "$REQS" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "bootstrap: $VENV up to date ($("$VENV/bin/python" --version))"
  exit 0
fi
PY=${FCP_PYTHON312:-}
if [ -z "$PY" ] && command -v pyenv >/dev/null 2>&1; then
  PY=$(ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1)
fi
if [ -z "$PY" ]; then PY=$(command -v python3.12 || true); fi
if [ -z "$PY" ]; then
  echo "error: FCP_PYTHON312: no CPython 3.12 found (pyenv or python3.12 on PATH)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi
pip_args=(--disable-pip-version-check -q)
# This project's machines keep the PyTorch CPU wheel in /opt/wheels.
if [ -d /opt/wheels ]; then pip_args+=(--find-links /opt/wheels); fi
"$VENV/bin/python" -m pip install "${pip_args[@]}" -r "$REQS"
echo "$want" >"$stamp"
echo "bootstrap: $VENV ready ($("$VENV/bin/python" -c 'import torch; from importlib.metadata import version; print("torch", torch.__version__, "megatron-core", version("megatron-core"))'))"
