"""The registry client's documented bounds (docs/reference/registry-limits.md); every figure in one place.

Sizes are of the bytes held in memory after content decoding; a Content-Length over the limit is
refused before a byte of the body is read. Times are wall-clock seconds from the first byte sent.
"""

from __future__ import annotations

import math
import os

from servebuild.errors import InputError

KiB, MiB = 1 << 10, 1 << 20

MANIFEST_BYTES = 4 * MiB  # manifests and indexes: the OCI distribution spec's 4 MiB
REFERRERS_BYTES = 4 * MiB  # the referrers API's answer (an index)
TAGS_BYTES = 4 * MiB  # tags/list
CONFIG_BYTES = 8 * MiB  # an image config (labels, history)
ARTIFACT_BYTES = 64 * MiB  # an SBOM, build manifest, provenance statement or signature envelope
LAYER_BYTES = 32 << 30  # one image layer, compressed (rebuild --check reads them to disk, never to memory)
LAYER_S = 3600.0  # one image layer's download, connect to last byte
LAYER_INFLATE_RATIO = 100  # an image's layers uncompressed (rebuild --check, to its temp dir), counted
LAYER_INFLATE_FLOOR = 64 * MiB  # together layer by layer: at most this many times their blobs' bytes, never
IMAGE_INFLATED_BYTES = 64 << 30  # less than the floor, never more than the cap (gzip reaches about 1,000
# to 1; real layers 2 to 10)
TOKEN_BYTES = 1 * MiB  # a token service's answer
OTHER_BYTES = 1 * MiB  # /v2/, upload and error answers
JSON_DEPTH = 64  # arrays and objects inside each other in any JSON answer
REDIRECTS = 5  # hops followed for one request
CONNECT_S = 10.0  # TCP connect (and TLS handshake) of one request
IDLE_S = 30.0  # no byte at all for this long ends a request
REQUEST_S = 60.0  # one request, from connect to the last byte (SERVEBUILD_REGISTRY_TIMEOUT)
OPERATION_S = 600.0  # one operation: a verify, one phase of a publish, one digest lookup
# (SERVEBUILD_REGISTRY_DEADLINE)
REBUILD_REGISTRY_S = 7200.0  # all registry reads of one `rebuild --check` together (manifests, config, every
# layer), each still within OPERATION_S (SERVEBUILD_REBUILD_DEADLINE)
RETRIES = 4  # further tries after a reset connection or a 5xx answer, within the operation
INDEX_PAGE_BYTES = 64 * MiB  # a package index's JSON page (torch's lists thousands of files)
INDEX_PAGE_S = 120.0  # one index page, connect to last byte
RELEASE_FILE_S = 3600.0  # one release wheel or sdist download (its size: the input limit of its kind)


def seconds_from_env(name: str, default: float) -> float:
    """A positive, finite number of seconds (at most a day) from the environment, or `default`."""
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value <= 86400):
        raise InputError(f"must be a number of seconds in (0, 86400], got {text[:40]!r}", field=name)
    return value
