# Two commands for a new user:  make run  (the laptop pipeline)  and  make test.
# Both create .venv on first use (pinned stack from requirements.lock) and reuse it after.

VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.scalerepro-installed
PYTHON ?= python3
export PATH := $(abspath $(BIN)):$(PATH)
export DVC_NO_ANALYTICS := true

.PHONY: run simulate system-deps test test-fast venv dry-run lint format report clean-stage clean

run: $(STAMP) system-deps
	snakemake --cores 2 --profile workflow/profiles/laptop
	snakemake --report results/report.html

# The papers' full grid in SimGrid (every algorithm, 8 to 1,024 ranks; each 1-D ring at 1,024 takes minutes), then the report.
simulate: $(STAMP) system-deps
	snakemake --cores 2 --profile workflow/profiles/laptop --configfile config/config.yaml config/simulate.yaml
	snakemake --report results/report.html --configfile config/config.yaml config/simulate.yaml

test: $(STAMP)
	pytest

# The edit loop: everything but the end-to-end runs (slow) and the SLURM cluster (slurm); a few minutes.
test-fast: $(STAMP)
	pytest -m "not slow and not slurm"

venv: $(STAMP)

# SimGrid's Python module and jpegtran from Debian, where this user may install them (scripts/system-deps.sh).
system-deps:
	@bash scripts/system-deps.sh

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.lock
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	touch $(STAMP)

dry-run: $(STAMP)
	snakemake -n --cores 2

# Zero findings expected; .ci/run runs this before the tests. Settings: pyproject.toml.
lint: $(STAMP)
	ruff check src tests
	ruff format --check src tests
	mypy
	snakefmt --check Snakefile workflow
	snakemake --lint

# Apply the formatters lint checks.
format: $(STAMP)
	ruff format src tests
	snakefmt Snakefile workflow

report: $(STAMP)
	snakemake --report results/report.html

clean-stage: $(STAMP)
	scalerepro stage --clean

clean:
	rm -rf results .snakemake
