"""validate with beam_pipeline_args computes its statistics with TFDV's Beam transform; on a slice of the taxi sample
they must agree with the in-process fast path: the same features, counts, missing counts, numeric summaries (up to
float rounding), top string values, inferred schema and anomalies."""

from __future__ import annotations

import itertools
import json

import pytest

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS first)
from slipway.components.ingest import executor as ingest
from slipway.components.validate import executor
from slipway.core.errors import SlipwayError
from slipway.core.statistics import generators
from slipway.data import taxi

SLICE_ROWS = 3000  # the taxi sample's first rows: every column type, missing values, ~40 cab companies


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("taxi_slice")
    csv = root / "taxi.csv"
    with open(taxi.taxi_csv(), encoding="utf-8") as sample:
        csv.write_text("".join(itertools.islice(sample, SLICE_ROWS + 1)), encoding="utf-8")  # with the header
    ingest.run(data=str(csv), output_dir=str(root / "examples"), label=taxi.LABEL)
    return str(root / "examples")


def _validate(examples: str, root, beam_pipeline_args) -> dict:
    """The metadata and what validate wrote, in comparable form. Anomalies are allowed: the schema inferred from
    this slice's train split flags eval values it lacks, and both paths must flag the same ones."""
    import tensorflow_data_validation as tfdv

    outs = {name: str(root / name) for name in ("statistics", "schema", "report")}
    meta = executor.run(examples_dir=examples, statistics_dir=outs["statistics"], schema_dir=outs["schema"],
                        report_dir=outs["report"], allow_anomalies=True, beam_pipeline_args=beam_pipeline_args)
    stats = {split: tfdv.load_stats_binary(f"{outs['statistics']}/Split-{split}/FeatureStats.pb").datasets[0]
             for split in meta["splits"]}
    return {
        "meta": meta,
        "outputs": outs,
        "exact": {split: _exact_facts(dataset) for split, dataset in stats.items()},
        "floats": {f"{split}/{key}": value for split, dataset in stats.items()
                   for key, value in _float_facts(dataset).items()},
        "schema": (root / "schema" / "schema.pbtxt").read_text(),
        "anomalies": json.loads((root / "report" / "anomalies.json").read_text()),
    }


def _exact_facts(dataset) -> dict:
    """Per feature: what two runs must count alike."""
    facts = {"num_examples": dataset.num_examples}
    for feature in dataset.features:
        common = feature.num_stats.common_stats if feature.HasField("num_stats") else feature.string_stats.common_stats
        facts[feature.path.step[0]] = {
            "type": feature.type,
            "present": common.num_non_missing,
            "missing": common.num_missing,
            "values": (common.min_num_values, common.max_num_values, common.tot_num_values),
            "numeric": (feature.num_stats.min, feature.num_stats.max, feature.num_stats.num_zeros),
            "unique": feature.string_stats.unique,
            "top": [(v.value, v.frequency) for v in feature.string_stats.top_values],
        }
    return facts


def _float_facts(dataset) -> dict[str, float]:
    """Sums that worker processes may add up in another order (the last bits differ)."""
    facts = {}
    for feature in dataset.features:
        name = feature.path.step[0]
        if feature.HasField("num_stats"):
            facts[f"{name}/mean"] = feature.num_stats.mean
            facts[f"{name}/std_dev"] = feature.num_stats.std_dev
        else:
            facts[f"{name}/avg_length"] = feature.string_stats.avg_length
    return facts


@pytest.fixture(scope="module")
def fast(examples, tmp_path_factory) -> dict:
    result = _validate(examples, tmp_path_factory.mktemp("fast"), None)
    assert (result["meta"]["statistics_path"], result["meta"]["beam"]) == ("in_process", None)
    return result


