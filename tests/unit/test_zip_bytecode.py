# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/venv/vmsched_zip_bytecode.py: what a module run imports from its zip is the code compile() gives, with the
zip's own file names, whether compiled here or read from the cache."""
from __future__ import annotations

import importlib.util
import os
import types
import zipfile
import zipimport
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / "venv" / "vmsched_zip_bytecode.py"
SOURCE = b"def answer():\n    return 42\n\n\nclass Probe:\n    def where(self):\n        return __file__\n"


def stdlib_compile_source():
    """zipimport's own function, also when the virtualenv's copy of the hook replaced it at start (make exports
    VMSCHED_ZIP_BYTECODE): the replacement keeps it in its closure."""
    current = zipimport._compile_source
    while current.__module__ != "zipimport":
        cells = dict(zip(current.__code__.co_freevars, (cell.cell_contents for cell in current.__closure__)))
        current = cells["compile_source"]
    return current


@pytest.fixture
def hook(monkeypatch):
    """The repository's file loaded afresh without the variable (it patches nothing then), on zipimport's own
    function; zipimport as it was afterwards."""
    monkeypatch.delenv("VMSCHED_ZIP_BYTECODE", raising=False)
    monkeypatch.setattr(zipimport, "_compile_source", stdlib_compile_source())
    spec = importlib.util.spec_from_file_location("zip_bytecode_under_test", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def payload(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zbc_probe.py", SOURCE)
    return path


def code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def test_without_the_variable_nothing_is_patched(hook):
    assert zipimport._compile_source.__module__ == "zipimport"


def test_a_second_payload_reads_the_cache_and_carries_its_own_file_names(hook, tmp_path):
    cache = tmp_path / "cache"
    hook._install(str(cache))
    assert zipimport._compile_source.__module__ != "zipimport"
    for run in ("first", "second"):  # a new zip each run, as Ansible writes one per module run
        archive = payload(tmp_path / f"{run}.zip")
        code = zipimport.zipimporter(str(archive)).get_code("zbc_probe")
        expected = compile(SOURCE, os.path.join(archive, "zbc_probe.py"), "exec", dont_inherit=True)
        assert [c.co_code for c in code_objects(code)] == [c.co_code for c in code_objects(expected)]
        assert {c.co_filename for c in code_objects(code)} == {os.path.join(archive, "zbc_probe.py")}, run
        namespace = {"__file__": code.co_filename}
        exec(code, namespace)  # noqa: S102  the probe's own source, above
        assert namespace["answer"]() == 42
        assert len([p for p in cache.rglob("*") if p.is_file()]) == 1, run  # one entry, written once


def test_an_unwritable_cache_only_costs_the_compile(hook, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    hook._install(str(blocker / "cache"))
    code = zipimport.zipimporter(str(payload(tmp_path / "p.zip"))).get_code("zbc_probe")
    namespace = {}
    exec(code, namespace)  # noqa: S102
    assert namespace["answer"]() == 42
