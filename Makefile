# make run: install what is missing, then start the app.  make test: install, then run the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install browser run test test-gpu gpu-report bench clean

# llama.cpp on its own thread pool, not OpenMP: beside torch's OpenMP threads its decodes on
# two threads slept at barriers (37 ms a token against 12 on its own pool, 2-core Intel Xeon).
# A wheel built with OpenMP before (pip's cache, an older venv) is built again, once.
LLAMA_CMAKE := -DGGML_OPENMP=OFF
LLAMA_PIN = $$(grep -o '^llama-cpp-python==[0-9.]*' requirements.txt)
OPENMP_BUILD := import llama_cpp, sys; sys.exit(b"OPENMP = 1" not in llama_cpp.llama_print_system_info())
$(STAMP): requirements.txt Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/python -m pip install -q -r requirements.txt
	! $(BIN)/python -c '$(OPENMP_BUILD)' || CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/python -m pip \
		install -q --force-reinstall --no-deps --no-cache-dir "$(LLAMA_PIN)"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/python app/main.py $(ARGS)

# The browser test drives Debian's Chromium (never a downloaded browser build).
browser:
	test -x /usr/bin/chromium || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Two workers, whole files each (a file's loaded models and oracle stay in one process),
# in conftest's order (the slowest first). The ten slowest tests and the run's CPU seconds
# (user + sys of pytest and its workers: what a slower host pays in wall time) end the log.
WORKERS ?= 2
CPU_TIME := $(shell test -x /usr/bin/time && echo "/usr/bin/time -f 'suite CPU: %U s user, %S s sys, %e s wall'")
test: install browser
	$(CPU_TIME) $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder \
		--durations=10 tests

# On a CUDA machine. Prepared by ../shared/gpu (no venv there): make test-gpu RUNPY=python3
# One process by default (the compiled twins share one target); GPU_WORKERS=N splits the
# tests over N processes, each compiling on its share of the cores.
RUNPY ?= $(BIN)/python
GPU_TESTS ?= tests/test_gpu.py tests/test_owner_thread.py
GPU_WORKERS ?= 1
test-gpu:
	TORCHINDUCTOR_CUDAGRAPH_OR_ERROR=1 \
		TORCHINDUCTOR_COMPILE_THREADS=$$(( $$(nproc) / $(GPU_WORKERS) > 0 ? $$(nproc) / $(GPU_WORKERS) : 1 )) \
		$(RUNPY) -m pytest -q -m gpu $(if $(filter-out 1,$(GPU_WORKERS)),-n $(GPU_WORKERS)) \
		$(GPU_TESTS)

# The GPU report (scripts/gpu_report.py): ARGS="--part forward --out DIR"; tiny on a CPU.
# The whole GPU check in one call: bash scripts/gpu_checks.sh SECONDS (docs/gpu.md).
gpu-report:
	$(RUNPY) scripts/gpu_report.py $(ARGS)

bench: install
	$(BIN)/python scripts/benchmark.py --pair smol-self --methods vanilla,sps,duo \
		--questions bench/prompts.jsonl --max-new-tokens 128 --out bench/out/project

clean:
	rm -rf $(VENV)
