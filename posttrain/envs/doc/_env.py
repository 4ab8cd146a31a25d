"""The doc domain: professional document analysis, a conclusion with cited evidence.

Task fields (docs/tasks.md, "doc"): ``prompt`` (the question), ``document`` (Markdown with page
markers, sections and captioned tables: ``_document.py``), ``answer`` (the gold conclusion:
``{"number": "12345000", "scale": ""}`` or ``{"text": "yes"}`` / ``{"text": [spans]}``), ``evidence``
(the figures the answer rests on: ``[{"at": [location, ...], "contains": "..."}]``, each fact a set of
places it may be cited from; ``contains``, for a section, the words a quote from it must hold; ``[]``
judges the conclusion alone), ``program`` (optional: the gold arithmetic as a FinQA program),
``pdf`` (optional: the model reads the PDF rendering's text layer instead of the Markdown) and
``closed`` (optional: the answer is one of two figures the document prints; a wrong one ends a repair).

Verification (``_check.py``, in a worker under a CPU budget; each failure a ``fail``, reward 0):
the response's strict parse and shape (``format``), the conclusion (FinQA's 5-decimal rule with the
scale folded in as TAT-QA does, or TAT-QA's text normalisation: ``wrong_answer``), and every citation:
its location holds its quote, and citations and facts pair off one to one (``evidence``). Feedback
names each mismatching location, never the gold answer.

Tasks come from ``_gen.py`` (generated annual reports, levels 1-5, 2k to 120k+ tokens) or from a
user's FinQA / TAT-QA files (``_anchors.load_finqa``, ``load_tatqa``).

Not here: free-text conclusions that need a judge; tables that span pages.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from types import ModuleType
from typing import Any

from posttrain.envs import RecordReader, guard, parse_common
from posttrain.envs._workspace_hooks import WorkspaceEpisodes
from posttrain.envs.doc._anchors import finqa_is_program
from posttrain.envs.doc._check import SCALES
from posttrain.envs.doc._document import (
    DocumentError,
    location_problem,
    norm,
    parse_document,
    quote_problem,
    resolve,
)
from posttrain.envs.doc._gen import LEVELS, build_report
from posttrain.envs.doc._questions import LEVEL_KINDS, QUESTIONS, Question
from posttrain.shown import clipped
from posttrain.types import Task, TaskLimits, Verdict, Verifier
from posttrain.verify._deadline import shared_pool, verdict_of

NAME = "doc"
DOMAIN_KEYS = frozenset({"document", "answer", "evidence", "program", "pdf", "closed"})
CPU_BUDGET_S = 10.0
MAX_DOCUMENT_CHARS = 4_000_000

FORMAT_RULES = """Answer with one JSON object and nothing else:
{"answer": <the answer>, "scale": <"", "thousand", "million", "billion" or "percent">, "evidence": [<citation>, ...]}
- answer: a number when the question asks for an amount, a percentage or a ratio (write 12345000 for
  $12,345,000; a percentage either as 12.34 with "scale": "percent" or as 0.1234 with "scale": ""); text otherwise.
  "scale" multiplies the number ("thousand": x1000; "percent": x0.01); leave it "" for an exact figure.
