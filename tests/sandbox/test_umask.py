"""The sandbox works the same under any umask of the process that runs it.

``mkdir``'s mode is masked by the process's umask: under ``umask 077`` (a hardened host's login
default) a pool's directories were 0700 and every job an ``infra_error`` (bwrap, as the slot's own
uid, could not reach the slot's places: "Can't find source path .../pts: Permission denied"); under
``umask 0`` a job's files were 0666. Now the sandbox's own directories and a job's files have exact
modes (``_fs.make_dir``, ``_fs.write_exact``) and every job starts with umask 022.
"""

from __future__ import annotations

import os

import pytest

from posttrain.sandbox import open_pool


@pytest.mark.parametrize("mask", [0o077, 0o000])
def test_a_pool_opened_under_any_umask_runs_jobs_alike(mask: int) -> None:
    old = os.umask(mask)
    try:
        with open_pool(size=1) as pool:
            shell = pool.exec(["sh", "-c", "umask; echo x > made; stat -c '%a' d/given made d"],
                              files={"d/given": b"g\n"}, timeout=20)
            python = pool.run_python("import os; open('made', 'w').close(); "
                                     "print(oct(os.umask(0)), *(oct(os.stat(p).st_mode & 0o777) for p in ('made', 'd')))",
                                     files={"d/given": b"g\n"}, timeout=20)
    finally:
        os.umask(old)
    assert shell.outcome == "ok" and python.outcome == "ok", (shell, python)
    assert shell.stdout.decode().split() == ["0022", "644", "644", "755"], shell.stdout
    assert python.stdout.decode().split() == ["0o22", "0o644", "0o755"], python.stdout
