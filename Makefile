# Thin wrappers over CMake: the two commands of the README and a few helpers.
#   make run    install what is missing, build, make the demo model, serve it on :8000
#   make test   install what is missing, build, run every test (plain, sanitized, fuzzed)
BUILD      ?= build
BUILD_SAN  ?= build-san
BUILD_FUZZ ?= build-fuzz
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 20
DEMO_MODEL ?= models/small
PROMPT     ?= The quick brown fox

.PHONY: all deps build run test test-unit test-san test-fuzz bench models clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

$(DEMO_MODEL)/config.json:
	python3 tools/make_model.py --preset small --out $(DEMO_MODEL)

models: $(DEMO_MODEL)/config.json

PORT       ?= 8000

run: build models
	$(BUILD)/servelab generate $(DEMO_MODEL) --prompt "$(PROMPT)" --max-tokens 32 --temperature 0
	@echo "Serving $(DEMO_MODEL) on http://localhost:$(PORT) (Ctrl-C stops it). Try:"
	@echo "  curl -s localhost:$(PORT)/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"$(DEMO_MODEL)\", \"prompt\": \"Hello\", \"max_tokens\": 16}'"
	$(BUILD)/servelab serve $(DEMO_MODEL) --port $(PORT)

test: build test-unit test-san test-fuzz

test-unit:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

test-san: deps
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Sanitize -DSERVELAB_CUDA=OFF
	cmake --build $(BUILD_SAN) -j$(JOBS)
	ctest --test-dir $(BUILD_SAN) --output-on-failure -j$(JOBS)

test-fuzz: deps
	cmake -S . -B $(BUILD_FUZZ) -DSERVELAB_FUZZ=ON -DSERVELAB_CUDA=OFF \
	    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
	cmake --build $(BUILD_FUZZ) -j$(JOBS)
	scripts/run-fuzzers.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

bench: build models
	$(BUILD)/servelab bench decode $(DEMO_MODEL) --threads 1,2

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)
