"""The worked taxi module (pipelines/modules/taxi.py) runs through transform and train on synthetic rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import slipway  # noqa: F401
from slipway.components.train import executor as train
from slipway.components.transform import executor as transform
from slipway.core.artifacts import SCHEMA_FILE
from tests.support.inputs import example_from_row, write_examples

TAXI_MODULE = Path(__file__).resolve().parents[2] / "pipelines" / "modules" / "taxi.py"
LABEL = "big_tipper"
# Columns that are always present in the synthetic data (FixedLen); the rest are sometimes missing (VarLen).
ALWAYS = {
    "fare": "float",
    "trip_start_month": "int",
    "trip_start_hour": "int",
    "trip_start_day": "int",
    "trip_start_timestamp": "int",
    "trip_miles": "float",
    "payment_type": "string",
    "tips": "float",
    LABEL: "int",
}
SOMETIMES = {
    "pickup_community_area": "int",
    "dropoff_community_area": "int",
    "pickup_latitude": "float",
    "pickup_longitude": "float",
    "dropoff_latitude": "float",
    "dropoff_longitude": "float",
    "pickup_census_tract": "int",
    "dropoff_census_tract": "int",
    "company": "string",
    "trip_seconds": "int",
}


def taxi_rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        payment = rng.choice(["Credit Card", "Credit Card", "Cash", "Cash", "No Charge", "Unknown"])
        fare = round(rng.uniform(3, 50), 2)
        big = int(payment == "Credit Card" and rng.random() < 0.8)
        tips = round(fare * (0.25 if big else 0.0), 2)

        def maybe(value, p=0.2):
            return None if rng.random() < p else value

        rows.append(
            {
                "fare": fare,
                "trip_start_month": rng.randint(1, 12),
                "trip_start_hour": rng.randint(0, 23),
                "trip_start_day": rng.randint(1, 7),
                "trip_start_timestamp": 1_400_000_000 + rng.randint(0, 10**7),
                "trip_miles": round(fare / 3, 2),
                "payment_type": payment,
                "tips": tips,
                LABEL: big,
                "pickup_community_area": maybe(rng.randint(1, 77)),
                "dropoff_community_area": maybe(rng.randint(1, 77)),
                "pickup_latitude": maybe(41.8 + rng.random() / 5),
                "pickup_longitude": maybe(-87.7 + rng.random() / 5),
                "dropoff_latitude": maybe(41.8 + rng.random() / 5),
                "dropoff_longitude": maybe(-87.7 + rng.random() / 5),
                "pickup_census_tract": maybe(17031000000 + rng.randint(0, 999999), 0.5),
                "dropoff_census_tract": maybe(17031000000 + rng.randint(0, 999999), 0.5),
                "company": maybe(rng.choice(["Flash Cab", "Taxi Affiliation Services", "Dispatch Taxi"])),
                "trip_seconds": maybe(int(fare * 40), 0.05),
            }
        )
    return rows


def _schema(folder: Path) -> Path:
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorflow_transform.tf_metadata import schema_utils

    dtypes = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    spec = {name: tf.io.FixedLenFeature([], dtypes[kind]) for name, kind in ALWAYS.items()}
    spec.update({name: tf.io.VarLenFeature(dtypes[kind]) for name, kind in SOMETIMES.items()})
    folder.mkdir(parents=True)
    (folder / SCHEMA_FILE).write_text(text_format.MessageToString(schema_utils.schema_from_feature_spec(spec)))
    return folder


@pytest.fixture(scope="module")
def taxi_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("taxi")
    write_examples(
        root / "examples",
        {"train": taxi_rows(300, 1), "eval": taxi_rows(100, 2)},
        LABEL,
        ["0", "1"],
        {**ALWAYS, **SOMETIMES},
    )
    t = transform.run(
        examples_dir=str(root / "examples"),
        schema_dir=str(_schema(root / "schema")),
        module_file=str(TAXI_MODULE),
        transform_graph_dir=str(root / "graph"),
        transformed_examples_dir=str(root / "transformed"),
    )
    r = train.run(transformed_examples_dir=str(root / "transformed"), transform_graph_dir=str(root / "graph"),
                  module_file=str(TAXI_MODULE), model_dir=str(root / "model"), tensorboard_dir=str(root / "tb"),
                  hyperparameters={"epochs": 4, "batch_size": 32})
    return root, t, r


def test_taxi_transform_features(taxi_run):
    _, t, _ = taxi_run
    assert t["splits"] == {"train": 300, "eval": 100}
    assert "tips" in t["raw_features"]
    assert not any(name.startswith("tips") for name in t["transformed_features"])  # the leak stays out
    assert {
        "fare_xf",
        "payment_type_xf",
        "company_xf",
        "pickup_latitude_xf",
        "trip_start_hour_xf",
        "pickup_census_tract_xf",
        LABEL,
    } <= set(t["transformed_features"])


def test_taxi_model_learns_and_serves(taxi_run):
    root, _, r = taxi_run
    assert r["metrics"]["val_auc"] > 0.75, r["metrics"]  # payment_type separates the synthetic classes
    meta = json.loads((root / "model" / "model_meta.json").read_text())
    assert meta["hyperparameters"]["hidden_units"] == [64, 32]  # from the module's hyperparameters()
    assert "tips" not in meta["raw_features"] and "fare" in meta["raw_features"]

    import tensorflow as tf

    rows = taxi_rows(6, 9)
    for row in rows:
        row.pop(LABEL)
        row.pop("tips")
    # Every sometimes-missing feature absent, an unseen category; tips (unused by the transform) not sent.
    rows[0] = {name: value for name, value in rows[0].items() if name not in SOMETIMES}
    rows[0]["payment_type"] = "Bitcoin"
    serve = tf.saved_model.load(str(root / "model")).signatures["serving_default"]
    probs = serve(examples=tf.constant([example_from_row(row).SerializeToString() for row in rows]))["outputs"]
    probs = probs.numpy()
    assert probs.shape == (6, 1)
    assert np.all((probs >= 0) & (probs <= 1))


def test_taxi_eval_settings():
    from slipway.core.modules import load_module

    module = load_module(TAXI_MODULE, required=("preprocessing_fn", "build_keras_model", "eval_settings"))
    settings = module.eval_settings()
    assert settings["slices"] == [["trip_start_hour"]]
    assert settings["thresholds"]["auc"]["lower_bound"] == 0.7
