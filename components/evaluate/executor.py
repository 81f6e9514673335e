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
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import slipway  # noqa: F401  (sets TF_USE_LEGACY_KERAS before tensorflow is imported)
from slipway.components.evaluate import report
from slipway.core import beam as beam_options
from slipway.core import beam_storage, progress, storage
from slipway.core.artifacts import examples_meta, read_json, split_dir, split_files, staged_output, write_json
from slipway.core.errors import SlipwayError, option_name
from slipway.core.storage import is_object_store, local_copy
from slipway.core.tasks import CLASSIFICATION, REGRESSION, task_of
from slipway.core.tensorflow_setup import leave_keras_unconverted

MODEL_META = "model_meta.json"
SIGNATURE = "serving_default"
CANDIDATE = "candidate"
BASELINE = "baseline"
ROC_MAX_POINTS = 101
SETTINGS_KEYS = {"slices", "thresholds"}
THRESHOLD_KEYS = {"lower_bound", "upper_bound", "change"}
CHANGE_KEYS = {"direction", "absolute", "relative"}
DIRECTIONS = {"higher_is_better", "lower_is_better"}

# (TFMA class name, metric name it reports) per problem type; plots are listed apart (no thresholds on plots).
BINARY_METRICS = [
    ("ExampleCount", "example_count"),
    ("BinaryAccuracy", "binary_accuracy"),
    ("AUC", "auc"),
    ("AUCPrecisionRecall", "auc_precision_recall"),
    ("Precision", "precision"),
    ("Recall", "recall"),
]
BINARY_PLOTS = ["ConfusionMatrixPlot"]
MULTICLASS_METRICS = [
    ("ExampleCount", "example_count"),
    ("SparseCategoricalAccuracy", "sparse_categorical_accuracy"),
]
MULTICLASS_PLOTS = ["MultiClassConfusionMatrixPlot"]
# Regression: TFMA's own error metrics, RMSE through its Keras metric wrapper (TFMA has no native one), the squared
# Pearson correlation (r^2 of predictions vs labels) and the means that show a biased model. No plots.
REGRESSION_METRICS = [
    ("ExampleCount", "example_count"),
    ("MeanAbsoluteError", "mean_absolute_error"),
    ("MeanSquaredError", "mean_squared_error"),
    ("RootMeanSquaredError", "root_mean_squared_error"),
    ("MeanAbsolutePercentageError", "mean_absolute_percentage_error"),
    ("SquaredPearsonCorrelation", "squared_pearson_correlation"),
    ("MeanLabel", "mean_label"),
    ("MeanPrediction", "mean_prediction"),
]
# Errors: a change threshold on them without a direction means "lower is better".
LOWER_IS_BETTER = {"mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                   "mean_absolute_percentage_error"}


def settings_of(settings: str, module_file: str = "") -> dict:
    """The evaluation settings a step runs with: its `settings` JSON text when given, else the module file's
    eval_settings() (optional), else none."""
    if settings:
        try:
            return json.loads(settings)
        except json.JSONDecodeError as exc:
            raise SlipwayError(f"settings: not valid JSON ({exc.msg} at position {exc.pos})") from None
    if module_file:
        from slipway.core.modules import load_module, optional_dict

        return optional_dict(load_module(module_file), "eval_settings")
    return {}


def run(
    model_dir: str,
    examples_dir: str,
    evaluation_dir: str,
    blessing_dir: str,
    settings: dict | None = None,
    baseline_model_dir: str = "",
    split: str = "eval",
    beam_pipeline_args: Sequence[str] | str | None = None,
) -> dict:
    """Evaluate `model_dir` on `split` of `examples_dir`; write the evaluation and the blessing.

    Writes evaluation_dir/{tfma/, metrics.json, report.html} and blessing_dir/{BLESSED|NOT_BLESSED, blessing.json},
    each folder staged and renamed only when complete. Returns a summary dict (see README.md).
    baseline_model_dir: a local SavedModel folder, or an object-store URI (s3://, or KFP's minio://: what
    resolve_baseline finds on a cluster), copied to the step's scratch space first and reported by its URI.
    beam_pipeline_args: Beam options as TFX takes them (a list, a JSON list or one shell-quoted string); empty
    picks in-process or one worker process per core by the split's row count (slipway.core.beam).
    """
    if baseline_model_dir and is_object_store(baseline_model_dir):
        with local_copy(baseline_model_dir, option_name("baseline_model")) as copy:
            return _evaluate(model_dir, examples_dir, evaluation_dir, blessing_dir, settings, baseline_model_dir,
                             str(copy), split, beam_pipeline_args)
    return _evaluate(model_dir, examples_dir, evaluation_dir, blessing_dir, settings, baseline_model_dir,
                     baseline_model_dir, split, beam_pipeline_args)


def _evaluate(model_dir: str, examples_dir: str, evaluation_dir: str, blessing_dir: str, settings: dict | None,
              baseline_model_dir: str, baseline_read: str, split: str,
              beam_pipeline_args: Sequence[str] | str | None) -> dict:
    """run()'s work; the baseline is read from baseline_read and reported as baseline_model_dir."""
    settings = dict(settings or {})
    unknown = set(settings) - SETTINGS_KEYS
    if unknown:
        raise SlipwayError(f"evaluate settings: unknown keys {sorted(unknown)} (allowed: {sorted(SETTINGS_KEYS)})")

    meta = examples_meta(examples_dir)
    label = meta.get("label")
    if not label:
        raise SlipwayError(f"examples {examples_dir}: examples_meta.json names no label")
    task = task_of(meta, f"examples {examples_dir}")
    num_classes = int(meta.get("num_classes") or len(meta.get("label_classes") or [])) if task == CLASSIFICATION else 0
    classes = [str(c) for c in (meta.get("label_classes") or range(num_classes))]
    if task == CLASSIFICATION and num_classes < 2:
        raise SlipwayError(f"examples {examples_dir}: need at least 2 label classes, found {num_classes}")
    if not split_dir(examples_dir, split).is_dir():
        raise SlipwayError(f"examples {examples_dir}: no split '{split}' (has: {sorted(meta.get('splits', {}))})")
    files = split_files(examples_dir, split)

    _check_model(model_dir, "model", label, num_classes, classes, examples_dir, task)
    if baseline_read:
        _check_model(baseline_read, "baseline model", label, num_classes, classes, examples_dir, task)

    binary = num_classes == 2
    metrics = REGRESSION_METRICS if task == REGRESSION else BINARY_METRICS if binary else MULTICLASS_METRICS
    plot_names = [] if task == REGRESSION else BINARY_PLOTS if binary else MULTICLASS_PLOTS
    metric_names = [name for _, name in metrics]
    thresholds = parse_thresholds(settings.get("thresholds") or {}, metric_names)
    slices = parse_slices(settings.get("slices") or [], meta.get("columns") or {}, examples_dir, label)
    has_baseline = bool(baseline_read)
    rows = (meta.get("splits") or {}).get(split)
    beam_choice = beam_options.choose("evaluate", beam_pipeline_args, int(rows) if rows is not None else None)

    with staged_output(evaluation_dir) as eval_stage, staged_output(blessing_dir) as bless_stage:
        tfma_dir = eval_stage / "tfma"
        eval_config = _eval_config(label, metrics, plot_names, thresholds, slices, has_baseline)
        progress.say(f"evaluate computing metrics on {split} for {len(slices) + 1} slice specs with TFMA"
                     + (" against the baseline" if has_baseline else "") + f" on {beam_choice.describe()}")
        with beam_storage.WorkerPaths(beam_choice, "evaluate") as paths:
            written = paths.output(tfma_dir, "tfma")
            _run_tfma(eval_config, paths.folder(model_dir), baseline_read and paths.folder(baseline_read),
                      [paths.file(f, examples_dir) for f in files], written, split_dir(examples_dir, split),
                      beam_choice.args, model_dir)
            paths.collect(written, tfma_dir)

        import tensorflow_model_analysis as tfma

        per_slice = _load_metrics(tfma_dir, has_baseline)
        plots = _load_plots(tfma_dir, has_baseline)
        validation = tfma.load_validation_result(str(tfma_dir))

        overall = per_slice.get("Overall", {}).get("metrics", {})
        # Regression has no confusion matrix nor curves: None, so the report and ClassificationMetrics skip them.
        confusion = _confusion_matrix(plots.get("Overall"), classes, binary) if task == CLASSIFICATION else None
        roc = _roc(plots.get("Overall")) if binary else None
        pr = _pr_curve(plots.get("Overall")) if binary else None

        failures = _failures(validation)
        threshold_rows = _threshold_rows(thresholds, has_baseline, failures)
        if not thresholds:
            blessed = False
            message = "not blessed: no thresholds configured (set settings.thresholds)"
        elif not any(row["status"] != "skipped" for row in threshold_rows):
            blessed = bool(validation.validation_ok)
            message = "blessed: rubber stamp (only change thresholds configured and no baseline model to compare with)"
        elif validation.validation_ok:
            blessed = True
            checked = sum(1 for row in threshold_rows if row["status"] != "skipped")
            message = f"blessed: all {checked} thresholds passed on the overall slice ({len(per_slice)} reported)"
            if not has_baseline and any(row["status"] == "skipped" for row in threshold_rows):
                message += "; change thresholds skipped (no baseline model)"
        else:
            blessed = False
            listed = "; ".join(f["text"] for f in failures)
            message = f"not blessed: {len(failures)} threshold check(s) failed: {listed}"
            if validation.missing_thresholds or (not failures and validation.missing_slices):
                message = "not blessed: some thresholds could not be checked (metric or slice missing)"

        slices_out = [
            {"slice": name, **{k: v for k, v in entry.items() if k != "key"}} for name, entry in per_slice.items()
        ]
        write_json(
            eval_stage / "metrics.json",
            {
                "split": split,
                "model": model_dir,
                "baseline_model": baseline_model_dir or None,
                "label": label,
                "task": task,
                "label_classes": classes,
                "overall": overall,
                "baseline_overall": per_slice.get("Overall", {}).get("baseline_metrics"),
                "slices": slices_out,
                "confusion_matrix": confusion,
                "roc": roc,
            },
        )
        decision = {
            "blessed": blessed,
            "message": message,
            "current_model": model_dir,
            "baseline_model": baseline_model_dir or None,
            "failures": [f["text"] for f in failures],
        }
        (eval_stage / "report.html").write_text(
            report.report_html(split, model_dir, baseline_model_dir, per_slice, threshold_rows, decision,
                               confusion=confusion, roc=roc, pr=pr),
            encoding="utf-8",
        )
        (bless_stage / ("BLESSED" if blessed else "NOT_BLESSED")).touch()
        write_json(bless_stage / "blessing.json", decision)

    return {
        "blessed": blessed,
        "message": message,
        "task": task,
        "metrics": overall,
        "slices": len(per_slice),
        "confusion_matrix": confusion,
        "roc": roc,
        "beam": beam_choice.facts(),
    }


# --- inputs ---------------------------------------------------------------------------------------------------


def _check_model(path: str, what: str, label: str, num_classes: int, classes: list[str], examples_dir: str,
                 task: str = CLASSIFICATION) -> None:
    root = Path(path)
    if not (root / "saved_model.pb").is_file():
        raise SlipwayError(f"{what} {path}: no saved_model.pb (not a TF SavedModel folder)")
    meta_path = root / MODEL_META
    if not meta_path.is_file():
        return  # a foreign SavedModel: trust the examples' label description
    model_meta = read_json(meta_path)
    model_task = task_of(model_meta, f"{what} {path}")
    if model_task != task:
        raise SlipwayError(f"{what} {path}: a {model_task} model, but examples {examples_dir} are {task}")
    model_k = model_meta.get("num_classes")
    if model_k is not None and int(model_k) != num_classes:
        raise SlipwayError(
            f"{what} {path}: model has {model_k} classes but examples {examples_dir} have {num_classes}"
        )
    model_classes = model_meta.get("label_classes")
    if model_classes and [str(c) for c in model_classes] != classes:
        raise SlipwayError(
            f"{what} {path}: label_classes {model_classes} differ from examples {examples_dir} ({classes})"
        )
    model_label = model_meta.get("label")
    if model_label and model_label != label:
        raise SlipwayError(f"{what} {path}: trained on label '{model_label}', examples {examples_dir} have '{label}'")


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SlipwayError(f"evaluate settings: {where} must be a finite number, got {value!r}")
    return float(value)


def parse_thresholds(raw: dict, metric_names: list[str]) -> dict:
    if not isinstance(raw, dict):
        raise SlipwayError("evaluate settings: thresholds must be a mapping {metric name: {...}}")
    parsed = {}
    for name, spec in raw.items():
        if name not in metric_names:
            raise SlipwayError(
                f"evaluate settings: threshold on unknown metric '{name}' (available: {', '.join(metric_names)})"
            )
        if not isinstance(spec, dict) or not spec:
            raise SlipwayError(f"evaluate settings: thresholds.{name} must be a non-empty mapping")
        unknown = set(spec) - THRESHOLD_KEYS
        if unknown:
            raise SlipwayError(f"evaluate settings: thresholds.{name}: unknown keys {sorted(unknown)}")
        entry = {}
        for bound in ("lower_bound", "upper_bound"):
            if spec.get(bound) is not None:
                entry[bound] = _number(spec[bound], f"thresholds.{name}.{bound}")
        if spec.get("change") is not None:
            change = spec["change"]
            if not isinstance(change, dict):
                raise SlipwayError(f"evaluate settings: thresholds.{name}.change must be a mapping")
            unknown = set(change) - CHANGE_KEYS
            if unknown:
                raise SlipwayError(f"evaluate settings: thresholds.{name}.change: unknown keys {sorted(unknown)}")
            direction = change.get("direction", "lower_is_better" if name in LOWER_IS_BETTER else "higher_is_better")
            if direction not in DIRECTIONS:
                raise SlipwayError(
                    f"evaluate settings: thresholds.{name}.change.direction must be one of {sorted(DIRECTIONS)}"
                )
            parsed_change = {"direction": direction}
            for key in ("absolute", "relative"):
                if change.get(key) is not None:
                    parsed_change[key] = _number(change[key], f"thresholds.{name}.change.{key}")
            if len(parsed_change) == 1:
                raise SlipwayError(f"evaluate settings: thresholds.{name}.change needs 'absolute' and/or 'relative'")
            entry["change"] = parsed_change
        if not entry:
            raise SlipwayError(f"evaluate settings: thresholds.{name} sets no bound and no change")
        parsed[name] = entry
    return parsed


def parse_slices(raw: list, columns: dict, examples_dir: str, label: str) -> list[list[str]]:
    if not isinstance(raw, list):
        raise SlipwayError("evaluate settings: slices must be a list of feature lists, e.g. [['f1'], ['f1', 'f2']]")
    out = []
    for entry in raw:
        keys = [entry] if isinstance(entry, str) else entry
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
            raise SlipwayError(f"evaluate settings: slice {entry!r} must be a non-empty list of feature names")
        for key in keys:
            if columns and key not in columns:
                raise SlipwayError(
                    f"evaluate settings: slice feature '{key}' is not a column of examples {examples_dir} "
                    f"(columns: {', '.join(sorted(columns))})"
                )
            if key == label:
                raise SlipwayError(f"evaluate settings: cannot slice on the label '{label}'")
        if keys not in out:
            out.append(list(keys))
    return out


# --- TFMA -----------------------------------------------------------------------------------------------------


def _eval_config(label, metrics, plot_names, thresholds, slices, has_baseline):
    import tensorflow_model_analysis as tfma

    # tf_generic: the model is called through its serving signature either way; naming the type spares TFMA a
    # load of the model just to find it out, and reviving it as a Keras model (about 2 s of a fresh process).
    spec = {"signature_name": SIGNATURE, "label_key": label, "model_type": tfma.TF_GENERIC}
    if has_baseline:
        model_specs = [tfma.ModelSpec(name=CANDIDATE, **spec), tfma.ModelSpec(name=BASELINE, is_baseline=True, **spec)]
    else:
        model_specs = [tfma.ModelSpec(**spec)]

    configs = []
    for class_name, name in metrics:
        config = tfma.MetricConfig(class_name=class_name)
        threshold = _metric_threshold(thresholds.get(name), has_baseline)
        if threshold is not None:
            # Gate on the overall slice only: MetricConfig.threshold would apply to every feature slice, and a
            # handful of rows in one slice would then block the blessing.
            config.per_slice_thresholds.add(slicing_specs=[tfma.SlicingSpec()], threshold=threshold)
        configs.append(config)
    for class_name in plot_names:
        configs.append(tfma.MetricConfig(class_name=class_name))

    return tfma.EvalConfig(
        model_specs=model_specs,
        metrics_specs=[tfma.MetricsSpec(metrics=configs)],
        slicing_specs=[tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=keys) for keys in slices],
        options=tfma.Options(include_default_metrics={"value": False}),
    )