- evidence: one citation per figure (or clause) the answer uses, each exactly once and nothing more:
  {"location": {"page": 4, "table": "Table 2", "row": "<row label>", "column": "<column header>"}, "quote": "<the cell as printed>"}
  or, for text, {"location": {"page": 3, "section": "<section heading or its number>"}, "quote": "<a sentence copied from it>"}."""


def make_doc_verifier() -> Verifier:
    """A verifier for doc tasks; each check runs in the shared worker pool under a CPU budget."""

    def verify(task: Task, response: str) -> Verdict:
        request = {"document": task.fields["document"], "answer": task.fields["answer"],
                   "evidence": task.fields["evidence"], "program": task.fields.get("program"),
                   "closed": task.fields.get("closed", False), "response": response}
        return verdict_of(shared_pool("posttrain.envs.doc._check", cpu_budget_s=CPU_BUDGET_S).run(request), NAME)

    return guard(NAME, verify)


def _parse_answer(reader: RecordReader) -> dict[str, Any]:
    raw = reader.present("answer")
    if isinstance(raw, Mapping) and set(raw) in ({"number"}, {"number", "scale"}):
        number = raw["number"]
        if isinstance(number, bool) or not isinstance(number, str | int | float):
            raise reader.fail("answer", "a number (or a decimal string) in answer.number", number)
        try:
            value = Decimal(str(number))
        except InvalidOperation:
            raise reader.fail("answer", "a decimal number in answer.number", number) from None
        if not value.is_finite():
            raise reader.fail("answer", "a finite number in answer.number", number)
        scale = raw.get("scale", "")
        if not isinstance(scale, str) or scale not in SCALES:  # a list or an object is unhashable: TypeError
            raise reader.fail("answer", f"answer.scale one of {sorted(SCALES)}", scale)
        return {"number": str(number), "scale": scale}
    if isinstance(raw, Mapping) and set(raw) == {"text"}:
        text = raw["text"]
        spans = [text] if isinstance(text, str) else text
        if not isinstance(spans, list) or not spans or not all(isinstance(s, str) and s.strip() for s in spans):
            raise reader.fail("answer", "answer.text a non-empty string or list of strings", text)
        return {"text": text}
    raise reader.fail("answer", '{"number": ..., "scale": ...} or {"text": ...}', raw)


def _parse_evidence(reader: RecordReader, document: str) -> list[dict[str, Any]]:
    raw = reader.present("evidence")
    if not isinstance(raw, list):
        raise reader.fail("evidence", 'a list of facts {"at": [location, ...], "contains": ...}', raw)
    doc = parse_document(document)
    facts = []
    for i, fact in enumerate(raw):
        where = f"evidence[{i}]"
        if not isinstance(fact, Mapping) or "at" not in fact or set(fact) - {"at", "contains"}:
            raise reader.fail("evidence", f'{where}: an object {{"at": [...], "contains": ...}}', fact)
        at, contains = fact["at"], fact.get("contains")
        if not isinstance(at, list) or not at:
            raise reader.fail("evidence", f"{where}.at: a non-empty list of locations", at)
        if contains is not None and (not isinstance(contains, str) or not contains.strip()):
            raise reader.fail("evidence", f"{where}.contains: a non-empty string", contains)
        for loc in at:
            problem = location_problem(loc)
            found, why = (None, problem) if problem else resolve(doc, loc)
            if why is None and "section" in loc:
                why = quote_problem(found, contains) if contains else "a section fact needs 'contains'"  # type: ignore[arg-type]
            if why:
                raise reader.fail("evidence", f"{where}: a location the document holds ({why})", loc)
        facts.append({"at": [dict(loc) for loc in at], **({"contains": contains} if contains else {})})
    return facts


class DocEnv(WorkspaceEpisodes):
    """The doc domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        document = reader.string("document")
        if len(document) > MAX_DOCUMENT_CHARS:
            raise reader.fail("document", f"at most {MAX_DOCUMENT_CHARS} characters", len(document))
        try:
            parse_document(document)
        except DocumentError as e:
            raise reader.fail("document", f"a document of the doc format ({e})", show_got=False) from None
        fields: dict[str, Any] = {"document": document, "answer": _parse_answer(reader),
                                  "evidence": _parse_evidence(reader, document)}
        if "program" in reader.record:
            program = reader.record["program"]
            if not isinstance(program, str) or not finqa_is_program(program):
                raise reader.fail("program", "a FinQA program like 'subtract(5, 3), divide(#0, 3)'", program)
            fields["program"] = program
        if "pdf" in reader.record:
            fields["pdf"] = reader.boolean("pdf", False)
        if "closed" in reader.record:
            fields["closed"] = reader.boolean("closed", False)
        return parse_common(reader, fields, default_limits=TaskLimits(timeout_s=30.0))

    def render_prompt(self, task: Task) -> str:
        document = task.fields["document"]
        shown = pdf_text(document) if task.fields.get("pdf") else document
        source = "the text layer of a PDF, page by page" if task.fields.get("pdf") else "Markdown"
        return (f"Read the document below ({source}) and answer the question.\n\n{shown}\n\n"
                f"Question: {task.prompt}\n\n{FORMAT_RULES}")

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_doc_verifier()

    def noop_response(self, task: Task) -> str:
        return "{}"

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: ways to score without reading, as a policy would; each must be a
        ``fail`` (never ``infra_error``). See ``_exploits.py``."""
        from posttrain.envs.doc._exploits import exploit_fixtures

        return exploit_fixtures()

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks over levels 1-4 (task i at level ``1 + i % 4``; level 5's 120k-token reports come
        from ``generate_level``)."""
        rng = random.Random(seed)
        return [build_task(rng, 1 + i % 4, f"doc-gen-{seed}-{i}") for i in range(n)]

    def level_range(self) -> tuple[int, int]:
        return LEVELS[0], LEVELS[-1]

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        if level not in LEVELS:
            raise ValueError(f"doc: level must be in {LEVELS[0]}..{LEVELS[-1]}, got {level!r}")
        rng = random.Random(f"doc-{level}-{seed}")
        return [build_task(rng, level, f"doc-l{level}-{seed}-{i}") for i in range(n)]

    def capabilities(self) -> tuple[str, ...]:
        return ("document-analysis", "long-context", "arithmetic", "citation")

    def generate_params(self, n: int, *, seed: int = 0, level: int | None = None,
                        params: Mapping[str, Any] | None = None) -> list[Task]:
        """``n`` tasks at ``level`` (None: levels 1-4 in turn) with the generator's own ``params``:
        ``kinds`` (question kinds to draw from, each available at the level), ``filler`` (filler notes
        per report, 0-1000: 0 is the level's shortest report) and ``pdf`` (every task shows the PDF's
        text layer, or none does). A bad level or param is a ``ValueError`` naming it."""
        params = dict(params or {})
        unknown = sorted(set(params) - {"kinds", "filler", "pdf"}, key=str)
        if unknown:
            raise ValueError(f"doc: params.{str(unknown[0])[:80]}: unknown generator param; expected filler, kinds "
                             f"or pdf")
        if level is not None and level not in LEVELS:
            raise ValueError(f"doc: level must be in {LEVELS[0]}..{LEVELS[-1]}, got {level!r}")
        levels = [level] if level is not None else [1, 2, 3, 4]
        kinds = params.get("kinds", ())
        if "kinds" in params:
            if not isinstance(kinds, list) or not kinds or len(kinds) > len(QUESTIONS) * 10 \
                    or not all(isinstance(k, str) for k in kinds):
                raise ValueError(f"doc: params.kinds: expected a non-empty list of question kinds "
                                 f"({', '.join(QUESTIONS)}), got {clipped(kinds)}")
            for k in kinds:
                where = [lv for lv in LEVELS if k in LEVEL_KINDS[lv]]
                if not where:
                    raise ValueError(f"doc: params.kinds: unknown kind {clipped(k)}; kinds: {', '.join(QUESTIONS)}")
                if any(lv not in where for lv in levels):
                    raise ValueError(f"doc: params.kinds: {k!r} needs level {where[0]} or more")
        filler = params.get("filler")
        if "filler" in params and (isinstance(filler, bool) or not isinstance(filler, int) or not 0 <= filler <= 1000):
            raise ValueError(f"doc: params.filler: expected a whole number in 0..1000 (filler notes per report), "
                             f"got {clipped(filler)}")
        pdf = params.get("pdf")
        if "pdf" in params and not isinstance(pdf, bool):
            raise ValueError(f"doc: params.pdf: expected true or false, got {clipped(pdf)}")
        rng = random.Random(f"doc-params-{level}-{seed}")
        out = []
        for i in range(n):
            lv = levels[i % len(levels)]
            kind = rng.choice(kinds) if kinds else None
            out.append(build_task(rng, lv, f"doc-p{lv}-{seed}-{i}", kind, filler=filler, pdf=pdf))
        return out

    def canary_tasks(self, n: int, *, seed: int = 0) -> list[Task]:
        """Tasks no honest response passes: a generated question whose gold amount is off by one (a
        pass means the answer was not read from the document). Tagged ``canary``; no reference."""
        rng = random.Random(f"doc-canary-{seed}")
        out = []
        for i in range(n):
            task = build_task(rng, 1 + i % 3, f"doc-canary-{seed}-{i}")
            answer = dict(task.fields["answer"])
            answer["number"] = str(Decimal(answer["number"]) + 1)
            out.append(Task(id=task.id, domain=NAME, prompt=task.prompt, fields={**task.fields, "answer": answer},
                            difficulty=task.difficulty, tags=(*task.tags, "canary"), limits=task.limits,
                            metadata={**task.metadata, "canary": "the gold amount is the true one plus 1"}))
        return out

    # -- agent episodes (the workspace kit: posttrain.envs.workspace; _episode.py, _agents.py) --

    def workspace_spec(self, task: Task) -> Any:
        """The workspace episode of ``task`` (``_episode.workspace_spec``)."""
        from posttrain.envs.doc._episode import workspace_spec

        return workspace_spec(task)

    def agents(self) -> ModuleType:
        """The scripted agents (``_agents.py``: ``oracle``, ``CHEATS``, ``probes``)."""
        from posttrain.envs.doc import _agents

        return _agents


