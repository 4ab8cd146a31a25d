"""Repair feedback of the files domain says what is wrong without handing over the answer.

Which notes a notes task archives is its answer, and the targets said it: a no-op's feedback named
``archive/<note> was not written`` and ``notes/<note> should no longer exist`` for each, so a no-op,
then the named moves (the index and the counts done), passed 60 of 60 notes tasks; moving every note
and putting back the ones called collateral passed 55 of 60. The feedback now names only the files the
instruction asks to write (``_grade.named_paths``); every problem of a file moved, deleted, created or
left alone is one sentence (``UNNAMED``), the detail kept in the verdict's evidence for the log.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from posttrain.envs import get_domain
from posttrain.envs.files._env import build_task
from posttrain.types import Task

ENV = get_domain("files")


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


@pytest.fixture(scope="module")
def notes() -> list[Task]:
    return ENV.generate_params(60, seed=0, params={"kinds": ["notes"]})


def _archived(task: Task) -> list[str]:
    return sorted(p.removeprefix("archive/") for p in task.fields["targets"] if p.startswith("archive/"))


def _named_notes(feedback: str) -> set[str]:
    return set(re.findall(r"(?:archive|notes)/([\w-]+\.md)", feedback)) - {"INDEX.md"}


def _with_moves(task: Task, names: list[str]) -> str:
    """The reference's index and counts, with exactly these notes moved to archive/."""
    ref = json.loads(str(task.reference))
    kept = {p: v for p, v in ref.items() if not p.startswith(("archive/", "notes/")) or p == "notes/INDEX.md"}
    ws = task.fields["workspace"]
    for name in names:
        kept[f"notes/{name}"], kept[f"archive/{name}"] = None, ws[f"notes/{name}"]
    return json.dumps(kept)


def test_a_no_op_learns_no_note_to_archive(verify, notes) -> None:
    passed = 0
    for task in notes:
        feedback = verify(task, "{}").feedback
        assert not _named_notes(feedback), (task.id, feedback)
        said = sorted(set(re.findall(r"archive/(\S+?) was not written", feedback))
                      | set(re.findall(r"notes/(\S+?) should no longer exist", feedback)))
        passed += verify(task, _with_moves(task, said)).passed
    assert passed == 0  # before: 60 of 60


def test_moving_every_note_learns_which_should_stay(verify, notes) -> None:
    for task in notes[:20]:
        every = sorted(p.removeprefix("notes/") for p in task.fields["workspace"] if p.startswith("notes/"))
        got = verify(task, _with_moves(task, every))
        assert not got.passed and not _named_notes(got.feedback), (task.id, got.feedback)
        assert any("was created" in p for p in got.evidence["problems"])  # the log keeps which ones


def test_honest_repair_still_hears_where_a_written_file_departs(verify, notes) -> None:
    from posttrain.envs.files._grade import UNNAMED

    task = notes[3]
    ref = json.loads(str(task.reference))
    assert verify(task, str(task.reference)).passed
    index = verify(task, json.dumps({**ref, "notes/INDEX.md": "# Index\n"}))
    assert index.feedback.startswith("notes/INDEX.md has fewer lines") and UNNAMED not in index.feedback
    moved = verify(task, _with_moves(task, _archived(task)[:-1]))  # one archived note left in notes/
    assert moved.feedback == UNNAMED + "." and moved.error_class == "missing"
    readme = verify(task, json.dumps({**ref, "README.md": "# done\n"}))
    assert readme.feedback == UNNAMED + "." and readme.error_class == "collateral"


def test_the_other_kinds_still_name_their_reports(verify) -> None:
    """Every content target a generated instruction asks for is named as before (they are the instruction's)."""
    for level in (1, 2, 3, 4, 5):
        task = build_task(random.Random(f"files-feedback-{level}"), level, f"fb-{level}")
        feedback = verify(task, "{}").feedback
        for path, target in task.fields["targets"].items():
            if "format" in target and target["format"] != "bytes":
                assert path in task.prompt and (path in feedback or "more problem" in feedback), (path, feedback)


def test_a_hidden_problem_is_never_counted() -> None:
    """"and N more problem(s)" counts the named ones only: a count of the hidden ones is the number of
    notes to archive."""
    from posttrain.envs.files._grade import UNNAMED, feedback_text

    named = [(f"r{i}.json", ("missing", f"r{i}.json was not written")) for i in range(8)]
    hidden = [(f"archive/n{i}.md", ("missing", f"archive/n{i}.md was not written")) for i in range(5)]
    text = feedback_text(named + hidden, {path for path, _ in named})
    assert "and 2 more problem(s)" in text and text.endswith(UNNAMED + ".") and "archive/" not in text
    links = [("archive/x.md", ("not_regular", "archive/x.md is a symbolic link"))]
    assert feedback_text(links, ()).startswith("archive/x.md is a symbolic link")  # the agent's own link


def _guess_the_unread_note(task: Task, verify) -> bool:
    """A policy that reads every note but the UTF-16 one, names it after its file, and tries its status in
    turn over the 3 attempts (pass or fail is all it reads): whether one of them passes."""
    import base64

    from posttrain.envs.files._workspace import decode_workspace

    files = decode_workspace(task.fields["workspace"])
    notes = sorted(p for p in files if p.startswith("notes/"))
    odd = next(p for p in notes if files[p].startswith((b"\xff\xfe", b"\xfe\xff")))
    for guess in ("archived", "open", "done"):
        counts, index, writes = {"open": 0, "done": 0, "archived": 0}, [], {}
        for path in notes:
            name = path.removeprefix("notes/")
            if path == odd:
                title, status = name.removesuffix(".md").replace("-", " ").capitalize(), guess
            else:
                text = files[path].decode()
                title = text.split("\n", 1)[0].removeprefix("# ")
                found = re.search(r"^Status: (\w+)$", text, re.MULTILINE)
                status = found.group(1) if found else "open"
            counts[status] += 1
            if status == "archived":
                writes[path], writes[f"archive/{name}"] = None, {"base64": base64.b64encode(files[path]).decode()}
            else:
                index.append(f"- [{title}]({name}) — {status}")
        writes["notes/INDEX.md"] = "# Index\n\n" + "\n".join(index) + "\n"
        writes["status.json"] = json.dumps(counts)
        if verify(task, json.dumps(writes)).passed:
            return True
    return False


def test_a_note_never_decoded_is_not_indexed_by_guessing_its_status(verify) -> None:
    """The UTF-16 note's title was its file name's words: a policy that never decoded it passed 80 of 80
    level-4/5 notes tasks within the 3 attempts. Its title now says more than its name (a month): only
    the guess that it is archived (no index line) passes, about a third of the time."""
    tasks = ENV.generate_params(40, level=4, seed=0, params={"kinds": ["notes"]})
    guessed = sum(_guess_the_unread_note(task, verify) for task in tasks)
    assert guessed <= 0.6 * len(tasks), guessed
    assert all(verify(task, str(task.reference)).passed for task in tasks)
