"""`invoke warm`: run a command in an image, keep what it compiled, and build IMAGE-warm with those caches.

The run: one throwaway container of the image (GPUs when the engine has them), its /cache seeded as
a launcher seeds it (servebuild-cache seed), a census of /cache, CMD, a second census; the
difference, per JIT kind, is the number of cache files CMD wrote (the zero-compile metric). The files
CMD added (not those the image's seed already holds) are packed in the container, copied out, and
become one layer over the image at /opt/servebuild/seed/cache, with /opt/servebuild/seed/warm.json
and labels naming the image it was made from (id), the profile, the GPU, the driver and the host
architecture. The launchers copy the seed into /cache at each start, so a mounted volume benefits.

A cache that was first seeded by another image (a --volume holding /cache of another build) is
refused: kernels keyed by versions alone could still differ in what the image's headers compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from servebuild.build.docker import BuildRequest, DockerClient
from servebuild.build.manifest import LABEL_PREFIX
from servebuild.check.smoke import has_nvidia_runtime
from servebuild.errors import DockerTimeout, HostError, InputError, IntegrityError
from servebuild.fsutil import make_dir, open_host_file, write_json, writing
from servebuild.procs import last_words
from servebuild.recipe.grammar import IMAGE_ID, MAX_REFERENCE, NAME, SHA256, TAG, reserved_command, shown
from servebuild.render.payload import CACHE_TOOL
from servebuild.render.toolchain import VENV

PYTHON = f"{VENV}/bin/python"
WARM = f"{LABEL_PREFIX}.warm"
PACKED = "/tmp/servebuild-warm.tar"
LISTING = "/tmp/servebuild-census.json"  # the cache's files (size, mtime) before the command
DEFAULT_MAX_BYTES = 16 << 30


@dataclass(frozen=True)
class WarmRequest:
    image: str
    command: str
    profile: Optional[str] = None
    gpus: str = "all"  # all, none, or a device list (0,1)
    volumes: tuple[str, ...] = ()
    network: str = "none"
    timeout: int = 3600
    max_bytes: int = DEFAULT_MAX_BYTES
    tag: Optional[str] = None  # default IMAGE-warm (IMAGE's tag with -warm)
    check_only: bool = False  # measure only: build nothing


@dataclass
class WarmResult:
    image_id: str
    new_files: dict[str, int]
    bytes: int = 0
    tag: Optional[str] = None
    warm_id: Optional[str] = None
    record: dict = field(default_factory=dict)


def warm_tag(image: str) -> str:
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    return f"{name}:{tag}-warm"


def result_tag(image: str, tag: Optional[str]) -> str:
    """The warm image's tag: `tag` (--tag), else IMAGE's with -warm; one line before anything runs where
    `docker tag` would refuse it at the end, after the run and the build (an image id has no tag to extend)."""
    given = tag is not None
    if tag is None:
        if IMAGE_ID.match(image):
            raise InputError(
                f"{shown(image)} is an image id: there is no tag to add -warm to; give --tag", field="--tag"
            )
        tag = warm_tag(image)
    if len(tag) > MAX_REFERENCE or not TAG.match(tag) or SHA256.match(tag):  # docker takes no 64-hex name
        raise InputError(
            f"{'' if given else 'the default '}{shown(tag)} is not a tag docker takes "
            f"([HOST[:PORT]/]NAME[:TAG], TAG at most 128 characters, no digest)" + ("" if given else "; give --tag"),
            field="--tag",
        )
    return tag


def launcher_name(profile: Optional[str]) -> Optional[str]:
    """--profile names the launcher /usr/local/bin/PROFILE (SERVEBUILD_LAUNCHER and a label): a launch
    profile's name as a recipe may declare it, whatever image it is checked against."""
    if profile is not None and (not NAME.match(profile) or reserved_command(profile)):
        raise InputError(
            f"{shown(profile)} is not a launch profile name (lowercase letters, digits, '-', not a system command)",
            field="--profile",
        )
    return profile


def gpu_args(docker: DockerClient, gpus: str) -> list[str]:
    if gpus == "none":
        return []
    if not has_nvidia_runtime(docker):
        where = f"engine {docker.endpoint.host}" if docker.endpoint else "the local engine"
        raise InputError(
            f"{where} has no NVIDIA runtime: no GPU to warm the caches with; pass --gpus none to "
            f"warm only the JIT paths that need no GPU",
            field="--gpus",
        )
    return ["--gpus", "all" if gpus == "all" else f'"device={gpus}"']


