# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The image each role deploys, chosen as the roles' own vars and tasks choose it (their text rendered through
Ansible's Templar, the collection's filters resolved by FQCN): the scheduler_image role's flavors, the descheduler
flavor included (looked up or mirrored, never built); the descheduler role's choice between an image given, the one
scheduler_image looked up and the offline tag; site.yml's summary of the images.

The live side (a registry lookup pinning the digest, the copy of a mirror, the Deployment that runs it) is
tests/integration/test_scheduler_image.py and test_descheduler.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader

try:
    from ansible.template import Templar, trust_as_template
except ImportError as exc:  # ansible-core before 2.19
    raise ImportError("tests/unit/test_role_images.py renders role files as ansible-core 2.19 and later do "
                      "(trust_as_template); run it with the dev venv's ansible-core (make units)") from exc

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import SCHEDULER_FLAVORS

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
SERVER = "v1.36.3"
# Kubernetes 1.36: kube-scheduler of the exact release, scheduler-plugins one minor behind, descheduler v0.36.
IMAGES = {
    "kube-scheduler": "kube-scheduler:v1.36.3",
    "scheduler-plugins": "scheduler-plugins/kube-scheduler:v0.35.7",
    "descheduler": "descheduler/descheduler:v0.36.0",
}
PINNED = "registry.k8s.io/descheduler/descheduler:v0.36.0@sha256:" + "a" * 64


def load(path):
    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def role_variables(role, **overrides):
    """The variables a task of the role sees: its defaults and vars (templates, as Ansible loads them) and the
    caller's values."""
    variables = {}
    for part in ("defaults", "vars"):
        variables.update(load(ROLES / role / part / "main.yml"))
    variables.update(overrides)
    return variables


def render(variables, text):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def holds(variables, conditions):
    templar = Templar(loader=DataLoader(), variables=variables)
    conditions = conditions if isinstance(conditions, list) else [conditions]
    return all(templar.evaluate_conditional(trust_as_template(str(c))) for c in conditions)


def tasks(path):
    """Every task of a task file or play, blocks opened, in order."""
    found = []

    def walk(items):
        for item in items:
            found.append(item)
            for key in ("block", "rescue", "always", "tasks"):
                walk(item.get(key) or [])

    walk(load(path))
    return found


def task(path, name):
    (found,) = [t for t in tasks(path) if t.get("name") == name]
    return found


def names(path):
    return [t.get("name") for t in tasks(path)]


# --- scheduler_image: the descheduler flavor ---------------------------------------------------------------

def scheduler_image_variables(flavor, **overrides):
    return role_variables("scheduler_image", **dict({"scheduler_image_flavor": flavor,
                                                     "scheduler_image_kubernetes_version": SERVER}, **overrides))


def test_the_role_knows_the_filter_s_flavors_and_the_descheduler():
    spec = yaml.safe_load((ROLES / "scheduler_image" / "meta" / "argument_specs.yml").read_text())
    flavor = spec["argument_specs"]["main"]["options"]["scheduler_image_flavor"]
    assert flavor["choices"] == list(SCHEDULER_FLAVORS) + ["descheduler"]
    assert sorted(IMAGES) == sorted(flavor["choices"])


@pytest.mark.parametrize("flavor", sorted(IMAGES))
def test_each_flavor_s_image_in_the_source_and_the_target_registry(flavor):
    variables = scheduler_image_variables(flavor, scheduler_image_source_registry="mirror.example.com:5000/k8s")
    assert render(variables, "{{ scheduler_image__source_image }}") == "mirror.example.com:5000/k8s/" + IMAGES[flavor]
    assert render(variables, "{{ scheduler_image__target_image }}") == ""
    variables["scheduler_image_target_registry"] = "registry.example.com"
    assert render(variables, "{{ scheduler_image__target_image }}") == "registry.example.com/" + IMAGES[flavor]


def test_the_descheduler_flavor_is_the_descheduler_image_filter_s_choice():
    # The offline choice (the descheduler role with descheduler_image_lookup=false, site.yml with
    # site_image_lookup=false) and the one looked up are the same image; only the digest differs.
    for version in ("v1.34.4", "v1.35.4", SERVER, "v1.37.2"):
        variables = scheduler_image_variables("descheduler", scheduler_image_kubernetes_version=version,
                                              scheduler_image_target_registry="127.0.0.1:5000")
        assert render(variables, "{{ scheduler_image__source_image }}") == render(
            {"v": version}, "{{ v | vmsched.kubevirt.descheduler_image }}")
        assert render(variables, "{{ scheduler_image__target_image }}") == render(
            {"v": version}, "{{ v | vmsched.kubevirt.descheduler_image('127.0.0.1:5000') }}")


