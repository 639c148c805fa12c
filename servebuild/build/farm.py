"""The build farm: which Docker engine builds which platform, checked before anything builds.

A farm file (default `farm.yaml` at the project root, or `--farm FILE`) maps each platform to one
or more engine endpoints, in order of preference:

    platforms:
      linux/amd64:
        - host: unix:///var/run/docker.sock
      linux/arm64:
        - host: tcp://gh200-01.lab:2376
          tls: {ca: certs/ca.pem, cert: certs/cert.pem, key: certs/key.pem}
        - host: ssh://builder@gh200-02
    preflight_timeout: 30

The first engine of a platform that passes the preflight builds it: reachable within the timeout,
the recipe's bases present (or pullable) there, and either of the platform's architecture or able
to run the platform's containers (a throwaway `uname -m` container of the build base under
`--platform`, which is exactly what the build's RUN steps need from QEMU binfmt on that host).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Optional, TextIO

from pydantic import Field, ValidationError, field_validator, model_validator

from servebuild import procs
from servebuild.build import run
from servebuild.build.docker import DockerClient, Endpoint
from servebuild.errors import DockerError, InputError, RecipeError, ServebuildError
from servebuild.fsutil import named_problem, read_input, read_json_object
from servebuild.recipe.load import _message, _place
from servebuild.platforms import PLATFORMS, arch_of, docker_arch, machine_of
from servebuild.recipe.schema import Model
from servebuild.yamlfile import load_yaml

FARM_FILE = "farm.yaml"
PULL_TIMEOUT_S = 1800  # a missing base may be pulled during the preflight (CUDA bases are GBs)

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]{{2,45}}\])"
UNIX = re.compile(r"^unix://(?P<path>/[A-Za-z0-9_.@+/-]*[A-Za-z0-9_.@+-])\Z")
SSH = re.compile(
    rf"^ssh://(?:(?P<user>[A-Za-z_][A-Za-z0-9_.-]{{0,31}})@)?(?P<host>{_HOSTNAME})(?::(?P<port>[0-9]{{1,5}}))?\Z"
)
TCP = re.compile(rf"^tcp://(?P<host>{_HOSTNAME}):(?P<port>[0-9]{{1,5}})\Z")
SCHEMES = "unix:///PATH, ssh://[USER@]HOST[:PORT] or tcp://HOST:PORT (with tls)"


class TLSFiles(Model):
    ca: str  # the CA that signed the engine's certificate
    cert: Optional[str] = None  # client certificate and key, both or neither
    key: Optional[str] = None

    @model_validator(mode="after")
    def _pair(self):
        if (self.cert is None) != (self.key is None):
            given, missing = ("key", "cert") if self.cert is None else ("cert", "key")
            raise ValueError(f"{given} is given without {missing}: a client certificate needs both")
        return self


class EngineEntry(Model):
    host: str
    tls: Optional[TLSFiles] = None
    ssh_config: Optional[str] = None  # an ssh_config(5) file for ssh:// (identity, known hosts, jump host)
    network: Optional[Literal["host"]] = None  # RUN steps' network: `host` on an engine without a bridge

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        problem = host_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _scheme(self):
        if self.host.startswith("tcp://") and self.tls is None:
            raise ValueError(f"{self.host} needs `tls` (an engine's plain TCP socket is root on that host)")
        if self.tls is not None and not self.host.startswith("tcp://"):
            raise ValueError(f"`tls` is for tcp:// engines; {self.host.split(':', 1)[0]}:// carries its own security")
        if self.ssh_config is not None and not self.host.startswith("ssh://"):
            raise ValueError(f"`ssh_config` is for ssh:// engines, not {self.host.split(':', 1)[0]}://")
        return self


class FarmModel(Model):
    platforms: dict[str, list[EngineEntry]]
    preflight_timeout: int = Field(default=30, gt=0, le=600)


def host_problem(host: str) -> Optional[str]:
    scheme = host.split("://", 1)[0] if "://" in host else None
    pattern = {"unix": UNIX, "ssh": SSH, "tcp": TCP}.get(scheme or "")
    if pattern is None:
        return f"{host!r}: unsupported scheme {scheme or '(none)'!r}; an engine is {SCHEMES}"
    found = pattern.match(host)
    if not found or (scheme == "unix" and ".." in found["path"].split("/")):
        return f"{host!r} is not a {scheme}:// engine address ({SCHEMES})"
    port = found.groupdict().get("port")
    if port is not None and not 0 < int(port) < 65536:
        return f"{host!r}: port {port} is out of range"
    return None


def endpoint_key(host: str) -> tuple:
    """The same engine written two ways (case, a leading zero, `//`, ssh's default port) is one key."""
    scheme = host.split("://", 1)[0]
    if scheme == "unix":
        return ("unix", os.path.normpath(UNIX.match(host)["path"]))
    found = (SSH if scheme == "ssh" else TCP).match(host)
    default_port = 22 if scheme == "ssh" else None
    port = int(found["port"]) if found["port"] else default_port
    return (scheme, found.groupdict().get("user"), found["host"].lower(), port)


@dataclass(frozen=True)
class FarmEngine:
    endpoint: Endpoint
    field: str  # platforms.linux/arm64.0: where the farm file names it
    line: Optional[int]


@dataclass(frozen=True)
class Farm:
    file: str  # as shown in errors
    engines: dict[str, list[FarmEngine]]
    timeout: int

    def error(self, engine: FarmEngine, problem: str, cls=DockerError) -> ServebuildError:
        return cls(problem, file=self.file, field=engine.field, line=engine.line)


def farm_path(root: Path, option: Optional[str]) -> Optional[Path]:
    """--farm FILE, else FARM_FILE at the project root if there is one, else None (the local engine)."""
    if option:
        path = Path(option)
        if not path.exists():
            raise InputError(f"farm file {option!r} does not exist", field="--farm")
        return path
    default = root / FARM_FILE
    return default if default.exists() else None


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_farm(path: Path, root: Path) -> Farm:
    """Read, validate and check a farm file; every problem is one line naming file, field (and line)."""
    display = _display(path, root)
    data, lines = load_yaml(path, display)
    chain = [types.SimpleNamespace(display=display, lines=lines)]
    if not isinstance(data, dict):
        raise RecipeError("a farm file is a YAML mapping with `platforms:`", file=display)
    try:
        model = FarmModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise _place(chain, tuple(err["loc"]), _message(err)) from None
    if not model.platforms:
        raise _place(chain, ("platforms",), "names no platform; map each platform to its engines")
    engines: dict[str, list[FarmEngine]] = {}
    for platform, entries in model.platforms.items():
        if platform not in PLATFORMS:
            raise _place(
                chain, ("platforms", platform), f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}"
            )
        if not entries:
            raise _place(chain, ("platforms", platform), "lists no engine")
        seen: dict[tuple, int] = {}
        engines[platform] = []
        for i, entry in enumerate(entries):
            key = endpoint_key(entry.host)
            if key in seen:
                raise _place(
                    chain,
                    ("platforms", platform, i, "host"),
                    f"{entry.host} is listed twice for {platform} (also entry {seen[key]})",
                )
            seen[key] = i
            loc = ("platforms", platform, i)
            tls = _tls_files(entry, path.parent, chain, loc + ("tls",))
            if entry.ssh_config is not None:
                tls["ssh_config"] = _checked_file(
                    entry.ssh_config,
                    path.parent,
                    chain,
                    loc + ("ssh_config",),
                    (
                        "Host",
                        "host",
                        "HostName",
                        "IdentityFile",
                        "User",
                        "Port",
                        "UserKnownHostsFile",
                        "StrictHostKeyChecking",
                        "Match",
                    ),
                    "an ssh_config file",
                )
            engines[platform].append(
                FarmEngine(
                    Endpoint(entry.host, network=entry.network, **tls),
                    field=".".join(map(str, loc)),
                    line=lines.get(loc),
                )
            )
    return Farm(display, engines, model.preflight_timeout)


