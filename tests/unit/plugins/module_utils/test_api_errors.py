# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/api_errors.py: how errors read."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from urllib3 import HTTPSConnectionPool
from urllib3.exceptions import MaxRetryError, NewConnectionError

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import TRANSPORT_ERRORS, error_message


def test_an_api_server_that_does_not_answer_is_named_with_the_reason():
    pool = HTTPSConnectionPool("127.0.0.1", 9)
    refused = NewConnectionError(pool, "Failed to establish a new connection: [Errno 111] Connection refused")
    exc = MaxRetryError(pool, "/version", refused)
    assert isinstance(exc, TRANSPORT_ERRORS)
    message = error_message(exc)
    assert message.startswith("cannot reach the Kubernetes API server at https://127.0.0.1:9: ")
    assert message.endswith("Connection refused")
    assert "Max retries" not in message
