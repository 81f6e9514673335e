"""The validate step's reports: report.md (also printed to the log when validation fails) and report.html with a
distribution chart per feature, train against the other splits.

Plain Python (TFDV's protos are read, not imported at module level). The HTML page is self-contained (inline CSS
and SVG from slipway.core.charts, no scripts, nothing fetched) so it opens air-gapped and in the KFP UI.

ctx, the facts both reports show (built by executor.run):

    {"examples_dir": str, "schema_source": "inferred" | "user", "schema_file": str, "allowed": bool,
     "anomalies": [{"split", "feature", "kind", "type", "short", "description"}, ...],
     "splits": {split: examples}, "label": str | None, "skew": {feature: threshold}, "drift": {...},
     "default_drift": float | None, "features": feature_rows(...), "distributions": distributions(...)}
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from slipway.core import charts

HISTOGRAM_BINS = 10  # TFDV's own histograms have 10 buckets: finer shared bins would only spread them thinner
TOP_VALUES = 10  # categories drawn per categorical feature (the most frequent in any split)
CHART_WIDTH = 380  # three charts a row in a 1280 px window
# A text feature with a value (nearly) per row is an identifier (a name, an id): nothing a model can learn from, and
# a bar per value would say nothing. At least this many distinct values, at least this share of the rows.
IDENTIFIER_MIN_UNIQUE, IDENTIFIER_SHARE = 20, 0.9


# ----------------------------------------------------------------------------------------------------------------
# Facts from the statistics


def feature_rows(schema, stats: dict, label: str | None = None, classes: list | None = None) -> list[dict]:
    """Per feature: type and, per split, missing fraction and mean (numeric) or unique count (categorical); the
    label of a classification (classes: its class names) by its classes, not a mean of class ids; an
    identifier-like text feature (row["identifier"]) flagged."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    type_names = {schema_pb2.INT: "int", schema_pb2.FLOAT: "float", schema_pb2.BYTES: "string",
                  schema_pb2.STRUCT: "struct"}
    names = [f.name for f in schema.feature]
    types = {f.name: type_names.get(f.type, "?") for f in schema.feature}
    per_split: dict[str, dict[str, Any]] = {}
    for split, stats_list in stats.items():
        dataset = stats_list.datasets[0]
        by_name = {}
        for fs in dataset.features:
            name = _feature_name(fs)
            by_name[name] = fs
            if name not in types:
                names.append(name)
                types[name] = "(not in schema)"
        per_split[split] = {"n": dataset.num_examples, "features": by_name}

    rows = []
    for name in dict.fromkeys(names):
        row = {"feature": name, "type": types[name], "splits": {}}
        for split, info in per_split.items():
            fs = info["features"].get(name)
            if fs is None:
                row["splits"][split] = {"missing": 1.0 if info["n"] else None, "value": "absent"}
                continue
            which = fs.WhichOneof("stats")
            common = getattr(fs, which).common_stats if which else None
            n = info["n"]
            missing = (common.num_missing / n) if (common is not None and n) else None
            if name == label and classes:
                shown = ", ".join(str(c) for c in classes[:6]) + (", ..." if len(classes) > 6 else "")
                value, row["type"] = f"{len(classes)} classes ({shown})", "class id"
            elif which == "num_stats":
                value = f"mean {fs.num_stats.mean:.4g}"
            elif which == "string_stats":
                value = f"{fs.string_stats.unique} unique"
                if identifier_like(fs.string_stats.unique, n - (common.num_missing if common else 0)):
                    row["identifier"] = True
                    value += " (identifier-like: a value per row)"
            else:
                value = ""
            row["splits"][split] = {"missing": missing, "value": value}
        rows.append(row)
    return rows


def identifier_like(unique: int, present: int) -> bool:
    """Whether a text feature with `unique` distinct values over `present` rows looks like an identifier."""
    return unique >= IDENTIFIER_MIN_UNIQUE and present > 0 and unique / present >= IDENTIFIER_SHARE


