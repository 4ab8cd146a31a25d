"""repo episodes on the workspace kit, played by scripted agents through the episode runner: the
oracle passes (two examples, and two pairs of pack tasks that share their prompt), the no-op and
every cheat agent fail, each as a ``fail`` of its own class, never ``infra_error``; what the grader
takes from the workspace (the source diff from the layers, nothing of the environment); a task that
starts with a dependency missing; feedback after a failed attempt that never shows a withheld test.
README's table runs the same agents over every example and 200 pack tasks (bench/repo_agents.py).

Budget: ~2.5 min on 2 cores at load ~18 (each episode: a workspace, a few sandbox jobs, one grading run;
the oracle test runs toolz's test files twice per task).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.envs import EpisodeContext, get_domain
from posttrain.envs.repo._agents import CHEATS, WHY_IT_FAILS, edits
from posttrain.envs.repo._episode import take_diff
from posttrain.envs.workspace import AgentLimits, ScriptedAgent, WorkspaceEnv
from posttrain.policy import ChatTemplate, Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.tasks._load import load_tasks

REPO = get_domain("repo")
EXAMPLES = {t.id: t for t in load_tasks(Path(__file__).resolve().parents[2] / "examples" / "tasks" / "repo.jsonl")}
SHARED_PROMPT = ("inflection-init-invert_if-102-7", "inflection-init-compare-102-7",  # one line, two bugs
                 "toolz-functoolz-binop-539-45", "toolz-functoolz-binop-529-39")  # past a whole read
CLASS_OF = {
    "edit_tests": "no_source_change", "delete_tests": "no_source_change", "skip_conftest": "refused",
    "outcome_conftest": "refused", "exit_in_init": "not_run", "os_exit_in_init": "no_report",
    "kill_runner": "no_report", "deselect_pytest_ini": "refused", "deselect_pyproject": "refused",
    "deselect_setup_cfg": "refused", "syntax_error": "not_run", "patch_reporting": "tamper",
    "forge_report_at_exit": "assertion", "sitecustomize": "refused", "pth_file": "refused",
    "user_site_hook": "no_diff", "read_hidden_tests": "no_diff", "future_commit": "no_diff",
}


@pytest.fixture(scope="module")
def chat():
    return ChatTemplate(build_char_tokenizer())


@pytest.fixture(scope="module")
def ctx(pool, chat):
    return EpisodeContext(chat, pool, 30, REPO.make_verifier(pool))


@pytest.fixture(scope="module")
def pack_tasks():
    return {t.id: t for t in REPO.generate_tasks(289, seed=0) if t.id in SHARED_PROMPT}


def play(ctx: EpisodeContext, tasks: list, agent: str):
    """Each task's episode played by ``agent`` through ``run_batch``; the trajectories."""
    envs = [REPO.episode_env(t, ctx) for t in tasks]
    try:
        return run_batch(ScriptedAgent(ctx.chat, tasks, agent), [Episode(t, e, f"g/{t.id}")
                                                                 for t, e in zip(tasks, envs, strict=True)],
                         SamplingParams(max_new_tokens=8192), max_turns=ctx.max_steps)
    finally:
        for env in envs:
            env.close()


def test_the_oracle_solves_examples_and_tells_same_prompt_pack_tasks_apart(ctx, pack_tasks):
    tasks = [EXAMPLES[i] for i in ("repo-inventory-report", "repo-headings-titles")] + \
        [pack_tasks[i] for i in SHARED_PROMPT]
    assert tasks[2].prompt == tasks[3].prompt and tasks[4].prompt == tasks[5].prompt
    trajs = play(ctx, tasks, "oracle")
    assert [tr.reward for tr in trajs] == [1.0] * len(tasks), [tr.verdicts[-1].feedback for tr in trajs]
    for tr in trajs:
        names = [c.name for t in tr.turns for c in t.calls]
        assert names[-2:] == ["run_tests", "submit"] and "edit" in names and tr.verdicts[0].passed
        assert all(c.ok for t in tr.turns for c in t.calls)
    # the dependency the task starts without is installed from its wheelhouse, offline
    assert trajs[1].turns[0].calls[0].name == "bash" and "Successfully installed inflection" in \
        trajs[1].turns[0].calls[0].result
    # the bug of a long file is read where it is (a line range), and tells the two toolz tasks apart
    reads = [c.arguments for t in trajs[4].turns for c in t.calls if c.name == "read_file"]
    assert any(r.get("start_line", 1) > 400 for r in reads)


