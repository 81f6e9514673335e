"""The trainer's command line, defined once: `python -m slipway.components.train.distributed FLAGS`.

Every launcher of the trainer builds it here: train's local Horovod ranks (horovodrun) and its MPIJob (mpirun in
the launcher pod), and tune's local trial processes and Katib trials. components/train/distributed.py parses it;
its test builds a command with every flag set and parses it with that parser, so the two cannot drift apart.

Empty values are left out (the entry point's defaults apply), except --hyperparameters, which is always given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

ENTRY_POINT_MODULE = "slipway.components.train.distributed"
NO_EXPORT_FLAG = "--no-export"


def entry_point(python: str = "python") -> list[str]:
    """`python -m slipway.components.train.distributed` with the given interpreter."""
    return [python, "-m", ENTRY_POINT_MODULE]


def flag_name(field_name: str) -> str:
    """The command-line flag of a TrainerCommand field: model_dir -> --model-dir."""
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class TrainerCommand:
    """The trainer's flags. Paths may be local or object-store URIs (s3://); hyperparameters is a JSON object
    (text, or a mapping serialised with sorted keys), already merged with the defaults by the caller, or a
    template with placeholders (Katib). no_export: train and report metrics only (tuning trials)."""

    transformed_examples: str
    transform_graph: str
    module_file: str
    model_dir: str
    tensorboard_dir: str = ""
    checkpoint_dir: str = ""
    hyperparameters: str | Mapping[str, Any] = "{}"
    digest_dir: str = ""
    no_export: bool = False

    def hyperparameters_text(self) -> str:
        if isinstance(self.hyperparameters, Mapping):
            return json.dumps(dict(self.hyperparameters), sort_keys=True)
        return self.hyperparameters

    def args(self) -> list[str]:
        """The flags alone, in field order (the part after the entry point)."""
        out: list[str] = []
        for item in fields(self):
            if item.name == "no_export":
                continue
            value = self.hyperparameters_text() if item.name == "hyperparameters" else getattr(self, item.name)
            if value:
                out += [flag_name(item.name), str(value)]
        if self.no_export:
            out.append(NO_EXPORT_FLAG)
        return out

    def command(self, python: str = "python") -> list[str]:
        """The whole argv: entry_point(python) followed by args()."""
        return [*entry_point(python), *self.args()]


def flags() -> list[str]:
    """Every flag a TrainerCommand can produce (what the entry point's parser must accept)."""
    return [NO_EXPORT_FLAG if item.name == "no_export" else flag_name(item.name) for item in fields(TrainerCommand)]
