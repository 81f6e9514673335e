"""Benchmark data-parallel training on the image pipeline's data: plain process, 1 and 2 Horovod ranks.

    .venv/bin/python bench/bench_horovod.py [--epochs 4] [--write-results]

Prints samples/s for a plain single process (no Horovod), 1 rank and 2 ranks under horovodrun (Gloo), the share
of the 2-rank training wall time during which an all-reduce was in flight (Horovod timeline), and whether both
ranks ended with bitwise identical weights.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from bench_pipeline import emit

import slipway  # noqa: F401  (environment defaults before tensorflow)


def prepare(root: Path) -> dict:
    """Digits -> ingest -> schema -> transform, in this process: the inputs every variant trains on."""
    import tensorflow_data_validation as tfdv

    from slipway.components.ingest import executor as ingest
    from slipway.components.transform import executor as transform
    from slipway.data import digits
    from slipway.pipelines.modules import module_path

    ingest.run(data=str(digits.digits_folder()), output_dir=str(root / "examples"), label="label",
               splits="train:4,eval:1")
    stats = tfdv.generate_statistics_from_tfrecord(str(root / "examples" / "Split-train" / "*.gz"))
    (root / "schema").mkdir()
    tfdv.write_schema_text(tfdv.infer_schema(stats), str(root / "schema" / "schema.pbtxt"))
    module = str(module_path("image_cnn.py"))
    transform.run(examples_dir=str(root / "examples"), schema_dir=str(root / "schema"), module_file=module,
                  transform_graph_dir=str(root / "graph"), transformed_examples_dir=str(root / "tx"))
    return {"module": module}


def train(root: Path, module: str, name: str, workers: int, hparams: dict, horovod: bool) -> dict:
    from slipway.components.train import executor

    out = root / name
    if horovod and workers == 1:  # one rank under horovodrun: Horovod's own overhead without a peer
        from slipway.core.training.trainer_command import TrainerCommand

        command = TrainerCommand(str(root / "tx"), str(root / "graph"), module, str(out / "model"),
                                 str(out / "tb"), hyperparameters={**hparams, "seed": 42}, digest_dir=str(out / "d"))
        started = time.perf_counter()
        executor.run_horovod_locally(1, command)
        meta = json.loads((out / "model" / "model_meta.json").read_text())
        return {**meta, "seconds": time.perf_counter() - started}
    return executor.run(transformed_examples_dir=str(root / "tx"), transform_graph_dir=str(root / "graph"),
                        module_file=module, model_dir=str(out / "model"), tensorboard_dir=str(out / "tb"),
                        hyperparameters=hparams, workers=workers, digest_dir=str(out / "d"))


def allreduce_share(timeline: Path) -> float:
    """Share of the span between the first and last all-reduce during which at least one was running."""
    text = timeline.read_text().strip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    open_at: dict[tuple, float] = {}
    intervals = []
    for event in events:
        if not isinstance(event, dict) or "ts" not in event:
            continue
        key = (event.get("pid"), event.get("tid"))
        if event.get("ph") == "B" and event.get("name") == "ALLREDUCE":
            open_at[key] = event["ts"]
        elif event.get("ph") == "E" and key in open_at:
            intervals.append((open_at.pop(key), event["ts"]))
    if not intervals:
        return float("nan")
    intervals.sort()
    covered, end = 0.0, intervals[0][0]
    for start, stop in intervals:
        start = max(start, end)
        if stop > start:
            covered += stop - start
            end = stop
    return covered / (intervals[-1][1] - intervals[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="slipway-bench-hvd-"))
    module = prepare(root)["module"]
    hparams = {"epochs": args.epochs, "batch_size": 32}
    plain = train(root, module, "plain", 1, hparams, horovod=False)
    one = train(root, module, "one", 1, hparams, horovod=True)
    timeline = root / "timeline.json"
    os.environ["HOROVOD_TIMELINE"] = str(timeline)
    two = train(root, module, "two", 2, hparams, horovod=True)
    del os.environ["HOROVOD_TIMELINE"]
    digests = {p.read_text() for p in (root / "two" / "d").glob("weights-rank*.sha256")}
    rows = [
        ("plain single process, samples/s", f"{plain['samples_per_second']:,.0f}", "no Horovod"),
        ("1 Horovod rank, samples/s", f"{one['samples_per_second']:,.0f}",
         f"{one['samples_per_second'] / plain['samples_per_second']:.2f}x plain"),
        ("2 Horovod ranks, samples/s (both)", f"{two['samples_per_second']:,.0f}",
         f"{two['samples_per_second'] / plain['samples_per_second']:.2f}x plain; 2 cores, 1 per rank"),
        ("2 ranks: share of time with an all-reduce in flight", f"{100 * allreduce_share(timeline):.0f} %",
         "Horovod timeline"),
        ("2 ranks: final weights identical", "yes" if len(digests) == 1 else "NO", f"{len(digests)} digest(s)"),
        ("2 ranks: val accuracy after training", f"{two['metrics'].get('val_accuracy', float('nan')):.3f}", ""),
    ]
    header = (f"## {time.strftime('%Y-%m-%d')} — Horovod on digits (8x8, 1,437 train images, {args.epochs} "
              f"epochs, batch 32 per rank), {platform.machine()}, {len(os.sched_getaffinity(0))} cores")
    emit(header, rows, args.write_results)


if __name__ == "__main__":
    main()
