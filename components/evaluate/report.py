"""The evaluate step's HTML report: blessing, metrics, thresholds, and the charts people look for (ROC and
precision-recall curves, the confusion matrix as a heatmap, the primary metric by slice).

Plain Python over plain data (no TFMA import), so any problem type can pass what it has: a chart is drawn only
when its data is given (a regression model passes no confusion matrix and no curves, and its primary metric,
e.g. mean_absolute_error, by slice). The page is self-contained (inline CSS and SVG from slipway.core.charts, no
scripts, nothing fetched) so it opens air-gapped and in the KFP UI.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from slipway.core import charts, storage
from slipway.core.charts import lines as chart_lines
from slipway.core.charts import svg as chart_svg

# The metric drawn by slice when the caller names none and no threshold names one: the first of these measured.
PREFERRED_METRICS = ("auc", "binary_accuracy", "sparse_categorical_accuracy", "accuracy", "root_mean_squared_error",
                     "mean_absolute_error", "mean_squared_error")
MAX_SLICES_DRAWN = 30  # more bars are unreadable; the table below the chart lists every slice
# Metrics that are shares, drawn on a 0 to 1 axis; others (errors, counts) on an axis fitted to their values.
RATE_METRICS = {"auc", "auc_precision_recall", "binary_accuracy", "sparse_categorical_accuracy", "accuracy",
                "precision", "recall", "squared_pearson_correlation"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.passed{color:#176c2f}.failed{color:#b00020;font-weight:bold}
.skipped{color:#777}.banner{padding:10px 14px;border-radius:6px;margin:10px 0 20px;font-weight:bold}
.yes{background:#e3f6e8;color:#176c2f}.no{background:#fde7ea;color:#b00020}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.charts figure{margin:0;border:1px solid #eee}
svg.chart{display:block;max-width:100%;height:auto}
"""


# Metrics TFMA gives in percent (Keras' MeanAbsolutePercentageError is 100 x the mean |error / label|).
PERCENT_METRICS = ("mean_absolute_percentage_error",)


def _fmt(value, name: str = "") -> str:
    if name in PERCENT_METRICS and isinstance(value, float):
        return f"{value:.2f}%"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.4f}"
    return html.escape(str(value))


def primary_metric(per_slice: Mapping[str, Mapping[str, Any]], threshold_rows: Sequence[Mapping[str, Any]]) -> str:
    """The metric to draw by slice: the first one a threshold gates, else the first of PREFERRED_METRICS measured,
    else the first measured metric other than example_count; "" when there is none."""
    measured = {name for entry in per_slice.values() for name in entry.get("metrics", {})}
    for row in threshold_rows:
        if row.get("metric") in measured:
            return str(row["metric"])
    for name in PREFERRED_METRICS:
        if name in measured:
            return name
    return next((name for name in sorted(measured) if name != "example_count"), "")


def _figure(svg: str, name: str) -> str:
    return f'<figure data-chart="{name}">{svg}</figure>'


def _curves(roc: Mapping | None, pr: Mapping | None, overall: Mapping[str, Any],
            confusion: Mapping | None) -> list[str]:
    out = []
    if roc and roc.get("fpr"):
        auc = overall.get("auc")
        name = f"model (AUC {auc:.3f})" if isinstance(auc, float) else "model"
        out.append(_figure(chart_lines.line_chart(
            "ROC curve (overall)", [chart_lines.Series(name, roc["fpr"], roc["tpr"])], x_label="false positive rate",
            y_label="true positive rate", x_range=(0.0, 1.0), y_range=(0.0, 1.0), diagonal="chance", width=380,
            height=340), "roc"))
    if pr and pr.get("recall"):
        auc = overall.get("auc_precision_recall")
        series = [chart_lines.Series(f"model (AUC-PR {auc:.3f})" if isinstance(auc, float) else "model", pr["recall"],
                                     pr["precision"])]
        rate = _positive_rate(confusion)
        if rate is not None:  # a model that ranks at random has the positives' share as its precision
            series.append(chart_lines.Series(f"chance ({rate:.2f})", [0.0, 1.0], [rate, rate], dashed=True,
                                             colour=chart_svg.MUTED))
        out.append(_figure(chart_lines.line_chart(
            "Precision-recall curve (overall)", series, x_label="recall", y_label="precision", x_range=(0.0, 1.0),
            y_range=(0.0, 1.0), width=380, height=340), "pr"))
    return out


def _regression_charts(predictions: Mapping[str, Sequence[float]]) -> list[str]:
    """Predicted against actual (on the dashed diagonal when right) and the residuals against the prediction (a
    trend or a fan there is what a mean error hides)."""
    actual, predicted = list(predictions["actual"]), list(predictions["predicted"])
    residuals = [a - p for a, p in zip(actual, predicted, strict=True)]
    lo, hi = min(predicted), max(predicted)
    return [
        f"<h2>Predictions (the first {len(actual)} rows)</h2><div class='charts'>",
        _figure(chart_lines.line_chart(
            "Predicted against actual", [chart_lines.Series("rows", actual, predicted, style="points")],
            x_label="actual", y_label="predicted", diagonal="perfect", width=380, height=340), "predicted-actual"),
        _figure(chart_lines.line_chart(
            "Residuals (actual - predicted)",
            [chart_lines.Series("rows", predicted, residuals, style="points"),
             chart_lines.Series("zero", [lo, hi], [0.0, 0.0], dashed=True, colour=chart_svg.MUTED)],
            x_label="predicted", y_label="residual", width=380, height=340), "residuals"),
        "</div>",
    ]


