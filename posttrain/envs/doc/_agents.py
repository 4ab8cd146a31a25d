"""The doc domain's scripted agents: the oracle, and cheats written as a policy would write them.

Each is ``script(task) -> [call, ...]``, played one call an action by ``posttrain.envs.workspace.ScriptedAgent``
through the runner, the tools and the chat template a model uses (``posttrain eval --episodes agent
--agent NAME``). The oracle must pass every task; the no-op (the kit's) and every cheat must fail
every task, as a ``fail`` verdict, never ``infra_error`` (README's table; tests/envs/test_doc_agent.py).

- ``oracle``: finds each figure the reference cites (``grep`` in ``document.md`` for its row label or
  its sentence; ``read_pdf`` of its pages for a PDF task), then submits the reference's answer and
  evidence.
- cheats (``CHEATS``; why each fails in ``WHY_IT_FAILS``): the right answer with each citation moved to
  a place that does not hold its quote; the right answer quoting sentences the document does not
  have; the right answer and its citations sprayed with every cell of the table; and a document
  doctored in the workspace to hold a wrong figure, which the answer then cites.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from posttrain.envs.doc._check import MAX_CITATIONS
from posttrain.envs.doc._document import Document, norm, parse_document
from posttrain.envs.workspace import Call
from posttrain.errors import UserError
from posttrain.types import Task


def _c(name: str, **arguments: object) -> Call:
    return {"name": name, "arguments": arguments}


def reference(task: Task) -> dict[str, Any]:
    if task.reference is None:
        raise UserError(f"doc agents: task {task.id!r} has no reference to play")
    return json.loads(str(task.reference))


def _submit(answer: Mapping[str, Any]) -> Call:
    return _c("submit", **{k: answer[k] for k in ("answer", "scale", "evidence") if k in answer})


def reads(task: Task) -> list[Call]:
    """Finding the cited figures: one ``grep`` of their row labels and sentences in ``document.md``, or
    ``read_pdf`` of their pages."""
    cites = reference(task)["evidence"]
    if task.fields.get("pdf"):
        pages = sorted({c["location"]["page"] for c in cites}) or [1]
        return [_c("read_pdf", pages=",".join(map(str, pages)))]
    keys = list(dict.fromkeys(c["location"].get("row") or c["quote"][:60] for c in cites)) or ["Table"]
    patterns = " ".join(f"-e {shlex.quote(k)}" for k in keys)
    return [_c("bash", command=f"grep -n -F {patterns} document.md | head -n 40")]


def oracle(task: Task) -> list[Call]:
    return [*reads(task), _submit(reference(task))]


def probes(task: Task) -> list[tuple[Call, str]]:
    """``(md5sum of the document, its digest)``: what tells apart tasks asking one question of different
    reports (the same company name, years and question are drawn again over 200 tasks)."""
    from posttrain.envs.doc._episode import initial_files

    (name, data), = initial_files(task).items()
    digest = hashlib.md5(data).hexdigest()  # noqa: S324 - an id, not security
    return [(_c("bash", command=f"md5sum {name}"), digest)]


# -- cheats ----------------------------------------------------------------------------------------


def _doc(task: Task) -> Document:
    return parse_document(task.fields["document"])


def _elsewhere(doc: Document, cite: Mapping[str, Any]) -> dict[str, Any]:
    """The citation with its location moved to a place that holds something else (quote kept)."""
    loc = cite["location"]
    if "table" in loc:
        table = doc.tables[norm(loc["table"]).casefold()]
        col = [norm(c).casefold() for c in table.columns].index(norm(loc["column"]).casefold(), 1)
        row = next((r for r in table.rows if norm(r[col]) != norm(cite["quote"])), None)
        if row is not None:
            return {"location": {**loc, "row": row[0]}, "quote": cite["quote"]}
        return {"location": {**loc, "page": loc["page"] + 1}, "quote": cite["quote"]}
    others = [t for p, t in doc.sections if p == loc["page"] and norm(t).casefold() != norm(loc["section"]).casefold()]
    return {"location": {**loc, "section": others[0]} if others else {**loc, "page": loc["page"] + 1},
            "quote": cite["quote"]}


def wrong_location(task: Task) -> list[Call]:
    """The right answer; each citation names a place that does not hold its quote."""
    ref, doc = reference(task), _doc(task)
    return [*reads(task), _submit({**ref, "evidence": [_elsewhere(doc, c) for c in ref["evidence"]]})]


def _section_of(doc: Document, loc: Mapping[str, Any]) -> str:
    if "section" in loc:
        return str(loc["section"])
    table = doc.tables[norm(loc["table"]).casefold()]
    return table.section or next((t for p, t in doc.sections if p == loc["page"]), "1")


def invented_quote(task: Task) -> list[Call]:
    """The right answer; each citation quotes a sentence the document does not have (the figure in words
    of the agent's own, at the right page)."""
    ref, doc = reference(task), _doc(task)
    cites = [{"location": {"page": c["location"]["page"], "section": _section_of(doc, c["location"])},
              "quote": f"As reported in the statements, the figure was {c['quote']}."} for c in ref["evidence"]]
    return [*reads(task), _submit({**ref, "evidence": cites})]


def spray(task: Task) -> list[Call]:
    """The right answer and citations, then every other cell of the cited tables, up to the limit."""
    ref, doc = reference(task), _doc(task)
    cites = list(ref["evidence"])
    tables = [c["location"]["table"] for c in cites if "table" in c["location"]] or [next(iter(doc.tables), "")]
    for name in dict.fromkeys(tables):
        table = doc.tables.get(norm(name).casefold())
        if table is None:
            continue
        for row in table.rows:
            for col, cell in zip(table.columns[1:], row[1:], strict=True):
                cite = {"location": {"page": table.page, "table": table.id, "row": row[0], "column": col},
                        "quote": cell}
                if cite not in cites and len(cites) < MAX_CITATIONS and cell.strip():
                    cites.append(cite)
    if len(cites) == len(ref["evidence"]):  # nothing to spray with: cite the first figure twice
        cites = cites + cites[:1]
    return [*reads(task), _submit({**ref, "evidence": cites})]


def _wrong(answer: Any) -> Any:
    if isinstance(answer, bool) or not isinstance(answer, int | float):
        return f"not {answer}"
    return answer + 1000 if isinstance(answer, int) else round(answer * 1.1 + 1, 4)


def _unique_snippet(text: str, needle: str) -> str | None:
    """The line holding ``needle``, grown with the lines before it until it appears once in ``text``."""
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if needle in line), None)
    if at is None:
        return None
    for grow in range(at + 1):
        snippet = "".join(lines[at - grow: at + 1])
        if text.count(snippet) == 1:
            return snippet
    return None