PEM_MARKERS = {
    "ca": ("-----BEGIN CERTIFICATE-----",),
    "cert": ("-----BEGIN CERTIFICATE-----",),
    "key": ("PRIVATE KEY-----",),
}


def _tls_files(entry: EngineEntry, base: Path, chain, loc: tuple) -> dict[str, Path]:
    """Each TLS file: relative to the farm file, a readable regular PEM file. A key's bytes are
    checked for a PEM marker and never shown."""
    if entry.tls is None:
        return {}
    out = {}
    for name in ("ca", "cert", "key"):
        value = getattr(entry.tls, name)
        if value is not None:
            what = "a PEM private key" if name == "key" else "a PEM certificate"
            out[name] = _checked_file(value, base, chain, loc + (name,), PEM_MARKERS[name], what)
    return out


def _checked_file(value: str, base: Path, chain, loc: tuple, markers: tuple[str, ...], what: str) -> Path:
    """A path relative to the farm file naming a readable regular file of a few kB holding one of
    `markers`; its bytes are never shown."""
    if not value or "\x00" in value:
        raise _place(chain, loc, "is not a file path")
    path = (base / value) if not os.path.isabs(value) else Path(value)
    try:
        head = read_input(path, "tls", value)
    except ServebuildError as exc:
        raise _place(chain, loc, named_problem(value, exc.problem)) from None
    if not any(marker.encode() in head for marker in markers):
        raise _place(chain, loc, f"{value} is not {what}")
    del head
    return path.resolve()


