"""A helper's fourth adversarial read of the doc and files verifiers: ways to earn a signal without
the work it stands for, each a standing case (the verifier's own grader, real workspaces)."""

from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.doc._anchors import tatqa_records
from posttrain.envs.doc._check import check_doc
from posttrain.envs.files._agents import oracle, work
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT
from posttrain.types import Task

FILES = get_domain("files")
DATA = Path(__file__).parent / "data"


def _files_tasks() -> list[Task]:
    """Every kind of files work with inputs: a CSV, item files, a Latin-1 export, notes, a database."""
    return [build_task(random.Random(f"attacks4-{k}"), lv, f"files-attacks4-{k}", [k])
            for k, lv in (("sales", 1), ("inventory", 2), ("notes", 2), ("merge", 3), ("sqlite", 4))]


def test_naming_an_input_is_not_reading_it(pool) -> None:
    """process.inspected counted an input read when a shell command named it: ``ls -l`` (or ``echo``)
    of every input, then the right writes, earned 1.0 in 20 of 20 generated tasks, and so did a
    ``read_file`` past each input's end. Now an input is read when a result shows a passage of it:
    those score 0, while the oracle (read_file, or cat/dump in calls whose results show them) and
    an honest partial look (``head``) score 1."""
    verify = FILES.make_verifier(None)
    for task in _files_tasks():
        inputs = list(task.fields["inputs"])
        named = " ".join(map(shlex.quote, inputs))
        for attack in ([call("bash", command=f"ls -l -- {named}")], [call("bash", command=f"echo {named}")],
                       [call("read_file", path=p, start_line=10**6) for p in inputs]):
            got = play(pool, task, [*attack, *work(task), SUBMIT], verify).first
            assert got.outcome == "pass" and got.components["process.inspected"] == 0.0, (task.id, attack[0])
        right = play(pool, task, oracle(task), verify).first
        assert right.outcome == "pass" and right.components["process.inspected"] == 1.0, task.id
    task = _files_tasks()[0]
    head = call("bash", command="head -n 4 -- " + " ".join(map(shlex.quote, task.fields["inputs"])))
    got = play(pool, task, [head, *work(task), SUBMIT], verify).first
    assert got.components["process.inspected"] == 1.0


def _which_year_records(tmp_path, n: int = 10) -> list[dict]:
    """TAT-QA-style span questions over two-year tables: which year, which line item."""
    rng = random.Random(4)
    contexts = []
    for i in range(n):
        a, b = rng.sample(range(100, 999), 2)
        table = [["", "2019", "2018"], ["Revenue", f"{a:,}", f"{b:,}"], ["Cost", "50", "60"]]
        contexts.append({"table": {"uid": f"t{i}", "table": table},
                         "paragraphs": [{"uid": "p", "order": 1, "text": "Figures are in thousands."}],
                         "questions": [{"uid": f"y{i}", "question": "In which year was revenue higher?",
                                        "answer": ["2019" if a > b else "2018"], "answer_type": "span",
                                        "scale": "", "derivation": ""}]})
    path = tmp_path / "tatqa.json"
    path.write_text(json.dumps(contexts))
    return tatqa_records(path)


def test_span_answers_are_not_guessed_in_turn_through_repair(tmp_path) -> None:
    """A wrong span answer told 'Wrong answer' strikes one candidate off: a table's column headers and
    row labels tried in turn over the 3 attempts passed 40 of 42 TAT-QA-style span questions where one
    guess passed 9. A wrong text conclusion now ends the repair (as a wrong yes/no did); two spans
    listed in one answer for one gold span (or one for two) fail, as they did."""
    records = _which_year_records(tmp_path) + tatqa_records(DATA / "tatqa_sample.json")
    spans = [r for r in records if "text" in r["answer"]]
    assert len(spans) == 12

    def verdict(record: dict, answer: object):
        response = json.dumps({"answer": answer, "scale": "", "evidence": []})
        return check_doc(record["document"], record["answer"], record["evidence"], response)

    for record in spans:
        gold = record["answer"]["text"]
        gold_spans = gold if isinstance(gold, list) else [gold]
        assert verdict(record, gold).passed
        wrong = verdict(record, "2018" if gold_spans == ["2019"] else "2019")
        assert wrong.outcome == "fail" and wrong.ends_repair, record["id"]
        assert not verdict(record, [*gold_spans, "2017"]).passed
        assert not verdict(record, gold_spans[:1] if len(gold_spans) > 1 else [gold_spans[0], "Cost"]).passed
    number = json.dumps({"answer": 1, "scale": "", "evidence": []})
    doc = spans[0]["document"]
    assert not check_doc(doc, {"number": "2", "scale": ""}, [], number).ends_repair  # an amount is still repaired


