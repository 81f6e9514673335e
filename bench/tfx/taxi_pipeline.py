"""The taxi pipeline in TFX 1.16 with its LocalDagRunner: the other side of bench/bench_tfx.py.

    bench/.venv-tfx/bin/python bench/tfx/taxi_pipeline.py --data CSV_OR_FOLDER --workdir DIR [--result FILE]

CsvExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> Transform -> Trainer -> Evaluator, every
component in this one process (LocalDagRunner), Beam in process on one worker (`--direct_running_mode=in_memory
--direct_num_workers=1`, as Slipway's steps run at this size). Transform and Trainer use taxi_module.py in this
folder (Slipway's taxi features and model; TFX's input pipeline and export); the Evaluator computes the metrics and
slices Slipway's evaluate computes (overall and by trip_start_hour; value thresholds from the taxi module's
eval_settings()).

Per-component seconds are taken two ways and both written to the result JSON:
  - `components`: wall time around each component's Launcher.launch() (input resolution, MLMD registration,
    executor, output publishing), timestamps taken in this process; what the bench reports.
  - `mlmd_components`: each MLMD execution's last_update_time_since_epoch - create_time_since_epoch (registered
    RUNNING before the executor starts, updated COMPLETE when its outputs are published); a cross-check that
    needs nothing but the metadata store. It misses the input resolution before registration (tens of ms).
Also `import_seconds` (importing TFX and its libraries, once), `pipeline_seconds` (building and compiling the
pipeline, including TFX's packaging of the module file into a wheel per component, which happens at run start)
and `process_seconds` (from interpreter start, read from /proc, to the result being written).

Run with the bench-only environment (bench/tfx/setup.sh builds it); not part of the project's lock.
"""

from __future__ import annotations

import os

# Before TensorFlow is imported: Keras 2 (tf-keras), which TFX 1.16's Trainer and TFMA expect; quiet native logs.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TAXI_MODULE = ROOT / "pipelines" / "modules" / "taxi.py"
MODULE_FILE = HERE / "taxi_module.py"
PIPELINE_NAME = "taxi_tfx_bench"
LABEL = "big_tipper"
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
# Slipway's taxi training: 3 epochs x 77 steps of 128 (the ~9,900-row train split), validation 39 steps each epoch.
TRAIN_STEPS = 231
EVAL_STEPS = 39
# TFMA metrics and plots as Slipway's evaluate computes them for a binary label (components/evaluate/tfma_config.py).
BINARY_METRICS = ["ExampleCount", "BinaryAccuracy", "AUC", "AUCPrecisionRecall", "Precision", "Recall"]
BINARY_PLOTS = ["ConfusionMatrixPlot"]
# Components in pipeline order, by node id, with the Slipway step each one maps onto.
STEP_OF = {
    "CsvExampleGen": "ingest",
    "StatisticsGen": "validate",
    "SchemaGen": "validate",
    "ImportSchemaGen": "validate",
    "ExampleValidator": "validate",
    "Transform": "transform",
    "Trainer": "train",
    "Evaluator": "evaluate",
}


def process_start_time() -> float:
    """This process's start (epoch seconds), from /proc: the interpreter's own start-up counts too."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])  # field 22 of stat: starttime, in clock ticks since boot
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + start_ticks / ticks


def eval_config(taxi_module_path: Path):
    """TFMA config matching Slipway's evaluate on the taxi sample: same metrics, slices and value thresholds."""
    import importlib.util

    import tensorflow_model_analysis as tfma

    spec = importlib.util.spec_from_file_location("slipway_taxi_module", taxi_module_path)
    taxi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(taxi)
    settings = taxi.eval_settings()
    names = {"BinaryAccuracy": "binary_accuracy", "AUC": "auc", "AUCPrecisionRecall": "auc_precision_recall",
             "Precision": "precision", "Recall": "recall", "ExampleCount": "example_count"}
    metrics = []
    for class_name in BINARY_METRICS:
        config = tfma.MetricConfig(class_name=class_name)
        bounds = (settings.get("thresholds") or {}).get(names[class_name]) or {}
        if "lower_bound" in bounds or "upper_bound" in bounds:
            value = tfma.GenericValueThreshold()
            if "lower_bound" in bounds:
                value.lower_bound.value = bounds["lower_bound"]
            if "upper_bound" in bounds:
                value.upper_bound.value = bounds["upper_bound"]
            # On the overall slice only, as Slipway gates (no baseline here, so no change thresholds).
            config.per_slice_thresholds.add(slicing_specs=[tfma.SlicingSpec()],
                                            threshold=tfma.MetricThreshold(value_threshold=value))
        metrics.append(config)
    metrics += [tfma.MetricConfig(class_name=name) for name in BINARY_PLOTS]
    slices = [tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=list(keys)) for keys in settings.get("slices", [])]
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key=LABEL)],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
        slicing_specs=slices,
        options=tfma.Options(include_default_metrics={"value": False}),
    )


