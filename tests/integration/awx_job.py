# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running a playbook as an AWX job does: ansible-runner over a private data directory laid out as AWX lays it
out, read back through ansible-runner's job events.

What AWX 24.6 does for a job of a job template with a survey and an "OpenShift or Kubernetes API Bearer
Token" credential (awx/main/tasks/jobs.py: RunJob; awx/main/models/credential/injectors.py), and so this does:
- the launch's extra vars are the survey's defaults and answers (tests/unit/awx_surveys.py), plus AWX's own
  ``awx_*`` / ``tower_*`` variables, written to ``env/extravars`` with every string tagged ``!unsafe``;
- ``env/cmdline`` holds ``--check`` for a job of type "check", and ``-u root`` (no machine credential);
- ``inventory/hosts`` is an executable script printing the inventory as JSON (here AWX's Demo Inventory:
  localhost, connection local, the playbook's Python);
- ``project/`` is the project checkout (here a link to this checkout) and the playbook path is relative to it;
- the credential becomes K8S_AUTH_HOST, K8S_AUTH_API_KEY and K8S_AUTH_VERIFY_SSL, and with verify_ssl and a CA
  K8S_AUTH_SSL_CA_CERT naming a file AWX writes under ``env/``; the environment goes to ansible-runner as
  ``envvars`` (AWX omits env files), and no KUBECONFIG exists in a job;
- ``env/settings`` holds ansible-runner's settings.

Not like AWX: the job runs in this process's environment, not in an execution environment container (no
container engine here), so paths stay host paths instead of /runner/...; the collections come from
ANSIBLE_COLLECTIONS_PATH (this checkout and the kubernetes.core under test) instead of the image.
"""
from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
from ansible_runner.utils import args2cmdline

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _load_awx_surveys():
    """tests/unit/awx_surveys.py: AWX's survey rules, shared with the unit tests."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vmsched_awx_surveys", ROOT / "tests" / "unit" / "awx_surveys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


awx_surveys = _load_awx_surveys()


OUTCOMES = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
            "runner_on_unreachable": "unreachable"}


@dataclass
class Credential:
    """An "OpenShift or Kubernetes API Bearer Token" credential's inputs."""
    host: str
    bearer_token: str
    ssl_ca_cert: str = ""
    verify_ssl: bool = True

    def inject(self, env, private_data_dir):
        """What AWX's injector for this credential type puts into the job's environment."""
        env["K8S_AUTH_HOST"] = self.host
        env["K8S_AUTH_API_KEY"] = self.bearer_token
        if self.verify_ssl and self.ssl_ca_cert:
            env["K8S_AUTH_VERIFY_SSL"] = "True"
            handle, path = tempfile.mkstemp(dir=private_data_dir / "env")
            with os.fdopen(handle, "w") as out:
                os.chmod(path, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP)
                out.write(self.ssl_ca_cert)
            env["K8S_AUTH_SSL_CA_CERT"] = path
        else:
            env["K8S_AUTH_VERIFY_SSL"] = "False"


@dataclass
class Job:
    """A finished job: ansible-runner's status, rc, stats and events."""
    status: str
    rc: int
    events: list = field(repr=False)
    stats: dict
    refused: list = field(default_factory=list)

    @property
    def host_results(self):
        """The events of host results, in order."""
        return [e for e in self.events if e.get("event") in OUTCOMES]

    @property
    def tasks(self):
        """[(task name, outcome, changed)] per host result, in order; outcome is ok, failed, skipped or unreachable."""
        return [(e["event_data"]["task"], OUTCOMES[e["event"]], bool(e["event_data"].get("res", {}).get("changed")))
                for e in self.host_results]

    @property
    def started_tasks(self):
        return [e["event_data"]["task"] for e in self.events if e.get("event") == "playbook_on_task_start"]

    def result(self, task):
        """The last host result of the task named `task`."""
        found = [e["event_data"]["res"] for e in self.host_results if e["event_data"]["task"] == task]
        assert found, f"no result for task {task!r}; tasks: {self.tasks}"
        return found[-1]

    @property
    def failures(self):
        """[(task, message)] of the failed host results, for assertion messages."""
        return [(e["event_data"]["task"], e["event_data"]["res"].get("msg")) for e in self.events
                if e.get("event") == "runner_on_failed"]

    def outcome(self, task):
        return [(outcome, changed) for name, outcome, changed in self.tasks if name == task]


