# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/module_runner.py: the input checked before any client exists (option bounds,
the engine's check_params, the kubeconfig file and context), the names looked up before any write, and run_engine's
order (nothing reaches the API server when the input is bad)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml
from kubernetes.client.rest import ApiException

from ansible_collections.vmsched.kubevirt.plugins.module_utils import module_runner as mr
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import KubeVirtError
from ansible_collections.vmsched.kubevirt.plugins.module_utils.evacuation import Evacuation
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import Migration
from ansible_collections.vmsched.kubevirt.plugins.module_utils.playbook_vars import Preflight

from .kubevirt_fakes import FakeCluster, node
from .test_evacuation import params as evacuation_params
from .test_migration import params as migration_params


def kubeconfig(path, contexts=("admin",), current="admin"):
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "local", "cluster": {"server": "https://127.0.0.1:6443"}}],
              "users": [{"name": "admin", "user": {"token": "secret"}}],
              "contexts": [{"name": c, "context": {"cluster": "local", "user": "admin"}} for c in contexts]}
    if current is not None:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture
def good(tmp_path):
    """A kubeconfig that passes, as KUBECONFIG: the environment the checks see."""
    return {"KUBECONFIG": kubeconfig(tmp_path / "good")}


def problems(engine_class, params, environ):
    try:
        mr.check_input(params, engine_class, environ)
    except KubeVirtError as exc:
        return str(exc)
    return None


# --- the bounds of numeric options -------------------------------------------------------------------------


@pytest.mark.parametrize("engine_class, params, message", [
    (Migration, migration_params(wait_timeout=-5), "wait_timeout is -5; the least allowed is 1"),
    (Migration, migration_params(wait_timeout=0), "wait_timeout is 0; the least allowed is 1"),
    (Migration, migration_params(unschedulable_timeout=-1), "unschedulable_timeout is -1; the least allowed is 0"),
    (Evacuation, evacuation_params(node="n1", wait_timeout=-5), "wait_timeout is -5; the least allowed is 1"),
    (Evacuation, evacuation_params(node="n1", max_parallel=0), "max_parallel is 0; the least allowed is 1"),
    (Evacuation, evacuation_params(node="n1", max_parallel=-3), "max_parallel is -3; the least allowed is 1"),
    (Evacuation, evacuation_params(node="n1", unschedulable_timeout=-60),
     "unschedulable_timeout is -60; the least allowed is 0"),
], ids=["migration negative wait", "migration zero wait", "migration negative unschedulable",
        "evacuation negative wait", "evacuation zero max_parallel", "evacuation negative max_parallel",
        "evacuation negative unschedulable"])
def test_out_of_range_options_are_named(engine_class, params, message, good):
    assert problems(engine_class, params, good) == message


@pytest.mark.parametrize("engine_class, params", [
    (Migration, migration_params(wait_timeout=1, unschedulable_timeout=0)),
    (Migration, migration_params(wait_timeout=86400 * 7, unschedulable_timeout=None)),
    (Evacuation, evacuation_params(node="n1", wait_timeout=1, max_parallel=1, unschedulable_timeout=0)),
    (Evacuation, evacuation_params(node="n1", max_parallel=None)),
])
def test_in_range_options_pass(engine_class, params, good):
    assert problems(engine_class, params, good) is None


def test_every_problem_is_reported_at_once(tmp_path):
    message = problems(Migration, migration_params(name="", wait_timeout=-1, unschedulable_timeout=-1,
                                                   kubeconfig=str(tmp_path / "missing")), {})
    assert message == ("unschedulable_timeout is -1; the least allowed is 0; wait_timeout is -1; the least allowed "
                       "is 1; name is empty; it needs a value; kubeconfig file '%s' does not exist"
                       % (tmp_path / "missing"))


def test_bound_errors_word_the_bounds_as_the_preflight_does():
    assert mr.bound_errors("x", 5, {"min": 1, "max": 4}) == ["x is 5; the most allowed is 4"]
    assert mr.bound_errors("x", 0, {"min": 1, "max": 4}) == ["x is 0; the least allowed is 1"]
    assert mr.bound_errors("x", 3, {}) == []


# --- the kubeconfig and the context --------------------------------------------------------------------------