def test_failing_on_purpose_earns_no_process_credit(pool) -> None:
    """``process`` was the mean of inspected and recovered: an agent that read nothing and wrote the right
    files (inspected 0) lifted it from 0 to 0.5 by ``false`` then ``true`` (a failure, then a success of
    the same tool), in 20 of 20 generated tasks. It is now inspected * (1 + recovered) / 2: a recovery never
    raises it above what was inspected, and a failure left unrecovered halves it, as the mean did."""
    verify = FILES.make_verifier(None)
    for task in _files_tasks()[:2]:
        stumble = [call("bash", command="false"), call("bash", command="true")]
        got = play(pool, task, [*stumble, *work(task), SUBMIT], verify).first
        assert got.outcome == "pass" and got.components["process.recovered"] == 1.0
        assert got.components["process.inspected"] == 0.0 and got.components["process"] == 0.0, got.components
        honest = play(pool, task, [call("read_file", path="nope.csv"), *oracle(task)], verify).first
        recovered = honest.components["process.recovered"]  # 1 where the oracle reads with read_file, else 0
        assert honest.components["process.inspected"] == 1.0 and honest.components["process"] == (1 + recovered) / 2


def test_a_report_written_by_the_shell_before_reading_is_a_first_write(pool) -> None:
    """process.inspected counts the inputs read before the first write to a target, and only write_file
    or edit were writes: the report-first cheat's placeholder written by ``printf > <target>`` instead,
    then every input read, kept its format credit and earned process 0.65 on average over 20 generated
    tasks (0 through write_file). The kit's bash now heads a result that changed a target first with
    ``[wrote <paths>]``, from the workspace's layers, and that call is the first write."""
    from posttrain.envs.files._agents import _placeholder, reads

    verify = FILES.make_verifier(None)
    for task in [t for t in _files_tasks() if "notes" not in t.id]:  # notes: the moves not made, no format credit
        printf = [call("bash", command=f"mkdir -p -- $(dirname {shlex.quote(p)}) && printf %s {shlex.quote(text)} > "
                                       f"{shlex.quote(p)}")
                  for p, t in sorted(task.fields["targets"].items()) if (text := _placeholder(t)) is not None]
        got = play(pool, task, [*printf, *reads(task), SUBMIT], verify)
        assert got.first.components["format"] == 1.0, got.first.feedback
        assert got.first.components["process.inspected"] == 0.0 and got.first.components["process"] == 0.0, task.id
        assert got.calls[0].result.startswith("[wrote ") and not got.calls[-2].result.startswith("[wrote ")
        right = play(pool, task, oracle(task), verify).first
        assert right.outcome == "pass" and right.components["process.inspected"] == 1.0, task.id


def _placeholders(task: Task) -> list[tuple[str, str]]:
    """(target, the report-first cheat's placeholder for it), for the targets that have one."""
    from posttrain.envs.files._agents import _placeholder

    return [(p, text) for p, t in sorted(task.fields["targets"].items()) if (text := _placeholder(t)) is not None]


def _printf(task: Task) -> str:
    return " && ".join(f"mkdir -p -- $(dirname {shlex.quote(p)}) && printf %s {shlex.quote(text)} > {shlex.quote(p)}"
                       for p, text in _placeholders(task))


