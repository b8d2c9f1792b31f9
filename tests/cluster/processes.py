# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Background processes of the local control plane (virt-api, virt-controller, the node agent).

Each runs in its own session with its output in <state>/logs/<name>.log and its pid in
<state>/pids/<name>.pid, so `down` finds it from any later process.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The Go runtime's garbage collector in the control plane's programs (kube-apiserver, etcd, the controllers through
# kwokctl, KubeVirt's here): it collects when the heap has grown 5-fold instead of 2-fold, up to 1 GiB a process. They
# run beside the tests on 2 cores, where CPU is short and memory is not. Measured on one control plane over two tests
# (a scheduler role converge, an evacuation of 20 VMIs): its programs took 24 CPU-s instead of 31 and 2.2 GB instead
# of 1.5, its start 16 CPU-s instead of 20.
CONTROL_PLANE_GO_ENV = {"GOGC": "400", "GOMEMLIMIT": "1GiB"}
# The kubelet's first back-off before restarting a container that exited (backOffPeriod, pkg/kubelet/kubelet.go).
RESTART_SECONDS = 10


class Background:
    def __init__(self, state: Path, name: str):
        self.name = name
        self.pidfile = state / "pids" / f"{name}.pid"
        self.logfile = state / "logs" / f"{name}.log"

    def pid(self):
        try:
            pid = int(self.pidfile.read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None

    def start(self, argv, env=None, cwd=None, restart=False):
        """Start argv unless already running; returns the Popen (None when it was running).

        restart: start it again whenever it exits, as the kubelet does a Deployment's container
        (restartPolicy Always, first back-off RESTART_SECONDS): KubeVirt's components can panic and
        rely on that (virt-controller 1.6.6 and 1.9.0 on an informer's tombstone, migration.go enqueueMigration).
        """
        if self.pid():
            return None
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(a) for a in argv]
        if restart:
            argv = ["bash", "-c", 'while :; do "$@"; echo "processes.py: exited with status $?; restarting in '
                    f'{RESTART_SECONDS}s"; sleep {RESTART_SECONDS}; done', self.name, *argv]
        return self._launch(argv, {**os.environ, **CONTROL_PLANE_GO_ENV, **(env or {})}, cwd)

    def _launch(self, argv, env, cwd):
        """argv in a session of its own, its output appended to the log; the pid file names it."""
        with open(self.logfile, "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env,  # pylint: disable=consider-using-with
                                    start_new_session=True)
        self.pidfile.write_text(str(proc.pid))
        return proc

    def wait_until(self, ready, what, proc=None, timeout=90.0):
        """Poll ready() until true; fail at once if the process died, naming its log."""
        deadline = time.monotonic() + timeout
        while not ready():
            if (proc is not None and proc.poll() is not None) or (proc is None and not self.pid()):
                sys.exit(f"cluster: {self.name} exited before {what}; see {self.logfile}:\n{self.tail()}")
            if time.monotonic() > deadline:
                sys.exit(f"cluster: {self.name}: no {what} after {timeout:.0f}s; see {self.logfile}:\n{self.tail()}")
            time.sleep(0.3)

    def tail(self, lines=15):
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def restart(self, grace=10.0):
        """Stop the process (see stop) and start it again as it was: its command line, working directory and
        environment, read from /proc (a process kwokctl started has the control plane's Go settings from there, not
        from this one's). Returns the Popen; the pid file names the new process."""
        pid = self.pid()
        if not pid:
            sys.exit(f"cluster: {self.name} is not running; nothing to restart")
        proc_dir = Path(f"/proc/{pid}")
        argv = proc_dir.joinpath("cmdline").read_bytes().split(b"\0")[:-1]
        environ = dict(entry.split(b"=", 1) for entry in proc_dir.joinpath("environ").read_bytes().split(b"\0")
                       if b"=" in entry)
        cwd = os.readlink(proc_dir / "cwd")
        self.stop(grace=grace)
        return self._launch(argv, environ, cwd)

    def stop(self, grace=10.0):
        """SIGTERM, SIGKILL after grace seconds; returns once the process is gone."""
        pid = self.pid()
        if pid:
            _signal(pid, signal.SIGTERM)
            stop_by = time.monotonic() + grace
            while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
                if time.monotonic() > stop_by:
                    _signal(pid, signal.SIGKILL)
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)


def _signal(pid, sig):
    """The whole session of processes started here; a process started elsewhere alone."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _is_zombie(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True
