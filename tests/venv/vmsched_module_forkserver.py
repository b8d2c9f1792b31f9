"""Module runs forked from a Python that has already imported their libraries (the project's and the matrix's venvs).

A module run is a new `python AnsiballZ_<module>.py`, and most of its CPU goes to importing: the kubernetes client
(with pydantic, urllib3, requests-oauthlib), yaml and the standard library's share, about 0.35 of a k8s run's
0.6 CPU-s, for each of the 1,400 module runs of `make test`. With VMSCHED_MODULE_FORKSERVER set (a directory), a
module run's Python, as it starts (the .pth), hands its standard streams, working directory, umask, environment
and arguments over a Unix socket to a server that imported those libraries once; the server forks, and the child
runs the script as that Python would have (runpy, as __main__, the script's directory first on sys.path), while
the run waits and exits with the child's status (a signal's too); should the run die, the child gets its SIGTERM.
The child's CPU is not the run's: the run appends it to the file VMSCHED_FORKED_CPU_LOG names, if set (the
integration tests' CPU report, tests/integration/cpu_report.py, counts it so).
The module and its module_utils (ansible-core's, kubernetes.core's, ours) still come from the run's own zip: the
server imports nothing of Ansible, and refuses to serve if a library it imports did.

What the libraries' state depends on is the server's too: the interpreter and the environment variables their
imports read. The server records what they read and refuses to serve if that is not among KEYED; a run goes to the
server of its interpreter and of its values of KEYED (KUBECONFIG differs by cluster), which checks them again. The
first run that finds no server starts one and runs on its own meanwhile, as does any run the server refuses; a
server exits after IDLE seconds without a run. Without the variable, or on a platform without what this needs
(Linux's pidfd, Python's send_fds), nothing changes.

tests/venv/install.py puts this file and a .pth of its PTH into a Python's site-packages (the Makefile does it in the
project's virtualenv, tests/matrix/matrix.py in the matrix's).
"""

import os
import sys

# The .pth: Python runs a line of it that starts with "import" at every start; this one imports no more than os
# and sys unless the variable is set and the script is a module run.
PTH = ('import os, sys; os.environ.get("VMSCHED_MODULE_FORKSERVER") and sys.argv[0].rpartition("/")[2]'
       '.startswith("AnsiballZ_") and __import__("vmsched_module_forkserver").delegate()\n')
# What the server imports: what kubernetes.core's modules and ours import from outside their zip.
PRELOAD = (
    "kubernetes.client", "kubernetes.client.api_client", "kubernetes.client.rest", "kubernetes.config",
    "kubernetes.config.kube_config", "kubernetes.dynamic", "kubernetes.watch",
    "kubernetes.client.models.v1_delete_options", "kubernetes.client.models.v1_api_resource_list",
    "yaml", "jsonpatch", "urllib3", "requests", "requests_oauthlib", "pydantic", "dateutil.parser",
    "cryptography.x509", "distro", "argparse", "email.mime.multipart", "gettext", "gzip", "netrc", "runpy", "shlex",
    "json", "ssl", "http.client", "logging", "datetime", "tempfile", "shutil", "subprocess", "selectors", "locale",
    "platform", "traceback", "syslog", "grp", "pwd", "zipfile", "base64", "concurrent.futures", "threading",
)
# The environment variables a server and its runs must agree on: those the imports above read (the server checks),
# and those Python itself reads at start.
KEYED = ("HOME", "KUBECONFIG", "PYDANTIC_DISABLE_PLUGINS", "LANG", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "OPENSSL_CONF",
         "UNIXCONFDIR", "UNIXUSRLIBDIR")
KEYED_PREFIXES = ("PYTHON", "_PYTHON", "LC_", "VMSCHED_ZIP_BYTECODE", "VMSCHED_ANSIBALLZ_CACHE")
IDLE = float(os.environ.get("VMSCHED_MODULE_FORKSERVER_IDLE", "60"))
# A run that finds no server starts one unless another run did within STARTING seconds (its lock file is younger).
STARTING = 30.0
ACCEPTED, REFUSED = b"A", b"R"


def _keyed(environ):
    return sorted((k, v) for k, v in environ.items() if k in KEYED or k.startswith(KEYED_PREFIXES))


def _socket_path(directory, environ):
    import zlib  # a name for the socket only: the server compares the values themselves
    text = repr((sys.executable, __file__, _keyed(environ))).encode()
    return os.path.join(directory, f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}.sock")


def _send(sock, data, fds):
    """One message: its length, the data, and the descriptors with its first bytes."""
    import socket
    payload = len(data).to_bytes(4, "big") + data
    sent = socket.send_fds(sock, [payload], list(fds))
    if sent < len(payload):
        sock.sendall(payload[sent:])


