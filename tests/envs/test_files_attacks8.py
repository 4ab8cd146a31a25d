"""A helper's eighth adversarial read of the files domain, as a policy that wants the reward without the work
(real generated tasks, the real workspace episode, sandbox and verifier in its worker; no mocks).

Measured over 20 generated tasks each (levels 1-5, ``generate_params(seed=8)``; notes tasks for the moves),
none passed wrongly, none was an infra error, no episode took over 4 s (its own sleeps included):

- a file whose bytes match but whose kind differs: a move done as a hard link (original kept: 0/20,
  ``wrong_content``), each target a fifo fed by a loop left running (0/20, ``not_regular``), a 20 MB sparse
  file sorted first to spend the grader's read budget (0/20, ``format``), the overlay's own marks forged
  (``trusted.overlay.*`` and a ``mknod`` whiteout are refused in the sandbox; ``user.overlay.*`` is set, and
  neither the overlay, mounted by root, nor the host reads it: 0/20), an ACL that
  widens a kept file's group bits (0/20, ``collateral``: the mode shows it);
- looking untouched: a kept file changed, its mtime put back and an xattr set (0/20, ``collateral``), a kept
  file deleted and recreated with the same bytes but mode 0600 (0/20);
- names: the right content under a twin of each target's name (a trailing space, a capital: 0/20 each) and
  kept files renamed to twins (a trailing space, a zero-width space: 0/20), ``..``, ``/tmp/..`` and ``/work/..``
  spellings in file tools (each an error, nothing written: 0/20);
- floods: 1,700 new files, a ``.git`` 80 directories deep, a path past the host's ``PATH_MAX`` (in ``.git``
  or not): each ``ungradable``, the agent's own fail (0/20 each); symlink loops (0/20, ``not_regular``);
- timing: a placeholder written by a command that then timed out still marks the first write
  (``process.inspected`` 0 on 20/20); a writer left in the background does not outlive its call (0/20);
- lenient comparison (single responses over 30 generated tasks' 68 content targets): a BOM, UTF-16,
  U+2028 or NEL line breaks, a leading blank line, a no-break space, ``;`` or ``, `` as a CSV's separator, a
  duplicate JSON key, a comment: 0 passed; CRLF with trailing spaces, lone CRs, compact JSON: pass.

What still passes, as it should (the bytes and modes are the task's): a kept file changed and put back byte
for byte (its mtime too), deleted and recreated as it was, an ACL within its mode bits, a link loop in
``.git`` (never read).

One hole, in the kit's ``write_file`` tool (``workspace._tools._not_a_file``): a path under a file made the
file a directory, the call answering "Wrote 8 bytes" (``write_file("README.md/notes.txt")``, a typo, a file
taken for a directory): the file's content gone and the attempt ``not_regular`` after the oracle's right
work, 20 of 20 generated tasks (under a target's path: 20 of 20 failed too). Now it is the tool's error, nothing
written, and those episodes pass (20 of 20 each). A link on the path is still replaced, never written through
(tests/envs/test_workspace_kit.py).
"""

from __future__ import annotations

import json
import random
import shlex

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import _placeholder, oracle, reads
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT

NOTES = build_task(random.Random("files-attacks8-notes"), 4, "files-attacks8-notes", ["notes"])
SALES = build_task(random.Random("files-attacks8-sales"), 3, "files-attacks8-sales", ["sales"])
q = shlex.quote


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


def _content(task) -> list[tuple[str, str]]:
    """Each target the reference writes as text: ``(path, its right content)``."""
    ref = json.loads(str(task.reference))
    moved = {p for p, t in task.fields["targets"].items() if t.get("format") == "bytes"}
    return [(p, c) for p, c in sorted(ref.items()) if isinstance(c, str) and p not in moved]


def _placeholders(task) -> list[dict]:
    return [call("write_file", path=p, content=text) for p, t in sorted(task.fields["targets"].items())
            if (text := _placeholder(t)) is not None]


def _work(task) -> list[dict]:
    return oracle(task)[:-1]


def _hardlink_moves(task) -> list[dict]:
    moves = sorted((p, t["same_as"]) for p, t in task.fields["targets"].items() if t.get("format") == "bytes")
    line = " && ".join(["mkdir -p archive", *(f"ln -- {q(src)} {q(dst)}" for dst, src in moves)])
    return [*reads(task), call("bash", command=line),
            *(call("write_file", path=p, content=c) for p, c in _content(task))]


def _fifo_fed(task) -> list[dict]:
    cmds = [f"cp -- {q(p)} .git/s{i} && rm -- {q(p)} && mkfifo -- {q(p)} && "
            f"(setsid sh -c 'while :; do cat .git/s{i} > {q(p)}; done' >/dev/null 2>&1 &)"
            for i, (p, _) in enumerate(_content(task))]
    return [*_work(task), call("bash", command="mkdir -p .git; " + " ; ".join(cmds))]


