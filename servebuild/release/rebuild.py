"""`invoke rebuild --check REF`: build a published image again from this checkout and compare it with
the registry's, layer by layer (issue 20).

REF's index (or image manifest) -> the platform's image manifest and config (bounded reads) -> the
config's labels name the recipe, variant and platform (recipe and variant by the recipe-name grammar: never a
path) -> the rebuild's plan is made from them (a recipe or variant this checkout lacks is refused; both
checks before any layer is read) -> every layer blob the registry serves is read
to disk (streamed, within LAYER_BYTES; each layer one operation under SERVEBUILD_REGISTRY_DEADLINE, and
all of the command's registry reads under SERVEBUILD_REBUILD_DEADLINE) and must hash to its descriptor,
and its uncompressed bytes to the config's diff_id (a blob that hashes to its descriptor but not to
its diff_id is an IntegrityError before any build: the registry's image disagrees with itself) -> the recipe is built again with --no-cache (build dir
build/rebuild/, tag servebuild-rebuild/RECIPE:ARCH) -> the rebuilt config digest must be the
registry's. The layers are inflated at most to `inflated_limit` of their blobs, counted together
layer by layer (100 times, 64 MiB at least, 64 GiB at most: a gzip bomb, or many layers each under a
per-layer bound, stop there, an IntegrityError naming the layer). On a difference the first differing layer is named with the paths that differ inside it
(the registry's layer tar and the rebuilt one compared entry by entry), or, when every layer is the
same, the config fields that differ. The caller exits 0 (identical), 1 (different) or 2 (bad input,
one line).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tarfile
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from servebuild.build import committed, run
from servebuild.build.docker import DockerClient
from servebuild.build.imageconfig import image_config
from servebuild.build.manifest import LABEL_PREFIX
from servebuild.errors import InputError, IntegrityError, ServebuildError
from servebuild.plan.make import BuildOptions, BuildPlan, make_plan
from servebuild.recipe.grammar import NAME, shown
from servebuild.platforms import arch_of
from servebuild.registry import limits
from servebuild.registry.bounded import BadJSON, parse_json
from servebuild.registry.deadline import Expired, deadline
from servebuild.render.settle import BEGIN, END, SETTLE, START
from servebuild.registry.client import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    RegistryError,
    RegistryTimeout,
)

PATHS_SHOWN = 20
DIFF_ID = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
READ = 1 << 20


@dataclass
class Published:
    ref: str
    platform: str
    digest: str  # the image manifest's
    config_digest: str
    config: dict
    layers: list[dict]  # the image manifest's layer descriptors
    diff_ids: list[str] = field(default_factory=list)  # the config's rootfs.diff_ids, checked (one per layer)

    @property
    def label(self) -> Callable[[str], str]:
        container = self.config.get("config")
        labels = container.get("Labels") if isinstance(container, dict) else None
        labels = labels if isinstance(labels, dict) else {}  # a config not of the image-spec's shape has no labels
        return lambda key: str(labels.get(f"{LABEL_PREFIX}.{key}") or "")

    def created_by(self, index: int) -> str:
        """The step that made layer `index`, as its history says, without the shell and the settle preamble."""
        steps = [h for h in self.config.get("history") or [] if isinstance(h, dict) and not h.get("empty_layer")]
        text = str(steps[index].get("created_by", "")) if index < len(steps) else ""
        text = " ".join(text.replace("\\\n", " ").split()).replace("/bin/bash -o pipefail -c ", "")
        # the wrapper's scripts (render/settle.py), or the wrapper inline (images built before it was a script)
        text = text.replace(f"{BEGIN} && ( ", "").split(f" ) && {END}")[0]
        text = text.replace(f"{START} && ( ", "").split(f" ) && {SETTLE.split(' ', 1)[0]} ")[0]
        return text[:120]


@dataclass
class Report:
    ref: str
    platform: str
    registry_id: str
    rebuilt_id: str
    layers: int
    difference: list[str] = field(default_factory=list)  # empty: identical

    @property
    def identical(self) -> bool:
        return not self.difference


def _json(data: bytes, what: str) -> dict:
    try:
        doc = parse_json(data, what, limits.JSON_DEPTH)
    except BadJSON as exc:
        raise RegistryError(exc.problem, field="registry") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{what} is not a JSON object", field="registry")
    return doc


def _diff_ids(config: dict, what: str) -> list[str]:
    """The config's rootfs.diff_ids, each a sha256 digest: what the registry serves is checked for its
    shape before it is indexed (a string rootfs was an AttributeError traceback)."""
    rootfs = config.get("rootfs")
    if rootfs is None:
        return []
    if not isinstance(rootfs, dict):
        raise RegistryError(f"is a {type(rootfs).__name__}, not a mapping with diff_ids", file=what, field="rootfs")
    diff_ids = rootfs.get("diff_ids")
    if diff_ids is None:
        return []
    if not isinstance(diff_ids, list):
        raise RegistryError(
            f"is a {type(diff_ids).__name__}, not a list of layer digests", file=what, field="rootfs.diff_ids"
        )
    for i, diff_id in enumerate(diff_ids):
        if not isinstance(diff_id, str) or not DIFF_ID.match(diff_id):
            raise RegistryError(
                f"{shown(diff_id)} is not a sha256:<64 hex> digest", file=what, field=f"rootfs.diff_ids[{i}]"
            )
    return diff_ids


def _platform_of(entry: dict) -> str:
    """An index entry's platform as os/architecture ('None/None' when it names none)."""
    found = entry.get("platform")
    found = found if isinstance(found, dict) else {}
    return f"{found.get('os')}/{found.get('architecture')}"


