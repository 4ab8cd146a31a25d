"""doc episodes on the workspace kit: the scripted agents (the oracle passes, the no-op and every cheat fail,
never as infra errors), ``read_pdf`` (pages, a PDF the agent wrote, one that is not a PDF), the submit
arguments' numbers kept exact, and repair feedback that names locations, never the gold."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.doc._agents import CHEATS, WHY_IT_FAILS, oracle, reference
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._episode import exact_json, page_numbers
from posttrain.envs.workspace import noop_script
from posttrain.tasks import load_tasks

ENV = get_domain("doc")
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


@pytest.mark.slow
def test_the_oracle_passes_and_the_no_op_and_every_cheat_fail(pool, verify) -> None:
    """A PDF task (a total across pages), a clause (covenant), and a FinQA example; the README's sweep
    plays every agent on the examples and 200 generated tasks."""
    examples = {t.id: t for t in load_tasks(ROOT / "examples" / "tasks" / "doc.jsonl")}
    tasks = [examples[i] for i in ("doc-ex-pdf-0", "doc-ex-l4-1", "finqa-ACME/2019/page_12.pdf-1")]
    for task in tasks:
        got = play(pool, task, oracle(task), verify)
        assert got.done and [v.outcome for v in got.verdicts] == ["pass"], (task.id, got.first.feedback)
        assert all(c.ok and not c.result.startswith("Error") for c in got.calls), task.id
        for name, script in [("noop", noop_script), *CHEATS.items()]:
            got = play(pool, task, script(task), verify, resubmit=3)
            assert got.done and {v.outcome for v in got.verdicts} == {"fail"}, (task.id, name, got.first.feedback)
            if name in WHY_IT_FAILS:
                assert got.first.error_class in WHY_IT_FAILS[name].split(":")[0].split(" and "), (task.id, name)
            if name == "doctored-document" and not task.fields.get("pdf"):  # the edit itself went through
                assert got.calls[0].name == "edit" and got.calls[0].result.startswith("Edited document.md")


def test_read_pdf_reads_pages_and_refuses_what_is_not_a_pdf(pool, verify) -> None:
    task = build_task(random.Random(1), 2, "doc-agent-pdf", "total", pdf=True)
    pages = task.fields["document"].count("<!-- page ")
    got = play(pool, task, [
        call("read_pdf", pages="2"), call("read_pdf", pages=f"1-{pages + 1}"), call("read_pdf", pages="one"),
        call("write_file", path="fake.pdf", content="%PDF-1.4 not really"), call("read_pdf", path="fake.pdf"),
        call("bash", command="head -c 300000 /dev/urandom > noise.pdf"), call("read_pdf", path="noise.pdf"),
        call("read_pdf", path="../etc/passwd"), call("read_pdf"), call("submit")], verify)
    results = [c.result for c in got.calls]
    assert results[0].startswith(f"[Page 2 of {pages}]") and "[Page 1" not in results[0]
    assert results[1].startswith("Error:") and f"{pages} page(s)" in results[1]
    assert results[2].startswith("Error: pages must look like")
    assert results[4].startswith("Error: fake.pdf") and results[6].startswith("Error: noise.pdf")
    assert results[7].startswith("Error") and "outside" in results[7]
    assert results[8].startswith(f"[Page 1 of {pages}]")
    assert got.first.outcome == "fail"  # the empty submit: graded, a format fail
    assert all(c.ok for c in got.calls)  # each error above is a result the agent reads, never an invalid call


def test_read_pdf_shows_whole_pages_up_to_its_limit(pool) -> None:
    from posttrain.envs.doc._episode import MAX_PAGE_CHARS, read_pdf_tool
    from posttrain.envs.workspace import ToolContext
    from posttrain.sandbox import Workspace

    task = build_task(random.Random(3), 3, "doc-agent-long", "figure", pdf=True)
    with Workspace(pool, ENV.workspace_spec(task).initial) as ws:
        text = read_pdf_tool().run(ToolContext(ws), {})
    shown = text.count("[Page ")
    assert 1 <= shown < task.fields["document"].count("<!-- page ") and len(text) <= MAX_PAGE_CHARS + 200
    assert text.rstrip().endswith(f"[... read_pdf with pages={shown + 1}-{task.fields['document'].count('<!-- page ')} "
                                  "for the rest]")


def test_the_document_is_where_the_prompt_says() -> None:
    md = build_task(random.Random(2), 1, "doc-agent-md", "figure", pdf=False)
    pdf = build_task(random.Random(2), 1, "doc-agent-pdf", "figure", pdf=True)
    assert list(ENV.workspace_spec(md).initial) == ["document.md"]
    assert ENV.workspace_spec(md).initial["document.md"] == md.fields["document"].encode()
    assert list(ENV.workspace_spec(pdf).initial) == ["document.pdf"]
    assert ENV.workspace_spec(pdf).initial["document.pdf"].startswith(b"%PDF")
    assert "read_pdf" in ENV.workspace_spec(pdf).prompt and "document.md" in ENV.workspace_spec(md).prompt
    assert page_numbers("2-3,1", 4) == [2, 3, 1]


def test_submitted_numbers_stay_exact() -> None:
    """A tool call's numbers arrive as Decimals: the answer the verifier reads is the number written."""
    assert exact_json({"answer": Decimal("0.1"), "scale": "", "evidence": []}) == \
        '{"answer": 0.1, "scale": "", "evidence": []}'
    assert exact_json({"answer": Decimal("12345678901234567890.123")}) == '{"answer": 12345678901234567890.123}'
    assert exact_json({"answer": Decimal("NaN")}) == '{"answer": "NaN"}'  # a string: the verifier's format fail


