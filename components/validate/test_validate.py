"""Tests for the validate executor on small synthetic Examples folders (200 train / 100 eval rows)."""

from __future__ import annotations

import html
import json
import random
import re
import xml.etree.ElementTree as ET

import pytest

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS first)
from slipway.components.validate import executor
from slipway.core.errors import SlipwayError, ValidationFailed
from tests.support.inputs import write_examples

COLUMNS = {"trips": "int", "fare": "float", "company": "string", "label": "int"}
COMPANIES = ["Acme", "Blue", "City"]


def _rows(n: int, seed: int, *, new_company: bool = False, drop_trips: bool = False, shift: bool = False):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        company = rng.choice(COMPANIES)
        if shift:  # almost all eval rows from one company: a strong change of distribution
            company = "City" if rng.random() < 0.95 else "Acme"
        if new_company and i % 10 == 0:
            company = "Zed Cabs"
        row = {
            "trips": rng.randint(0, 20),
            "fare": None if i % 13 == 0 else round(rng.uniform(3, 60), 2),  # missing now and then
            "company": company,
            "label": rng.randint(0, 1),
        }
        if drop_trips:
            del row["trips"]
        rows.append(row)
    return rows


def _examples(root, **eval_kwargs):
    return str(write_examples(root, {"train": _rows(200, 1), "eval": _rows(100, 2, **eval_kwargs)}, "label",
                              ["0", "1"], COLUMNS))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    base = tmp_path_factory.mktemp("examples")
    return {
        "clean": _examples(base / "clean"),
        "new_company": _examples(base / "new_company", new_company=True),
        "dropped": _examples(base / "dropped", drop_trips=True),
        "shifted": _examples(base / "shifted", shift=True),
    }


def _outs(tmp_path):
    return {k: str(tmp_path / k) for k in ("statistics_dir", "schema_dir", "report_dir")}


def _load_schema(path):
    import tensorflow_data_validation as tfdv

    return tfdv.load_schema_text(path)


def test_clean_data_passes_and_writes_tfx_layout(data, tmp_path, capsys):
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    outs = _outs(tmp_path)
    result = executor.run(examples_dir=data["clean"], **outs, beam_pipeline_args=[])  # the KFP default: no Beam

    assert result == {"splits": {"train": 200, "eval": 100}, "num_features": 4, "anomalies": [],
                      "anomaly_count": 0, "schema_source": "inferred", "blessed": True, "identifier_like": [],
                      "statistics_path": "in_process", "beam": None}
    assert "[slipway] validate statistics of train, eval in process (fast path)" in capsys.readouterr().out
    for split, n in (("train", 200), ("eval", 100)):
        stats = tfdv.load_stats_binary(str(tmp_path / "statistics_dir" / f"Split-{split}" / "FeatureStats.pb"))
        dataset = stats.datasets[0]
        assert dataset.num_examples == n
        assert sorted(f.path.step[0] for f in dataset.features) == sorted(COLUMNS)

    schema = _load_schema(str(tmp_path / "schema_dir" / "schema.pbtxt"))
    types = {f.name: f.type for f in schema.feature}
    assert types == {"trips": schema_pb2.INT, "fare": schema_pb2.FLOAT, "company": schema_pb2.BYTES,
                     "label": schema_pb2.INT}
    assert sorted(tfdv.get_domain(schema, "company").value) == COMPANIES

    report = tmp_path / "report_dir"
    assert json.loads((report / "anomalies.json").read_text()) == {"anomalies": [], "allowed": False, "blessed": True}
    md = (report / "report.md").read_text()
    assert "passed: no anomalies" in md and "| train | 200 |" in md and "| eval | 100 |" in md
    page = (report / "report.html").read_text()
    assert "<table>" in page and "company" in page and "3 unique" in page
    assert "<script" not in page and "http" not in page  # self-contained
    # every 13th fare is missing: rows 0, 13, ..., 195 of train, 16 of 200 = 8.0%
    assert "8.0%" in md
    # no staging folders are left next to the outputs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report_dir", "schema_dir", "statistics_dir"]


