"""scikit-learn's diabetes data as a CSV with a header: the regression sample.

442 patients, ten baseline measurements (age, sex, body mass index, blood pressure, six blood serum values; raw,
not scikit-learn's scaled copy) and the label `progression`, a quantitative measure of disease progression one
year later (integers 25..346, 214 distinct values: ingest's task rule reads it as regression). Written once into
the Slipway cache from the files scikit-learn ships (no network) and checked by its sha256.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from slipway.core.artifacts import sha256_file
from slipway.core.errors import SlipwayError
from slipway.data.taxi import cache_dir

LABEL = "progression"
FEATURES = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")
ROWS = 442
# Of the CSV written from scikit-learn 1.9.1's diabetes_data_raw.csv.gz and diabetes_target.csv.gz.
SHA256 = "9193026b7622ff944f0a6855a10107b24caf50dad69787c46e6890e69c27faca"


def diabetes_csv() -> Path:
    """Path of the cached diabetes CSV (features and the progression label), written on first use."""
    target = cache_dir() / "data" / "diabetes" / "diabetes.csv"
    if target.exists() and sha256_file(target) == SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=".diabetes.", suffix=".csv", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(csv_text())
        if sha256_file(staging) != SHA256:
            raise SlipwayError("sample data: the diabetes CSV written from scikit-learn has an unexpected sha256 "
                               "(not the locked scikit-learn?)")
        os.replace(staging, target)  # whole or not at all, also with two processes writing it at once
    finally:
        Path(staging).unlink(missing_ok=True)
    return target


def csv_text() -> str:
    """The CSV: a header line, then one line per patient; whole numbers written without a decimal point."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    lines = [",".join((*FEATURES, LABEL))]
    for features, target in zip(data.data, data.target, strict=True):
        lines.append(",".join(_number(float(v)) for v in (*features, target)))
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)
