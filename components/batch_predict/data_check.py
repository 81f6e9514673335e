"""batch_predict's data check: its modes and its one-line failure. The check itself (the scored rows' TFDV
statistics against the schema and the train statistics validate recorded upstream of the model, found through
lineage, with validate's comparators) is core/statistics/training_data.py, which monitor shares."""

from __future__ import annotations

OFF, WARN, FAIL = "off", "warn", "fail"
MODES = (OFF, WARN, FAIL)
SCORING_SPLIT = "scoring"  # the new data's name in the comparison (validate's other splits are eval, ...)
ANOMALIES_IN_MESSAGE = 6


def failure_line(anomalies: list[dict], model: str) -> str:
    """The one line a failing check raises: the anomalies (the first few spelled out)."""
    shown = "; ".join(f"{a['feature'] or 'dataset'}: {a['kind']} {a['short']}"
                      for a in anomalies[:ANOMALIES_IN_MESSAGE])
    more = f" (and {len(anomalies) - ANOMALIES_IN_MESSAGE} more)" if len(anomalies) > ANOMALIES_IN_MESSAGE else ""
    return (f"data_check fail: {len(anomalies)} anomalies in the rows against the training data of model {model}: "
            f"{shown}{more}")
