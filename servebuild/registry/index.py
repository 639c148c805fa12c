"""Bounded GETs of package-index pages and release files (PyPI's JSON simple API, PEP 691), standard
library only: the same bounds as the registry client's, by a deadline per GET and a size limit
while reading (limits.py: INDEX_PAGE_BYTES, INDEX_PAGE_S, RELEASE_FILE_S; a release file's size is
the input limit of its kind), with bounded retries on connection errors and 5xx answers.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from typing import BinaryIO, Optional

from servebuild.errors import HostError
from servebuild.registry import limits
from servebuild.registry.bounded import read_stream
from servebuild.registry.deadline import Expired, deadline

RETRIES = 4


def get(
    url: str,
    accept: str = "*/*",
    context: Optional[ssl.SSLContext] = None,
    limit: Optional[int] = None,
    seconds: Optional[float] = None,
    sink: Optional[BinaryIO] = None,
    backoff: float = 2.0,
) -> bytes:
    """The body of `url` (into `sink` if given, which is emptied before each try). HTTPError (4xx, or
    5xx after the retries) and URLError pass to the caller; past `seconds` or `limit` (default: an index
    page's) one HostError line."""
    limit = limits.INDEX_PAGE_BYTES if limit is None else limit
    seconds = limits.INDEX_PAGE_S if seconds is None else seconds
    delay = backoff
    request = urllib.request.Request(url, headers={"Accept": accept})
    for attempt in range(RETRIES):
        if sink is not None:
            sink.seek(0)
            sink.truncate()
        try:
            with deadline(seconds, f"GET {url}"):
                with urllib.request.urlopen(request, timeout=min(limits.IDLE_S, seconds), context=context) as resp:
                    return read_stream(resp, limit, url, sink)
        except Expired as exc:
            raise HostError(f"{url} did not finish within {exc.seconds:g} s") from None
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == RETRIES - 1:
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == RETRIES - 1:
                raise
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")