def test_a_kubeconfig_option_naming_no_file_is_named(tmp_path, good):
    missing = str(tmp_path / "nowhere" / "kubeconfig")
    assert mr.connection_problems({"kubeconfig": missing}, good) == ["kubeconfig file '%s' does not exist" % missing]
    assert mr.connection_problems({"kubeconfig": str(tmp_path)}, good) == \
        ["kubeconfig file '%s' is not a file" % tmp_path]
    (tmp_path / "empty").write_text("")
    assert mr.connection_problems({"kubeconfig": str(tmp_path / "empty")}, good) == \
        ["kubeconfig file '%s' is empty, not a kubeconfig" % (tmp_path / "empty")]
    (tmp_path / "broken").write_text("clusters: [\n")
    assert mr.connection_problems({"kubeconfig": str(tmp_path / "broken")}, good)[0].startswith(
        "kubeconfig file '%s' is not YAML: " % (tmp_path / "broken"))


def test_the_environment_s_kubeconfig_is_checked_as_the_client_reads_it(tmp_path):
    missing = str(tmp_path / "missing")
    assert mr.connection_problems({}, {"K8S_AUTH_KUBECONFIG": missing}) == \
        ["kubeconfig file '%s' does not exist" % missing]
    assert mr.connection_problems({}, {"KUBECONFIG": missing}) == ["kubeconfig file '%s' does not exist" % missing]
    other = str(tmp_path / "other")
    assert mr.connection_problems({}, {"KUBECONFIG": os.pathsep.join([missing, other])}) == \
        ["none of the kubeconfig files '%s', '%s' exists" % (missing, other)]
    # Several files, one there: as the client merges them.
    good = kubeconfig(tmp_path / "good")
    assert mr.connection_problems({}, {"KUBECONFIG": os.pathsep.join([missing, good])}) == []
    # The option wins over the environment.
    assert mr.connection_problems({"kubeconfig": good}, {"K8S_AUTH_KUBECONFIG": missing}) == []


def test_a_context_not_in_the_kubeconfig_is_named(tmp_path):
    path = kubeconfig(tmp_path / "config", contexts=("admin", "ops"))
    assert mr.connection_problems({"kubeconfig": path, "context": "ops"}, {}) == []
    assert mr.connection_problems({"kubeconfig": path, "context": "nosuch"}, {}) == \
        ["context 'nosuch' is not in kubeconfig '%s' (its contexts: admin, ops)" % path]
    assert mr.connection_problems({}, {"KUBECONFIG": path, "K8S_AUTH_CONTEXT": "nosuch"}) == \
        ["context 'nosuch' is not in kubeconfig '%s' (its contexts: admin, ops)" % path]
    no_current = kubeconfig(tmp_path / "no-current", current=None)
    assert mr.connection_problems({"kubeconfig": no_current}, {}) == \
        ["kubeconfig '%s' has no current-context: give the context option" % no_current]
    stale = kubeconfig(tmp_path / "stale", current="gone")
    assert mr.connection_problems({"kubeconfig": stale}, {}) == \
        ["the current-context 'gone' of kubeconfig '%s' is not among its contexts (admin)" % stale]


def test_a_kubeconfig_dict_is_checked_and_never_shown():
    config = {"contexts": [{"name": "admin", "context": {}}], "current-context": "admin",
              "users": [{"name": "admin", "user": {"token": "secret"}}]}
    assert mr.connection_problems({"kubeconfig": config}, {}) == []
    assert mr.connection_problems({"kubeconfig": config, "context": "ops"}, {}) == \
        ["context 'ops' is not in the kubeconfig given as a dict (its contexts: admin)"]
    text = yaml.safe_dump(config)
    [problem] = mr.connection_problems({"kubeconfig": text}, {})
    assert "secret" not in problem and "(not shown)" in problem
    assert mr.connection_problems({"kubeconfig": ["a"]}, {}) == \
        ["kubeconfig is the path of a kubeconfig file or a kubeconfig as a dict, not a list"]


def test_nothing_to_check_without_a_kubeconfig_to_load(tmp_path, monkeypatch):
    missing = str(tmp_path / "missing")
    # A host with credentials: the client loads no kubeconfig.
    assert mr.connection_problems({"host": "https://k8s", "api_key": "t", "kubeconfig": missing}, {}) == []
    assert mr.connection_problems({}, {"K8S_AUTH_HOST": "https://k8s", "K8S_AUTH_API_KEY": "t",
                                       "KUBECONFIG": missing}) == []
    assert mr.connection_problems({"host": "https://k8s"}, {"KUBECONFIG": missing}) == \
        ["kubeconfig file '%s' does not exist" % missing]
    # In a pod: in-cluster credentials come first, unless a kubeconfig or context is asked for.
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("t")
    ca.write_text("c")
    monkeypatch.setattr(mr, "IN_CLUSTER_FILES", (str(token), str(ca)))
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBECONFIG": missing}
    assert mr.connection_problems({}, pod) == []
    assert mr.connection_problems({"context": "ops"}, pod) == ["kubeconfig file '%s' does not exist" % missing]


