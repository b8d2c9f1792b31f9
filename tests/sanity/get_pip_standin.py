# Copyright: Contributors to the vmsched.kubevirt collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offline stand-in for the get-pip script that ``ansible-test`` downloads.

``ansible-test sanity`` creates virtual environments without pip and bootstraps
pip in them with a get-pip script fetched from a host that this project's
machines cannot reach. It first looks for a cached copy at
``~/.ansible/test/cache/get_pip_<version>.py``; ``make sanity`` installs this file
there. ansible-test runs it as::

    python get_pip_24_2.py --disable-pip-version-check pip==24.2 --no-setuptools --no-wheel

When uv is on PATH (tests/matrix/ and make sanity put the one of tests/venv/uv_install.py there), uv
installs the requested packages alone, which is what get-pip leaves: about 0.2 s
of CPU against some 8 s for the other way, on each of the sanity tests' virtual
environments a new machine makes. Otherwise we bootstrap the interpreter's
bundled pip with ``ensurepip`` and let that pip install the requested packages
from the package index. ``--no-setuptools`` and ``--no-wheel`` are get-pip's own
options, not ``pip install``'s: ensurepip never installs wheel, and on Python <
3.12 it does install setuptools, which we then remove so that the environment
matches what get-pip would have made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

STANDIN_MARKER = "vmsched-kubevirt get-pip stand-in"  # make sanity looks for this text
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")
# The options ansible-test passes besides the packages; uv takes the packages alone.
KNOWN_OPTIONS = GET_PIP_ONLY_OPTIONS + ("--disable-pip-version-check",)


def run(command, env):
    """Run a command quietly; show its output and exit if it fails."""
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)

    if result.returncode != 0:
        sys.stdout.write(result.stdout)
        sys.exit("%s: %s failed with exit code %d" % (STANDIN_MARKER, " ".join(command), result.returncode))


def main():
    """Bootstrap pip, then install what ansible-test asked for."""
    env = dict(os.environ)

    # ensurepip points PIP_CONFIG_FILE at the null device while it runs (in its own
    # process here). Should it leak into ours, pip would lose the machine's
    # configuration, such as the certificate bundle in /etc/pip.conf.
    if env.get("PIP_CONFIG_FILE") == os.devnull:
        del env["PIP_CONFIG_FILE"]

    uv = shutil.which("uv")
    if uv and all(argument in KNOWN_OPTIONS for argument in sys.argv[1:] if argument.startswith("-")):
        packages = [argument for argument in sys.argv[1:] if not argument.startswith("-")]
        # The platform's certificates, as pip's configuration here names them.
        run([uv, "pip", "install", "--quiet", "--system-certs", "--python", sys.executable] + packages, env)
        return

    run([sys.executable, "-m", "ensurepip", "--default-pip"], env)

    arguments = [argument for argument in sys.argv[1:] if argument not in GET_PIP_ONLY_OPTIONS]
    run([sys.executable, "-m", "pip", "install", "--quiet"] + arguments, env)

    if "--no-setuptools" in sys.argv[1:]:
        run([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"], env)


if __name__ == "__main__":
    main()
