# The README's two commands: `make run` and `make test`. Both install missing
# Debian packages first (scripts/bootstrap.sh), then configure and build.
BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_ARGS ?=

.PHONY: all bootstrap configure build run test bench asan-test fuzz fuzz-short clean

all: build

bootstrap:
	bash scripts/bootstrap.sh

configure: bootstrap
	cmake --preset release >/dev/null

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job on built-in defaults: plan the example batch and print the table.
run: build
	./$(BUILD_DIR)/fcp plan --input examples/batch.json --format table

# Every test (unit, cli, mpi, python), then a short libFuzzer run (~60 s).
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)
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

clean:
	rm -rf build build-debug build-asan build-fuzz
