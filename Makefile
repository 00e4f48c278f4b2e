# Two commands for a newcomer: `make scan` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SAMPLE := fixtures/clusters/sample

.PHONY: install scan test lint typecheck pytest docs docs-check clean fuzz screenshot bench bench-smoke quality

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

## Time and memory vs json.loads at 10k/50k/150k pods and, at 150k, swept over the share of
## Pending pods, node shapes and namespaces (and YAML at 50k), a live scan of 20,000 pods vs a
## raw list, and Checkov (installed into ~/.cache/gpu-audit/checkov-venv) on the same manifests;
## prints the figures and writes bench-results.json. About 20 minutes on a 2-core machine.
bench: install
	nice -n 10 $(BIN)/python benchmarks/run.py --output bench-results.json

## The same at a tiny scale, offline only (what tests/test_bench_smoke.py runs).
bench-smoke: install
	$(BIN)/python benchmarks/run.py --scales 200,400 --sweep-pods 300 --yaml-pods 200 \
		--pending-shares 0,0.01,0.05 --node-classes 2,5,50 --namespaces 10,40 \
		--live-pods 0 --checkov-pods 0 --work /tmp/gpu-audit-bench-smoke --output /tmp/gpu-audit-bench-smoke.json

## >= 100,000 hostile inputs through the loader and every check (one process, low priority):
## 100,000 atheris runs where atheris is installed (the dev extra has it on x86-64 Linux), then
## 17,000 examples of each of the 6 properties of tests/fuzz/test_fuzz.py (102,000).
fuzz: install
	nice -n 10 $(BIN)/python tests/fuzz/run_fuzz.py --examples 17000 --atheris-runs 100000

## docs/report-screenshot.png: the sample cluster's HTML report in headless Chromium
## (needs the Debian packages chromium and chromium-driver).
screenshot: install
	$(BIN)/python scripts/screenshot.py --output docs/report-screenshot.png

## Recall and precision on fixtures/scenarios/ (clusters rebuilt from public sources; see
## docs/quality.md). tests/test_quality.py holds the recorded figures as a ratchet.
quality: install
	$(BIN)/python benchmarks/quality.py

docs: install
	$(BIN)/gpu-audit checks docs > docs/checks.md
	$(BIN)/gpu-audit checks api-docs > docs/plugin-api.md
	$(BIN)/gpu-audit checks kinds > docs/kinds.md
	$(BIN)/gpu-audit frameworks docs > docs/frameworks.md
	$(BIN)/gpu-audit rbac --chart-index > deploy/helm/gpu-audit/files/read-access.yaml

clean:
	rm -rf $(VENV) .typecheck .mypy_cache .pytest_cache .ruff_cache build *.egg-info report.json report.html