def local_farm(platforms: list[str]) -> Farm:
    """No farm file: every platform on the engine the environment names (as a single build does)."""
    return Farm("", {p: [FarmEngine(None, field="--platform", line=None)] for p in platforms}, 30)


# -- preflight


@dataclass
class Node:
    platform: str
    engine: FarmEngine
    client: DockerClient

    @property
    def name(self) -> str:
        return self.client.name


Connect = Callable[[Optional[Endpoint], int], DockerClient]


def _connect(endpoint: Optional[Endpoint], timeout: int) -> DockerClient:
    return DockerClient(endpoint=endpoint, timeout=timeout) if endpoint else DockerClient()


def preflight(farm: Farm, plans: dict, connect: Connect = _connect, note: Optional[TextIO] = None) -> dict:
    """One healthy engine per planned platform, or one line naming the first problem; nothing is
    built or tagged here. `plans` maps platform -> plan.make.BuildPlan; `note` (default stderr) hears
    about engines skipped for the next one listed."""
    note = note or sys.stderr
    nodes = {}
    for platform, plan in plans.items():
        if platform not in farm.engines:
            raise RecipeError(
                f"no engine for {platform}; the farm lists {', '.join(farm.engines)}", file=farm.file, field="platforms"
            )
        problems = []
        for engine in farm.engines[platform]:
            try:
                nodes[platform] = check_engine(farm, engine, plan, connect)
                break
            except ServebuildError as exc:
                problems.append(exc)
                if len(farm.engines[platform]) > 1:
                    note.write(f"[{platform}] skipping {engine.endpoint}: {exc.problem}\n")
        else:
            first = problems[0]
            more = f" (and {len(problems) - 1} more engines for {platform} failed)" if len(problems) > 1 else ""
            raise first.moved(first.problem + more)  # its kind, place and hint
    return nodes