def _same_as_fast(result: dict, fast: dict) -> None:
    assert result["exact"] == fast["exact"]
    assert result["floats"] == pytest.approx(fast["floats"], rel=1e-9)
    assert result["schema"] == fast["schema"]
    assert result["anomalies"] == fast["anomalies"]
    without_path = {k: v for k, v in result["meta"].items() if k not in ("statistics_path", "beam")}
    assert without_path == {k: v for k, v in fast["meta"].items() if k not in ("statistics_path", "beam")}


def test_beam_statistics_agree_with_the_fast_path(examples, fast, tmp_path, capsys):
    # The slice is what the test means: string features with their top values, missing values, numbers.
    train = fast["exact"]["train"]
    assert train["num_examples"] + fast["exact"]["eval"]["num_examples"] == SLICE_ROWS
    assert train["company"]["unique"] > 20 and train["company"]["missing"] > 0 and train["company"]["top"]
    assert train["fare"]["numeric"][1] > 0

    result = _validate(examples, tmp_path, ["--runner=DirectRunner"])

    assert result["meta"]["statistics_path"] == "beam"
    assert result["meta"]["beam"] == {"runner": "DirectRunner", "workers": 1, "mode": "in_memory", "batch_size": 4096}
    assert "validate statistics of train, eval on Beam DirectRunner in process, 1 worker" in capsys.readouterr().out
    _same_as_fast(result, fast)


def test_portable_runner_statistics_agree_with_the_fast_path(examples, fast, tmp_path, beam_job_endpoint):
    portable = ["--runner=PortableRunner", f"--job_endpoint={beam_job_endpoint}", "--environment_type=LOOPBACK"]
    result = _validate(examples, tmp_path, portable)
    assert result["meta"]["beam"] == {"runner": "PortableRunner", "workers": None, "mode": "", "batch_size": 4096}
    _same_as_fast(result, fast)


def test_statistics_list_features_in_path_order_whatever_order_the_runner_merged_them(examples, fast):
    # Beam's multi-process DirectRunner merges the workers' features in the order they finish; the inferred schema
    # follows the statistics' order, so without sorting schema.pbtxt would differ between runs. (Running that runner
    # here costs 3-4 times the in-process Beam run: each worker process imports TFDV.)
    import tensorflow_data_validation as tfdv

    written = tfdv.load_stats_binary(f"{fast['outputs']['statistics']}/Split-train/FeatureStats.pb")
    stats = written.__class__()
    stats.datasets.add().features.extend(reversed(written.datasets[0].features))  # as a runner might merge them

    settled = generators.settled(stats, "train").datasets[0]
    names = [f.path.step[0] for f in settled.features]
    written = [name for name in fast["exact"]["train"] if name != "num_examples"]
    assert names == written == sorted(written) and len(names) == 18  # pickup_census_tract: empty in the slice


def test_bad_beam_pipeline_args_fail_before_anything_is_written(examples, tmp_path):
    outs = {f"{name}_dir": str(tmp_path / name) for name in ("statistics", "schema", "report")}
    with pytest.raises(SlipwayError, match=r"^beam_pipeline_args\[0\] 'DirectRunner': expected --name=value"):
        executor.run(examples_dir=examples, **outs, beam_pipeline_args=["DirectRunner"])
    with pytest.raises(SlipwayError, match=r"--direct_running_mode=threads: expected one of in_memory"):
        executor.run(examples_dir=examples, **outs, beam_pipeline_args="--direct_running_mode=threads")
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_shard_on_beam_is_an_error_naming_the_examples(tmp_path):
    corrupt = tmp_path / "corrupt"
    (corrupt / "Split-train").mkdir(parents=True)
    (corrupt / "Split-train" / "data.gz").write_bytes(b"this is not gzip")
    outs = {f"{name}_dir": str(tmp_path / name) for name in ("statistics", "schema", "report")}
    with pytest.raises(SlipwayError, match=r"^examples .*corrupt: a shard of train cannot be read \(Error -3 while "
                                           r"decompressing data: incorrect header check\)$"):
        executor.run(examples_dir=str(corrupt), **outs, beam_pipeline_args=["--runner=DirectRunner"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt"]
