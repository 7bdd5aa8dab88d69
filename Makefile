# Everything a fresh machine needs: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first and pinned: it comes from the CPU build on this machine's disk, and
# nothing after it may pull another (CUDA) build.
TORCH := torch==2.13.0

.PHONY: install demo test test-all bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlhflab pipeline --preset demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

bench: $(STAMP)
	$(PY) bench/pipeline_targets.py --seeds 0 1 2

clean:
	rm -rf $(VENV) runs .pytest_cache
