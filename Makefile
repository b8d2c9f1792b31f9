# vmsched.kubevirt: the one entry point for building, checking and trying the collection.
# `make help` lists the targets. Every tool runs from the project's own .venv/.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
BUILD := $(CURDIR)/.build
# VMSCHED_CLUSTER_DIR (and VMSCHED_PORT_OFFSET) point every target, cluster.py and the tests at another local
# control plane: make test's second lane runs on one of its own.
CLUSTER_DIR := $(or $(VMSCHED_CLUSTER_DIR),$(CURDIR)/.cluster)
LOCAL_KUBECONFIG := $(CLUSTER_DIR)/kubeconfig

# vmsched.kubevirt resolves to this checkout through a symlink tree; the
# collections bundled in the venv's `ansible` package are found on its Python path.
COLLECTIONS_PATH := $(BUILD)/collections
COLLECTION_LINK := $(COLLECTIONS_PATH)/ansible_collections/vmsched/kubevirt
# ansible-test needs a real tree of the shape ansible_collections/NS/NAME (it
# resolves symlinks), holding what git would ship: tracked plus untracked files
# not ignored by .gitignore.
SANITY_TREE := $(BUILD)/sanity/ansible_collections/vmsched/kubevirt
SANITY_PYTHON := 3.11

ANSIBLE_ENV := ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS_PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# The local control plane's own scripts (tests/cluster/). KUBEVIRT picks the KubeVirt release it runs
# (1.9.0, 1.6.6 or 1.5.3; default: tests/cluster/versions.env, the newest).
KUBEVIRT ?=
CLUSTER_UP = $(BIN)/python tests/cluster/cluster.py up $(if $(KUBEVIRT),--kubevirt v$(patsubst v%,%,$(KUBEVIRT)))
CLUSTER_DOWN := $(BIN)/python tests/cluster/cluster.py down
# The older KubeVirt releases `make test` runs the migration tests on too: integration-kubevirt.
# One proof per claim: the migration playbooks' own tests run on 1.9.0 (the integration suite); on 1.6.6 make test runs
# the modules they call (test_vmi_migration.py, test_vmi_evacuation.py), make test-full the playbooks' tests too.
KUBEVIRT_16_TESTS := tests/integration/test_kubevirt.py tests/integration/test_vmi_migration.py \
	tests/integration/test_vmi_evacuation.py tests/integration/test_vm_placement.py
KUBEVIRT_16_FULL_TESTS := $(KUBEVIRT_16_TESTS) tests/integration/test_migration_playbooks.py
# And the bulk converge of 200 VMs: make test runs it on 1.9.0 (511 VMs, more than a page) and vm_placement takes the
# same branches on 1.6.6 (the KubeVirt features it asks about hold from 1.6.0); 1.6.6's own answer to a placement
# change is test_takes_effect_agrees_with_kubevirts_restart_required's, there.
KUBEVIRT_16_LEAVES_OUT := --deselect=tests/integration/test_vm_placement.py::test_bulk_converge_idempotent_check_mode_and_restore
# The target pod's differential test (issue 29): on the older releases only the shapes they render differently from
# 1.9.0 (marker kubevirt_differs), the others once, on 1.9.0, in the integration suite.
KUBEVIRT_DIFFERENTIAL := tests/integration/test_target_pod_differential.py

STAMP := $(VENV)/.installed
REQUIREMENTS := requirements-dev.txt requirements.txt
# Installed into the virtualenv beside the requirements, each with a .pth importing it: a bytecode cache for the
# module_utils every module run imports from Ansible's zip, a cache of the zips (module payloads) across runs, and
# module runs forked from a Python that imported their libraries already (the files say why), on for what make runs.
ZIP_BYTECODE := tests/venv/vmsched_zip_bytecode.py
ANSIBALLZ_CACHE := tests/venv/vmsched_ansiballz_cache.py
FORKSERVER := tests/venv/vmsched_module_forkserver.py
VENV_HOOKS := $(ZIP_BYTECODE) $(ANSIBALLZ_CACHE) $(FORKSERVER)
# Every virtualenv is filled by uv (pinned there): a tenth of pip's time on a cold cache.
UV_INSTALL := tests/venv/uv_install.py
VENV_INPUTS := $(REQUIREMENTS) tests/venv/install.py $(UV_INSTALL) $(VENV_HOOKS)

# Where the user's KUBECONFIG (environment or command line) points, `make demo`
# goes there and leaves the local control plane alone.
USER_KUBECONFIG := $(strip $(KUBECONFIG))

say = @printf '\n==> %s\n' $(1)

.PHONY: help
help: ## List the targets
	@printf 'vmsched.kubevirt: make targets\n\n'
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sort -t: -k1,1 \
		| awk -F':.*## ' '{ printf "  %-14s %s\n", $$1, $$2 }'
	@printf '\nmake demo targets $$KUBECONFIG when it is set, else the local control plane.\n'

# --- toolchain -------------------------------------------------------------------

.PHONY: venv
venv: $(STAMP) $(COLLECTION_LINK) ## Create .venv/ with the pinned tools (reruns when requirement files change)

