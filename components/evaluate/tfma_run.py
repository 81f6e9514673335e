"""Running TFMA: its extract-evaluate-write transform in a Beam pipeline over Slipway's own read of the split, with
the candidate (and the baseline) model loaded as TFMA's shared models; a failure becomes one line naming the
model and the input."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slipway.components.evaluate.tfma_config import BASELINE, CANDIDATE
from slipway.core import beam as beam_options
from slipway.core import storage
from slipway.core.beam import storage as beam_storage
from slipway.core.beam.examples import record_batches
from slipway.core.beam.pipelines import new_pipeline
from slipway.core.errors import SlipwayError
from slipway.core.tensorflow_setup import leave_keras_unconverted

if TYPE_CHECKING:
    import tensorflow_model_analysis as tfma


def run_tfma(eval_config: tfma.EvalConfig, model_dir: str, baseline_model_dir: str, files: list[str],
             output_dir: str, data_dir: Path, beam_args: list[str], model_name: str) -> None:
    """TFMA's own extract-evaluate-write transform over our own read, rather than run_model_analysis, whose read
    batches records adaptively by timing: TFMA's floating metric sums can then differ in the last bits between
    two runs on the same data (beam_options.RECORD_BATCH_SIZE). Paths as the runner's workers open them
    (beam_storage); model_name: the model as errors name it."""
    import tensorflow_model_analysis as tfma
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
        with _short_array_reprs(), new_pipeline(beam_args) as pipeline:
            _ = (pipeline
                 | "Read" >> record_batches(source, files, beam_options.RECORD_BATCH_SIZE, beam_args)
                 | "ExtractEvaluateAndWriteResults" >> tfma.ExtractEvaluateAndWriteResults(
                     eval_config=eval_config, eval_shared_model=shared, output_path=str(output_dir),
                     display_only_data_location=pattern, display_only_file_format="tfrecords"))
    except Exception as exc:  # TFMA/Beam wrap model errors in long traces: give one line that names the input
        # (a remote runner's lost job service is a gRPC error whose first line says nothing: its code and details)
        raise SlipwayError(f"model {model_name}: TFMA evaluation on {pattern} failed: "
                           f"{beam_storage.failure_reason(exc)}") from exc


def _short_array_reprs():
    """numpy's printing summarized for as long as TFMA runs. TFMA calls the serving signature with the batch of
    serialized examples as one positional tensor; TensorFlow first tries to bind it as the signature's keyword,
    fails, and formats the whole batch into that error's message (numpy prints up to 1,000 values whole, and a batch
    is 1,000 records) before it calls the signature by position: 0.28 s of a taxi evaluate. Nothing TFMA writes is
    printed by numpy."""
    import numpy as np

    return np.printoptions(threshold=8, edgeitems=3)
