"""A second read of the cad verifier as a reward-hacking policy would read it: a file read the static
check cannot see (a path held in a variable, ``_script.py``) aimed at what could block OpenSCAD instead
of feeding it a part. A read that blocked would spend the render's wall time with no CPU time, which is
what a job starved by a loaded host looks like, and could turn the candidate's fail into an infra
error. In the render's sandbox none of them blocks: each is the candidate's ``build`` fail, at once."""

from __future__ import annotations

import shutil
import time

import pytest

from posttrain.envs import get_domain
from posttrain.envs.cad import fenced
from posttrain.envs.cad._hacks import exploit_tasks
from posttrain.envs.cad._script import script_problem

ENV = get_domain("cad")
BLOCKERS = ["/dev/stdin", "/proc/self/fd/0", "/dev/tty", "/proc/kmsg", "/proc/self/fd/3"]


@pytest.mark.skipif(shutil.which("openscad") is None, reason="openscad is not installed (make domain-deps)")
def test_a_device_path_held_in_a_variable_never_blocks_the_render(pool) -> None:
    task = exploit_tasks(ENV)["pin"]
    verify = ENV.make_verifier(pool)
    scripts = [f'p = "{path}";\nlinear_extrude(p, height = 6);' for path in BLOCKERS]
    assert all(script_problem(s) is None for s in scripts)  # the static check cannot see a path in a variable
    for script in scripts:
        start = time.monotonic()
        verdict = verify(task, fenced(script))
        assert (verdict.outcome, verdict.error_class) == ("fail", "build"), (script, verdict)
        assert time.monotonic() - start < 30, script