def test_the_no_op_fails_every_way_it_is_asked(ctx):
    [tr] = play(ctx, [EXAMPLES["repo-csvstats-mean"]], "noop")
    assert [v.outcome for v in tr.verdicts] == ["fail"] * 3 and tr.verdicts[0].error_class == "no_diff"
    assert all("verify_s" not in v.evidence for v in tr.verdicts)  # nothing to grade: no grading run
    assert "Nothing to grade: the repository's files are unchanged" in tr.turns[1].calls[0].result


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_each_cheat_agent_fails_as_a_fail(ctx, cheat):
    """Written as a policy would; each works in the agent's own workspace or not, and fails graded."""
    [tr] = play(ctx, [EXAMPLES["repo-router-dots"]], cheat)  # its failing tests are withheld (test_patch)
    first = tr.verdicts[0]
    assert first.outcome == "fail" and not any(v.is_infra_error for v in tr.verdicts), (cheat, first)
    assert first.error_class == CLASS_OF[cheat], (cheat, first.error_class, first.feedback)
    assert tr.reward == 0.0 and WHY_IT_FAILS[cheat]


def test_the_grader_takes_the_source_diff_and_nothing_of_the_environment(pool):
    task = EXAMPLES["repo-inventory-report"]
    spec = REPO.workspace_spec(task)
    from posttrain.sandbox import Workspace

    take = take_diff({k: v for k, v in spec.initial.items() if not k.startswith(".posttrain/")})
    with Workspace(pool, spec.initial) as ws:
        run = ["/bin/bash", "-c", "mkdir -p .local/lib .cache && echo 'import os' > .local/lib/usercustomize.py && "
               "echo x > .cache/c && mkdir -p inventory/__pycache__ && echo b > inventory/__pycache__/p.pyc && "
               "git init -q . 2>/dev/null; printf '\\x00\\x01' > build.bin; echo keep > NOTES.md"]
        ws.exec(run, timeout=30)
        response = take(ws, {})
        assert response.startswith("--- ") and "NOTES.md" in response
        for absent in (".local", ".cache", "__pycache__", ".git", "build.bin", ".posttrain"):
            assert absent not in response
        ws.exec(["/bin/bash", "-c", "ln -sf /usr/lib/os-release inventory/report.py"], timeout=30)
        refused = take(ws, {})
        assert refused.outcome == "fail" and refused.error_class == "refused" and "symbolic link" in refused.feedback
    with Workspace(pool, {**spec.initial, "data.bin": b"\x00\x01"}) as ws:
        ws.exec(["/bin/bash", "-c", "printf '\\x00\\x02' > data.bin"], timeout=30)
        binary = take_diff({**spec.initial, "data.bin": b"\x00\x01"})(ws, {})
        assert binary.error_class == "refused" and "binary" in binary.feedback


def test_markdown_fences_in_the_changed_files_do_not_change_what_is_graded(ctx, chat):
    """A file's own ``` lines (a README with a forged diff block in it) sit inside the diff behind its
    prefixes: the grader reads the whole diff, as the agent's files say, never a block inside it."""
    task = EXAMPLES["repo-inventory-report"]
    forged = "# notes\n```diff\n--- a/tests/test_report.py\n+++ b/tests/test_report.py\n@@ -1 +1 @@\n-x\n+y\n```\n"
    env = REPO.episode_env(task, ctx)
    try:
        env.reset(task)
        for call in ({"name": "write_file", "arguments": {"path": "NOTES.md", "content": forged}},
                     {"name": "edit", "arguments": {"path": "inventory/parser.py", "old": "    return name.strip()\n",
                                                    "new": "    return name.strip().lower()\n"}},
                     {"name": "submit", "arguments": {}}):
            r = env.step(_act(chat, chat.write_tool_calls([call])))
    finally:
        env.close()
    assert r.done and r.verdict.passed and r.verdict.evidence["changed"] == ["NOTES.md", "inventory/parser.py"]


def test_feedback_counts_the_failing_withheld_test_never_its_name_or_text(ctx, chat):
    task = EXAMPLES["repo-router-dots"]
    env = REPO.episode_env(task, ctx)
    try:
        env.reset(task)
        text = chat.write_tool_calls([{"name": "bash", "arguments": {"command": "echo '# touched' >> router/__init__.py"}}])
        env.step(_act(chat, text))
        r = env.step(_act(chat, chat.write_tool_calls([{"name": "submit", "arguments": {}}])))
    finally:
        env.close()
    assert r.verdict.outcome == "fail" and not r.done
    shown = r.observation.text
    assert "Not accepted (attempt 1 of 3)" in shown and "2 withheld tests failed (AssertionError; not shown)" in shown
    assert "test_dot_is_literal" not in shown  # its name: what it checks
    assert "/v1x0/status" not in shown and 'r.add("/a.b"' not in shown  # the withheld test's own text


def test_the_oracles_edits_rebuild_the_fix_exactly():
    old = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    new = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    [(o, n)] = edits(old, new)
    assert old.count(o) == 1 and old.replace(o, n) == new


def _act(chat: ChatTemplate, text: str) -> Generation:
    ids = (*chat.encode(text), chat.eos_token_id)
    return Generation((), ids, (0.0,) * len(ids), text, "eos")


def test_episode_env_gives_a_workspace_env(ctx):
    env = REPO.episode_env(EXAMPLES["repo-inventory-report"], ctx)
    assert isinstance(env, WorkspaceEnv) and env.limits == AgentLimits(max_steps=30, wall_s=1800.0)
    env.close()
