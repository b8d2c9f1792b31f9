# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a module of this collection that talks to the Kubernetes API runs: its input checked first, then
kubernetes.core's client, one engine, one error path.

Private to this collection. A module file holds its documentation, its argument spec and a
``main`` that calls run_engine() with its engine class (module_utils/migration.py,
evacuation.py, rebalance.py, vm_placement.py, scheduling_report.py, playbook_vars.py). An engine is
built as ``Engine(cluster, params, check_mode=..., diff=...)`` over the cluster object
(module_utils/cluster.py: every API request it makes goes through that), does everything in
``run()``, keeps its return values in ``result`` and its warnings in ``warnings``, and raises
KubeVirtError with a message for the user when it fails (``result`` then holds what it got to).

The input is checked in one place, in this order, and a module writes nothing before all of it is known good:

1. ansible-core's argument spec (types, choices, required options), before the module's code runs;
2. check_input(), before any client exists, so invalid input never reaches the API server: the bounds of
   numeric options (``Engine.BOUNDS``, ``{option: {"min": .., "max": ..}}``, the keys playbook specs use, worded
   as the preflight module words them), ``Engine.check_params(params)`` when defined (raises KubeVirtError),
   and the kubeconfig file(s) and context kubernetes.core's client would load (connection_problems);
3. names that must exist in the cluster (nodes, namespaces), looked up with missing_names() first thing in
   ``Engine.run()``, before any write.

Every problem found in step 2 is reported at once, each naming its option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

try:
    import yaml
except ImportError:  # reported by AnsibleK8SModule's requirement check (PyYAML)
    yaml = None

from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    TRANSPORT_ERRORS,
    ApiException,
    KubeVirtError,
    error_message,
    is_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster import PAGE_SIZE, Cluster
from ansible_collections.vmsched.kubevirt.plugins.module_utils.node_fit import QuantityError

# Failures a module reports as a message; anything else is a bug and keeps its traceback.
USER_ERRORS = (KubeVirtError, CoreException, ApiException, QuantityError) + TRANSPORT_ERRORS

