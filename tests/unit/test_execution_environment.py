# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The execution environment: `ansible-builder create` and the build context it writes.

No container engine is needed: the tests check the generated Containerfile and
its context (requirements, bindep, this collection's tarball). `make ee` writes
the context to .build/ee/ and points VMSCHED_EE_CONTEXT at it; otherwise (`make
units`) the context is generated from this checkout into a temporary directory.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# ansible-builder and ansible-galaxy of the interpreter running the tests (.venv/bin).
BIN = Path(sys.executable).parent
DEFINITION = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
BUILD_TOOLS = {"buildah", "git", "golang", "golang-go"}
BUILD_PROFILE = "scheduler-build"


def _run(*argv):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "%s failed:\n%s%s" % (" ".join(map(str, argv)), proc.stdout, proc.stderr)
    return proc.stdout


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    given = os.environ.get("VMSCHED_EE_CONTEXT")
    if given:
        return Path(given)
    work = tmp_path_factory.mktemp("ee")
    for name in ("execution-environment.yml", "bindep.txt", "requirements.txt", "requirements.yml"):
        shutil.copy(ROOT / name, work / name)
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", work / ".build" / "ee-collection", ROOT)
    _run(BIN / "ansible-builder", "create", "--file", work / "execution-environment.yml",
         "--context", work / "context", "--output-filename", "Containerfile")
    return work / "context"


@pytest.fixture(scope="module")
def containerfile(context):
    return (context / "Containerfile").read_text()


def _stage(containerfile, name):
    """The lines of one build stage (FROM ... AS name up to the next FROM)."""
    match = re.search(r"^FROM \S+ AS %s\n(.*?)(?=^FROM |\Z)" % name, containerfile, re.M | re.S)
    assert match, "no %s stage in the Containerfile" % name
    return match.group(1)


def _bindep_lines(text):
    """(package, selectors) of each requirement line of a bindep file."""
    lines = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][\w.+-]*)(?:\s*\[([^\]]*)\])?", line)
        assert match, "unexpected bindep line: %r" % line
        lines.append((match.group(1), set((match.group(2) or "").split())))
    return lines


def test_base_image_pinned_and_matching_the_tested_core():
    name = DEFINITION["images"]["base_image"]["name"]
    image, tag = name.rsplit(":", 1)
    assert "/" in image and tag and tag != "latest" and "@" not in image, name
    # community-ee-base tags are <ansible-core version>-<build>.
    core = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)-\d+", tag)
    assert core, "tag %s does not name an ansible-core version" % tag
    dev = re.search(r"^ansible-core==(\d+)\.(\d+)\.", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert core.group(1, 2) == dev.group(1, 2), "base image ansible-core %s.%s, tests run %s.%s" % (
        core.group(1, 2) + dev.group(1, 2))
    floor = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    low = tuple(int(p) for p in re.search(r">=\s*([\d.]+)", floor).group(1).split("."))
    assert tuple(int(p) for p in core.groups()) >= low


def test_containerfile_starts_from_the_base_image(containerfile):
    name = DEFINITION["images"]["base_image"]["name"]
    assert 'ARG EE_BASE_IMAGE="%s"' % name in containerfile
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile


def test_context_carries_our_requirement_files_verbatim(context):
    for name in ("requirements.yml", "requirements.txt", "bindep.txt"):
        assert (context / "_build" / name).read_text() == (ROOT / name).read_text(), name


def test_containerfile_installs_requirements_and_bindep(containerfile):
    galaxy = _stage(containerfile, "galaxy")
    assert re.search(r"ansible-galaxy collection install .*-r requirements\.yml "
                     r"--collections-path \"/usr/share/ansible/collections\"", galaxy)
    builder = _stage(containerfile, "builder")
    assert "COPY _build/requirements.txt requirements.txt" in builder
    assert "COPY _build/bindep.txt bindep.txt" in builder
    assert re.search(r"introspect\.py introspect .*--user-pip=requirements\.txt --user-bindep=bindep\.txt", builder)
    final = _stage(containerfile, "final")
    assert "COPY --from=galaxy /usr/share/ansible /usr/share/ansible" in final
    assert "install-from-bindep" in final


def test_requirements_match_galaxy_yml():
    wanted = {c["name"]: c.get("version") for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]}
    assert wanted == GALAXY["dependencies"]
    pins = {re.split(r"[=<>!~ ]", line, 1)[0].lower() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    assert {"kubernetes", "pyyaml", "jsonpatch"} <= pins


def test_the_collection_tarball_is_in_the_context(context):
    tarballs = sorted((context / "_build" / "collection").glob("*.tar.gz"))
    assert [t.name for t in tarballs] == ["vmsched-kubevirt-%s.tar.gz" % GALAXY["version"]]
    with tarfile.open(tarballs[0]) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("vmsched", "kubevirt", GALAXY["version"])
    assert manifest["dependencies"] == GALAXY["dependencies"]
    # What a job needs, and the files ansible-builder's introspection reads from the installed collection.
    for name in ("meta/runtime.yml", "plugins/modules/vmi_migration.py", "plugins/module_utils/versions.py",
                 "roles/secondary_scheduler/tasks/main.yml", "playbooks/site.yml", "requirements.txt", "bindep.txt"):
        assert name in names, name
    for name in names:
        assert not name.startswith((".venv", ".build", ".cluster")), name


def test_containerfile_installs_the_collection_offline_after_its_dependencies(containerfile):
    galaxy = _stage(containerfile, "galaxy")
    assert "COPY _build /build" in galaxy
    requirements = galaxy.index("-r requirements.yml")
    ours = re.search(r"RUN ansible-galaxy collection install --offline --collections-path /usr/share/ansible/collections "
                     r"/build/collection/vmsched-kubevirt-\*\.tar\.gz", galaxy)
    assert ours and ours.start() > requirements


def test_bindep_default_profile_is_skopeo_and_build_tools_are_opt_in():
    lines = _bindep_lines((ROOT / "bindep.txt").read_text())
    default = {name for name, selectors in lines if not (selectors - {s for s in selectors if s.startswith("platform:")})}
    assert default == {"skopeo"}
    build = {name for name, selectors in lines if BUILD_PROFILE in selectors}
    assert build == BUILD_TOOLS
