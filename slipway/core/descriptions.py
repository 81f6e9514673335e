"""The descriptions of the parameters several components share, written once here. Each component's docstring
carries the text as written, because kfp embeds the component function's source in the compiled YAML (a
placeholder filled in at import time would show there as a placeholder); `slipway compile` refuses a component
whose entry differs (differing)."""

from __future__ import annotations

from collections.abc import Callable

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

# resolve_baseline reads the lineage store (for the latest blessed model) where every other component records to it
OWN_TEXT = {("resolve_baseline", "lineage_store")}


def differing(function: Callable) -> list[str]:
    """The parameters of SHARED whose entry in the function's docstring is not SHARED's text (spacing aside)."""
    import docstring_parser

    entries = {p.arg_name: " ".join((p.description or "").split())
               for p in docstring_parser.parse(function.__doc__ or "").params}
    return sorted(name for name, lines in SHARED.items()
                  if name in entries and (function.__name__, name) not in OWN_TEXT
                  and entries[name] != " ".join(" ".join(lines).split()))
