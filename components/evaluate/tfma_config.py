"""What TFMA is asked to compute: the metrics and plots of each problem type, and the EvalConfig that names the
models (the candidate, and the baseline when there is one), the slices, and the parsed thresholds as TFMA's own
value and change thresholds on the overall slice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slipway.core.tasks import REGRESSION

if TYPE_CHECKING:
    import tensorflow_model_analysis as tfma

SIGNATURE = "serving_default"
CANDIDATE = "candidate"
BASELINE = "baseline"

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


def metrics_for(task: str, binary: bool) -> tuple[list[tuple[str, str]], list[str]]:
    """The (TFMA class name, metric name) pairs and the plot class names of a problem type."""
    metrics = REGRESSION_METRICS if task == REGRESSION else BINARY_METRICS if binary else MULTICLASS_METRICS
    plot_names = [] if task == REGRESSION else BINARY_PLOTS if binary else MULTICLASS_PLOTS
    return metrics, plot_names


def eval_config(label: str, metrics: list[tuple[str, str]], plot_names: list[str], thresholds: dict,
                slices: list[list[str]], has_baseline: bool) -> tfma.EvalConfig:
    """The EvalConfig for TFMA; thresholds and slices as eval_settings parsed them."""
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
        _set_given(value, spec, ("lower_bound", "upper_bound"))
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
        _set_given(generic, change, ("absolute", "relative"))
        threshold.change_threshold.CopyFrom(generic)
        has_any = True
    return threshold if has_any else None


def _set_given(message, spec: dict, fields: tuple[str, ...]) -> None:
    """Set each of a threshold proto's wrapped-double fields that spec gives (an unset one stays unset: no bound)."""
    for field in fields:
        if field in spec:
            getattr(message, field).value = spec[field]