def test_an_identifier_is_flagged_and_the_label_shown_as_its_classes(tmp_path):
    from slipway.components.validate.step import fact

    def rows(n, seed, first):
        return [{**row, "rider": f"rider-{first + i}"} for i, row in enumerate(_rows(n, seed))]

    examples = write_examples(tmp_path / "examples", {"train": rows(200, 1, 0), "eval": rows(100, 2, 200)}, "label",
                              ["stayed", "tipped"], {**COLUMNS, "rider": "string"})
    result = executor.run(examples_dir=str(examples), **_outs(tmp_path), beam_pipeline_args=[])
    assert result["identifier_like"] == ["rider"]  # 'company' (3 values) is no identifier
    line = fact({"anomalies": result}, {})
    assert line.endswith("; identifier-like (a value per row, nothing to learn from: drop it or use it as the split "
                         "key): rider")
    page = (tmp_path / "report_dir" / "report.html").read_text()
    assert "200 unique (identifier-like: a value per row)" in page
    assert "2 classes (stayed, tipped)" in page and "class id" in page
    charts = re.findall(r"<figure[^>]*>.*?</figure>", page, re.S)
    assert charts and not any("rider" in chart for chart in charts) and any("company" in c for c in charts)


def test_new_categorical_value_fails_and_leaves_no_schema(data, tmp_path, capsys):
    outs = _outs(tmp_path)
    (tmp_path / "schema_dir").mkdir()  # an empty placeholder, as an orchestrator may create

    with pytest.raises(ValidationFailed) as err:
        executor.run(examples_dir=data["new_company"], **outs)

    message = str(err.value)
    assert "\n" not in message
    assert "found 1 anomaly" in message and "eval/company" in message and "Zed Cabs" in message
    assert "allow_anomalies" in message
    assert not (tmp_path / "schema_dir").exists()
    assert (tmp_path / "statistics_dir" / "Split-eval" / "FeatureStats.pb").is_file()
    recorded = json.loads((tmp_path / "report_dir" / "anomalies.json").read_text())
    assert recorded["allowed"] is False and recorded["blessed"] is False
    [anomaly] = recorded["anomalies"]
    assert (anomaly["split"], anomaly["feature"], anomaly["kind"]) == ("eval", "company", "schema")
    assert anomaly["type"] == "ENUM_TYPE_UNEXPECTED_STRING_VALUES"
    assert "Zed Cabs" in (tmp_path / "report_dir" / "report.html").read_text()
    # the report is in the step's log too: on a cluster a failed step's outputs are not uploaded
    log = capsys.readouterr().out
    assert "# Data validation report" in log and "Zed Cabs" in log


def test_anomaly_error_names_the_option_as_the_caller_spells_it(data, tmp_path, monkeypatch):
    from slipway.core.errors import OPTION_NAMES_ENV

    monkeypatch.setenv(OPTION_NAMES_ENV, '{"allow_anomalies": "--allow-anomalies"}')  # as `slipway run` sets it
    with pytest.raises(ValidationFailed) as err:
        executor.run(examples_dir=data["new_company"], **_outs(tmp_path / "cli"))
    assert str(err.value).endswith("; pass --allow-anomalies to continue)")
    monkeypatch.delenv(OPTION_NAMES_ENV)  # a pipeline run on a cluster: the pipeline parameter's name
    with pytest.raises(ValidationFailed) as err:
        executor.run(examples_dir=data["new_company"], **_outs(tmp_path / "pipeline"))
    assert str(err.value).endswith("; pass allow_anomalies to continue)")