def published(client: RegistryClient, repo: str, tag: str, platform: str) -> Published:
    """The platform's image under REF, its config and layer descriptors (registry reads, bounded)."""
    ref = f"{client.registry}/{repo}:{tag}"
    with client.operation(f"reading {ref}"):
        found = client.get_manifest(repo, tag)
        if found is None:
            raise InputError(f"{ref}: no such tag", field="--check")
        body, digest, media = found
        if media in (OCI_INDEX, DOCKER_LIST):
            entries = _json(body, f"{ref} index").get("manifests") or []
            if not isinstance(entries, list):
                raise RegistryError(
                    f"{ref} index: manifests is a {type(entries).__name__}, not a list", field="registry"
                )
            entries = [e for e in entries if isinstance(e, dict)]
            digests = [e.get("digest") for e in entries if _platform_of(e) == platform]
            if len(digests) > 1:  # which of them was published is not for this check to guess
                raise InputError(
                    f"{ref}: its index lists {len(digests)} images for {platform}; an index names one "
                    f"image per platform",
                    field="--platform",
                )
            if not digests:
                listed = sorted({_platform_of(e) for e in entries})
                raise InputError(
                    f"{ref} holds no {platform} image (it lists {', '.join(listed) or 'none'})", field="--platform"
                )
            if not isinstance(digests[0], str) or not DIFF_ID.match(digests[0]):
                raise RegistryError(
                    f"{ref} index: its {platform} entry names {shown(digests[0])}, not a sha256 digest",
                    field="registry",
                )
            found = client.get_manifest(repo, digests[0])
            if found is None:
                raise RegistryError(
                    f"{ref}: the index names {digests[0]}, which the registry does not have", field="registry"
                )
            body, digest, media = found
        if media not in (OCI_MANIFEST, DOCKER_MANIFEST):
            raise RegistryError(f"{ref} {platform}: {digest} is a {media}, not an image manifest", field="registry")
        image = _json(body, f"{ref} {platform} manifest")
        if (
            not isinstance(image.get("config"), dict)
            or not isinstance(image.get("layers") or [], list)
            or not all(isinstance(d, dict) for d in image.get("layers") or [])
        ):
            raise RegistryError(
                f"{ref} {platform} manifest: its config is not a descriptor or its layers not a list of descriptors",
                field="registry",
            )
        config_digest = str(image["config"].get("digest", ""))
        config = _json(client.get_blob(repo, config_digest), f"{ref} {platform} image config")
    layers = list(image.get("layers") or [])
    out = Published(ref, platform, digest, config_digest, config, layers)
    if f"{config.get('os')}/{config.get('architecture')}" != platform or out.label("platform") != platform:
        raise InputError(
            f"{ref}: its {platform} image is labelled {out.label('platform') or 'no platform'} "
            f"({config.get('os')}/{config.get('architecture')})",
            field="--platform",
        )
    if not out.label("recipe"):
        raise InputError(
            f"{ref} {platform}: the image has no {LABEL_PREFIX}.recipe label; it was not built by servebuild",
            field="--check",
        )
    for key in ("recipe", "variant"):  # they choose what is built: names as --recipe takes them, never a path
        value = out.label(key)
        if value and not NAME.match(value):
            named = "a recipe of this checkout" if key == "recipe" else "a variant of the labelled recipe"
            raise InputError(
                f"{ref} {platform}: its {LABEL_PREFIX}.{key} label {shown(value)} is not a {key} name "
                f"(lowercase letters, digits, '-': {named}, never a file)",
                field="--check",
            )
    out.diff_ids = _diff_ids(config, f"{ref} {platform} image config")
    if len(out.diff_ids) != len(layers):
        raise RegistryError(
            f"{ref} {platform}: the manifest names {len(layers)} layers, the config {len(out.diff_ids)}",
            field="registry",
        )
    return out


