"""Evaluate: score a trained model on one split with TensorFlow Model Analysis and decide whether to bless it.

Plain Python (no kfp import). Follows the TFX Evaluator: value thresholds always apply, change thresholds apply
only against a baseline model ("rubber stamp" without one), and with no thresholds configured at all the model is
never blessed. See README.md in this folder for the settings format and the files written.

settings (all keys optional):

    {
      "slices": [["feature"], ["f1", "f2"]],          # feature slices in addition to the overall slice
      "thresholds": {
        "<metric name>": {
          "lower_bound": 0.8,                          # value threshold: metric >= lower_bound
          "upper_bound": 1.0,                          # value threshold: metric <= upper_bound
          "change": {                                  # change threshold against the baseline model
            "direction": "higher_is_better",           # or "lower_is_better" (the default for error metrics)
            "absolute": -0.01,                         # candidate - baseline >= absolute (<= for lower_is_better)
            "relative": -0.05                          # (candidate - baseline) / baseline >= relative
          }
        }
      }
    }

Thresholds gate the overall slice; feature slices are measured and reported, not gated.

This module runs the step; beside it: inputs.py (the examples and models checked), eval_settings.py (the settings
parsed), tfma_config.py (what TFMA computes), tfma_run.py (the Beam pipeline), tfma_results.py (TFMA's output read
back), blessing.py (the decision) and report.py (the HTML page).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before tensorflow is imported)
from slipway.components.evaluate import (
    blessing,
    eval_settings,
    inputs,
    predictions,
    report,
    tfma_config,
    tfma_results,
    tfma_run,
)
from slipway.components.evaluate.report import PERCENT_METRICS
from slipway.core import beam as beam_options
from slipway.core import progress
from slipway.core.artifacts import split_dir, staged_output, write_json
from slipway.core.beam import storage as beam_storage
from slipway.core.errors import option_name
from slipway.core.json_text import json_object
from slipway.core.storage import is_object_store, local_copy
from slipway.core.tasks import CLASSIFICATION


def settings_of(settings: str | Mapping[str, Any] | None, module_file: str = "") -> dict:
    """The evaluation settings a step runs with: its `settings` (JSON text, or a mapping a Python caller passed) when
    given, else the module file's eval_settings() (optional), else none."""
    if settings:
        return json_object("settings", settings)
    if module_file:
        from slipway.core.modules import load_module, optional_dict

        return optional_dict(load_module(module_file), "eval_settings")
    return {}


def run(
    *,
    model_dir: str,
    examples_dir: str,
    evaluation_dir: str,
    blessing_dir: str,
    module_file: str = "",
    settings: str | Mapping[str, Any] | None = "",
    baseline_model: str = "",
    split: str = "eval",
    beam_pipeline_args: Sequence[str] | str | None = None,
) -> dict:
    """Evaluate `model_dir` on `split` of `examples_dir`; write the evaluation and the blessing.

    Writes evaluation_dir/{tfma/, metrics.json, report.html} and blessing_dir/{BLESSED|NOT_BLESSED, blessing.json},
    each folder staged and renamed only when complete. Returns a summary dict (see README.md).
    settings: JSON text (the component's parameter) or a mapping; empty takes module_file's eval_settings() when
    there is a module file (settings_of).
    baseline_model: a local SavedModel folder, or an object-store URI (s3://, or KFP's minio://: what
    resolve_baseline finds on a cluster), copied to the step's scratch space first and reported by its URI.
    beam_pipeline_args: Beam options as TFX takes them (a list, a JSON list or one shell-quoted string); empty
    picks in-process or one worker process per core by the split's row count (slipway.core.beam).
    """
    settings = settings_of(settings, module_file)
    if baseline_model and is_object_store(baseline_model):
        with local_copy(baseline_model, option_name("baseline_model")) as copy:
            return _evaluate(model_dir, examples_dir, evaluation_dir, blessing_dir, settings, baseline_model,
                             str(copy), split, beam_pipeline_args)
    return _evaluate(model_dir, examples_dir, evaluation_dir, blessing_dir, settings, baseline_model,
                     baseline_model, split, beam_pipeline_args)


