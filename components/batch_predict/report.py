"""batch_predict's summary for the KFP UI (a Markdown artifact) and beside `slipway score`'s output: rows scored
and refused per reason with the first refused rows, the model (version, blessing, the metrics it was trained to),
the files read and the outputs written."""

from __future__ import annotations

REASON_WORDS = {
    "missing_column": "a model input's column is missing (too few cells)",
    "missing_value": "a value every training row had is empty",
    "refused_value": "a value the model's input type refuses",
    "malformed_row": "more cells than the header",
    "model_error": "the model refused the row",
}
SOURCES_SHOWN = 10


def markdown(result: dict, meta: dict) -> str:
    """The summary of one batch_predict run (result: executor.run's record; meta: the model's model_meta.json)."""
    lines = ["# Batch predictions", "", _headline(result), ""]
    if result["refused"]:
        lines += ["## Refused rows", "", "| reason | rows | what it means | first rows |", "|---|---:|---|---|"]
        for reason, count in sorted(result["refused"].items(), key=lambda kv: (-kv[1], kv[0])):
            first = "<br>".join(f"{_file(p)} row {row}: {_cell(message)}"
                                for p, row, message in result["refused_examples"].get(reason, []))
            lines.append(f"| `{reason}` | {count:,} | {REASON_WORDS.get(reason, '')} | {first} |")
        lines.append("")
    lines += _check_lines(result.get("data_check") or {})
    lines += _model_lines(result["model"], meta)
    lines += ["## Data", ""] + [f"- `{s['path']}` ({s['format']}{', split ' + s['split'] if s['split'] else ''})"
                                for s in result["sources"][:SOURCES_SHOWN]]
    if len(result["sources"]) > SOURCES_SHOWN:
        lines.append(f"- ... and {len(result['sources']) - SOURCES_SHOWN} more")
    lines += ["", "## Output", "", f"- format: {result['output_format']}",
              f"- columns: {', '.join(f'`{c}`' for c in result['columns'])}",
              f"- Beam: {result['beam']}; {result['seconds']:.1f} s, {result['rows_per_second']:,.0f} rows/s", ""]
    return "\n".join(lines)


def data_check_line(check: dict) -> str:
    """The data check in one line (the summary's and `slipway score`'s)."""
    status = check.get("status")
    if status == "off":
        return "data check: off"
    if status == "skipped":
        return f"data check: skipped ({check.get('reason')})"
    anomalies = check.get("anomalies") or []
    if not anomalies:
        return "data check: no anomalies against the training data"
    features = sorted({a["feature"] or "dataset" for a in anomalies})
    return f"data check: {len(anomalies)} anomalies against the training data ({', '.join(features)})"


def _check_lines(check: dict) -> list[str]:
    lines = ["## Data check", "", data_check_line(check), ""]
    if check.get("anomalies"):
        lines += ["| feature | kind | anomaly | description |", "|---|---|---|---|"]
        lines += [f"| {a['feature'] or '(dataset)'} | {a['kind']} | {_cell(a['short'])} | {_cell(a['description'])} |"
                  for a in check["anomalies"]]
        lines.append("")
    if check.get("schema"):
        lines += [f"Against `{check['schema']}` and the train split of `{check['statistics']}` (drift thresholds "
                  f"{check.get('drift') or 'none'}, skew thresholds {check.get('skew') or 'none'}, default drift "
                  f"{check.get('default_drift') if check.get('default_drift') is not None else 'none'}).", ""]
    return lines


def _headline(result: dict) -> str:
    model = result["model"]
    version = f" v{model['version']}" if model["version"] is not None else ""
    return (f"**{result['rows_scored']:,} rows scored**, {result['rows_refused']:,} refused, of "
            f"{result['rows_read']:,} read · model `{model['name']}`{version} · blessing: {model['blessing']}")


def _model_lines(model: dict, meta: dict) -> list[str]:
    lines = ["## Model", "", f"- SavedModel: `{model['path']}`", f"- task: {model['task']}"
             + (f", classes {', '.join(model['classes'])}" if model["classes"] else ""),
             f"- blessing: {model['blessing']} ({model['blessing_reason']})"]
    if model["trained_from"]:
        lines.append(f"- trained as: `{model['trained_from']}`")
    for title, metrics in (("evaluate's metric (the blessing's)", model.get("evaluation_metrics") or {}),
                           ("training metric", meta.get("final_metrics") or {})):
        shown = [(name, value) for name, value in sorted(metrics.items()) if isinstance(value, int | float)]
        if shown:
            lines += ["", f"| {title} | value |", "|---|---:|"] + [f"| {n} | {v:.4g} |" for n, v in shown]
    return lines + [""]


def _file(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:200]