def _recv_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def delegate():
    """In a module run's Python, at start: have a server run it and exit with its status, or return (run here)."""
    import socket
    directory = os.environ["VMSCHED_MODULE_FORKSERVER"]
    if not hasattr(socket, "send_fds") or not hasattr(os, "pidfd_open"):
        return
    path = _socket_path(directory, os.environ)
    if len(path) > 100:
        return  # too long for a Unix socket's address
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        try:
            _start_server(directory, path)
        except OSError:
            pass  # no server for now: nothing changes
        return
    import json
    script = os.path.realpath(sys.argv[0])
    umask = os.umask(0o22)
    os.umask(umask)
    request = {"argv": sys.argv, "path0": os.path.dirname(script), "cwd": os.getcwd(), "umask": umask,
               "environ": dict(os.environ), "executable": sys.executable}
    try:
        _send(sock, json.dumps(request).encode(), fds=(0, 1, 2))
        answer = _recv_exactly(sock, 1)
    except (OSError, EOFError):
        sock.close()
        return  # nothing was started: run here
    if answer != ACCEPTED:
        sock.close()
        return
    try:
        outcome = _recv_exactly(sock, 8)
    except (OSError, EOFError):
        sys.stderr.write("vmsched_module_forkserver: the server went away while running the module\n")
        os._exit(1)
    code, cpu_ms = int.from_bytes(outcome[:4], "big", signed=True), int.from_bytes(outcome[4:], "big")
    cpu_log = os.environ.get("VMSCHED_FORKED_CPU_LOG")
    if cpu_log:
        with open(cpu_log, "a", encoding="utf-8") as log:
            log.write(f"{cpu_ms / 1000:.3f}\n")
    if code < 0:  # the child died of a signal: so does the run
        import signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _start_server(directory, path):
    import subprocess
    import time
    os.makedirs(directory, mode=0o700, exist_ok=True)  # its sockets take a whole environment
    lock = path + ".starting"
    try:
        if time.time() - os.stat(lock).st_mtime < STARTING:
            return
        os.unlink(lock)
    except OSError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return  # another run starts it
    with open(os.path.join(directory, "server.log"), "ab") as log:
        subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-c", "import vmsched_module_forkserver as s; s.main()", path],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def _recording_environ():
    """os.environ, recording the names looked up in it (until stop())."""
    read, environ_type = set(), type(os.environ)
    getitem, contains = environ_type.__getitem__, environ_type.__contains__

    def recording_getitem(self, key):
        read.add(key)
        return getitem(self, key)

    def recording_contains(self, key):
        read.add(key)
        return contains(self, key)

    def stop():
        environ_type.__getitem__, environ_type.__contains__ = getitem, contains

    environ_type.__getitem__, environ_type.__contains__ = recording_getitem, recording_contains
    return read, stop


def main():
    """The server: preload, then serve until idle. Only a module's child returns from serve(); it runs the module."""
    import importlib
    path = sys.argv[1]
    os.chdir("/")  # not the directory of the run that started it, which goes away
    read, stop = _recording_environ()
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    finally:
        stop()
    unkeyed = sorted(k for k in read if k not in KEYED and not k.startswith(KEYED_PREFIXES))
    if unkeyed or "ansible" in sys.modules:
        sys.exit(f"vmsched_module_forkserver: not serving: the imports read {unkeyed} "
                 f"or imported ansible ({'ansible' in sys.modules})")
    job = _serve(path)
    if job is not None:
        sys.exit(_run(job))


def _serve(path):
    import socket
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
    except OSError:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            return None  # another server serves it
        except OSError:
            os.unlink(path)  # a dead server's
            server.bind(path)
        finally:
            probe.close()
    server.listen(64)
    try:
        os.unlink(path + ".starting")
    except OSError:
        pass
    server.settimeout(1.0)
    inode, idle_since = os.stat(path).st_ino, _now()
    while _now() - idle_since < IDLE:
        _reap()
        try:
            conn, _address = server.accept()
        except socket.timeout:
            continue
        idle_since = _now()
        if os.fork() == 0:
            server.close()
            return _handle(conn)  # returns in the module's child only
        conn.close()
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass
    return None


def _now():
    import time
    return time.monotonic()


def _reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _handle(conn):
    """In a child of the server: take one run's request, fork the module's child, report its status."""
    import json
    import select
    import signal
    import socket
    conn.settimeout(None)
    try:
        # The descriptors come with the message's first bytes: a plain recv would drop them.
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        if len(data) < 4:
            data += _recv_exactly(conn, 4 - len(data))
        size = int.from_bytes(data[:4], "big")
        data = data[4:]
        if len(data) < size:
            data += _recv_exactly(conn, size - len(data))
        request = json.loads(data)
        if request["executable"] != sys.executable or _keyed(request["environ"]) != _keyed(os.environ) \
                or len(fds) != 3:
            conn.sendall(REFUSED)
            os._exit(0)
        conn.sendall(ACCEPTED)
    except (OSError, EOFError, ValueError, KeyError):
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        return request
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    while True:
        ready = select.select([pidfd, conn], [], [])[0]
        if conn in ready and not conn.recv(1):  # the run went away: so does the module
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            os._exit(0)
        if pidfd in ready:
            _pid, status, usage = os.wait4(pid, 0)
            cpu_ms = round((usage.ru_utime + usage.ru_stime) * 1000)
            try:
                conn.sendall(os.waitstatus_to_exitcode(status).to_bytes(4, "big", signed=True)
                             + cpu_ms.to_bytes(4, "big"))
            except OSError:
                pass
            os._exit(0)


def _run(request):
    """In the module's child: become the run's Python and run its script; returns the exit status."""
    import runpy
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["environ"])
    sys.argv = request["argv"]
    sys.path[0] = request["path0"]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0
