"""The steps' Beam pipelines, made one way (`new_pipeline`), with what Beam re-reads about its own objects remembered.

Beam asks the same questions again and again while it builds a pipeline, translates it for the runner and makes
a bundle processor for every bundle; each answer is fixed for as long as the object lives (bench/RESULTS.md):
- the signature of every method of a DoFn (inspect.signature, through core.get_function_args_defaults), whenever
  it asks whether the DoFn keeps state or timers: one taxi transform made 72,000 such reads, 1.5 of its 19 s.
  Only plain functions and methods bound to them are remembered, weakly (a function pickled by value and loaded
  for each bundle is forgotten with it); any other callable is read every time, as Beam does;
- a DoFn's state and timer specs (userstate.get_dofn_specs: dir() of the DoFn and every method's defaults), per
  DoFn object: about 2,300 calls, 0.4 s of a taxi transform;
- a view of the pipeline options as one options class (PipelineOptions.view_as), per options object and class:
  each view parses the pipeline's flags again with a parser of every registered option, and Pipeline.apply asks
  for two on every transform: 1,200 views, 1.0 s of a taxi transform. A view keeps no value of its own (every
  view of an options object reads and writes that object's values), so one view per class serves every caller.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Sequence

_installed = threading.Lock()
_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> {bound: (args, defaults)}
_specs: dict[int, tuple[weakref.ref, tuple[frozenset, frozenset]]] = {}  # id(DoFn) -> (its ref, its specs)
_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # options -> {options class: view}


def new_pipeline(beam_args: Sequence[str]):
    """A Beam pipeline with these options (BeamChoice.args), DoFn signatures remembered."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    remember_what_beam_rereads()
    return beam.Pipeline(options=PipelineOptions(list(beam_args)))


def remember_what_beam_rereads() -> None:
    """Make Beam read each function's signature, each DoFn's specs and each options view once in this process
    (idempotent)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms import core, userstate

    with _installed:
        if getattr(core.get_function_args_defaults, "_slipway_remembers", False):
            return
        core.get_function_args_defaults = _remembering(core.get_function_args_defaults)
        userstate.get_dofn_specs = _remembering_specs(userstate.get_dofn_specs)
        PipelineOptions.view_as = _remembering_views(PipelineOptions.view_as)


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


def _remembering_specs(read: Callable) -> Callable:
    """get_dofn_specs by the DoFn's identity (a DoFn may compare equal to another), while that DoFn lives; an
    object that cannot be referenced weakly is read every time, and an error (duplicate parameters) is raised
    every time, as Beam does."""

    def get_dofn_specs(dofn):
        key = id(dofn)
        known = _specs.get(key)
        if known is not None and known[0]() is dofn:
            state, timers = known[1]
            return set(state), set(timers)  # sets of their own for each caller, as from the original
        state, timers = read(dofn)
        try:
            ref = weakref.ref(dofn, lambda _, key=key: _specs.pop(key, None))
        except TypeError:
            return state, timers
        _specs[key] = (ref, (frozenset(state), frozenset(timers)))
        return set(state), set(timers)

    get_dofn_specs.__wrapped__ = read
    return get_dofn_specs


def _remembering_views(view_as: Callable) -> Callable:
    def remembered_view_as(self, cls):
        try:
            known = _views.setdefault(self, {})
        except TypeError:  # an options object that cannot be referenced weakly
            return view_as(self, cls)
        view = known.get(cls)
        if view is None:
            view = known[cls] = view_as(self, cls)
        return view

    remembered_view_as.__wrapped__ = view_as
    remembered_view_as.__doc__ = view_as.__doc__
    return remembered_view_as
