"""The image's config made a fact of its inputs (issue 20): Docker 20.10's BuildKit writes the time of
the build into the config (`created`, and `created` in each history entry), so two builds of the same
layers got two image ids. After the build, the config is read (from the engine's image store, else
out of `docker save`; either way only bytes that hash to the image id are taken), those times are
set to the build's `created` (from the lock's inputs, or $SOURCE_DATE_EPOCH), its keys sorted, and it
is loaded back alone: `docker load` of a config and a manifest whose layers the engine already holds
registers the image without reading any layer again. The base's own history entries keep their times
(they are a fact of the base).

BuildKit's inline cache (`--cache-to`) is no part of the image: its records are a fact of the builder's
cache history (an engine that built the same steps before lists every path it has seen to each result),
so two engines' configs of one image differed in it. The image is loaded without it; the cache ref gets
a second config, the same with the inline cache (its clocks settled too), over the same layers.

Only the local image store of the classic engine takes a config without its layers; where an engine
refuses, the build stops in one line naming the engine (nothing is tagged).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
import shlex
import tarfile
from dataclasses import dataclass
from typing import Optional

from servebuild import procs
from servebuild.errors import DockerError

CONFIG_LIMIT = 8 << 20  # a config (and a save's manifest.json) larger than this is not an image's
INLINE_CACHE = "moby.buildkit.cache.v0"  # BuildKit's inline cache (--cache-to): base64 JSON in the config


@dataclass(frozen=True)
class Settled:
    image_id: str  # the image: times settled, no inline cache
    # the same layers under a config with BuildKit's inline cache (for a --cache-to ref); None without one
    cache_id: Optional[str] = None
    config: Optional[dict] = None  # the image's settled config (its diff_ids and history, read once)
    output: Optional[str] = None  # what settle_config's `then` printed in the image; None if it did not run


def settle_config(
    docker, image_id: str, created: str, base_ref: Optional[str], platform: str, then: str = ""
) -> Settled:
    """`image_id` with its config's times set to `created` and without BuildKit's inline cache (the same id
    when it already is so), and the cache carrier when the build wrote an inline cache. `then`: a shell
    command run in the image as its config is read (its output in Settled.output; None if it was not run)."""
    config, output = config_and_output(docker, image_id, platform, then)
    config = config or read_config(docker, image_id)
    keep = base_history_length(docker, base_ref) if base_ref else 0
    settled = settled_config(config, created, keep)
    out = Settled(
        _loaded(docker, settled, image_id),
        _loaded(docker, cache_config(config, settled, created), image_id),
        settled,
        output,
    )
    if image_id not in (out.image_id, out.cache_id):
        docker.remove_image(image_id, force=False)  # BuildKit's copy, untagged; its layers stay (they are shared)
    return out


def _loaded(docker, config: Optional[dict], built: str) -> Optional[str]:
    """The id of `config` over the layers of `built`, loaded unless it is `built` itself."""
    if config is None:
        return None
    data = canonical(config)
    new_id = "sha256:" + hashlib.sha256(data).hexdigest()
    if new_id != built:
        load_config(docker, data, new_id, len(config["rootfs"]["diff_ids"]))
    return new_id


def image_config(docker, image_id: str, platform: str) -> dict:
    """The raw config of a local image: from the engine's image store, else out of `docker save`."""
    return config_from_store(docker, image_id, platform) or read_config(docker, image_id)


def layers_in(config: dict) -> tuple[list[str], list[str]]:
    """(diff_ids, the history's created_by of each layer) of an image config."""
    steps = [h.get("created_by", "") for h in config.get("history") or [] if not h.get("empty_layer")]
    return list((config.get("rootfs") or {}).get("diff_ids") or []), steps


def canonical(config: dict) -> bytes:
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def settled_config(config: dict, created: str, keep: int) -> dict:
    """`config` with `created` set, the same time in every history entry after the first `keep`, and
    without BuildKit's inline cache."""
    out = {k: v for k, v in config.items() if k != INLINE_CACHE}
    out["created"] = created
    out["history"] = [
        dict(h, created=created) if i >= keep and "created" in h else h
        for i, h in enumerate(config.get("history") or [])
    ]
    if not config.get("history"):
        out.pop("history", None)
    return out


def cache_config(config: dict, settled: dict, created: str) -> Optional[dict]:
    """The settled config with the build's inline cache back in, the clock in each of its layer records
    (`createdAt`) set to `created`; None when the build wrote none."""
    if not isinstance(config.get(INLINE_CACHE), str):
        return None
    return dict(settled, **{INLINE_CACHE: _settled_cache(config[INLINE_CACHE], created)})


def _settled_cache(encoded: str, created: str) -> str:
    try:
        records = json.loads(base64.b64decode(encoded, validate=True))
    except (ValueError, binascii.Error):
        return encoded  # not what this engine's BuildKit writes: left as it is
    for record in records if isinstance(records, list) else []:
        for layer in (record.get("layers") or []) if isinstance(record, dict) else []:
            if isinstance(layer, dict) and "createdAt" in layer:
                layer["createdAt"] = created
    return base64.b64encode(json.dumps(records, separators=(",", ":")).encode()).decode()