def _metric_threshold(spec: dict | None, has_baseline: bool):
    import tensorflow_model_analysis as tfma

    if not spec:
        return None
    threshold = tfma.MetricThreshold()
    has_any = False
    if "lower_bound" in spec or "upper_bound" in spec:
        value = tfma.GenericValueThreshold()
        if "lower_bound" in spec:
            value.lower_bound.value = spec["lower_bound"]
        if "upper_bound" in spec:
            value.upper_bound.value = spec["upper_bound"]
        threshold.value_threshold.CopyFrom(value)
        has_any = True
    if "change" in spec and has_baseline:  # without a baseline, change thresholds are skipped (rubber stamp)
        change = spec["change"]
        direction = (
            tfma.MetricDirection.HIGHER_IS_BETTER
            if change["direction"] == "higher_is_better"
            else tfma.MetricDirection.LOWER_IS_BETTER
        )
        generic = tfma.GenericChangeThreshold(direction=direction)
        if "absolute" in change:
            generic.absolute.value = change["absolute"]
        if "relative" in change:
            generic.relative.value = change["relative"]
        threshold.change_threshold.CopyFrom(generic)
        has_any = True
    return threshold if has_any else None


def _run_tfma(eval_config, model_dir, baseline_model_dir, files, output_dir: str, data_dir: Path,
              beam_args: list[str], model_name: str) -> None:
    """TFMA's own extract-evaluate-write transform over our own read, rather than run_model_analysis, whose read
    batches records adaptively by timing: TFMA's floating metric sums can then differ in the last bits between
    two runs on the same data (beam_options.RECORD_BATCH_SIZE). Paths as the runner's workers open them
    (beam_storage); model_name: the model as errors name it."""
    import apache_beam as beam
    import tensorflow_model_analysis as tfma
    from apache_beam.options.pipeline_options import PipelineOptions
    from tfx_bsl.public import tfxio

    leave_keras_unconverted()
    if baseline_model_dir:
        shared = [
            tfma.default_eval_shared_model(model_dir, eval_config=eval_config, model_name=CANDIDATE),
            tfma.default_eval_shared_model(baseline_model_dir, eval_config=eval_config, model_name=BASELINE),
        ]
    else:
        # TFX semantics: without a baseline the candidate is "rubber stamped" (change thresholds not checked).
        shared = tfma.default_eval_shared_model(model_dir, eval_config=eval_config, rubber_stamp=True)
    pattern = str(data_dir / f"*{Path(files[0]).suffix}")  # named in TFMA's output and in errors
    storage.makedirs(output_dir)
    # The shards by name in order, not globbed: the order records reach the metrics is the shard order.
    source = tfxio.TFExampleRecord(file_pattern=list(files), raw_record_column_name=tfma.ARROW_INPUT_COLUMN,
                                   telemetry_descriptors=["slipway", "evaluate"])
    try:
        with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
            _ = (pipeline
                 | "Read" >> source.BeamSource(beam_options.RECORD_BATCH_SIZE)
                 | "ExtractEvaluateAndWriteResults" >> tfma.ExtractEvaluateAndWriteResults(
                     eval_config=eval_config, eval_shared_model=shared, output_path=str(output_dir),
                     display_only_data_location=pattern, display_only_file_format="tfrecords"))
    except Exception as exc:  # TFMA/Beam wrap model errors in long traces: give one line that names the input
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SlipwayError(f"model {model_name}: TFMA evaluation on {pattern} failed: {first[:500]}") from exc