def create_pipeline(data_dir: Path, workdir: Path, train_steps: int, eval_steps: int, beam_args: list[str],
                    transform_stats: bool, taxi_module: Path, schema_file: Path | None = None):
    from tfx import v1 as tfx

    example_gen = tfx.components.CsvExampleGen(input_base=str(data_dir))
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    if schema_file is not None:  # the curated schema Slipway validates against, as TFX's users import one
        schema_gen = tfx.components.ImportSchemaGen(schema_file=str(schema_file))
    else:
        schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"],
                                              infer_feature_shape=True)
    example_validator = tfx.components.ExampleValidator(statistics=statistics_gen.outputs["statistics"],
                                                        schema=schema_gen.outputs["schema"])
    transform = tfx.components.Transform(examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
                                         module_file=str(MODULE_FILE), disable_statistics=not transform_stats)
    trainer = tfx.components.Trainer(
        module_file=str(MODULE_FILE),
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        train_args=tfx.proto.TrainArgs(num_steps=train_steps),
        eval_args=tfx.proto.EvalArgs(num_steps=eval_steps),
    )
    evaluator = tfx.components.Evaluator(examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
                                         eval_config=eval_config(taxi_module))
    return tfx.dsl.Pipeline(
        pipeline_name=PIPELINE_NAME,
        pipeline_root=str(workdir / "pipeline_root"),
        components=[example_gen, statistics_gen, schema_gen, example_validator, transform, trainer, evaluator],
        enable_cache=False,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            str(workdir / "metadata.sqlite")),
        beam_pipeline_args=beam_args,
    )


def time_launches(times: dict[str, float], profile: set[str], profile_dir: Path | None) -> None:
    """Wrap every component's Launcher.launch() with wall-clock timestamps, keyed by node id; the nodes named in
    `profile` also run under cProfile, their stats written to profile_dir/<node>.prof."""
    from tfx.orchestration.portable import launcher

    original = launcher.Launcher.launch

    def launch(self, *args, **kwargs):
        node = self._pipeline_node.node_info.id
        profiler = None
        if node in profile:
            import cProfile

            profiler = cProfile.Profile()
        started = time.time()
        print(f"[tfx-bench] {node} started", flush=True)
        try:
            if profiler is None:
                return original(self, *args, **kwargs)
            return profiler.runcall(original, self, *args, **kwargs)
        finally:
            times[node] = time.time() - started
            print(f"[tfx-bench] {node} done in {times[node]:.1f} s", flush=True)
            if profiler is not None:
                profiler.dump_stats(str(profile_dir / f"{node}.prof"))

    launcher.Launcher.launch = launch


def mlmd_times(metadata_path: Path) -> dict[str, float]:
    """Seconds per component from the metadata store: last update - creation of each execution, by node id."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(config)
    types = {t.id: t.name for t in store.get_execution_types()}
    out = {}
    for execution in store.get_executions():
        node = types[execution.type_id].rsplit(".", 1)[-1]
        contexts = store.get_contexts_by_execution(execution.id)
        for context in contexts:  # the node context's name is "<pipeline>.<node id>"
            if context.name.startswith(PIPELINE_NAME + ".") and context.name.count(".") == 1:
                node = context.name.split(".", 1)[1]
        out[node] = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
    return out


def evaluation_metrics(pipeline_root: Path) -> dict:
    """The Evaluator's overall metrics and blessing, to check both pipelines did comparable work."""
    import tensorflow_model_analysis as tfma

    evaluations = sorted(pipeline_root.glob("Evaluator/evaluation/*"))
    blessings = sorted(pipeline_root.glob("Evaluator/blessing/*"))
    if not evaluations:
        return {}
    out: dict = {"slices": 0}
    for record in tfma.load_metrics(str(evaluations[-1])):
        out["slices"] += 1
        if not record.slice_key.single_slice_keys:
            for kv in record.metric_keys_and_values:
                if kv.value.WhichOneof("type") == "double_value" and not kv.key.sub_key.ByteSize():
                    out[kv.key.name] = round(float(kv.value.double_value.value), 4)
    if blessings:
        out["blessed"] = (blessings[-1] / "BLESSED").exists()
    return out