def doctored_document(task: Task) -> list[Call]:
    """Edit the workspace's document so that the first cited value reads another figure (``edit``; a PDF
    task gets a ``document.md`` of its own holding the doctored line), then cite that figure for a wrong
    answer: the verifier reads the task's document, never the workspace's."""
    ref = reference(task)
    text = task.fields["document"]
    cites = list(ref["evidence"])
    fake = "999,999"
    calls: list[Call] = []
    if cites:
        first = cites[0]
        snippet = _unique_snippet(text, first["quote"])
        if snippet is not None:
            doctored = snippet.replace(first["quote"], fake, 1)
            calls = [_c("write_file", path="document.md", content=doctored)] if task.fields.get("pdf") else \
                [_c("edit", path="document.md", old=snippet, new=doctored)]
        cites[0] = {"location": first["location"], "quote": fake}
    return [*calls, *reads(task), _submit({**ref, "answer": _wrong(ref["answer"]), "evidence": cites})]


CHEATS: dict[str, Callable[[Task], Sequence[Call]]] = {
    "wrong-location": wrong_location,
    "invented-quote": invented_quote,
    "spray": spray,
    "doctored-document": doctored_document,
}
WHY_IT_FAILS = {
    "wrong-location": "evidence: the cited place holds another value (or is not a place of the document)",
    "invented-quote": "evidence: the quoted text is not in that section on that page",
    "spray": "evidence: citations and the figures the answer rests on must pair off one to one",
    "doctored-document": "wrong_answer and evidence: the task's own document is the source, not the workspace's copy",
}
