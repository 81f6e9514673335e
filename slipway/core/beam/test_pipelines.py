"""pipelines.remember_dofn_signatures: Beam gets what it read before for every kind of callable, reads a function's
signature once, forgets a function that is gone, and a pipeline with a stateful DoFn (which Beam finds through
these reads) still runs as one."""

import functools
import gc
import inspect

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core
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
    pipelines.remember_dofn_signatures()
    pipelines.remember_dofn_signatures()  # twice: wrapped once
    assert core.get_function_args_defaults.__wrapped__.__name__ == "get_function_args_defaults"
    assert not hasattr(core.get_function_args_defaults.__wrapped__, "__wrapped__")


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
