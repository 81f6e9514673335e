"""The descriptions of the parameters several components share, written once. A component's docstring says
`lineage_store: <shared>`; shared_descriptions puts the text in before kfp reads the docstring into the compiled
YAML's input descriptions (the KFP UI shows them)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

# Each description as the lines of a docstring entry (kept as lines so the compiled descriptions keep their breaks).
SHARED = {
    "lineage_store": (
        "The lineage store to record to: ML Metadata (grpc://host:port on a cluster, sqlite:///path",
        "locally) or an MLflow tracking server (mlflow://host:port); empty means the SLIPWAY_LINEAGE",
        "environment variable, else nothing is recorded (said once).",
    ),
    "beam_pipeline_args": (
        'Beam pipeline options, as TFX components take them (e.g. ["--runner=FlinkRunner",',
        '"--flink_master=host:8081", "--temp_location=s3://bucket/tmp"]: a runner whose workers run elsewhere',
        "needs --temp_location, an object-store URI they share); empty runs Beam's DirectRunner in this step's",
        "pod, in process or one worker process per core as the row count makes faster.",
    ),
}
_PLACEHOLDER = re.compile(r"^(?P<indent> *)(?P<name>\w+): <shared>$", re.M)
Function = TypeVar("Function", bound=Callable)


def shared_descriptions(function: Function) -> Function:
    """The function, its docstring's `<shared>` entries replaced by their SHARED text (KeyError: none for that
    parameter, a bug caught at import)."""

    def entry(match: re.Match) -> str:
        indent, name = match["indent"], match["name"]
        return f"{indent}{name}: " + f"\n{indent}    ".join(SHARED[name])

    function.__doc__ = _PLACEHOLDER.sub(entry, function.__doc__ or "")
    return function
