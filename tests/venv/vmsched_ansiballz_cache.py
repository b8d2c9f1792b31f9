"""A cache of Ansible's module payloads across runs, in the project's and the matrix's virtualenvs.

Before a module runs, ansible-core assembles its payload (AnsiballZ): it parses the module and every module_util it
imports, recursively, and zips them, once per module per ansible-playbook run (its cache lives in the run's own
local tmp). For a module of kubernetes.core's or ours that is about 0.25 CPU-s, and the suite starts hundreds of
runs: a role run of the descheduler's spent 1.8 of its 13 CPU-s there (py-spy).
tests/venv/install.py puts this file and a .pth of its PTH into a Python's site-packages (the Makefile does it in the
project's virtualenv, tests/matrix/matrix.py in the matrix's); the Makefile sets VMSCHED_ANSIBALLZ_CACHE (a directory) for what it runs. Without that
variable, or on an ansible-core whose module_common differs (2.16), nothing changes.

What a run builds is kept under a key of what decides where modules come from (ansible-core's version, its
collection paths, its module_utils paths) with the list of the files that went into it (their mtime and size, from
the Origin ansible-core tags each source with). A later run starts its own cache with every kept payload whose files
are all unchanged, so ansible-core finds them there and builds only the others.
"""

import hashlib
import importlib.abc
import importlib.util
import json
import os
import shutil
import sys

# The .pth: Python runs a line of it that starts with "import" at every start; this one imports no more than os
# unless the variable is set.
PTH = 'import os; os.environ.get("VMSCHED_ANSIBALLZ_CACHE") and __import__("vmsched_ansiballz_cache")\n'
TARGET = "ansible.executor.module_common"
NEEDED = ("_find_module_utils", "recursive_finder", "_compile_module_ast", "_CachedModule", "Origin",
          "module_utils_loader", "_MODULE_UTILS_PATH")
SEEDED = ".vmsched-seeded"


def _stamp(path):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return [status.st_mtime_ns, status.st_size]


def _replace_atomically(source, path):
    """Link (else copy) source to path whole: a reader sees the old file, the new one or none."""
    partial = f"{path}.{os.getpid()}"
    try:
        os.link(source, partial)
    except OSError:
        shutil.copyfile(source, partial)
    os.replace(partial, path)


def _patch(module_common, root):
    if not all(hasattr(module_common, name) for name in NEEDED):
        return
    from ansible import __version__, constants
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    origin_type = module_common.Origin
    building = {}   # the payload being built in this process: the files its sources came from

    def store():
        """This run's directory, keyed by what decides which file a module or module_util name resolves to."""
        where = [__version__, AnsibleCollectionConfig.collection_paths, module_common._MODULE_UTILS_PATH,
                 module_common.module_utils_loader._get_paths(subdirs=False)]
        return os.path.join(root, hashlib.sha256(json.dumps(where, default=str).encode()).hexdigest()[:20])

    def seed(lookup):
        """Start this run's cache with every kept payload whose files are unchanged (once a run: its workers
        share the run's local tmp)."""
        if os.path.exists(os.path.join(lookup, SEEDED)):
            return
        os.makedirs(lookup, exist_ok=True)
        kept = store()
        stamps = {}   # files shared by several payloads (ansible-core's module_utils) are looked at once

        def unchanged(path, stamp):
            if path not in stamps:
                stamps[path] = _stamp(path)
            return stamps[path] == stamp

        for name in os.listdir(kept) if os.path.isdir(kept) else ():
            if not name.endswith(".files"):
                continue
            try:
                with open(os.path.join(kept, name), encoding="utf-8") as listing:
                    files = json.load(listing)
            except (OSError, ValueError):
                continue
            if all(unchanged(path, stamp) for path, stamp in files):
                payload = name[:-len(".files")]
                try:
                    _replace_atomically(os.path.join(kept, payload), os.path.join(lookup, payload))
                except OSError:
                    pass  # gone meanwhile
        with open(os.path.join(lookup, SEEDED), "w", encoding="utf-8"):
            pass

    find_module_utils = module_common._find_module_utils

    def cached_find_module_utils(*args, **kwargs):
        try:
            seed(os.path.join(constants.DEFAULT_LOCAL_TMP, "ansiballz_cache"))
        except OSError:
            pass  # an unusable cache only costs the build
        return find_module_utils(*args, **kwargs)

    recursive_finder = module_common.recursive_finder

    def recording_recursive_finder(*args, **kwargs):
        building["files"] = []
        return recursive_finder(*args, **kwargs)

    compile_module_ast = module_common._compile_module_ast

    def recording_compile_module_ast(module_name, source_code):
        files = building.get("files")
        if files is not None and source_code:
            origin = origin_type.get_tag(source_code)
            if origin is not None and origin.path:
                files.append(origin.path)
            else:
                building["files"] = None  # generated (a redirect's shim): not kept
        return compile_module_ast(module_name, source_code)

    dump = module_common._CachedModule.dump

    def keeping_dump(self, path):
        dump(self, path)
        files = building.pop("files", None)
        if not files:
            return
        try:
            kept = store()
            os.makedirs(kept, exist_ok=True)
            name = os.path.basename(path)
            _replace_atomically(path, os.path.join(kept, name))
            listing = os.path.join(kept, f"{name}.files.{os.getpid()}")
            with open(listing, "w", encoding="utf-8") as out:
                json.dump([[file, _stamp(file)] for file in sorted(set(files))], out)
            os.replace(listing, os.path.join(kept, f"{name}.files"))
        except OSError:
            pass  # a read-only cache only costs the next run's build

    module_common._find_module_utils = cached_find_module_utils
    module_common.recursive_finder = recording_recursive_finder
    module_common._compile_module_ast = recording_compile_module_ast
    module_common._CachedModule.dump = keeping_dump


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ansible-core's module_common when something imports it (module runs never do)."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, root = spec.loader, self.root

        class PatchingLoader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(module, root)

        spec.loader = PatchingLoader()
        return spec


if os.environ.get("VMSCHED_ANSIBALLZ_CACHE"):
    sys.meta_path.insert(0, _PatchOnImport(os.environ["VMSCHED_ANSIBALLZ_CACHE"]))
