"""The repo tasks' withheld tests against a policy that looks for them from its workspace (thirteenth read).

Since 3823be2 a pack task withholds about half of its failing test functions (``_withhold.py``), so an
echo of the visible tests' inputs fails. Played as a policy in the task's workspace, the routes to the
withheld text or its expected values, measured over the 123 pack tasks that withhold (208 functions):

- a copy of the project's *tests* under /usr: the Google Cloud SDK vendors cachetools 5.5.0 as a source
  tree, ``third_party/cachetools/{src/cachetools,tests}``. ``_hide`` hid ``src/cachetools`` (named like the
  package), not ``tests/`` beside it: every assertion of 15 of the 114 withheld cachetools functions was
  there (``test_typedmethodkey``, ``test_lru``, ...), all of them for 2 of 64 tasks, one ``cat`` from the
  workspace. Now the task's test modules are hidden too (``_task.suite_modules``: ``tests``, ``test_lru``,
  ``test_inflection``): the planted copy below was read before and is not now.
- a parametrize table only the withheld test read, left in the visible file (``UNDERSCORE_TO_HUMAN`` for
  ``test_humanize``): its inputs and expected outputs, 2 of 5 inflection tasks; now withheld with it.
- what does not work (pinned): the workspace holds no ``.git``, no bytecode, no ``egg-info``/``RECORD``, and
  no file of it names a withheld function (12 of 208 short names appear, each another test's of that name:
  ``test_self_keyword`` in ``test_cachedmethod.py`` for the one in ``test_cached.py``); the prompt names
  visible tests only. Left alone: 36 of 208 withheld functions have every assertion line in one visible
  sibling test (``test_ttu_expire`` in ``test_tlru.py`` against ``test_ttl_expire`` in ``test_ttl.py``), a
  suite's own redundancy, the visible one testing another class; and the feedback between attempts
  (``_grade.py``'s, counted there).

Honest agents still pass: the oracle on three withholding tasks, one per project, with the wider hiding.

Budget: ~25 s on 2 cores (four workspaces, two graded runs, three oracle episodes).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from posttrain.envs import EpisodeContext, get_domain
from posttrain.envs.repo import ENV
from posttrain.envs.repo._gen import load_packs, record_of
from posttrain.envs.repo._task import OWN_NAMES, initial_tree, project_modules, suite_modules, verifier_tree
from posttrain.envs.repo._withhold import withheld_units
from posttrain.envs.workspace import ScriptedAgent
from posttrain.policy import ChatTemplate, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.sandbox import Workspace

REPO = get_domain("repo")
TASK = "cachetools-keys-binop-26-15"  # CacheWrapperTest::test_self_keyword withheld (tests/test_cached.py)
HONEST = ("cachetools-init-return_none-372-8", "inflection-init-return_none-166-8", "toolz-itertoolz-boolop-985-7")
GCLOUD_CACHETOOLS = Path("/usr/lib/google-cloud-sdk/platform/gsutil/third_party/cachetools/tests/test_keys.py")


def _rec(task_id: str) -> dict:
    return next(r for r in load_packs() if r["id"] == task_id)


def _task(task_id: str):
    return ENV.parse_task(record_of(_rec(task_id)), "repo packs")


def _held(task_id: str) -> list[str]:
    rec = _rec(task_id)
    return withheld_units(rec, initial_tree({"repo": {"project": rec["project"], "patch": rec["patch"]}}))


@pytest.fixture(scope="module")
def planted(usr_local):
    """The task's pristine project as a vendored source tree under /usr/local (root only), as the Google
    Cloud SDK ships cachetools: ``third_party/cachetools/{src/cachetools, tests}``; and a second copy of
    its test files in a directory that is no package (``tests/`` with a data file, no ``__init__``)."""
    def build(top: Path) -> None:
        tree = verifier_tree(_task(TASK).fields)
        for path, data in tree.items():
            if path.startswith(("src/", "tests/")):
                (top / "third_party" / "cachetools" / path).parent.mkdir(parents=True, exist_ok=True)
                (top / "third_party" / "cachetools" / path).write_bytes(data)
        (top / "third_party" / "cachetools" / "tox.ini").write_text("[tox]\n")
        (top / "loose" / "tests").mkdir(parents=True)
        (top / "loose" / "tests" / "test_cached.py").write_bytes(tree["tests/test_cached.py"])
        (top / "loose" / "tests" / "cases.json").write_text("[]\n")
        for p in [top, *top.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)

    with usr_local("attacks13", build) as top:
        yield top


def _withheld_text(task_id: str) -> tuple[str, str]:
    """The withheld function's name and its definition's text in the verifier's copy (one withheld)."""
    [unit] = _held(task_id)
    path, name = unit.split("::")[0], unit.split("::")[-1]
    text = verifier_tree(_task(task_id).fields)[path].decode()
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)
    return name, ast.get_source_segment(text, node) or ""