# --- names that must exist -----------------------------------------------------------------------------------


def test_missing_names_tells_missing_from_unreadable():
    fake = FakeCluster(nodes=[node("n1")], namespaces={"ns"})
    wanted = [("node", "n1", "a"), ("node", "n9", "b"), ("namespace", "ns", "c"), ("namespace", "gone", "d")]
    assert mr.missing_names(fake, wanted) == ([("node", "n9", "b"), ("namespace", "gone", "d")], [])
    fake.forbidden = {"node"}
    assert mr.missing_names(fake, wanted) == ([("namespace", "gone", "d")], wanted[:2])
    fake.forbidden = set()

    def broken(name):
        raise ApiException(status=500, reason="Internal Server Error")
    fake.node = broken
    with pytest.raises(ApiException):
        mr.missing_names(fake, wanted)


def test_preflight_names_what_does_not_exist_and_warns_what_it_may_not_read():
    spec = {"argument_specs": {"main": {"options": {
        "v_node": {"type": "str", "exists": "node", "default": ""},
        "v_targets": {"type": "str", "exists": "node", "format": "names", "default": ""},
        "v_namespace": {"type": "str", "exists": "namespace", "default": ""}}}}}
    fake = FakeCluster(nodes=[node("n1")], namespaces={"ns"})
    values = {"v_node": "n1", "v_targets": "n1, n7", "v_namespace": "gone"}
    engine = Preflight(fake, {"spec": spec, "values": values})
    with pytest.raises(KubeVirtError) as info:
        engine.run()
    assert str(info.value) == ("The variables do not fit the cluster: namespace gone (v_namespace) does not exist; "
                               "node n7 (v_targets) does not exist.")
    fake.forbidden = {"namespace"}
    engine = Preflight(fake, {"spec": spec, "values": dict(values, v_targets="n1")})
    engine.run()
    assert engine.warnings == ["not allowed to read namespace gone (v_namespace): not checked"]
    assert engine.result["checked"] == {"node": ["n1", "n1"], "namespace": []}


# --- run_engine: in that order, nothing reaches the API server with bad input -----------------------------------


class Failed(Exception):
    pass


class FakeAnsibleModule:
    def __init__(self, params, no_log_values=()):
        self.params = params
        self.no_log_values = set(no_log_values)
        self.check_mode = False
        self._diff = False
        self.warnings = []

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_json(self, **kwargs):
        raise Failed(kwargs)

    def exit_json(self, **kwargs):
        raise AssertionError("exited: %s" % kwargs)


class FakeK8SModule:
    """AnsibleK8SModule's shape: the AnsibleModule (with its no_log values) as _module."""

    def __init__(self, params, no_log_values=()):
        self._module = FakeAnsibleModule(params, no_log_values)
        self.params = params
        self.check_mode = False
        self._diff = False
        self.warn = self._module.warn
        self.fail_json = self._module.fail_json
        self.exit_json = self._module.exit_json


def test_bad_input_fails_before_any_client_exists(tmp_path, monkeypatch):
    clients = []
    monkeypatch.setattr(mr, "module_api_client", lambda *args, **kwargs: clients.append(args))
    missing = str(tmp_path / "missing")
    module = FakeK8SModule(migration_params(wait_timeout=-5, kubeconfig=missing), no_log_values=[missing])
    with pytest.raises(Failed) as info:
        mr.run_engine(module, Migration, "vmsched.kubevirt/test")
    result = info.value.args[0]
    assert result["msg"] == "wait_timeout is -5; the least allowed is 1; kubeconfig file '%s' does not exist" % missing
    assert clients == []
    # kubernetes.core declares kubeconfig no_log: the message may name the path, the invocation still hides it.
    assert missing not in module._module.no_log_values
    assert result["invocation"]["module_args"]["kubeconfig"] == mr.NO_LOG_PLACEHOLDER


def test_kubeconfig_content_stays_hidden(monkeypatch):
    monkeypatch.setattr(mr, "module_api_client", lambda *args, **kwargs: pytest.fail("a client was made"))
    text = "apiVersion: v1\nusers: [{name: a, user: {token: secret}}]\n"
    module = FakeK8SModule(migration_params(kubeconfig=text), no_log_values=[text])
    with pytest.raises(Failed) as info:
        mr.run_engine(module, Migration, "vmsched.kubevirt/test")
    assert "secret" not in info.value.args[0]["msg"] and "invocation" not in info.value.args[0]
    assert text in module._module.no_log_values