def _evaluate(model_dir: str, examples_dir: str, evaluation_dir: str, blessing_dir: str, settings: dict | None,
              baseline_model_dir: str, baseline_read: str, split: str,
              beam_pipeline_args: Sequence[str] | str | None) -> dict:
    """run()'s work; the baseline is read from baseline_read and reported as baseline_model_dir."""
    settings = dict(settings or {})
    eval_settings.check_keys(settings)
    examples = inputs.read_examples(examples_dir, split)
    inputs.check_model(model_dir, "model", examples)
    if baseline_read:
        inputs.check_model(baseline_read, "baseline model", examples)

    metrics, plot_names = tfma_config.metrics_for(examples.task, examples.binary)
    thresholds = eval_settings.parse_thresholds(settings.get("thresholds") or {}, [name for _, name in metrics])
    slices = eval_settings.parse_slices(settings.get("slices") or [], examples.meta.get("columns") or {},
                                        examples_dir, examples.label)
    has_baseline = bool(baseline_read)
    rows = (examples.meta.get("splits") or {}).get(split)
    beam_choice = beam_options.choose("evaluate", beam_pipeline_args, int(rows) if rows is not None else None)

    with staged_output(evaluation_dir) as eval_stage, staged_output(blessing_dir) as bless_stage:
        tfma_dir = eval_stage / "tfma"
        eval_config = tfma_config.eval_config(examples.label, metrics, plot_names, thresholds, slices, has_baseline)
        progress.say(f"evaluate computing metrics on {split} for {len(slices) + 1} slice specs with TFMA"
                     + (" against the baseline" if has_baseline else "") + f" on {beam_choice.describe()}")
        with beam_storage.WorkerPaths(beam_choice, "evaluate") as paths:
            written = paths.output(tfma_dir, "tfma")
            tfma_run.run_tfma(eval_config, paths.folder(model_dir), baseline_read and paths.folder(baseline_read),
                              [paths.file(f, examples_dir) for f in examples.files], written,
                              split_dir(examples_dir, split), beam_choice.args, model_dir)
            paths.collect(written, tfma_dir)

        results = tfma_results.read(tfma_dir, has_baseline, examples.task == CLASSIFICATION, examples.classes,
                                    examples.binary)
        left_out = _leave_out_percentages(examples.meta, results)
        verdict = blessing.judge(thresholds, has_baseline, results.validation, len(results.per_slice))
        write_json(eval_stage / "metrics.json",
                   {**_metrics_json(split, model_dir, baseline_model_dir, examples, results), "left_out": left_out})
        decision = verdict.decision(model_dir, baseline_model_dir, results.overall)
        sample = (predictions.sample_predictions(model_dir, examples.files, examples.label)
                  if examples.task != CLASSIFICATION else None)
        (eval_stage / "report.html").write_text(
            report.report_html(split, model_dir, baseline_model_dir, results.per_slice, verdict.rows, decision,
                               confusion=results.confusion, roc=results.roc, pr=results.pr, left_out=left_out,
                               predictions=sample),
            encoding="utf-8",
        )
        (bless_stage / ("BLESSED" if verdict.blessed else "NOT_BLESSED")).touch()
        write_json(bless_stage / "blessing.json", decision)

    return {
        "blessed": verdict.blessed,
        "message": verdict.message,
        "task": examples.task,
        "metrics": results.overall,
        "slices": len(results.per_slice),
        "left_out": left_out,
        "confusion_matrix": results.confusion,
        "roc": results.roc,
        "beam": beam_choice.facts(),
    }


def _leave_out_percentages(meta: dict, results: tfma_results.Results) -> dict[str, str]:
    """{metric: why} for the percentage metrics left out of the reported numbers: a mean absolute percentage
    error over labels that cross zero divides by labels at or near zero, so it means little. A threshold on it is
    still judged (TFMA's validation); only what is shown leaves it out."""
    stats = meta.get("label_stats") or {}
    low, high = stats.get("min"), stats.get("max")
    if not isinstance(low, int | float) or not isinstance(high, int | float) or not low <= 0 <= high:
        return {}
    why = (f"left out: the labels cross zero (min {low:g}, max {high:g}), so a percentage of the label means "
           f"little; see mean_absolute_error")
    left_out = {}
    for name in PERCENT_METRICS:
        for entry in results.per_slice.values():
            for part in ("metrics", "baseline_metrics", "diff"):
                if name in (entry.get(part) or {}):
                    entry[part].pop(name)
                    left_out[name] = why
    return left_out


def _metrics_json(split: str, model_dir: str, baseline_model_dir: str, examples: inputs.Examples,
                  results: tfma_results.Results) -> dict:
    """metrics.json's content: the overall metrics (and the baseline's), every slice's, the confusion matrix and
    the ROC curve."""
    per_slice = results.per_slice
    return {
        "split": split,
        "model": model_dir,
        "baseline_model": baseline_model_dir or None,
        "label": examples.label,
        "task": examples.task,
        "label_classes": examples.classes,
        "overall": results.overall,
        "baseline_overall": per_slice.get("Overall", {}).get("baseline_metrics"),
        "slices": [
            {"slice": name, **{k: v for k, v in entry.items() if k != "key"}} for name, entry in per_slice.items()
        ],
        "confusion_matrix": results.confusion,
        "roc": results.roc,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: executor.py MODEL EXAMPLES EVALUATION BLESSING [SETTINGS_JSON] [BASELINE] [SPLIT]."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4:
        print(main.__doc__, file=sys.stderr)
        return 2
    result = run(model_dir=args[0], examples_dir=args[1], evaluation_dir=args[2], blessing_dir=args[3],
                 settings=args[4] if len(args) > 4 else "", baseline_model=args[5] if len(args) > 5 else "",
                 split=args[6] if len(args) > 6 else "eval")
    print(json.dumps({k: result[k] for k in ("blessed", "message", "metrics", "slices")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
