"""The HTML report: self-contained, complete, and it renders in headless Chromium without console errors."""

from __future__ import annotations

import html as html_lib
import json
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


def test_report_of_a_run_just_started_and_of_dirs_that_hold_no_run(tmp_path, run_cli):
    run = tmp_path / "started"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    html = write_report(run).read_text()
    assert "No RUN/metrics.jsonl yet" in html and "No evaluation yet" in html
    with pytest.raises(UserError, match="run directory not found"):
        write_report(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="not a posttrain run directory"):
        write_report(empty)
    code, out, err = run_cli("report", str(empty))
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a posttrain run directory" in err
    assert not (empty / "report.html").exists()


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


def _x_ticks(chart: str) -> list[str]:
    return re.findall(r'class="tk xt">([^<]*)<', chart)


def _charts(html: str) -> dict[str, list[str]]:
    """aria-label -> each chart (a <figure> with its svg and legend) of that title, in page order."""
    out: dict[str, list[str]] = {}
    for fig in re.findall(r'<figure class="chart-box">.*?</figure>', html):
        out.setdefault(re.search(r'aria-label="([^"]*)"', fig).group(1), []).append(fig)
    return out


def _legend(chart: str) -> list[str]:
    return re.findall(r"<span><i [^>]*></i>([^<]*)</span>", chart)


def test_each_stage_has_its_own_axis_with_real_ticks(run_dir, tmp_path):
    html = write_report(run_dir).read_text()
    assert "stage sft" in html and "stage rl" in html
    sft_loss, rl_loss = _charts(html)["loss"]  # one chart per stage, each on its own steps
    assert _x_ticks(sft_loss)[-1] == "8" and _x_ticks(rl_loss)[-1] == "15"
    two = tmp_path / "two"
    two.mkdir()
    (two / "metrics.jsonl").write_text("".join(json.dumps({"stage": "rl", "step": s, "loss": 1.0 - s,
                                                           "reward_mean": 0.5 * s}) + "\n" for s in range(2)))
    (chart,) = _charts(write_report(two).read_text())["loss"]
    assert _x_ticks(chart) == ["0", "1"]  # not 0 0 0 1 1


def test_flat_panels_are_folded_and_legends_are_html(run_dir):
    html = write_report(run_dir).read_text()
    sft_flat, rl_flat = re.findall(r'<details class="flat">(.*?)</details>', html, re.S)
    assert "tokens / s = 900" in sft_flat  # SFT's tokens/s is 900 throughout
    assert 'aria-label="clip fraction"' in rl_flat and 'aria-label="KL"' not in rl_flat  # clip_frac is 0.05 throughout
    assert "clip fraction = 0.05" in rl_flat
    (per_domain,) = _charts(html)["pass rate per domain"]
    assert _legend(per_domain) == ["code", "math"]
    assert "<text" not in per_domain.split("<figcaption")[1]  # the legend is laid out by the browser, not placed


def test_two_runs_on_the_same_axes(tmp_path, run_cli):
    from tests.evaluate.conftest import make_run

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    code, out, _ = run_cli("report", str(a), str(b))
    assert code == 0 and out.strip() == str(a / "compare.html")
    html = (a / "compare.html").read_text()
    assert "posttrain report: a/run vs b/run" in html
    for chart in _charts(html)["reward"]:
        assert _legend(chart) == ["a/run", "b/run"]
    assert "<th>a/run: base</th>" in html and "<th>b/run: rl</th>" in html


def test_a_panel_can_be_added_and_a_broken_one_is_one_line(run_dir, monkeypatch):
    from posttrain.evaluate import report

    monkeypatch.setattr(report, "_ADDED", {})
    report.add_panel("Canary alarms", lambda runs: f"<p id=canaries>{len(runs)} run(s), no alarm</p>", order=45)
    report.add_panel("Broken", lambda runs: 1 / 0, order=46)
    monkeypatch.setitem(report.BUILTIN_PANELS, "Missing", "posttrain.no_such_module:PANEL")
    html = write_report(run_dir).read_text()
    assert "<h2>Canary alarms</h2><p id=canaries>1 run(s), no alarm</p>" in html
    assert html.index("Attempts to success") < html.index("Canary alarms") < html.index("Example trajectories")
    assert "this panel failed: ZeroDivisionError" in html and "this panel did not load: ModuleNotFoundError" in html
    with pytest.raises(ValueError, match="already registered"):
        report.add_panel("Canary alarms", lambda runs: "")


