"""The steps' Beam pipelines, made one way (`new_pipeline`), with what Beam reads of its DoFns' methods remembered.

Beam reads the signature of every method of a DoFn (inspect.signature, through
apache_beam.transforms.core.get_function_args_defaults) each time it asks whether the DoFn keeps state or timers:
when the pipeline is built, when it is translated for the runner, and again for every bundle. TFT's analysis of
the taxi data has about 250 ParDos, and one transform made 72,000 such reads: 1.5 of its 19 seconds
(bench/RESULTS.md). A function's signature does not change while the process runs, so each is read once here.
Only plain functions and methods bound to them are remembered, weakly (a function pickled by value and loaded
for each bundle is forgotten with it); any other callable is read every time, as Beam does.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Sequence

_installed = threading.Lock()
_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> {bound: (args, defaults)}


def new_pipeline(beam_args: Sequence[str]):
    """A Beam pipeline with these options (BeamChoice.args), DoFn signatures remembered."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    remember_dofn_signatures()
    return beam.Pipeline(options=PipelineOptions(list(beam_args)))


def remember_dofn_signatures() -> None:
    """Make Beam read each function's signature once in this process (idempotent)."""
    from apache_beam.transforms import core

    with _installed:
        if getattr(core.get_function_args_defaults, "_slipway_remembers", False):
            return
        core.get_function_args_defaults = _remembering(core.get_function_args_defaults)


def _remembering(read: Callable) -> Callable:
    def get_function_args_defaults(f):
        if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            function, bound = f.__func__, True
        elif isinstance(f, types.FunctionType):
            function, bound = f, False
        else:
            return read(f)
        known = _read.setdefault(function, {})
        if bound not in known:
            known[bound] = read(f)
        args, defaults = known[bound]
        return list(args), list(defaults)  # Beam's callers get lists of their own, as from the original

    get_function_args_defaults._slipway_remembers = True
    get_function_args_defaults.__wrapped__ = read
    return get_function_args_defaults
