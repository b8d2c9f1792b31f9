# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ansible-core x kubernetes.core matrix of tests/matrix/matrix.yml.

For each combination: a virtualenv per ansible-core release (on the Python matrix.yml names for
it), a collections tree per kubernetes.core version (taken out of the pinned `ansible` wheel from
PyPI, since Galaxy is not reachable), then `ansible-test sanity` (all tests, no ignore files) and
the unit tests; on the oldest and the newest combination also the integration tests and the
Molecule `default` scenario against the local control plane.

    python tests/matrix/matrix.py --all                  # every combination (make matrix-core)
    python tests/matrix/matrix.py --edges --quick        # oldest and newest, the playbooks' integration tests
    python tests/matrix/matrix.py --edges --awx-jobs     # oldest and newest, the AWX runner's jobs (make matrix-edges)
    python tests/matrix/matrix.py --only 2.16.19/6.0.0 --steps units

Virtualenvs, collection trees and wheels live outside the checkout (VMSCHED_CACHE, default
~/.cache/vmsched-kubevirt), named by a hash of what they hold, so every clone reuses them: a virtualenv
is built again only when its Python, its pins or requirements.txt change, a collections tree only when
its wheel changes.
Each step's output goes to .build/matrix/logs/; the table of results is printed at the end and
kept in .build/matrix/results-{all,edges,only}[-<steps>].json. Exits non-zero when any step failed.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "venv"))
import uv_install  # noqa: E402  pylint: disable=wrong-import-position
import workers  # noqa: E402  pylint: disable=wrong-import-position

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MATRIX = yaml.safe_load((HERE / "matrix.yml").read_text())
BUILD = ROOT / ".build" / "matrix"
LOGS = BUILD / "logs"
CACHE_ROOT = Path(os.environ.get("VMSCHED_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                  / "vmsched-kubevirt")
CACHE = CACHE_ROOT / "pypi"
# Virtualenvs and collection trees live in the cache, named by a hash of what they hold, so that every clone (a
# CI run's fresh one included) reuses them; vmsched.kubevirt itself is this checkout's link (.build/collections).
ENVS = CACHE_ROOT / "envs"
CHECKOUT_COLLECTIONS = ROOT / ".build" / "collections"
GET_PIP_CACHE = Path.home() / ".ansible" / "test" / "cache"
STANDIN = ROOT / "tests" / "sanity" / "get_pip_standin.py"
# The project's virtualenv's start-up hooks (Makefile, VENV_HOOKS), each idle unless the Makefile's variable of it
# is set: the AWX jobs' modules run as the suite's do (the AnsiballZ cache steps aside on an ansible-core it does not
# know).
HOOKS = tuple(ROOT / "tests" / "venv" / f"vmsched_{name}.py"
              for name in ("zip_bytecode", "ansiballz_cache", "module_forkserver"))
INSTALL_HOOKS = ROOT / "tests" / "venv" / "install.py"
UV_INSTALL = Path(uv_install.__file__)
STANDIN_MARKER = "vmsched-kubevirt get-pip stand-in"
KUBECONFIG = workers.cluster_dir() / "kubeconfig"
# The collections a tree holds, from the same wheel: kubernetes.core, kubevirt.core (requirements.yml: the demo's
# VMs; Molecule would otherwise ask Galaxy for it) and ansible.posix.
FROM_WHEEL = ("kubernetes/core", "kubevirt/core", "ansible/posix")
STEPS = ("sanity", "units", "integration", "molecule")
EDGE_STEPS = ("integration", "molecule")


class StepFailed(Exception):
    pass


def log(msg):
    print(f"[matrix {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, log_file, env=None, cwd=ROOT):
    """Run cmd with its output appended to log_file; raise StepFailed with the output's tail."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                              check=False)
    if proc.returncode != 0:
        tail = log_file.read_text().splitlines()[-40:]
        raise StepFailed(f"{Path(cmd[0]).name} exited {proc.returncode} (log: {log_file.relative_to(ROOT)}):\n"
                         + "\n".join(tail))


def rel(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


# --- Pythons ------------------------------------------------------------------------------------

def python_version(exe):
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(minor):
    """A working python<minor>: on PATH (pyenv's shims answer only for the selected versions), else
    under pyenv's root (PYENV_ROOT, `pyenv root`, ~/.pyenv), newest patch first."""
    candidates = [shutil.which(f"python{minor}")]
    roots = [os.environ.get("PYENV_ROOT")]
    if shutil.which("pyenv"):
        roots.append(subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False).stdout.strip())
    roots.append(str(Path.home() / ".pyenv"))
    for root in filter(None, roots):
        found = glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", f"python{minor}"))
        candidates += sorted(found, key=lambda p: [int(x) for x in re.findall(r"\d+", Path(p).parents[1].name)],
                             reverse=True)
    for exe in filter(None, candidates):
        version = python_version(exe)
        if version and version.startswith(minor + "."):
            return exe, version
    raise StepFailed(f"Python {minor} not found: put python{minor} on PATH or install it under pyenv "
                     f"(pyenv install {minor}); matrix.yml runs an ansible-core on it")


# --- virtualenvs ----------------------------------------------------------------------------------

def tool_pins():
    """The matrix's tools at the versions requirements-dev.txt pins."""
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(2)}"
    missing = [tool for tool in MATRIX["tools"] if tool.lower() not in pins]
    if missing:
        raise StepFailed(f"requirements-dev.txt pins no version of {', '.join(missing)} (tests/matrix/matrix.yml tools)")
    return [pins[tool.lower()] for tool in MATRIX["tools"]]


@contextlib.contextmanager
def cached(name, wanted):
    """(path, ready) of the cache entry `name` for the content `wanted`, under a lock: two clones never build it at
    once. ready: it was built before (its stamp says so); else the caller builds it and writes the stamp."""
    path = ENVS / f"{name}-{hashlib.sha256(wanted.encode()).hexdigest()[:12]}"
    ENVS.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = path / ".matrix-stamp"
        yield path, stamp.exists() and stamp.read_text() == wanted


def venv(core):
    """The virtualenv of one ansible-core: (path, seconds spent building it, 0 when reused)."""
    python, version = find_python(core["python"])
    requirements = (ROOT / "requirements.txt").read_text()
    wanted = json.dumps({"python": version, "ansible-core": core["version"], "tools": tool_pins(),
                         "requirements.txt": hashlib.sha256(requirements.encode()).hexdigest(),
                         "hooks": {hook.name: hashlib.sha256(hook.read_bytes()).hexdigest() for hook in HOOKS},
                         "hook-installer": hashlib.sha256(INSTALL_HOOKS.read_bytes()).hexdigest(),
                         "installer": hashlib.sha256(UV_INSTALL.read_bytes()).hexdigest()}, sort_keys=True)
    with cached(f"venv-core{core['version']}", wanted) as (path, ready):
        if ready and (path / "bin" / "ansible-test").exists():
            return path, 0.0
        return path, build_venv(path, python, version, core, wanted)


def build_venv(path, python, version, core, wanted):
    started = time.monotonic()
    log(f"virtualenv {rel(path)}: Python {version}, ansible-core {core['version']}")
    shutil.rmtree(path, ignore_errors=True)
    out = LOGS / f"venv-core{core['version']}.log"
    out.unlink(missing_ok=True)
    run([python, "-m", "venv", path], out)
    run([sys.executable, UV_INSTALL, path / "bin" / "python", f"ansible-core=={core['version']}",
         "-r", ROOT / "requirements.txt", *tool_pins()], out)
    run([path / "bin" / "python", INSTALL_HOOKS, *HOOKS], out)
    (path / ".matrix-stamp").write_text(wanted)
    return time.monotonic() - started


# --- collections ------------------------------------------------------------------------------------

def wheel(k8s):
    """The pinned `ansible` wheel, from the cache or PyPI, checked against its hash."""
    name, _sep, version = k8s["wheel"].partition("==")
    path = CACHE / f"{name}-{version}-py3-none-any.whl"
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != k8s["sha256"]:
        log(f"downloading {k8s['wheel']} from PyPI into {CACHE}")
        CACHE.mkdir(parents=True, exist_ok=True)
        # The wheel is pure Python; asking for it as for Python 3.13 passes its Requires-Python whatever runs this.
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.13", "--dest", CACHE, k8s["wheel"]], LOGS / "downloads.log")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != k8s["sha256"]:
            path.unlink()
            raise StepFailed(f"{path.name} has sha256 {digest}, matrix.yml pins {k8s['sha256']}")
    return path


def collections(k8s):
    """The collections tree of one kubernetes.core version: (path, seconds spent building it, 0 when reused).
    Holds FROM_WHEEL's collections from the wheel and vmsched.kubevirt as a link to this checkout."""
    wanted = " ".join((k8s["sha256"],) + FROM_WHEEL)   # rebuilt when the wheel or the collections taken change
    with cached(f"collections-k8s{k8s['version']}", wanted) as (path, ready):
        if ready:
            return path, 0.0
        return path, build_collections(path, k8s, wanted)


def build_collections(path, k8s, wanted):
    started = time.monotonic()
    source = wheel(k8s)
    log(f"collections {rel(path)}: kubernetes.core {k8s['version']} from {source.name}")
    shutil.rmtree(path, ignore_errors=True)
    with zipfile.ZipFile(source) as whl:
        for member in whl.namelist():
            if member.startswith(tuple(f"ansible_collections/{c}/" for c in FROM_WHEEL)):
                whl.extract(member, path)
    manifest = json.loads((path / "ansible_collections/kubernetes/core/MANIFEST.json").read_text())
    found = manifest["collection_info"]["version"]
    if found != k8s["version"]:
        raise StepFailed(f"{source.name} bundles kubernetes.core {found}, matrix.yml expects {k8s['version']}")
    (path / ".matrix-stamp").write_text(wanted)
    return time.monotonic() - started


# --- the steps -----------------------------------------------------------------------------------------

def ansible_env(combo, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(PATH=f"{combo['venv'] / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               ANSIBLE_COLLECTIONS_PATH=f"{CHECKOUT_COLLECTIONS}{os.pathsep}{combo['collections']}",
               PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def get_pip_standin(combo):
    """ansible-test bootstraps pip from a script it cannot download here: put the stand-in where it looks."""
    python = combo["venv"] / "bin" / "python"
    out = subprocess.run([python, "-c", "import re, inspect; from ansible_test._internal import python_requirements as m; "
                          "print(re.search(r'pip=.([0-9.]+).', inspect.getsource(m.get_venv_packages)).group(1))"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise StepFailed(f"cannot tell which pip ansible-test {combo['core']['version']} bootstraps:\n{out.stderr}")
    target = GET_PIP_CACHE / f"get_pip_{out.stdout.strip().replace('.', '_')}.py"
    if target.exists() and STANDIN_MARKER not in target.read_text():
        return  # a real get-pip script: never replace it
    GET_PIP_CACHE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STANDIN, target)


def sanity(combo, out):
    """ansible-test sanity, every test, on a copy of what git would ship with kubernetes.core beside it."""
    get_pip_standin(combo)
    top = BUILD / f"sanity-{combo['name']}"
    tree = top / "ansible_collections" / "vmsched" / "kubevirt"
    shutil.rmtree(top, ignore_errors=True)
    tree.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    subprocess.run(["git", "init", "--quiet"], cwd=tree, check=True)
    shutil.copytree(combo["collections"] / "ansible_collections" / "kubernetes",
                    top / "ansible_collections" / "kubernetes")
    env = ansible_env(combo)
    del env["ANSIBLE_COLLECTIONS_PATH"]
    # The stand-in bootstraps pip in each sanity virtualenv with uv when uv is on PATH (a new machine makes 9 of them).
    env["PATH"] = f"{os.path.dirname(uv_install.uv_binary())}{os.pathsep}{env['PATH']}"
    run([combo["venv"] / "bin" / "ansible-test", "sanity", "--color", "no", "--requirements",
         "--python", combo["core"]["python"]], out, env=env, cwd=tree)


def units(combo, out):
    # Not test_execution_environment.py (ansible-builder) nor test_awx_job_templates.py (awx.awx): the dev venv runs those.
    run([combo["venv"] / "bin" / "pytest", "-p", "no:cacheprovider", "tests/unit/plugins", "tests/unit/test_playbook_specs.py"],
        out, env=ansible_env(combo))


def integration(combo, out):
    if not KUBECONFIG.exists():
        raise StepFailed(f"no local control plane ({rel(KUBECONFIG)} is missing): run `make cluster-up` first")
    # The whole suite as `make integration` runs it: the fleet and KubeVirt 1.5 tests need clusters of their own.
    tests = MATRIX[combo["integration"]] if combo["integration"] else \
        ["tests/integration", "-m", "not kubevirt15 and not fleet"]
    run([combo["venv"] / "bin" / "pytest", "-p", "no:cacheprovider", *tests], out,
        env=ansible_env(combo, KUBECONFIG=str(KUBECONFIG)))


def molecule(combo, out):
    if not KUBECONFIG.exists():
        raise StepFailed(f"no local control plane ({rel(KUBECONFIG)} is missing): run `make cluster-up` first")
    run([combo["venv"] / "bin" / "molecule", "test", "-s", "default"], out,
        env=ansible_env(combo, KUBECONFIG=str(KUBECONFIG), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1"))


STEP_FUNCTIONS = {"sanity": sanity, "units": units, "integration": integration, "molecule": molecule}


# --- the matrix -----------------------------------------------------------------------------------------

def combinations(which, integration=None):
    cores = {c["version"]: c for c in MATRIX["ansible_core"]}
    k8s = {k["version"]: k for k in MATRIX["kubernetes_core"]}
    edges = {(e["ansible_core"], e["kubernetes_core"]): label for label, e in MATRIX["edges"].items()}
    if which == "all":
        pairs = [(c, k) for c in cores for k in k8s]
    elif which == "edges":
        pairs = list(edges)
    else:
        pairs = []
        for item in which:
            core, _sep, k8s_version = item.partition("/")
            if core not in cores or k8s_version not in k8s:
                raise SystemExit(f"unknown combination {item!r}: ansible-core one of {list(cores)}, "
                                 f"kubernetes.core one of {list(k8s)}, as CORE/K8S")
            pairs.append((core, k8s_version))
    return [{"name": f"core{c}-k8s{k}", "core": cores[c], "k8s": k8s[k], "edge": edges.get((c, k)),
             "integration": integration}
            for c, k in pairs]


def run_matrix(combos, steps):
    results = []
    for combo in combos:
        wanted = [s for s in steps if combo["edge"] or s not in EDGE_STEPS]
        label = f"ansible-core {combo['core']['version']} (Python {combo['core']['python']}) + kubernetes.core {combo['k8s']['version']}"
        log(f"== {label}{' [' + combo['edge'] + ']' if combo['edge'] else ''}: {', '.join(wanted)}")
        row = {"combination": combo["name"], "ansible_core": combo["core"]["version"], "python": combo["core"]["python"],
               "kubernetes_core": combo["k8s"]["version"], "edge": combo["edge"], "steps": {}}
        started = time.monotonic()
        try:
            combo["venv"], venv_seconds = venv(combo["core"])
            combo["collections"], coll_seconds = collections(combo["k8s"])
            row["setup_seconds"] = round(venv_seconds + coll_seconds, 1)
        except StepFailed as exc:
            log(f"setup FAILED: {exc}")
            row["steps"]["setup"] = {"ok": False, "seconds": round(time.monotonic() - started, 1)}
            results.append(row)
            continue
        for step in wanted:
            out = LOGS / f"{combo['name']}-{step}.log"
            out.unlink(missing_ok=True)
            step_started = time.monotonic()
            try:
                STEP_FUNCTIONS[step](combo, out)
                ok = True
            except StepFailed as exc:
                ok = False
                log(f"{step} FAILED: {exc}")
            seconds = round(time.monotonic() - step_started, 1)
            row["steps"][step] = {"ok": ok, "seconds": seconds}
            log(f"{step}: {'passed' if ok else 'FAILED'} in {seconds:.0f}s")
        row["seconds"] = round(time.monotonic() - started, 1)
        results.append(row)
    return results


def table(results):
    lines = ["| ansible-core (Python) | kubernetes.core | ran | result | setup s | steps s | total s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in results:
        steps = row["steps"]
        ok = all(s["ok"] for s in steps.values())
        lines.append("| {} ({}) | {}{} | {} | {} | {} | {} | {} |".format(
            row["ansible_core"], row["python"], row["kubernetes_core"], f" ({row['edge']})" if row["edge"] else "",
            ", ".join(steps), "pass" if ok else "FAIL: " + ", ".join(k for k, s in steps.items() if not s["ok"]),
            row.get("setup_seconds", "-"), " / ".join(f"{s['seconds']:.0f}" for s in steps.values()),
            f"{row.get('seconds', 0):.0f}"))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--all", action="store_true", help="every combination of matrix.yml")
    group.add_argument("--edges", action="store_true", help="the oldest and the newest combination")
    group.add_argument("--only", action="append", metavar="CORE/K8S", help="one combination, e.g. 2.16.19/6.0.0")
    tests = parser.add_mutually_exclusive_group()
    tests.add_argument("--quick", dest="integration", action="store_const", const="quick_integration",
                       help="integration: only matrix.yml's quick_integration files, not the whole suite")
    tests.add_argument("--awx-jobs", dest="integration", action="store_const", const="awx_integration",
                       help="integration: only matrix.yml's awx_integration files (the AWX runner's jobs)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated, of {', '.join(STEPS)} (integration and molecule run on the edges only)")
    args = parser.parse_args()
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}")
    combos = combinations("all" if args.all else "edges" if args.edges else args.only, integration=args.integration)
    LOGS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = run_matrix(combos, steps)
    report = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.monotonic() - started, 1),
              "results": results}
    # One file per selection and steps, so that a run of some combinations or steps (make test runs the edges' checks
    # and their jobs apart) keeps the other runs' results.
    selection = "all" if args.all else "edges" if args.edges else "only"
    some_steps = "" if steps == list(STEPS) else "-" + "+".join(steps)
    results_file = BUILD / f"results-{selection}{some_steps}.json"
    results_file.write_text(json.dumps(report, indent=2) + "\n")
    print("\n" + table(results) + f"\n\nmatrix: {len(results)} combination(s) in {report['seconds']:.0f}s "
          f"(results in {rel(results_file)}, logs in {rel(LOGS)})")
    failed = [r["combination"] for r in results if not all(s["ok"] for s in r["steps"].values())]
    if failed:
        sys.exit(f"matrix: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