def _slice_name(slice_key) -> str:
    parts = []
    for key in slice_key.single_slice_keys:
        kind = key.WhichOneof("kind")
        value = getattr(key, kind) if kind else ""
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"{key.column}={value}")
    return ", ".join(parts) if parts else "Overall"


def _double(value) -> float | None:
    if value.WhichOneof("type") != "double_value":
        return None
    number = float(value.double_value.value)
    return number if math.isfinite(number) else None


def _load_metrics(tfma_dir: Path, has_baseline: bool) -> dict:
    """{slice name: {"metrics": {...}, "baseline_metrics": {...}|absent, "diff": {...}|absent}}, Overall first."""
    import tensorflow_model_analysis as tfma

    out: dict[str, dict] = {}
    for record in tfma.load_metrics(str(tfma_dir)):
        entry = out.setdefault(_slice_name(record.slice_key), {"metrics": {}})
        for kv in record.metric_keys_and_values:
            number = _double(kv.value)
            if number is None:
                continue
            key = kv.key
            if key.sub_key.ByteSize():
                continue  # per-class/top-k sub keys are not configured; skip if TFMA adds any
            if has_baseline and key.model_name == BASELINE:
                target = "baseline_metrics" if not key.is_diff else None
            elif key.is_diff:
                target = "diff"
            else:
                target = "metrics"
            if target:
                entry.setdefault(target, {})[key.name] = number
    ordered = {}
    if "Overall" in out:
        ordered["Overall"] = out.pop("Overall")
    for name in sorted(out):
        ordered[name] = out[name]
    return ordered


