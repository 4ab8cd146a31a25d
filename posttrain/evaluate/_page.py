"""Inline CSS and the small scripts shared by the report and the audit review page.

``SCRIPT`` filters trajectories (and review items) by kind. ``CHART_SCRIPT`` makes the report's line
charts live: hover shows each series' value at the nearest step (and a guide line), and the
smoothing slider redraws every curve as an exponential moving average (TensorBoard's, debiased), the
raw points staying in each polyline's ``data-xy``. Both are plain ES5, inline: the page opens offline.
"""

from __future__ import annotations

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1320px;
padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}h4{font-size:13px;margin:8px 0 4px}
.muted{color:#777}.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
svg.chart{background:#fafafa;border:1px solid #e4e4e4;border-radius:4px;display:block}
svg .ct{font-size:12px;font-weight:600}svg .tk{font-size:10px;fill:#555}svg .lg{font-size:10px}
svg .ax{stroke:#888}svg .grid{stroke:#eee}svg .eb{stroke:#111;stroke-width:1.5}
svg .guide{stroke:#888;stroke-dasharray:3 3}
figure.chart-box{margin:0;width:402px}
figcaption.legend{display:flex;flex-wrap:wrap;gap:2px 12px;font-size:11px;padding:3px 4px;color:#333}
figcaption.legend span{white-space:nowrap}
figcaption.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}
.tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #999;border-radius:3px;padding:4px 6px;
font-size:11px;white-space:pre;display:none;box-shadow:0 1px 4px rgba(0,0,0,.15);z-index:10}
.ctl{font-size:13px;margin:4px 0 8px;display:inline-block}
details.flat{margin:8px 0}details.flat summary{cursor:pointer;color:#555}
table.eval{border-collapse:collapse;margin:8px 0}table.eval td,table.eval th{border:1px solid #ddd;padding:4px 8px;
text-align:right}table.eval th{background:#f4f4f4}.ci{color:#777;font-size:12px}
pre{background:#f7f7f7;border:1px solid #eee;padding:6px;white-space:pre-wrap;word-break:break-word;max-height:360px;
overflow:auto;font-size:12px}
details.traj{border:1px solid #ddd;border-radius:4px;margin:6px 0;padding:4px 8px}
details.traj summary{cursor:pointer}.attempt{border-left:3px solid #ddd;padding-left:8px;margin:6px 0}
.badge{display:inline-block;border-radius:3px;padding:0 5px;font-size:12px;color:#fff;background:#888}
.badge.pass{background:#2ca02c}.badge.fail{background:#d62728}.badge.infra{background:#ff7f0e}
.badge.hack{background:#9467bd}
.review td,.review th{border:1px solid #ddd;padding:4px 8px;vertical-align:top}.review{border-collapse:collapse}
"""

# The filter for trajectories (and review items): shows the <details> whose data-kind matches.
SCRIPT = """
(function () {
  var select = document.getElementById('kind-filter');
  var shown = document.getElementById('shown');
  function apply() {
    var want = select ? select.value : 'all';
    var items = document.querySelectorAll('[data-kind]');
    var n = 0;
    for (var i = 0; i < items.length; i++) {
      var on = want === 'all' || items[i].getAttribute('data-kind') === want;
      items[i].style.display = on ? '' : 'none';
      if (on) { n++; }
    }
    if (shown) { shown.textContent = '(' + n + ' shown)'; }
  }
  if (select) { select.addEventListener('change', apply); }
  apply();
  document.body.setAttribute('data-ready', '1');
})();
"""

# Hover values and smoothing for the line charts (see the module docstring).
CHART_SCRIPT = """
(function () {
  var charts = [];
  var weight = 0;
  var tip = document.createElement('div');
  tip.className = 'tip';
  tip.id = 'tip';
  document.body.appendChild(tip);
  function fmt(v) {
    var a = Math.abs(v);
    if (v === 0) { return '0'; }
    if (a >= 1e5 || a < 1e-3) { return v.toExponential(3); }
    return String(Math.round(v * 10000) / 10000);
  }
  function smooth(xy, w) {
    if (!w) { return xy; }
    var out = [], s = 0;
    for (var i = 0; i < xy.length; i++) {
      s = w * s + (1 - w) * xy[i][1];
      out.push([xy[i][0], s / (1 - Math.pow(w, i + 1))]);
    }
    return out;
  }
  function nearest(xy, x) {
    var lo = 0, hi = xy.length - 1;
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xy[mid][0] < x) { lo = mid; } else { hi = mid; }
    }
    return Math.abs(xy[lo][0] - x) <= Math.abs(xy[hi][0] - x) ? lo : hi;
  }
  function toPx(c, x, y) {
    var f = c.f;
    return [f[4] + (x - f[0]) / (f[1] - f[0]) * (f[6] - f[4]), f[7] - (y - f[2]) / (f[3] - f[2]) * (f[7] - f[5])];
  }
  function redraw() {
    for (var i = 0; i < charts.length; i++) {
      var c = charts[i];
      for (var j = 0; j < c.series.length; j++) {
        var s = c.series[j], pts = smooth(s.xy, weight), out = [];
        for (var k = 0; k < pts.length; k++) {
          var p = toPx(c, pts[k][0], pts[k][1]);
          out.push(p[0].toFixed(1) + ',' + p[1].toFixed(1));
        }
        s.el.setAttribute('points', out.join(' '));
        s.shown = pts;
      }
    }
  }
  function valuesAt(c, x) {
    var lines = [], at = null;
    for (var j = 0; j < c.series.length; j++) {
      var s = c.series[j];
      if (!s.xy.length) { continue; }
      var i = nearest(s.xy, x);
      if (at === null || Math.abs(s.xy[i][0] - x) < Math.abs(at - x)) { at = s.xy[i][0]; }
      var raw = s.xy[i][1], shown = s.shown[i][1];
      lines.push(s.name + ': ' + fmt(raw) + (weight ? ' (smoothed ' + fmt(shown) + ')' : ''));
    }
    return {x: at, text: 'step ' + fmt(at) + '\\n' + lines.join('\\n')};
  }
  function hover(c, x, pageX, pageY) {
    var v = valuesAt(c, x);
    var px = toPx(c, v.x, c.f[2])[0];
    c.guide.setAttribute('x1', px.toFixed(1));
    c.guide.setAttribute('x2', px.toFixed(1));
    c.guide.setAttribute('visibility', 'visible');
    tip.textContent = v.text;
    tip.style.left = (pageX + 14) + 'px';
    tip.style.top = (pageY + 14) + 'px';
    tip.style.display = 'block';
    return v.text;
  }
  var svgs = document.querySelectorAll('svg.chart[data-frame]');
  for (var i = 0; i < svgs.length; i++) {
    (function (svg) {
      var c = {svg: svg, f: svg.getAttribute('data-frame').split(' ').map(Number), series: [],
               guide: svg.querySelector('line.guide')};
      var lines = svg.querySelectorAll('polyline.series');
      for (var j = 0; j < lines.length; j++) {
        var xy = JSON.parse(lines[j].getAttribute('data-xy'));
        c.series.push({el: lines[j], name: lines[j].getAttribute('data-name'), xy: xy, shown: xy});
      }
      charts.push(c);
      svg.addEventListener('mousemove', function (ev) {
        var pt = svg.createSVGPoint();
        pt.x = ev.clientX;
        pt.y = ev.clientY;
        var loc = pt.matrixTransform(svg.getScreenCTM().inverse());
        var x = c.f[0] + (loc.x - c.f[4]) / (c.f[6] - c.f[4]) * (c.f[1] - c.f[0]);
        hover(c, x, ev.pageX, ev.pageY);
      });
      svg.addEventListener('mouseleave', function () {
        tip.style.display = 'none';
        c.guide.setAttribute('visibility', 'hidden');
      });
    })(svgs[i]);
  }
  var slider = document.getElementById('smooth');
  var label = document.getElementById('smooth-value');
  function setSmoothing(w) {
    weight = Math.max(0, Math.min(0.99, Number(w) || 0));
    if (label) { label.textContent = weight ? weight.toFixed(2) : 'off'; }
    redraw();
  }
  if (slider) { slider.addEventListener('input', function () { setSmoothing(slider.value); }); }
  window.posttrainReport = {
    charts: charts,
    setSmoothing: setSmoothing,
    hoverAt: function (index, x) { var c = charts[index]; var r = c.svg.getBoundingClientRect(); return hover(c, x, r.left, r.top); }
  };
  document.body.setAttribute('data-charts', String(charts.length));
})();
"""
