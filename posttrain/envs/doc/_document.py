"""A document as the doc verifier reads it: pages, sections, paragraphs and tables of Markdown.

The format (docs/tasks.md, "doc"): Markdown text in which

- a line ``<!-- page N -->`` starts page N (pages 1, 2, 3, ... in order; a document without one is
  a single page 1);
- a heading line (``#`` to ``######``) starts a section, named by its title; a location may name a
  section by its whole title or by its label, the part before the first ``. ``, ``: `` or `` - ``
  (``Note 7`` for ``Note 7. Restatement``);
- a bold caption line ``**Table N: title**`` (or ``Table N.``) names the pipe table that follows it
  (header row, ``|---|`` separator, body rows; the first cell of a row is its label); a table ends at
  its last ``|`` line and never crosses a page;
- other non-blank lines form paragraphs, split by blank lines.

A location is ``{"page", "table", "row", "column"}`` (one cell) or ``{"page", "section"}`` (text of
that section on that page); ``resolve`` finds what is there, or says why nothing is. Names compare
after ``norm`` (Unicode NFKC, whitespace collapsed, case folded for names, never for quoted values).

Not here: what a question needs (``_check.py``), how documents are made (``_gen.py``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from posttrain.shown import clipped

_PAGE_RE = re.compile(r"^<!--\s*page\s+(\d+)\s*-->\s*$")
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_CAPTION_RE = re.compile(r"^\*\*\s*(Table\s+\d+[A-Za-z]?)\s*[.:]\s*(.*?)\s*\*\*\s*$", re.IGNORECASE)
_SEPARATOR_RE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_LABEL_RE = re.compile(r"^(.+?)(?:\.\s|:\s|\s-\s|\s\u2014\s)")
MAX_QUOTE_CHARS = 400


def norm(text: str) -> str:
    """Whitespace collapsed, NFKC: the form quotes and cells compare in (case kept).

    >>> norm("  12,345\\u00a0 ")
    '12,345'
    """
    return " ".join(unicodedata.normalize("NFKC", text).split())


def name_key(text: str) -> str:
    """The form names (tables, rows, columns, sections) compare in: ``norm`` and case folded."""
    return norm(text).casefold()


def section_keys(title: str) -> set[str]:
    """The names a section answers to: its whole title and its label.

    >>> sorted(section_keys("Note 7. Restatement of 2022 figures"))
    ['note 7', 'note 7. restatement of 2022 figures']
    """
    keys = {name_key(title)}
    m = _LABEL_RE.match(norm(title))
    if m:
        keys.add(name_key(m.group(1)))
    return keys


def split_row(line: str) -> list[str]:
    """The cells of a pipe-table line (``\\|`` is a literal bar)."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", text)]


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    page: int
    section: str
    columns: tuple[str, ...]
    """Header cells, the row-label column's first."""
    rows: tuple[tuple[str, ...], ...]
    """Body rows, each label first."""


@dataclass(frozen=True)
class Paragraph:
    page: int
    section: str
    text: str


@dataclass
class Document:
    pages: int
    tables: dict[str, Table] = field(default_factory=dict)
    """``name_key(id)`` -> table."""
    paragraphs: list[Paragraph] = field(default_factory=list)
    sections: list[tuple[int, str]] = field(default_factory=list)
    """``(page, title)`` of every heading, in order."""


class DocumentError(ValueError):
    """The text is not a document of this format; the message says where."""


