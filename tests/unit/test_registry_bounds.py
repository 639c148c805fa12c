"""The registry's bounded reads at their exact limits (issue 31, point 10): JSON nested exactly
JSON_DEPTH levels is read and one level more is not (the depth was counted one level short); a body
whose Content-Length, or whose bytes, are exactly the limit are read and one byte more is not."""

from __future__ import annotations

import io
import json

import pytest

from servebuild.registry import limits
from servebuild.registry.bounded import BadJSON, TooLarge, collect, depth, parse_json


def nested(levels: int) -> bytes:
    return ("[" * levels + "]" * levels).encode()


def test_json_at_the_depth_limit_is_read_and_one_deeper_is_not():
    assert depth(json.loads(nested(1))) == 1 and depth({"a": {"b": [1]}}) == 3 and depth(7) == 0
    assert depth(parse_json(nested(limits.JSON_DEPTH), "a manifest", limits.JSON_DEPTH)) == limits.JSON_DEPTH
    with pytest.raises(BadJSON, match=f"a manifest is JSON nested deeper than {limits.JSON_DEPTH} levels"):
        parse_json(nested(limits.JSON_DEPTH + 1), "a manifest", limits.JSON_DEPTH)


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_exactly_at_its_limit_is_read_and_one_byte_more_is_not(declared):
    body = b"x" * 100
    assert collect(iter([body[:60], body[60:]]), "100" if declared else None, 100, "a blob") == body
    sink = io.BytesIO()
    assert collect(iter([body]), "100" if declared else None, 100, "a blob", sink) == b"" and sink.getvalue() == body
    with pytest.raises(TooLarge, match="a blob is (101 bytes \\(Content-Length\\)|larger than its limit)"):
        collect(iter([body, b"y"]), "101" if declared else None, 100, "a blob")