_PROBE = """<script>
(function () {
  var r = window.posttrainReport, out = {};
  out.charts = r.charts.length;
  out.hover = r.hoverAt(0, 5);
  var line = r.charts[0].series[0].el, before = line.getAttribute('points');
  r.setSmoothing(0.9);
  out.smoothed = line.getAttribute('points') !== before;
  out.hoverSmoothed = r.hoverAt(0, 5);
  r.setSmoothing(0);
  out.restored = line.getAttribute('points') === before;
  var overlaps = 0, legends = document.querySelectorAll('figcaption.legend');
  for (var i = 0; i < legends.length; i++) {
    var items = legends[i].querySelectorAll('span');
    for (var a = 0; a < items.length; a++) {
      for (var b = a + 1; b < items.length; b++) {
        var p = items[a].getBoundingClientRect(), q = items[b].getBoundingClientRect();
        if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) { overlaps++; }
      }
    }
  }
  out.overlaps = overlaps;
  out.legendItems = document.querySelectorAll('figcaption.legend span').length;
  document.body.setAttribute('data-probe', JSON.stringify(out));
})();
</script></body>"""


@needs_chromium
def test_hover_smoothing_and_legends_work_in_chromium(tmp_path):
    """In a real browser: hovering a chart gives each series' value at the nearest step, the smoothing
    slider redraws the curves (and back), and no two legend labels overlap, with many long domains."""
    from tests.evaluate.conftest import make_run

    run = make_run(tmp_path)
    with (run / "metrics.jsonl").open("a") as fh:
        for step in range(20):
            fh.write(json.dumps({"stage": "rl", "step": step, **{f"pass_rate/a-rather-long-domain-name-{i}": 0.1 * i
                                                                 for i in range(8)}}) + "\n")
    page = write_report(run)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _PROBE))
    dom, stderr = _chromium(tmp_path, probe, "--dump-dom", "--window-size=1320,2400")
    assert _console_lines(stderr) == []
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    assert result["charts"] >= 10 and result["legendItems"] >= 10 and result["overlaps"] == 0
    assert result["hover"].startswith("step 5") and "smoothed" not in result["hover"]
    assert result["smoothed"] and result["restored"] and "smoothed" in result["hoverSmoothed"]


_COMPARE_PROBE = """<script>
(function () {
  var r = window.posttrainReport, out = [];
  for (var i = 0; i < r.charts.length; i++) {
    var c = r.charts[i], box = c.svg.getBoundingClientRect();
    out.push({label: c.svg.getAttribute('aria-label'), x0: c.f[0], x1: c.f[1], width: box.width,
              names: c.series.map(function (s) { return s.name; }), hover: r.hoverAt(i, 5)});
  }
  document.body.setAttribute('data-probe', JSON.stringify(out));
})();
</script></body>"""


@needs_chromium
def test_two_runs_compared_in_chromium_each_stage_on_its_own_axis(tmp_path, run_cli):
    """``posttrain report RUN_A RUN_B`` in a real browser (issue 26, item 8): every chart drawn, each stage
    on its own steps (SFT's 10 beside RL's 20, and run b's shorter RL on the same axis as a's), hover giving
    both runs' values at a step, no console error; a directory that holds no run is refused in one line."""
    from tests.evaluate.conftest import make_run

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    rows = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines()]
    (b / "metrics.jsonl").write_text("".join(json.dumps({**r, "reward_mean": 0.9} if r["stage"] == "rl" else r) + "\n"
                                             for r in rows if r["stage"] != "rl" or r["step"] < 12))
    code, out, _ = run_cli("report", str(a), str(b))
    assert code == 0
    probe = tmp_path / "probe.html"
    probe.write_text((a / "compare.html").read_text().replace("</body>", _COMPARE_PROBE))
    dom, stderr = _chromium(tmp_path, probe, "--dump-dom", "--window-size=1320,2400")
    assert _console_lines(stderr) == []
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    charts = json.loads(html_lib.unescape(found.group(1)))
    losses = [c for c in charts if c["label"] == "loss"]
    assert [(c["x0"], c["x1"]) for c in losses] == [(0, 9), (0, 19)]  # SFT's steps, then RL's: two axes
    assert all(c["width"] > 100 for c in charts)  # laid out, not squeezed into a corner
    (reward,) = [c for c in charts if c["label"] == "reward"]
    assert reward["names"] == ["a/run", "b/run"] and (reward["x0"], reward["x1"]) == (0, 19)
    assert reward["hover"].splitlines() == ["step 5", "a/run: 0.35", "b/run: 0.9"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli("report", str(empty))
    assert code == 2 and len(err.strip().splitlines()) == 1 and not (empty / "report.html").exists(), err
