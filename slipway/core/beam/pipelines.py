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

Two more answers depend on which modules are loaded (TensorFlow and the TFX libraries load about 6,800), and are
kept until sys.modules changes (_LoadedModules):
- which loaded submodules a function pickled by value may reach (cloudpickle's _find_imported_submodules): each
  function pickled scanned every module's name for each package it refers to, and Beam pickles a DoFn when it is
  made, when the pipeline is translated and when a bundle processor is made: 0.45 s of a taxi transform, 0.15 s of
  its evaluate (py-spy);
- the modules' globals that Beam's state cache leaves out of a value's size (through objsize, Beam's own
  dependency, on each value it caches): 6 ms a value, 0.4 s of a taxi transform, 0.1-0.2 s of its evaluate.
"""

from __future__ import annotations

import sys
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
    from apache_beam.internal.cloudpickle import cloudpickle
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.worker import statecache
    from apache_beam.transforms import core, userstate

    with _installed:
        if getattr(core.get_function_args_defaults, "_slipway_remembers", False):
            return
        core.get_function_args_defaults = _remembering(core.get_function_args_defaults)
        userstate.get_dofn_specs = _remembering_specs(userstate.get_dofn_specs)
        PipelineOptions.view_as = _remembering_views(PipelineOptions.view_as)
        cloudpickle._find_imported_submodules = _remembering_submodules(cloudpickle._find_imported_submodules)
        statecache.get_deep_size = _sized_without_rereading_modules(statecache.get_deep_size)


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


class _LoadedModules:
    """What is derived from the loaded modules, made again when sys.modules changes. A change is told by its length
    and its last entry (an import adds at the end): checking each module on every call would cost as much as what it
    saves, as Beam asks thousands of times (a taxi transform). A submodule removed since is left out as cloudpickle
    leaves it out. One lock: a multi-threaded runner's workers pickle and cache from several threads."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entered only if a module imported while sizing pickles: never blocks itself
        self.seen: tuple = ()
        self.names: tuple = ()
        # package name + "." -> {first name under it: [(position in sys.modules, submodule's name, its path's names)]}
        self.under: dict[str, dict[str, list[tuple[int, str, frozenset[str]]]]] = {}
        self.globals: frozenset[int] | None = None  # id() of every loaded module's globals

    def _current(self) -> None:
        modules = sys.modules
        last = next(reversed(modules), None)
        seen = (len(modules), last, id(modules.get(last)))
        if seen != self.seen:
            self.seen, self.names, self.under, self.globals = seen, tuple(modules), {}, None

    def submodules(self, prefix: str) -> dict[str, list[tuple[int, str, frozenset[str]]]]:
        """The loaded submodules under a package (prefix: its name and "."), by the first name of their path."""
        with self.lock:
            self._current()
            found = self.under.get(prefix)
            if found is None:
                found = self.under[prefix] = {}
                for position, name in enumerate(self.names):
                    if name is not None and name.startswith(prefix):
                        path = name[len(prefix):].split(".")
                        found.setdefault(path[0], []).append((position, name, frozenset(path)))
            return found

    def globals_ids(self) -> frozenset[int]:
        with self.lock:
            self._current()
            if self.globals is None:
                self.globals = frozenset(id(vars(m)) for m in list(sys.modules.values()) if hasattr(m, "__dict__"))
            return self.globals


_loaded = _LoadedModules()


def _remembering_submodules(find: Callable) -> Callable:
    """cloudpickle's _find_imported_submodules with a package's loaded submodules looked up by the names the code
    uses, not scanned: the same submodules (those whose every path name the code uses), in the same order."""

    def _find_imported_submodules(code, top_level_dependencies):
        subimports, names = [], set(code.co_names)
        for dependency in top_level_dependencies:
            if isinstance(dependency, types.ModuleType) and getattr(dependency, "__package__", None):
                by_first = _loaded.submodules(dependency.__name__ + ".")
                used = sorted(entry for first in names.intersection(by_first) for entry in by_first[first]
                              if entry[2] <= names)
                subimports += [module for module in (sys.modules.get(name) for _, name, _ in used)
                               if module is not None]
        return subimports

    _find_imported_submodules.__wrapped__ = find
    return _find_imported_submodules


def _sized_without_rereading_modules(get_deep_size: Callable) -> Callable:
    """Beam's state cache's get_deep_size (objsize with Beam's size, referents and filter functions), the modules'
    globals left out as objsize leaves them out, found once per set of loaded modules."""
    import objsize
    from apache_beam.runners.worker import statecache

    settings = objsize.traverse.ObjSizeSettings(
        get_referents_func=statecache._get_referents_func, filter_func=statecache._filter_func,
        get_size_func=statecache._size_func, exclude_modules_globals=False)

    def sized(*objs):
        context = objsize.traverse.TraversalContext(settings)  # excludes None itself
        context.exclude_set.update(_loaded.globals_ids())
        return context.get_deep_size(*objs)

    sized.__wrapped__ = get_deep_size
    return sized
