# The README's two commands: `make run` and `make test`.
#   make run   installs what planning needs (scripts/bootstrap.sh plan), builds the
#              fcp CLI, plans the example batch
#   make test  installs the rest (bootstrap all: MPI, GoogleTest, .venv with torch,
#              ..., .venv312 with megatron-core 0.19.2), builds everything, runs
#              every test
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_ARGS ?=
# Debian's CMake 3.25 (bootstrap installs it); a pip cmake 4.x first on PATH is
# not used.
CMAKE ?= /usr/bin/cmake
CTEST ?= /usr/bin/ctest

.PHONY: all bootstrap bootstrap-plan configure build run test bench asan-test fuzz fuzz-short clean

all: build

bootstrap-plan:
	bash scripts/bootstrap.sh plan

bootstrap:
	bash scripts/bootstrap.sh all

# Full configuration (tests, MPI, Python module in .venv, benchmarks).
configure: bootstrap
	$(CMAKE) --preset release -DFCP_PLAN_ONLY=OFF >/dev/null

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

# The main job on built-in defaults: plan the example batch and print the table.
# Keeps an existing full configuration; a fresh checkout gets the planner only.
run: bootstrap-plan
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  $(CMAKE) --preset release -DFCP_PLAN_ONLY=ON >/dev/null; fi
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target fcp
	./$(BUILD_DIR)/fcp plan --input examples/batch.json --format table

# Every test (unit, cli, mpi, python), then a short libFuzzer run (~2 min).
test: build
	cd $(BUILD_DIR) && $(CTEST) --output-on-failure -j $(JOBS) $(CTEST_ARGS)
	bash scripts/fuzz.sh --short

# The unit and cli tests again under AddressSanitizer + UBSan (build-asan/).
asan-test: bootstrap
	bash scripts/asan_test.sh

# Longer fuzzing: 300 s per target (FUZZ_SECONDS=N to change).
fuzz: bootstrap
	bash scripts/fuzz.sh

fuzz-short: bootstrap
	bash scripts/fuzz.sh --short

bench: build
	./$(BUILD_DIR)/bench/planner_bench --benchmark_min_time=0.5
	./$(BUILD_DIR)/bench/kernels_bench --benchmark_min_time=0.2
	./$(BUILD_DIR)/bench/limits_bench
	PYTHONPATH=$(BUILD_DIR)/python FCP_CLI=$(BUILD_DIR)/fcp .venv/bin/python bench/replay_bench.py

clean:
	rm -rf build build-debug build-asan build-fuzz