def demo_inventory_script():
    """AWX's Demo Inventory as the script AWX writes (it prints the inventory's JSON)."""
    inventory = {"all": {"hosts": ["localhost"]},
                 "_meta": {"hostvars": {"localhost": {"ansible_connection": "local",
                                                      "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                                      "remote_tower_enabled": "true", "remote_tower_id": 1}}}}
    return "#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % json.dumps(inventory)


def run_job(playbook, answers, credential, job_type="run", check_survey=True, job_id=4242, tmp_path=None):
    """Launch playbooks/<playbook>.yml as a job of a job template with the generated survey and the credential.

    `answers` are what the operator typed, typed as AWX's survey sends them (str, int). With `check_survey`,
    a launch AWX would refuse (an answer failing its question) is refused here too: Job.status "refused",
    nothing runs. Without, the answers reach the playbook unchecked, as extra vars sent through the API to a
    template that prompts for variables do."""
    survey = json.loads((ROOT / "playbooks" / "surveys" / f"{playbook}.json").read_text())
    extra_vars, refused = awx_surveys.launch_extra_vars(survey, answers)
    if check_survey and refused:
        return Job(status="refused", rc=-1, events=[], stats={}, refused=refused)
    for prefix in ("awx", "tower"):
        extra_vars.update({f"{prefix}_job_id": job_id, f"{prefix}_job_launch_type": "manual",
                           f"{prefix}_user_name": "admin", f"{prefix}_inventory_name": "Demo Inventory"})

    private_data_dir = Path(tempfile.mkdtemp(prefix=f"awx_{job_id}_", dir=tmp_path))
    os.chmod(private_data_dir, stat.S_IRWXU)
    for sub in ("inventory", "env"):
        (private_data_dir / sub).mkdir()
    (private_data_dir / "project").symlink_to(ROOT)
    hosts = private_data_dir / "inventory" / "hosts"
    hosts.write_text(demo_inventory_script())
    hosts.chmod(0o700)
    (private_data_dir / "env" / "extravars").write_text(awx_surveys.extravars_yaml(extra_vars))
    args = (["--check"] if job_type == "check" else []) + ["-u", "root"]
    (private_data_dir / "env" / "cmdline").write_text(args2cmdline(*args))
    (private_data_dir / "env" / "settings").write_text(json.dumps(
        {"job_timeout": 0, "suppress_ansible_output": True, "suppress_output_file": False}))

    env = {"JOB_ID": str(job_id), "INVENTORY_ID": "1", "ANSIBLE_RETRY_FILES_ENABLED": "False",
           "AWX_PRIVATE_DATA_DIR": str(private_data_dir), "ANSIBLE_FORCE_COLOR": "False",
           "ANSIBLE_HOST_KEY_CHECKING": "False",
           # The ansible-playbook of the Python running the tests (the job's "execution environment").
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    credential.inject(env, private_data_dir)
    saved = {k: os.environ.pop(k) for k in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "ANSIBLE_CONFIG") if k in os.environ}
    try:
        runner = ansible_runner.run(private_data_dir=str(private_data_dir), playbook=f"playbooks/{playbook}.yml",
                                    inventory=str(hosts), envvars=env, ident=str(job_id), quiet=True,
                                    suppress_env_files=True)
        events = list(runner.events)
    finally:
        os.environ.update(saved)
    return Job(status=runner.status, rc=runner.rc, events=events, stats=runner.stats or {})
