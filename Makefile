# Two commands for a newcomer: `make scan` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SAMPLE := fixtures/clusters/sample

.PHONY: install scan test lint typecheck pytest docs docs-check clean fuzz screenshot

$(BIN)/gpu-audit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(BIN)/gpu-audit

## Scan the bundled sample GPU cluster: table on the terminal, report.json and report.html here.
scan: install
	$(BIN)/gpu-audit scan --from-file $(SAMPLE) --format json --format html --output-dir .
	$(BIN)/gpu-audit render report.json --format table
	@echo "wrote report.json and report.html"

## Lint, type checks and the whole test suite (live tests need the control plane, see README).
test: install lint typecheck pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy cannot follow setuptools' editable-install finder, so it reads the package through
# a tree of links that mirrors the installed layout (gpu_audit/, gpu_audit/checks/, ...).
typecheck: install
	@mkdir -p .typecheck/gpu_audit
	@for f in scanner/*; do ln -sfn ../../$$f .typecheck/gpu_audit/; done
	@ln -sfn ../../checks .typecheck/gpu_audit/checks && ln -sfn ../../reports .typecheck/gpu_audit/reports
	@find .typecheck -xtype l -delete
	MYPYPATH=.typecheck $(BIN)/mypy .typecheck/gpu_audit tests

pytest: install
	$(BIN)/pytest -q

## >= 100,000 hostile inputs through the loader and every check (one process, low priority);
## the atheris stage runs when `pip install atheris` worked on this machine.
fuzz: install
	nice -n 10 $(BIN)/python tests/fuzz/run_fuzz.py --examples 50000 --atheris-runs 100000

## docs/report-screenshot.png: the sample cluster's HTML report in headless Chromium
## (needs the Debian packages chromium and chromium-driver).
screenshot: install
	$(BIN)/python scripts/screenshot.py --output docs/report-screenshot.png

docs: install
	$(BIN)/gpu-audit checks docs > docs/checks.md
	$(BIN)/gpu-audit frameworks docs > docs/frameworks.md
	$(BIN)/gpu-audit rbac --chart-index > deploy/helm/gpu-audit/files/read-access.yaml

clean:
	rm -rf $(VENV) .typecheck .mypy_cache .pytest_cache .ruff_cache build *.egg-info report.json report.html