def _positive_rate(confusion: Mapping | None) -> float | None:
    matrix = (confusion or {}).get("matrix") or []
    if len(matrix) != 2 or any(len(row) != 2 for row in matrix):
        return None
    total = sum(map(sum, matrix))
    return (matrix[1][0] + matrix[1][1]) / total if total else None


def _natural(name: str) -> list[tuple[int, int, str]]:
    """Sort key: numbers in slice names by value (hour=2 before hour=10)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _slice_order(per_slice: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(per_slice, key=lambda name: (name != "Overall", _natural(name)))


def _by_slice(per_slice: Mapping[str, Mapping[str, Any]], metric: str, has_baseline: bool) -> tuple[str, str]:
    """(the chart, a note when slices were left out of it)."""
    names = _slice_order(per_slice)
    if len(names) > MAX_SLICES_DRAWN:
        # Overall first, then the slices with the most examples: the small ones are the noisiest anyway.
        by_count = sorted(names[1:], key=lambda n: -(per_slice[n].get("metrics", {}).get("example_count") or 0))
        kept = set(names[:1] + by_count[: MAX_SLICES_DRAWN - 1])
        names = [n for n in names if n in kept]
    series = {"candidate": [per_slice[n].get("metrics", {}).get(metric) for n in names]}
    if has_baseline:
        series["baseline"] = [per_slice[n].get("baseline_metrics", {}).get(metric) for n in names]
    notes = []
    for n, value in zip(names, series["candidate"], strict=True):
        count = per_slice[n].get("metrics", {}).get("example_count")
        # The value in figures too: slices often differ by less than a bar's visible length.
        parts = [f"{value:.4g}" if isinstance(value, int | float) else "",
                 f"n={count:,.0f}" if isinstance(count, int | float) else ""]
        notes.append("  ".join(part for part in parts if part))
    values = [v for vs in series.values() for v in vs if isinstance(v, int | float)]
    rate_like = metric in RATE_METRICS and all(0.0 <= v <= 1.0 for v in values)
    overall = per_slice.get("Overall", {}).get("metrics", {}).get(metric)
    svg = charts.bar_chart(f"{metric} by slice", names, series, x_label=metric, notes=notes,
                           x_range=(0.0, 1.0) if rate_like else None, width=600,
                           reference=("Overall", overall) if isinstance(overall, int | float) else None)
    left_out = len(per_slice) - len(names)
    note = f" ({left_out} slices with fewer examples are only in the table)" if left_out else ""
    return _figure(svg, "by-slice"), note


def report_html(
    split: str,
    model_dir: str,
    baseline_dir: str,
    per_slice: Mapping[str, Mapping[str, Any]],
    threshold_rows: Sequence[Mapping[str, Any]],
    decision: Mapping[str, Any],
    *,
    confusion: Mapping[str, Any] | None = None,
    roc: Mapping[str, Sequence[float]] | None = None,
    pr: Mapping[str, Sequence[float]] | None = None,
    metric: str = "",
    left_out: Mapping[str, str] | None = None,
    predictions: Mapping[str, Sequence[float]] | None = None,
) -> str:
    """The page. Data as the executor has it:

    per_slice: {slice name: {"metrics": {name: value}, "baseline_metrics": {...}, "diff": {...}}}, Overall first;
    threshold_rows: [{"metric", "threshold", "status", "detail"}]; decision: {"blessed", "message", "failures"};
    confusion: {"categories": [class], "matrix": [[count]]} (rows actual, columns predicted);
    roc: {"fpr": [...], "tpr": [...]}; pr: {"recall": [...], "precision": [...]};
    metric: the metric drawn by slice (default: primary_metric());
    left_out: {metric: why} for metrics left out of the tables (a percentage over labels that cross zero);
    predictions: a regression's {"actual": [...], "predicted": [...]} on a sample of rows (predictions.py).
    Each chart is drawn only when its data is given.
    """
    overall = per_slice.get("Overall", {})
    names = sorted({n for entry in per_slice.values() for n in entry.get("metrics", {})})
    out = _head(split, model_dir, baseline_dir, decision)
    out += _overall_table(overall, names, bool(baseline_dir))
    out += [f"<p class='note'>{html.escape(name)}: {html.escape(why)}</p>" for name, why in (left_out or {}).items()]
    out += _thresholds(threshold_rows, decision["failures"])
    if predictions and predictions.get("actual"):
        out += _regression_charts(predictions)
    curves = _curves(roc, pr, overall.get("metrics", {}), confusion)
    if curves:
        out.append("<h2>ROC and precision-recall (overall)</h2><div class='charts'>" + "".join(curves) + "</div>")
    if confusion and confusion.get("matrix"):
        out += _confusion(confusion)
    out += _per_slice(per_slice, names, metric or primary_metric(per_slice, threshold_rows), bool(baseline_dir))
    return "".join(out)


def _head(split: str, model_dir: str, baseline_dir: str, decision: Mapping[str, Any]) -> list[str]:
    """The page up to the decision's banner: what was evaluated, on which split, against which baseline."""
    e = html.escape
    return [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Slipway evaluation</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Model evaluation</h1>",
        f"<p>Model: <code>{e(storage.shown_uri(model_dir))}</code><br>"
        f"Baseline: <code>{e(storage.shown_uri(baseline_dir) if baseline_dir else 'none')}</code>"
        f"<br>Split: <code>{e(split)}</code></p>",
        f"<div class='banner {'yes' if decision['blessed'] else 'no'}'>{e(banner_text(decision))}</div>",
    ]


