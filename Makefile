# dlsroute — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs on this many pytest-xdist workers (0: in one process); a module's tests
# stay on one worker, and so do the tests on the session's Spark (tests/conftest.py:
# pytest_xdist_make_scheduler).
TEST_WORKERS ?= 2

.PHONY: help setup spark-fetch test test-fast test-reference lint bench bench-paper chaos demo demo-inproc clean kafka-fetch kafka-up kafka-down kafka-status kafka-clean

KAFKA_SH := bash docker/kafka/kafka.sh

help: ## Show this help
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z_-]+:.*?## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv and install dlsroute (editable) with its dev tools
	@$(PY) -m spark.jars >/dev/null  # Spark-Kafka/Avro connector jars into .cache/spark-libs (once)
	@$(PY) -m spark.jvm >/dev/null  # spark/jvm/src (javac, pyspark's jars) into .cache/spark-jvm

spark-fetch: setup ## Fetch the Spark connector jars again (force) and list them
	$(PY) -m spark.jars --force

test: setup ## Run every test
	$(PY) -X faulthandler -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

test-fast: setup ## Run the tests without the long property tests
	$(PY) -X faulthandler -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

test-reference: setup ## The core's tests on the numpy reference path (DLS_NO_JIT=1: no compiled kernels)
	DLS_NO_JIT=1 $(PY) -X faulthandler -m pytest tests/dls tests/broker_node $(PYTEST_ARGS)

lint: setup ## ruff and mypy on the packages
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: setup ## Benchmarks (core, then on the local Kafka); results in benchmarks/results/
	$(PY) -m benchmarks.core --out benchmarks/results/core.json
	KAFKA_PORT=$(or $(KAFKA_PORT),9092) PYTHON=$(PY) $(KAFKA_SH) up
	$(PY) -m benchmarks.kafka --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/kafka.json
	$(PY) -m benchmarks.kafka_latency --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/kafka_latency.json
	$(PY) -m benchmarks.spark --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/spark.json

.PHONY: bench-recovery
bench-recovery: setup ## Restart time vs live state and history, snapshots or not (~13 min; KAFKA_PORT)
	KAFKA_PORT=$(or $(KAFKA_PORT),9092) PYTHON=$(PY) $(KAFKA_SH) up
	$(PY) -m benchmarks.recovery --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/recovery.json

PAPER_OUT := $(if $(QUICK),/tmp/dlsroute-paper-quick,benchmarks/results)
PAPER_MD  := $(if $(QUICK),/tmp/dlsroute-paper-quick/REPORT.md,benchmarks/REPORT.md)
bench-paper: setup ## The paper's experiments, all systems -> benchmarks/REPORT.md (QUICK=1: ~5 min, /tmp)
	$(PY) -m benchmarks.paper $(if $(QUICK),--quick,--require-all) --out $(PAPER_OUT)/paper.json
	$(PY) -m benchmarks.report --results $(PAPER_OUT)/paper.json --out $(PAPER_MD) --plots $(PAPER_OUT)/paper

.PHONY: bench-propagation
bench-propagation: setup ## subscribe() to first delivery across A-B-C on the local Kafka (KAFKA_PORT)
	KAFKA_PORT=$(or $(KAFKA_PORT),9092) PYTHON=$(PY) $(KAFKA_SH) up
	$(PY) -m benchmarks.propagation --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/propagation.json

.PHONY: bench-topics
bench-topics: setup ## The producer's cost per delivery with a topic per client vs one shared topic, no Kafka (~1 min) -> benchmarks/results/topic_lookup.json
	$(PY) -m benchmarks.topic_lookup --out benchmarks/results/topic_lookup.json

.PHONY: bench-raw
bench-raw: setup ## 100 clients filtering the raw topic vs the same subscriptions through dlsroute, not in CI (~5 min; KAFKA_PORT) -> benchmarks/results/rawtopic.json
	KAFKA_PORT=$(or $(KAFKA_PORT),9092) PYTHON=$(PY) $(KAFKA_SH) up
	$(PY) -m benchmarks.rawtopic --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out benchmarks/results/rawtopic.json

CHAOS_ARGS := $(if $(SEED),--seed $(SEED)) $(if $(DURATION),--duration $(DURATION)) $(if $(SCENARIOS),--scenarios $(SCENARIOS)) $(if $(CHAOS_PORT),--port $(CHAOS_PORT))
chaos: setup ## Fault harness on its own Kafka (~25 min with the replica scenarios; SEED, DURATION, SCENARIOS, CHAOS_PORT) -> benchmarks/results/chaos.json
	$(PY) -m benchmarks.chaos $(CHAOS_ARGS) --out benchmarks/results/chaos.json

.PHONY: fuzz
fuzz: setup ## The node's bad-input fuzz at length, not in CI (FUZZ_EXAMPLES streams of up to 80 ops, default 2000: ~9 min)
	DLS_FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),2000) $(PY) -X faulthandler -m pytest tests/broker_node/test_fuzz.py -k long_run

