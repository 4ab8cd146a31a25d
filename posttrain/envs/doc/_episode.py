"""doc episodes on the workspace kit: the document in a ``Workspace``, the kit's tools plus ``read_pdf``,
and ``submit`` carrying the structured answer to the doc verifier.

- The workspace holds the document: ``document.md`` (the Markdown of the task; pages start at
  ``<!-- page N -->`` lines, so ``grep`` finds a figure and its page), or for a task with ``"pdf":
  true`` only ``document.pdf`` (its rendering, ``_pdf.render_pdf``), read with ``read_pdf``.
- ``read_pdf(path="document.pdf", pages="3-5")``: the PDF's text layer page by page, what a PDF reader
  gives (``_pdf.pdf_pages``). The pristine PDF's pages come from a per-process cache; a PDF the agent
  wrote is parsed in a CPU-budgeted worker (``posttrain.verify._deadline``), never in this process: a
  hostile PDF can cost the agent an error result, never the host.
- ``submit(answer, scale, evidence)``: the arguments are the single response's JSON object, and the
  doc verifier judges them against the task's own document (``_check.py``): the workspace's copy is
  never read, so a document the agent edited proves nothing.
- Repair: a failed attempt's feedback (each mismatching location, never the gold) is the submit
  call's result, ``MAX_ATTEMPTS`` attempts in all; except a wrong conclusion to a question whose answer
  is one of a few, text (a yes/no, a span) or an amount a condition picks (``_check.is_closed``:
  ``Verdict.ends_repair``), or an amount that is the gold's figures at another scale or sign
  (``_check.is_rescaled``), which ends the episode: "wrong answer" would strike one off, and a next try
  would be paid in full for reading it (a wrong evidence list with the right conclusion is still repaired: that
  feedback gives nothing of the answer away).

Not here: the scripted agents (``_agents.py``), the checks (``_check.py``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from posttrain.envs.doc._env import FORMAT_RULES
from posttrain.envs.doc._pdf import pdf_pages, render_pdf
from posttrain.envs.workspace import (
    Take,
    Tool,
    ToolContext,
    ToolInfraError,
    WorkspaceSpec,
    cut_middle,
    default_tools,
    repo_path,
    submit_tool,
)
from posttrain.sandbox import Workspace
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import shared_pool

MAX_ATTEMPTS = 3
MAX_PDF_BYTES = 16 << 20
"""The largest PDF ``read_pdf`` reads (a 500k-character report renders to about 1 MB)."""
PDF_CPU_BUDGET_S = 20.0
MAX_PAGE_CHARS = 12_000
"""Characters of text ``read_pdf`` shows at once (whole pages, at least one; a longer page is cut in the
middle: a PDF the agent wrote can hold megabytes of text on one page, which shown whole were an
observation the host tokenized and held)."""
SYSTEM = ("You analyse a document in a workspace (the current directory, /work) with the tools: find the figures "
          "the question needs, check them, then call submit once with your answer and the evidence for it.")
_PAGES_RE = re.compile(r"^\s*\d{1,6}\s*(-\s*\d{1,6}\s*)?(,\s*\d{1,6}\s*(-\s*\d{1,6}\s*)?)*$")
"""Page numbers of at most 6 digits: a longer one is the agent's error result (``int`` of more than
4300 digits raises, which would be an error of the environment and lose the batch)."""


@functools.lru_cache(maxsize=8)
def _rendered(digest: str, document: str) -> bytes:
    return render_pdf(document)


def document_pdf(document: str) -> bytes:
    """The task's document as PDF bytes (rendered once per process per document)."""
    return _rendered(hashlib.sha256(document.encode()).hexdigest(), document)


_pristine: OrderedDict[str, tuple[str, ...]] = OrderedDict()
"""The text layer of the tasks' own PDFs by digest (the last ``_PRISTINE_KEPT``), read without a worker."""
_PRISTINE_KEPT = 64


def _pages_of(data: bytes) -> tuple[str, ...] | str:
    """The text layer of ``data``'s pages, or why it cannot be read (the agent's: an error result)."""
    key = hashlib.sha256(data).hexdigest()
    if key in _pristine:
        return _pristine[key]
    outcome = shared_pool("posttrain.envs.doc._pdf", cpu_budget_s=PDF_CPU_BUDGET_S).run(
        {"pdf": base64.b64encode(data).decode()})
    if outcome.is_infra:
        raise ToolInfraError(f"read_pdf: {outcome.detail}")
    if outcome.status != "ok":
        return f"the file is not a PDF that can be read ({outcome.status})"
    return tuple(outcome.result["pages"])


def page_numbers(spec: str, count: int) -> list[int] | str:
    """``"3-5,9"`` -> ``[3, 4, 5, 9]`` within ``1..count``, or why not.

    >>> page_numbers("2-3, 5", 6), page_numbers("7", 6), page_numbers("9" * 5000, 6)[:18]
    ([2, 3, 5], 'the document has 6 page(s); page 7 is not one of them', 'pages must look li')
    """
    if not _PAGES_RE.match(spec):
        return f"pages must look like 3, 3-5 or 1,4-6; got {spec!r}"
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not 1 <= a <= b <= count:
            bad = a if not 1 <= a <= count else b
            return f"the document has {count} page(s); page {bad} is not one of them"
        out += [p for p in range(a, b + 1) if p not in out]
    return out


