"""The validate step's reports: report.md (also printed to the log when validation fails) and report.html with a
distribution chart per feature, train against the other splits (the facts and the charts: core/statistics/report.py).

Plain Python (TFDV's protos are read, not imported at module level). The HTML page is self-contained (inline CSS
and SVG from slipway.core.charts, no scripts, nothing fetched) so it opens air-gapped and in the KFP UI.

ctx, the facts both reports show (built by executor.run):

    {"examples_dir": str, "schema_source": "inferred" | "user", "schema_file": str, "allowed": bool,
     "anomalies": [{"split", "feature", "kind", "type", "short", "description"}, ...],
     "splits": {split: examples}, "label": str | None, "skew": {feature: threshold}, "drift": {...},
     "default_drift": float | None, "features": feature_rows(...), "distributions": distributions(...)}
    (feature_rows and distributions: core/statistics/report.py)
"""

from __future__ import annotations

import html

from slipway.core.statistics import report as statistics_report
from slipway.core.statistics.report import HISTOGRAM_BINS, TOP_VALUES, md_cell, md_code, pct

# ----------------------------------------------------------------------------------------------------------------
# Markdown


def status(anomalies: list, allowed: bool) -> str:
    if not anomalies:
        return "passed: no anomalies"
    state = "allowed (allow_anomalies)" if allowed else "FAILED"
    return f"{len(anomalies)} anomalies, {state}"


def report_md(ctx: dict) -> str:
    """The Markdown report (tables only: it is also printed to the step's log)."""
    splits = list(ctx["splits"])
    lines = [
        "# Data validation report",
        "",
        f"- Examples: {md_code(ctx['examples_dir'])}",
        f"- Schema: {md_cell(ctx['schema_source'])}" + (f" ({md_code(ctx['schema_file'])})" if ctx["schema_file"]
                                                         else ""),
        f"- Result: **{md_cell(status(ctx['anomalies'], ctx['allowed']))}**",
    ]
    if ctx["label"]:
        lines.append(f"- Label: {md_code(ctx['label'])}")
    for title, key in (("Skew thresholds", "skew"), ("Drift thresholds (reference: train)", "drift")):
        if ctx[key]:
            lines.append(f"- {title}: " + ", ".join(f"{md_code(k)} {v:g}" for k, v in sorted(ctx[key].items())))
    if ctx["default_drift"] is not None:
        lines.append(f"- Default drift threshold: {ctx['default_drift']:g}")
    lines += ["", "## Splits", "", "| Split | Examples |", "|---|---:|"]
    lines += [f"| {md_cell(s)} | {n} |" for s, n in ctx["splits"].items()]
    lines += ["", "## Anomalies", ""]
    if ctx["anomalies"]:
        lines += ["| Split | Feature | Kind | Anomaly | Description |", "|---|---|---|---|---|"]
        for a in ctx["anomalies"]:
            cells = [a["split"], a["feature"] or "(dataset)", a["kind"], a["short"], a["description"]]
            lines.append("| " + " | ".join(md_cell(cell) for cell in cells) + " |")
    else:
        lines.append("None.")
    header = "| Feature | Type | " + " | ".join(f"{md_cell(s)} missing | {md_cell(s)} mean / unique"
                                                for s in splits) + " |"
    lines += ["", "## Features", "", header, "|---|---|" + "---:|---:|" * len(splits)]
    for row in ctx["features"]:
        cells = [md_cell(row["feature"]), row["type"]]
        for s in splits:
            cell = row["splits"].get(s, {"missing": None, "value": "-"})
            cells += [pct(cell["missing"]), md_cell(cell["value"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# HTML


def report_html(ctx: dict) -> str:
    """The HTML report: the same facts as report_md, and a distribution chart per feature."""
    e = html.escape
    splits = list(ctx["splits"])
    status_class = "ok" if not ctx["anomalies"] else ("bad" if not ctx["allowed"] else "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Data validation report</title>',
        f"<style>{statistics_report.CHART_CSS}</style></head><body>",
        "<h1>Data validation report</h1><ul>",
        f"<li>Examples: <code>{e(ctx['examples_dir'])}</code></li>",
        f"<li>Schema: {e(ctx['schema_source'])}"
        + (f" (<code>{e(ctx['schema_file'])}</code>)" if ctx["schema_file"] else "") + "</li>",
        f'<li>Result: <span class="{status_class}">{e(status(ctx["anomalies"], ctx["allowed"]))}</span></li>',
    ]
    if ctx["label"]:
        parts.append(f"<li>Label: <code>{e(ctx['label'])}</code></li>")
    for title, key in (("Skew thresholds", "skew"), ("Drift thresholds (reference: train)", "drift")):
        if ctx[key]:
            parts.append(f"<li>{title}: " + ", ".join(f"<code>{e(k)}</code> {v:g}" for k, v in sorted(
                ctx[key].items())) + "</li>")
    if ctx["default_drift"] is not None:
        parts.append(f"<li>Default drift threshold: {ctx['default_drift']:g}</li>")
    parts += ["</ul>", "<h2>Splits</h2><table><tr><th>Split</th><th>Examples</th></tr>"]
    parts += [f'<tr><td>{e(s)}</td><td class="num">{n}</td></tr>' for s, n in ctx["splits"].items()]
    parts += ["</table>", "<h2>Anomalies</h2>"]
    if ctx["anomalies"]:
        parts.append("<table><tr><th>Split</th><th>Feature</th><th>Kind</th><th>Anomaly</th><th>Description</th></tr>")
        for a in ctx["anomalies"]:
            parts.append(f"<tr><td>{e(a['split'])}</td><td>{e(a['feature'] or '(dataset)')}</td><td>{e(a['kind'])}</td>"
                         f"<td>{e(a['short'])}</td><td>{e(a['description'])}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")
    parts.append("<h2>Features</h2><table><tr><th>Feature</th><th>Type</th>"
                 + "".join(f"<th>{e(s)} missing</th><th>{e(s)} mean / unique</th>" for s in splits) + "</tr>")
    for row in ctx["features"]:
        cells = [f"<td>{e(row['feature'])}</td><td>{e(row['type'])}</td>"]
        for s in splits:
            cell = row["splits"].get(s, {"missing": None, "value": "-"})
            cells.append(f'<td class="num">{pct(cell["missing"])}</td><td class="num">{e(cell["value"])}</td>')
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</table>")
    drawn = ctx.get("distributions") or []
    if drawn:
        flagged = {a["feature"] for a in ctx["anomalies"]}
        parts += [
            "<h2>Distributions</h2>",
            f"<p>Per feature, the share of its non-missing values in each split ({e(', '.join(splits))}): numeric "
            f"features on {HISTOGRAM_BINS} bins shared by the splits, categorical ones by value (the "
            f"{TOP_VALUES} most frequent in any split). Hover a bar for its value; features with an anomaly are "
            "framed in red.</p>",
            '<div class="charts">',
            *(statistics_report.chart_figure(entry, splits, entry["feature"] in flagged) for entry in drawn),
            "</div>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