def check_engine(farm: Farm, engine: FarmEngine, plan, connect: Connect = _connect) -> Node:
    platform = plan.platform
    name = str(engine.endpoint) if engine.endpoint else "the local engine"
    try:
        client = connect(engine.endpoint, farm.timeout)
        info = client.info()
    except DockerError as exc:  # an endpoint client's own line already names it
        said = engine.endpoint is not None and str(engine.endpoint) in exc.problem
        raise farm.error(engine, exc.problem if said else f"{name}: {exc.problem}") from None
    for stage, ref in sorted(plan.bases.items()):
        if client.image_id(ref) is None:
            pulled = client.run("pull", "--platform", platform, ref, check=False, timeout=PULL_TIMEOUT_S)
            if pulled.returncode != 0:
                host = f"DOCKER_HOST={engine.endpoint} " if engine.endpoint else ""
                raise farm.error(
                    engine,
                    f"{name} has no base image {ref} ({plan.loaded.file}: bases.{stage}) and "
                    f"cannot pull it; load it there (`docker save {ref} | {host}docker load`) "
                    f"or make it with `invoke bootstrap-base` against that engine",
                )
    try:
        run.resolve_bases(plan, client)
    except ServebuildError as exc:
        raise farm.error(engine, f"{name}: {exc.file}: {exc.field}: {exc.problem}") from None
    arch, want = docker_arch(info.get("Architecture", "")), arch_of(platform)
    if arch != want:  # foreign platform: can this engine run it? ask it, with the base the build uses
        probe = client.run(
            "run",
            "--rm",
            "--network",
            "none",
            "--platform",
            platform,
            "--entrypoint",
            "uname",
            plan.bases["build"],
            "-m",
            check=False,
        )
        answer = probe.stdout.strip()
        if probe.returncode != 0 or answer != machine_of(platform):
            detail = answer or (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            raise farm.error(
                engine,
                f"{name} is {arch or 'of unknown architecture'} and cannot run {platform} "
                f"containers ({detail}); register QEMU binfmt on that host (`invoke binfmt`) "
                f"or list a {want} engine for {platform}",
            )
    return Node(platform, engine, client)


def engine_of_build(farm: Farm, platform: str, manifest: dict, connect: Connect = _connect) -> DockerClient:
    """The engine that built a platform's image (the build manifest records its endpoint), to
    smoke-test and push it where its layers are; one line if the farm no longer lists it."""
    built_on = ((manifest.get("outputs") or {}).get("engine") or {}).get("host")
    for engine in farm.engines.get(platform, []):
        host = engine.endpoint.host if engine.endpoint else None
        if host == built_on:
            return connect(engine.endpoint, farm.timeout)
    listed = ", ".join(str(e.endpoint or "the local engine") for e in farm.engines.get(platform, [])) or "none"
    raise RecipeError(
        f"the {platform} image was built on {built_on or 'the local engine'}, which the farm does "
        f"not list for {platform} (it lists {listed})",
        file=farm.file,
        field=f"platforms.{platform}",
    )


# -- building several platforms at once


class PrefixedStream:
    """Whole lines, each prefixed, written under one lock so concurrent builds never interleave a line."""

    def __init__(self, prefix: str, out: TextIO, lock: threading.Lock):
        self.prefix, self.out, self.lock, self.pending = prefix, out, lock, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        if lines:
            with self.lock:
                self.out.write("".join(f"{self.prefix}{line}\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        with self.lock:
            self.out.flush()


def build_all(plans: dict, nodes: dict[str, Node], out: Optional[TextIO] = None) -> tuple[dict, dict]:
    """run.build for each platform on its node, concurrently, each live log line prefixed with
    `[PLATFORM] ` on `out` (default stderr). Returns (results, errors) by platform; a failed platform
    is never tagged (run.build tags only after its manifest)."""
    out = out or sys.stderr
    lock = threading.Lock()
    results, errors = {}, {}

    def one(platform: str) -> None:
        stream = PrefixedStream(f"[{platform}] ", out, lock)
        try:
            results[platform] = run.build(plans[platform], nodes[platform].client, echo=stream)
        except ServebuildError as exc:
            errors[platform] = exc
        except Exception as exc:  # a thread must report, not vanish
            errors[platform] = DockerError(f"{type(exc).__name__}: {exc}", field="build")
        stream.write("" if not stream.pending else "\n")

    # daemon: after ^C they are given 30 s to end once their clients are gone, never an unbounded wait at exit
    threads = [threading.Thread(target=one, args=(p,), name=f"build {p}", daemon=True) for p in plans]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:  # the builds run in the threads: their clients go, so the threads end (untagged)
        procs.stop_descendants()
        for t in threads:
            t.join(timeout=30)
        raise
    return results, errors


def per_platform_option(value: Optional[str], option: str, platforms: list) -> None:
    """With several platforms, one reference must become one per platform: it needs `{arch}`."""
    if value and len(platforms) > 1 and "{arch}" not in value:
        raise RecipeError(
            f"{value!r} would name every platform's image; put {{arch}} in it "
            f"(e.g. {value.rsplit(':', 1)[0] if ':' in value.rsplit('/', 1)[-1] else value}:{{arch}})",
            field=option,
        )


def image_of_build(root: Path, build_dir: Path, farm_option: Optional[str]) -> Optional[str]:
    """With a farm, the image id the build manifest records (the build's own image, wherever its tag
    points on that node); without one, None (the recipe's tag on the local engine is it)."""
    if farm_path(root, farm_option) is None:
        return None
    return read_json_object(build_dir / "manifest.json", "build manifest")["outputs"]["image_id"]


def engine_for_build(root: Path, build_dir: Path, platform: str, farm_option: Optional[str]) -> DockerClient:
    """The engine holding a recipe build's image: with a farm file, the node the build manifest
    names; else the local engine."""
    farm_file = farm_path(root, farm_option)
    manifest_path = build_dir / "manifest.json"
    if farm_file is None or not manifest_path.exists():
        return DockerClient()
    return engine_of_build(load_farm(farm_file, root), platform, read_json_object(manifest_path, "build manifest"))


def engine_for_plans(root: Path, plans: list, farm_file: Optional[Path]) -> DockerClient:
    """The one engine that builds (and runs) plans of one platform, such as bisect's variants, chosen
    as `build` chooses: no farm file, the local engine; else the platform's first engine that passes
    the preflight for the first plan, which must then pass it for every other plan too."""
    if farm_file is None:
        return DockerClient()
    farm = load_farm(farm_file, root)
    first, *rest = plans
    node = preflight(farm, {first.platform: first})[first.platform]
    for plan in rest:
        check_engine(farm, node.engine, plan, connect=lambda endpoint, timeout: node.client)
    print(f"[{first.platform}] on {node.name} ({node.client.server_version})", file=sys.stderr)
    return node.client
