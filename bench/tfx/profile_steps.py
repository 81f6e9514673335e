"""Rerun Slipway's train or evaluate step alone, in this fresh process, and print where its time goes.

    .venv/bin/python bench/tfx/profile_steps.py train --workdir W [--cprofile FILE] [--repeat-in-process]
    .venv/bin/python bench/tfx/profile_steps.py evaluate --workdir W [--cprofile FILE]

W is the workdir of a finished `slipway run` (its summary.json names each step's outputs); the step reads the same
inputs the pipeline gave it and writes to a scratch folder. Phases are timestamps around the executor's own
functions (wrapped from here, the component code is unchanged): interpreter start (from /proc), imports, then the
step's work. --cprofile writes the whole step's cProfile stats. --repeat-in-process runs the step's work a second
time in the same process, which shows what a warm process (TFX's one LocalDagRunner process) saves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

MARKS: list[tuple[str, float, float, float]] = []


def mark(event: str) -> None:
    """Wall clock, this process's CPU time (all threads) and the main thread's CPU time."""
    MARKS.append((event, time.time(), time.process_time(), time.thread_time()))


def process_start_time() -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + int(fields[19]) / ticks


def timed(owner, name: str, label: str | None = None) -> None:
    """Replace owner.name with a wrapper that marks its start and end (once: a repeated run keeps the first)."""
    original = getattr(owner, name)
    if getattr(original, "_profile_steps_wrapped", False):
        return

    def wrapper(*args, **kwargs):
        mark(f"{label or name} begin")
        try:
            return original(*args, **kwargs)
        finally:
            mark(f"{label or name} end")

    wrapper._profile_steps_wrapped = True
    setattr(owner, name, wrapper)


def train_inputs(summary: dict) -> dict:
    outputs = summary["steps"]["transform"]["outputs"]
    arguments = summary.get("arguments") or {}
    return {"examples": outputs["transformed_examples"], "graph": outputs["transform_graph"],
            "module": arguments.get("module") or _taxi_module()}


def _taxi_module() -> str:
    from slipway.data.taxi import taxi_module

    return str(taxi_module())


def run_train(summary: dict, scratch: Path, checkpoints: bool) -> None:
    import tensorflow as tf

    from slipway.components.train import executor, trainer

    mark("imports end")
    inputs = train_inputs(summary)
    timed(trainer, "_dataset", "datasets")
    timed(trainer, "build_model", "build_model")
    timed(trainer, "_checkpointing", "checkpointing setup")
    timed(trainer, "_export", "export")
    timed(trainer._CheckpointEachEpoch, "on_epoch_end", "checkpoint save")
    original_fit = tf.keras.Model.fit

    class Phases(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            mark(f"epoch {epoch + 1} begin")

        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                mark("first batch end")

        def on_test_begin(self, logs=None):
            mark("validation begin")

        def on_test_end(self, logs=None):
            mark("validation end")

        def on_epoch_end(self, epoch, logs=None):
            mark(f"epoch {epoch + 1} end")

    def fit(self, *args, **kwargs):
        kwargs["callbacks"] = [Phases(), *(kwargs.get("callbacks") or [])]
        mark("fit begin")
        try:
            return original_fit(self, *args, **kwargs)
        finally:
            mark("fit end")

    if not getattr(tf.keras.Model.fit, "_profile_steps_wrapped", False):
        fit._profile_steps_wrapped = True
        tf.keras.Model.fit = fit
    out = scratch / "train"
    executor.run(transformed_examples_dir=inputs["examples"], transform_graph_dir=inputs["graph"],
                 module_file=inputs["module"], model_dir=str(out / "model"), tensorboard_dir=str(out / "logs"),
                 checkpoint_dir=str(out / "checkpoints") if checkpoints else "")


def run_evaluate(summary: dict, scratch: Path, generic_model: bool = False) -> None:
    import tensorflow_model_analysis as tfma

    from slipway.components.evaluate import executor, inputs, report, tfma_config, tfma_results, tfma_run
    from slipway.core.modules import load_module, optional_dict

    mark("imports end")
    module = (summary.get("arguments") or {}).get("module") or _taxi_module()
    settings = optional_dict(load_module(module), "eval_settings")
    timed(inputs, "check_model")
    timed(tfma_run, "run_tfma", "TFMA pipeline")
    timed(tfma, "default_eval_shared_model")
    timed(tfma, "load_eval_result", "run_model_analysis: load_eval_result")
    timed(tfma_results, "load_metrics")
    timed(tfma_results, "load_plots")
    timed(tfma, "load_validation_result")
    timed(report, "report_html")
    if generic_model and not getattr(tfma_config.eval_config, "_profile_steps_generic", False):
        original = tfma_config.eval_config

        def eval_config(*args, **kwargs):
            # The suggested fix: name the model type, so TFMA neither loads the model once more to find it out nor
            # revives it as a Keras model; it calls the serving signature of the plain SavedModel.
            config = original(*args, **kwargs)
            for spec in config.model_specs:
                spec.model_type = tfma.TF_GENERIC
            return config

        eval_config._profile_steps_generic = True
        tfma_config.eval_config = eval_config
    out = scratch / "evaluate"
    executor.run(model_dir=summary["model"], examples_dir=summary["steps"]["ingest"]["outputs"]["examples"],
                 evaluation_dir=str(out / "evaluation"), blessing_dir=str(out / "blessing"), settings=settings)


def phases(start: float) -> list[tuple[str, float, float, float, float]]:
    """(event, seconds since process start, wall, process CPU and main-thread CPU seconds since the previous mark)."""
    out, previous = [], (start, 0.0, 0.0)
    for event, at, cpu, thread in MARKS:
        out.append((event, at - start, at - previous[0], cpu - previous[1], thread - previous[2]))
        previous = (at, cpu, thread)
    return out


def main(argv: list[str] | None = None) -> int:
    start = process_start_time()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["train", "evaluate"])
    parser.add_argument("--workdir", required=True, help="workdir of a finished `slipway run`")
    parser.add_argument("--cprofile", help="write the step's cProfile stats here")
    parser.add_argument("--no-checkpoints", action="store_true", help="train without per-epoch checkpoints")
    parser.add_argument("--repeat-in-process", action="store_true", help="run the step twice in this process")
    parser.add_argument("--skip-autograph-tf-keras", action="store_true",
                        help="try the suggested fix: autograph leaves tf_keras' own code unconverted, as it always "
                        "left the `keras` package (TensorFlow's DoNotConvert rules predate the tf_keras name)")
    parser.add_argument("--tfma-generic", action="store_true",
                        help="try the suggested fix: evaluate with ModelSpec.model_type tf_generic")
    args = parser.parse_args(argv)
    mark("interpreter ready")
    import slipway  # noqa: F401  (environment defaults before tensorflow)

    if args.skip_autograph_tf_keras:
        from tensorflow.python.autograph.core import config as autograph_config

        autograph_config.CONVERSION_RULES = (autograph_config.DoNotConvert("tf_keras"),
                                             *autograph_config.CONVERSION_RULES)

    summary = json.loads((Path(args.workdir) / "summary.json").read_text())
    profiler = None
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    with tempfile.TemporaryDirectory(prefix=f"profile-{args.step}-") as scratch:
        for attempt in range(2 if args.repeat_in_process else 1):
            mark(f"run {attempt + 1} begin")
            if args.step == "train":
                run_train(summary, Path(scratch) / str(attempt), not args.no_checkpoints)
            else:
                run_evaluate(summary, Path(scratch) / str(attempt), args.tfma_generic)
            mark(f"run {attempt + 1} end")
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    print("   since start   wall+    CPU+  main-thread CPU+  event")
    for event, since_start, wall, cpu, thread in phases(start):
        print(f"{since_start:12.2f} s {wall:7.2f} {cpu:7.2f} {thread:9.2f}        {event}")
    print(json.dumps({"phases": [[e, round(a, 3), round(c, 3), round(t, 3)] for e, a, _, c, t in phases(start)]}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