def banner_text(decision: Mapping[str, Any]) -> str:
    """"BLESSED: why" or "NOT BLESSED: why", said once: the message itself starts "blessed: " or "not blessed: "
    (it is the step's line and the summary's too)."""
    verdict = "BLESSED" if decision["blessed"] else "NOT BLESSED"
    reason = str(decision["message"])
    if reason.lower().startswith(verdict.lower() + ": "):
        reason = reason[len(verdict) + 2:]
    return f"{verdict}: {reason}"


def _overall_table(overall: Mapping[str, Any], names: list[str], has_baseline: bool) -> list[str]:
    """Every metric on the overall slice: the candidate's, and with a baseline its value and the difference."""
    e = html.escape
    out = ["<h2>Overall metrics</h2><table><tr><th class='l'>metric</th><th>candidate</th>"]
    if has_baseline:
        out.append("<th>baseline</th><th>diff</th>")
    out.append("</tr>")
    for name in names:
        out.append(f"<tr><td class='l'>{e(name)}</td><td>{_fmt(overall.get('metrics', {}).get(name), name)}</td>")
        if has_baseline:
            out.append(
                f"<td>{_fmt(overall.get('baseline_metrics', {}).get(name), name)}</td>"
                f"<td>{_fmt(overall.get('diff', {}).get(name), name)}</td>"
            )
        out.append("</tr>")
    out.append("</table>")
    return out


def _thresholds(threshold_rows: Sequence[Mapping[str, Any]], failures: Sequence[str]) -> list[str]:
    """Each threshold with its result, then the failed checks in words."""
    e = html.escape
    out = ["<h2>Thresholds</h2>"]
    if threshold_rows:
        out.append("<table><tr><th class='l'>metric</th><th class='l'>threshold</th><th class='l'>result</th>"
                   "<th class='l'>failing slices / note</th></tr>")
        for row in threshold_rows:
            out.append(
                f"<tr><td class='l'>{e(row['metric'])}</td><td class='l'>{e(row['threshold'])}</td>"
                f"<td class='l {e(row['status'])}'>{e(row['status'])}</td><td class='l'>{e(row['detail'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>No thresholds configured: the model is not blessed.</p>")
    if failures:
        out.append("<ul>" + "".join(f"<li class='failed'>{e(f)}</li>" for f in failures) + "</ul>")
    return out


def _confusion(confusion: Mapping[str, Any]) -> list[str]:
    categories = [str(c) for c in confusion["categories"]]
    return [
        "<h2>Confusion matrix (overall; rows: actual, columns: predicted)</h2><div class='charts'>",
        _figure(charts.heatmap("Confusion matrix (overall)", categories, categories, confusion["matrix"],
                               x_label="predicted", y_label="actual"), "confusion"),
        "</div>",
    ]


def _per_slice(per_slice: Mapping[str, Mapping[str, Any]], names: list[str], metric: str,
               has_baseline: bool) -> list[str]:
    """The metric by slice as a chart (when there are slices to compare), then every metric of every slice."""
    e = html.escape
    out = ["<h2>Metrics per slice</h2>"]
    if metric and len(per_slice) > 1:  # one bar (Overall) is no comparison; the table says it all
        chart, note = _by_slice(per_slice, metric, has_baseline)
        out.append(f"<p>{e(metric)} per slice, with its value and number of examples; the dashed line is the "
                   f"overall value{e(note)}.</p>")
        out.append(f"<div class='charts'>{chart}</div>")
    out.append("<table><tr><th class='l'>slice</th>")
    # <wbr>: long metric names may break after an underscore, so many columns still fit a window.
    out.extend(f"<th>{e(n).replace('_', '_<wbr>')}</th>" for n in names)
    out.append("</tr>")
    for slice_name in _slice_order(per_slice):
        entry = per_slice[slice_name]
        out.append(f"<tr><td class='l'>{e(slice_name)}</td>")
        out.extend(f"<td>{_fmt(entry.get('metrics', {}).get(n), n)}</td>" for n in names)
        out.append("</tr>")
    out.append("</table></body></html>\n")
    return out
