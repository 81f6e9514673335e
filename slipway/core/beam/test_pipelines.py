"""pipelines.remember_what_beam_rereads: Beam gets what it read before for every kind of callable, reads a function's
signature once, forgets a function that is gone; a DoFn's specs are read once per DoFn object, and an options view
once per options object and class, sharing the options' values as Beam's own views do; a pipeline with a stateful
DoFn (which Beam finds through these reads) still runs as one; a pickled function's submodules and the state cache's
sizes are what Beam's own code finds, as modules are imported and removed."""

import concurrent.futures
import email.mime.text
import functools
import gc
import importlib
import inspect
import json
import os
import sys
import xml.etree.ElementTree

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.internal import pickler
from apache_beam.internal.cloudpickle import cloudpickle
from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, SetupOptions, StandardOptions
from apache_beam.runners.worker import statecache
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, userstate
from apache_beam.transforms.userstate import BagStateSpec, is_stateful_dofn

from slipway.core.beam import pipelines


class _Keeps(beam.DoFn):
    SEEN = BagStateSpec("seen", beam.coders.VarIntCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        seen.add(element[1])
        yield element[0], sorted(seen.read())


def _plain(a, b=2, *rest, c=3, **more):
    return a


@pytest.fixture(scope="module", autouse=True)
def remembered():
    pipelines.remember_what_beam_rereads()
    pipelines.remember_what_beam_rereads()  # twice: wrapped once
    assert core.get_function_args_defaults.__wrapped__.__name__ == "get_function_args_defaults"
    assert not hasattr(core.get_function_args_defaults.__wrapped__, "__wrapped__")
    assert not hasattr(userstate.get_dofn_specs.__wrapped__, "__wrapped__")
    assert not hasattr(PipelineOptions.view_as.__wrapped__, "__wrapped__")
    assert not hasattr(cloudpickle._find_imported_submodules.__wrapped__, "__wrapped__")
    assert not hasattr(statecache.get_deep_size.__wrapped__, "__wrapped__")


@pytest.mark.parametrize("callable_", [_plain, lambda x, y=1: x, _Keeps().process, _Keeps.process, len, str.upper,
                                       functools.partial(_plain, 1), _Keeps, beam.Map(len).fn.process],
                         ids=["function", "lambda", "bound", "unbound", "builtin", "descriptor", "partial", "class",
                              "callable_wrapper"])
def test_each_callable_gets_what_beam_itself_reads(callable_):
    original = core.get_function_args_defaults.__wrapped__
    first = core.get_function_args_defaults(callable_)
    again = core.get_function_args_defaults(callable_)
    assert first == again == original(callable_)
    first[0].append("changed by a caller")
    assert core.get_function_args_defaults(callable_) == original(callable_)


def test_a_signature_is_read_once_and_a_function_that_is_gone_is_forgotten(monkeypatch):
    reads = []
    real = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda f, *a, **k: reads.append(f) or real(f, *a, **k))

    def short_lived(x, y=5):
        return x

    for _ in range(3):
        assert core.get_function_args_defaults(short_lived) == (["x", "y"], [5])
    assert reads == [short_lived]
    assert short_lived in pipelines._read
    reads.clear()
    del short_lived
    gc.collect()
    assert not any(getattr(f, "__name__", "") == "short_lived" for f in list(pipelines._read))


def test_a_stateful_dofn_is_still_found_and_run_as_one():
    assert is_stateful_dofn(_Keeps()) and not is_stateful_dofn(beam.Map(len).dofn)
    with pipelines.new_pipeline([]) as pipeline:
        kept = (pipeline | beam.Create([("k", 3), ("k", 1), ("k", 2)]) | beam.ParDo(_Keeps())
                | beam.Map(lambda kv: len(kv[1])))
        assert_that(kept, equal_to([1, 2, 3]))


class _Equal(beam.DoFn):
    """Equal to every other _Equal: the specs are remembered by identity, not equality."""

    def __eq__(self, other):
        return isinstance(other, _Equal)

    def __hash__(self):
        return 0

    def process(self, element):
        yield element


class _Duplicated(beam.DoFn):
    SEEN = BagStateSpec("seen", beam.coders.VarIntCoder())

    def process(self, element, a=beam.DoFn.StateParam(SEEN), b=beam.DoFn.StateParam(SEEN)):
        yield element


