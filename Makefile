# Hookstream's entry points. `make up` runs the system with a demo; `make test` runs the tests.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help up down status logs test bench lint fmt infra fuzz test-k8s

help: ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

up: ## Start PostgreSQL, Kafka and the services, and deliver demo events
	@bash scripts/stack/up.sh

down: ## Stop everything `make up` started
	@bash scripts/stack/down.sh

status: ## Show what is running
	@bash scripts/stack/status.sh

logs: ## Follow the services' logs
	@tail -n 50 -F .hookstream/logs/outbox-relay.log .hookstream/logs/dispatcher.log .hookstream/logs/hookstream-api.log .hookstream/logs/demo-receiver.log

infra: ## Start only PostgreSQL and Kafka
	@bash scripts/stack/infra.sh start

test: ## Run every test against real PostgreSQL and Kafka (started if needed)
	@bash scripts/test.sh

test-k8s: ## The Helm chart on a real kube-apiserver built from the Go proxy (~15 min the first time; not in `make test`)
	@bash scripts/k8s/test.sh

fuzz: ## Every fuzz target for FUZZ_SECONDS (300) each on nightly; non-zero on a crash
	@bash scripts/fuzz.sh

bench: ## Every published load scenario, 3 runs each, chaos and autoscale once (~100 min; needs the machine to itself)
	@bash loadtest/publish.sh

lint: ## rustfmt and clippy, as CI runs them
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt: ## Format the code
	cargo fmt --all
