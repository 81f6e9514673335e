"""`slipway run`'s arguments checked before anything heavy is imported (kfp, TensorFlow through the module file), so
a bad one is refused in well under a second with one line naming its flag (the CLI exits 2).

What is checked here is what the steps would refuse later, after the steps before them ran: the JSON flags' shapes
and types (--hparams and --trial-hparams also against the module's hyperparameters() defaults), --splits, --skew,
--drift, --eval-settings, the label being a column of a CSV file's header, and the workdir being creatable and
writable. Only the standard library and Slipway's plain-Python parsers are imported.
"""

from __future__ import annotations

import argparse
import ast
import bz2
import difflib
import gzip
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


def check_run_arguments(args: argparse.Namespace, data: Path, label: str, module: Path, images: bool) -> None:
    """Refuse the first bad argument of `slipway run` with a SlipwayError naming its flag.

    Args:
        args: The parsed command line.
        data: The data file or folder (already checked to exist).
        label: The label column.
        module: The module file (already checked to exist).
        images: Whether the images pipeline runs (its label is no CSV column).
    """
    parsed = {name: json_object(flag, getattr(args, name)) for flag, name in JSON_FLAGS}
    defaults = literal_hyperparameters(module)
    check_defaults(module, defaults)
    for name in ("hyperparameters", "trial_hyperparameters"):
        check_hyperparameters(RUN_FLAGS[name], parsed[name], defaults)
    from slipway.components.validate.executor import parse_thresholds

    for name in ("skew_thresholds", "drift_thresholds"):
        parse_thresholds(RUN_FLAGS[name], parsed[name])
    check_eval_settings(parsed["eval_settings"], label)
    if args.splits:
        from slipway.components.ingest.splits import parse_splits

        parse_splits(args.splits, what=RUN_FLAGS["splits"])
    if not images:
        check_data_name(data, args.data_format)
        file = _first_csv_file(data, args.data_format)
        header = _header(file) if file else None  # the first line only, read once for the checks below
        check_label(file, header, label)
        check_split_column(args, file, header, label)
    check_workdir(Path(args.workdir))


# Most bytes a file the CLI reads whole before the run may have (a module file, a search spec): source text is a
# few KB; anything this big is a wrong path (a data file given as --module), refused before it is read.
TEXT_FILE_LIMIT = 4 * 2**20


def check_text_file(path: Path, what: str, flag: str) -> None:
    """A file read whole before the run (the module, the search spec) is under TEXT_FILE_LIMIT, one line if not."""
    size = path.stat().st_size
    if size > TEXT_FILE_LIMIT:
        raise SlipwayError(f"{what} {path}: {size / 2**20:.1f} MiB is no source text ({flag} takes a Python or "
                           f"YAML file of a few KB; was a data file given?)")


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


# -- evaluation settings ----------------------------------------------------------------------------------------


def check_eval_settings(settings: dict, label: str) -> None:
    """--eval-settings: its keys, thresholds (on a metric of some task: the task is known after ingest) and slices."""
    from slipway.components.evaluate import eval_settings, tfma_config

    unknown = set(settings) - eval_settings.SETTINGS_KEYS
    if unknown:
        raise SlipwayError(f"--eval-settings: unknown keys {sorted(unknown)} (allowed: "
                           f"{sorted(eval_settings.SETTINGS_KEYS)})")
    metrics = tfma_config.BINARY_METRICS + tfma_config.MULTICLASS_METRICS + tfma_config.REGRESSION_METRICS
    try:
        eval_settings.parse_thresholds(settings.get("thresholds") or {}, list(dict.fromkeys(n for _, n in metrics)))
        eval_settings.parse_slices(settings.get("slices") or [], {}, "", label)
    except SlipwayError as exc:
        raise SlipwayError(f"--eval-settings: {str(exc).removeprefix('evaluate settings: ')}") from None


# -- the label in the data's header -----------------------------------------------------------------------------


def check_data_name(data: Path, data_format: str) -> None:
    """A data file --data-format auto would not read (a workbook, JSON, another extension) is refused before the
    run, with what to do instead; ingest refuses the same files inside a folder."""
    from slipway.components.ingest import csv_shape

    if data_format == "auto" and data.is_file():
        csv_shape.check_tabular_name(data, RUN_FLAGS["data_format"], source=f"{RUN_FLAGS['data']} {data}")


def check_label(file: Path | None, header: list[str] | None, label: str) -> None:
    """The label is a column of the (first) CSV file's header (None: a Parquet file, a named pipe or a zstd file,
    left to ingest)."""
    if not header or label in header:
        return
    lowered = {name.lower(): name for name in reversed(header)}  # the first of names differing in case only
    close = difflib.get_close_matches(label.lower(), list(lowered), n=1, cutoff=0.75)  # a case difference: 1.0
    hint = f"did you mean '{lowered[close[0]]}'?" if close else _columns(header)
    raise SlipwayError(f"--label {label}: no such column in {file} ({hint})")


def _columns(header: list[str]) -> str:
    """`columns: a, b, ...`: the header's first 12 names, for an error naming a column that is not there."""
    return f"columns: {', '.join(header[:12])}{', ...' if len(header) > 12 else ''}"


def check_split_column(args: argparse.Namespace, file: Path | None, header: list[str] | None, label: str) -> None:
    """--split-column's form, that --key is not given with it, and its column in the CSV header (ingest checks
    the values)."""
    from slipway.components.ingest.splits import parse_split_column

    by_column = parse_split_column(args.split_column, RUN_FLAGS["split_column"])
    if by_column is None:
        return
    by_column.check_beside(args.key, RUN_FLAGS["key"], label)
    if header and by_column.column not in header:
        raise SlipwayError(f"{by_column.what} {by_column.spec!r}: no column '{by_column.column}' in {file} "
                           f"({_columns(header)})")


def _first_csv_file(data: Path, data_format: str) -> Path | None:
    from slipway.components.ingest import csv_shape

    if data_format not in ("auto", "csv"):
        return None
    if data.is_dir():  # the first file ingest reads as CSV, as find_input_files lists them
        files = sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        data = next((p for p in files if data_format == "csv" or csv_shape.is_csv_name(p)), data)
    if not data.is_file() or (data_format == "auto" and not csv_shape.is_csv_name(data)):
        return None
    return data


def _header(file: Path) -> list[str] | None:
    """The CSV file's column names, read from its first line with the delimiter ingest would sniff."""
    from slipway.components.ingest import csv_shape

    try:
        compression = csv_shape.compression_of(file)
        opener = {None: open, "gzip": gzip.open, "bz2": bz2.open}.get(compression)
        if opener is None:
            return None  # zstd: no reader in the standard library
        with opener(file, "rt", encoding="utf-8-sig", errors="replace", newline="") as f:
            line = f.readline(csv_shape.HEADER_BYTES)
    except (OSError, EOFError):
        return None  # ingest reports the file
    if not line.strip():
        return None
    return csv_shape.header_row(line, f"--data {file}", truncated=len(line) == csv_shape.HEADER_BYTES)[1] or None


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
