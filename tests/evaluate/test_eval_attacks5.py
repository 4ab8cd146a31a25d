"""Adversarial reads of evaluation: a served model that writes past the evaluation's token budget is
scored on what it was asked for, and one whose reply's text is not its token ids on its ids; two
evaluations over different task sets are never judged as one comparison (a gate fails closed, the
report says so); a held-out task re-spelt in other characters (zero-width, soft hyphens, look-alike
letters) is still the training task it copies."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_endpoint import send_completion, write_math_suite

from posttrain.policy import build_char_tokenizer

TOK = build_char_tokenizer()
N_TASKS = 6
REASONING = "Let me think step by step about this sum carefully before answering. "


def _answer(prompt: str) -> int:
    a, b = map(int, re.search(r"(\d+)\+(\d+)\?", prompt).groups())
    return a + b


class _Handler(BaseHTTPRequestHandler):
    """Scripted servers keyed by the request's model name; each answers the sum the prompt asks.

    - ``honest``: a short right answer within ``max_tokens``;
    - ``verbose``: a right answer after reasoning past ``max_tokens`` (a server that ignores it; an
      honest server cut at ``max_tokens`` has no answer yet);
    - ``verbose-cut``: the same reasoning, honestly cut at ``max_tokens`` (finish_reason length);
    - ``two-faced``: the right answer as its ``text``, a wrong one as its ``token_ids`` (and logprobs)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        right = f"\\boxed{{{_answer(TOK.decode(body['prompt']))}}}"
        finish = "stop"
        text = right if body["model"] in ("honest", "two-faced") else REASONING + right
        ids = [*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id]
        if body["model"] == "two-faced":
            ids = [*TOK("\\boxed{0}", add_special_tokens=False)["input_ids"], TOK.eos_token_id]
        if body["model"] == "verbose-cut":
            ids, finish = ids[: body["max_tokens"]], "length"
            text = TOK.decode(ids, skip_special_tokens=True)
        send_completion(self, text, ids, finish, usage={"completion_tokens": 1})  # usage is never read

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> tuple[Path, str]:
    return write_math_suite(tmp_path_factory.mktemp("suite"), TOK, N_TASKS)


def _eval(run_cli, server, suite, model: str, *extra: str) -> tuple[int, dict | None, str]:
    tasks, tok = suite
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--endpoint", server, "--model-name", model,
                             "--tokenizer", tok, "--max-new-tokens", "24", "--k", "1", "--json", "--workers", "1",
                             *extra)
    return code, (json.loads(out) if code == 0 else None), err


# -- the endpoint of the model under test -----------------------------------------------------------

def test_an_honest_endpoint_within_its_budget_passes(run_cli, server, suite):
    code, s, err = _eval(run_cli, server, suite, "honest")
    assert code == 0, err
    assert s["pass@1"] == 1.0 and s["n_tasks"] == N_TASKS
    code, s, err = _eval(run_cli, server, suite, "verbose-cut")  # cut honestly before its answer: it fails
    assert code == 0, err
    assert s["pass@1"] == 0.0 and s["n_tasks"] == N_TASKS


def test_an_endpoint_that_writes_past_max_tokens_is_cut_there(run_cli, server, suite, tmp_path):
    # 80 tokens of reasoning and answer for --max-new-tokens 24: scored whole, every task passed (6 of
    # 6), where the same model held to its 24 tokens passes none (verbose-cut above)
    code, s, err = _eval(run_cli, server, suite, "verbose", "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert s["pass@1"] == 0.0 and s["n_tasks"] == N_TASKS
    record = json.loads((tmp_path / "r" / "records.jsonl").read_text().splitlines()[0])
    assert len(record["completion_ids"]) == 24 and record["completion"] == REASONING[:24]


def test_an_endpoint_whose_text_is_not_its_ids_is_graded_on_its_ids(run_cli, server, suite, tmp_path):
    # the right answer as the reply's text, a wrong one (\boxed{0}) as its token ids: the text was
    # graded (6 of 6) while the record's ids and logprobs, and a repair episode's context, hold the wrong
    # answer; the ids decoded are what a local sampler's text is (Generation.text)
    code, s, err = _eval(run_cli, server, suite, "two-faced", "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert s["pass@1"] == 0.0 and s["n_tasks"] == N_TASKS
    record = json.loads((tmp_path / "r" / "records.jsonl").read_text().splitlines()[0])
    assert record["completion"] == "\\boxed{0}" and record["outcome"] == "fail"


# -- a comparison is of the same tasks ---------------------------------------------------------------

def _records(tmp_path: Path, name: str, passed: range, tasks: range) -> Path:
    from posttrain.evaluate.records import EvalRecord, write_records

    return write_records(tmp_path / f"{name}.jsonl", [
        EvalRecord(f"m{i}", "math", "pass" if i in passed else "fail", float(i in passed)) for i in tasks])


def test_a_comparison_on_fewer_tasks_is_not_judged_as_the_same_one(tmp_path):
    from posttrain.evaluate.baseline import compare, load_baseline
    from posttrain.evaluate.records import read_records
    from posttrain.evaluate.summary import summarize

    # the baseline passed 20 of 40 tasks; the current model passes 5 of them (a regression), and its
    # evaluation keeps only the 10 it was tried on first (--limit 10, or a responses file answering 10)
    base = load_baseline(_records(tmp_path, "base", range(20), range(40)))
    whole = compare(summarize(read_records(_records(tmp_path, "whole", range(5), range(40))), n_boot=200), base)
    assert whole["regressions"] == ["math", "overall"] and whole["not_comparable"] == []
    part = compare(summarize(read_records(_records(tmp_path, "part", range(5), range(10))), n_boot=200), base)
    # was regressions [] and delta 0.0 (0.5 on 10 tasks against 0.5 on 40): judged as the same comparison
    assert part["not_comparable"] == ["math", "overall"]
    assert part["regressions"] == ["math (different task sets)", "overall (different task sets)"]
    row = part["overall"]
    assert row["comparable"] is False and not row["regressed"] and row["delta"] == 0.0
    assert row["note"] == "different task sets (current: 10 tasks, baseline: 40); not judged"
    same = compare(summarize(read_records(_records(tmp_path, "same", range(20), range(40))), n_boot=200), base)
    assert same["regressions"] == [] and same["not_comparable"] == [] and same["overall"]["comparable"] is True


def test_the_report_says_when_its_evaluations_are_over_different_tasks(tmp_path):
    from posttrain.evaluate.records import read_records
    from posttrain.evaluate.report import _eval_table
    from posttrain.evaluate.summary import summarize

    base = summarize(read_records(_records(tmp_path, "base", range(20), range(40))), n_boot=50)
    part = summarize(read_records(_records(tmp_path, "part", range(5), range(10))), n_boot=50)
    html = _eval_table({"base": base, "rl": part})  # was two rates side by side, 0.500 and 0.500
    assert "not comparable:</b> these evaluations are over different task sets: base (40 tasks), rl (10 tasks)" in html
    assert "not comparable" not in _eval_table({"base": base, "rl": base})


def _half_answered(tmp_path: Path) -> tuple[Path, Path]:
    """A baseline that passed 3 of the 6 tasks, and responses to only the 2 tasks they get right."""
    from posttrain.evaluate.records import EvalRecord, write_records

    base = write_records(tmp_path / "base.jsonl", [EvalRecord(f"m{i}", "math", "pass" if i < 3 else "fail",
                                                              float(i < 3)) for i in range(N_TASKS)])
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"task_id": f"m{i}", "response": f"\\boxed{{{2 * i + 10}}}"}) + "\n"
                                 for i in range(2)))
    return base, responses


