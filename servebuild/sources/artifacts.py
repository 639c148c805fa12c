"""Release artifacts from PyPI (a wheel or an sdist named by a hashed requirement file), fetched by
sha256 on the host and cached: the engine's release (cut from its tag's commit, or from the one the
recipe declares as sdist_commit: sources/versionfile.py), without GitHub.

Standard library only (through registry/index.py: bounded in size and time, streamed to disk): the JSON
API names each file with its sha256, so the download is checked
against the recipe's hashes whatever the index or proxy in between.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Optional

from servebuild.recipe.requirements import parse_hashes
from servebuild.errors import HostError, InputError, IntegrityError, Refused
from servebuild.fsutil import LIMITS, check_input, sha256_file
from servebuild.platforms import machine_of
from servebuild.registry import index
from servebuild.registry.bounded import parse_json
from servebuild.registry import limits
from servebuild.registry.limits import JSON_DEPTH

INDEX = os.environ.get("SERVEBUILD_PYPI_URL", "https://pypi.org")


def _context(ca: Optional[Path], display: str) -> Optional[ssl.SSLContext]:
    """The system's CAs plus the extra bundle (build --ca-bundle, else $SERVEBUILD_CA_BUNDLE), if any."""
    ca = ca or (Path(os.environ["SERVEBUILD_CA_BUNDLE"]) if os.environ.get("SERVEBUILD_CA_BUNDLE") else None)
    if ca is None:
        return None
    check_input(ca, "secret", str(ca), field="--ca-bundle", error=InputError)  # a FIFO would block the load
    try:
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=str(ca))
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InputError(
            f"cannot use {ca} as a CA bundle for the release download: "
            f"{getattr(exc, 'strerror', None) or getattr(exc, 'reason', None) or exc} "
            f"(a PEM file of certificates)",
            file=display,
            field="--ca-bundle",
        ) from None
    return context


def _norm(text: str) -> str:
    return re.sub(r"[-_.]+", "_", text).lower()


def _plain_filename(filename, name: str) -> bool:
    """A file of the requested project and nothing else: one path component, no '..', `NAME-VERSION...`."""
    return (
        isinstance(filename, str)
        and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}", filename) is not None
        and ".." not in filename
        and re.match(re.escape(_norm(name)) + r"_[0-9]", _norm(filename)) is not None
    )


def _pick(files: list, hashes: set[str], artifact: str, platform: str, python: str, name: str = "") -> Optional[dict]:
    fits = [
        f
        for f in files
        if isinstance(f, dict)
        and isinstance(f.get("hashes"), dict)
        and f["hashes"].get("sha256") in hashes
        and isinstance(f.get("url"), str)
        and _plain_filename(f.get("filename"), name)
        and _fits(f["filename"], artifact, platform, python)
    ]
    return sorted(fits, key=lambda f: f["filename"])[0] if fits else None


def fetch_artifact(
    requirement: Path,
    display: str,
    artifact: str,
    platform: str,
    python: str,
    cache_root: Path,
    offline: bool = False,
    ca_bundle: Optional[Path] = None,
) -> tuple[Path, str]:
    """(path, sha256) of the release file the requirement pins, for this platform and Python."""
    pins = parse_hashes(requirement)
    if len(pins) != 1:
        raise InputError(
            f"a release requirement pins exactly one distribution, {display} pins {len(pins)}", file=display
        )
    ((name, (version, hashes)),) = pins.items()
    cache = cache_root / "artifacts"
    for digest in sorted(hashes):
        hit = next((cache / digest).glob("*"), None) if (cache / digest).is_dir() else None
        if hit is not None and _fits(hit.name, artifact, platform, python):
            check_input(hit, "artifact", str(hit), error=HostError)  # a FIFO or a huge file in the cache is not it
            return hit, digest
    if offline:
        raise Refused(
            f"{name}=={version} ({artifact}) is not in the artifact cache and --offline was given", file=display
        )
    context = _context(ca_bundle, display)
    page = f"{INDEX}/simple/{name}/"
    try:  # the simple API as JSON (PEP 691) names every file with its sha256
        meta = parse_json(
            index.get(page, accept="application/vnd.pypi.simple.v1+json", context=context), page, JSON_DEPTH
        )
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise HostError(f"cannot read {name}=={version} from {INDEX} ({exc})", file=display) from None
    files = meta.get("files") if isinstance(meta, dict) else None
    chosen = _pick(files if isinstance(files, list) else [], set(hashes), artifact, platform, python, name)
    if chosen is None:
        raise InputError(
            f"no {artifact} of {name}=={version} for {platform}/cp{python} among the hashes in {display}", file=display
        )
    digest = chosen["hashes"]["sha256"]
    target = cache / digest / chosen["filename"]
    target.parent.mkdir(parents=True, exist_ok=True)
    url = urllib.parse.urljoin(page, chosen["url"])  # PEP 691 allows URLs relative to the page
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise IntegrityError(
            f"{INDEX} gives {url!r} for {chosen['filename']}; only http(s) URLs are fetched", file=display
        )
    tmp = target.with_name(f".{target.name}.part{os.getpid()}")
    try:
        with tmp.open("wb") as sink:  # streamed to disk, never whole in memory; bounded in size and time
            index.get(
                url, context=context, limit=LIMITS["artifact"].max_bytes, seconds=limits.RELEASE_FILE_S, sink=sink
            )
        if sha256_file(tmp) != digest:
            raise IntegrityError(f"{chosen['filename']} does not hash to {digest}", file=display)
        tmp.replace(target)
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise HostError(
            f"cannot download {chosen['filename']} of {name}=={version} from {url} ({exc})", file=display
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target, digest


def _fits(filename: str, artifact: str, platform: str, python: str) -> bool:
    if artifact == "sdist":
        return filename.endswith((".tar.gz", ".zip"))
    tag = f"cp{python.replace('.', '')}"
    return (
        filename.endswith(".whl")
        and machine_of(platform) in filename
        and (f"-{tag}-" in filename or "abi3" in filename)
    )