def distributions(stats: dict, features: list[str]) -> list[dict]:
    """Per feature (in the given order) the data of its chart, every split on the same bins or categories:

    numeric: {"feature", "kind": "numeric", "edges": [HISTOGRAM_BINS + 1 floats], "series": {split: [fraction]},
              "overflow": {split: fraction above the last edge} when a long tail was cut off, else None}
    categorical: {"feature", "kind": "categorical", "labels": [value], "series": {split: [fraction]},
                  "unique": distinct values in the split with the most}

    Fractions are of the split's non-missing values, so splits of different sizes compare. Features with no values
    in any split (or only nested/struct statistics) have no entry.
    """
    by_split = {split: {_feature_name(fs): fs for fs in s.datasets[0].features} for split, s in stats.items()}
    out = []
    for name in features:
        present = {split: feats[name] for split, feats in by_split.items() if name in feats}
        kinds = {fs.WhichOneof("stats") for fs in present.values()}
        if kinds == {"num_stats"}:
            entry = _numeric(present)
        elif kinds == {"string_stats"}:
            entry = _categorical(present)
        else:  # struct/bytes statistics, or a feature typed differently per split: the tables say what it is
            entry = None
        if entry is not None:
            out.append({"feature": name, **entry})
    return out


def _feature_name(fs) -> str:
    return ".".join(fs.path.step) if fs.path.step else fs.name


