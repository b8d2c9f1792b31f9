# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/venv/vmsched_module_forkserver.py: a module run served by a forked child is the run it would have been
(streams, working directory, environment, arguments, status, a signal), it is stopped with its run, and runs go
only to a server of their own values of the variables the server's imports read."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import venv
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / "venv" / "vmsched_module_forkserver.py"
# A stand-in for a module run: what it saw, on stdout and stderr, and a status of the test's choosing.
PROBE = """\
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "umask": os.umask(0o22),
                  "color": os.environ.get("PROBE_COLOR"), "stdin": sys.stdin.readline(), "pid": os.getpid()}))
print("to stderr", file=sys.stderr)
action = sys.argv[1]
if action == "signal":
    os.kill(os.getpid(), 15)
if action == "sleep":
    open(sys.argv[2], "w").write(str(os.getpid()))
    import time
    time.sleep(60)
sys.exit(int(action))
"""


def load_hook():
    spec = importlib.util.spec_from_file_location("forkserver_under_test", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def python(tmp_path_factory):
    """A virtualenv of this Python with the hook installed, and nothing else."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=False)
    subprocess.run([str(home / "bin" / "python"), str(HOOK.parent / "install.py"), str(HOOK)], check=True)
    return home / "bin" / "python"


@pytest.fixture
def servers(tmp_path):
    """The sockets' directory; every server serving there is stopped afterwards."""
    directory = tmp_path / "fs"
    yield directory
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.startswith(str(directory).encode()) for arg in cmdline):
            os.kill(int(proc.name), signal.SIGKILL)


def env_for(servers, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMSCHED_")}
    env.update(VMSCHED_MODULE_FORKSERVER=str(servers), **extra)
    return env


def run(python, script, action, env, cwd, stdin="a line\n"):
    proc = subprocess.Popen([str(python), str(script), *action], cwd=cwd, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(stdin, timeout=60)
    return proc, out, err


def wait_for_socket(servers, count=1):
    deadline = time.monotonic() + 30
    while len(list(servers.glob("*.sock"))) < count:
        assert time.monotonic() < deadline, f"no server started: {list(servers.iterdir())}"
        time.sleep(0.05)


@pytest.fixture
def script(tmp_path):
    directory = tmp_path / "ansible-tmp-1"
    directory.mkdir()
    path = directory / "AnsiballZ_probe.py"
    path.write_text(PROBE)
    return path


def test_a_served_run_sees_and_gives_what_its_own_python_would(python, script, servers, tmp_path):
    env = env_for(servers, PROBE_COLOR="blue")
    first, out1, err1 = run(python, script, ["3"], env, tmp_path)  # no server yet: runs on its own, starts one
    wait_for_socket(servers)
    second, out2, err2 = run(python, script, ["3"], env, tmp_path)
    seen1, seen2 = json.loads(out1), json.loads(out2)
    del seen1["pid"], seen2["pid"]  # which process: the next test
    assert first.returncode == second.returncode == 3
    assert (seen1, err1) == (seen2, err2)
    assert seen2 == {"argv": [str(script), "3"], "cwd": str(tmp_path), "path0": str(script.parent), "umask": 0o22,
                     "color": "blue", "stdin": "a line\n"}
    assert err2 == "to stderr\n"


def test_the_second_run_is_a_child_of_the_server_not_of_its_own_python(python, script, servers, tmp_path):
    env = env_for(servers)
    first, out1, _err = run(python, script, ["0"], env, tmp_path)
    wait_for_socket(servers)
    second, out2, _err = run(python, script, ["0"], env, tmp_path)
    assert json.loads(out1)["pid"] == first.pid  # on its own
    assert json.loads(out2)["pid"] != second.pid  # forked from the server
    assert first.returncode == second.returncode == 0


def test_a_module_killed_by_a_signal_kills_its_run_alike(python, script, servers, tmp_path):
    env = env_for(servers)
    first, _out, _err = run(python, script, ["signal"], env, tmp_path)
    wait_for_socket(servers)
    second, out, _err = run(python, script, ["signal"], env, tmp_path)
    assert json.loads(out)["pid"] != second.pid
    assert first.returncode == second.returncode == -signal.SIGTERM


def test_a_run_that_dies_takes_its_module_with_it(python, script, servers, tmp_path):
    env = env_for(servers)
    run(python, script, ["0"], env, tmp_path)
    wait_for_socket(servers)
    pid_file = tmp_path / "module.pid"
    proc = subprocess.Popen([str(python), str(script), "sleep", str(pid_file)], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the module never started"
        time.sleep(0.05)
    module_pid = int(pid_file.read_text())
    assert module_pid != proc.pid  # served
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{module_pid}").exists() and "Z" not in status_of(module_pid):
        assert time.monotonic() < deadline, "the module outlived its run"
        time.sleep(0.05)


def status_of(pid):
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("State:"))
    except (OSError, StopIteration):
        return "Z"


def test_other_values_of_what_imports_read_get_a_server_of_their_own(python, script, servers, tmp_path):
    for kubeconfig in ("/one/kubeconfig", "/two/kubeconfig"):
        run(python, script, ["0"], env_for(servers, KUBECONFIG=kubeconfig), tmp_path)
    wait_for_socket(servers, count=2)
    _proc, out, _err = run(python, script, ["0"], env_for(servers, KUBECONFIG="/two/kubeconfig"), tmp_path)
    assert json.loads(out)["pid"] != _proc.pid


def test_a_server_refuses_a_run_whose_values_differ(python, script, servers, tmp_path):
    hook = load_hook()
    env = env_for(servers, KUBECONFIG="/one/kubeconfig")
    run(python, script, ["0"], env, tmp_path)
    wait_for_socket(servers)
    (path,) = servers.glob("*.sock")
    request = {"argv": [str(script), "0"], "path0": str(script.parent), "cwd": str(tmp_path), "umask": 0o22,
               "environ": dict(env, KUBECONFIG="/two/kubeconfig"), "executable": str(python)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        hook._send(sock, json.dumps(request).encode(), fds=(0, 1, 2))
        assert sock.recv(1) == hook.REFUSED


def test_without_the_variable_no_server_starts(python, script, servers, tmp_path):
    env = env_for(servers)
    del env["VMSCHED_MODULE_FORKSERVER"]
    for _run in range(2):
        proc, out, _err = run(python, script, ["0"], env, tmp_path)
        assert json.loads(out)["pid"] == proc.pid
    assert not servers.exists()


def test_the_server_records_what_imports_read_from_the_environment(monkeypatch):
    hook = load_hook()
    monkeypatch.setenv("PROBE_READ", "x")
    read, stop = hook._recording_environ()
    try:
        os.environ.get("PROBE_READ")
        assert "PROBE_ABSENT" not in os.environ
    finally:
        stop()
    os.environ.get("PROBE_AFTER")
    assert read == {"PROBE_READ", "PROBE_ABSENT"}
