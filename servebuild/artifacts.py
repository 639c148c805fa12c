"""Release artifacts from PyPI (a wheel or an sdist named by a hashed requirement file), fetched by
sha256 on the host and cached: the same code as the engine's tag, without GitHub.

Standard library only: the JSON API names each file with its sha256, so the download is checked
against the recipe's hashes whatever the index or proxy in between.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from .constraints import parse_hashes
from .errors import SourceError
from .fsutil import sha256_file
from .platforms import machine_of

INDEX = os.environ.get("SERVEBUILD_PYPI_URL", "https://pypi.org")
RETRIES = 4


def _get(url: str, timeout: float = 60.0, accept: str = "*/*") -> bytes:
    """GET with bounded retries and backoff on connection errors and 5xx."""
    delay = 2.0
    ca = os.environ.get("SERVEBUILD_CA_BUNDLE")
    context = ssl.create_default_context(cafile=ca) if ca else None
    request = urllib.request.Request(url, headers={"Accept": accept})
    for attempt in range(RETRIES):
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == RETRIES - 1:
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == RETRIES - 1:
                raise
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def _pick(files: list[dict], hashes: set[str], artifact: str, platform: str, python: str) -> Optional[dict]:
    fits = [f for f in files if f.get("hashes", {}).get("sha256") in hashes
            and _fits(f["filename"], artifact, platform, python)]
    return sorted(fits, key=lambda f: f["filename"])[0] if fits else None


def fetch_artifact(requirement: Path, display: str, artifact: str, platform: str, python: str,
                   cache_root: Path, offline: bool = False) -> tuple[Path, str]:
    """(path, sha256) of the release file the requirement pins, for this platform and Python."""
    pins = parse_hashes(requirement)
    if len(pins) != 1:
        raise SourceError(f"a release requirement pins exactly one distribution, {display} pins {len(pins)}",
                          file=display)
    (name, (version, hashes)), = pins.items()
    cache = cache_root / "artifacts"
    for digest in sorted(hashes):
        hit = next((cache / digest).glob("*"), None) if (cache / digest).is_dir() else None
        if hit is not None and _fits(hit.name, artifact, platform, python):
            return hit, digest
    if offline:
        raise SourceError(f"{name}=={version} ({artifact}) is not in the artifact cache and --offline was given",
                          file=display)
    try:  # the simple API as JSON (PEP 691) names every file with its sha256
        meta = json.loads(_get(f"{INDEX}/simple/{name}/", accept="application/vnd.pypi.simple.v1+json"))
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as exc:
        raise SourceError(f"cannot read {name}=={version} from {INDEX} ({exc})", file=display) from None
    chosen = _pick(meta.get("files", []), set(hashes), artifact, platform, python)
    if chosen is None:
        raise SourceError(f"no {artifact} of {name}=={version} for {platform}/cp{python} among the hashes "
                          f"in {display}", file=display)
    digest = chosen["hashes"]["sha256"]
    target = cache / digest / chosen["filename"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part{os.getpid()}")
    tmp.write_bytes(_get(chosen["url"], timeout=600.0))
    if sha256_file(tmp) != digest:
        tmp.unlink()
        raise SourceError(f"{chosen['filename']} does not hash to {digest}", file=display)
    tmp.replace(target)
    return target, digest


def _fits(filename: str, artifact: str, platform: str, python: str) -> bool:
    if artifact == "sdist":
        return filename.endswith((".tar.gz", ".zip"))
    tag = f"cp{python.replace('.', '')}"
    return filename.endswith(".whl") and machine_of(platform) in filename and (
        f"-{tag}-" in filename or "abi3" in filename)