def test_user_schema_names_a_number_feature_that_arrived_as_text(data, tmp_path):
    # Ingest keeps a column of mostly text as text; a curated schema that says FLOAT catches it before transform.
    executor.run(examples_dir=data["clean"], **_outs(tmp_path / "first"))
    rows = {split: [{**row, "fare": "n/a" if i % 2 else str(row["fare"])} for i, row in enumerate(_rows(n, seed))]
            for split, n, seed in (("train", 60, 1), ("eval", 30, 2))}
    texty = write_examples(tmp_path / "texty", rows, "label", ["0", "1"], {**COLUMNS, "fare": "string"})
    with pytest.raises(ValidationFailed) as err:
        executor.run(examples_dir=str(texty), **_outs(tmp_path / "second"),
                     schema_file=str(tmp_path / "first" / "schema_dir" / "schema.pbtxt"))
    assert "train/fare: Unexpected data type (Expected data of type: FLOAT but got STRING)" in str(err.value)


def test_missing_required_feature_fails(data, tmp_path):
    with pytest.raises(ValidationFailed, match=r"eval/trips: Column dropped"):
        executor.run(examples_dir=data["dropped"], **_outs(tmp_path))
    assert not (tmp_path / "schema_dir").exists()
    assert "eval | trips" in (tmp_path / "report_dir" / "report.md").read_text()


def test_allow_anomalies_writes_everything_and_records_them(data, tmp_path):
    result = executor.run(examples_dir=data["new_company"], **_outs(tmp_path), allow_anomalies=True)

    assert result["blessed"] is False and result["anomaly_count"] == 1
    assert result["anomalies"] == ["eval/company: Unexpected string values"]
    assert (tmp_path / "schema_dir" / "schema.pbtxt").is_file()
    recorded = json.loads((tmp_path / "report_dir" / "anomalies.json").read_text())
    assert recorded["allowed"] is True and len(recorded["anomalies"]) == 1
    assert "allowed (allow\\_anomalies)" in (tmp_path / "report_dir" / "report.md").read_text()  # Markdown-escaped


def test_user_schema_is_used(data, tmp_path):
    import tensorflow_data_validation as tfdv

    executor.run(examples_dir=data["clean"], **_outs(tmp_path / "first"))
    schema = _load_schema(str(tmp_path / "first" / "schema_dir" / "schema.pbtxt"))
    tfdv.get_domain(schema, "company").value.append("Zed Cabs")  # the user knows this company is valid
    widened = tmp_path / "widened.pbtxt"
    tfdv.write_schema_text(schema, str(widened))

    result = executor.run(examples_dir=data["new_company"], **_outs(tmp_path / "second"), schema_file=str(widened))
    assert result["schema_source"] == "user" and result["blessed"] is True
    written = _load_schema(str(tmp_path / "second" / "schema_dir" / "schema.pbtxt"))
    assert "Zed Cabs" in tfdv.get_domain(written, "company").value

    # A narrower user schema is checked against train too: train and eval both hold "Acme".
    domain = tfdv.get_domain(schema, "company")
    del domain.value[:]
    domain.value.extend(["Blue", "City", "Zed Cabs"])
    narrowed = tmp_path / "narrowed.pbtxt"
    tfdv.write_schema_text(schema, str(narrowed))
    with pytest.raises(ValidationFailed) as err:
        executor.run(examples_dir=data["clean"], **_outs(tmp_path / "third"), schema_file=str(narrowed))
    assert "train/company" in str(err.value) and "eval/company" in str(err.value) and "Acme" in str(err.value)


def test_drift_and_skew_thresholds(data, tmp_path):
    # The shifted eval split is 95% "City"; train is about a third each: L-infinity distance about 0.6.
    with pytest.raises(ValidationFailed, match=r"eval/company: High Linfty distance between current and previous"):
        executor.run(examples_dir=data["shifted"], **_outs(tmp_path / "strict"), drift_thresholds={"company": 0.2})

    result = executor.run(examples_dir=data["shifted"], **_outs(tmp_path / "allowed"), allow_anomalies=True,
                          drift_thresholds='{"company": 0.2}', skew_thresholds={"company": 0.2})
    kinds = sorted(a["kind"] for a in json.loads((tmp_path / "allowed" / "report_dir" / "anomalies.json").read_text())[
        "anomalies"])
    assert kinds == ["drift", "skew"]
    assert result["anomaly_count"] == 2

    # A loose threshold, and the same data with the default threshold applied to every feature.
    assert executor.run(examples_dir=data["shifted"], **_outs(tmp_path / "loose"),
                        drift_thresholds={"company": 0.9})["blessed"]
    result = executor.run(examples_dir=data["shifted"], **_outs(tmp_path / "default"), allow_anomalies=True,
                          default_drift_threshold=0.3)
    assert "eval/company: High Linfty distance between current and previous" in result["anomalies"]


