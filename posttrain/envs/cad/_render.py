"""OpenSCAD in the sandbox: a script -> a binary STL (verification) or a PNG (views beside the gold).

Every render, the gold's included, is one ``pool.exec`` job: a fresh bubblewrap sandbox (no
network, only ``/usr`` read-only and ``/work`` holding the script, uid 65534, cgroup memory and
pids limits, a wall-clock timeout, RLIMIT_CPU). OpenSCAD's language cannot write files; the STL
goes to the job's private ``/tmp`` and comes back on the report channel (fd 3), which our shell
line writes only after OpenSCAD exited 0, capped at ``MAX_STL_BYTES`` (a larger mesh is the
candidate's ``too_large``, never a truncated check), behind the SHA-256 of the script the job read:
a report that is not this script's is ``infra``, never judged as the candidate's part.

What becomes of a render (``Render.status``):

- ``ok``: exit 0 and a mesh;
- ``error``: OpenSCAD failed (syntax error, an empty or 2D top-level object, recursion): its
  ERROR/WARNING lines are the feedback;
- ``timeout`` (the wall-clock limit or RLIMIT_CPU: a ``minkowski`` or ``$fn`` bomb) and
  ``memory`` (the cgroup's OOM killer): the candidate's failure;
- ``too_large``: the STL passed the cap;
- ``infra``: the sandbox failed, or the job timed out while starved of CPU by a loaded host
  (``starved``; the sandbox decides that from CPU time, which a script cannot fake).

Gold renders are cached per process by a digest of the gold script (``gold_render``): one render
per task, whatever the number of samples verified against it.

PNG views (``write_views``): the gold's and the candidate's *verified meshes* (not their scripts)
imported into a fixed scene under ``xvfb-run`` in the sandbox, one camera for both (aimed at the
gold's bounding box) so that a wrong size shows; for people (``python -m posttrain.envs.cad views``;
report.html does not show them yet), never for the verdict.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from posttrain.verify.feedback import normalize

MAX_STL_BYTES = 16 << 20
"""The report cap of a render job: a binary STL of about 335k triangles."""
GOLD_TIMEOUT_S = 120.0
"""Wall-clock limit of a gold render (the task's own script: trusted, but it may be slow)."""
GOLD_MEMORY_MB = 2048
_GOLD_CACHE_BYTES = 256 << 20
"""Most STL bytes kept by the per-process gold cache (least recently used go first)."""
_RENDER_LINE = ("openscad --export-format binstl -o /tmp/part.stl /work/part.scad && "
                "{ sha256sum /work/part.scad | cut -c1-64 && times && cat /tmp/part.stl; } >&3")
_DIGEST_LINE = 65
"""The report starts with the SHA-256 of the script the job rendered and a newline (a report that is
not this script's, another job's, is an infra error, never the candidate's verdict), then the shell's
``times`` (two lines; the second: OpenSCAD's user and system CPU time), then the STL."""
_REPORT_HEAD = _DIGEST_LINE + 64
"""The most bytes before the STL (the digest line and ``times``' two short lines)."""
_TIMES_RE = re.compile(rb"^\d+m[\d.]+s \d+m[\d.]+s\n(\d+)m([\d.]+)s (\d+)m([\d.]+)s\n")
"""``times``: the shell's own user and system time, then its children's (OpenSCAD's), each ``MmS.SSs``."""
_PNG_LINE = ("xvfb-run -a -s '-screen 0 800x600x24' openscad {camera} --imgsize={size},{size} "
             "--colorscheme=Tomorrow -o /tmp/view.png /work/view.scad && cat /tmp/view.png >&3")
_MESSAGE_RE = re.compile(r"^(ERROR|WARNING|Can't parse file|Current top level object)\b.*$", re.MULTILINE)
_MAX_MESSAGES = 6
_SCAN_BYTES = 1 << 16
"""How much of OpenSCAD's output is read for its messages, at each end: a script's ``echo`` fills the job's
stderr up to its cap (16 MiB), and reading all of it cost the verifier's own process 3.5-3.7 s of CPU a render
(tests/envs/test_cad_attacks12.py); its ends cost 0.002 s."""

Status = Literal["ok", "error", "timeout", "memory", "too_large", "infra"]


@dataclass(frozen=True)
class Render:
    """What one render job produced (see the module docstring for ``status``)."""

    status: Status
    stl: bytes = b""
    messages: str = ""
    """OpenSCAD's ERROR / WARNING lines (normalised, at most 6), for the feedback."""
    duration_s: float = 0.0
    cpu_s: float = 0.0
    """OpenSCAD's CPU seconds (user + system) for a render that finished; 0 otherwise."""
    peak_memory_mb: float | None = None
    detail: str = ""
    """For ``infra``: what failed; ``starved`` when the host starved the job of CPU."""

    @property
    def starved(self) -> bool:
        return self.status == "infra" and "starved" in self.detail


def _limits(memory_mb: int, timeout_s: float, cpu_s: float | None = None) -> Any:
    from posttrain.sandbox import Limits

    cpu = math.ceil(cpu_s) if cpu_s is not None else timeout_s + 1.0
    return Limits(memory_mb=memory_mb, pids=64, cpu_cores=1.0, cpu_time_s=cpu, file_size_mb=24,
                  tmp_mb=48, output_bytes=MAX_STL_BYTES + _REPORT_HEAD)


def openscad_messages(stderr: bytes) -> str:
    """The ERROR / WARNING lines of OpenSCAD's output, normalised (no paths, no timings).

    >>> openscad_messages(b"Compiling...\\nERROR: Parser error: syntax error in file /work/part.scad, line 3\\n")
    'ERROR: Parser error: syntax error in file part.scad, line 3'
    """
    unread = ""
    if len(stderr) > 2 * _SCAN_BYTES:  # its two ends, whole lines (the script's echo fills the middle)
        head, tail = stderr[:_SCAN_BYTES], stderr[-_SCAN_BYTES:]
        stderr = head[: head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1 :]
        unread = ", more not read"
    text = stderr.decode("utf-8", errors="replace").replace("/work/", "")
    found = [m.group(0) for m in _MESSAGE_RE.finditer(text)]
    if len(found) > _MAX_MESSAGES:
        found = found[: _MAX_MESSAGES - 1] + [f"... ({len(found) - _MAX_MESSAGES + 1} more messages{unread})"]
    return "\n".join(normalize(line)[:200] for line in found)  # the kept lines only: normalize is the cost


def render_stl(pool: Any, script: str, *, timeout_s: float, memory_mb: int, cpu_s: float | None = None) -> Render:
    """Render ``script`` to a binary STL in a fresh sandbox job of ``pool``: at most ``timeout_s`` of
    wall time and ``cpu_s`` of CPU time (RLIMIT_CPU, whole seconds up; default: the wall time)."""
    ex = pool.exec(["/bin/sh", "-c", _RENDER_LINE], files={"part.scad": script}, timeout=timeout_s,
                   limits=_limits(memory_mb, timeout_s, cpu_s))
    peak = None if ex.peak_memory_bytes is None else round(ex.peak_memory_bytes / 2**20, 1)
    common = {"duration_s": round(float(ex.duration_s or 0.0), 4), "peak_memory_mb": peak}
    if ex.outcome == "infra_error":
        return Render("infra", detail=str(ex.infra_detail), **common)
    messages = openscad_messages(ex.stderr)
    # RLIMIT_CPU (SIGXCPU, 24) is the CPU form of the same limit.
    if ex.timed_out or ex.signal == 24:
        return Render("timeout", messages=messages, **common)
    if ex.oom_killed:
        return Render("memory", messages=messages, **common)
    if ex.report_truncated or ex.signal == 25:  # SIGXFSZ: the STL passed RLIMIT_FSIZE
        return Render("too_large", messages=messages, **common)
    if ex.outcome != "ok" or not ex.report:
        return Render("error", messages=messages, **common)
    digest, rest = ex.report[:_DIGEST_LINE], ex.report[_DIGEST_LINE:]
    if digest != hashlib.sha256(script.encode()).hexdigest().encode() + b"\n":
        return Render("infra", detail=f"the render's report is not this script's (it names {digest[:12]!r})", **common)
    times = _TIMES_RE.match(rest)
    if times is None:
        return Render("infra", detail="the render's report has no CPU times", **common)
    user_m, user_s, sys_m, sys_s = (float(x) for x in times.groups())
    cpu = 60 * (user_m + sys_m) + user_s + sys_s
    stl = rest[times.end():]
    if not stl:
        return Render("error", messages=messages, **common)
    return Render("ok", stl=stl, messages=messages, cpu_s=round(cpu, 3), **common)


def gold_key(gold: str) -> str:
    """The cache key of a gold script (its SHA-256)."""
    return hashlib.sha256(gold.encode()).hexdigest()


class _GoldCache:
    """Per-process gold renders, single-flight: the threads verifying one task's samples at once
    wait for one render. Failed renders that may pass on a retry (timeout, memory, infra) are not
    kept."""

    def __init__(self, max_bytes: int = _GOLD_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.done: OrderedDict[str, Render] = OrderedDict()
        self.pending: dict[str, Future[Render]] = {}

    def get(self, pool: Any, gold: str) -> Render:
        key = gold_key(gold)
        with self.lock:
            if key in self.done:
                self.done.move_to_end(key)
                return self.done[key]
            future, mine = self.pending.get(key), False
            if future is None:
                future, mine = Future(), True
                self.pending[key] = future
        if not mine:
            return future.result()
        try:
            result = render_stl(pool, gold, timeout_s=GOLD_TIMEOUT_S, memory_mb=GOLD_MEMORY_MB)
        except BaseException as e:
            with self.lock:
                self.pending.pop(key, None)
            future.set_exception(e)
            raise
        with self.lock:
            self.pending.pop(key, None)
            if result.status in ("ok", "error", "too_large"):
                self.done[key] = result
                while len(self.done) > 1 and sum(len(r.stl) for r in self.done.values()) > self.max_bytes:
                    self.done.popitem(last=False)
        future.set_result(result)
        return result


_golds = _GoldCache()


def gold_render(pool: Any, gold: str) -> Render:
    """The gold script's render, from this process's cache or rendered now in ``pool``."""
    return _golds.get(pool, gold)


def stl_bounds(stl: bytes) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The bounding box of a binary STL's vertices (a trusted one: the gold's), or None."""
    import numpy as np

    n = (len(stl) - 84) // 50 if len(stl) >= 84 else 0
    if n <= 0:
        return None
    record = np.dtype([("normal", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    v = np.frombuffer(stl, dtype=record, count=n, offset=84)["v"].reshape(-1, 3)
    if not np.isfinite(v).all():
        return None
    return tuple(float(x) for x in v.min(0)), tuple(float(x) for x in v.max(0))


def camera_for(bounds: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    """An OpenSCAD ``--camera`` (eye, centre) looking at ``bounds`` from the front right, above.

    >>> camera_for(((0, 0, 0), (10, 10, 10)))
    '--camera=26.32,-16.32,22.06,5.00,5.00,5.00'
    """
    lo, hi = bounds
    centre = [(a + b) / 2 for a, b in zip(lo, hi, strict=True)]
    diag = math.dist(lo, hi) or 1.0
    direction = (1.0, -1.0, 0.8)
    norm = math.hypot(*direction)
    eye = [c + 2.0 * diag * d / norm for c, d in zip(centre, direction, strict=True)]
    return "--camera=" + ",".join(f"{x:.2f}" for x in (*eye, *centre))


def render_png(pool: Any, stl: bytes, *, camera: str, color: str, size: int = 256) -> bytes | None:
    """A PNG of a (verified) binary STL, or None when the render failed."""
    scene = f'color("{color}") import("part.stl");\n'
    ex = pool.exec(["/bin/sh", "-c", _PNG_LINE.format(camera=camera, size=int(size))],
                   files={"part.stl": stl, "view.scad": scene}, timeout=60.0, limits=_limits(1024, 60.0))
    return ex.report if ex.outcome == "ok" and ex.report and ex.report.startswith(b"\x89PNG") else None


def render_views(pool: Any, task: Any, response: str, out_dir: Path, *, size: int = 256) -> dict[str, Path | None]:
    """``write_views`` for a task and a raw response: the response's script is extracted, checked
    and rendered in the sandbox as the verifier does (no candidate view when it does not build);
    the files are ``<task id>.gold.png`` and ``<task id>.candidate.png`` (the id made file-safe)."""
    from posttrain.envs.cad._script import extract_script, script_problem

    script, _ = extract_script(response)
    stl = None
    if script is not None and script_problem(script) is None:
        part = render_stl(pool, script, timeout_s=task.limits.timeout_s, memory_mb=task.limits.memory_mb)
        stl = part.stl if part.status == "ok" else None
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", task.id)[:120]
    return write_views(pool, task.fields["gold"], stl, out_dir, stem, size=size)


def write_views(pool: Any, gold: str, candidate_stl: bytes | None, out_dir: Path, stem: str,
                *, size: int = 256) -> dict[str, Path | None]:
    """Write ``<stem>.gold.png`` and ``<stem>.candidate.png`` (when the candidate rendered to a
    mesh) into ``out_dir``, seen by one camera; returns the paths (None where none was written)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    gold_stl = gold_render(pool, gold)
    bounds = stl_bounds(gold_stl.stl) if gold_stl.status == "ok" else None
    camera = camera_for(bounds) if bounds else "--autocenter --viewall"
    out: dict[str, Path | None] = {}
    for name, stl, color in (("gold", gold_stl.stl if bounds else None, "SteelBlue"),
                             ("candidate", candidate_stl, "Orange")):
        png = render_png(pool, stl, camera=camera, color=color, size=size) if stl else None
        path = out_dir / f"{stem}.{name}.png"
        if png:
            path.write_bytes(png)
        out[name] = path if png else None
    return out
