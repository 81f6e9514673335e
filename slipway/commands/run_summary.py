"""What `slipway run` prints once the steps finished, from summary.json's content."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def print_summary(summary: dict, workdir: Path) -> None:
    """The run's lines after the steps' own: status, each step, metrics, blessing, model, deployment, reports."""
    print()
    print(f"run {summary['run_id']}: {summary['status']} in {summary['wall_seconds']:.1f} s")
    width = max(map(len, summary["steps"]), default=10)
    for name, step in summary["steps"].items():
        seconds = f"{step['seconds']:7.1f} s" if "seconds" in step else "         "
        print(f"  {name:<{width}} {step['status']:<11} {seconds}  {step.get('error', '')}")
    if summary["metrics"]:
        from slipway.components.evaluate.report import PERCENT_METRICS

        shown = ", ".join(f"{k}={v:.2f}%" if k in PERCENT_METRICS else f"{k}={v:.4f}"
                          for k, v in sorted(summary["metrics"].items()) if isinstance(v, float))
        print(f"  metrics: {shown}")
    for name, why in (summary.get("metrics_left_out") or {}).items():
        print(f"  {name}: {why}")
    if "evaluate" in summary["steps"]:
        print(f"  blessed: {summary['blessed']} ({summary.get('blessing_message') or 'no evaluation'})")
    _print_predictions(summary.get("predictions"))
    _print_baseline(summary)
    if summary.get("model"):
        print(f"  model:   {summary['model']}")
    _print_deployment(summary.get("deployment"), summary.get("model"))
    for name, path in (summary.get("reports") or {}).items():
        print(f"  report:  {name} {path}")
    print(f"  summary: {workdir / 'summary.json'}")
    print(f"  logs:    {summary.get('logs')}")
    print(f"  lineage: {summary['lineage_store']}  (slipway lineage --workdir {workdir})")
    if summary["status"] == "interrupted":
        print(f"error: {summary['error']}; summary.json written, no process left running", file=sys.stderr)
    elif summary["status"] != "succeeded" and summary.get("error"):
        failed = next((s for s in summary["steps"].values() if s["status"] == "failed" and s.get("log")), None)
        where = f" (log: {failed['log']})" if failed else ""
        print(f"error: {summary['error']}{where}", file=sys.stderr)


def _print_predictions(predictions: dict | None) -> None:
    """The scoring pipeline's batch_predict: rows scored and refused, with which model, where."""
    if not predictions:
        return
    refused = predictions.get("refused") or {}
    why = f" ({', '.join(f'{n:,} {r}' for r, n in sorted(refused.items()))})" if refused else ""
    print(f"  scored:  {predictions.get('rows_scored') or 0:,} rows, refused {predictions.get('rows_refused') or 0:,}"
          f"{why} with {predictions.get('model')} (blessing: {predictions.get('blessing')})")
    print(f"  predictions: {predictions.get('uri')}")


def _print_baseline(summary: dict) -> None:
    """Which model the run was compared with, and how the metrics moved."""
    baseline = summary.get("baseline")
    if not baseline:
        return
    print(f"  baseline: {baseline['reason']}")
    before = summary.get("baseline_metrics") or {}
    deltas = [f"{name} {before[name]:.4f} -> {value:.4f} ({value - before[name]:+.4f})"
              for name, value in sorted(summary["metrics"].items())
              if isinstance(value, float) and isinstance(before.get(name), float) and name != "example_count"]
    if deltas:
        print(f"  vs baseline: {', '.join(deltas)}")


def _class_names(model: str | None) -> list[str]:
    """The classifier's class names from train's model_meta.json beside the model (the names predict shows)."""
    from slipway.serving import client

    meta = Path(model or "", "model_meta.json")
    try:
        labels = json.loads(meta.read_text()) if model and meta.is_file() else {}
    except (OSError, ValueError):
        return []
    return client.class_names({"labels": labels})


def _print_deployment(deployment: dict | None, model: str | None) -> None:
    if not deployment:
        return
    if not deployment.get("endpoint"):
        print(f"  deploy:  {deployment.get('status')}: {deployment.get('reason', '')}")
        return
    state = "serving" if deployment.get("serving") else "served for the smoke request, then stopped"
    print(f"  deploy:  {deployment['model_name']} version {deployment['model_version']} {deployment['status']} at "
          f"{deployment['endpoint']} ({state})")
    if deployment.get("prediction") is not None:
        from slipway.serving import client

        shown = client.shown_prediction(deployment["prediction"], _class_names(model)).replace("\t", "  ")
        print(f"  prediction for the first eval row: {shown}")  # as `slipway predict` shows it
    if deployment.get("serving"):
        print(f"  try:     curl -s {deployment['predict_url']} -d @rows.json   (or: slipway predict "
              f"{deployment['endpoint']} rows.csv --name {deployment['model_name']})")