def _read_pdf(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    path = repo_path(arguments.get("path") or "document.pdf")
    # refused by its size, never read (WorkspaceFileTooLarge: an error result): a job can leave a 64 MiB sparse file
    data = ctx.workspace.read_file(path, max_bytes=MAX_PDF_BYTES)
    pages = _pages_of(data)
    if isinstance(pages, str):
        return f"Error: {path}: {pages}."
    wanted = page_numbers(arguments.get("pages") or f"1-{len(pages)}", len(pages))
    if isinstance(wanted, str):
        return f"Error: {wanted}."
    shown, size = [], 0
    for p in wanted:
        block = f"[Page {p} of {len(pages)}]\n{cut_middle(pages[p - 1].strip(), MAX_PAGE_CHARS)}\n"
        if shown and size + len(block) > MAX_PAGE_CHARS:
            return "".join(shown) + f"[... read_pdf with pages={p}-{wanted[-1]} for the rest]"
        shown.append(block)
        size += len(block)
    return "".join(shown)


def read_pdf_tool() -> Tool:
    """``read_pdf(path="document.pdf", pages=)``: a PDF's text layer, page by page (module docstring)."""
    return Tool("read_pdf", "Read the text of a PDF of the workspace, page by page (all pages, or pages like "
                "\"3\", \"3-5\" or \"1,4-6\"). Long output is cut at whole pages: ask for the rest by pages.",
                {"type": "object", "properties": {"path": {"type": "string", "description": "default document.pdf"},
                                                  "pages": {"type": "string"}},
                 "required": [], "additionalProperties": False}, _read_pdf)


SUBMIT = submit_tool(
    "Submit your answer and its evidence (once you are sure: each submission is graded).",
    {"type": "object", "properties": {
        "answer": {"description": "a number (an amount, a percentage or a ratio), or text"},
        "scale": {"type": "string", "description": '"", "thousand", "million", "billion" or "percent"'},
        "evidence": {"type": "array", "items": {"type": "object"},
                     "description": 'one {"location": {...}, "quote": "..."} per figure or clause the answer uses'}},
     "required": [], "additionalProperties": False})
"""Nothing is required by the schema: a submit without an answer is graded (a ``format`` fail naming what
is missing), as the kit's no-op submits, rather than refused as an invalid call that never ends the episode."""


def episode_prompt(task: Task) -> str:
    """The first user message: the question, where the document is, and how to submit."""
    if task.fields.get("pdf"):
        where = ("The document is document.pdf in the workspace (/work): read it with read_pdf, page by page "
                 "(its pages are the pages a location names).")
    else:
        where = ("The document is document.md in the workspace (/work): Markdown; each page starts at a line "
                 "`<!-- page N -->`, each table follows a caption line `**Table N: title**`. It may be long: "
                 "grep for what you need and read it by line ranges.")
    rules = FORMAT_RULES.split("\n", 2)[2]  # the answer's and the evidence's rules, without the JSON preamble
    return (f"Question: {task.prompt}\n\n{where}\n\nWhen you know the answer, call submit with answer, scale and "
            f"evidence:\n{rules}")


def exact_json(value: Any) -> str:
    """``value`` as JSON text, numbers exactly as parsed (a tool call's numbers arrive as ``Decimal``:
    ``0.1`` stays ``0.1``, never a float's nearest neighbour or a string).

    >>> exact_json({"answer": Decimal("0.1"), "evidence": [1, "x"]})
    '{"answer": 0.1, "evidence": [1, "x"]}'
    """
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {exact_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(exact_json(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(str(value))
    return json.dumps(value, ensure_ascii=False)


def take_answer(ws: Workspace, arguments: Mapping[str, Any]) -> str | Verdict:
    """The doc domain's ``take``: the submit call's arguments as the single response's JSON object."""
    return exact_json(arguments)


def initial_files(task: Task) -> dict[str, bytes]:
    """The workspace of a doc task: ``document.md``, or ``document.pdf`` for a PDF task."""
    document = task.fields["document"]
    if task.fields.get("pdf"):
        data = document_pdf(document)
        key = hashlib.sha256(data).hexdigest()
        if key not in _pristine:
            _pristine[key] = tuple(pdf_pages(data))
            while len(_pristine) > _PRISTINE_KEPT:
                _pristine.popitem(last=False)
        return {"document.pdf": data}
    return {"document.md": document.encode("utf-8")}


def workspace_spec(task: Task) -> WorkspaceSpec:
    """The kit's description of a doc task's episode (module docstring)."""
    take: Take = take_answer
    return WorkspaceSpec(initial=initial_files(task), prompt=episode_prompt(task), system=SYSTEM,
                         tools=default_tools(read_pdf_tool(), submit=SUBMIT), take=take,
                         max_attempts=max(task.limits.max_attempts, MAX_ATTEMPTS), feedback=True)