# Where the kubernetes client finds a pod's in-cluster credentials (kubernetes.config.incluster_config).
IN_CLUSTER_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
IN_CLUSTER_FILES = ("/var/run/secrets/kubernetes.io/serviceaccount/token",
                    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
NO_LOG_PLACEHOLDER = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
# The kinds of names missing_names() looks up, and the cluster's call for each.
NAME_KINDS = {"node": "node", "namespace": "namespace"}


# --- 2. the input, before any client exists ------------------------------------------------------------------


def bound_errors(name, value, bounds):
    """What is wrong with a numeric `value` of option `name` against its bounds ({"min": .., "max": ..}), as
    sentences naming it; the preflight module words a playbook variable's bounds the same way."""
    errors = []
    low, high = bounds.get("min"), bounds.get("max")
    if low is not None and value < low:
        errors.append("%s is %s; the least allowed is %s" % (name, _number(value), _number(low)))
    if high is not None and value > high:
        errors.append("%s is %s; the most allowed is %s" % (name, _number(value), _number(high)))
    return errors


def _number(value):
    """An int as an int, a float as it was given (a threshold of -0.5 is not "-0")."""
    return "%d" % value if isinstance(value, int) or float(value).is_integer() else "%r" % float(value)


def _auth(params, environ, option, client_name=None):
    """An authentication option as kubernetes.core's client takes it: the module's option, else K8S_AUTH_<OPTION>
    (or K8S_AUTH_<client's name>) from the environment."""
    value = params.get(option)
    if value is not None:
        return value
    return environ.get("K8S_AUTH_%s" % option.upper()) or environ.get("K8S_AUTH_%s" % (client_name or option).upper())


def _in_cluster(environ):
    """Whether the kubernetes client would find in-cluster credentials (it tries them before any kubeconfig)."""
    return all(environ.get(name) for name in IN_CLUSTER_ENV) and all(os.path.isfile(f) for f in IN_CLUSTER_FILES)


def _is_path(value):
    """A kubeconfig string that names files, not a kubeconfig's content pasted as text (never shown: it may hold
    credentials)."""
    return "\n" not in value and not value.lstrip().startswith("{")


def _read_kubeconfig(path):
    """(the parsed kubeconfig, None) or (None, what is wrong with the file)."""
    if not os.path.exists(path):
        return None, "kubeconfig file '%s' does not exist" % path
    if not os.path.isfile(path):
        return None, "kubeconfig file '%s' is not a file" % path
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        return None, "kubeconfig file '%s' cannot be read: %s" % (path, getattr(exc, "strerror", None) or exc)
    if yaml is None:
        return {}, None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, "kubeconfig file '%s' is not YAML: %s" % (path, str(exc).splitlines()[0])
    if not isinstance(config, dict):
        what = "empty" if config is None else "a %s" % type(config).__name__
        return None, "kubeconfig file '%s' is %s, not a kubeconfig" % (path, what)
    return config, None


def _context_problems(contexts, current, context, where):
    """The context the client would use, against the contexts the kubeconfig(s) define."""
    if context:
        if context not in contexts:
            known = "its contexts: %s" % ", ".join(contexts) if contexts else "it defines none"
            return ["context '%s' is not in %s (%s)" % (context, where, known)]
        return []
    if not current:
        return ["%s has no current-context: give the context option" % where]
    if current not in contexts:
        return ["the current-context '%s' of %s is not among its contexts (%s)"
                % (current, where, ", ".join(contexts) or "none")]
    return []


def _names(items):
    return [item.get("name") for item in items or [] if isinstance(item, dict) and item.get("name")]


def connection_problems(params, environ=None):
    """What is wrong with the kubeconfig and context kubernetes.core's client would load, as sentences naming the
    file and the context; [] when there is nothing to check (a host with credentials, in-cluster credentials) or
    nothing wrong. The client's order: options, then K8S_AUTH_* variables; without kubeconfig and context, the
    pod's in-cluster credentials, then KUBECONFIG (paths joined by os.pathsep) or ~/.kube/config."""
    environ = os.environ if environ is None else environ
    host = _auth(params, environ, "host")
    if host and (_auth(params, environ, "api_key")
                 or (_auth(params, environ, "username") and _auth(params, environ, "password"))
                 or (_auth(params, environ, "client_cert", "cert_file")
                     and _auth(params, environ, "client_key", "key_file"))):
        return []  # the client loads no kubeconfig then
    kubeconfig = _auth(params, environ, "kubeconfig")
    context = _auth(params, environ, "context")
    if isinstance(kubeconfig, dict):
        return _context_problems(_names(kubeconfig.get("contexts")), kubeconfig.get("current-context"), context,
                                 "the kubeconfig given as a dict")
    if kubeconfig is not None and not isinstance(kubeconfig, str):
        return ["kubeconfig is the path of a kubeconfig file or a kubeconfig as a dict, not a %s"
                % type(kubeconfig).__name__]
    if kubeconfig and not _is_path(kubeconfig):
        return ["kubeconfig is the path of a kubeconfig file or a kubeconfig as a dict; the text given (not shown) "
                "is neither: parse it into a dict (from_yaml) or write it to a file"]
    if not kubeconfig and not context and _in_cluster(environ):
        return []
    source = kubeconfig or environ.get("KUBECONFIG", "~/.kube/config")
    paths = [os.path.expanduser(path) for path in source.split(os.pathsep) if path]
    if not paths:
        return ["no kubeconfig file: KUBECONFIG is empty, and no kubeconfig option or in-cluster credentials"]
    existing = [path for path in paths if os.path.exists(path)]
    if not existing:
        if len(paths) == 1:
            return [_read_kubeconfig(paths[0])[1]]
        return ["none of the kubeconfig files %s exists" % ", ".join("'%s'" % path for path in paths)]
    # As the client merges several files: the first definition of a name wins, the last current-context.
    contexts, current = [], None
    for path in existing:
        config, problem = _read_kubeconfig(path)
        if problem:
            return [problem]
        contexts.extend(name for name in _names(config.get("contexts")) if name not in contexts)
        current = config.get("current-context", current)
    if yaml is None:
        return []
    where = "kubeconfig '%s'" % existing[0] if len(existing) == 1 else \
        "kubeconfig files %s" % ", ".join("'%s'" % path for path in existing)
    return _context_problems(contexts, current, context, where)


def check_input(params, engine_class, environ=None):
    """Every problem with a module's input that the cluster is not needed for, raised as one KubeVirtError: the
    bounds of numeric options (engine_class.BOUNDS), engine_class.check_params(params), the kubeconfig and
    context (connection_problems). ansible-core's argument spec validation has run before."""
    problems = []
    for name, bounds in sorted((getattr(engine_class, "BOUNDS", None) or {}).items()):
        value = params.get(name)
        if value is not None:
            problems.extend(bound_errors(name, value, bounds))
    check_params = getattr(engine_class, "check_params", None)
    if check_params is not None:
        try:
            check_params(params)
        except KubeVirtError as exc:
            problems.append(str(exc))
    problems.extend(connection_problems(params, environ))
    if problems:
        raise KubeVirtError("; ".join(problems))


# --- 3. names the cluster must have, before any write ----------------------------------------------------------


def missing_names(cluster, wanted):
    """Of `wanted` ([(kind, name, option), ...], kind one of NAME_KINDS), (those the cluster does not have, those
    the user may not read (401/403): not checked), each as given. Other API errors propagate."""
    missing, unreadable = [], []
    for item in wanted:
        kind, name = item[0], item[1]
        try:
            found = getattr(cluster, NAME_KINDS[kind])(name)
        except ApiException as exc:
            if not is_forbidden(exc):
                raise
            unreadable.append(item)
            continue
        if found is None:
            missing.append(item)
    return missing, unreadable


# --- running ---------------------------------------------------------------------------------------------------


def module_api_client(module, user_agent, connections=None):
    """kubernetes.core's DynamicClient for a module, with the module's own user agent so that the
    API server's audit log tells its requests apart; `connections` keeps that many connections
    open (for engines that send requests from several threads)."""
    dynamic_client = get_api_client(module=module).client
    api_client = dynamic_client.client
    api_client.user_agent = user_agent
    pool_manager = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
    if connections and pool_manager is not None:  # instead of urllib3 discarding the extra connections
        pool_manager.connection_pool_kw["maxsize"] = max(connections, 4)
        pool_manager.clear()
    return dynamic_client


def run_engine(module, engine_class, user_agent, timed=True, connections=None, page_size=PAGE_SIZE):
    """Build the engine over kubernetes.core's client, run it, and exit the module with its result and warnings;
    with `timed`, the result carries elapsed_seconds (monotonic clock), on failure too."""
    started = time.monotonic()
    engine = None
    try:
        check_input(module.params, engine_class)
        cluster = Cluster(module_api_client(module, user_agent, connections), page_size=page_size)
        engine = engine_class(cluster, module.params, check_mode=module.check_mode, diff=module._diff)
        engine.run()
    except USER_ERRORS as exc:  # anything else is a bug
        message = error_message(exc)
        result = _finish(module, engine, started, timed)
        result.update(_show_kubeconfig_path(module, message))
        module.fail_json(msg=message, **result)
    module.exit_json(**_finish(module, engine, started, timed))


def _show_kubeconfig_path(module, message):
    """kubernetes.core declares the kubeconfig option no_log (it may be a dict holding credentials), so Ansible
    would print a message naming the kubeconfig file with the path as ********. A path is no secret: let the
    message name it; the invocation's module_args still hide the option. The extra fail_json arguments."""
    path = module.params.get("kubeconfig")
    ansible_module = getattr(module, "_module", module)
    no_log_values = getattr(ansible_module, "no_log_values", None)
    if not isinstance(path, str) or not path or not _is_path(path) or path not in message or not no_log_values \
            or path not in no_log_values:
        return {}
    no_log_values.discard(path)
    return {"invocation": {"module_args": dict(module.params, kubeconfig=NO_LOG_PLACEHOLDER)}}


def _finish(module, engine, started, timed):
    for warning in (engine.warnings if engine else []):
        module.warn(warning)
    result = dict(engine.result) if engine else {}
    if timed:
        result["elapsed_seconds"] = round(time.monotonic() - started, 3)
    return result
