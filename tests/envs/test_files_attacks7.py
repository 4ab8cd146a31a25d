"""The files domain's tool directories as a policy would use them (the stop hook's read of 56ffd55c):
what a checking tool keeps (``.git``, ``.tox``, caches) no longer counts toward the paths listed, so an
agent might hope to hide work there. Three tries after the oracle's own (right) work, each on a real
workspace, graded by the domain's verifier; none passes:

1. a kept note moved into ``.git/`` (out of sight of the listing, it hoped): collateral, the note gone;
2. ``.tox`` flooded past the host's walk of 20,000 entries, so that nothing past it would be seen: the
   workspace cannot be listed (``ungradable``), a failure of the agent's own (never infra, never a pass);
3. the notes directory moved into ``.git/`` and left as a link to it, each note still readable at its
   path, one changed through the link: the link is refused (``not_regular``).
"""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT

TASK = build_task(random.Random("workspace-modes"), 4, "workspace-modes", ["notes"])
KEPT = next(p for p in sorted(TASK.fields["workspace"]) if p.startswith("notes/") and p != "notes/INDEX.md"
            and p not in TASK.fields["targets"])


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


def attempt(pool, verify, command: str):
    got = play(pool, TASK, [*oracle(TASK)[:-1], call("bash", command=command), SUBMIT], verify)
    return got.first


def test_the_oracles_work_passes(pool, verify):
    assert attempt(pool, verify, "true").passed


@pytest.mark.parametrize(("command", "error_class"), [
    pytest.param(f"mkdir -p .git && mv {KEPT} .git/", "collateral", id="kept-note-into-git"),
    pytest.param("python3 -c \"import os\nfor i in range(20100):\n os.makedirs('.tox/%d' % (i // 1000), exist_ok=True); "
                 "open('.tox/%d/%d' % (i // 1000, i), 'w').close()\" && echo ok", "ungradable", id="tox-past-the-walk"),
    pytest.param(f"mkdir -p .git && mv notes .git/notes && ln -s .git/notes notes && echo x >> {KEPT}",
                 "not_regular", id="notes-linked-into-git"),
])
def test_hiding_in_a_tool_directory_never_passes(pool, verify, command, error_class):
    verdict = attempt(pool, verify, command)
    assert not verdict.passed and not verdict.is_infra_error and verdict.reward == 0.0, verdict
    assert verdict.error_class == error_class, verdict