@pytest.mark.parametrize("mode", ["resolve", "mirror", "build"])
@pytest.mark.parametrize("flavor", sorted(IMAGES))
def test_build_refuses_the_descheduler_first(flavor, mode):
    main = ROLES / "scheduler_image" / "tasks" / "main.yml"
    check = task(main, "Check that the flavor can be built")["ansible.builtin.assert"]
    variables = scheduler_image_variables(flavor, scheduler_image_mode=mode)
    assert holds(variables, check["that"]) is not (flavor == "descheduler" and mode == "build")
    message = render(variables, check["fail_msg"])
    assert "scheduler_image_mode=resolve" in message and "scheduler_image_mode=mirror" in message
    # Before the server is read, the image named or any registry touched.
    order = names(main)
    assert order.index("Check that the flavor can be built") < order.index("Read the Kubernetes server version")


@pytest.mark.parametrize("flavor", sorted(IMAGES))
def test_a_missing_image_suggests_a_build_only_where_there_is_one(flavor):
    hint = render(scheduler_image_variables(flavor), "{{ scheduler_image__hints.not_found }}")
    assert "scheduler_image_mode=mirror" in hint
    assert ("scheduler_image_mode=build" in hint) is (flavor != "descheduler")


def test_the_release_behind_the_server_is_warned_for_the_descheduler_too():
    main = ROLES / "scheduler_image" / "tasks" / "main.yml"
    warn = task(main, "Warn that the release chosen is behind the server")
    for flavor, version, warned in [("descheduler", "v1.37.2", True), ("descheduler", SERVER, False),
                                    ("scheduler-plugins", SERVER, True), ("kube-scheduler", "v1.37.2", False)]:
        variables = dict(scheduler_image_variables(flavor, scheduler_image_kubernetes_version=version), **warn["vars"])
        assert holds(variables, warn["when"]) is warned, (flavor, version)
        if warned:
            message = render(variables, warn["ansible.builtin.debug"]["msg"])
            assert message.startswith("WARNING: %s has no release for Kubernetes" % flavor), message
            assert "one minor behind the server" in message


# --- the descheduler role: which image it deploys ----------------------------------------------------------

PRESENT = ROLES / "descheduler" / "tasks" / "present.yml"


def descheduler_variables(**overrides):
    return role_variables("descheduler", descheduler_cluster_info=SERVER, **overrides)


@pytest.mark.parametrize("given, lookup, registry, looked_up, deployed", [
    # Looked up (the default): scheduler_image's reference, pinned to its digest.
    ("", True, "", True, PINNED),
    ("", True, "mirror.example.com:5000", True, PINNED),
    # Offline: the tag for the server, from the registry named, said.
    ("", False, "", False, "registry.k8s.io/descheduler/descheduler:v0.36.0"),
    ("", False, "mirror.example.com:5000", False, "mirror.example.com:5000/descheduler/descheduler:v0.36.0"),
    # Given: as it is, nothing looked up.
    ("registry.example.com/descheduler:v0.35.1", True, "", False, "registry.example.com/descheduler:v0.35.1"),
    ("registry.example.com/descheduler:v0.35.1", False, "", False, "registry.example.com/descheduler:v0.35.1"),
])
def test_the_image_deployed(given, lookup, registry, looked_up, deployed):
    variables = descheduler_variables(descheduler_image=given, descheduler_image_lookup=lookup,
                                      descheduler_registry=registry, scheduler_image_ref=PINNED)
    include = task(PRESENT, "Make the descheduler image available")
    assert holds(variables, include["when"]) is looked_up
    chosen = task(PRESENT, "Choose the image")["ansible.builtin.set_fact"]["descheduler__image"]
    assert render(variables, chosen) == deployed
    said = task(PRESENT, "Say that the image was not looked up")
    assert holds(variables, said["when"]) is (not given and not lookup)
    if not given and not lookup:
        message = render(dict(variables, descheduler__image=deployed), said["ansible.builtin.debug"]["msg"])
        assert deployed in message and "not pinned to a digest" in message


@pytest.mark.parametrize("mode, target", [("resolve", ""), ("mirror", "registry.example.com:5000")])
def test_scheduler_image_is_run_with_the_descheduler_s_settings(mode, target):
    variables = descheduler_variables(descheduler_image_mode=mode, descheduler_image_target_registry=target,
                                      descheduler_registry="")
    passed = {name: render(variables, value) if isinstance(value, str) else value
              for name, value in task(PRESENT, "Make the descheduler image available")["vars"].items()}
    assert passed == {
        "scheduler_image_flavor": "descheduler",
        "scheduler_image_mode": mode,
        "scheduler_image_source_registry": "registry.k8s.io",
        "scheduler_image_target_registry": target,
        "scheduler_image_cluster_info": SERVER,
        # Not an override a play sets for its scheduler: the descheduler matches the server, like its policy.
        "scheduler_image_kubernetes_version": "",
    }
    order = names(PRESENT)
    # Before the first write: the namespace made, then apply.yml (RBAC first).
    assert order.index("Make the descheduler image available") < order.index("Create the descheduler's own namespace")
    assert order.index("Create the descheduler's own namespace") < order.index("Apply the descheduler")
    assert names(ROLES / "descheduler" / "tasks" / "apply.yml")[0] == "Apply the ServiceAccount and its RBAC"


