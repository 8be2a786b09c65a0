# Two commands for a new user:  make run  (the laptop pipeline)  and  make test.
# Both create .venv on first use (pinned stack from requirements.lock) and reuse it after.

VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.scalerepro-installed
PYTHON ?= python3
export PATH := $(abspath $(BIN)):$(PATH)
export DVC_NO_ANALYTICS := true

.PHONY: run simulate test venv dry-run lint report clean-stage clean

run: $(STAMP)
	snakemake --cores 2 --profile workflow/profiles/laptop
	snakemake --report results/report.html

# The papers' full grid in SimGrid (every algorithm, 8 to 1,024 ranks; each 1-D ring at 1,024 takes minutes), then the report.
simulate: $(STAMP)
	snakemake --cores 2 --profile workflow/profiles/laptop --configfile config/config.yaml config/simulate.yaml
	snakemake --report results/report.html --configfile config/config.yaml config/simulate.yaml

test: $(STAMP)
	pytest

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.lock
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	touch $(STAMP)

dry-run: $(STAMP)
	snakemake -n --cores 2

lint: $(STAMP)
	snakemake --lint

report: $(STAMP)
	snakemake --report results/report.html

clean-stage: $(STAMP)
	scalerepro stage --clean

clean:
	rm -rf results .snakemake
