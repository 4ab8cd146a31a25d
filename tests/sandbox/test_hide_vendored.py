"""A copy of a repository task's project vendored inside another package (``pip/_vendor/<name>``) is
hidden from its jobs like a top-level one (``_hide.VENDOR_DIRS``), and the harness's pytest still runs.

Before, only copies at the top of an import root were hidden: a policy could ``cat`` or import the
original code from ``<app>/_vendor/<name>/`` (a package, a module, or its bytecode) beside the broken copy.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from posttrain.sandbox._hide import HARNESS_NAMES, VENDOR_DIRS, forget_index, host_copies

SITE = Path("/usr/local/lib/python3.11/dist-packages")  # on the sandbox's /usr/bin/python3's path


def test_a_copy_in_a_vendoring_directory_is_found_and_other_subpackages_are_not(tmp_path):
    for rel in ("a/app/__init__.py", "a/app/_vendor/__init__.py", "a/app/_vendor/probe/__init__.py",
                "b/app/__init__.py", "b/app/vendored/__init__.py", "b/app/vendored/probe.py",
                "b/app/vendored/__pycache__/probe.cpython-311.pyc", "c/app/__init__.py", "c/app/extern/probe.pyc",
                "d/app/__init__.py", "d/app/third_party/probe/core.py",  # a namespace-style copy
                "e/app/__init__.py", "e/app/_vendor/__init__.py", "e/app/_vendor/w/__init__.py",
                "e/app/_vendor/w/vendored/__init__.py", "e/app/_vendor/w/vendored/probe/__init__.py",
                "f/app/__init__.py", "f/app/utils/__init__.py", "f/app/utils/probe/__init__.py",  # the app's own
                "f/app/packages/__init__.py", "f/app/packages/probe.py", "f/app/_vendor/probe.txt",
                "g/py/__init__.py", "g/py/_vendored_packages/__init__.py", "g/py/_vendored_packages/apipkg/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    root = str(tmp_path)
    assert host_copies(["probe"], root) == [
        (f"{root}/a/app/_vendor/probe", True), (f"{root}/b/app/vendored/__pycache__/probe.cpython-311.pyc", False),
        (f"{root}/b/app/vendored/probe.py", False), (f"{root}/c/app/extern/probe.pyc", False),
        (f"{root}/d/app/third_party/probe", True), (f"{root}/e/app/_vendor/w/vendored/probe", True)]
    assert host_copies(["apipkg", "__init__"], root) == []  # py's, which pytest imports; a vendoring package's own


@pytest.fixture(scope="module")
def vendored():
    """A made-up project's package and module vendored in an installed app under /usr/local (root only)."""
    name, app = f"ptprobe_{secrets.token_hex(4)}", f"ptapp_{secrets.token_hex(4)}"
    vendor = SITE / app / "_vendor"
    try:
        vendor.mkdir(parents=True)
    except OSError as e:
        pytest.skip(f"cannot write under {SITE} ({e})")
    try:
        for d in (SITE / app, vendor, vendor / name):
            d.mkdir(exist_ok=True)
            (d / "__init__.py").write_text("SECRET = 'the original code'\n" if d.name == name else "")
        (vendor / f"{name}_mod.py").write_text("SECRET = 'the original code'\n")
        subprocess.run(["/usr/bin/python3", "-m", "compileall", "-q", str(SITE / app)], check=True)
        os.chmod(SITE / app, 0o755)
        forget_index()
        yield name, app
    finally:
        shutil.rmtree(SITE / app, ignore_errors=True)
        forget_index()


def test_a_job_sees_no_vendored_copy_of_its_project(pool, vendored):
    name, app = vendored
    vendor = SITE / app / "_vendor"
    look = ["sh", "-c", f"cat {vendor}/{name}/__init__.py {vendor}/{name}_mod.py; cat {vendor}/__pycache__/{name}_mod.*; "
            f"python3 -B -c 'from {app}._vendor import {name}, {name}_mod; print({name}.SECRET, {name}_mod.SECRET)'"]
    seen = pool.exec(look, timeout=30)
    assert seen.stdout.count(b"the original code") == 5, seen  # what a job saw before: source, bytecode, import
    hidden = pool.exec(look, timeout=30, hide=[name, f"{name}_mod"])
    assert b"the original code" not in hidden.stdout + hidden.stderr and hidden.exit_code != 0, hidden


def test_the_harness_pytest_runs_with_every_vendored_copy_hidden(pool, tmp_path):
    """Debian's pytest imports ``attr`` and ``py``, which imports its vendored ``apipkg``: a task named
    like one of them, or like anything vendored under /usr, must not break the harness itself."""
    if not Path("/usr/lib/python3/dist-packages/pytest").is_dir():
        pytest.skip("no Debian python3-pytest on this host")
    names = {"attr", "apipkg", "_distutils_hack"} | set(HARNESS_NAMES)
    for here, dirs, files in os.walk("/usr/lib/python3/dist-packages"):
        if os.path.basename(here) in VENDOR_DIRS:
            names |= {n.split(".")[0] for n in dirs + files if n.endswith(".py") or n in dirs}
    assert host_copies(names), "nothing vendored under /usr/lib/python3: the check would prove nothing"
    test = ["sh", "-c", "cd /tmp && printf 'def test_a():\\n    assert 1\\n' > test_a.py && "
            "/usr/bin/python3 -I -B -m pytest -q -p no:cacheprovider test_a.py"]
    ran = pool.exec(test, timeout=60, hide=sorted(names))
    assert ran.exit_code == 0 and b"1 passed" in ran.stdout, ran
