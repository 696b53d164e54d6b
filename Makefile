# The two commands a new user runs on a fresh Debian 12 machine:
#   make demo   sets up, builds, and runs the main job
#   make test   sets up, builds, and runs every test
# Everything else here is a convenience for developers.
BUILD ?= build
# Paths below this tree are hashed relative to it, so ccache hits survive a fresh clone elsewhere.
export CCACHE_BASEDIR := $(CURDIR)
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build demo test test-sanitize test-tsan bench clean venv

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo trains a tokenizer and a small model on a public-domain corpus (scripts/demo.sh).
demo: build
	@bash scripts/demo.sh $(BUILD)

# The real peer libraries (transformers, llama.cpp, lm-eval, datatrove, tiktoken) from PyPI, in
# $(BUILD)/venv: the interop and comparison tests run against them, and skip where it is absent.
venv:
	@bash scripts/venv.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600
	@JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), and the threaded
# tests under ThreadSanitizer (build-tsan/); docs/RELIABILITY.md, "Sanitizers".
test-sanitize: setup
	@bash scripts/sanitize.sh address build-asan $(JOBS)

test-tsan: setup
	@bash scripts/sanitize.sh thread build-tsan $(JOBS)

bench: build
	@bash scripts/bench_kernels.sh $(BUILD)

# libFuzzer targets for every parser of user files (tests/fuzz; clang, in their own build dir, never
# $(BUILD)). `make fuzz` runs each for FUZZ_SECONDS, `make fuzz-smoke` (and `make test`) for
# FUZZ_SMOKE_SECONDS; docs/RELIABILITY.md, "Fuzzing".
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
.PHONY: fuzz fuzz-smoke
fuzz: setup
	@JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-smoke: setup
	@JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

clean:
	rm -rf $(BUILD)
