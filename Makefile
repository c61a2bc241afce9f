# make test   : create .venv if missing, install the package with its test extras, run the suite
# make replay : same set-up, then the main job: replay cassettes/ and cases/ through the executor
# make matrix : the fault matrix over cassettes/ and cases/, report in build/matrix.md
# make demo   : the seed's feedback-analysis run, printed with its audit rows
# make bench  : the speed rows (benchmarks/README.md), then their summary with verdicts
# make docs   : the documentation site of docs/ in build/site (mkdocs --strict), its links checked
# make mutation: the mutation score of replay on the tools (cosmic-ray; slow, not part of test)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: test replay matrix demo bench lint clean mutation docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# langsmith's pytest plugin (installed with langchain-core) is left out: no test
# uses it, and its import costs each pytest process over a second of CPU. Byte
# code is written even where the environment says not to: the suite starts some
# forty pytest processes, and each would otherwise rewrite the asserts of every
# plugin and test module again (a third of an example-project run's CPU).
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n 2 -q -p no:langsmith_plugin

replay: $(STAMP)
	$(BIN)/python -m pytest --toolguard-replay cassettes cases -v

matrix: $(STAMP)
	$(BIN)/python -m pytest --toolguard-replay --toolguard-faults=all cassettes cases -q -n 2 \
		--toolguard-report=build/matrix.md

demo: $(STAMP)
	$(BIN)/python -m pytest_toolguard.demo

bench: $(STAMP)
	rm -f build/bench-summary.json
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/postgres_bench.py
	$(BIN)/python benchmarks/matrix_bench.py
	$(BIN)/python benchmarks/redaction_bench.py
	$(BIN)/python benchmarks/directory_world_bench.py
	$(BIN)/python benchmarks/directory_cell_bench.py
	$(BIN)/python benchmarks/mcp_transport_bench.py
	$(BIN)/python benchmarks/sdk_guard_bench.py
	$(BIN)/python benchmarks/throughput_bench.py
	@echo
	$(BIN)/python benchmarks/summary.py

# The docs extra only: the examples of the pages run in `make test` (tests/docs), not here.
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# --strict fails the build on a link to a missing page or anchor; the script then
# reads every built page's links; tests/docs runs every example of the pages and
# checks that every test they name exists (it runs in `make test` too).
docs: $(STAMP) $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet
	$(BIN)/python scripts/check_site_links.py build/site
	$(BIN)/python -m pytest -q -p no:cacheprovider -p no:langsmith_plugin tests/docs

mutation: $(STAMP)
	$(BIN)/python -m pip install --quiet 'cosmic-ray>=8.7,<9'
	$(BIN)/python benchmarks/mutation.py

# lint: ruff, mypy --strict, and the architecture: imports only go down the layers of
# ARCHITECTURE.md (import-linter's contracts in pyproject.toml), no private name is
# imported across modules, every module is listed there (tests/test_architecture.py).
lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff mypy import-linter
	$(BIN)/ruff check pytest_toolguard tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_architecture.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