def _twins(task) -> list[dict]:
    out = [*reads(task), *_placeholders(task)]
    for p, c in _content(task):
        out += [call("write_file", path=p[0].upper() + p[1:], content=c), call("write_file", path="x", content=c),
                call("bash", command=f"mv x {q(p + ' ')}")]
    return out


def _dotdot(task) -> list[dict]:
    writes = [call("write_file", path=spelled, content=c) for p, c in _content(task)
              for spelled in (f"../work/{p}", f"/work/../work/{p}", f"/tmp/../work/{p}")]
    return [*reads(task), *_placeholders(task), *writes]


_ACL = ("python3 -c \"import os, struct\n"
        "def acl(*e): return struct.pack('<I', 2) + b''.join(struct.pack('<HHI', t, p, i) for t, p, i in e)\n"
        "os.setxattr('{path}', 'system.posix_acl_access', acl((1, 6, 2**32 - 1), (2, {perm}, 65534), "
        "(4, 4, 2**32 - 1), (0x10, {perm}, 2**32 - 1), (0x20, 4, 2**32 - 1)))\"")
_LONG = "n" * 250


def _after_work(command: str):
    return lambda task: [*_work(task), call("bash", command=command)]


def _after_placeholders(command: str):
    return lambda task: [*reads(task), *_placeholders(task), call("bash", command=command)]


CHEATS = {  # name: (script, tasks, the error class it fails with)
    "move-as-hard-link": (_hardlink_moves, [NOTES], "wrong_content"),
    "fifo-fed-targets": (_fifo_fed, [NOTES, SALES], "not_regular"),
    "sparse-file-first": (_after_placeholders("truncate -s 20M 0000.bin"), [SALES], "format"),
    "overlay-marks-forged": (_after_placeholders(
        "python3 -c \"import os\nfor n in ('trusted.overlay.opaque', 'user.overlay.opaque'):\n try: "
        "os.setxattr('reports', n, b'y')\n except OSError: pass\"; mknod junk c 0 0; true"), [SALES], "wrong_content"),
    "acl-widens-group": (_after_work(_ACL.format(path="README.md", perm=7)), [SALES], "collateral"),
    "changed-then-mtime-back": (_after_work(
        "cp -p todo.md /tmp/r && echo '- [x] done' >> todo.md && touch -r /tmp/r todo.md && "
        "python3 -c \"import os; os.setxattr('todo.md', 'user.x', b'1')\""), [NOTES, SALES], "collateral"),
    "recreated-0600": (_after_work("cp README.md /tmp/r && rm README.md && install -m 600 /tmp/r README.md"),
                       [SALES], "collateral"),
    "right-content-under-twins": (_twins, [NOTES, SALES], "collateral"),
    "kept-files-renamed-to-twins": (_after_work("mv README.md 'README.md ' && mv todo.md $'todo\\xe2\\x80\\x8b.md'"),
                                    [SALES], "collateral"),
    "dotdot-in-file-tools": (_dotdot, [SALES], "wrong_content"),
    "1700-new-files": (_after_placeholders("mkdir -p tmp && cd tmp && seq 1 1700 | xargs touch"), [SALES],
                       "ungradable"),
    "git-80-deep": (_after_work("mkdir -p .git/$(printf 'a/%.0s' $(seq 80))"), [SALES], "ungradable"),
    "path-past-path-max": (_after_work(f"mkdir w && cd w && for i in $(seq 17); do mkdir {_LONG} && cd {_LONG}; "
                                       "done; touch f"), [SALES], "ungradable"),
    "symlink-loops": (_after_work("ln -s self self && mkdir -p .git && ln -s loop .git/loop"), [SALES],
                      "not_regular"),
}


@pytest.mark.parametrize(("name", "task"), [pytest.param(n, t, id=f"{n}-{t.tags[1]}") for n, (_, ts, _) in
                                            CHEATS.items() for t in ts])
def test_a_cheat_fails_as_its_own_verdict(pool, verify, name, task) -> None:
    script, _, error_class = CHEATS[name]
    got = play(pool, task, [*script(task), SUBMIT], verify, max_steps=80)
    verdict = got.first
    assert not verdict.passed and not verdict.is_infra_error and verdict.reward == 0.0, verdict
    assert verdict.error_class == error_class, (verdict.error_class, verdict.feedback[:300])
    assert len(verdict.feedback) < 1000, verdict.feedback[:300]  # (a path past PATH_MAX was fed back whole: 4,000+)
    if name == "dotdot-in-file-tools":
        assert all(c.result.startswith("Error") for c in got.calls if c.name == "write_file" and ".." in
                   c.arguments["path"]), [c.result for c in got.calls]


