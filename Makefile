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
CLUSTER_DIR := $(CURDIR)/.cluster
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

# The local control plane's own scripts (tests/cluster/).
CLUSTER_UP := $(BIN)/python tests/cluster/cluster.py up
CLUSTER_DOWN := $(BIN)/python tests/cluster/cluster.py down

STAMP := $(VENV)/.installed
REQUIREMENTS := requirements-dev.txt requirements.txt

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

$(STAMP): $(REQUIREMENTS)
	@# Created once, then updated in place (processes may be running from it);
	@# `make clean venv` starts from scratch.
	@if [ ! -x $(BIN)/python ]; then \
		$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ansible-core 2.19 needs Python >= 3.11: make PYTHON=...")'; \
		printf '\n==> creating $(VENV)/ with %s\n' "$$($(PYTHON) --version)"; \
		echo "$(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); \
	fi
	$(call say,"installing $(REQUIREMENTS) into $(VENV)/")
	$(BIN)/python -m pip install --quiet $(addprefix -r ,$(REQUIREMENTS))
	@out=$$($(BIN)/python -m pip check) || { echo "$$out"; exit 1; }
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
	PATH=$(BIN):$$PATH $(ANSIBLE_ENV) $(BIN)/ansible-lint --nocolor
	$(call say,"antsibull-docs lint-collection-docs")
	@# --validate-collection-refs all: resolve kubernetes.core (doc fragment k8s_auth_options) where it is
	@# installed; the default copies dependencies to a temporary tree where ansible-doc does not find it.
	PATH=$(BIN):$$PATH $(ANSIBLE_ENV) $(BIN)/antsibull-docs lint-collection-docs --plugin-docs \
		--validate-collection-refs all $(COLLECTION_LINK)

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
	cd $(SANITY_TREE) && env -u ANSIBLE_COLLECTIONS_PATH \
		$(BIN)/ansible-test sanity --color no --requirements --python $(SANITY_PYTHON)

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

.PHONY: integration
integration: venv cluster-up ## Integration tests against the local control plane
	$(call say,"pytest tests/integration")
	@rc=0; KUBECONFIG=$(LOCAL_KUBECONFIG) $(ANSIBLE_ENV) $(BIN)/pytest tests/integration || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "integration: no integration tests collected yet"; rc=0; fi; exit $$rc

.PHONY: test
test: ## lint, sanity, units, integration, in that order, stopping at the first failure
	@$(MAKE) lint
	@$(MAKE) sanity
	@$(MAKE) units
	@$(MAKE) integration

# --- local control plane and demo ---------------------------------------------------

.PHONY: cluster-up
cluster-up: venv ## Start the local control plane (tests/cluster/cluster.py), kubeconfig in .cluster/
	$(call say,"starting the local control plane")
	PATH=$(BIN):$$PATH $(CLUSTER_UP)

.PHONY: cluster-down
cluster-down: venv ## Stop the local control plane (tests/cluster/cluster.py)
	$(call say,"stopping the local control plane")
	PATH=$(BIN):$$PATH $(CLUSTER_DOWN)

.PHONY: demo
ifneq ($(USER_KUBECONFIG),)
demo: venv ## Run playbooks/site.yml (against $KUBECONFIG if set, else the local control plane)
	$(call say,"site.yml against KUBECONFIG=$(USER_KUBECONFIG); the local control plane is not started")
	KUBECONFIG=$(USER_KUBECONFIG) $(ANSIBLE_ENV) $(BIN)/ansible-playbook playbooks/site.yml
else
demo: venv cluster-up
	$(call say,"site.yml against the local control plane")
	KUBECONFIG=$(LOCAL_KUBECONFIG) $(ANSIBLE_ENV) $(BIN)/ansible-playbook playbooks/site.yml
endif

# --- housekeeping -------------------------------------------------------------------

.PHONY: clean
clean: ## Remove .venv/, .build/ and test output (not .cluster/: use cluster-down)
	rm -rf $(VENV) $(BUILD) tests/output .pytest_cache .ansible
	find . \( -path ./.git -o -path ./.cluster \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
