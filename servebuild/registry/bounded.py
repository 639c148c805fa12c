"""Reading an HTTP answer within a size limit, and JSON within a depth limit."""

from __future__ import annotations

import json

from servebuild.errors import HostError

CHUNK = 64 << 10


class TooLarge(HostError):
    """An answer is larger than the limit for what it holds."""


class BadJSON(HostError):
    """An answer is not JSON, or is nested deeper than allowed."""


def collect(chunks, declared, limit: int, what: str, sink=None) -> bytes:
    """The bytes of `chunks` (an iterator of bytes), refusing more than `limit`: a `declared` length
    (Content-Length) over the limit before the first chunk, a longer body as soon as it passes. With
    `sink` (a binary file), chunks go there instead of memory and b"" is returned."""
    if declared is not None and str(declared).strip().isdigit() and int(declared) > limit:
        raise TooLarge(f"{what} is {int(declared)} bytes (Content-Length); the limit is {limit}")
    parts, size = [], 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"{what} is larger than its limit of {limit} bytes")
        if sink is not None:
            sink.write(chunk)
        else:
            parts.append(chunk)
    return b"".join(parts)


def read_body(response, limit: int, what: str, sink=None) -> bytes:
    """The whole body of a `requests` response opened with stream=True, within `limit` bytes (into
    `sink`, a binary file, if given: then b"")."""
    try:
        return collect(response.iter_content(CHUNK), response.headers.get("Content-Length"), limit, what, sink)
    except TooLarge:
        response.close()
        raise


def read_stream(response, limit: int, what: str, sink=None) -> bytes:
    """The same for a urllib response (a file object with .headers)."""
    return collect(iter(lambda: response.read(CHUNK), b""), response.headers.get("Content-Length"), limit, what, sink)


def depth(doc) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_json(data: bytes, what: str, max_depth: int):
    """JSON from a registry: any problem (not UTF-8, not JSON, too deep) is one line."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise BadJSON(f"{what} is JSON nested deeper than {max_depth} levels") from None
    except ValueError:
        raise BadJSON(f"{what} is not JSON") from None
    if depth(doc) > max_depth:
        raise BadJSON(f"{what} is JSON nested deeper than {max_depth} levels")
    return doc