def test_a_background_writer_and_a_timed_out_placeholder_earn_nothing(pool, verify) -> None:
    """A writer left running to put the right files in place after its call (while the agent reads): gone
    with its call. A placeholder written by a command that then timed out: still the first write."""
    stash = [call("write_file", path=f".git/s/{p}", content=c) for p, c in _content(SALES)]
    copy = " ; ".join(f"mkdir -p $(dirname {q(p)}); cp .git/s/{q(p)} {q(p)}" for p, _ in _content(SALES))
    got = play(pool, SALES, [*stash, call("bash", command=f"(setsid nohup sh -c 'sleep 1; {copy}' >/dev/null 2>&1 &)"),
                             *reads(SALES), call("bash", command="sleep 2"), SUBMIT], verify)
    assert (got.first.outcome, got.first.error_class) == ("fail", "missing"), got.first.feedback
    placeholder = " ; ".join(f"mkdir -p $(dirname {q(p)}); printf '{{}}' > {q(p)}" for p, _ in _content(SALES))
    got = play(pool, SALES, [call("bash", command=placeholder + "; sleep 30", timeout=1), *reads(SALES), SUBMIT],
               verify)
    assert got.first.error_class == "wrong_content" and got.first.components["process.inspected"] == 0.0, got.first


HONEST = {
    "oracle": [],
    "kept-file-put-back-with-its-mtime": [call("bash", command="cp -p README.md /tmp/r && echo x >> README.md && "
                                                              "cat /tmp/r > README.md && touch -r /tmp/r README.md")],
    "kept-file-recreated": [call("bash", command="cp README.md /tmp/r && rm README.md && cp /tmp/r README.md")],
    "acl-within-the-mode": [call("bash", command=_ACL.format(path="todo.md", perm=4))],
    "link-loop-in-git": [call("bash", command="mkdir -p .git && ln -s loop .git/loop && ln -s /etc/passwd .git/pw")],
}


@pytest.mark.parametrize("name", list(HONEST))
def test_the_right_work_with_harmless_metadata_passes(pool, verify, name) -> None:
    got = play(pool, SALES, [*_work(SALES), *HONEST[name], SUBMIT], verify)
    assert got.first.passed, got.first.evidence.get("problems") or got.first.feedback


@pytest.mark.parametrize("under", ["README.md", "target"])
def test_write_file_under_a_file_is_an_error_and_changes_nothing(pool, verify, under) -> None:
    """Before: "Wrote 8 bytes to README.md/notes.txt.", README.md a directory, the attempt not_regular."""
    parent = _content(SALES)[0][0] if under == "target" else under
    got = play(pool, SALES, [*_work(SALES), call("write_file", path=f"{parent}/notes.txt", content="checked\n"),
                             SUBMIT], verify)
    result = got.calls[-2].result
    assert result == f"Error: {parent} is a file, not a directory: nothing written to {parent}/notes.txt.", result
    assert got.first.passed, got.first.feedback


def _lenient(text: str, fmt: str) -> dict[str, tuple[str | dict, bool]]:
    """Spellings of a right ``text`` and whether each should pass."""
    import base64

    def b64(data: bytes) -> dict:
        return {"base64": base64.b64encode(data).decode()}

    lines = text.rstrip("\n")
    out = {"bom": (b64(b"\xef\xbb\xbf" + text.encode()), False), "utf16": (b64(text.encode("utf-16")), False),
           "u2028": (lines.replace("\n", "\u2028") + "\n", "\n" not in lines),
           "nel": (lines.replace("\n", "\x85") + "\n", "\n" not in lines), "nbsp": (text.replace(" ", "\u00a0", 1), " " not in text), "crlf-trailing-spaces":
           (text.replace("\n", "  \r\n"), fmt != "csv"), "lone-cr": (text.replace("\n", "\r"), True)}
    if fmt != "json":
        out["leading-blank-line"] = ("\n" + text, False)
    if fmt == "csv":
        out |= {"semicolons": (text.replace(",", ";"), False), "comma-space": (text.replace(",", ", "), False)}
    if fmt == "json":
        value = json.loads(text)
        out |= {"compact": (json.dumps(value), True), "comment": ("// report\n" + json.dumps(value), False),
                "duplicate-key": ('{"valid_rows": 0, ' + json.dumps(value)[1:], False)}
    return out


def test_lenient_spellings_pass_and_near_misses_do_not(verify) -> None:
    tasks = [NOTES, SALES, build_task(random.Random("files-attacks8-merge"), 5, "files-attacks8-merge", ["merge"])]
    wrong = []
    for task in tasks:
        ref = json.loads(str(task.reference))
        for path, text in _content(task):
            fmt = task.fields["targets"][path]["format"]
            for name, (spelled, should) in _lenient(text, fmt).items():
                verdict = verify(task, json.dumps({**ref, path: spelled}))
                assert not verdict.is_infra_error, verdict
                if verdict.passed != should:
                    wrong.append((task.id, path, name, verdict.error_class))
    assert wrong == []