def reference_response(q: Question) -> str:
    """The response a careful analyst gives: the answer, then one citation per fact."""
    number, scale = q.ref_answer or (q.answer.get("number"), q.answer.get("scale", ""))
    if "text" in q.answer:
        answer: Any = q.answer["text"]
        scale = ""
    else:
        value = Decimal(str(number))
        answer = int(value) if value == value.to_integral_value() else float(value)
    evidence = [{"location": loc, "quote": quote} for loc, quote in q.cites]
    return json.dumps({"answer": answer, "scale": scale, "evidence": evidence})


def build_task(rng: random.Random, level: int, tid: str, kind: str | None = None, *, filler: int | None = None,
               pdf: bool | None = None) -> Task:
    """One generated task: a report at ``level`` and a question of ``kind`` (drawn for the level if None);
    ``filler`` and ``pdf`` override the level's report length and the PDF draw."""
    report = build_report(rng, level, filler=filler)
    kind = kind or rng.choice(LEVEL_KINDS[level])
    q = QUESTIONS[kind](rng, report)
    fields: dict[str, Any] = {"document": report.text, "answer": q.answer, "evidence": q.facts}
    if q.program:
        fields["program"] = q.program
    if q.closed:
        fields["closed"] = True
    if (level <= 3 and rng.random() < 0.25) if pdf is None else pdf:
        fields["pdf"] = True
    return Task(id=tid, domain=NAME, prompt=q.prompt, fields=fields, reference=reference_response(q),
                difficulty=float(level), tags=("doc", q.kind), limits=TaskLimits(timeout_s=30.0),
                metadata={"generator": f"doc/{q.kind}", "chars": len(report.text)})


@functools.lru_cache(maxsize=32)
def _pdf_text(digest: str, document: str) -> str:
    from posttrain.envs.doc._pdf import pdf_pages, render_pdf

    pages = pdf_pages(render_pdf(document))
    return "\n\n".join(f"[Page {i}]\n{text}" for i, text in enumerate(pages, start=1))


def pdf_text(document: str) -> str:
    """The document as ``read_pdf`` sees it: the PDF rendering's text layer, page by page."""
    return _pdf_text(hashlib.sha256(document.encode()).hexdigest(), document)


def quote_of(document: str, loc: Mapping[str, Any]) -> str:
    """What a citation of ``loc`` quotes (the cell, or the first paragraph of the section on that page)."""
    found, _ = resolve(parse_document(document), loc)
    return norm(found if isinstance(found, str) else (found or [""])[0])


ENV = DocEnv()
