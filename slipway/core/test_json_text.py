"""json_object reads a JSON object the one way every input that takes one uses."""

import pytest

from slipway.core.errors import SlipwayError
from slipway.core.json_text import json_object


@pytest.mark.parametrize("given, expected", [
    ('{"a": 1}', {"a": 1}), ("  ", {}), ("", {}), (None, {}), ({"b": [2]}, {"b": [2]}),
])
def test_an_object_blank_or_mapping_is_read(given, expected):
    assert json_object("x", given) == expected


@pytest.mark.parametrize("given, error", [
    ("{bad", "--x: not valid JSON (Expecting property name enclosed in double quotes at position 1)"),
    ("[1, 2]", "--x: expected a JSON object ({...}), got a list [1, 2]"),
    ('"prod"', '--x: expected a JSON object ({...}), got a string "prod"'),
    ("true", "--x: expected a JSON object ({...}), got true"),
    ([1, 2], "--x: expected a JSON object ({...}), got a list [1, 2]"),  # a Python caller's value
])
def test_anything_else_is_one_line_naming_the_input(given, error):
    with pytest.raises(SlipwayError) as caught:
        json_object("--x", given)
    assert str(caught.value) == error


def test_the_mapping_given_is_copied_not_shared():
    given = {"a": 1}
    json_object("x", given)["a"] = 2
    assert given == {"a": 1}
