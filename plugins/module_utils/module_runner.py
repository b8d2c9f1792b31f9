# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a module of this collection that talks to the Kubernetes API runs: kubernetes.core's client, one engine,
one error path.

Private to this collection. A module file holds its documentation, its argument spec and a
``main`` that calls run_engine() with its engine class (module_utils/migration.py,
evacuation.py, vm_placement.py, scheduling_report.py). An engine is built as
``Engine(reader, params, check_mode=..., diff=...)`` over a ClusterReader, does everything
in ``run()``, keeps its return values in ``result`` and its warnings in ``warnings``, and
raises KubeVirtError with a message for the user when it fails (``result`` then holds what
it got to). ``Engine.check_params(params)``, when defined, runs before any client exists,
so invalid input never reaches the API server.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    TRANSPORT_ERRORS,
    ApiException,
    KubeVirtError,
    error_message,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.cluster_reader import PAGE_SIZE, ClusterReader
from ansible_collections.vmsched.kubevirt.plugins.module_utils.node_fit import QuantityError

# Failures a module reports as a message; anything else is a bug and keeps its traceback.
USER_ERRORS = (KubeVirtError, CoreException, ApiException, QuantityError) + TRANSPORT_ERRORS


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
        check_params = getattr(engine_class, "check_params", None)
        if check_params is not None:
            check_params(module.params)
        reader = ClusterReader(module_api_client(module, user_agent, connections), page_size=page_size)
        engine = engine_class(reader, module.params, check_mode=module.check_mode, diff=module._diff)
        engine.run()
    except USER_ERRORS as exc:  # anything else is a bug
        module.fail_json(msg=error_message(exc), **_finish(module, engine, started, timed))
    module.exit_json(**_finish(module, engine, started, timed))


def _finish(module, engine, started, timed):
    for warning in (engine.warnings if engine else []):
        module.warn(warning)
    result = dict(engine.result) if engine else {}
    if timed:
        result["elapsed_seconds"] = round(time.monotonic() - started, 3)
    return result