def data_folder(data: Path, workdir: Path) -> Path:
    """CsvExampleGen reads every file of a folder: a lone CSV is linked into a folder of its own."""
    if data.is_dir():
        return data
    folder = workdir / "data"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / data.name
    if not link.exists():
        link.symlink_to(data.resolve())
    return folder


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the taxi CSV (or a folder holding only CSVs)")
    parser.add_argument("--workdir", required=True, help="pipeline root and metadata store (emptied first)")
    parser.add_argument("--result", help="write the timings as JSON here (default: WORKDIR/tfx_result.json)")
    parser.add_argument("--train-steps", type=int, default=TRAIN_STEPS, help="all epochs' steps (TrainArgs)")
    parser.add_argument("--eval-steps", type=int, default=EVAL_STEPS, help="validation steps per epoch (EvalArgs)")
    parser.add_argument("--no-transform-stats", action="store_true",
                        help="Transform without its pre- and post-transform statistics (TFX computes them by default)")
    parser.add_argument("--beam-arg", action="append", default=None,
                        help=f"a Beam pipeline argument, repeatable (default: {' '.join(BEAM_ARGS)})")
    parser.add_argument("--taxi-module", default=str(TAXI_MODULE),
                        help="Slipway's taxi module whose features and model both sides use (default: this checkout's)")
    parser.add_argument("--schema", help="import this schema (ImportSchemaGen) instead of inferring one (SchemaGen)")
    parser.add_argument("--profile", action="append", default=[], metavar="NODE",
                        help="run this component (node id, e.g. Trainer) under cProfile; repeatable")
    parser.add_argument("--profile-dir", help="where NODE.prof files go (default: WORKDIR)")
    return parser


def main(argv: list[str] | None = None) -> int:
    started = process_start_time()
    args = _parser().parse_args(argv)
    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    os.environ["SLIPWAY_TAXI_MODULE"] = str(Path(args.taxi_module).resolve())
    profile_dir = Path(args.profile_dir or workdir).resolve()
    profile_dir.mkdir(parents=True, exist_ok=True)

    before_imports = time.time()
    from tfx import v1 as tfx
    from tfx.orchestration.portable import launcher  # noqa: F401  (what time_launches wraps)

    import_seconds = time.time() - before_imports
    times: dict[str, float] = {}
    time_launches(times, set(args.profile), profile_dir)
    before_pipeline = time.time()
    pipeline = create_pipeline(data_folder(Path(args.data), workdir), workdir, args.train_steps, args.eval_steps,
                               args.beam_arg or BEAM_ARGS, not args.no_transform_stats, Path(args.taxi_module),
                               Path(args.schema).resolve() if args.schema else None)
    run_started = time.time()
    tfx.orchestration.LocalDagRunner().run(pipeline)
    run_seconds = time.time() - run_started
    result = {
        "components": times,
        "steps": {step: round(sum(s for node, s in times.items() if STEP_OF.get(node) == step), 3)
                  for step in dict.fromkeys(STEP_OF.values())},
        "mlmd_components": mlmd_times(workdir / "metadata.sqlite"),
        "import_seconds": round(import_seconds, 3),
        "startup_seconds": round(before_imports - started, 3),
        # The pipeline object, and LocalDagRunner's compile + module packaging (outside every component's launch).
        "pipeline_seconds": round(run_started - before_pipeline + run_seconds - sum(times.values()), 3),
        "run_seconds": round(run_seconds, 3),
        "metrics": evaluation_metrics(workdir / "pipeline_root"),
        "beam_args": args.beam_arg or BEAM_ARGS,
        "transform_stats": not args.no_transform_stats,
        "schema": "imported" if args.schema else "inferred",
        "train_steps": args.train_steps,
        "eval_steps": args.eval_steps,
    }
    result["process_seconds"] = round(time.time() - started, 3)
    Path(args.result or workdir / "tfx_result.json").write_text(json.dumps(result, indent=2) + "\n")
    print("[tfx-bench] " + json.dumps({"steps": result["steps"], "process_seconds": result["process_seconds"]}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