def config_from_store(docker, image_id: str, platform: str) -> Optional[dict]:
    """The raw config of a local image read where the classic image store keeps it
    (DockerRootDir/image/DRIVER/imagedb/content/sha256/HEX, on the engine's own host, through a throwaway
    container of the image itself, no network): a second instead of a `docker save` of every layer
    (55 s for the 5.2 GB torch pair). Trusted only if its bytes hash to the image id; None when they
    do not or the store is elsewhere (then `read_config`)."""
    return config_and_output(docker, image_id, platform)[0]


OUTPUT_AFTER = "#servebuild: what the image's own command printed"


def store_script(config_path: str, then: str) -> str:
    """The shell line that prints the config, the OUTPUT_AFTER line, then what `then` prints."""
    return f"/bin/cat {shlex.quote(config_path)} && printf '\\n%s\\n' {shlex.quote(OUTPUT_AFTER)} && {{ {then}; }}"


def config_and_output(docker, image_id: str, platform: str, then: str = "") -> tuple[Optional[dict], Optional[str]]:
    """config_from_store's config, and what the shell command `then` printed in the same throwaway container
    (one container for both: about 0.2 s a build); (None, None) when the store cannot be read there."""
    info = docker.info()
    root, driver, digest = info.get("DockerRootDir"), info.get("Driver"), image_id.removeprefix("sha256:")
    if not (isinstance(root, str) and isinstance(driver, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        return None, None
    store = f"{root}/image/{driver}/imagedb/content/sha256"
    command = ["/bin/cat", image_id, f"/store/{digest}"]
    if then:
        command = ["/bin/sh", image_id, "-c", store_script(f"/store/{digest}", then)]
    proc = docker.run(
        "run",
        "--rm",
        "--network",
        "none",
        "--platform",
        platform,
        "-v",
        f"{store}:/store:ro",
        "--entrypoint",
        *command,
        check=False,
    )
    out = proc.stdout if proc.returncode == 0 else ""
    head, found, output = out.partition(f"\n{OUTPUT_AFTER}\n") if then else (out, True, None)
    raw = head.encode() if found else b""
    if hashlib.sha256(raw).hexdigest() != digest:
        return None, None
    try:
        config = json.loads(raw)
    except ValueError:
        return None, None
    if not (isinstance(config, dict) and isinstance(config.get("rootfs"), dict)):
        return None, None
    return config, output


def read_config(docker, image_id: str) -> dict:
    """The raw config of a local image, from the stream of `docker save` (its layers are read past)."""
    small: dict[str, bytes] = {}
    with docker.saved(image_id) as tar:
        for member in tar:
            if member.isfile() and "/" not in member.name and member.name.endswith(".json"):
                if member.size > CONFIG_LIMIT:
                    raise DockerError(
                        f"docker save of {image_id} on {docker.name} holds {member.name} of "
                        f"{member.size} bytes, over {CONFIG_LIMIT}",
                        field="build",
                    )
                small[member.name] = tar.extractfile(member).read()
    try:
        manifest = json.loads(small["manifest.json"])
        config = json.loads(small[manifest[0]["Config"]])
    except (KeyError, IndexError, TypeError, ValueError):
        raise DockerError(f"docker save of {image_id} on {docker.name} holds no image config", field="build") from None
    if not isinstance(config, dict) or not isinstance(config.get("rootfs"), dict):
        raise DockerError(f"docker save of {image_id} on {docker.name} holds no image config", field="build")
    return config


def base_history_length(docker, ref: str) -> int:
    """How many history entries the base image has (they lead the image's own, untouched)."""
    proc = docker.run("history", "-q", "--no-trunc", ref, check=False)
    if proc.returncode != 0:
        raise DockerError(f"docker history {ref} failed on {docker.name}: {procs.last_line(proc)}", field="build")
    return len([line for line in proc.stdout.splitlines() if line.strip()])


def load_config(docker, data: bytes, want: str, layers: int) -> None:
    """`docker load` of the config alone; the engine must already hold its layers (it just built them)."""
    name = want.removeprefix("sha256:") + ".json"
    manifest = json.dumps(
        [{"Config": name, "RepoTags": None, "Layers": [f"layer{i}/layer.tar" for i in range(layers)]}]
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, body in ((name, data), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(body), 0, 0o644
            tar.addfile(info, io.BytesIO(body))
    try:
        loaded = docker.load(buf.getvalue())
    except DockerError as exc:
        loaded = exc.problem
    if want not in loaded:
        raise DockerError(
            f"engine {docker.name} did not load the settled config of {want} ({loaded.strip()[-200:]}); "
            f"an engine whose image store needs every layer in a load (the containerd store) "
            f"cannot settle images yet",
            field="build",
        )