def servebuild_image(docker: DockerClient, image: str) -> dict:
    """The image's config, if servebuild built it (its labels and the cache tool), else one line."""
    if docker.image_id(image) is None:
        raise InputError(f"image {image} is not in the engine; build it first (invoke build)", field="--image")
    info = docker.image_inspect(image)
    labels = info.get("Config", {}).get("Labels") or {}
    if f"{LABEL_PREFIX}.manifest.sha256" not in labels:
        raise InputError(
            f"image {image} was not built by servebuild (no {LABEL_PREFIX}.manifest.sha256 label): "
            f"warm only images with a servebuild seed and cache tool",
            field="--image",
        )
    return info


class Container:
    """One throwaway container of the image, removed on exit whatever happens."""

    def __init__(self, docker: DockerClient, image_id: str, args: list[str]):
        self.docker, self.name = docker, f"servebuild-warm-{uuid.uuid4().hex[:12]}"
        docker.run("run", "-d", "--name", self.name, *args, "--entrypoint", "/bin/sleep", image_id, "infinity")

    def stream(self, *argv: str, out, timeout: float) -> tuple[int, bytes, int]:
        """ARGV in the container, its output copied to `out` as it comes (DockerClient.stream)."""
        return self.docker.stream("exec", self.name, *argv, out=out, timeout=timeout)

    def tool(self, *argv: str, after: bool, parse: bool = True) -> tuple[int, object, str]:
        """The image's cache tool run with ARGV: (exit status, the JSON value of its last output line, that
        line). What it prints is hostile input (`after` the command, which may have replaced the tool, all
        the more): at most TOOL_OUTPUT bytes are held, and what is not one JSON value is one line."""
        code, tail, total = self.docker.stream(
            "exec", self.name, PYTHON, CACHE_TOOL, *argv, out=None, keep=TOOL_OUTPUT + 1, timeout=TOOL_SECONDS
        )
        what = "servebuild-cache " + " ".join(argv[:2] if argv[0] == "census" else argv[:1])  # not its paths
        if total > TOOL_OUTPUT:
            raise tool_fault(what, f"printed {total} bytes, more than {TOOL_OUTPUT}", after)
        lines = [ln for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else ""
        if code != 0 or not parse:
            return code, None, last
        try:
            return code, json.loads(last), last
        except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, JSON nested past the stack
            raise tool_fault(
                what, f"printed {'nothing' if not last else shown(last, 60)}, not a JSON line", after
            ) from None

    def census(self, *flags: str, after: bool = False) -> dict:
        what = f"servebuild-cache census {flags[0]}" if flags else "servebuild-cache census"
        code, value, last = self.tool("census", *flags, after=after)
        if code != 0:
            raise tool_fault(what, f"exited {code}: {shown(last, 200)}", after)
        problem = census_problem(value, since="--since" in flags)
        if problem:
            raise tool_fault(what, problem, after)
        return value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.docker.remove_container(self.name)


TOOL_OUTPUT = 1 << 20  # what the cache tool prints is a line of JSON: a megabyte is not its output
TOOL_SECONDS = 1800  # a census walks /cache (a mounted volume may hold many files); seed and pack copy it
MAX_COUNT = 10**9  # a count of cache files above this is not a count
KIND = re.compile(r"\A[^\x00-\x1f\x7f/]{1,255}\Z")  # a directory name under /cache ("." for its top)


def tool_fault(what: str, problem: str, after: bool) -> HostError:
    """The one line for cache-tool output that is not what the tool prints."""
    return HostError(
        f"the image's cache tool ({what}) {problem}"
        + ("; the command may have replaced or broken it; nothing was built" if after else ""),
        field="image",
    )


def count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def census_problem(value, since: bool) -> Optional[str]:
    """What is wrong with a census's JSON (None: nothing): an object whose manifest_sha256 and origin are
    what the tool writes and, after --since, whose `changed` maps each cache kind to a count."""
    if not isinstance(value, dict):
        return f"printed {type(value).__name__ if value is not None else 'null'}, not a JSON object"
    if not isinstance(value.get("manifest_sha256"), (str, type(None))):
        return "printed a manifest_sha256 that is not a string"
    origin = value.get("origin")
    if origin is not None and (
        not isinstance(origin, dict)
        or not all(isinstance(origin.get(key), (str, type(None))) for key in ("image_id", "manifest_sha256"))
    ):
        return "printed an origin that is not an object of an image id and a manifest hash"
    if since:
        changed = value.get("changed")
        if not isinstance(changed, dict):
            return (
                f"printed `changed` as {type(changed).__name__ if changed is not None else 'nothing'}, "
                f"not an object of counts per cache kind"
            )
        for kind, n in changed.items():
            if not KIND.match(kind):
                return f"printed a cache kind {shown(kind, 60)} that is not a directory name"
            if not count(n):
                return f"printed {shown(n, 40)} files for {shown(kind, 60)}, not a count from 0 to {MAX_COUNT}"
    return None


def check_origin(census: dict, image_id: str) -> None:
    origin = census.get("origin") or {}
    if origin.get("image_id") not in (None, image_id) or origin.get("manifest_sha256") not in (
        None,
        census.get("manifest_sha256"),
    ):
        raise IntegrityError(
            f"the /cache mounted here was first seeded by another image "
            f"({origin.get('image_id') or 'manifest ' + str(origin.get('manifest_sha256'))[:19]}), "
            f"not {image_id[:19]}: warm it from a fresh volume",
            field="--volume",
        )


def gpu_identity(box: Container, gpus: str) -> dict:
    if gpus == "none":
        return {"gpu": "none", "driver": "none"}
    code, tail, total = box.docker.stream(
        "exec",
        box.name,
        "nvidia-smi",
        "--query-gpu=name,driver_version",
        "--format=csv,noheader",
        out=None,
        keep=4096,
        timeout=120,
    )
    # the command could have replaced nvidia-smi: what reaches the labels is a short printable name or "unknown"
    lines = tail.decode(errors="replace").strip().splitlines() if code == 0 and total <= 4096 else []
    first = (lines or [","])[0].split(",")

    def sane(text: str) -> str:
        text = text.strip()
        return text if 0 < len(text) <= 128 and text.isascii() and text.isprintable() else "unknown"

    return {"gpu": sane(first[0]), "driver": sane(first[1] if len(first) > 1 else "")}


def unpack_cache(tar_path: Path, dest: Path) -> None:
    """The container's pack: regular files and directories under relative paths only (it came out of
    a container that ran a user's command: no link, device, absolute path or `..` is taken)."""
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                raise IntegrityError(
                    f"the packed cache holds {member.name!r}, not a plain file under /cache", field="--run"
                )
        for member in tar.getmembers():
            target = dest / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(target, member.mode & 0o755)
            os.utime(target, (member.mtime, member.mtime))  # ninja-driven JITs compare mtimes


def run_warm(docker: DockerClient, req: WarmRequest, work: Path, echo=print) -> WarmResult:
    tag = None if req.check_only else result_tag(req.image, req.tag)  # before the hour of work that ends in it
    launcher_name(req.profile)
    info = servebuild_image(docker, req.image)
    image_id = info["Id"]
    labels = info.get("Config", {}).get("Labels") or {}
    args = gpu_args(docker, req.gpus) + ["--network", req.network, "-e", f"SERVEBUILD_IMAGE_ID={image_id}"]
    if req.profile:
        args += ["-e", f"SERVEBUILD_LAUNCHER=/usr/local/bin/{req.profile}"]
    for spec in req.volumes:
        args += ["-v", spec]
    make_dir(work, "the warm output")  # before the container runs (an hour's warmup must not end in ENOSPC unnamed)
    log = work / "warm.log"
    with Container(docker, image_id, args) as box:
        seeded, _, said = box.tool("seed", after=False, parse=False)
        if seeded != 0:
            raise tool_fault("servebuild-cache seed", f"exited {seeded}: {shown(said, 200)}", False)
        before = box.census("--listing", LISTING)
        check_origin(before, image_id)
        brief = req.command.strip().splitlines()[0][:80] + (" ..." if len(req.command.strip()) > 80 else "")
        echo(f"warm: {req.image} ({image_id[:19]}): running {brief!r}")
        start = time.monotonic()
        # an hour of output goes to warm.log as it comes (only its tail is held, for the error line); the
        # log is opened before the command starts: no link or FIFO planted at warm.log is written through
        with writing(log, "the warm log"), os.fdopen(open_host_file(log, "the warm log"), "wb") as out:
            out.write(f"$ {req.command}\n".encode())
            try:  # on every engine kind: the client is stopped, and the container goes with the `with`
                code, tail, _ = box.stream("/bin/sh", "-c", req.command, out=out, timeout=req.timeout)
            except DockerTimeout:
                raise HostError(
                    f"the command ran past --timeout {req.timeout} s and was stopped; nothing was built; log: {log}",
                    field="--timeout",
                ) from None
        seconds = time.monotonic() - start
        if code != 0:
            said = last_words(tail)
            raise HostError(
                f"the command exited {code} after {seconds:.0f} s"
                + (f" ({said})" if said else "")
                + f"; nothing was built; log: {log}",
                field="--run",
            )
        compiled = dict(sorted(box.census("--since", LISTING, after=True)["changed"].items()))
        result = WarmResult(image_id=image_id, new_files=compiled)
        echo(
            f"warm: {sum(compiled.values())} cache files written (new or rebuilt) in {seconds:.0f} s"
            + (f" ({', '.join(f'{k} {n}' for k, n in compiled.items())})" if compiled else " (nothing compiled)")
        )
        if req.check_only:
            return result
        code, totals, said = box.tool("pack", "--out", PACKED, "--max-bytes", str(req.max_bytes), after=True)
        if code == 3:
            raise InputError(
                shown(said, 300)[1:-1].replace("servebuild-cache: ", "") + "; raise --max-bytes or warm less",
                field="--max-bytes",
            )
        if code != 0:
            raise tool_fault("servebuild-cache pack", f"exited {code}: {shown(said, 200)}", True)
        if not (
            isinstance(totals, dict)
            and count(totals.get("files"))
            and isinstance(totals.get("bytes"), int)
            and not isinstance(totals["bytes"], bool)
            and 0 <= totals["bytes"] <= req.max_bytes
        ):
            raise tool_fault(
                "servebuild-cache pack",
                f"printed {shown(said, 60)}, not its files and bytes (two counts, the bytes at most --max-bytes)",
                True,
            )
        context = work / "context"
        if context.exists():
            shutil.rmtree(context)
        (context / "seed" / "cache").mkdir(parents=True)
        tar_path = work / "cache.tar"
        docker.run("cp", f"{box.name}:{PACKED}", str(tar_path))
        identity = gpu_identity(box, req.gpus)
    unpack_cache(tar_path, context / "seed" / "cache")
    record = {
        "image": req.image,
        "image_id": image_id,
        "profile": req.profile,
        "command": req.command,
        "command_sha256": hashlib.sha256(req.command.encode()).hexdigest(),
        **identity,
        "arch": docker.info().get("Architecture"),
        "new_files": compiled,
        "files": totals["files"],
        "bytes": totals["bytes"],
        "seconds": round(seconds, 1),
        "recipe": labels.get(f"{LABEL_PREFIX}.recipe"),
        "manifest_sha256": labels.get(f"{LABEL_PREFIX}.manifest.sha256"),
    }
    write_json(context / "seed" / "warm.json", record)
    # BuildKit takes FROM by name: a tag of this run on exactly the image id, removed after the build
    base = f"servebuild-warm-base:{image_id.split(':')[-1][:12]}-{uuid.uuid4().hex[:8]}"
    docker.tag(image_id, base)
    (context / "Dockerfile").write_text(f"FROM {base}\nCOPY seed/ /opt/servebuild/seed/\n")
    warm_labels = {
        f"{WARM}.base-image": image_id,
        f"{WARM}.profile": req.profile or "",
        f"{WARM}.gpu": identity["gpu"],
        f"{WARM}.driver": identity["driver"],
        f"{WARM}.arch": str(record["arch"]),
        f"{WARM}.command.sha256": record["command_sha256"],
        f"{WARM}.files": str(totals["files"]),
        f"{WARM}.bytes": str(totals["bytes"]),
    }
    platform = f"{info.get('Os', 'linux')}/{info.get('Architecture')}"
    try:
        warm_id = docker.build(
            BuildRequest(context=context, platform=platform, build_args={}, labels=warm_labels, secrets={}),
            work / "build.log",
            echo=None,
        )
    finally:
        docker.remove_image(base, force=False)  # only this name: the image stays
    # before the tag, as a build's manifest: a record that cannot be kept tags nothing
    with writing(work, "the warm output"):
        write_json(work / "warm.json", {**record, "warm_image_id": warm_id, "tag": tag, "labels": warm_labels})
    docker.tag(warm_id, tag)
    echo(
        f"warm: built {tag} ({warm_id[:19]}): {totals['files']} cache files, {totals['bytes']} bytes over {image_id[:19]}"
    )
    result.bytes, result.tag, result.warm_id, result.record = totals["bytes"], tag, warm_id, record
    return result
