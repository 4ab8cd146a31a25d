"""Records of episodes (``train._runlog.trajectory_records``): turns, cut episodes, feedback labels;
and the report's per-turn trajectory viewer over them. Hand-made trajectories, exact expectations."""

from __future__ import annotations

import json

from posttrain.evaluate.records import trajectory_records, write_records
from posttrain.evaluate.report import write_report
from posttrain.types import Task, Trajectory, Turn, Verdict

TOOL_TASK = Task(id="t1", domain="tool", prompt="Weather?", fields={})


def _decode(ids):
    return "|".join(map(str, ids))


def test_multi_turn_records_carry_each_turn_and_a_cut_episode_gets_a_truncated_record():
    tool = Trajectory("t1", "g", 0, (
        Turn((1, 2, 3), (4, 5), (0.0, 0.0), "eos", None, "<call a>"),
        Turn((6,), (7,), (0.0,), "stop", None, "<call b>"),
        Turn((8, 9), (10,), (0.0,), "eos", Verdict("pass", 1.0), "done")), 1.0)
    [rec] = trajectory_records(TOOL_TASK, tool, stage="eval", step=None, wall_s=0.0, decode=_decode)
    assert rec.outcome == "pass" and rec.completion == "done"
    assert rec.prompt_ids == (1, 2, 3, 4, 5, 6, 7, 8, 9) and rec.completion_ids == (10,)
    assert rec.extra["turns"] == [
        {"observation": None, "action": "<call a>", "stop_reason": "eos", "verdict": None},
        {"observation": "6", "action": "<call b>", "stop_reason": "stop", "verdict": None},
        {"observation": "8|9", "action": "done", "stop_reason": "eos", "verdict": "pass"}]
    assert rec.to_json()["turns"] == rec.extra["turns"]

    cut = Trajectory("t1", "g", 1, (Turn((1,), (2,), (0.0,), "eos", None, "<call a>"),
                                    Turn((3,), (4, 5), (0.0, 0.0), "length", None, "<ca")), 0.0,
                     truncated=True, cut_by="max_tokens")
    [rec] = trajectory_records(TOOL_TASK, cut, stage="eval", step=None, wall_s=0.0)
    assert (rec.outcome, rec.reward, rec.error_class, rec.sample_idx) == ("fail", 0.0, "truncated", 1)
    assert "max_tokens" in rec.feedback and rec.extra["turns"][1]["observation"] == "<1 tokens>"

    one = Trajectory("t1", "g", 0, (Turn((1,), (2,), (0.0,), "eos", Verdict("fail", 0.0), "x"),), 0.0)
    [rec] = trajectory_records(TOOL_TASK, one, stage="eval", step=None, wall_s=0.0)
    assert "turns" not in rec.to_json()  # one-turn records keep their shape


def test_feedback_source_says_what_the_feedback_showed():
    split = Task(id="r1", domain="code", prompt="def f(x):", fields={
        "test": "def check(f):\n    assert f(1) == 2\n", "hidden_test": "def check(f):\n    assert f(2) == 3\n",
        "entry_point": "f"})
    plain = Task(id="c1", domain="code", prompt="def f(x):", fields={"test": "x", "entry_point": "f"})

    def sources(task, first_error):
        traj = Trajectory(task.id, "g", 0, (
            Turn((1,), (2,), (0.0,), "eos", Verdict("fail", 0.0, error_class=first_error), "a"),
            Turn((3,), (4,), (0.0,), "eos", Verdict("pass", 1.0), "b")), 1.0)
        return [r.feedback_source for r in trajectory_records(task, traj, stage="eval", step=None, wall_s=0.0)]

    # a split task's failing visible test is public; only the hidden tests' count is ever shown
    assert sources(split, "assertion") == ["none", "public_tests"]
    assert sources(plain, "assertion") == ["none", "hidden_tests"]  # the task's own tests were shown
    assert sources(split, "syntax") == ["none", "error"]
    hidden_field = Task(id="h1", domain="code", prompt="def f(x):",
                        fields={"test": "x", "entry_point": "f", "hidden_test": "def check(f):\n    assert f(2) == 3\n"})
    assert sources(hidden_field, "assertion") == ["none", "public_tests"]


def test_report_shows_each_turn_and_the_episode_figures(tmp_path):
    tool = Trajectory("t1", "g", 0, (
        Turn((1,), (4,), (0.0,), "eos", None, "<tool_call>get_weather</tool_call>"),
        Turn((6,), (7,), (0.0,), "eos", Verdict("fail", 0.0, feedback="Wrong tool calls."), "It rains.")), 0.0)
    records = trajectory_records(TOOL_TASK, tool, stage="eval/rl", step=None, wall_s=0.0,
                                 decode=lambda ids: '{"status": "ok"}')
    write_records(tmp_path / "eval" / "rl.jsonl", records)
    figures = {"first_attempt_pass_rate": 0.0, "post_repair_pass_rate": 0.0, "tool_call_validity": 0.625,
               "turns": 2.0, "episode_tokens": 3.0, "truncation_rate": 0.25}
    (tmp_path / "summary.json").write_text(json.dumps({"eval": {"rl": {"pass@1": 0.0, "episodes": figures}}}))
    html = write_report(tmp_path).read_text()
    assert "<h3>Episodes</h3>" in html and "<td>0.625</td>" in html and "<td>0.250</td>" in html
    turns = html.split('<table class="review turns">', 1)[1].split("</table>", 1)[0]
    assert turns.count('<tr class="turn">') == 2
    assert "(the prompt)" in turns and "&lt;tool_call&gt;get_weather&lt;/tool_call&gt;" in turns
    assert "{&quot;status&quot;: &quot;ok&quot;}" in turns and "It rains." in turns
    assert 'no verdict' in turns and '<span class="badge fail">fail</span>' in turns