def _load_plots(tfma_dir: Path, has_baseline: bool) -> dict:
    """{slice name: PlotData of the candidate model}."""
    import tensorflow_model_analysis as tfma

    out = {}
    for record in tfma.load_plots(str(tfma_dir)):
        for kv in record.plot_keys_and_values:
            if has_baseline and kv.key.model_name == BASELINE:
                continue
            out[_slice_name(record.slice_key)] = kv.value
    return out


def _confusion_matrix(plot, classes: list[str], binary: bool) -> dict:
    k = len(classes)
    matrix = [[0] * k for _ in range(k)]
    if plot is None:
        return {"categories": classes, "matrix": matrix}
    if binary:
        matrices = list(plot.confusion_matrix_at_thresholds.matrices)
        if matrices:
            at = min(matrices, key=lambda m: abs(m.threshold - 0.5))
            # rows: actual class, columns: predicted class ([[TN, FP], [FN, TP]])
            matrix = [
                [round(at.true_negatives), round(at.false_positives)],
                [round(at.false_negatives), round(at.true_positives)],
            ]
        return {"categories": classes, "matrix": matrix}
    matrices = list(plot.multi_class_confusion_matrix_at_thresholds.matrices)
    if matrices:
        at = min(matrices, key=lambda m: abs(m.threshold))
        for entry in at.entries:
            actual, predicted = int(entry.actual_class_id), int(entry.predicted_class_id)
            if 0 <= actual < k and 0 <= predicted < k:
                matrix[actual][predicted] += round(entry.num_weighted_examples)
    return {"categories": classes, "matrix": matrix}


