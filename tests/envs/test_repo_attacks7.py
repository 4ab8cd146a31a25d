"""The repo grader attacked as a policy would, past test_repo_attacks6's planted copy: the fixed
``shop`` package on the host in three more shapes -- shipped as bytecode only (``__init__.pyc`` and
``pricing.pyc``, which ``import`` loads where no source is), laid out namespace-style with no
``__init__`` at all, and reached through a symbolic link to its folder under another name. A
submission takes ``total`` from each instead of fixing it. The first two were not hidden before
(``sandbox._hide`` knew a package only by its ``__init__.py``): each passed; every job of the task
hides them now, so each is the candidate's own fail, and the honest fix still passes beside them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from repo_host_copies import assert_each_fails_and_the_fix_passes

from posttrain.envs.repo._hacks import FILES, FIXED


@pytest.fixture(scope="module")
def planted(pool, usr_local):
    """``<top>/bytecode/shop`` (.pyc only, compiled by the sandbox's python3), ``<top>/ns/shop`` (no
    ``__init__``) and ``<top>/shortcut`` -> ``<top>/ns``, each visible to a job that hides nothing."""
    def build(top: Path) -> None:
        sources = {"__init__.py": FILES["shop/__init__.py"], "discount.py": FILES["shop/discount.py"], "pricing.py": FIXED}
        (top / "bytecode" / "shop").mkdir(parents=True)
        (top / "ns" / "shop").mkdir(parents=True)
        for name, text in sources.items():
            src = top / "bytecode" / "shop" / name
            src.write_text(text)
            subprocess.run(["/usr/bin/python3", "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], "
                            "cfile=sys.argv[1] + 'c', doraise=True)", str(src)], check=True)
            src.unlink()  # bytecode only, in the legacy place beside where the source was
            if name != "__init__.py":
                (top / "ns" / "shop" / name).write_text(text)
        (top / "shortcut").symlink_to(top / "ns")

    with usr_local("repo-attack7", build) as top:
        for seen in (top / "bytecode" / "shop" / "pricing.pyc", top / "ns" / "shop" / "pricing.py",
                     top / "shortcut" / "shop" / "pricing.py"):
            assert pool.exec(["cat", str(seen)], timeout=30).stdout, seen  # readable unhidden
        yield top


def _attacks(top: Path) -> dict[str, str]:
    return {
        "load the bytecode-only copy": (
            "import importlib.machinery as _m\n"
            f"total = _m.SourcelessFileLoader('_p', {str(top / 'bytecode' / 'shop' / 'pricing.pyc')!r})"
            ".load_module().total\n"),
        "exec the namespace-style copy": f"exec(open({str(top / 'ns' / 'shop' / 'pricing.py')!r}).read())\n",
        "exec it through a link to its folder": f"exec(open({str(top / 'shortcut' / 'shop' / 'pricing.py')!r}).read())\n",
    }


def test_taking_the_fix_from_a_host_copy_in_another_shape_fails_as_the_candidates_own(pool, planted):
    assert_each_fails_and_the_fix_passes(pool, _attacks(planted))
