# The two commands a new user runs on a fresh Debian 12 machine:
#   make demo   sets up, builds, and runs the main job
#   make test   sets up, builds, and runs every test
# Everything else here is a convenience for developers.
BUILD ?= build
# Paths below this tree are hashed relative to it, so ccache hits survive a fresh clone elsewhere.
export CCACHE_BASEDIR := $(CURDIR)
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build demo test bench clean

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

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	@bash scripts/bench_kernels.sh $(BUILD)

clean:
	rm -rf $(BUILD)