def test_bad_inputs(data, tmp_path):
    missing = tmp_path / "nope.pbtxt"
    with pytest.raises(SlipwayError, match=r"^schema file .*nope\.pbtxt: not found$"):
        executor.run(examples_dir=data["clean"], **_outs(tmp_path / "a"), schema_file=str(missing))
    garbage = tmp_path / "garbage.pbtxt"
    garbage.write_text("feature { name: \n")
    with pytest.raises(SlipwayError, match=r"schema file .*garbage\.pbtxt: not a valid Schema text proto"):
        executor.run(examples_dir=data["clean"], **_outs(tmp_path / "b"), schema_file=str(garbage))
    with pytest.raises(SlipwayError, match=r"drift_thresholds: feature 'nosuch' is not in the schema"):
        executor.run(examples_dir=data["clean"], **_outs(tmp_path / "c"), drift_thresholds={"nosuch": 0.1})
    with pytest.raises(SlipwayError, match=r"skew_thresholds\['company'\]: threshold must be a number"):
        executor.run(examples_dir=data["clean"], **_outs(tmp_path / "d"), skew_thresholds={"company": "high"})

    only_eval = write_examples(tmp_path / "only_eval", {"eval": _rows(10, 3)}, "label", ["0", "1"], COLUMNS)
    with pytest.raises(SlipwayError, match=r"no 'train' split .*splits found: eval") as err:
        executor.run(examples_dir=str(only_eval), **_outs(tmp_path / "e"))
    assert not isinstance(err.value, ValidationFailed)
    corrupt = tmp_path / "corrupt"
    (corrupt / "Split-train").mkdir(parents=True)
    (corrupt / "Split-train" / "data.gz").write_bytes(b"this is not gzip")
    with pytest.raises(SlipwayError, match=r"split 'train' cannot be read \(inflate\(\) failed"):
        executor.run(examples_dir=str(corrupt), **_outs(tmp_path / "f"))
    # nothing was written for any of the failures
    assert not any((tmp_path / d).exists() for d in "abcdef")


def _charts(page: str) -> dict[str, tuple[str, ET.Element]]:
    """The report's distribution charts by feature: (the figure's class, the SVG parsed as XML: it is well-formed)."""
    figures = re.findall(r'<figure class="([^"]*)" data-feature="([^"]+)">(<svg.*?</svg>)</figure>', page, re.S)
    return {html.unescape(name): (cls, ET.fromstring(svg)) for cls, name, svg in figures}


def _bar_titles(svg: ET.Element) -> list[str]:
    return [bar.find("title").text for bar in svg.iter("rect") if "bar" in (bar.get("class") or "").split()]


