"""The files verifier's check: a single response applied to a pristine copy, then the final-state grader.

The response is one JSON document (a single fenced block, or the whole text), strictly parsed (no
duplicate keys: two versions of one file must not be told apart by which one a parser keeps): an
object mapping each file the response creates or changes, by its canonical workspace path
(``_workspace.check_path``), to its whole new content, a string (UTF-8 text) or ``{"base64": ...}``
(any bytes); ``null`` deletes the file. Files not named are left as they are. Anything else (a
symlink, a path outside the workspace, a write under a file) is a ``format`` failure.

``handle_check`` is the worker side (``posttrain.verify._deadline``): a response's parse and the
comparisons run under a CPU budget, so no response can hang or cost the host.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.envs import fail, passed
from posttrain.envs.files._grade import (
    Problem,
    Target,
    check_target,
    error_class,
    feedback_text,
    grade_located,
    named_paths,
    parse_targets,
    reads_as,
)
from posttrain.envs.files._workspace import (
    MAX_FILES,
    MAX_WORKSPACE_BYTES,
    Entry,
    apply_writes,
    check_path,
    decode_workspace,
)
from posttrain.strict_json import StrictJSONError, extract_json_text, loads_strict
from posttrain.types import Verdict

MAX_RESPONSE_CHARS = 4 * MAX_WORKSPACE_BYTES // 3 + 4096

_FORMAT_HINT = ('Reply with one JSON object mapping each file you create or change (its path relative '
                'to the workspace) to its whole new content as a string; null deletes a file.')


def parse_writes(response: str) -> tuple[dict[str, bytes | None] | None, str | None]:
    """``(writes, None)`` for a well-formed response, else ``(None, why)``.

    >>> parse_writes('{"out.txt": "hi", "old.txt": null}')
    ({'out.txt': b'hi', 'old.txt': None}, None)
    >>> parse_writes('{"../x": "hi"}')[1]
    "path '../x': a path component is empty, '.' or '..'"
    """
    try:
        value = loads_strict(extract_json_text(response), max_chars=MAX_RESPONSE_CHARS)
    except StrictJSONError as e:
        return None, str(e)
    if not isinstance(value, dict):
        return None, f"expected a JSON object of paths, got a {type(value).__name__}"
    if len(value) > MAX_FILES:
        return None, f"{len(value)} files; at most {MAX_FILES}"
    writes: dict[str, bytes | None] = {}
    total = 0
    for path, content in value.items():
        problem = check_path(path)
        if problem:
            return None, f"path {path!r}: {problem}"
        if content is None:
            writes[path] = None
            continue
        data = _content_bytes(content)
        if data is None:
            return None, f'{path}: content must be a string, {{"base64": "..."}} or null'
        total += len(data)
        if total > MAX_WORKSPACE_BYTES:
            return None, f"the files written hold more than {MAX_WORKSPACE_BYTES} bytes"
        writes[path] = data
    return writes, None


def _content_bytes(content: Any) -> bytes | None:
    if isinstance(content, str):
        try:
            return content.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800) is not text
            return None
    if isinstance(content, dict) and set(content) == {"base64"} and isinstance(content["base64"], str):
        try:
            return base64.b64decode(content["base64"], validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def check_response(workspace: Mapping[str, Any], targets: Mapping[str, Any], response: str,
                   instruction: str | None = None) -> Verdict:
    """The verdict on ``response`` for a task with these ``workspace`` and ``targets`` fields; the
    feedback names only the paths the task's ``instruction`` gives away (``_grade.named_paths``)."""
    pristine = decode_workspace(workspace)
    wanted = parse_targets(targets, pristine)
    writes, problem = parse_writes(response)
    if writes is None:
        return fail(f"Answer format: {problem}. {_FORMAT_HINT}", "format", {"reason": problem})
    final, refused = apply_writes(pristine, writes)
    if refused:
        return fail(f"Answer format: {'; '.join(refused[:4])}. {_FORMAT_HINT}", "format", {"reason": refused})
    located = grade_located(wanted, pristine, final)
    problems = [problem for _, problem in located]
    evidence = {"written": sorted(p for p, d in writes.items() if d is not None),
                "deleted": sorted(p for p, d in writes.items() if d is None),
                "problems": [f"{c}: {s}" for c, s in problems]}  # every path, for the log
    if not problems:
        return passed("Every target file is right and nothing else changed.", evidence)
    return fail(feedback_text(located, named_paths(wanted, instruction)), error_class(problems), evidence,
                {"format": format_credit(wanted, pristine, final, problems)})


def format_credit(wanted: Sequence[Target], pristine: Mapping[str, bytes], final: Mapping[str, Entry],
                  problems: Sequence[Problem]) -> float:
    """1.0 for a well-formed answer whose content is wrong: every target written in its format,
    nothing else touched (collateral damage and links are attacks: 0). A target left as the workspace
    had it, or still there when it should be gone, was never written: the no-op of a task that edits
    or deletes files in place must earn nothing either, nor the same file rewritten in what the
    comparison ignores (a line ending, a blank line at the end: ``_grade.reads_as``)."""
    if not all(c == "wrong_content" for c, _ in problems):
        return 0.0
    for target in wanted:
        if target.format == "absent" and target.path in final:
            return 0.0
        data, entry = pristine.get(target.path), final.get(target.path)
        if (data is not None and entry is not None and entry.kind == "file" and check_target(target, data)
                and reads_as(target, data, entry.data)):
            return 0.0
    return 1.0


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of the files verifier: one request in, one verdict (as JSON) out."""
    return check_response(request["workspace"], request["targets"], request["response"],
                          request.get("instruction")).to_json()
