"""Inline CSS and the one small script shared by the report and the audit review page."""

from __future__ import annotations

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1320px;
padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}h4{font-size:13px;margin:8px 0 4px}
.muted{color:#777}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fafafa;border:1px solid #e4e4e4;border-radius:4px}
svg .ct{font-size:12px;font-weight:600}svg .tk{font-size:10px;fill:#555}svg .lg{font-size:10px}
svg .ax{stroke:#888}svg .grid{stroke:#eee}svg .eb{stroke:#111;stroke-width:1.5}
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