def test_report_draws_each_feature_per_split_without_remote_resources(data, tmp_path):
    executor.run(examples_dir=data["new_company"], **_outs(tmp_path), allow_anomalies=True)
    page = (tmp_path / "report_dir" / "report.html").read_text()

    for remote in ("http://", "https://", "//cdn", "<script", "@import", "xlink", "src="):
        assert remote not in page
    drawn = _charts(page)
    assert sorted(drawn) == sorted(COLUMNS)
    # numeric: a bar per shared bin and split; each split's shares add up to all its values
    fare = drawn["fare"][1]
    groups = {g.get("data-series"): g.findall("rect") for g in fare.iter("g") if g.get("class") == "bars"}
    assert list(groups) == ["train", "eval"] and [len(bars) for bars in groups.values()] == [10, 10]
    for bars in groups.values():
        shares = [float(bar.find("title").text.rsplit(" ", 1)[1].rstrip("%")) for bar in bars]
        assert sum(shares) == pytest.approx(100, abs=0.6)
    # categorical: a bar per value and split; the company only eval has is 10% of eval, none of train
    figure_class, company = drawn["company"]
    assert figure_class == "anomalous"
    titles = _bar_titles(company)
    assert "Zed Cabs (eval): 10.0%" in titles and "Zed Cabs (train): 0.0%" in titles
    assert len(titles) == 2 * 4  # Acme, Blue, City, Zed Cabs
    assert drawn["trips"][0] == ""


def test_report_cuts_a_long_tail_into_an_overflow_bar(tmp_path):
    def rows(n: int, seed: int) -> list[dict]:
        rng = random.Random(seed)
        # nine in ten fares under 20, a few up to 5000: equal bins over the whole range would show one bar
        return [{"trips": rng.randint(0, 9), "fare": rng.uniform(0, 20) if i % 25 else rng.uniform(1000, 5000),
                 "company": rng.choice(COMPANIES), "label": rng.randint(0, 1)} for i in range(n)]

    examples = write_examples(tmp_path / "tail", {"train": rows(400, 1), "eval": rows(200, 2)}, "label", ["0", "1"],
                              COLUMNS)
    executor.run(examples_dir=str(examples), **_outs(tmp_path))

    fare = _charts((tmp_path / "report_dir" / "report.html").read_text())["fare"][1]
    titles = _bar_titles(fare)
    overflow = [t for t in titles if ": > " in t]
    assert [t.split(":")[0] for t in overflow] == ["train", "eval"]
    cut = float(overflow[0].split("> ")[1].split()[0])
    assert 15 < cut < 20  # the 90th percentile of the fares, not 5000
    for t in overflow:  # what lies above it: the top tenth
        assert float(t.rsplit(" ", 1)[1].rstrip("%")) == pytest.approx(10, abs=3)
    assert len(titles) == 2 * 11


def test_the_markdown_report_renders_names_as_written():
    """Names with Markdown's markup characters (trip_start_day, a*b, x|y, <tag>) render as text, not italics, table
    columns or HTML, in a CommonMark + GFM-table renderer (the KFP UI's Markdown viewer reads the same syntax)."""
    from markdown_it import MarkdownIt

    from slipway.components.validate import report

    names = ["trip_start_day", "fare_*_total*", "x|y", "<b>tag</b>", "a`b"]
    ctx = {"splits": {"train": 10, "eval_set": 5}, "examples_dir": "s3://bucket/path_to/examples",
           "schema_source": "inferred", "schema_file": "", "label": "is_big_tipper", "skew": {"fare_total": 0.1},
           "drift": {}, "default_drift": None, "allowed": False,
           "anomalies": [{"split": "eval_set", "feature": names[0], "kind": "drift", "short": "L_inf 0.3 > 0.1",
                          "description": "values of *trip_start_day* drifted"}],
           "features": [{"feature": name, "type": "STRING", "splits": {"train": {"missing": 0.0, "value": "1 unique"}}}
                        for name in names]}
    page = MarkdownIt("commonmark").enable("table").render(report.report_md(ctx))
    assert "<em>" not in page and "<strong>" in page  # only the result line is bold
    cells = re.findall(r"<td>(.*?)</td>", page)
    for name in ["trip_start_day", "fare_*_total*", "x|y", "&lt;b&gt;tag&lt;/b&gt;", "a`b"]:
        assert name in cells, (name, cells)
    assert "values of *trip_start_day* drifted" in cells
    assert "<code>s3://bucket/path_to/examples</code>" in page and "<code>is_big_tipper</code>" in page
    assert "eval_set missing" in re.findall(r"<th[^>]*>(.*?)</th>", page)
