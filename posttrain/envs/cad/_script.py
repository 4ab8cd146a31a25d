"""The response -> one OpenSCAD script, and what a script may not do before it is rendered.

Extraction: the last fenced block tagged ``openscad`` or ``scad`` (or untagged); a response with
fences but none of those is a format failure; a response without fences is the script itself.

Static check (``script_problem``), on the script's code (``code_only``: comments and strings are
skipped the way OpenSCAD's lexer skips them; an unterminated string or comment hides the rest,
which OpenSCAD then refuses as a syntax error):

- no ``include <...>`` / ``use <...>`` (the task ships no library to include, and the libraries
  under ``/usr/share/openscad`` are not the task's);
- no module or function that reads a file: ``import``, ``import_stl``, ``import_off``,
  ``import_dxf``, ``surface``, ``dxf_dim``, ``dxf_cross``, ``dxf_linear_extrude``,
  ``dxf_rotate_extrude``, no ``file =`` argument, and no string literal as the first argument of
  ``linear_extrude`` or ``rotate_extrude`` (OpenSCAD 2021 reads their first positional argument,
  ``file``, as a DXF to extrude: ``linear_extrude("a.dxf", height = 10)`` builds a part from a file);
  a path held in a variable still slips past (``linear_extrude(p)`` is also how a height is passed);
- at most ``MAX_SCRIPT_CHARS`` characters, no NUL, valid UTF-8.

This is a courtesy, not the defence: the render runs in the sandbox (``_render.py``), where the
only files are ``/usr`` (read-only) and the script itself, so a read that slipped past this check
finds nothing of the host's or of the task's. It makes the feedback say why, before a render.

>>> extract_script("Here:\\n```openscad\\ncube(10);\\n```")
('cube(10);\\n', 'fenced')
>>> script_problem('include </etc/passwd>')[0]
'forbidden'
"""

from __future__ import annotations

import re

MAX_SCRIPT_CHARS = 200_000
"""Longest script rendered (a polyhedron() with thousands of points fits; a 1 MB response does not)."""

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
_SCAD_TAGS = frozenset({"", "openscad", "scad"})
_DIRECTIVE_RE = re.compile(r"\b(include|use)[\s>]*<")  # OpenSCAD's lexer: include[ \t\r\n>]*<
_FILE_READERS = frozenset({"import", "import_stl", "import_off", "import_dxf", "surface", "dxf_dim", "dxf_cross",
                           "dxf_linear_extrude", "dxf_rotate_extrude"})
_IDENT_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_]*")
_FILE_ARG_RE = re.compile(r"\bfile\s*=(?!=)")
_PATH_ARG_RE = re.compile(r"\b(linear|rotate)_extrude[\s/]*\([\s/]*\"")
r"""The first positional argument of these two is ``file`` in OpenSCAD 2021: a string there is a DXF read.
``[\s/]*`` steps over comments as ``code_only`` leaves them (blanks after ``//``; ``/* */`` all blank), in
linear time."""


def extract_script(response: str) -> tuple[str | None, str]:
    """``(script, how)``: how is ``fenced`` | ``whole``, or ``(None, why)`` for a format failure."""
    blocks = _FENCE_RE.findall(response)
    if blocks:
        scad = [body for tag, body in blocks if tag.lower() in _SCAD_TAGS]
        if not scad:
            return None, "the response has fenced blocks, but none tagged openscad"
        return scad[-1], "fenced"
    if "```" in response:
        return None, "the response has an unclosed ``` fence"
    return response, "whole"


def code_only(script: str) -> str:
    """``script`` with its comments and string literals blanked (same length, newlines kept), the
    way OpenSCAD's lexer reads it: ``//`` to the end of the line, ``/* ... */`` (not nested), and
    ``"..."`` with backslash escapes.

    >>> code_only('a = "import(x)"; // surface\\nb = 1;')
    'a = "         "; //        \\nb = 1;'
    """
    out, i, n = [], 0, len(script)
    while i < n:
        c = script[i]
        if c == "/" and script.startswith("//", i):
            end = script.find("\n", i)
            end = n if end < 0 else end
            out.append("//" + " " * (end - i - 2))
            i = end
        elif c == "/" and script.startswith("/*", i):
            end = script.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", script[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and script[j] != '"':
                j += 2 if script[j] == "\\" else 1
            end = min(j + 1, n)
            out.append('"' + re.sub(r"[^\n]", " ", script[i + 1 : end - 1]) + ('"' if end - i > 1 else ""))
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)[:n]


def script_problem(script: str) -> tuple[str, str] | None:
    """``(error_class, why)`` when ``script`` may not be rendered (``format``: too long, NUL, not
    UTF-8, empty; ``forbidden``: it includes or reads a file), or None; see the module docstring."""
    if len(script) > MAX_SCRIPT_CHARS:
        return "format", f"the script has {len(script)} characters; at most {MAX_SCRIPT_CHARS} are rendered"
    if "\x00" in script:
        return "format", "the script contains a NUL character"
    try:
        script.encode("utf-8")
    except UnicodeEncodeError:
        return "format", "the script is not valid UTF-8 text"
    if not script.strip():
        return "format", "the script is empty"
    code = code_only(script)
    if m := _DIRECTIVE_RE.search(code):
        return "forbidden", (f"the script uses `{m.group(1)} <...>`: nothing outside the script may be "
                             "included, used or imported")
    for m in _IDENT_RE.finditer(code):
        if m.group(0) in _FILE_READERS:
            line = code.count("\n", 0, m.start()) + 1
            return "forbidden", (f"line {line}: `{m.group(0)}` reads a file; build the part from primitives "
                                 "(nothing outside the script may be included, used or imported)")
    if m := _FILE_ARG_RE.search(code):
        line = code.count("\n", 0, m.start()) + 1
        return "forbidden", f"line {line}: a `file =` argument reads a file; build the part from primitives"
    if m := _PATH_ARG_RE.search(code):
        line = code.count("\n", 0, m.start()) + 1
        return "forbidden", (f"line {line}: a string as the first argument of `{m.group(1)}_extrude` is a file to "
                             "read; extrude a 2D child built from primitives")
    return None