def test_repair_feedback_names_the_location_never_the_gold(pool, verify) -> None:
    task = build_task(random.Random(5), 1, "doc-agent-repair", "figure", pdf=False)
    ref = reference(task)
    cite = ref["evidence"][0]
    moved = {"location": {**cite["location"], "column": "No such year"}, "quote": cite["quote"]}
    got = play(pool, task, [call("submit", answer=ref["answer"], scale=ref["scale"], evidence=[moved]),
                            call("submit", **ref)], verify)
    assert [v.outcome for v in got.verdicts] == ["fail", "pass"]
    shown = got.calls[0].result
    assert "No such year" in shown and "attempt 1 of 3" in shown and str(ref["answer"]) not in shown


def test_the_oracle_tells_one_question_about_different_reports_apart(pool, verify) -> None:
    from agent_play import play_runner

    from posttrain.envs.doc._episode import episode_prompt

    by_prompt: dict[str, list] = {}
    for task in ENV.generate_tasks(60, seed=0):
        by_prompt.setdefault(episode_prompt(task), []).append(task)
    tasks = next(group for group in by_prompt.values() if len(group) >= 2)[:2]
    trajs = play_runner(pool, tasks, "oracle", verify)
    assert [tr.verdicts[0].outcome for tr in trajs] == ["pass"] * len(tasks), [tr.verdicts[0].feedback for tr in trajs]
    assert all(any("md5sum" in str(c.arguments) for t in tr.turns for c in t.calls) for tr in trajs)


def _yes_no(task, gold: str):
    """``task`` asking a yes/no question instead (same document, same figures to cite)."""
    from posttrain.types import Task

    return Task(id=task.id + "-yn", domain=task.domain, prompt="Did the figure exceed zero?",
                fields={**task.fields, "answer": {"text": gold}}, tags=task.tags, limits=task.limits)