def _numeric(present: dict) -> dict | None:
    """Bins shared by the splits. TFDV gives each split an equal-width histogram over that split's own min and max,
    and deciles. When every split has the same histogram edges those are the bins; otherwise re-spreading those
    coarse buckets onto shared bins would draw differences that are not in the data (two splits of one
    distribution with different extremes), so the bins are filled from the deciles, which follow the values.

    A long tail (the top tenth of the values spanning more than twice the range of the other nine tenths, e.g.
    fares up to 700 with nine in ten under 28) would leave one visible bar: then the bins cover the values up to
    the 90th percentile and the rest is one overflow bar.
    """
    from tensorflow_metadata.proto.v0 import statistics_pb2

    standard, quantiles = {}, {}
    for split, fs in present.items():
        for histogram in fs.num_stats.histograms:
            buckets = [(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets]
            if histogram.type == statistics_pb2.Histogram.STANDARD:
                standard[split] = buckets
            elif histogram.type == statistics_pb2.Histogram.QUANTILES:
                quantiles[split] = buckets
    ends = [v for found in standard.values() for low, high, count in found if count > 0
            for v in (low, high) if math.isfinite(v)]
    if not ends:
        return None
    lo, hi = min(ends), max(ends)
    with_deciles = len(quantiles) == len(standard)
    p90 = max((found[-1][0] for found in quantiles.values() if found), default=hi)
    long_tail = with_deciles and lo < p90 < hi and hi - p90 > 2 * (p90 - lo)
    shared_edges = len({tuple((low, high) for low, high, _ in found) for found in standard.values()}) == 1
    top = p90 if long_tail else hi
    source = quantiles if long_tail or (with_deciles and not shared_edges) else standard
    if top <= lo:  # one value everywhere: a histogram would be one bar on a meaningless axis; say the value
        shares = {split: 1.0 for split, found in standard.items() if sum(count for _, _, count in found) > 0}
        return {"kind": "categorical", "labels": [f"{lo:.12g}"], "series": {s: [v] for s, v in shares.items()},
                "unique": 1}
    width = (top - lo) / HISTOGRAM_BINS
    edges = [lo + i * width for i in range(HISTOGRAM_BINS)] + [top]
    series, overflow = {}, {}
    for split, found in source.items():
        total = sum(count for _, _, count in found)
        if total <= 0:
            continue
        bins, above = _rebin(found, lo, top)
        if not long_tail:  # only rounding can put values above the range's own maximum
            bins[-1] += above
        series[split] = [b / total for b in bins]
        overflow[split] = above / total
    if not series:
        return None
    return {"kind": "numeric", "edges": edges, "series": series, "overflow": overflow if long_tail else None}


def _rebin(buckets: list[tuple[float, float, float]], lo: float, top: float) -> tuple[list[float], float]:
    """Counts of TFDV buckets (low, high, count) on HISTOGRAM_BINS equal bins over [lo, top], and the count above
    top. Each split has its own bucket edges (its own min and max) and the chart needs one set of bins, so a
    bucket's count is taken as spread evenly over it."""
    width = (top - lo) / HISTOGRAM_BINS
    bins = [0.0] * HISTOGRAM_BINS
    above = 0.0

    def index(value: float) -> int:
        return min(max(int((value - lo) / width), 0), HISTOGRAM_BINS - 1)

    for low, high, count in buckets:
        low = low if math.isfinite(low) else high  # an infinite edge: the bucket's finite end holds its count
        high = high if math.isfinite(high) else low
        if not (math.isfinite(low) and math.isfinite(high)) or count <= 0:
            continue
        if high <= low:  # one value (TFDV's deciles of discrete data are often such points)
            if low > top:
                above += count
            else:
                bins[index(low)] += count
            continue
        span = high - low
        if high > top:
            above += count * (high - max(low, top)) / span
        for i in range(index(max(low, lo)), index(min(high, top)) + 1):
            left = lo + i * width if i else min(lo, low)  # values below lo (none: lo is the minimum) go first
            right = lo + (i + 1) * width if i < HISTOGRAM_BINS - 1 else top
            covered = min(high, right) - max(low, left)
            if covered > 0:
                bins[i] += count * covered / span
    return bins, above


def _categorical(present: dict) -> dict | None:
    counts: dict[str, dict[str, float]] = {}
    unique = 0
    for split, fs in present.items():
        string_stats = fs.string_stats
        unique = max(unique, int(string_stats.unique))
        if string_stats.rank_histogram.buckets:
            pairs = [(b.label, b.sample_count) for b in string_stats.rank_histogram.buckets]
        else:
            pairs = [(v.value, v.frequency) for v in string_stats.top_values]
        # The rank histogram is cut off at TFDV's bucket limit: the total comes from the common statistics.
        total = string_stats.common_stats.tot_num_values or sum(count for _, count in pairs)
        if total > 0:
            counts[split] = {label: count / total for label, count in pairs}
    if not counts:
        return None
    labels = sorted({label for found in counts.values() for label in found},
                    key=lambda label: (-max(found.get(label, 0.0) for found in counts.values()), label))
    labels = labels[:TOP_VALUES]
    series = {split: [found.get(label, 0.0) for label in labels] for split, found in counts.items()}
    return {"kind": "categorical", "labels": labels, "series": series, "unique": unique}


# ----------------------------------------------------------------------------------------------------------------
# Markdown


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def status(anomalies: list, allowed: bool) -> str:
    if not anomalies:
        return "passed: no anomalies"
    state = "allowed (allow_anomalies)" if allowed else "FAILED"
    return f"{len(anomalies)} anomalies, {state}"


# What CommonMark (and GFM's tables) read as inline markup: a feature named trip_start_day must not turn italic
MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]<>&|~])")


def _md_cell(text: object) -> str:
    """Text for a table cell: inline markup characters escaped, one line."""
    return MARKDOWN_INLINE.sub(r"\\\1", " ".join(str(text).split()))


