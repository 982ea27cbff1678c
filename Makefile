# `make demo` runs the main job and `make test` the test suite; each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where an on-disk CPU build of torch 2.13.0 lies (these development machines), install that wheel rather than let the
# installer pull a multi-GB CUDA build; elsewhere torch resolves as usual.
LOCAL_CPU_TORCH := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))

.PHONY: demo test lint docs chromium mutation clean
# apt-get runs as root: directly where make does, else through sudo.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv

# uv installs the package with the extras the target names (in less than half pip's time: docs/results/suite.md),
# compiling the bytecode as pip does.
$(VENV)/.installed-%: pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e ".[$*]" $(LOCAL_CPU_TORCH)
	touch $@

demo: $(VENV)/.installed-demo,plot,train
	$(BIN)/aiayn demo --out runs/demo

# The tests build the documentation with --strict themselves (tests/test_docs.py) and run in one process per core.
test: lint chromium
	$(BIN)/python -m pytest

# tests/test_site_browser.py reads the documentation site in Debian's Chromium (driven by Playwright).
chromium:
	@command -v chromium >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
		$(SUDO) apt-get install -y -q chromium >/dev/null || \
		{ $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q chromium >/dev/null; }; }

lint: $(VENV)/.installed-dev,demo,plot,docs,train
	$(BIN)/ruff check src tests scripts benchmarks
	$(BIN)/ruff format --check src tests scripts benchmarks

# The documentation site into site/ (--strict: a broken link or an unresolved reference fails the build).
docs: $(VENV)/.installed-dev,demo,plot,docs,train
	$(BIN)/mkdocs build --strict --site-dir site

# The mutation score of `aiayn train`'s tasks, baselines and metrics (mutmut; about an hour on 2 cores), written to
# docs/results/mutation.md; not part of `make test`. The example scripts' copy beside the repository serves the tests
# that compare with them.
EXAMPLES ?= $(CURDIR)/../shared/reference/transformers-examples/examples/pytorch
mutation: $(VENV)/.installed-dev,demo,plot,docs,train,mutation
	rm -rf mutants
	TRANSFORMERS_EXAMPLES=$${TRANSFORMERS_EXAMPLES:-$(EXAMPLES)} $(BIN)/mutmut run --max-children 2
	$(BIN)/python benchmarks/mutation_report.py > docs/results/mutation-survivors.md

clean:
	rm -rf $(VENV) build site src/*.egg-info .pytest_cache .ruff_cache
