"""A policy (or a hostile task file) whose text the report and the console show: markup, controls,
bidi overrides, zero-width characters, lone surrogates, huge strings and NaN metrics. The page must
show the text as text and never let it change how a row or a number reads."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from posttrain.cli import _progress
from posttrain.evaluate.report import load_run, render_report, write_report
from posttrain.evaluate.views import VIEWS_PANEL

RLO, ZW = "\u202e", "\u200b"
PAYLOADS = (
    "</script><script>alert(1)</script>", '<img src=x onerror="alert(2)">', '<a href="javascript:alert(3)">x</a>',
    '" onmouseover="alert(4)" x="', "</style><style>body{display:none}</style>",
    '<svg><foreignObject><div onclick="alert(6)">x</div></foreignObject></svg>',
    "x{background:expression(alert(7))}", f"t-{RLO}ssap", f"t{ZW}-1", "a\x00b", "a\ud800b",
    "\x1b[32mPASS\x1b[0m", "\x1b]8;;http://evil\x07click\x1b]8;;\x07",
)
# what would not show as itself on the page: controls but tab/newline/CR, bidi, zero-width, surrogates
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def _rec(task_id: str, outcome: str = "fail", **kw: object) -> dict:
    return {"task_id": task_id, "domain": "math", "outcome": outcome, "reward": 1.0 if outcome == "pass" else 0.0,
            "prompt": "p", "completion": "c", "stage": "rl", "step": 1, **kw}


def _run(root: Path, records: list[dict], metrics: list[dict] = ()) -> Path:
    (root / "trajectories").mkdir(parents=True)
    (root / "config.yaml").write_text("seed: 0\n")
    (root / "trajectories" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if metrics:
        (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return root


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.bad += [f"{tag} {k}" for k, v in attrs if k.startswith("on")
                     or (k in ("href", "src") and "javascript:" in (v or "").lower())]
        self.bad += [tag] if tag in ("img", "a", "foreignobject", "iframe", "object", "embed") else []


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One run whose every model or task-file string is a payload; the report as written to disk."""
    records = []
    for p in PAYLOADS:
        call = {"name": p, "arguments": {p: p}, "result": p, "ok": True, "seconds": 0.1}
        records.append(_rec(p, prompt=p, completion=p, feedback=p, error_class=p, feedback_source=p, hack_flags=[p]))
        records.append(_rec(f"turns {p}", turns=[{"observation": p, "action": p, "verdict": "fail", "stop_reason": p,
                                                  "calls": [call]}]))
    metrics = [{"stage": p, "step": s, f"pass_rate/{p}": 0.1 * s, p: 0.5 * s} for p in PAYLOADS[:3] for s in (1, 2)]
    run = _run(tmp_path_factory.mktemp("hostile") / "run", records, metrics)
    return write_report(run).read_text(encoding="utf-8")  # a lone surrogate failed this write before


def test_model_text_is_only_text_on_the_page(hostile: str) -> None:
    tags = _Tags()
    tags.feed(hostile)
    assert tags.bad == [] and tags.tags.count("script") == 2 and tags.tags.count("style") == 1
    assert HIDDEN.findall(hostile) == [] and "this panel failed" not in hostile
    # the override and the zero-width space are written out: the id reads as what it is, not "pass"
    assert "t-\\u202essap" in hostile and "t\\u200b-1" in hostile and "a\\ud800b" in hostile


def test_huge_ids_and_endless_turns_do_not_bury_the_page(tmp_path: Path) -> None:
    turns = [{"observation": "o" * 4000, "action": "a", "verdict": None}] * 500
    page = render_report(load_run(_run(tmp_path, [_rec("x" * 1_000_000), _rec("t", turns=turns)])))
    assert len(page) < 400_000 and "999800 more chars" in page and "460 more turns not shown" in page  # 3 MB before


def test_odd_tool_calls_are_a_row_not_a_failed_panel(tmp_path: Path) -> None:
    calls = [{"name": "run", "arguments": ["rm", "-rf"], "seconds": "slow", "ok": False}]
    page = render_report(load_run(_run(tmp_path, [_rec("t1", turns=[{"action": "a", "verdict": "fail",
                                                                      "calls": calls}]), _rec("t2", "pass")])))
    assert "this panel failed" not in page and "[&#x27;rm&#x27;, &#x27;-rf&#x27;]" in page and "t2" in page


def test_nan_metrics_and_flat_domains_read_as_they_are(tmp_path: Path) -> None:
    rows = [{"step": s, "reward_mean": v, "loss": float("nan"), "pass_rate/a": 1.0, "pass_rate/b": 0.0,
             "name\nb: 0.9999": 0.1 * s} for s, v in enumerate([0.1, float("nan"), float("inf"), 0.2])]
    page = render_report(load_run(_run(tmp_path, [_rec("t")], rows)))
    assert "(2 NaN/inf not drawn)" in page  # the reward's line does not read as clean
    assert "no finite value:</b> loss (4 NaN/inf)" in page  # an all-NaN loss is said, not left out
    assert "pass rate per domain = (a 1, b 0)" in page  # not "= 1": b is constant at 0
    assert 'data-name="name\\x0ab: 0.9999"' in page  # no second line "b: 0.9999" in the hover


def test_views_index_names_only_its_own_files(tmp_path: Path) -> None:
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret")
    stage = tmp_path / "run" / "views" / "rl"
    stage.mkdir(parents=True)
    (stage / "index.json").write_text(json.dumps([{"task_id": f"a{RLO}", "outcome": "fail", "gold": "../../../secret.png"}]))
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")
    page = VIEWS_PANEL.render([load_run(tmp_path / "run")])
    assert "base64" not in page and "a\\u202e" in page


def test_progress_bar_shows_a_description_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(_progress, "console", Console(file=out, force_terminal=True, width=200))
    with _progress.progress_bar("eval \x1b]8;;http://evil\x07x\x1b]8;;\x07 [link=http://e2]y[/link] \x1b[32mPASS\r", 1) as done:
        done(1)
    text = out.getvalue()
    assert "http://evil\x07" not in text and "\x1b]8" not in text and "\x1b[32mPASS" not in text
    assert "[link=http://e2]y[/link]" in text and "\\x1b[32mPASS\\x0d" in text


def test_the_cli_tables_show_names_as_text(capsys):
    # rich read a name as markup ([bold] vanished, [link=...] made a link); ESC and \r reached the terminal
    from pathlib import Path

    from posttrain.cli.evaluate import _print_block
    from posttrain.cli.run import print_summary

    buf = io.StringIO()
    per = {"math\x1b[31m": {"pass@1": 1.0, "passed": 1, "n_samples": 1, "n_tasks": 1}}
    print_summary(Console(file=buf, width=200), {"eval": {"[bold]base": {"pass@1": 0.5, "per_domain": per}}},
                  Path("runs/[red]x"))
    shown = buf.getvalue()
    assert "[bold]base" in shown and "math\\x1b[31m" in shown and "runs/[red]x/report.html" in shown
    assert "\x1b" not in shown
    _print_block("ck\rpass", {"pass@1": 0.0, "n_tasks": 1, "per_domain": per})
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b" not in out and "ck\\x0dpass" in out
