"""numeric_drift on TFDV's own statistics of synthetic training data: a fresh sample of the same distribution scores
near 0 (heavy-tailed and discrete features alike), a tripled heavy-tailed feature and a shifted discrete one score
far above, and the anomaly rows follow the thresholds."""

import numpy as np
import pyarrow as pa
import pytest

from slipway.core.statistics import generators, numeric_drift

ROWS = 20_000


def _sample(seed: int, rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"miles": np.round(rng.lognormal(0.5, 1.2, rows), 1),  # a long tail: a few trips of hundreds of miles
            "month": rng.integers(1, 13, rows).astype(float)}  # 12 discrete values over 10 deciles


def _statistics(values: dict[str, np.ndarray]):
    offsets = pa.array(np.arange(len(values["miles"]) + 1, dtype=np.int32))
    batch = pa.RecordBatch.from_arrays([pa.ListArray.from_arrays(offsets, pa.array(v)) for v in values.values()],
                                       list(values))
    return generators.statistics_of([batch], generators.stats_options(None), "train")


def _feature(statistics, name: str):
    return next(f for f in statistics.datasets[0].features if ".".join(f.path.step) == name)


@pytest.fixture(scope="module")
def training():
    return _statistics(_sample(0, ROWS))


def test_a_sample_of_the_training_distribution_scores_near_zero_and_a_shift_far_above(training):
    fresh = _sample(1, 2000)
    for name in ("miles", "month"):
        buckets = numeric_drift.training_buckets(_feature(training, name))
        assert numeric_drift.divergence(*buckets, fresh[name]) < 0.005, name
    miles = numeric_drift.training_buckets(_feature(training, "miles"))
    assert numeric_drift.divergence(*miles, fresh["miles"] * 3) > 0.1
    month = numeric_drift.training_buckets(_feature(training, "month"))
    assert numeric_drift.divergence(*month, np.minimum(fresh["month"] + 3, 12)) > 0.1
    assert numeric_drift.divergence(*month, np.array([np.nan])) == 0.0  # no values: nothing to judge
    assert numeric_drift.divergence(*month, np.full(100, 99.0)) == pytest.approx(1.0)  # all above the maximum


def test_anomalies_follow_the_thresholds_and_name_the_kind(training):
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name in ("miles", "month"):
        schema.feature.add(name=name, type=schema_pb2.FLOAT)
    shifted = {"miles": _sample(2, 2000)["miles"] * 3, "month": _sample(2, 2000)["month"]}
    found, measured = numeric_drift.anomalies(schema, training, shifted, "served",
                                              {"miles": (("drift", 0.05), ("skew", 0.9)), "month": (("drift", 0.05),)})
    assert set(measured) == {"miles", "month"} and measured["miles"] > 0.1 > measured["month"]
    assert [(a["feature"], a["kind"], a["split"]) for a in found] == [("miles", "drift", "served")]
    assert "above the threshold 0.05" in found[0]["description"]