# The virtualenv lives in the cache, named by a hash of what it installs (VENV_INPUTS, the Python), so
# that every clone reuses it; .venv links there. Never changed once built: new requirements make a new one.
VENV_HOME = $(CACHE_HOME)/envs/dev-py$(PYTHON_MINOR)-$(REQUIREMENTS_HASH)
CACHE_HOME := $(or $(VMSCHED_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/vmsched-kubevirt)
PYTHON_MINOR = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
REQUIREMENTS_HASH = $(shell cat $(VENV_INPUTS) | sha256sum | cut -c1-12)
export VMSCHED_ZIP_BYTECODE := $(CACHE_HOME)/zip-bytecode
export VMSCHED_ANSIBALLZ_CACHE := $(CACHE_HOME)/ansiballz
export VMSCHED_MODULE_FORKSERVER := $(CACHE_HOME)/forkserver

$(STAMP): $(VENV_INPUTS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ansible-core 2.19 needs Python >= 3.11: make PYTHON=...")'
	@home=$(VENV_HOME); mkdir -p "$$(dirname $$home)"; \
	if [ -e $(VENV) ] && [ "$$(readlink $(VENV))" != "$$home" ]; then rm -rf $(VENV); fi; \
	ln -sfn "$$home" $(VENV); \
	exec 9>"$$home.lock"; flock 9; \
	if [ ! -e "$$home/.installed" ]; then \
		printf '\n==> creating %s with %s and installing $(REQUIREMENTS) (.venv links there)\n' "$$home" "$$($(PYTHON) --version)"; \
		rm -rf "$$home"; $(PYTHON) -m venv "$$home"; \
		$(PYTHON) $(UV_INSTALL) "$$home/bin/python" $(addprefix -r ,$(REQUIREMENTS)); \
		"$$home/bin/python" tests/venv/install.py $(VENV_HOOKS); \
	fi
	@touch $@
	@$(BIN)/ansible --version | sed -n 1p

$(COLLECTION_LINK):
	@mkdir -p $(dir $@)
	@ln -sfn ../../../.. $@

# --- checks ----------------------------------------------------------------------

.PHONY: lint
lint: venv ## yamllint, ansible-lint (production profile), antsibull-docs (plugin docs, changelog)
	$(call say,"yamllint")
	$(BIN)/yamllint --strict .
	$(call say,"ansible-lint")
	@# ANSIBLE_HOME of its own: ansible-lint also looks in ~/.ansible/collections, where a copy of an older release
	@# (ansible-galaxy collection install) would hide this checkout's new modules.
	PATH=$(BIN):$$PATH $(ANSIBLE_ENV) ANSIBLE_HOME=$(BUILD)/ansible-home $(BIN)/ansible-lint --nocolor
	$(call say,"antsibull-docs lint-collection-docs")
	@# --validate-collection-refs dependent: references to this collection and to those galaxy.yml depends on
	@# (kubernetes.core) are checked; `all` loads the documentation of every collection the venv's `ansible`
	@# package bundles, 205 s against 16 s.
	PATH=$(BIN):$$PATH $(ANSIBLE_ENV) $(BIN)/antsibull-docs lint-collection-docs --plugin-docs \
		--validate-collection-refs dependent $(COLLECTION_LINK)

.PHONY: sanity
sanity: venv get-pip-standin ## ansible-test sanity (all tests, empty ignore files) on a copy of the tree
	@# ansible-test skips (and passes) its shellcheck test when shellcheck is missing.
	@if [ -n "$$(git ls-files --cached --others --exclude-standard '*.sh')" ] && ! command -v shellcheck >/dev/null; then \
		echo "sanity: shell scripts need shellcheck to be checked: apt-get install shellcheck" >&2; exit 1; fi
	$(call say,"staging the collection at $(SANITY_TREE)")
	@rm -rf $(BUILD)/sanity
	@mkdir -p $(SANITY_TREE)
	@git ls-files -z --cached --others --exclude-standard \
		| tar --null --files-from=- --ignore-failed-read -cf - | tar -xf - -C $(SANITY_TREE)
	@# Its own repository, so ansible-test lists files there instead of asking the
	@# enclosing checkout (which ignores .build/).
	@git -C $(SANITY_TREE) init --quiet
	@# galaxy.yml's dependencies must sit beside the collection for the import and
	@# validate-modules tests (modules import kubernetes.core's client): copy the
	@# kubernetes.core the venv's `ansible` package bundles.
	@mkdir -p $(BUILD)/sanity/ansible_collections/kubernetes
	@cp -r "$$($(BIN)/python -c 'import os, ansible_collections.kubernetes.core as m; print(list(m.__path__)[0])')" \
		$(BUILD)/sanity/ansible_collections/kubernetes/core
	$(call say,"ansible-test sanity --python $(SANITY_PYTHON)")
	@# uv on PATH: the get-pip stand-in bootstraps pip in each sanity virtualenv with it (as tests/matrix/ does).
	uv_dir=$$($(BIN)/python -c 'import os, sys; sys.path.insert(0, "tests/venv"); import uv_install; \
		print(os.path.dirname(uv_install.uv_binary()))'); cd $(SANITY_TREE) && env -u ANSIBLE_COLLECTIONS_PATH \
		PATH="$$uv_dir:$$PATH" $(BIN)/ansible-test sanity --color no --requirements --python $(SANITY_PYTHON)

# ansible-test bootstraps pip in its virtualenvs with a get-pip script it cannot
# download here; it uses a cached copy when there is one. Never replace a real one.
GET_PIP_CACHE := $(HOME)/.ansible/test/cache
.PHONY: get-pip-standin
get-pip-standin: venv
	@version=$$($(BIN)/python -c 'import re, inspect; \
		from ansible_test._internal import python_requirements as m; \
		print(re.search(r"pip=.([0-9.]+).", inspect.getsource(m.get_venv_packages)).group(1))'); \
	target="$(GET_PIP_CACHE)/get_pip_$${version//./_}.py"; \
	if [ -e "$$target" ] && ! grep -q 'vmsched-kubevirt get-pip stand-in' "$$target"; then \
		echo "using the existing get-pip script $$target"; \
	else \
		mkdir -p "$(GET_PIP_CACHE)"; install -m 0644 tests/sanity/get_pip_standin.py "$$target"; \
	fi

.PHONY: units
units: venv ## Unit tests (tests/unit)
	$(call say,"pytest tests/unit")
	@rc=0; $(ANSIBLE_ENV) $(BIN)/pytest tests/unit || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "units: no unit tests collected yet"; rc=0; fi; exit $$rc

# The integration suite runs on INTEGRATION_WORKERS pytest-xdist workers, a test file at a time, each worker on a
# control plane of its own (tests/cluster/workers.py): worker gw0 on the cluster the suite was started for, the
# others on clusters started beside it (state in <its directory>-gwN/) and stopped afterwards whatever the outcome.
# $(1): the environment naming the first cluster; $(2): cluster.py up's options; $(3): the workers; $(4): pytest's
# arguments; $(5): --first where the first cluster is started (at once with the others) and stopped here too.
INTEGRATION_WORKERS ?= 2
WORKERS_PY = PATH=$(BIN):$$PATH $(BIN)/python tests/cluster/workers.py
define on_workers
	@trap '[ -n "$(if $(5),,$(KEEP_WORKER_CLUSTERS))" ] || $(1) $(WORKERS_PY) down $(3) $(5) >/dev/null 2>&1 || true' EXIT; \
	$(1) $(WORKERS_PY) up $(3) $(5) $(2); \
	$(1) $(ANSIBLE_ENV) $(BIN)/pytest -n $(3) --dist loadfile $(4)
endef

.PHONY: integration
integration: integration-suite ## Integration tests against the local control plane (KubeVirt 1.9), then integration-kubevirt
	@$(MAKE) integration-kubevirt

# make test keeps the workers' clusters up for its later stages (KEEP_WORKER_CLUSTERS=1) and stops them at its end.
SUITE_UP_OPTIONS = $(if $(KUBEVIRT),--kubevirt v$(patsubst v%,%,$(KUBEVIRT)))
# make test leaves the AWX runner's jobs to matrix-edges, which runs them on the oldest and the newest ansible-core
# against a control plane of the same releases (the second worker's); make test-full runs them here too.
SUITE_LEAVES_OUT ?=

.PHONY: integration-suite
integration-suite: venv cluster-up ## The integration suite on the local control plane (KubeVirt 1.9) only
	$(call say,"pytest tests/integration on $(INTEGRATION_WORKERS) workers")
	$(call on_workers,KUBECONFIG=$(LOCAL_KUBECONFIG),$(SUITE_UP_OPTIONS),$(INTEGRATION_WORKERS),tests/integration -m "not kubevirt15 and not fleet" $(SUITE_LEAVES_OUT) --durations=40)

# make test starts them beside lint and units; integration-suite then finds them running (cluster.py up returns in
# seconds on a running control plane of the same releases). Alone, it leaves them up: make cluster-down and
# tests/cluster/workers.py down stop them.
.PHONY: integration-clusters
integration-clusters: venv cluster-up ## Start the integration suite's control planes, one per worker
	$(call say,"the integration suite's control planes: one per worker ($(INTEGRATION_WORKERS))")
	KUBECONFIG=$(LOCAL_KUBECONFIG) $(WORKERS_PY) up $(INTEGRATION_WORKERS) $(SUITE_UP_OPTIONS)

# Each older release on a control plane of its own (state in .cluster-<release>/, ports moved by an offset on
# top of VMSCHED_PORT_OFFSET), brought down afterwards whatever the outcome.
.PHONY: integration-kubevirt
integration-kubevirt: venv ## The migration tests on KubeVirt 1.6.6, the no-addedNodeSelector fallback on 1.5.3
	@$(MAKE) kubevirt-run KV_RELEASE=v1.6.6 KV_OFFSET=200 KV_WORKERS=$(INTEGRATION_WORKERS) \
		KV_PYTEST='$(KUBEVIRT_16_TESTS) $(KUBEVIRT_16_LEAVES_OUT) $(KUBEVIRT_DIFFERENTIAL) -m "not kubevirt15 and (kubevirt_differs or not differential)"'
	@# Two short files: one worker.
	@$(MAKE) kubevirt-run KV_RELEASE=v1.5.3 KV_OFFSET=300 KV_WORKERS=1 \
		KV_PYTEST='tests/integration/test_vmi_migration.py $(KUBEVIRT_DIFFERENTIAL) -m "kubevirt15 or kubevirt_differs"'

KV_DIR = $(CURDIR)/.cluster-$(KV_RELEASE)
KV_ENV = VMSCHED_CLUSTER_DIR=$(KV_DIR) VMSCHED_PORT_OFFSET=$$(( $${VMSCHED_PORT_OFFSET:-0} + $(KV_OFFSET) )) PATH=$(BIN):$$PATH

.PHONY: kubevirt-run
kubevirt-run: venv
	$(call say,"KubeVirt $(KV_RELEASE) on a control plane of its own in $(KV_DIR): $(subst ",',$(KV_PYTEST))")
	$(call on_workers,$(KV_ENV) KUBECONFIG=$(KV_DIR)/kubeconfig VMSCHED_TEST_KUBECONFIG=$(KV_DIR)/kubeconfig VMSCHED_PLACEMENT_VMS=200,--kubevirt $(KV_RELEASE),$(KV_WORKERS),$(KV_PYTEST) --durations=20,--first)

# site.yml and teardown.yml over a fleet: the local control plane and others of other Kubernetes releases
# (tests/cluster/fleet.py: state in .cluster-k8s-<release>/, `+map-beta` serves MutatingAdmissionPolicy's
# beta API), brought down afterwards whatever the outcome (tests/integration/test_fleet.py).
FLEET ?= v1.34.4+map-beta
MATRIX_FLEET := v1.36.3 v1.35.4 v1.34.4+map-beta
# scheduler_image's build mode, on two of them: the binary it builds must report that release.
MATRIX_BUILDS := v1.36.3 v1.34.4
FLEET_PY = PATH=$(BIN):$$PATH $(BIN)/python tests/cluster/fleet.py

.PHONY: fleet
fleet: venv cluster-up ## site.yml over a fleet: the local control plane and Kubernetes $(FLEET)
	$(call say,"a fleet: the local control plane and Kubernetes $(FLEET)")
	@trap '$(FLEET_PY) down $(FLEET) >/dev/null 2>&1 || true' EXIT; \
	$(FLEET_PY) up $(FLEET) && \
	KUBECONFIG=$(LOCAL_KUBECONFIG) VMSCHED_FLEET_KUBECONFIGS="$$($(FLEET_PY) kubeconfigs $(FLEET))" $(ANSIBLE_ENV) \
		$(BIN)/pytest -s tests/integration/test_fleet.py

# make test starts the fleet's other control planes ahead, in lane k (integration-kubevirt ends minutes before the
# suite), with the ports of the fleet stage's own (worker 1's, lane 2), which then finds them running.
.PHONY: fleet-up
fleet-up: venv
	$(call say,"the other control plane of the fleet stage ahead of it: Kubernetes $(FLEET)")
	$(WORKER_1_CLUSTER) $(FLEET_PY) up $(FLEET)

.PHONY: matrix
matrix: venv cluster-up ## Every Kubernetes release claimed, live: site.yml over all four, a real scheduler on each, two builds
	$(call say,"the Kubernetes matrix: the local control plane and $(MATRIX_FLEET)")
	@trap '$(FLEET_PY) down $(MATRIX_FLEET) >/dev/null 2>&1 || true' EXIT; \
	$(FLEET_PY) up $(MATRIX_FLEET) && \
	KUBECONFIG=$(LOCAL_KUBECONFIG) VMSCHED_FLEET_KUBECONFIGS="$$($(FLEET_PY) kubeconfigs $(MATRIX_FLEET))" $(ANSIBLE_ENV) \
		$(BIN)/pytest -s tests/integration/test_fleet.py && \
	for release in $(MATRIX_BUILDS); do \
		VMSCHED_KUBERNETES=$$release VMSCHED_TEST_KUBECONFIG=$$($(FLEET_PY) kubeconfigs $$release) $(ANSIBLE_ENV) \
			$(BIN)/pytest tests/integration/test_scheduler_image.py -k test_build_compiles_the_servers_version || exit 1; \
	done

# MOLECULE_SCENARIOS picks scenarios (e.g. MOLECULE_SCENARIOS="check_mode teardown"); empty runs them all.
MOLECULE_SCENARIOS ?=
.PHONY: molecule
molecule: venv cluster-up ## Molecule scenarios (extensions/molecule: default, check_mode, teardown) against the local control plane
	$(call say,"molecule test $(if $(MOLECULE_SCENARIOS),$(MOLECULE_SCENARIOS),--all) (extensions/molecule)")
	@# Molecule finds a collection's scenarios under extensions/molecule/ when run from its root, and
	@# calls ansible-config and ansible-playbook from PATH.
	KUBECONFIG=$(LOCAL_KUBECONFIG) $(ANSIBLE_ENV) PATH=$(BIN):$$PATH ANSIBLE_FORCE_COLOR=0 NO_COLOR=1 \
		$(BIN)/molecule test $(if $(MOLECULE_SCENARIOS),$(addprefix -s ,$(MOLECULE_SCENARIOS)),--all)

# The ansible-core x kubernetes.core matrix of tests/matrix/matrix.yml: a virtualenv per ansible-core
# and a collections tree per kubernetes.core, cached outside the checkout by a hash of their content (tests/matrix/README.md).
MATRIX := $(BIN)/python tests/matrix/matrix.py

.PHONY: matrix-core
matrix-core: venv cluster-up ## Every ansible-core x kubernetes.core combination: sanity, units; integration and Molecule default on the oldest and newest
	$(call say,"the ansible-core matrix: every combination of tests/matrix/matrix.yml")
	$(MATRIX) --all

.PHONY: matrix-edges matrix-edges-checks matrix-edges-jobs
# MATRIX_EDGES_TESTS: --awx-jobs (the AWX runner's jobs; make test) or --quick (all the playbooks' tests; test-full).
MATRIX_EDGES_TESTS ?= --awx-jobs
matrix-edges: venv ## The oldest and the newest combination: sanity, units, the AWX runner's jobs
	@$(MAKE) matrix-edges-checks && $(MAKE) matrix-edges-jobs

# Its two halves, apart in make test: the checks need no control plane, so they run beside the clusters' start.
matrix-edges-checks: venv ## matrix-edges' sanity and units only (no control plane)
	$(call say,"the ansible-core matrix: sanity and units on its oldest and newest combination")
	$(MATRIX) --edges --steps sanity,units

matrix-edges-jobs: venv cluster-up ## matrix-edges' integration step only: the AWX runner's jobs on the oldest and newest
	$(call say,"the ansible-core matrix: the AWX runner's jobs on its oldest and newest combination")
	VMSCHED_PORT_OFFSET=$${VMSCHED_PORT_OFFSET:-0} VMSCHED_CLUSTER_DIR=$(CLUSTER_DIR) $(MATRIX) --edges $(MATRIX_EDGES_TESTS) \
		--steps integration

# make test runs the jobs in lane k, once the older KubeVirt releases' tests and fleet-up end, minutes before the suite
# does: on a control plane of the same releases of their own (state in .cluster-jobs/, ports moved by 800, between the
# fleet's and the second worker's), started for them and stopped afterwards whatever the outcome.
JOBS_CLUSTER = VMSCHED_CLUSTER_DIR=$(CURDIR)/.cluster-jobs VMSCHED_PORT_OFFSET=$$(( $${VMSCHED_PORT_OFFSET:-0} + 800 ))
# Its stop, also in make test's EXIT trap should make test be cut short.
JOBS_CLUSTER_DOWN = $(JOBS_CLUSTER) PATH=$(BIN):$$PATH $(CLUSTER_DOWN) >/dev/null 2>&1 || true
.PHONY: matrix-edges-jobs-apart
matrix-edges-jobs-apart: venv ## make matrix-edges-jobs on a control plane of its own (.cluster-jobs/), then stopped
	@trap '$(JOBS_CLUSTER_DOWN)' EXIT; \
	$(JOBS_CLUSTER) $(MAKE) --no-print-directory matrix-edges-jobs

.PHONY: surveys
surveys: venv ## Regenerate the AWX surveys (playbooks/surveys/) from the playbooks' argument specs
	$(BIN)/python tests/unit/awx_surveys.py --write

# Besides everything on the venv's ansible-core, the oldest and the newest combination of the
# matrix (matrix-edges): sanity, units and the AWX runner's jobs (matrix.yml's awx_integration; make test-full: the
# integration tests of all the playbooks, quick_integration). The whole integration suite and Molecule default on both edges are
# make matrix-core's: they take longer than CI's budget leaves. make fleet runs site.yml over
# the default control plane and one of an older Kubernetes minor (1.34.4), so the version logic
# runs live on two releases in every CI run; make matrix (all four) is outside, for time.
#
# Every Go program the stages need is built from the start, in the background at the lowest priority
# (tests/cluster/prebuild.py, standard library only: it starts before the virtualenv is made, its log in
# .build/prebuild.log), while the virtualenv is made and the Python-only stages run; a stage that needs a
# program still being built waits for it. Lines of stages that run at the same time are prefixed with their lane.
# Three phases of two lanes each; each lane stops at its first failure, and the end prints every stage's time and lane
# (.build/stages.tsv). Lanes of about equal length; the whole run is CPU-bound on 2 cores, so where a stage runs
# changes its time little (README, "On a fresh machine"):
# - lint, units, ee and then the start of the integration suite's control planes (lane a: on a first run that start
#   waits for the builds, which the checks do not need), beside sanity and units on the oldest and the newest
#   ansible-core (lane b);
# - the integration suite (lane s: two workers, each on a control plane of its own), beside the older KubeVirt
#   releases (lane k: on control planes of their own, one worker: their tests mostly wait on KubeVirt's controllers)
#   and the start of the fleet's other control plane (fleet-up),
#   and then the AWX runner's jobs on the oldest and the newest ansible-core (matrix-edges-jobs-apart: on a control
#   plane of the same releases of their own; lane k's stages ended some 300 s before the suite without them);
# - molecule on the local control plane (lane 1), beside the fleet and release-check on the second worker's (lane 2).
# One proof per claim: sanity on the venv's ansible-core is make test-full's; make test runs it, with no ignore
# files, on the oldest and the newest ansible-core (matrix-edges-checks).
TEST_CHECKS := lint units ee
# The descheduler's resolve and mirror through the role alone: site.yml's image step (test_site_playbooks) resolves
# and mirrors it to the same digest and re-runs with no change, the scheduler's own resolve and mirror
# (test_scheduler_image) prove no change on resolve and no push in check mode, and the fleet the warning of a
# release behind.
TEST_SUITE_LEAVES_OUT := --ignore=tests/integration/test_awx_runner.py \
	--deselect=tests/integration/test_scheduler_image.py::test_descheduler_resolves_and_mirrors_pinned_to_the_seeded_digest
TEST_LANE_1 := molecule
TEST_LANE_2 := fleet release-check
WORKER_1_CLUSTER = VMSCHED_CLUSTER_DIR=$$($(WORKERS_PY) dir 1) VMSCHED_PORT_OFFSET=$$($(WORKERS_PY) offset 1)
# $(1): the TSV; $(2), $(3): two lanes' names; $(4), $(5): their stages; $(6): the environment of the second.
define two_lanes
	(tests/stages.sh $(1) $(2) $(4) 2>&1 | sed -u 's/^/[lane $(2)] /') & first=$$!; \
	($(6) tests/stages.sh $(1) $(3) $(5) 2>&1 | sed -u 's/^/[lane $(3)] /') & second=$$!; \
	rc=0; wait $$first || rc=$$?; wait $$second || rc=$$?; [ $$rc -eq 0 ]
endef
.PHONY: test
test: ## lint, units, ee, the clusters' start beside the edges' checks; integration-suite beside integration-kubevirt, fleet-up, the edges' AWX jobs; molecule beside fleet, release-check
	@mkdir -p $(BUILD); : > $(BUILD)/stages.tsv; started=$$(date +%s); \
	setsid nice -n 19 $(PYTHON) tests/cluster/prebuild.py --fleet '$(FLEET)' > $(BUILD)/prebuild.log 2>&1 & \
	prebuild=$$!; \
	trap 'kill -- -$$prebuild 2>/dev/null || true; [ ! -x $(BIN)/python ] || $(WORKERS_PY) down $(INTEGRATION_WORKERS) >/dev/null 2>&1 || true; \
		[ ! -x $(BIN)/python ] || $(FLEET_PY) down $(FLEET) >/dev/null 2>&1 || true; \
		[ ! -x $(BIN)/python ] || $(JOBS_CLUSTER_DOWN); \
		tests/stage_table.sh $(BUILD)/stages.tsv $$started' EXIT; \
	export MAKE="$(MAKE)" KEEP_WORKER_CLUSTERS=1 SUITE_LEAVES_OUT="$(TEST_SUITE_LEAVES_OUT)"; \
	tests/stages.sh $(BUILD)/stages.tsv - venv; \
	$(call two_lanes,$(BUILD)/stages.tsv,a,b,$(TEST_CHECKS) integration-clusters,matrix-edges-checks,); \
	$(call two_lanes,$(BUILD)/stages.tsv,s,k,integration-suite,integration-kubevirt fleet-up matrix-edges-jobs-apart,INTEGRATION_WORKERS=1); \
	$(call two_lanes,$(BUILD)/stages.tsv,1,2,$(TEST_LANE_1),$(TEST_LANE_2),$(WORKER_1_CLUSTER) INTEGRATION_WORKERS=1)

# Everything make test runs, and what it leaves to another test that asserts the same (one proof per claim): sanity
# on the venv's ansible-core (make test: on the oldest and the newest); the AWX runner's jobs on the venv's
# ansible-core (make test: on the oldest and the newest, against a control plane of the same releases); the
# migration playbooks' tests on KubeVirt 1.6.6 (make test: on 1.9.0, and the modules they call on 1.6.6); the bulk
# converge of vm_placement on 1.6.6 (make test: on 1.9.0, see KUBEVIRT_16_LEAVES_OUT); the
# descheduler's resolve and mirror by the scheduler_image role alone (make test: through site.yml's image step); on
# the oldest and newest ansible-core, site.yml's and the migration playbooks' own tests besides the AWX runner's jobs.
.PHONY: test-full
test-full: ## make test with every repetition it leaves out (one proof per claim: see the comment above)
	@$(MAKE) test TEST_CHECKS='lint sanity units ee' MATRIX_EDGES_TESTS=--quick TEST_SUITE_LEAVES_OUT= \
		KUBEVIRT_16_TESTS='$(KUBEVIRT_16_FULL_TESTS)' KUBEVIRT_16_LEAVES_OUT=

# --- local control plane and demo ---------------------------------------------------

.PHONY: cluster-up
cluster-up: venv ## Start the local control plane (tests/cluster/cluster.py), kubeconfig in .cluster/
	$(call say,"starting the local control plane")
	PATH=$(BIN):$$PATH $(CLUSTER_UP)

.PHONY: cluster-down
cluster-down: venv ## Stop the local control plane (tests/cluster/cluster.py)
	$(call say,"stopping the local control plane")
	PATH=$(BIN):$$PATH $(CLUSTER_DOWN)

# make demo on the local control plane (tests/demo/run.sh, the same steps release-check runs from the installed
# collection): demo VMs in DEMO_NAMESPACE (playbooks/demo_vms.yml, which refuses to run on real nodes), site.yml
# opting them in; the secondary scheduler at work: KWOK runs no container, so the control plane's own kube-scheduler
# runs with the configuration the role wrote, as its ServiceAccount (cluster.py scheduler-up; stopped when the demo
# ends, and by cluster-down), and binds demo-vm-05, created after the VM defaults policy gave it that scheduler; one
# targeted migration of demo-vm-01 to DEMO_TARGET_NODE, DEMO_TARGET_NODE's demo VMs evacuated to
# DEMO_EVACUATION_TARGET (not cordoned, so the fixture's nodes stay as they were; the report shows its drain plan), a
# rebalance of the demo VMs (rebalance.yml: the plan in check mode, then a run), and the report. KWOK pulls no image,
# so site.yml computes the scheduler and descheduler images from the server version instead of looking them up in
# registry.k8s.io (site_image_lookup=false); against a real cluster site.yml keeps its defaults.
# The descheduler starts in its dry run (site.yml's default); its preview Job would never log on KWOK's nodes
# (site_descheduler_dry_run_preview=false). SITE_ARGS adds ansible-playbook arguments to site.yml, e.g.
# SITE_ARGS=--check or SITE_ARGS='-e site_vms_namespace=prod'. Against a user's cluster (KUBECONFIG set) site.yml
# runs in check mode and prints what a real run would change: SITE_CHECK= runs it for real.
# What the demo printed is in $(BUILD)/demo.log; tests/demo/test_demo_output.py asserts on it (make demo-check; make
# demo runs it unless SITE_ARGS changed the demo).
DEMO_NAMESPACE ?= vmsched-demo
DEMO_TARGET_NODE ?= node04
# Same processor as node04 (Cascade Lake): KubeVirt only migrates to a node with the VM's CPU model.
DEMO_EVACUATION_TARGET ?= node02
SITE_ARGS ?=
SITE_CHECK ?= --check
DEMO_LOG := $(BUILD)/demo.log
# tests/demo/run.sh's settings but for the playbooks, the namespaces and site.yml's variables ($(1): the working
# directory, $(2): how the playbooks are named, $(3): the demo's namespace, $(4): site.yml's variables, $(5): its
# secondary scheduler).
DEMO_RUN = cd $(1) && DEMO_PLAYBOOKS='$(2)' DEMO_NAMESPACE=$(3) DEMO_SITE_VARS='$(4)' DEMO_SCHEDULER=$(5) \
	DEMO_TARGET_NODE=$(DEMO_TARGET_NODE) DEMO_EVACUATION_TARGET=$(DEMO_EVACUATION_TARGET) \
	DEMO_CLUSTER='$(BIN)/python $(CURDIR)/tests/cluster/cluster.py'
DEMO_SITE_VARS := -e site_image_lookup=false -e site_descheduler_dry_run_preview=false
# The output check: the log of a run of tests/demo/run.sh, with the names of that run.
DEMO_CHECK = VMSCHED_DEMO_LOG=$(1) VMSCHED_DEMO_NAMESPACE=$(2) $(ANSIBLE_ENV) $(BIN)/pytest -q -p no:cacheprovider \
	tests/demo/test_demo_output.py

.PHONY: demo
ifneq ($(USER_KUBECONFIG),)
demo: venv ## Run playbooks/site.yml (in check mode against $KUBECONFIG if set, else the demo on the local control plane)
	$(call say,"site.yml $(SITE_CHECK) against KUBECONFIG=$(USER_KUBECONFIG) (SITE_CHECK= for a real run); the local control plane is not started")
	KUBECONFIG=$(USER_KUBECONFIG) $(ANSIBLE_ENV) $(BIN)/ansible-playbook playbooks/site.yml $(SITE_CHECK) $(SITE_ARGS)
else
demo:
	@# A first run's builds (tests/cluster/prebuild.py: standard library only) start while the virtualenv is made;
	@# cluster-up waits for them, logging every minute, and the trap stops them if the demo is interrupted.
	@$(PYTHON) tests/cluster/prebuild.py --announce
	@mkdir -p $(BUILD); setsid $(PYTHON) tests/cluster/prebuild.py --demo > $(BUILD)/prebuild-demo.log 2>&1 & \
	builds=$$!; trap 'kill -- -$$builds 2>/dev/null || true' EXIT; \
	VMSCHED_ANNOUNCED=1 $(MAKE) --no-print-directory venv cluster-up
	@# Ansible's colours on a terminal, though its output goes through tee (the check reads past them).
	@color=$$([ -t 1 ] && echo 1 || echo 0); \
	$(call DEMO_RUN,$(CURDIR),playbooks/{}.yml,$(DEMO_NAMESPACE),$(DEMO_SITE_VARS),vmsched-scheduler/kubevirt-scheduler) \
		KUBECONFIG=$(LOCAL_KUBECONFIG) $(ANSIBLE_ENV) ANSIBLE_FORCE_COLOR=$$color DEMO_ANSIBLE_PLAYBOOK=$(BIN)/ansible-playbook \
		SITE_ARGS='$(SITE_ARGS)' tests/demo/run.sh 2>&1 | tee $(DEMO_LOG)
ifeq ($(strip $(SITE_ARGS)),)
	@$(MAKE) demo-check
else
	$(call say,"SITE_ARGS changed the demo: its output is not checked (make demo-check would check $(DEMO_LOG))")
endif
endif

.PHONY: demo-check
demo-check: venv ## Assert on what the last make demo printed ($(BUILD)/demo.log): tests/demo/test_demo_output.py
	$(call say,"checking what the demo printed ($(DEMO_LOG))")
	$(call DEMO_CHECK,$(DEMO_LOG),$(DEMO_NAMESPACE))

# --- release ----------------------------------------------------------------------

# The collection as users get it: the tarball `ansible-galaxy collection build` makes, installed
# into a virtualenv of its own (requirements.txt and the ansible-core pin, no `ansible` package, pip's
# cache) with the kubernetes.core and kubevirt.core the dev venv's `ansible` package bundles (installed offline: Galaxy
# may be unreachable), then make demo's steps (tests/demo/run.sh) run from the installed collection's playbooks
# (ansible-playbook vmsched.kubevirt.<name>) outside the checkout, in its own namespace, printed with the documented
# result format (callback_result_format = yaml); tests/demo/test_demo_output.py asserts on that output, so this one
# run proves the release and the demo. Torn down after.
RELEASE := $(BUILD)/release
# That virtualenv lives in the cache like the dev venv's, named by a hash of what it installs, and is never changed
# once built: the tarball goes into $(RELEASE_COLLECTIONS), so every clone reuses it (33 s of pip on each run before).
RELEASE_CORE = $(shell grep -E '^ansible-core==' requirements-dev.txt)
RELEASE_VENV = $(CACHE_HOME)/envs/release-py$(PYTHON_MINOR)-$(shell { cat requirements.txt; echo '$(RELEASE_CORE)'; } \
	| sha256sum | cut -c1-12)
RELEASE_COLLECTIONS := $(RELEASE)/collections
RELEASE_NAMESPACE := vmsched-release
# Names of its own too: a cluster that ran make demo has a scheduler and a descheduler of the default names, and the
# roles refuse a second one of a name.
RELEASE_SCHEDULER := $(RELEASE_NAMESPACE)-scheduler
RELEASE_SITE_VARS := $(DEMO_SITE_VARS) -e site_scheduler_namespace=$(RELEASE_NAMESPACE) \
	-e site_scheduler_name=$(RELEASE_SCHEDULER) -e site_descheduler_namespace=$(RELEASE_NAMESPACE) \
	-e site_descheduler_name=$(RELEASE_NAMESPACE)-descheduler -e site_vm_defaults_name=$(RELEASE_NAMESPACE)
RELEASE_VARS := $(RELEASE_SITE_VARS) -e site_vms_namespace=$(RELEASE_NAMESPACE)
RELEASE_ENV = env -u ANSIBLE_CONFIG KUBECONFIG=$(LOCAL_KUBECONFIG) ANSIBLE_LOCALHOST_WARNING=false \
	ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_CALLBACK_RESULT_FORMAT=yaml ANSIBLE_COLLECTIONS_PATH=$(RELEASE_COLLECTIONS)
RELEASE_PLAYBOOK = cd $(RELEASE) && $(RELEASE_ENV) $(RELEASE_VENV)/bin/ansible-playbook
# Paths a tarball must not hold: local tooling, caches, test output.
RELEASE_LOCAL_FILES := ^(\.venv|\.build|\.cluster[^/]*|\.ansible|\.git|\.pytest_cache|\.ci|collections|tests/output|bench/output|docs/build)/|__pycache__/|\.pyc$$|\.tar\.gz$$

.PHONY: release-check
release-check: venv cluster-up ## Build the collection, install the tarball in a venv of its own, run the demo from it and check its output
	$(call say,"ansible-galaxy collection build into $(RELEASE)/")
	@rm -rf $(RELEASE)
	@mkdir -p $(RELEASE_COLLECTIONS)/ansible_collections/kubernetes $(RELEASE_COLLECTIONS)/ansible_collections/kubevirt
	$(BIN)/ansible-galaxy collection build --output-path $(RELEASE) .
	@bad=$$(tar -tzf $(RELEASE)/vmsched-kubevirt-*.tar.gz | grep -E '$(RELEASE_LOCAL_FILES)' || true); \
	if [ -n "$$bad" ]; then printf 'release-check: the tarball holds local files (galaxy.yml build_ignore):\n%s\n' "$$bad" | head -20; exit 1; fi
	$(call say,"a virtualenv of requirements.txt and $(RELEASE_CORE) alone: $(RELEASE_VENV)")
	@home=$(RELEASE_VENV); mkdir -p "$$(dirname $$home)"; exec 9>"$$home.lock"; flock 9; \
	if [ -e "$$home/.installed" ]; then echo "built by an earlier run"; else \
		rm -rf "$$home"; $(PYTHON) -m venv "$$home"; \
		$(PYTHON) $(UV_INSTALL) "$$home/bin/python" -r requirements.txt "$(RELEASE_CORE)"; \
		touch "$$home/.installed"; \
	fi
	$(call say,"installing the tarball offline beside the bundled kubernetes.core and kubevirt.core")
	cp -r "$$($(BIN)/python -c 'import ansible_collections.kubernetes.core as m; print(list(m.__path__)[0])')" \
		$(RELEASE_COLLECTIONS)/ansible_collections/kubernetes/core
	cp -r "$$($(BIN)/python -c 'import ansible_collections.kubevirt.core as m; print(list(m.__path__)[0])')" \
		$(RELEASE_COLLECTIONS)/ansible_collections/kubevirt/core
	@# Outside the checkout: its ansible.cfg would point ansible-galaxy at the checkout's link.
	cd $(RELEASE) && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH=$(RELEASE_COLLECTIONS) \
		$(RELEASE_VENV)/bin/ansible-galaxy collection install --offline -p $(RELEASE_COLLECTIONS) vmsched-kubevirt-*.tar.gz
	@installed=$$(cd $(RELEASE) && env -u ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH=$(RELEASE_COLLECTIONS) $(RELEASE_VENV)/bin/ansible-galaxy collection list vmsched.kubevirt --format json); \
	echo "$$installed" | $(RELEASE_VENV)/bin/python -c 'import json, sys; found = json.load(sys.stdin); \
		paths = [p for p in found if "vmsched.kubevirt" in found[p]]; \
		sys.exit(0 if paths == ["$(RELEASE_COLLECTIONS)/ansible_collections"] else "release-check: vmsched.kubevirt found in %s" % paths)'
	$(call say,"make demo's steps from the installed collection in namespace $(RELEASE_NAMESPACE)")
	@# The VMs name the scheduler (one was defaulted to it): teardown removes it all the same.
	@trap '$(RELEASE_PLAYBOOK) vmsched.kubevirt.teardown $(RELEASE_VARS) -e site_scheduler_remove_in_use=true >/dev/null \
		&& $(RELEASE_PLAYBOOK) vmsched.kubevirt.demo_vms -e demo_vms_namespace=$(RELEASE_NAMESPACE) -e demo_vms_state=absent >/dev/null \
		|| echo "release-check: cleaning up $(RELEASE_NAMESPACE) failed" >&2' EXIT; \
	$(call DEMO_RUN,$(RELEASE),vmsched.kubevirt.{},$(RELEASE_NAMESPACE),$(RELEASE_SITE_VARS),$(RELEASE_NAMESPACE)/$(RELEASE_SCHEDULER)) \
		$(RELEASE_ENV) DEMO_ANSIBLE_PLAYBOOK=$(RELEASE_VENV)/bin/ansible-playbook SITE_ARGS= \
		bash $(CURDIR)/tests/demo/run.sh 2>&1 | tee $(RELEASE)/demo.log; \
	cd $(CURDIR) && $(call DEMO_CHECK,$(RELEASE)/demo.log,$(RELEASE_NAMESPACE))

# The AWX execution environment's build context (ansible-builder create: no container engine
# needed); building the image from it is `podman build .build/ee` (docs/awx.md).
.PHONY: ee
ee: venv ## Execution environment: build context in .build/ee/ (ansible-builder create), checked
	$(call say,"ansible-galaxy collection build into $(BUILD)/ee-collection/")
	@rm -rf $(BUILD)/ee $(BUILD)/ee-collection
	$(BIN)/ansible-galaxy collection build --output-path $(BUILD)/ee-collection .
	$(call say,"ansible-builder create into $(BUILD)/ee/")
	$(BIN)/ansible-builder create --file execution-environment.yml --context $(BUILD)/ee --output-filename Containerfile
	$(call say,"checking the build context")
	VMSCHED_EE_CONTEXT=$(BUILD)/ee $(ANSIBLE_ENV) $(BIN)/pytest -q tests/unit/test_execution_environment.py

# --- benchmarks ---------------------------------------------------------------------

# The balance benchmark wants at least 20 nodes: a cluster `make bench` starts has 24 (VMSCHED_NODES, default
# 24 here). A smaller cluster already up stays as it is, and balance.py says so: `make cluster-down` first.
.PHONY: bench
bench: export VMSCHED_NODES ?= 24
bench: venv cluster-up ## Benchmarks on the local control plane (24 nodes): bench/REPORT.md and bench/plots/ (about 65 min)
	$(call say,"bench/report.py: every benchmark against the local control plane")
	KUBECONFIG=$(LOCAL_KUBECONFIG) $(ANSIBLE_ENV) $(BIN)/python bench/report.py

# --- housekeeping -------------------------------------------------------------------

.PHONY: clean
clean: ## Remove .venv/, .build/ and test output (not .cluster/: use cluster-down)
	rm -rf $(VENV) $(BUILD) tests/output .pytest_cache .ansible
	find . \( -path ./.git -o -path ./.cluster \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