def registry_layers(client: RegistryClient, repo: str, image: Published, work: Path) -> list[tuple[Path, str]]:
    """Each registry layer on disk, uncompressed, with what is wrong with it ('' when its blob hashes to
    its descriptor; a blob that does not is a difference, shown with its paths after the build). A blob
    that hashes to its descriptor must uncompress to the config's diff_id, else IntegrityError."""
    diff_ids = image.diff_ids
    out, blobs, inflated = [], 0, 0  # bytes of the blobs so far, and of what they inflated to
    for i, desc in enumerate(image.layers):
        blob, tar = work / f"registry-{i}.blob", work / f"registry-{i}.tar"
        problem = ""
        with blob.open("w+b") as sink:
            try:  # one operation per layer: SERVEBUILD_REGISTRY_DEADLINE bounds it, not LAYER_S alone
                with client.operation(f"reading layer {i} ({str(desc.get('digest', ''))[:80]}) of {image.ref}"):
                    client.get_blob_into(repo, str(desc.get("digest", "")), sink, limits.LAYER_BYTES, limits.LAYER_S)
            except RegistryError as exc:
                if "served blob" not in exc.problem:  # unreachable, too large, too slow: not an answer to compare
                    raise
                problem = exc.problem
        blobs += blob.stat().st_size  # the bytes served (they hashed to the digest), not the descriptor's claim
        content = _uncompressed(
            blob,
            tar,
            inflated_limit(blobs) - inflated,
            f"{image.ref} {image.platform}: layer {i} ({desc.get('digest')})",
        )
        inflated += tar.stat().st_size
        if not problem and content != diff_ids[i]:  # the registry's image disagrees with itself: no build
            raise IntegrityError(
                f"{image.ref} {image.platform}: layer {i} ({desc.get('digest')}) hashes to its "
                f"digest but uncompresses to {content or 'no readable gzip or tar layer'}; the "
                f"config's diff_id is {diff_ids[i]}",
                field="registry",
            )
        blob.unlink()
        out.append((tar, problem))
    return out


def inflated_limit(compressed: int) -> int:
    """The most bytes layer blobs of `compressed` bytes together may inflate to (limits.LAYER_INFLATE_*,
    IMAGE_INFLATED_BYTES): one layer's bound, and that of the layers read so far, together."""
    return max(limits.LAYER_INFLATE_FLOOR, min(limits.LAYER_INFLATE_RATIO * compressed, limits.IMAGE_INFLATED_BYTES))


def _uncompressed(blob: Path, tar: Path, limit: int, what: str) -> str:
    """Write `blob` uncompressed (gzip, or as it is) to `tar`, at most `limit` bytes (past it an
    IntegrityError naming `what`, the layer); the sha256 of what was written ('' if unreadable)."""
    digest, size = hashlib.sha256(), 0
    with blob.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    try:
        with gzip.open(blob, "rb") if gzipped else blob.open("rb") as src, tar.open("wb") as dst:
            for chunk in iter(lambda: src.read(min(READ, limit + 1 - size)), b""):
                size += len(chunk)
                if size > limit:
                    raise IntegrityError(
                        f"{what} inflates past {limit} bytes (its blob is {blob.stat().st_size}; "
                        f"an image's layers may inflate {limits.LAYER_INFLATE_RATIO} times their "
                        f"blobs together, at least {limits.LAYER_INFLATE_FLOOR >> 20} MiB): not "
                        f"unpacked further",
                        field="registry",
                    )
                digest.update(chunk)
                dst.write(chunk)
    except (OSError, EOFError, zlib.error):
        return ""
    return "sha256:" + digest.hexdigest()