def test_a_dofns_specs_are_read_once_per_object_and_forgotten_with_it():
    original = userstate.get_dofn_specs.__wrapped__
    reads = []
    counting = pipelines._remembering_specs(lambda dofn: reads.append(dofn) or original(dofn))
    keeps, plain = _Keeps(), _Equal()
    for _ in range(3):
        state, timers = counting(keeps)
        assert (state, timers) == original(keeps) and [s.name for s in state] == ["seen"] and timers == set()
        state.clear()  # a caller's own set: the next caller still gets the spec
    assert counting(plain) == (set(), set()) and counting(_Equal()) == (set(), set())
    assert reads == [keeps, plain, reads[2]] and reads[2] is not plain  # an equal DoFn is another object
    key = id(keeps)
    assert key in pipelines._specs
    del keeps, reads[:]
    gc.collect()
    assert key not in pipelines._specs
    duplicated = _Duplicated()
    for _ in range(2):  # Beam's error, every time
        with pytest.raises(ValueError, match="duplicate"):
            counting(duplicated)


def test_an_options_view_is_made_once_and_shares_the_options_values():
    options = PipelineOptions(["--runner=DirectRunner", "--experiments=a"])
    standard = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is standard and standard.runner == "DirectRunner"
    assert PipelineOptions(["--runner=DirectRunner"]).view_as(StandardOptions) is not standard  # per options object
    options.view_as(SetupOptions).save_main_session = True  # written through one view, read through every other
    assert options.view_as(SetupOptions).save_main_session is True
    assert options.get_all_options()["save_main_session"] is True
    debug = options.view_as(DebugOptions)
    debug.add_experiment("b")
    assert options.view_as(DebugOptions).experiments == ["a", "b"] == PipelineOptions.view_as.__wrapped__(
        options, DebugOptions).experiments
    assert options.view_as(StandardOptions).view_as(DebugOptions).experiments == ["a", "b"]


def _uses_submodules():
    return concurrent.futures.ThreadPoolExecutor, xml.etree.ElementTree.fromstring, email.mime.text.MIMEText


def _uses_no_module(x):
    return x + 1


def test_a_functions_submodules_are_those_cloudpickle_itself_finds_in_its_order():
    original = cloudpickle._find_imported_submodules.__wrapped__
    for function, packages in [(_uses_submodules, [concurrent, xml, email, os]), (_uses_no_module, []),
                               (_uses_submodules, [json])]:
        expected = original(function.__code__, packages)
        assert cloudpickle._find_imported_submodules(function.__code__, packages) == expected
    assert [m.__name__ for m in cloudpickle._find_imported_submodules(_uses_submodules.__code__, [xml, email])] == [
        m.__name__ for m in original(_uses_submodules.__code__, [xml, email])] != []


def test_a_submodule_imported_or_removed_after_a_lookup_is_seen(monkeypatch):
    def uses_parsers():
        return xml.parsers.expat.ParserCreate

    def found() -> list[str]:
        return [m.__name__ for m in cloudpickle._find_imported_submodules(uses_parsers.__code__, [xml])]

    monkeypatch.delitem(sys.modules, "xml.parsers.expat", raising=False)
    monkeypatch.delitem(sys.modules, "xml.parsers", raising=False)
    assert found() == []
    importlib.import_module("xml.parsers.expat")
    assert found() == ["xml.parsers", "xml.parsers.expat"] == [
        m.__name__ for m in cloudpickle._find_imported_submodules.__wrapped__(uses_parsers.__code__, [xml])]
    monkeypatch.delitem(sys.modules, "xml.parsers.expat")
    assert found() == ["xml.parsers"]


def test_a_function_pickled_by_value_still_loads_with_its_submodules():
    loaded = pickler.loads(pickler.dumps(lambda: _uses_submodules()[0].__name__))
    assert loaded() == "ThreadPoolExecutor"


def test_the_state_caches_sizes_are_beams_own():
    values = [[{"a": np.arange(1000), "b": "x" * 500}] * 3, (1, 2.5, None, b"bytes"), np.zeros((50, 50)),
              {"module": json, "function": json.dumps, "globals": vars(json)}, _Keeps()]
    for value in values:
        assert statecache.get_deep_size(value) == statecache.get_deep_size.__wrapped__(value) > 0
    assert statecache.get_deep_size(*values) == statecache.get_deep_size.__wrapped__(*values)
