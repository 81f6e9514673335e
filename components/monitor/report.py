"""monitor's reports: the HTML page (like validate's: per feature, the train split against the served rows, a
distribution chart each, the drifted ones framed) and the Markdown summary for the KFP UI."""

from __future__ import annotations

import html

from slipway.core.statistics import report as statistics_report
from slipway.core.statistics.comparators import TRAIN
from slipway.core.statistics.report import md_cell, md_code, pct


def markdown(result: dict) -> str:
    """The decision, the window, the rows per version, and each version's anomalies."""
    lines = [f"# Monitoring: {result['model_name']}", "", f"**{md_cell(result['decision'])}**", "",
             f"- Payload log: {md_code(result['payload_logs'])}",
             f"- Window: {md_cell(result['window']['start'])} to {md_cell(result['window']['end'])}",
             f"- Model base: {md_code(result['model_base'])}", "",
             "| version | rows | compared | drifted features |", "| --- | ---: | --- | --- |"]
    compared = {v["version"]: v for v in result["versions"]}
    for version, rows in result["rows_per_version"].items():
        entry = compared.get(int(version))
        lines.append(f"| {version} | {rows:,} | {'yes' if entry else 'no (too few rows)'} | "
                     f"{md_cell(', '.join(entry['drifted_features']) or 'none') if entry else '-'} |")
    for entry in result["versions"]:
        lines += ["", f"## Version {entry['version']} against its training data",
                  f"Trained model: {md_code(entry['model'])}; train statistics {md_code(entry['training_statistics'])}",
                  ""]
        lines += _quality_markdown(entry.get("quality"))
        if not entry["anomalies"]:
            lines.append("No anomalies.")
            continue
        lines += ["| feature | kind | anomaly |", "| --- | --- | --- |"]
        lines += [f"| {md_cell(a['feature'] or '(dataset)')} | {md_cell(a['kind'])} | {md_cell(a['short'])} |"
                  for a in entry["anomalies"]]
    return "\n".join(lines) + "\n"


def _quality_markdown(quality: dict | None) -> list[str]:
    """The answers against the labels: each metric served and as evaluate measured it."""
    if not quality:
        return []
    lines = [f"Labelled rows: {quality['labelled_rows']:,} (labels naming no class of the model: "
             f"{quality['unusable_labels']:,}){'' if quality['judged'] else ', too few to judge'}; evaluation "
             f"{md_code(quality['evaluation'])}", "",
             "| metric | served | evaluated | worse by | dropped |", "| --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {name} | {m['served']:.4f} | {m['evaluated']:.4f} | {m['worse_by']:.1%} | "
              f"{'yes' if m['dropped'] else 'no'} |" for name, m in quality["metrics"].items()]
    return lines + [""]


def _quality_html(quality: dict | None) -> list[str]:
    if not quality:
        return []
    e = html.escape
    judged = "" if quality["judged"] else ' <span class="bad">too few to judge</span>'
    parts = [f"<p>Against {quality['labelled_rows']:,} labelled rows{judged} (labels naming no class of the model: "
             f"{quality['unusable_labels']:,}; evaluation <code>{e(quality['evaluation'])}</code>):</p>",
             "<table><tr><th>Metric</th><th>Served</th><th>Evaluated</th><th>Worse by</th></tr>"]
    parts += [f'<tr><td>{e(name)}</td><td class="num">{m["served"]:.4f}</td><td class="num">{m["evaluated"]:.4f}'
              f'</td><td class="num {"bad" if m["dropped"] else "ok"}">{m["worse_by"]:.1%}</td></tr>'
              for name, m in quality["metrics"].items()]
    return parts + ["</table>"]


def html_report(served: list, result: dict) -> str:
    """The page: the decision, then per version its anomalies, a table per feature and the charts."""
    e = html.escape
    state = "bad" if result["retrain"] else "ok"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>Monitoring report</title>',
             f"<style>{statistics_report.CHART_CSS}</style></head><body>",
             f"<h1>Monitoring report: {e(result['model_name'])}</h1><ul>",
             f'<li>Decision: <span class="{state}">{e(result["decision"])}</span></li>',
             f"<li>Payload log: <code>{e(result['payload_logs'])}</code>; window {e(result['window']['start'])} to "
             f"{e(result['window']['end'])}</li>",
             f"<li>Rows per version: {e(', '.join(f'v{v}: {n:,}' for v, n in result['rows_per_version'].items()))}"
             "</li></ul>"]
    for s in served:
        parts += _version_section(s)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _version_section(s) -> list[str]:
    e = html.escape
    stats = {TRAIN: s.training.statistics, s.split: s.statistics}
    parts = [f"<h2>Version {s.version}: {s.rows:,} served rows against its training data</h2>",
             f"<p>Trained model <code>{e(s.model)}</code>; schema <code>{e(s.training.schema_uri)}</code></p>",
             *_quality_html(s.quality)]
    if s.anomalies:
        parts.append("<table><tr><th>Feature</th><th>Kind</th><th>Anomaly</th><th>Description</th></tr>")
        parts += [f"<tr><td>{e(a['feature'] or '(dataset)')}</td><td>{e(a['kind'])}</td><td>{e(a['short'])}</td>"
                  f"<td>{e(a['description'])}</td></tr>" for a in s.anomalies]
        parts.append("</table>")
    else:
        parts.append("<p>No anomalies.</p>")
    parts.append(f"<table><tr><th>Feature</th><th>Type</th><th>{TRAIN} missing</th><th>{TRAIN} mean / unique</th>"
                 f"<th>served missing</th><th>served mean / unique</th></tr>")
    rows = statistics_report.feature_rows(s.training.schema, stats)
    for row in rows:
        cells = [row["splits"].get(split, {"missing": None, "value": "-"}) for split in (TRAIN, s.split)]
        parts.append(f"<tr><td>{e(row['feature'])}</td><td>{e(row['type'])}</td>" + "".join(
            f'<td class="num">{pct(c["missing"])}</td><td class="num">{e(c["value"])}</td>' for c in cells) + "</tr>")
    parts.append("</table>")
    drawn = statistics_report.distributions(stats, [row["feature"] for row in rows])
    flagged = set(s.drifted_features)
    parts += ['<div class="charts">', *(statistics_report.chart_figure(entry, [TRAIN, s.split],
                                                                       entry["feature"] in flagged)
                                        for entry in drawn), "</div>"]
    return parts
