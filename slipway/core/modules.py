"""Loading the user's module file (TFX module-file convention) and checking what it defines.

A module file is one Python file per use case. Slipway looks for:
  preprocessing_fn(inputs) -> dict            TFT preprocessing (required by transform)
  build_keras_model(hparams, tf_transform_output, label_key, num_classes[, task]) -> tf.keras.Model
                                                (required by train; `task` "classification" or "regression" is
                                                passed when the function takes it, and regression requires it)
  eval_settings() -> dict                      optional: slices and thresholds for evaluate
  hyperparameters() -> dict                    optional: defaults merged under the JSON hyper-parameters
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from slipway.core.errors import SlipwayError


def load_module(module_file: str | os.PathLike, required: tuple[str, ...] = ()) -> ModuleType:
    """Import a user module file by path; fail with one line naming the file and what is missing."""
    path = Path(module_file)
    if not str(module_file):
        raise SlipwayError("module file: no path given")
    if not path.is_file():
        raise SlipwayError(f"module file {path}: not found")
    if path.suffix != ".py":
        raise SlipwayError(f"module file {path}: expected a .py file")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    name = f"slipway_user_module_{path.stem}_{digest}"
    if name in sys.modules:
        module = sys.modules[name]
    else:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SlipwayError(f"module file {path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise SlipwayError(f"module file {path}: syntax error on line {exc.lineno}: {exc.msg}") from exc
        except Exception as exc:  # the user's code: report, don't crash with a traceback wall
            raise SlipwayError(f"module file {path}: import failed: {type(exc).__name__}: {exc}") from exc
        sys.modules[name] = module
    missing = [fn for fn in required if not callable(getattr(module, fn, None))]
    if missing:
        raise SlipwayError(f"module file {path}: does not define {', '.join(missing)}")
    return module


# What the training pipelines call: transform preprocessing_fn, train and tune's trials build_keras_model.
PIPELINE_FUNCTIONS = ("preprocessing_fn", "build_keras_model")
OPTIONAL_FUNCTIONS = ("eval_settings", "hyperparameters")


def check_pipeline_module(module_file: str | os.PathLike) -> ModuleType:
    """Load the module file as the steps will and check that it defines every function they call, so a missing
    one is named before a run starts rather than in its transform or train step (which check again)."""
    module = load_module(module_file, required=PIPELINE_FUNCTIONS)
    for name in OPTIONAL_FUNCTIONS:
        value = getattr(module, name, None)
        if value is not None and not callable(value):
            raise SlipwayError(f"module file {module_file}: {name} is a {type(value).__name__}, not a function; "
                               f"define {name}() returning it")
    return module


def optional_dict(module: ModuleType, fn_name: str) -> dict:
    """Call an optional zero-argument function of the module that returns a dict; {} if absent."""
    fn = getattr(module, fn_name, None)
    if fn is None:
        return {}
    value = fn()
    if not isinstance(value, dict):
        raise SlipwayError(f"module file {module.__file__}: {fn_name}() must return a dict, got {type(value).__name__}")
    return value