def test_a_wrong_yes_no_conclusion_ends_the_episode(pool, verify) -> None:
    """Told "wrong answer" to a yes/no question, the other one is the answer: a second try would be a
    full pass for reading the feedback (with rl.attempt_discount 1.0, the whole reward). A wrong
    conclusion to a two-way question is final; a right one with evidence that does not hold is still
    repaired (that feedback names locations, nothing of the answer)."""
    base = build_task(random.Random(5), 1, "doc-agent-yn", "figure", pdf=False)
    task, ref = _yes_no(base, "yes"), reference(base)
    got = play(pool, task, [call("submit", answer="no", scale="", evidence=ref["evidence"]),
                            call("submit", answer="yes", scale="", evidence=ref["evidence"])], verify)
    assert got.done and [(v.outcome, v.error_class) for v in got.verdicts] == [("fail", "wrong_answer")]
    cite = ref["evidence"][0]
    moved = {"location": {**cite["location"], "column": "No such year"}, "quote": cite["quote"]}
    got = play(pool, task, [call("submit", answer="Yes", scale="", evidence=[moved]),
                            call("submit", answer="yes", scale="", evidence=ref["evidence"])], verify)
    assert [(v.outcome, v.error_class) for v in got.verdicts] == [("fail", "evidence"), ("pass", None)]
    got = play(pool, base, [call("submit", answer=1, scale="", evidence=ref["evidence"]), call("submit", **ref)],
               verify)  # a number's wrong answer gives nothing away: repaired as before
    assert [v.outcome for v in got.verdicts] == ["fail", "pass"]


def test_a_repair_episode_ends_at_a_wrong_yes_no_conclusion_too(verify) -> None:
    """The single-answer repair episode (``episodes: repair``, doc tasks at max_attempts > 1): the same
    rule, carried by the verdict (``Verdict.ends_repair``), so a wrong "no" is not followed by a "yes"
    read from the feedback; a numeric question's wrong answer is repaired as before."""
    import json

    from posttrain.envs import RepairEnv
    from posttrain.types import Generation

    base = build_task(random.Random(5), 1, "doc-repair-yn", "figure", pdf=False)
    task, ref = _yes_no(base, "yes"), reference(base)

    def attempt(env, answer) -> bool:
        text = json.dumps({"answer": answer, "scale": "", "evidence": ref["evidence"]})
        return env.step(Generation((), (), (), text, "eos")).done

    env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
    env.reset(task)
    assert attempt(env, "no") and env.attempts == 1
    assert verify(task, json.dumps({"answer": "no", "scale": "", "evidence": ref["evidence"]})).ends_repair
    env.reset(base)
    assert not attempt(env, 1) and attempt(env, ref["answer"])


def test_probing_a_yes_no_question_through_repair_feedback_gets_nothing(verify) -> None:
    """A policy's tries at reading a two-way answer from the feedback (``episodes: repair``, 3 attempts):
    (1) the wrong conclusion with evidence broken on purpose, to tell "wrong answer" from "the conclusion
    is right but the evidence does not hold": wrong ends the episode, whatever the evidence; (2) a
    format error first, then the wrong conclusion, then the right one: the format feedback names no
    answer and the wrong one ends the episode before the third try. Each scores its fail."""
    import json

    from posttrain.envs import RepairEnv
    from posttrain.types import Generation

    base = build_task(random.Random(7), 1, "doc-repair-probe", "figure", pdf=False)
    task, ref = _yes_no(base, "no"), reference(base)
    cite = ref["evidence"][0]
    broken = [{"location": {**cite["location"], "column": "No such year"}, "quote": cite["quote"]}]

    def run(*answers: str) -> list:
        env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
        env.reset(task)
        verdicts = []
        for text in answers:
            step = env.step(Generation((), (), (), text, "eos"))
            verdicts.append(step.verdict)
            if step.done:
                break
        return [(v.outcome, v.error_class) for v in verdicts]

    assert run(json.dumps({"answer": "yes", "scale": "", "evidence": broken}),
               json.dumps({"answer": "no", "scale": "", "evidence": ref["evidence"]})) == [("fail", "wrong_answer")]
    assert run(json.dumps({"answer": "yes"}),
               json.dumps({"answer": "yes", "scale": "", "evidence": ref["evidence"]}),
               json.dumps({"answer": "no", "scale": "", "evidence": ref["evidence"]})) == [
        ("fail", "format"), ("fail", "wrong_answer")]


def test_read_pdf_refuses_a_page_number_too_long_to_read(pool, verify) -> None:
    task = build_task(random.Random(1), 2, "doc-agent-pdf-digits", "total", pdf=True)
    got = play(pool, task, [call("read_pdf", pages="9" * 5000), call("read_pdf", pages=f"1-{'9' * 5000}")], verify)
    assert [c.result[:32] for c in got.calls] == ["Error: pages must look like 3, 3"] * 2