def rebuild_plan(root: Path, image: Published, ca_bundle: Optional[Path], echo: bool) -> BuildPlan:
    """The plan of the labelled recipe (and variant) for the platform, --no-cache, beside the user's builds:
    made before any layer is read, so a label naming what this checkout cannot build (no such recipe or
    variant, a platform it lacks, an unpinned entry) costs no download."""
    recipe, variant = image.label("recipe"), image.label("variant") or None
    options = BuildOptions(
        platform=image.platform,
        variant=variant,
        no_cache=True,
        ca_bundle=ca_bundle,
        tag=f"servebuild-rebuild/{recipe}:{variant + '-' if variant else ''}{arch_of(image.platform)}",
        build_root=root / "build" / "rebuild",
        echo=echo,
    )
    try:
        return make_plan(root, recipe, options)
    except ServebuildError as exc:
        named = f"{LABEL_PREFIX}.recipe {recipe}" + (f", {LABEL_PREFIX}.variant {variant}" if variant else "")
        raise type(exc)(
            f"{image.ref} {image.platform}: its labels ({named}) name what this checkout cannot build: {exc}",
            field="--check",
        ) from None


def rebuild(plan: BuildPlan, image: Published, docker: DockerClient) -> tuple[str, dict]:
    """Build the plan (rebuild_plan's) and read the rebuilt image's config."""
    result = run.build(plan, docker)
    return result.image_id, image_config(docker, result.image_id, image.platform)


@contextmanager
def registry_reads(registry: str, ref: str, seconds: float):
    """Every registry read of one rebuild --check inside one deadline (past it one RegistryTimeout
    line), however many layers the manifest lists; the build is not inside it."""
    try:
        with deadline(seconds, f"the registry reads of rebuild --check {ref} (SERVEBUILD_REBUILD_DEADLINE)"):
            yield
    except Expired as exc:  # between two requests (inflating a layer): no client call caught it
        raise RegistryTimeout(
            f"{registry}: {exc.what} did not finish within {exc.seconds:g} s", field="registry"
        ) from None


def check(
    root: Path,
    client: RegistryClient,
    repo: str,
    tag: str,
    platform: str,
    docker: DockerClient,
    ca_bundle: Optional[Path] = None,
    echo: bool = True,
    total_s: Optional[float] = None,
) -> Report:
    total_s = total_s or limits.seconds_from_env("SERVEBUILD_REBUILD_DEADLINE", limits.REBUILD_REGISTRY_S)
    with tempfile.TemporaryDirectory(prefix="servebuild-rebuild-") as tmp:
        work = Path(tmp)
        with registry_reads(client.registry, f"{client.registry}/{repo}:{tag}", total_s):
            image = published(client, repo, tag, platform)
            plan = rebuild_plan(root, image, ca_bundle, echo)  # before any layer is read
            theirs = registry_layers(client, repo, image, work)
        rebuilt_id, config = rebuild(plan, image, docker)
        report = Report(image.ref, platform, image.config_digest, rebuilt_id, len(image.layers))
        ours = (config.get("rootfs") or {}).get("diff_ids") or []
        for i in range(max(len(ours), len(theirs))):
            problem = theirs[i][1] if i < len(theirs) else "the registry's image has no such layer"
            mine = ours[i] if i < len(ours) else None
            if not problem and mine == image.diff_ids[i]:
                continue
            registry_id = image.diff_ids[i] if i < len(theirs) else None
            problem = problem or f"registry {registry_id}, rebuild {mine}"
            report.difference.append(f"layer {i} ({image.created_by(i) or 'no history'}) differs: {problem}")
            ours_tar = _saved_layer(docker, rebuilt_id, mine, work) if mine else None
            report.difference += paths_differing(theirs[i][0] if i < len(theirs) else None, ours_tar)
            return report
        if rebuilt_id != image.config_digest:
            report.difference.append(
                "every layer is the same; the config differs: " + ", ".join(config_differences(image.config, config))
            )
    return report


