"""The ledger pages' look and their one script: a stylesheet and a badge colour per batch
state, inlined in every page (no CDN, nothing fetched), and the click handler that opens
links into Airflow's UI outside the iframe Airflow shows plugin views in."""

from __future__ import annotations

from onceflow.ledger.states import BatchState

# a badge per batch state (class s-<state>); a state without a style keeps the grey badge
STATE_STYLE = {
    BatchState.PLANNED: "background:#718096;",
    BatchState.PROCESSING: "background:#c05621;",
    BatchState.STAGED: "background:#2b6cb0;",
    BatchState.COMMITTED: "background:#2f855a;",
    BatchState.ABANDONED: "background:#4a5568; text-decoration:line-through;",
    "failed": "background:#c53030;",  # shown, not stored: a processing batch whose attempt failed
}

CSS = """
:root { --fg:#1a202c; --muted:#5a6578; --line:#e2e8f0; --bg:#f7f9fc; --accent:#017cee; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
       color:var(--fg); background:#fff; }
header { padding:12px 20px; border-bottom:1px solid var(--line); background:var(--bg);
         display:flex; align-items:baseline; gap:14px; flex-wrap:wrap; }
header h1 { font-size:18px; margin:0; }
header nav { color:var(--muted); }
main { padding:14px 20px 40px; }
h2 { font-size:15px; margin:22px 0 8px; }
a { color:var(--accent); text-decoration:none; }
a:hover { text-decoration:underline; }
table { border-collapse:collapse; width:100%; margin-bottom:6px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
         vertical-align:top; }
th { font-weight:600; color:var(--muted); font-size:12px; text-transform:uppercase;
     letter-spacing:.03em; background:var(--bg); white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
code, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
.muted { color:var(--muted); }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px;
         font-weight:600; color:#fff; background:#718096; }
.cards { display:flex; gap:10px; flex-wrap:wrap; margin:4px 0 8px; }
.card { border:1px solid var(--line); border-radius:8px; padding:8px 14px; min-width:120px;
        background:#fff; }
.card b { display:block; font-size:20px; }
.card span { color:var(--muted); font-size:12px; }
.alert { border-radius:8px; padding:10px 14px; margin:10px 0; border:1px solid; }
.alert.bad { background:#fff5f5; border-color:#feb2b2; color:#742a2a; }
.alert.warn { background:#fffaf0; border-color:#fbd38d; color:#744210; }
.alert.ok { background:#f0fff4; border-color:#9ae6b4; color:#22543d; }
.err { color:#9b2c2c; white-space:pre-wrap; word-break:break-word; }
/* the batches table fits 1280 px with every column: headers, longer run ids and times wrap,
   a run id of `onceflow trigger` (28 characters) stays whole, the last error wraps in 14em */
.wide { overflow-x:auto; }
table.batches { font-size:13px; }
table.batches th, table.batches td { padding:5px; }
table.batches th { white-space:normal; font-size:11px; }
table.batches .mono { font-size:12px; }
table.batches .txid { display:inline-block; min-width:29ch; }
table.batches .last-error { display:block; width:14em; overflow-wrap:anywhere; }
@media (min-width:1500px) {
  table.batches .last-error { width:auto; min-width:14em; max-width:30em; }
}
dl.kv { display:grid; grid-template-columns:max-content 1fr; gap:4px 18px; margin:0; }
dl.kv dt { color:var(--muted); } dl.kv dd { margin:0; }
.pager { margin:6px 0; }
.charts { display:flex; flex-wrap:wrap; gap:12px; margin:8px 0 4px; }
svg.chart { background:#fff; border:1px solid #e5e7eb; border-radius:6px; }
svg.chart text { font:11px system-ui, sans-serif; fill:#374151; }
svg.chart .chart-title { font-weight:600; }
svg.chart .tick, svg.chart .muted { fill:#6b7280; }
svg.chart .axis { stroke:#9ca3af; stroke-width:1; }
svg.chart .series { stroke-width:1.6; }
svg.chart .s0 { stroke:#2563eb; fill:#2563eb; } svg.chart polyline.s0 { fill:none; }
svg.chart .s1 { stroke:#d97706; fill:#d97706; } svg.chart polyline.s1 { fill:none; }
svg.chart .s2 { stroke:#059669; fill:#059669; } svg.chart polyline.s2 { fill:none; }
svg.chart text.legend { stroke:none; }
.nowrap { white-space:nowrap; }
""" + "".join(f".s-{state} {{ {style} }}\n" for state, style in STATE_STYLE.items())

# Links into Airflow's own UI must leave the iframe Airflow shows plugin views in. The iframe's
# sandbox has no allow-top-navigation, so target=_top alone is blocked; it is same-origin, so a
# link clicked in the top document navigates it.
SCRIPT = """
document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[data-airflow]") : null;
  if (!a || window.top === window || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) {
    return;
  }
  try {
    var doc = window.top.document, link = doc.createElement("a");
    link.href = a.href;
    doc.body.appendChild(link);
    link.click();
    link.remove();
    e.preventDefault();
  } catch (err) { /* not same-origin: follow the link inside the frame */ }
});
"""
