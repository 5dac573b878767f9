# make run: install what is missing, then start the app.  make test: install, then run the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/python app/main.py $(ARGS)

test: install
	$(BIN)/python -m pytest -q tests

bench: install
	$(BIN)/python scripts/benchmark.py --pair smol-self --methods vanilla,sps,duo \
		--questions bench/prompts.jsonl --max-new-tokens 128 --out bench/out/project

clean:
	rm -rf $(VENV)
