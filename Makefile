# pulsarwire — the two commands that matter: `make run` and `make test`.
# Everything else sets up or checks. On a fresh machine both create .venv first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup test test-long test-real test-newest-pyspark peers run lint typecheck proto bench fuzz soak check clean

setup: $(STAMP)

# constraints.txt pins every version (the set CI and docs/install.md's tested install use)
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[spark,delta-spark,crypto,test,dev]'
	touch $(STAMP)

# The real peers' jars (Delta Lake, Apache Kafka, Apache Pulsar: tests/realpeers/*/pom.xml), fetched
# by Maven into ~/.cache/pulsarwire-peers once (docs/testing.md); the fixtures fetch them too.
peers: $(STAMP)
	$(PY) -m tests.helpers.peers

# pytest's exit code 5 (no test collected, e.g. a -m that matches nothing) is not a failure.
test: $(STAMP) peers
	$(PY) -m pytest -q $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The main job: our broker on a free port, sample orders, jobs/orders_ingest.yaml (all under .run/demo/).
run: $(STAMP)
	$(PY) -m jobs.demo run

lint: $(STAMP)
	$(PY) -m ruff check pulsarwire pipelines tests bench jobs
	$(PY) -m ruff format --check pulsarwire pipelines tests bench jobs

# mypy strict on pulsarwire and on tests/typecheck (a user's program against the top-level API;
# pyproject's [tool.mypy] files)
typecheck: $(STAMP)
	$(PY) -m mypy

check: lint typecheck test

# Regenerate the protobuf module from our own .proto (grpcio-tools is a dev dependency).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Ipulsarwire/proto --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
		--python_out=pulsarwire/proto --mypy_out=pulsarwire/proto pulsarwire/proto/pulsar_api.proto

bench: $(STAMP)
	$(PY) bench/run_all.py

# The newest pyspark pyproject claims, in a venv of its own (the other pins from constraints.txt):
# its data source API and a small ingest job through the pipelines command (marker newest_pyspark,
# not part of make test; .ci/run runs it after make test).
# The tests of over a minute each (marker long: the crash and signal scenarios), left out of
# `make test` to keep it within 300 s on 2 cores; CI runs them in its second step.
test-long: $(STAMP) peers
	$(PY) -m pytest -q -m long $(PYTEST_ARGS)

# The judges from Maven Central (marker real: Apache Kafka and Apache Pulsar started from the jars
# `make peers` fetches, docs/testing.md), left out of `make test` for its 300 s; CI's third step.
test-real: $(STAMP) peers
	$(PY) -m pytest -q -m real $(PYTEST_ARGS)

test-newest-pyspark: $(STAMP)
	$(PY) -m pytest -q -s -n 0 -p no:cacheprovider -m newest_pyspark tests/test_newest_pyspark.py

# Faults on a schedule while producing and streaming (tests/pipelines/test_soak.py, marker soak,
# not part of make test); PULSARWIRE_SOAK_SECONDS sets the duration (default 180).
soak: $(STAMP)
	$(PY) -m pytest -q -s -n 0 -m soak tests/pipelines/test_soak.py

# atheris is optional: where no wheel installs, the runner uses its own mutation engine.
fuzz: $(STAMP)
	-$(PY) -m pip install --quiet atheris
	$(PY) bench/fuzz_codec.py --runs 1000000
	$(PY) bench/fuzz_codec.py --protocol kafka --runs 1000000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .run
