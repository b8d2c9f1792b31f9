# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/awx_job_templates.yml without a controller (none can run here: AWX needs PostgreSQL, Redis and
Receptor): it creates one job template per playbook with the generated survey, awx.awx.job_template accepts
every parameter it is given (its argument check runs before it connects), and it fails only on reaching the
controller. What a live controller would add is listed in docs/awx.md."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .awx_surveys import JOB_TEMPLATES, ROOT

PLAYBOOK = ROOT / "playbooks" / "awx_job_templates.yml"
BIN = Path(sys.executable).parent


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(*args, **env):
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(ROOT / ".build" / "collections")
    proc = subprocess.run([str(BIN / "ansible-playbook"), str(PLAYBOOK), *args], cwd=ROOT, capture_output=True,
                          text=True, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1",
                                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **env))
    return proc


@pytest.fixture(scope="module")
def awx_collection():
    proc = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", "awx.awx", "--format", "json"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or "awx.awx" not in proc.stdout:
        pytest.fail("awx.awx is not installed: it comes with PyPI's `ansible` 12.x (requirements-dev.txt)",
                    pytrace=False)


def test_one_job_template_per_playbook_with_its_survey():
    play = yaml.safe_load(PLAYBOOK.read_text())[0]
    assert play["vars"]["awx_job_templates__playbooks"] == [t[0] for t in JOB_TEMPLATES]
    task = play["tasks"][1]["awx.awx.job_template"]
    assert task["survey_enabled"] is True and task["ask_job_type_on_launch"] is True
    for playbook, title, _source in JOB_TEMPLATES:
        survey = json.loads((ROOT / "playbooks" / "surveys" / f"{playbook}.json").read_text())
        assert survey["name"] == title
        assert (ROOT / "playbooks" / f"{playbook}.yml").exists()


def test_parameters_pass_awx_awx_and_only_the_controller_is_missing(awx_collection):
    proc = run("-e", "awx_job_templates_project=vmsched", "-e", "awx_job_templates_inventory=Demo Inventory",
               "-e", "awx_job_templates_credential=k8s", CONTROLLER_HOST=f"https://127.0.0.1:{free_port()}",
               CONTROLLER_USERNAME="admin", CONTROLLER_PASSWORD="x", CONTROLLER_VERIFY_SSL="false")
    assert proc.returncode != 0
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    tasks = out["plays"][0]["tasks"]
    assert [t["task"]["name"] for t in tasks] == ["Check the variables", "Create the job templates with their surveys"]
    result = tasks[1]["hosts"]["localhost"]
    # The loop stops at nothing: every item reached the module, which refused none of its parameters.
    items = result["results"]
    assert [i["awx_job_templates__playbook"] for i in items] == [t[0] for t in JOB_TEMPLATES]
    for item in items:
        assert item["failed"] and "Unsupported parameters" not in item["msg"] and "argument" not in item["msg"]
        assert "Connection refused" in item["msg"], item["msg"]


def test_missing_variables_fail_first(awx_collection):
    proc = run()
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    tasks = out["plays"][0]["tasks"]
    assert proc.returncode != 0 and len(tasks) == 1
    assert "awx_job_templates_project, awx_job_templates_inventory" in tasks[0]["hosts"]["localhost"]["msg"]


def test_the_rebalance_workflow_plans_waits_for_approval_then_applies(awx_collection):
    play = yaml.safe_load(PLAYBOOK.read_text())[0]
    task = play["tasks"][2]
    assert task["name"] == "Create the rebalance workflow (plan, approval, apply)"
    nodes = {n["identifier"]: n for n in task["vars"]["awx_job_templates__nodes"]}
    assert nodes["plan"]["job_type"] == "check" and nodes["apply"]["job_type"] == "run"
    assert nodes["plan"]["related"]["success_nodes"] == [{"identifier": "approve"}]
    assert nodes["approve"]["unified_job_template"]["type"] == "workflow_approval"
    assert nodes["approve"]["related"]["success_nodes"] == [{"identifier": "apply"}]
    survey = json.loads((ROOT / "playbooks" / "surveys" / "rebalance.json").read_text())
    # The rebalance job publishes the plan only in check mode and applies one it is given.
    rebalance = yaml.safe_load((ROOT / "playbooks" / "rebalance.yml").read_text())[0]
    publish = next(t for t in rebalance["tasks"] if "ansible.builtin.set_stats" in t)
    assert "rebalance_plan" in publish["ansible.builtin.set_stats"]["data"] and "ansible_check_mode" in publish["when"]

    # awx.awx takes every parameter (rendered: both nodes name the rebalance job template); only the controller
    # is missing.
    proc = run("--start-at-task", task["name"], "-e", "awx_job_templates_project=vmsched",
               "-e", "awx_job_templates_inventory=Demo Inventory", "-e", "awx_job_templates_credential=k8s",
               CONTROLLER_HOST=f"https://127.0.0.1:{free_port()}", CONTROLLER_USERNAME="admin",
               CONTROLLER_PASSWORD="x", CONTROLLER_VERIFY_SSL="false")
    assert proc.returncode != 0
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    [ran] = out["plays"][0]["tasks"]
    result = ran["hosts"]["localhost"]
    assert ran["task"]["name"] == task["name"] and result["failed"], result
    assert "Unsupported parameters" not in result["msg"] and "argument" not in result["msg"], result["msg"]
    assert "Connection refused" in result["msg"], result["msg"]
    assert result["invocation"]["module_args"]["name"] == survey["name"] + " with approval"
    sent = dict((n["identifier"], n) for n in result["invocation"]["module_args"]["workflow_nodes"])
    assert sent["plan"]["unified_job_template"]["name"] == sent["apply"]["unified_job_template"]["name"] \
        == survey["name"]
