"""The HTML report: self-contained, complete, and it renders in headless Chromium without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian 'chromium' is not installed (make system-deps installs it)"
)


def _chromium(tmp: Path, page: Path, *extra: str) -> tuple[str, str]:
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'chrome'}",
        "--enable-logging=stderr", "--v=0", *extra, page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return proc.stdout, proc.stderr


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_report_is_self_contained_and_complete(run_dir):
    html = write_report(run_dir).read_text()
    assert (run_dir / "report.html").is_file()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "no external resources"
    assert "<link" not in html
    for section in ("Learning curves", "Evaluation", "Attempts to success", "Example trajectories"):
        assert section in html
    for chart in ("reward", "pass rate per domain", "KL", "entropy", "clip fraction", "tokens / s"):
        assert f'aria-label="{chart}"' in html
    assert "&lt;b&gt;" in html and "<b>3</b>" not in html  # prompts are escaped
    for kind in ("pass", "fail", "infra", "hack"):
        assert f'data-kind="{kind}"' in html
    assert 'id="kind-filter"' in html
    # the eval table carries intervals
    assert re.search(r"<th>base</th><td>0\.\d{3} <span class=\"ci\">\[0\.\d{3}, 0\.\d{3}\]</span>", html)


def test_report_of_empty_run_dir_and_missing_dir(tmp_path):
    html = write_report(tmp_path).read_text()
    assert "No RUN/metrics.jsonl yet" in html and "No evaluation yet" in html
    with pytest.raises(UserError, match="run directory not found"):
        write_report(tmp_path / "nope")


def test_report_rejects_bad_metrics_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{oops\n')
    with pytest.raises(UserError, match=r"metrics.jsonl:2: not valid JSON"):
        write_report(tmp_path)


@needs_chromium
def test_console_error_detection_works(tmp_path):
    # negative control: the check below must be able to fail
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('broken');</script></body></html>")
    _, stderr = _chromium(tmp_path, bad, "--dump-dom")
    assert any("Uncaught Error: broken" in line for line in _console_lines(stderr))


@needs_chromium
def test_report_renders_in_chromium(run_dir, tmp_path):
    page = write_report(run_dir)
    dom, stderr = _chromium(tmp_path, page, "--dump-dom")
    assert _console_lines(stderr) == []
    assert 'data-ready="1"' in dom  # the filter script ran to the end
    assert dom.count('<svg class="chart"') >= 10
    assert re.search(r'id="shown"[^>]*>\(\d+ shown\)', dom)
    shot, blank_shot = tmp_path / "shot.png", tmp_path / "blank.png"
    _, stderr = _chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1320,2400")
    assert _console_lines(stderr) == []
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body></body></html>")
    _chromium(tmp_path, blank, f"--screenshot={blank_shot}", "--window-size=1320,2400")
    # charts, tables and text compress far worse than an empty page (~14 kB vs ~200 kB)
    assert shot.stat().st_size > 5 * blank_shot.stat().st_size


def test_report_shows_the_execution_services_counters_and_breakers(tmp_path):
    import json

    (tmp_path / "summary.json").write_text(json.dumps({"eval": {}, "sched": {
        "jobs": 12, "retries": 3, "groups_dropped": 1, "breakers": {"domain:code": "open", "domain:math": "closed"}}}))
    html = write_report(tmp_path).read_text()
    assert "Execution service" in html and "<th>retries</th><td>3</td>" in html
    assert "<th>breaker domain:code</th><td>open</td>" in html
