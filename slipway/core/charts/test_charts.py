"""slipway.core.charts: the SVG parses, holds one mark per datum where the data says, and references nothing."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from slipway.core import charts
from slipway.core.charts import lines as chart_lines


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    assert root.tag == "svg" and root[0].tag == "title"  # the accessible name comes first
    return root


def self_contained(svg: str) -> None:
    for forbidden in ("http:", "https:", "//", "xlink", "href", "@import", "<script", "url("):
        assert forbidden not in svg, forbidden


def plot_area(root: ET.Element) -> tuple[float, float, float, float]:
    [area] = [e for e in root.iter("rect") if e.get("class") == "plot-area"]
    return tuple(float(area.get(k)) for k in ("x", "y", "width", "height"))


def shown(text: ET.Element) -> str:
    """What a <text> shows: its own text, not that of the <title> inside it (the hover text)."""
    return (text.text or "") + "".join(child.tail or "" for child in text)


def of_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if (e.get("class") or "").split() and cls in e.get("class").split()]


def test_histogram_has_one_bar_per_bin_and_split_scaled_to_its_share():
    edges = [0, 10, 20, 30, 40]
    train, eval_ = [0.1, 0.4, 0.3, 0.2], [0.25, 0.25, 0.5, 0.0]
    svg = charts.histogram("fare", edges, {"train": train, "eval": eval_}, x_label="fare")
    root = parse(svg)
    self_contained(svg)
    groups = {g.get("data-series"): g for g in root.iter("g") if g.get("class") == "bars"}
    assert list(groups) == ["train", "eval"]
    left, top, width, height = plot_area(root)
    for name, values in (("train", train), ("eval", eval_)):
        bars = groups[name].findall("rect")
        assert len(bars) == len(edges) - 1
        # The y axis is fitted to round ticks above the largest share (0.5 -> 60%): bar heights stay proportional.
        ratios = [float(b.get("height")) / v for b, v in zip(bars, values, strict=True) if v]
        assert max(ratios) - min(ratios) < 1.0
        # each pair sits inside its own bin, train left of eval
        for b, (lo, hi) in enumerate(zip(edges, edges[1:], strict=False)):
            x = float(bars[b].get("x"))
            assert left + lo / 40 * width <= x <= left + hi / 40 * width
    assert [float(b.get("x")) < float(e.get("x")) for b, e in
            zip(groups["train"].findall("rect"), groups["eval"].findall("rect"), strict=True)] == [True] * 4
    assert groups["eval"].findall("rect")[2].find("title").text == "eval: [20, 30) 50.0%"
    legend = " ".join(t.text or "" for t in of_class(root, "legend")[0].iter("text"))
    assert legend == "train eval"


def test_histogram_overflow_bar_sits_right_of_the_axis_with_its_label():
    root = parse(charts.histogram("fare", [0, 1, 2], {"train": [0.5, 0.3], "eval": [0.4, 0.3]},
                                  overflow={"train": 0.2, "eval": 0.3}))
    overflow = of_class(root, "overflow")
    assert len(overflow) == 2
    assert [b.find("title").text for b in overflow] == ["train: > 2 20.0%", "eval: > 2 30.0%"]
    last_bin_end = max(float(b.get("x")) + float(b.get("width")) for b in of_class(root, "bar")
                       if "overflow" not in b.get("class"))
    assert min(float(b.get("x")) for b in overflow) > last_bin_end
    assert of_class(root, "overflow-label")[0].text == "> 2"


def test_bar_chart_rows_notes_and_escaped_labels():
    labels = ["Overall", "company=<Zed> & \"Sons\"", "x" * 60]
    svg = charts.bar_chart("auc by slice", labels, {"candidate": [0.9, 0.5, None]}, notes=["n=120", "n=7", "n=1"],
                           x_range=(0.0, 1.0))
    root = parse(svg)
    self_contained(svg)
    bars = of_class(root, "bar")
    assert len(bars) == 2  # None draws nothing
    assert float(bars[0].get("width")) == pytest.approx(float(bars[1].get("width")) * 0.9 / 0.5, rel=0.01)
    assert [n.text for n in of_class(root, "note")] == ["n=120", "n=7", "n=1"]
    texts = [t for t in root.iter("text") if t.find("title") is not None]
    assert [t.find("title").text for t in texts] == labels  # the whole label on hover, escaped in the markup
    assert "&lt;Zed&gt; &amp; &quot;Sons&quot;" in svg
    assert shown(texts[0]) == "Overall"
    assert shown(texts[2]).endswith("\u2026") and len(shown(texts[2])) < 60  # shortened to fit the margin


def test_roc_polyline_goes_through_the_given_points_with_the_chance_diagonal():
    fpr = [1.0, 0.6, 0.3, 0.1, 0.0]
    tpr = [1.0, 0.95, 0.8, 0.5, 0.0]
    svg = chart_lines.line_chart("ROC", [chart_lines.Series("model (AUC 0.88)", fpr, tpr)],
                                 x_label="false positive rate", y_label="true positive rate", x_range=(0, 1),
                                 y_range=(0, 1), diagonal="chance")
    root = parse(svg)
    self_contained(svg)
    left, top, width, height = plot_area(root)
    [line] = [e for e in root.iter("polyline") if e.get("data-series") == "model (AUC 0.88)"]
    points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    assert len(points) == len(fpr)
    for (x, y), f, t in zip(points, fpr, tpr, strict=True):
        assert x == pytest.approx(left + f * width, abs=0.06)
        assert y == pytest.approx(top + height - t * height, abs=0.06)
    [diagonal] = of_class(root, "diagonal")
    assert (float(diagonal.get("x1")), float(diagonal.get("y1"))) == pytest.approx((left, top + height), abs=0.06)
    assert (float(diagonal.get("x2")), float(diagonal.get("y2"))) == pytest.approx((left + width, top), abs=0.06)
    legend = [t.text for t in of_class(root, "legend")[0].iter("text")]
    assert legend == ["model (AUC 0.88)", "chance"]
    ticks = [t.text for g in of_class(root, "x-axis") for t in g.iter("text")]
    assert ticks == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]


def test_points_and_step_line():
    xs, ys = [1, 2, 3, 4], [0.5, 0.7, 0.6, 0.8]
    svg = chart_lines.line_chart("score by trial", [
        chart_lines.Series("trial", xs, ys, style="points", point_titles=["a", "b", "c", "d"]),
        chart_lines.Series("best so far", xs, [0.5, 0.7, 0.7, 0.8], style="step"),
    ], x_range=(0.5, 4.5), integer_x=True)
    root = parse(svg)
    assert [c.find("title").text for c in of_class(root, "point")] == ["a", "b", "c", "d"]
    [step] = root.iter("polyline")
    points = step.get("points").split()
    assert len(points) == 1 + 2 * 3  # a horizontal and a vertical segment per change of x
    ticks = [t.text for g in of_class(root, "x-axis") for t in g.iter("text")]
    assert ticks == ["1", "2", "3", "4"]
    with pytest.raises(ValueError, match="style must be one of"):
        chart_lines.line_chart("x", [chart_lines.Series("s", [1], [1], style="bars")])


def test_heatmap_has_a_cell_per_entry_with_its_count_and_darker_for_more():
    matrix = [[50, 8, 0], [4, 58, 3], [1, 2, 1234]]
    classes = ["low", "mid", "<high>"]
    svg = charts.heatmap("Confusion matrix", classes, classes, matrix, x_label="predicted", y_label="actual")
    root = parse(svg)
    self_contained(svg)
    cells = of_class(root, "cell")
    values = of_class(root, "cell-value")
    assert len(cells) == len(values) == 9
    by_position = {(int(c.get("data-row")), int(c.get("data-col"))): c for c in cells}
    assert [v.text for v in values] == ["50", "8", "0", "4", "58", "3", "1", "2", "1,234"]
    assert by_position[(2, 2)].find("title").text == "<high> / <high>: 1,234"

    def darkness(cell) -> int:
        colour = cell.get("fill")
        return -sum(int(colour[i:i + 2], 16) for i in (1, 3, 5))

    assert darkness(by_position[(2, 2)]) > darkness(by_position[(1, 1)]) > darkness(by_position[(0, 1)])
    assert darkness(by_position[(0, 2)]) == min(darkness(c) for c in cells)  # the zero is the lightest
    axis_texts = {shown(t) for t in root.iter("text")}
    assert {"low", "mid", "<high>", "predicted", "actual"} <= axis_texts


def test_output_is_deterministic_and_empty_data_still_renders():
    def make() -> str:
        return charts.histogram("x", [0.0, 0.1, 0.30000000000000004], {"a": [0.3, 0.7], "b": [0.5, 0.5]})

    assert make() == make()
    assert "0.30000000000000004" not in make()  # coordinates and labels are rounded
    for svg in (charts.histogram("x", [], {}), charts.bar_chart("x", [], {}),
                chart_lines.line_chart("x", [chart_lines.Series("s", [float("nan")], [1.0])]),
                charts.heatmap("x", [], [], [])):
        root = parse(svg)
        assert "no data" in {t.text for t in root.iter("text")}


def test_tick_labels_stay_distinct_for_large_and_small_numbers():
    for lo, hi in ((1357000200, 1483116300), (17031010100, 17031980100), (0.0001, 0.0009), (41.66, 42.02)):
        root = parse(charts.histogram("x", [lo + (hi - lo) * i / 10 for i in range(11)], {"a": [0.1] * 10}))
        labels = [t.text for g in of_class(root, "x-axis") for t in g.iter("text")]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
        assert all(len(label) <= 10 for label in labels), labels
    assert re.fullmatch(r"[-0-9.e%]+", "".join(t.text for g in of_class(root, "y-axis") for t in g.iter("text")))