def parse_document(text: str) -> Document:
    """Parse ``text`` (the module docstring's format); ``DocumentError`` names the line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    doc = Document(pages=1)
    page, section, para, caption, table_lines = 1, "", [], None, []
    seen_marker = False

    def flush_para() -> None:
        if para:
            doc.paragraphs.append(Paragraph(page, section, " ".join(x.strip() for x in para)))
            para.clear()

    def flush_table(lineno: int) -> None:
        nonlocal caption
        if table_lines:
            _add_table(doc, caption, page, section, table_lines, lineno)
            table_lines.clear()
            caption = None

    for lineno, line in enumerate(lines, start=1):
        m = _PAGE_RE.match(line.strip())
        if m:
            flush_para()
            flush_table(lineno)
            number = int(m.group(1))
            expected = 1 if not seen_marker else page + 1
            if number != expected:
                raise DocumentError(f"line {lineno}: page marker {number}, expected page {expected}")
            page, seen_marker = number, True
            doc.pages = page
            continue
        stripped = line.strip()
        if stripped.startswith("|"):
            flush_para()
            table_lines.append((lineno, stripped))
            continue
        flush_table(lineno)
        if not stripped:
            flush_para()
            continue
        if (h := _HEADING_RE.match(stripped)) is not None:
            flush_para()
            section = h.group(2)
            doc.sections.append((page, section))
            continue
        if (c := _CAPTION_RE.match(stripped)) is not None:
            flush_para()
            caption = (c.group(1), c.group(2))
            continue
        para.append(stripped)
    flush_para()
    flush_table(len(lines))
    return doc


def _add_table(doc: Document, caption: tuple[str, str] | None, page: int, section: str,
               lines: list[tuple[int, str]], end: int) -> None:
    first = lines[0][0]
    if caption is None:
        raise DocumentError(f"line {first}: a table without a '**Table N: title**' caption line before it")
    if len(lines) < 2 or not _SEPARATOR_RE.match(lines[1][1]):
        raise DocumentError(f"line {first}: {caption[0]}: expected a header row and a '|---|' separator row")
    columns = tuple(split_row(lines[0][1]))
    rows = []
    for lineno, line in lines[2:]:
        cells = split_row(line)
        if len(cells) != len(columns):
            raise DocumentError(f"line {lineno}: {caption[0]}: {len(cells)} cells, the header has {len(columns)}")
        rows.append(tuple(cells))
    key = name_key(caption[0])
    if key in doc.tables:
        raise DocumentError(f"line {first}: {caption[0]} appears twice")
    if len({name_key(c) for c in columns[1:]}) != len(columns) - 1:
        raise DocumentError(f"line {first}: {caption[0]}: two columns share a name")
    if len({name_key(r[0]) for r in rows}) != len(rows):
        raise DocumentError(f"line {first}: {caption[0]}: two rows share a label")
    doc.tables[key] = Table(norm(caption[0]), caption[1], page, section, columns, tuple(rows))


# ---------------------------------------------------------------- locations

CELL_KEYS = frozenset({"page", "table", "row", "column"})
TEXT_KEYS = frozenset({"page", "section"})


def location_problem(loc: Any) -> str | None:
    """Why ``loc`` is not a location object of either form, or None."""
    if not isinstance(loc, Mapping):
        return "a location must be an object"
    keys = set(loc)
    if keys not in (CELL_KEYS, TEXT_KEYS):
        return ('a location is {"page", "table", "row", "column"} or {"page", "section"}, '
                f"got the keys {sorted(keys)}")
    page = loc["page"]
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        return "page must be a whole number from 1"
    if not all(isinstance(loc[k], str) and loc[k].strip() for k in keys - {"page"}):
        return f"{', '.join(sorted(keys - {'page'}))} must be non-empty strings"
    return None


MAX_SHOWN_CHARS = 60
"""Characters of a name (or page) a citation gave that feedback repeats: the policy writes them, and a
12,000-character table name in each of eight citations was 192,600 characters of feedback, echoed twice
into the next repair prompt."""


def shown(value: object, quoted: bool = False) -> str:
    """A citation's name or page as feedback repeats it (``repr`` where ``quoted``), cut to ``MAX_SHOWN_CHARS``
    (``posttrain.shown.clipped``).

    >>> shown("Table 2"), shown("Revenue", True), shown("x" * 100)[-5:]
    ('Table 2', "'Revenue'", 'xx...')
    """
    return clipped(value, MAX_SHOWN_CHARS, quoted=quoted)


def describe(loc: Mapping[str, Any]) -> str:
    """A location in words, for feedback.

    >>> describe({"page": 3, "table": "Table 2", "row": "Revenue", "column": "2023"})
    "page 3, Table 2, row 'Revenue', column '2023'"
    """
    if "table" in loc:
        return f"page {shown(loc['page'])}, {shown(loc['table'])}, row {shown(loc['row'], True)}, " \
               f"column {shown(loc['column'], True)}"
    return f"page {shown(loc['page'])}, section {shown(loc['section'], True)}"


def resolve(doc: Document, loc: Mapping[str, Any]) -> tuple[str | list[str] | None, str | None]:
    """What is at ``loc``: ``(cell text, None)``, ``(the section's paragraphs on that page, None)``, or
    ``(None, why nothing is)``. ``loc`` has passed ``location_problem``."""
    page = loc["page"]
    if page > doc.pages:
        return None, f"the document has {doc.pages} page(s)"
    if "table" in loc:
        table = doc.tables.get(name_key(loc["table"]))
        if table is None:
            return None, f"there is no {shown(norm(loc['table']))}"
        if table.page != page:
            return None, f"{table.id} is not on page {page}"
        cols = [name_key(c) for c in table.columns]
        col = name_key(loc["column"])
        if col not in cols[1:]:
            return None, f"{table.id} has no column {shown(loc['column'], True)}"
        row = next((r for r in table.rows if name_key(r[0]) == name_key(loc["row"])), None)
        if row is None:
            return None, f"{table.id} has no row {shown(loc['row'], True)}"
        return row[cols.index(col, 1)], None
    keys = name_key(loc["section"])
    texts = [p.text for p in doc.paragraphs if p.page == page and keys in section_keys(p.section)]
    if not texts:
        if not any(keys in section_keys(title) for _, title in doc.sections):
            return None, f"there is no section {shown(loc['section'], True)}"
        return None, f"section {shown(loc['section'], True)} has no text on page {page}"
    return texts, None


def same_place(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two locations (each valid) name the same cell, or the same section on the same page."""
    if a["page"] != b["page"] or ("table" in a) != ("table" in b):
        return False
    if "table" in a:
        return all(name_key(a[k]) == name_key(b[k]) for k in ("table", "row", "column"))
    return bool(section_keys(a["section"]) & section_keys(b["section"]))


def quote_problem(found: str | list[str], quote: str) -> str | None:
    """Why ``quote`` is not what the location holds: a cell must read exactly the quote; a section's
    text on that page must contain it, within one paragraph (``MAX_QUOTE_CHARS`` at most)."""
    q = norm(quote)
    if isinstance(found, str):
        return None if q == norm(found) else f"the cell reads {norm(found)[:60]!r}, not the quoted {q[:60]!r}"
    if len(q) > MAX_QUOTE_CHARS:
        return f"the quote is longer than {MAX_QUOTE_CHARS} characters; quote the sentence that holds the figure"
    if any(q in norm(p) for p in found):
        return None
    return "the quoted text is not in that section on that page"