def test_a_copy_of_the_projects_tests_under_usr_is_not_read_from_the_workspace(pool, planted):
    task = _task(TASK)
    spec = REPO.workspace_spec(task)
    name, body = _withheld_text(TASK)
    assert f"def {name}(" not in initial_tree(task.fields)["tests/test_cached.py"].decode()  # withheld
    look = ["sh", "-c", f"grep -rh -A40 --include=test_cached.py 'def {name}(' {planted}; "
            f"grep -rl 'def test_typedmethodkey(' {GCLOUD_CACHETOOLS.parent} 2>/dev/null; true"]
    before = tuple(sorted({*project_modules(task.fields), *OWN_NAMES}))  # the hide of 3823be2's day
    with Workspace(pool, spec.initial, hide=before) as ws:
        seen = ws.exec(look, timeout=60).stdout.decode()
    assert seen.count(f"def {name}(") == 2 and body.splitlines()[-1].strip() in seen  # both copies, its checks
    with Workspace(pool, spec.initial, hide=spec.hide) as ws:
        now = ws.exec(look, timeout=60)
    assert now.stdout == b"", now.stdout[:300]  # (and the SDK's own copy, where the host has it)
    assert {"tests", "test_cached"} <= set(spec.hide)


def test_the_workspace_itself_holds_nothing_of_the_withheld_tests(pool):
    """The strongest tries from the workspace, pinned as failing: history, bytecode, metadata, a grep of
    every file for the withheld function's name, on three tasks (one per project)."""
    for task_id in HONEST:
        task = _task(task_id)
        spec = REPO.workspace_spec(task)
        names = [u.split("::")[-1] for u in _held(task_id)]
        assert names and not any(re.search(rf"\b{n}\b(?!\.py)", task.prompt) for n in names), task_id
        pattern = "|".join(f"def {n}\\(" for n in names)
        tries = ("git log --all --oneline 2>&1 | head -1; git fsck --lost-found 2>&1 | head -1; "
                 "find . -name '*.pyc' -o -name '.git' -o -name '*.egg-info' -o -name RECORD -o -name SOURCES.txt; "
                 f"grep -rlE '{pattern}' . /tmp 2>/dev/null; true")
        with Workspace(pool, spec.initial, hide=spec.hide) as ws:
            out = ws.exec(["sh", "-c", tries], timeout=60).stdout.decode()
        assert "not a git repository" in out and ".pyc" not in out and "def " not in out, (task_id, out)
        assert not [line for line in out.splitlines() if line.startswith("./")], (task_id, out)


def test_suite_modules_names_each_projects_tests():
    got = {t: suite_modules(_task(t).fields) for t in HONEST}
    assert "tests" in got[HONEST[0]] and "test_lru" in got[HONEST[0]]
    assert got[HONEST[1]] == ("test_inflection",)
    assert "toolz" in got[HONEST[2]] and "test_itertoolz" in got[HONEST[2]]


def test_honest_agents_still_pass(pool):
    chat = ChatTemplate(build_char_tokenizer())
    ctx = EpisodeContext(chat, pool, 30, REPO.make_verifier(pool))
    tasks = [_task(t) for t in HONEST]
    envs = [REPO.episode_env(t, ctx) for t in tasks]
    try:
        trajs = run_batch(ScriptedAgent(chat, tasks, "oracle"), [Episode(t, e, f"g/{t.id}")
                                                                 for t, e in zip(tasks, envs, strict=True)],
                          SamplingParams(max_new_tokens=8192), max_turns=ctx.max_steps)
    finally:
        for env in envs:
            env.close()
    assert [tr.reward for tr in trajs] == [1.0] * 3, [tr.verdicts[-1].feedback for tr in trajs]
    for tr in trajs:  # its own run of the visible tests worked in the workspace with the wider hiding
        run = [c for t in tr.turns for c in t.calls if c.name == "run_tests"]
        assert run and all(c.ok for c in run)


TABLES = {"inflection-init-remove_assign-198-4": "UNDERSCORE_TO_HUMAN",  # test_humanize withheld
          "inflection-init-remove_assign-414-4": "STRING_TO_TABLEIZE"}  # test_tableize withheld


def test_a_withheld_tests_parametrize_table_is_withheld_with_it(pool):
    """The table only the withheld test read was left in the workspace: its inputs and expected outputs,
    an echo's whole table (2 of the 5 inflection tasks that withhold). Now it goes with the test; the
    reference still passes."""
    verify = REPO.make_verifier(pool)
    for task_id, table in TABLES.items():
        task = _task(task_id)
        assert f"{table} = (" not in initial_tree(task.fields)["test_inflection.py"].decode(), task_id
        assert f"{table} = (" in verifier_tree(task.fields)["test_inflection.py"].decode()
        assert verify(task, str(task.reference)).passed, task_id