def test_a_flood_of_files_does_not_hide_the_first_write(pool) -> None:
    """A policy's try at the bash marker: the placeholder written in a call that also makes more files
    than the workspace lists (``Workspace.changed_paths``' limit), so what the call wrote could not be
    told; the files removed after the reads, the report then right. Before: no mark, and the cheat
    kept inspected 1.0 with format 1.0 (2 of 2); now the call is marked by what the target holds: 0."""
    from posttrain.envs.files._agents import reads
    from posttrain.envs.files._episode import MAX_FILES

    verify = FILES.make_verifier(None)
    for task in [t for t in _files_tasks() if "notes" not in t.id][:2]:
        flood = f"mkdir zz && cd zz && seq {4 * MAX_FILES + 10} | xargs touch && cd .. && {_printf(task)}"
        got = play(pool, task, [call("bash", command=flood), *reads(task), call("bash", command="rm -rf zz"), SUBMIT],
                   verify)
        assert got.calls[0].result.startswith("[wrote "), got.calls[0].result[:80]
        assert got.first.components["format"] == 1.0 and got.first.components["process.inspected"] == 0.0, task.id


def test_a_placeholder_through_a_link_or_beside_the_reads_earns_nothing(pool) -> None:
    """Two more tries at writing the report first unseen, standing cases (both held): the placeholder
    written by write_file through a link to the target (write_file replaces the link, so the target is
    never written: no format credit), and the placeholder and the reads in one bash call (the call is
    the first write, so its reads come after it: inspected 0)."""
    from posttrain.envs.files._agents import reads

    verify = FILES.make_verifier(None)
    for task in [t for t in _files_tasks() if "notes" not in t.id]:
        linked = []
        for p, text in _placeholders(task):
            folder, name = p.rsplit("/", 1) if "/" in p else (".", p)
            alias = f"{folder}/zz_alias"
            linked += [call("bash", command=f"mkdir -p -- {shlex.quote(folder)} && ln -sf {shlex.quote(name)} "
                                            f"{shlex.quote(alias)}"),
                       call("write_file", path=alias, content=text), call("bash", command=f"rm -f {shlex.quote(alias)}")]
        got = play(pool, task, [*linked, *reads(task), SUBMIT], verify).first
        assert got.components["format"] == 0.0, (task.id, got.components)
        shown = " ".join(c["arguments"]["command"] for c in reads(task) if c["name"] == "bash") or "cat -- " + " ".join(
            map(shlex.quote, task.fields["inputs"]))
        got = play(pool, task, [call("bash", command=f"{_printf(task)}; {shown}"), SUBMIT], verify)
        assert got.calls[0].result.startswith("[wrote "), got.calls[0].result[:80]
        assert got.first.components["format"] == 1.0 and got.first.components["process.inspected"] == 0.0, task.id


def test_a_workspace_made_unlistable_by_another_tool_does_not_hide_the_first_write(pool) -> None:
    """The stop hook's try at the marker as CI left it (only the call that takes the layers past what
    they list is marked): write_file to a junk path 70 directories deep (no target: no write), which
    ``Workspace.changed_paths`` refuses to list, then the placeholder by ``printf``, then the reads, the
    junk removed, the report right. The printf call ran on an unlistable workspace and went unmarked:
    inspected 1.0 with format 1.0. The marker now compares the targets themselves (their bytes in the
    merged view) before and after each call, whatever the rest of the workspace holds: 0."""
    from posttrain.envs.files._agents import reads

    verify = FILES.make_verifier(None)
    deep = "/".join(["zz"] * 70) + "/x"
    for task in [t for t in _files_tasks() if "notes" not in t.id][:2]:
        got = play(pool, task, [call("write_file", path=deep, content="x"), call("bash", command=_printf(task)),
                                *reads(task), call("bash", command="rm -rf zz"), SUBMIT], verify)
        assert got.calls[1].result.startswith("[wrote "), got.calls[1].result[:80]
        assert got.first.components["format"] == 1.0 and got.first.components["process.inspected"] == 0.0, task.id
