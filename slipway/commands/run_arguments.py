"""`slipway run`'s arguments checked before anything heavy is imported (kfp, TensorFlow through the module file), so
a bad one is refused in well under a second with one line naming its flag (the CLI exits 2).

What is checked here is what the steps would refuse later, after the steps before them ran, and what belongs to no
one component: the JSON flags' shapes and types (--hparams and --trial-hparams also against the module's
hyperparameters() defaults) and the workdir being creatable and writable; each component's own checks (--splits,
--skew, --drift, --eval-settings, the label being a column of a CSV file's header...) are its spec's preflight hook.
Only the standard library and Slipway's plain-Python parsers are imported.
"""

from __future__ import annotations

import argparse
import ast
import os
import tempfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from slipway.core.errors import SlipwayError
from slipway.core.json_text import json_object
from slipway.local.workdir_claim import check_unclaimed
from slipway.pipelines.settings import RUN_FLAGS

# The parameters given as JSON objects, by their flags.
JSON_FLAGS = tuple((RUN_FLAGS[name], name) for name in ("hyperparameters", "trial_hyperparameters", "skew_thresholds",
                                                         "drift_thresholds", "deploy_cluster", "eval_settings"))
# How a hyper-parameter's type is named in an error, by the type of the module's default.
TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
              dict: "a JSON object"}


def check_run_arguments(values: dict[str, Any], given: dict[str, Any], module: Path, workdir: Path) -> None:
    """Refuse the first bad argument no one component checks with a SlipwayError naming its flag: the JSON flags'
    shapes, --hparams and --trial-hparams against the module's literal hyperparameters() defaults, the workdir.
    (Each component's own checks are its spec's preflight hook.)

    Args:
        values: The pipeline arguments the flags made.
        given: What the flags gave, also for parameters this pipeline does not take (checked all the same: a
            --trial-hparams given without --tune is still refused when it would be wrong).
        module: The module file (already checked to exist).
        workdir: The run's workdir (not created yet).
    """
    parsed = {name: json_object(flag, values.get(name, given.get(name))) for flag, name in JSON_FLAGS
              if values.get(name, given.get(name)) is not None}
    defaults = literal_hyperparameters(module)
    check_defaults(module, defaults)
    for name in ("hyperparameters", "trial_hyperparameters"):
        if name in parsed:
            check_hyperparameters(RUN_FLAGS[name], parsed[name], defaults)
    check_workdir(workdir)


# -- hyper-parameters -----------------------------------------------------------------------------------------


def literal_hyperparameters(module: Path) -> dict | None:
    """The module's hyperparameters() defaults read from its source, without importing it (that imports
    TensorFlow): when the function's body is one `return {...}` of literals, as in every worked example. None when
    they cannot be read so (computed defaults): the CLI checks them after it imported the module
    (check_module_hyperparameters)."""
    try:
        tree = ast.parse(module.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return None  # the module check names the problem
    function = next((node for node in tree.body if isinstance(node, ast.FunctionDef)
                     and node.name == "hyperparameters"), None)
    if function is None:
        return {}
    body = [node for node in function.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    try:
        value = ast.literal_eval(body[0].value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def check_defaults(module: Path | str, defaults: dict | None) -> None:
    """The module's hyperparameters() defaults as train checks them (None: unknown yet), named as the module's."""
    from slipway.components.train.model_module import resolve_hyperparameters

    try:
        resolve_hyperparameters(SimpleNamespace(hyperparameters=lambda: dict(defaults or {})), {})
    except SlipwayError as exc:
        raise SlipwayError(f"module file {module}: hyperparameters(): {exc}") from None


def check_hyperparameters(flag: str, given: dict, defaults: dict | None) -> None:
    """Slipway's own hyper-parameters checked as train checks them; the module's, by the type of their default
    (None: defaults unknown, only Slipway's are checked)."""
    from slipway.components.train.model_module import resolve_hyperparameters

    try:  # over Slipway's defaults only, so that an error is about a given value
        resolve_hyperparameters(SimpleNamespace(hyperparameters=dict), given)
    except SlipwayError as exc:
        raise SlipwayError(f"{flag}: {exc}") from None
    for name, value in given.items():
        default = (defaults or {}).get(name)
        if default is not None and not _same_type(default, value):
            raise SlipwayError(f"{flag}: hyperparameter {name!r} must be {_type_word(default)} like the module's "
                               f"default {default!r}, got {value!r}")


def check_module_hyperparameters(module: ModuleType, args: argparse.Namespace) -> None:
    """--hparams and --trial-hparams against the defaults the imported module's hyperparameters() returns."""
    from slipway.core.modules import optional_dict

    defaults = optional_dict(module, "hyperparameters")
    check_defaults(module.__file__ or "", defaults)
    for name in ("hyperparameters", "trial_hyperparameters"):
        check_hyperparameters(RUN_FLAGS[name], json_object(RUN_FLAGS[name], getattr(args, name)), defaults)


def _same_type(default: Any, value: Any) -> bool:
    """Whether a given value can stand where the module's default stands (an integer for a float is fine)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(default, float):
        return isinstance(value, int | float)
    if isinstance(default, list | tuple):
        return isinstance(value, list)
    return isinstance(value, type(default))


def _type_word(default: Any) -> str:
    kind = list if isinstance(default, tuple) else type(default)
    return TYPE_WORDS.get(kind, kind.__name__)


# -- the workdir ------------------------------------------------------------------------------------------------


def check_workdir(workdir: Path) -> None:
    """The workdir can be created and written, judged without creating it (another argument may still be refused,
    and a refused run leaves nothing behind): its nearest existing folder must be a writable folder (a folder made
    in it and removed at once), and an existing workdir must not be held by a running run."""
    existing = workdir.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == workdir.absolute() else f"cannot be created: {existing} is"
        raise SlipwayError(f"--workdir {workdir}: {what} a file, not a folder")
    where = "" if existing == workdir.absolute() else f" (in {existing})"
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SlipwayError(f"--workdir {workdir}: not writable{where}")
    try:  # what access() cannot tell (a read-only mount, sysfs, root): a folder made and removed at once
        os.rmdir(tempfile.mkdtemp(prefix=".slipway-check-", dir=existing))
    except OSError as exc:
        reason = exc.strerror or exc
        raise SlipwayError(f"--workdir {workdir}: cannot be created or written{where} ({reason})") from None
    if existing == workdir.absolute():
        check_unclaimed(workdir)


def create_workdir(workdir: Path) -> None:
    """Create the workdir and write a file in it, with one line naming the flag where that fails (a read-only
    file system, a path only root may write: what check_workdir cannot tell without trying)."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=workdir):
            pass
    except OSError as exc:
        raise SlipwayError(f"--workdir {workdir}: cannot be created or written ({exc.strerror or exc})") from None