def check_committed(
    root: Path,
    recipe: str,
    platform: str,
    variant: Optional[str],
    docker: DockerClient,
    ca_bundle: Optional[Path] = None,
    echo: bool = True,
) -> tuple[bool, str, str]:
    """Rebuild the recipe (and variant) --no-cache and compare it with its committed id, no registry:
    (identical, the rebuilt id, the verdict line naming the first differing layer)."""
    plan = make_plan(
        root,
        recipe,
        BuildOptions(
            platform=platform,
            variant=variant,
            no_cache=True,
            ca_bundle=ca_bundle,
            echo=echo,
            tag=f"servebuild-rebuild/{recipe}:{variant + '-' if variant else ''}{arch_of(platform)}",
            build_root=root / "build" / "rebuild",
        ),
    )
    if committed.key(platform, variant) not in committed.load_committed(plan.loaded):
        raise InputError(
            f"{committed.display(plan.loaded)} has no committed id for {committed.key(platform, variant)}",
            hint="build it with --record-id first",
            field="--committed",
        )
    result = run.build(plan, docker)
    layers, steps = committed.layers_of(docker, result.image_id, platform)
    same, line = committed.verdict(plan.loaded, platform, result.image_id, layers, steps, variant)
    return same, result.image_id, line


def _saved_layer(docker: DockerClient, image_id: str, diff_id: str, work: Path) -> Optional[Path]:
    """The rebuilt image's layer `diff_id` as a tar file, out of `docker save` (the one whose bytes hash to it)."""
    target = work / "rebuilt.tar"
    found = False
    with docker.saved(image_id) as tar:
        for member in tar:
            if found or not (member.isfile() and member.name.endswith("/layer.tar")):
                continue
            digest, src = hashlib.sha256(), tar.extractfile(member)
            with target.open("wb") as dst:
                for chunk in iter(lambda: src.read(READ), b""):
                    digest.update(chunk)
                    dst.write(chunk)
            found = "sha256:" + digest.hexdigest() == diff_id
    return target if found else None


def entries(path: Optional[Path]) -> Optional[dict[str, tuple]]:
    """A layer tar's entries: path -> (type, mode, uid, gid, size, mtime, link, content sha256); None if unreadable."""
    if path is None:
        return None
    out = {}
    try:
        with tarfile.open(path, mode="r:") as tar:
            for m in tar:
                digest = ""
                if m.isfile():
                    h, src = hashlib.sha256(), tar.extractfile(m)
                    for chunk in iter(lambda: src.read(READ), b""):
                        h.update(chunk)
                    digest = h.hexdigest()[:16]
                out[m.name.rstrip("/")] = (
                    m.type,
                    oct(m.mode & 0o7777),
                    m.uid,
                    m.gid,
                    m.size,
                    int(m.mtime),
                    m.linkname,
                    digest,
                )  # the mode's file-type bits (Go's tar writes them) say what type says
    except (tarfile.TarError, OSError):
        return None
    return out


FIELDS = ("type", "mode", "uid", "gid", "size", "mtime", "link", "content")


def paths_differing(registry_tar: Optional[Path], rebuilt_tar: Optional[Path]) -> list[str]:
    theirs, ours = entries(registry_tar), entries(rebuilt_tar)
    if theirs is None or ours is None:
        return [f"  (no path list: the {'registry' if theirs is None else 'rebuilt'} layer is not a readable tar)"]
    lines = []
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if a == b:
            continue
        if a is None or b is None:
            lines.append(f"  {name}: only in the {'rebuild' if a is None else 'registry'}")
        else:
            lines.append(f"  {name}: " + ", ".join(f"{k} {x} -> {y}" for k, x, y in zip(FIELDS, a, b) if x != y))
    shown = lines[:PATHS_SHOWN]
    if len(lines) > PATHS_SHOWN:
        shown.append(f"  ... and {len(lines) - PATHS_SHOWN} more paths")
    return shown or ["  (the entries are the same; their order or padding differs)"]


def config_differences(theirs: dict, ours: dict) -> list[str]:
    out = []
    for key in sorted(set(theirs) | set(ours)):
        if key == "config":
            a, b = theirs.get(key) or {}, ours.get(key) or {}
            out += [f"config.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif json.dumps(theirs.get(key), sort_keys=True) != json.dumps(ours.get(key), sort_keys=True):
            out.append(key)
    return out or ["key order or whitespace"]