def test_a_gate_fails_when_the_responses_leave_out_the_tasks_they_fail(tmp_path, run_cli, suite):
    # the baseline passed 3 of the 6 tasks; the current responses answer only the 2 they get right:
    # pass@1 1.0 over 2 tasks, and --fail-on-regression exited 0 (no regression found: a gain of 0.5)
    tasks, _ = suite
    base, responses = _half_answered(tmp_path)
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--baseline", str(base),
                             "--fail-on-regression", "--k", "1", "--json", "--workers", "1")
    s = json.loads(out)
    assert s["pass@1"] == 1.0 and s["n_tasks"] == 2 and "no response for 4 task(s)" in err
    assert s["unanswered_tasks"] == 4  # (summary.json said nothing of the 4 before: read alone, 1.0 of all)
    assert code == 1 and s["baseline"]["regressions"] == ["math (different task sets)", "overall (different task sets)"]
    full = tmp_path / "full.jsonl"  # the same responses, the others answered wrong: compared, not regressed
    full.write_text(responses.read_text() + "".join(json.dumps({"task_id": f"m{i}", "response": "\\boxed{0}"}) + "\n"
                                                    for i in range(2, N_TASKS)))
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(full), "--baseline", str(base),
                             "--fail-on-regression", "--k", "1", "--json", "--workers", "1")
    assert code == 0, err
    assert json.loads(out)["baseline"]["not_comparable"] == [] and json.loads(out)["unanswered_tasks"] == 0


def test_a_gate_that_fails_on_different_task_sets_says_why(tmp_path, run_cli, suite):
    # printed (no --json): the row read "0.500 -> 1.000 (+0.500)" and the run exited 1, no line saying why
    tasks, _ = suite
    base, responses = _half_answered(tmp_path)
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--baseline", str(base),
                             "--fail-on-regression", "--k", "1", "--workers", "1")
    assert code == 1
    line = next(x for x in out.splitlines() if "vs baseline overall" in x)
    assert "NOT COMPARABLE: different task sets (current: 2 tasks, baseline: 6)" in line and "+0.500" not in line


# -- decontamination reads a copy re-spelt in other characters as the copy ---------------------------

RESPELT = {
    "zero-width": lambda s: " ".join(w[:1] + "\u200b" + w[1:] if len(w) > 2 else w for w in s.split(" ")),
    "soft hyphen": lambda s: " ".join(w[:1] + "\u00ad" + w[1:] if len(w) > 2 else w for w in s.split(" ")),
    "look-alikes": lambda s: s.translate(str.maketrans("aeoAEO", "\u0430\u0435\u043e\u0410\u0415\u041e")),
}


@pytest.mark.parametrize("how", sorted(RESPELT))
def test_a_held_out_split_respelt_from_the_training_pool_is_refused(tmp_path, how):
    import dataclasses

    from posttrain.envs import get_domain, task_to_record
    from posttrain.errors import UserError
    from posttrain.evaluate.decontaminate import check_clean_split

    train = get_domain("math").generate_tasks(20, seed=0)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in train))
    copies = [dataclasses.replace(t, id=f"{t.id}-copy", prompt=RESPELT[how](t.prompt)) for t in train]
    assert all(c.prompt != t.prompt for c, t in zip(copies, train, strict=True))
    with pytest.raises(UserError, match="20 of 20 eval tasks overlap"):  # was clean: 0 of 20
        check_clean_split(path, copies)
    check_clean_split(path, get_domain("math").generate_tasks(20, seed=1))  # other problems stay clean