@pytest.mark.parametrize("lookup, mode, given, refused", [
    (True, "resolve", "", False),
    (True, "mirror", "", False),
    (False, "resolve", "", False),
    (False, "mirror", "", True),
    (False, "mirror", "registry.example.com/descheduler:v0.35.1", False),  # nothing to look up or mirror
])
def test_mirror_needs_the_lookup(lookup, mode, given, refused):
    check = task(ROLES / "descheduler" / "tasks" / "main.yml",
                 "Check that the image mode can work without a registry lookup")["ansible.builtin.assert"]
    variables = descheduler_variables(descheduler_image_lookup=lookup, descheduler_image_mode=mode,
                                      descheduler_image=given)
    assert holds(variables, check["that"]) is not refused
    assert "descheduler_image_lookup=false" in render(variables, check["fail_msg"])


# --- site.yml: what the summary shows -----------------------------------------------------------------------

SITE = ROOT / "playbooks" / "site.yml"


def site_summary(**overrides):
    """The summary site.yml records for a cluster, from the play's vars and the values a run set."""
    play = load(SITE)[0]
    summarize = task(SITE, "Summarize the cluster")
    variables = dict(play["vars"], **summarize["vars"])
    variables.update({
        "site__plan": {"server": SERVER, "scheduler_config": "kubescheduler.config.k8s.io/v1",
                       "scheduler_release": SERVER, "descheduler": "v0.36.0", "vm_defaults": "off"},
        "site__placed": {"skipped": True},
        "site_scheduling": {"balance": {"vmi_count_cv": None}, "installed": {"schedulers": [], "deschedulers": []}},
    })
    variables.update(overrides)
    return render(variables, summarize["ansible.builtin.set_fact"]["site__summary"])


def installed(image, dry_run=True):
    """scheduling_info's report of what runs: site.yml's scheduler and descheduler (its default names)."""
    defaults = load(SITE)[0]["vars"]
    return {"balance": {"vmi_count_cv": None}, "installed": {
        "schedulers": [{"namespace": defaults["site_scheduler_namespace"], "instance": defaults["site_scheduler_name"],
                        "image": "x/kube-scheduler:v1"}],
        "deschedulers": [{"namespace": defaults["site_descheduler_namespace"], "name": defaults["site_descheduler_name"],
                          "image": image, "dry_run": dry_run}]}}


def test_the_summary_shows_the_images_this_run_chose():
    summary = site_summary(site__scheduler_image="r/kube-scheduler:v1.36.3@sha256:1", site__descheduler_image=PINNED)
    assert (summary["scheduler_image"], summary["descheduler_image"]) == ("r/kube-scheduler:v1.36.3@sha256:1", PINNED)
    given = site_summary(site_image_ref="mine/s:1", site_descheduler_image="mine/d:2", site__descheduler_image=PINNED)
    assert (given["scheduler_image"], given["descheduler_image"]) == ("mine/s:1", "mine/d:2")


def test_an_image_the_roles_resolved_shows_as_deployed():
    # site_image=false: the roles looked the images up themselves; the report reads what runs.
    summary = site_summary(site_scheduling=installed(PINNED))
    assert (summary["scheduler_image"], summary["descheduler_image"]) == ("x/kube-scheduler:v1", PINNED)
    unreported = site_summary(site_scheduling={"balance": {}}, site_report=False)
    assert unreported["scheduler_image"] == unreported["descheduler_image"] == "resolved by the role"


@pytest.mark.parametrize("image, dry_run, release", [
    (PINNED, True, "v0.36.0 dry-run"),
    ("127.0.0.1:5000/descheduler/descheduler:v0.35.1", False, "v0.35.1 evicts"),
    ("127.0.0.1:5000/descheduler/descheduler@sha256:" + "b" * 64, True, "sha256:" + "b" * 64 + " dry-run"),
])
def test_a_skipped_descheduler_step_shows_what_runs(image, dry_run, release):
    summary = site_summary(site_descheduler=False, site_scheduling=installed(image, dry_run))
    assert summary["descheduler"] == release
    assert summary["descheduler_image"] == image
    nothing = site_summary(site_descheduler=False)
    assert nothing["descheduler"] == nothing["descheduler_image"] == "none"
