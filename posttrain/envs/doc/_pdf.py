"""A doc task's document as a PDF (``fpdf2``), and the PDF's text layer as a reader gets it (``pypdf``).

``render_pdf(text)`` lays out the Markdown of ``_document``'s format one PDF page per document page
(so a citation's page is the PDF's page): headings in bold, paragraphs wrapped, each table under
its caption as ruleless rows of cells (real filings are often ruleless; a table reader must cope),
and ``Page N`` at the foot. The output is deterministic (a fixed creation date). Core fonts only:
text must be Latin-1 (the generated reports are ASCII); anything else is replaced by ``?``.

``pdf_pages(data)`` is the text layer page by page, what a ``read_pdf`` tool returns and what the
single-response prompt of a task with ``"pdf": true`` shows. ``handle_check`` is the same, as the
worker side of ``posttrain.verify._deadline``: a PDF an agent wrote is parsed there, under a CPU budget. The verifier never reads the PDF: it
checks citations against the Markdown source, whose pages the PDF keeps.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from posttrain.envs.doc._document import _CAPTION_RE, _HEADING_RE, _PAGE_RE, _SEPARATOR_RE, split_row


def _latin1(text: str) -> str:
    return text.encode("latin-1", "replace").decode("latin-1")


def _pages(text: str) -> list[list[str]]:
    pages: list[list[str]] = [[]]
    for line in text.replace("\r\n", "\n").split("\n"):
        if _PAGE_RE.match(line.strip()):
            if pages[-1]:
                pages.append([])
            continue
        pages[-1].append(line)
    return pages


def render_pdf(text: str) -> bytes:
    """The document ``text`` as PDF bytes (see the module docstring)."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_creation_date(datetime(2000, 1, 1, tzinfo=UTC))
    pdf.set_margins(14, 12, 14)
    for number, lines in enumerate(_pages(text), start=1):
        pdf.add_page()
        _page(pdf, lines)
        pdf.set_xy(14, 285)
        pdf.set_font("Helvetica", size=7)
        pdf.cell(0, 4, f"Page {number}", align="C")
    return bytes(pdf.output())


def _page(pdf: Any, lines: list[str]) -> None:
    table: list[list[str]] = []
    for line in [*lines, ""]:
        stripped = line.strip()
        if stripped.startswith("|"):
            if not _SEPARATOR_RE.match(stripped):
                table.append(split_row(stripped))
            continue
        if table:
            _table(pdf, table)
            table = []
        if not stripped:
            pdf.ln(1.5)
            continue
        heading = _HEADING_RE.match(stripped)
        caption = _CAPTION_RE.match(stripped)
        if heading:
            pdf.set_font("Helvetica", "B", 11 if len(heading.group(1)) <= 2 else 9.5)
            body = heading.group(2)
        elif caption:
            pdf.set_font("Helvetica", "B", 8.5)
            body = f"{caption.group(1)}: {caption.group(2)}"
        else:
            pdf.set_font("Helvetica", size=8.5)
            body = stripped
        pdf.multi_cell(0, 3.8, _latin1(body), new_x="LMARGIN", new_y="NEXT")


def _table(pdf: Any, rows: list[list[str]]) -> None:
    pdf.set_font("Helvetica", size=8)
    unit = (210 - 28) / (0.6 + max(len(rows[0]), 1))
    for i, row in enumerate(rows):
        if i == 0:
            pdf.set_font("Helvetica", "B", 8)
        for j, cell in enumerate(row):
            pdf.cell(unit * (1.6 if j == 0 else 1), 3.8, _latin1(cell)[:60], align="L" if j == 0 else "R")
        pdf.ln(3.8)
        if i == 0:
            pdf.set_font("Helvetica", size=8)


def pdf_pages(data: bytes) -> list[str]:
    """The text layer of each page of a PDF (``pypdf``), in order."""
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def handle_check(request: dict[str, Any]) -> dict[str, Any]:
    """The worker side of ``read_pdf`` on a PDF an agent wrote: ``{"pdf": base64}`` -> ``{"pages": [...]}``."""
    import base64

    return {"pages": pdf_pages(base64.b64decode(request["pdf"]))}