.PHONY: soak
SOAK_ARGS := $(if $(SEED),--seed $(SEED)) $(if $(DURATION),--duration $(DURATION)) $(if $(RATE),--rate $(RATE)) $(if $(SOAK_PORT),--port $(SOAK_PORT))
soak: setup ## Soak, not in CI: 10 min at half the calibrated maximum rate, memory slope (~16 min; SEED, DURATION, RATE, SOAK_PORT) -> benchmarks/results/soak.json
	$(PY) -m benchmarks.soak $(SOAK_ARGS) --out benchmarks/results/soak.json

demo: setup ## Three-node demo on a local Kafka (started and stopped unless running; KAFKA_PORT)
	$(VENV)/bin/dlsroute demo --kafka --port $(or $(KAFKA_PORT),9092)

demo-inproc: setup ## The same demo in-process, without Kafka
	$(VENV)/bin/dlsroute demo

clean: ## Remove caches (keeps .venv)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

kafka-fetch: ## Fetch the Kafka 4.x jars from Maven Central into .cache/kafka (once)
	$(KAFKA_SH) fetch

# SECURE=1: the secure profile (SASL_SSL + SCRAM-SHA-512, ACLs; 127.0.0.1:9392 by default;
# admin's settings in .cache/kafka/secure/admin.properties; docs/security.md).
# BROKERS=3: three KRaft servers on KAFKA_PORT..KAFKA_PORT+2 (9092-9094), topics with
# replication factor 3 and min.insync.replicas 2 (docker/kafka/cluster.sh); the same
# BROKERS for kafka-down/status/clean.
KAFKA_ENV := SECURE=$(or $(SECURE),0) BROKERS=$(or $(BROKERS),1)

kafka-up: setup ## Start a local Kafka on 127.0.0.1:9092 (KAFKA_PORT; BROKERS=3: a 3-broker cluster on 9092-9094; SECURE=1: SASL_SSL+ACLs on 9392)
	$(KAFKA_ENV) PYTHON=$(PY) $(KAFKA_SH) up

kafka-down: ## Stop the local Kafka (BROKERS=3: the cluster; SECURE=1: the secure one)
	$(KAFKA_ENV) $(KAFKA_SH) down

kafka-status: ## Is the local Kafka running and answering? (BROKERS=3: every server of the cluster; SECURE=1)
	$(KAFKA_ENV) PYTHON=$(PY) $(KAFKA_SH) status

kafka-clean: ## Stop the local Kafka and delete its data (jars are kept; BROKERS=3: the cluster's; SECURE=1)
	$(KAFKA_ENV) $(KAFKA_SH) clean

# ---------------------------------------------------------------- containers (docker/)
# An engine with host networking only (no bridge, no iptables rules; root): engine-up,
# engine-down. Images from Debian packages and this checkout, tagged by a hash of their
# inputs (rebuilt only when those change): images. The container tests: test-containers.
.PHONY: images engine-up engine-down test-containers

# tests/integration on testcontainers' Kafka, a named subset: subscribe (acknowledged, then
# delivered), routing across the three-node line, a node restart, dead letters; and the
# check that the session's Kafka is the container.
CONTAINER_TESTS := tests/integration/test_containers.py \
	tests/integration/test_client.py::test_subscribe_waits_for_the_node_and_the_next_event_is_delivered \
	tests/integration/test_nodes.py::test_multi_node_routing_is_exact \
	tests/integration/test_nodes.py::test_node_restart_loses_no_event \
	tests/integration/test_nodes.py::test_bad_input_goes_to_dead_letters_and_routing_goes_on

engine-up: ## Start a Docker engine, host network only (root; installs docker.io if absent)
	bash docker/engine.sh install
	bash docker/engine.sh up

engine-down: ## Stop the Docker engine that engine-up started
	bash docker/engine.sh down

images: setup ## Build dlsroute-base/-kafka/-node from Debian packages and this checkout (engine needed)
	PYTHON=$(PY) bash docker/images.sh build

test-containers: setup ## The container tests (engine and `make images` first): CONTAINER_TESTS on testcontainers' Kafka, then the compose deployment
	DLS_TEST_KAFKA=testcontainers $(PY) -X faulthandler -m pytest -rA --tb=short --durations=10 $(CONTAINER_TESTS) tests/test_compose.py $(PYTEST_ARGS)

.PHONY: bench-node
bench-node: setup ## dlsroute node vs a quixstreams router vs a passthrough on the quotes workload, 10K-1M subscriptions, not in CI (long; KAFKA_PORT) -> benchmarks/results/node.json; SIZES=10000,100000@380 -> .cache/bench/node-sizes.json (the committed results stay those of one whole run)
	KAFKA_PORT=$(or $(KAFKA_PORT),9092) PYTHON=$(PY) $(KAFKA_SH) up
	$(PY) -m benchmarks.node --bootstrap 127.0.0.1:$(or $(KAFKA_PORT),9092) --out $(if $(SIZES),.cache/bench/node-sizes.json --sizes $(SIZES),benchmarks/results/node.json)