def _roc(plot) -> dict | None:
    if plot is None:
        return None
    points = []
    for m in plot.confusion_matrix_at_thresholds.matrices:
        fpr, tpr = float(m.false_positive_rate), float(m.recall)
        if math.isfinite(fpr) and math.isfinite(tpr):
            points.append((float(m.threshold), fpr, tpr))
    if not points:
        return None
    if len(points) > ROC_MAX_POINTS:
        step = (len(points) - 1) / (ROC_MAX_POINTS - 1)
        points = [points[round(i * step)] for i in range(ROC_MAX_POINTS)]
    return {
        "fpr": [p[1] for p in points],
        "tpr": [p[2] for p in points],
        "thresholds": [p[0] for p in points],
    }


def _pr_curve(plot) -> dict | None:
    """Recall and precision by threshold (at most ROC_MAX_POINTS), for the report's precision-recall chart."""
    if plot is None:
        return None
    points = []
    for m in plot.confusion_matrix_at_thresholds.matrices:
        recall, precision = float(m.recall), float(m.precision)
        # Where nothing is predicted positive precision is 0/0: TFMA's stand-in value there is no point of the curve.
        if math.isfinite(recall) and math.isfinite(precision) and m.true_positives + m.false_positives > 0:
            points.append((recall, precision))
    if not points:
        return None
    if len(points) > ROC_MAX_POINTS:
        step = (len(points) - 1) / (ROC_MAX_POINTS - 1)
        points = [points[round(i * step)] for i in range(ROC_MAX_POINTS)]
    return {"recall": [p[0] for p in points], "precision": [p[1] for p in points]}