def _md_code(text: object) -> str:
    """Text as a code span (read literally), fenced by more backticks than it holds in a row."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def report_md(ctx: dict) -> str:
    """The Markdown report (tables only: it is also printed to the step's log)."""
    splits = list(ctx["splits"])
    lines = [
        "# Data validation report",
        "",
        f"- Examples: {_md_code(ctx['examples_dir'])}",
        f"- Schema: {_md_cell(ctx['schema_source'])}" + (f" ({_md_code(ctx['schema_file'])})" if ctx["schema_file"]
                                                         else ""),
        f"- Result: **{_md_cell(status(ctx['anomalies'], ctx['allowed']))}**",
    ]
    if ctx["label"]:
        lines.append(f"- Label: {_md_code(ctx['label'])}")
    for title, key in (("Skew thresholds", "skew"), ("Drift thresholds (reference: train)", "drift")):
        if ctx[key]:
            lines.append(f"- {title}: " + ", ".join(f"{_md_code(k)} {v:g}" for k, v in sorted(ctx[key].items())))
    if ctx["default_drift"] is not None:
        lines.append(f"- Default drift threshold: {ctx['default_drift']:g}")
    lines += ["", "## Splits", "", "| Split | Examples |", "|---|---:|"]
    lines += [f"| {_md_cell(s)} | {n} |" for s, n in ctx["splits"].items()]
    lines += ["", "## Anomalies", ""]
    if ctx["anomalies"]:
        lines += ["| Split | Feature | Kind | Anomaly | Description |", "|---|---|---|---|---|"]
        for a in ctx["anomalies"]:
            cells = [a["split"], a["feature"] or "(dataset)", a["kind"], a["short"], a["description"]]
            lines.append("| " + " | ".join(_md_cell(cell) for cell in cells) + " |")
    else:
        lines.append("None.")
    header = "| Feature | Type | " + " | ".join(f"{_md_cell(s)} missing | {_md_cell(s)} mean / unique"
                                                for s in splits) + " |"
    lines += ["", "## Features", "", header, "|---|---|" + "---:|---:|" * len(splits)]
    for row in ctx["features"]:
        cells = [_md_cell(row["feature"]), row["type"]]
        for s in splits:
            cell = row["splits"].get(s, {"missing": None, "value": "-"})
            cells += [pct(cell["missing"]), _md_cell(cell["value"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# HTML


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right} .bad{color:#b00020;font-weight:600} .ok{color:#1b5e20;font-weight:600}
code{background:#f6f6f6;padding:0 .2em}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start} .charts figure{margin:0;border:1px solid #eee}
.charts figure.anomalous{border-color:#b00020} svg.chart{display:block;max-width:100%;height:auto}
"""


def _chart(entry: dict, splits: list[str], anomalous: bool) -> str:
    name = entry["feature"]
    notes = ["anomaly"] if anomalous else []
    without = [s for s in splits if s not in entry["series"]]
    if without:
        notes.append(f"no values in {', '.join(without)}")
    if entry["kind"] == "categorical" and entry["unique"] > len(entry["labels"]):
        notes.append(f"top {len(entry['labels'])} of {entry['unique']}")
    title = f"{name} ({'; '.join(notes)})" if notes else name
    # The legend says which colour is which split even when a split has no values.
    if entry["kind"] == "numeric":
        svg = charts.histogram(title, entry["edges"], entry["series"], overflow=entry.get("overflow"), legend=True,
                               x_label=name, y_label="share of values", width=CHART_WIDTH)
    else:
        svg = charts.bar_chart(title, entry["labels"], entry["series"], percent=True, legend=True,
                               x_label="share of values", width=CHART_WIDTH)
    return f'<figure class="{"anomalous" if anomalous else ""}" data-feature="{html.escape(name)}">{svg}</figure>'


def report_html(ctx: dict) -> str:
    """The HTML report: the same facts as report_md, and a distribution chart per feature."""
    e = html.escape
    splits = list(ctx["splits"])
    status_class = "ok" if not ctx["anomalies"] else ("bad" if not ctx["allowed"] else "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Data validation report</title>',
        f"<style>{_CSS}</style></head><body>",
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
            *(_chart(entry, splits, entry["feature"] in flagged) for entry in drawn),
            "</div>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
