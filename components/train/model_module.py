"""The model module file as train sees it: loaded (it must define build_keras_model) and its hyper-parameters
resolved (Slipway's defaults <- the module's hyperparameters() <- the given JSON), checked.

Shared by executor.py (before launching), trainer.py and distributed.py (in every rank); it imports neither, so
executor -> trainer -> model_module and distributed -> model_module, without a cycle.
"""

from __future__ import annotations

import inspect
import math

from slipway.core.errors import SlipwayError, option_name
from slipway.core.json_text import json_object
from slipway.core.modules import load_module, optional_dict
from slipway.core.tasks import REGRESSION

DEFAULT_HYPERPARAMETERS = {"epochs": 5, "batch_size": 128, "learning_rate": 0.001, "seed": 42}

_POSITIVE_INTS = ("epochs", "batch_size")
_JSON_SCALARS = (str, int, float, bool, type(None))


def _is_json_value(value) -> bool:
    if isinstance(value, _JSON_SCALARS):
        return not (isinstance(value, float) and not math.isfinite(value))
    if isinstance(value, list | tuple):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def resolve_hyperparameters(module, given: dict | str | None) -> dict:
    """Defaults <- the module's hyperparameters() <- the given dict (or JSON string); checked."""
    given = json_object(option_name("hyperparameters"), given)
    hparams = {**DEFAULT_HYPERPARAMETERS, **optional_dict(module, "hyperparameters"), **given}
    for name, value in hparams.items():
        if not isinstance(name, str) or not _is_json_value(value):
            raise SlipwayError(f"hyperparameter {name!r}: unsupported value {value!r} ({type(value).__name__})")
    for name in _POSITIVE_INTS:
        value = hparams[name]
        if isinstance(value, float) and value.is_integer():
            value = hparams[name] = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SlipwayError(f"hyperparameter {name!r}: must be a positive integer, got {value!r}")
    lr = hparams["learning_rate"]
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        raise SlipwayError(f"hyperparameter 'learning_rate': must be a positive number, got {lr!r}")
    hparams["learning_rate"] = float(lr)
    seed = hparams["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SlipwayError(f"hyperparameter 'seed': must be a non-negative integer, got {seed!r}")
    return hparams


def load_user_module(module_file: str):
    return load_module(module_file, required=("build_keras_model",))


def accepts_task(build_keras_model) -> bool:
    """Whether build_keras_model takes the `task` keyword (a `task` parameter or **kwargs)."""
    try:
        parameters = inspect.signature(build_keras_model).parameters.values()
    except (TypeError, ValueError):
        return False
    return any((p.name == "task" and p.kind != p.POSITIONAL_ONLY) or p.kind == p.VAR_KEYWORD for p in parameters)


def build_model(module, hparams: dict, tf_transform_output, label: str, num_classes: int, task: str,
                module_file: str):
    """Call the module's build_keras_model as the contract says; returns what it returned.

    The contract's four positional arguments stay as they were (hparams, tf_transform_output, label_key,
    num_classes), so modules written for classification keep working unchanged. `task` ("classification" or
    "regression") is passed as a keyword to a build_keras_model that takes it; for regression num_classes is 0
    and a build_keras_model that cannot be told the task is an error rather than a classifier trained on numbers.
    """
    build = module.build_keras_model
    if accepts_task(build):
        return build(hparams, tf_transform_output, label, num_classes, task=task)
    if task == REGRESSION:
        raise SlipwayError(
            f"module file {module_file}: the label '{label}' is a regression target, but build_keras_model takes "
            "no task argument; define build_keras_model(hparams, tf_transform_output, label_key, num_classes, "
            "task) returning one value per example (see pipelines/modules/diabetes.py)"
        )
    return build(hparams, tf_transform_output, label, num_classes)


def check_output(model, task: str, module_file: str) -> None:
    """One line when the model's output cannot be what the task needs: regression wants one value per example."""
    shape = getattr(model, "output_shape", None)
    if task != REGRESSION or not isinstance(shape, tuple):  # several outputs: let Keras report what it finds
        return
    if len(shape) > 2 or (len(shape) == 2 and shape[-1] not in (1, None)):
        raise SlipwayError(f"module file {module_file}: build_keras_model for regression must return one value per "
                           f"example (output shape [None, 1] or [None]), got {list(shape)}")
