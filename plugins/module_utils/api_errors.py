# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes API's errors as this collection's modules treat them.

Private to this collection. What an error says to the user (the API server's own
message), which HTTP status it carries, and the one rule for reads the user may
not make: a read answered with 401 or 403 skips the check that needed it, with a
warning, because KubeVirt and the scheduler still enforce what the check would
have told early (a user bound only to ``kubevirt.io:migrate`` can then still
migrate). Every other error propagates.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # reported by AnsibleK8SModule's requirement check
    class ApiException(Exception):
        status = None
        reason = None
        body = None

try:
    from urllib3.exceptions import HTTPError as _TransportError
    TRANSPORT_ERRORS = (_TransportError,)
except ImportError:  # the kubernetes client needs urllib3: AnsibleK8SModule's requirement check reports it
    TRANSPORT_ERRORS = ()

FORBIDDEN = (401, 403)
# What unless_forbidden is given as its default where None means "there is none": the user may not read it.
UNREADABLE = object()


class KubeVirtError(Exception):
    """A failure with a message meant for the user."""


def error_message(exc):
    """What a module reports for an error: the API server's own message for API errors."""
    if isinstance(exc, ApiException):
        return "Kubernetes API error: %s" % api_error_message(exc)
    if isinstance(exc, TRANSPORT_ERRORS):
        # urllib3 after its retries: no API server answers there (wrong address, down, a firewall).
        pool = getattr(exc, "pool", None)
        where = " at %s://%s:%s" % (pool.scheme, pool.host, pool.port) if pool is not None else ""
        reason = getattr(exc, "reason", None) or exc
        return "cannot reach the Kubernetes API server%s: %s" % (where, reason)
    return str(exc)


def api_error_message(exc):
    """The API server's message from an ApiException body (Status JSON), else its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return data["message"]
        except (TypeError, ValueError):
            return str(body)[:500]
    return "%s %s" % (getattr(exc, "status", ""), getattr(exc, "reason", "") or "")


def is_status(exc, *codes):
    """Whether exc is an API error with one of these HTTP status codes."""
    return isinstance(exc, ApiException) and getattr(exc, "status", None) in codes


def is_forbidden(exc):
    return is_status(exc, *FORBIDDEN)


def unless_forbidden(read, on_forbidden=None, default=None):
    """read(), or `default` when the API server answers 401/403 (the user may not read it).

    on_forbidden(the API server's message) says what is skipped because of it, usually as a
    warning. Any other error propagates.
    """
    try:
        return read()
    except ApiException as exc:
        if not is_forbidden(exc):
            raise
        if on_forbidden is not None:
            on_forbidden(api_error_message(exc))
        return default
