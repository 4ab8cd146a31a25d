"""``parse``: ``ast.parse`` that a thread pool can call.

CPython 3.11 keeps the AST constructor's recursion counter in the interpreter's ``ast`` state, shared
by every thread, and a constructor that fails (or a garbage collection that switches threads in the
middle of one) leaves it off: a later ``ast.parse`` in any thread raises ``SystemError: AST
constructor recursion depth mismatch (before=48, after=41)`` (CPython gh-106905). posttrain's
verifiers parse Python in service worker threads (the repo grader's public-API check, the code
domain's test and answer reading), where that error turned a reference's verdict into
``infra:verifier_crash`` under load. Here every parse holds one lock, and the ``SystemError``, which
says nothing about the source, is retried once under it.

>>> parse("x = 1").body[0].targets[0].id
'x'
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)`` under a process-wide lock (module docstring); a
    ``SyntaxError`` is the source's, as ``ast.parse`` raises it."""
    with _LOCK:
        try:
            return ast.parse(source, filename, mode)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e):
                raise
            return ast.parse(source, filename, mode)
