"""The evaluate step's inputs checked before TFMA starts: the examples' description (label, problem type, classes,
the split's files) and each model's own description against it, so a mismatch is one clear error rather than a
TFMA failure deep in a Beam pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slipway.core.artifacts import examples_meta, read_json, split_dir, split_files
from slipway.core.errors import SlipwayError
from slipway.core.tasks import CLASSIFICATION, task_of

MODEL_META = "model_meta.json"


@dataclass(frozen=True)
class Examples:
    """The examples to evaluate on, as their examples_meta.json describes them."""

    path: str
    meta: dict
    label: str
    task: str
    num_classes: int  # 0 for regression
    classes: list[str]
    files: list[str]  # the split's shards, in order

    @property
    def binary(self) -> bool:
        return self.num_classes == 2


def read_examples(examples_dir: str, split: str) -> Examples:
    """The examples' description and the split's files; an error when the label, the classes or the split are
    missing."""
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
    return Examples(examples_dir, meta, label, task, num_classes, classes, files)


def check_model(path: str, what: str, examples: Examples) -> None:
    """A SavedModel folder whose model_meta.json (when it has one) matches the examples: problem type, classes and
    label. what: the model as errors name it ("model", "baseline model")."""
    root = Path(path)
    if not (root / "saved_model.pb").is_file():
        raise SlipwayError(f"{what} {path}: no saved_model.pb (not a TF SavedModel folder)")
    meta_path = root / MODEL_META
    if not meta_path.is_file():
        return  # a foreign SavedModel: trust the examples' label description
    model_meta = read_json(meta_path)
    examples_dir, task = examples.path, examples.task
    model_task = task_of(model_meta, f"{what} {path}")
    if model_task != task:
        raise SlipwayError(f"{what} {path}: a {model_task} model, but examples {examples_dir} are {task}")
    model_k = model_meta.get("num_classes")
    if model_k is not None and int(model_k) != examples.num_classes:
        raise SlipwayError(
            f"{what} {path}: model has {model_k} classes but examples {examples_dir} have {examples.num_classes}"
        )
    model_classes = model_meta.get("label_classes")
    if model_classes and [str(c) for c in model_classes] != examples.classes:
        raise SlipwayError(
            f"{what} {path}: label_classes {model_classes} differ from examples {examples_dir} ({examples.classes})"
        )
    model_label = model_meta.get("label")
    if model_label and model_label != examples.label:
        raise SlipwayError(
            f"{what} {path}: trained on label '{model_label}', examples {examples_dir} have '{examples.label}'"
        )