# --- blessing ---------------------------------------------------------------------------------------------------


def _describe_threshold(threshold) -> str:
    if threshold.HasField("value_threshold"):
        v = threshold.value_threshold
        parts = []
        if v.HasField("lower_bound"):
            parts.append(f">= {v.lower_bound.value:g}")
        if v.HasField("upper_bound"):
            parts.append(f"<= {v.upper_bound.value:g}")
        return "value " + " and ".join(parts)
    if threshold.HasField("change_threshold"):
        import tensorflow_model_analysis as tfma

        c = threshold.change_threshold
        op = ">=" if c.direction == tfma.MetricDirection.HIGHER_IS_BETTER else "<="
        parts = []
        if c.HasField("absolute"):
            parts.append(f"candidate - baseline {op} {c.absolute.value:g}")
        if c.HasField("relative"):
            parts.append(f"(candidate - baseline) / baseline {op} {c.relative.value:g}")
        return "change " + " and ".join(parts)
    return "threshold"


def _failures(validation) -> list[dict]:
    failures = []
    for per_slice in validation.metric_validations_per_slice:
        slice_name = _slice_name(per_slice.slice_key)
        for failure in per_slice.failures:
            value = _double(failure.metric_value)
            kind = "change" if failure.metric_threshold.HasField("change_threshold") else "value"
            what = "change vs baseline" if kind == "change" else "value"
            shown = f"{value:.4g}" if value is not None else "n/a"
            text = (
                f"{failure.metric_key.name} on slice {slice_name}: {what} {shown} fails "
                f"{_describe_threshold(failure.metric_threshold)}"
            )
            failures.append({"metric": failure.metric_key.name, "kind": kind, "slice": slice_name, "text": text})
    return failures


