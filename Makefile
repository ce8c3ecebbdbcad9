# gem: `make demo` serves the demo model; `make test` builds and runs the whole test suite.
BUILD ?= build
JOBS ?= $(shell nproc)
DEMO_MODEL ?= models/demo.gguf
DEMO_PORT ?= 8080
CMAKE_FLAGS ?=

.PHONY: all setup build test demo clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

$(DEMO_MODEL): | build
	@mkdir -p $(dir $(DEMO_MODEL))
	$(BUILD)/bin/gem synth --profile demo --seed 1 -o $(DEMO_MODEL)

demo: build $(DEMO_MODEL)
	@bash scripts/demo.sh $(BUILD)/bin/gem $(DEMO_MODEL) $(DEMO_PORT)

clean:
	rm -rf $(BUILD)
