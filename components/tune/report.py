"""Views of a tune result (the schema in local.py's docstring, the same from both backends).

trials_html: one self-contained HTML page (inline CSS and SVG, no scripts, nothing fetched) with the objective by
trial as a chart and a row per trial; metrics_for_kfp: the scalar metrics a KFP Metrics artifact shows.
"""

from __future__ import annotations

import html
import json
import math

from slipway.core.charts import lines as chart_lines
from slipway.core.charts import svg as chart_svg

_STATUS_COLOURS = {"Succeeded": "#1b7f3b", "Failed": "#b3261e", "EarlyStopped": "#8a6d00", "Killed": "#666"}


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def _cell(value, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{html.escape(_format(value))}</td>"


def objective_chart(result: dict) -> str:
    """The objective of each trial (in the order trials started) as points coloured by status, the best so far
    among succeeded trials (the ones the search ranks) as a step line, and the goal as a dashed line; "" when no
    trial reported the objective."""
    objective = result.get("objective") or {}
    metric = objective.get("metric") or "objective"
    maximize = objective.get("type") != "minimize"
    trials = result.get("trials") or []
    by_status: dict[str, tuple[list[float], list[float], list[str]]] = {}
    best_xs: list[float] = []
    best_ys: list[float] = []
    best = None
    for number, trial in enumerate(trials, 1):
        value = trial.get("objective")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        status = str(trial.get("status") or "unknown")
        xs, ys, titles = by_status.setdefault(status, ([], [], []))
        xs.append(number)
        ys.append(float(value))
        titles.append(f"{trial.get('name')} ({status}): {metric} {_format(float(value))} with "
                      f"{json.dumps(trial.get('parameters') or {}, sort_keys=True, default=str)}")
        if status == "Succeeded":
            best = value if best is None else (max(best, value) if maximize else min(best, value))
            best_xs.append(number)
            best_ys.append(float(best))
    if not by_status:
        return ""
    series = []
    # Succeeded first, so it takes the palette's first colour in every report.
    for status in sorted(by_status, key=lambda s: (s != "Succeeded", s)):
        xs, ys, titles = by_status[status]
        series.append(chart_lines.Series(f"{status} trial", xs, ys, style="points", point_titles=titles))
    if best_xs:
        # The line runs on to the last trial: the best so far holds until the search ends.
        series.append(chart_lines.Series("best so far", [*best_xs, len(trials)], [*best_ys, best_ys[-1]], style="step"))
    goal = objective.get("goal")
    if isinstance(goal, int | float) and not isinstance(goal, bool) and math.isfinite(goal):
        series.append(chart_lines.Series(f"goal {_format(float(goal))}", [0.5, len(trials) + 0.5], [goal, goal],
                                         dashed=True, colour=chart_svg.MUTED))
    direction = "higher is better" if maximize else "lower is better"
    return chart_lines.line_chart(f"{metric} by trial ({direction})", series, x_label="trial (in start order)",
                                  y_label=metric, x_range=(0.5, len(trials) + 0.5), integer_x=True, width=640,
                                  height=320)


def trials_html(result: dict) -> str:
    """The objective by trial (objective_chart), then a table of every trial: parameters, status, objective, other
    metrics, seconds; the best highlighted."""
    objective = result.get("objective") or {}
    metric = objective.get("metric") or "objective"
    trials = result.get("trials") or []
    parameters: list[str] = []
    metrics: list[str] = []
    for trial in trials:
        for name in trial.get("parameters") or {}:
            if name not in parameters:
                parameters.append(name)
        for name in trial.get("metrics") or {}:
            if name not in metrics and name != metric:
                metrics.append(name)
    best = result.get("trial")
    counts = result.get("counts") or {}
    # <wbr>: long metric names may break after an underscore, so many columns still fit a window.
    head = "".join(f"<th>{html.escape(h).replace('_', '_<wbr>')}</th>" for h in
                   ["trial", *parameters, "status", f"{metric} ({objective.get('type', '')})", *metrics,
                    "seconds", "reason"])
    rows = []
    for trial in trials:
        status = trial.get("status", "")
        cells = [_cell(trial.get("name"))]
        cells += [_cell((trial.get("parameters") or {}).get(name)) for name in parameters]
        colour = _STATUS_COLOURS.get(status, "#000")
        cells.append(f'<td style="color:{colour}">{html.escape(status)}</td>')
        cells.append(_cell(trial.get("objective"), "objective"))
        cells += [_cell((trial.get("metrics") or {}).get(name)) for name in metrics]
        cells += [_cell(trial.get("seconds")), _cell(trial.get("reason"))]
        cls = ' class="best"' if best and trial.get("name") == best else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    summary = (
        f"{html.escape(str(result.get('backend', '')))} search, algorithm {html.escape(str(result.get('algorithm')))}"
        f": best {html.escape(metric)} = {html.escape(_format(objective.get('value')))}"
        f" ({html.escape(str(best or 'none'))})"
        + (f", goal {html.escape(_format(objective.get('goal')))}"
           f" {'reached' if result.get('goal_reached') else 'not reached'}" if objective.get("goal") is not None
           else "")
        + f"; {counts.get('succeeded', 0)} succeeded, {counts.get('failed', 0)} failed, "
        f"{counts.get('early_stopped', 0)} early stopped"
        + (f", {counts['killed']} killed" if counts.get("killed") else "")
    )
    error = f'<p class="error">{html.escape(result["error"])}</p>' if result.get("error") else ""
    chart = objective_chart(result)
    figure = f'<figure class="objective">{chart}</figure>' if chart else ""
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Tuning trials</title><style>"
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:13px}"
        "th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f2f2f2}"
        "td{white-space:nowrap}td:last-child{white-space:normal}"
        "td:first-child,td:last-child{text-align:left}tr.best{background:#dff5e1;font-weight:bold}"
        ".error{color:#b3261e}figure{margin:0 0 1em}svg.chart{display:block;max-width:100%;height:auto}"
        "</style></head><body>\n"
        f"<h1>Tuning trials</h1><p>{summary}</p>{error}\n{figure}\n<table><thead><tr>{head}</tr></thead><tbody>\n"
        + "\n".join(rows)
        + "\n</tbody></table></body></html>\n"
    )


def metrics_for_kfp(result: dict) -> dict[str, float]:
    """Scalars for a KFP Metrics artifact: best_<metric>, trial counts and goal_reached (1.0 / 0.0)."""
    objective = result.get("objective") or {}
    counts = result.get("counts") or {}
    out: dict[str, float] = {}
    value = objective.get("value")
    if isinstance(value, int | float) and math.isfinite(value):
        out[f"best_{objective.get('metric') or 'objective'}"] = float(value)
    out["trials"] = float(len(result.get("trials") or []))
    for key in ("succeeded", "failed", "early_stopped", "killed"):
        out[f"trials_{key}"] = float(counts.get(key, 0))
    out["goal_reached"] = 1.0 if result.get("goal_reached") else 0.0
    return out