def _threshold_rows(thresholds: dict, has_baseline: bool, failures: list[dict]) -> list[dict]:
    rows = []
    for name, spec in thresholds.items():
        if "lower_bound" in spec or "upper_bound" in spec:
            parts = []
            if "lower_bound" in spec:
                parts.append(f">= {spec['lower_bound']:g}")
            if "upper_bound" in spec:
                parts.append(f"<= {spec['upper_bound']:g}")
            failed = [f for f in failures if f["metric"] == name and f["kind"] == "value"]
            rows.append(
                {
                    "metric": name,
                    "threshold": "value " + " and ".join(parts),
                    "status": "failed" if failed else "passed",
                    "detail": "; ".join(f["slice"] for f in failed),
                }
            )
        if "change" in spec:
            change = spec["change"]
            op = ">=" if change["direction"] == "higher_is_better" else "<="
            parts = []
            if "absolute" in change:
                parts.append(f"candidate - baseline {op} {change['absolute']:g}")
            if "relative" in change:
                parts.append(f"relative change {op} {change['relative']:g}")
            failed = [f for f in failures if f["metric"] == name and f["kind"] == "change"]
            status = ("failed" if failed else "passed") if has_baseline else "skipped"
            rows.append(
                {
                    "metric": name,
                    "threshold": "change " + " and ".join(parts),
                    "status": status,
                    "detail": "; ".join(f["slice"] for f in failed) if has_baseline else "no baseline model",
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line: executor.py MODEL EXAMPLES EVALUATION BLESSING [SETTINGS_JSON] [BASELINE] [SPLIT]."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4:
        print(main.__doc__, file=sys.stderr)
        return 2
    settings = json.loads(args[4]) if len(args) > 4 and args[4] else None
    result = run(args[0], args[1], args[2], args[3], settings, args[5] if len(args) > 5 else "",
                 args[6] if len(args) > 6 else "eval")
    print(json.dumps({k: result[k] for k in ("blessed", "message", "metrics", "slices")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

