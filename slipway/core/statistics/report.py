"""What the statistics reports show, shared by validate (train against the other splits) and monitor (train against
the served rows): per feature a table row and the data of a distribution chart on bins or categories every split
shares, the chart as an SVG figure, and Markdown escaping for the KFP UI's tables.

Plain Python (TFDV's protos are read, not imported at module level); the charts come from slipway.core.charts.
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
            name = feature_name(fs)
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
    by_split = {split: {feature_name(fs): fs for fs in s.datasets[0].features} for split, s in stats.items()}
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


def feature_name(fs) -> str:
    """A FeatureNameStatistics' feature name: its path (TFDV writes path, not name), else its name."""
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


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"



# What CommonMark (and GFM's tables) read as inline markup: a feature named trip_start_day must not turn italic
MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]<>&|~])")


def md_cell(text: object) -> str:
    """Text for a table cell: inline markup characters escaped, one line."""
    return MARKDOWN_INLINE.sub(r"\\\1", " ".join(str(text).split()))


def md_code(text: object) -> str:
    """Text as a code span (read literally), fenced by more backticks than it holds in a row."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


CHART_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right} .bad{color:#b00020;font-weight:600} .ok{color:#1b5e20;font-weight:600}
code{background:#f6f6f6;padding:0 .2em}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start} .charts figure{margin:0;border:1px solid #eee}
.charts figure.anomalous{border-color:#b00020} svg.chart{display:block;max-width:100%;height:auto}
"""


def chart_figure(entry: dict, splits: list[str], anomalous: bool) -> str:
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
