"""A/B images that answer a question: build each variant (or each prefix of the patch stack), run
one command in a throwaway container of each, collect its exit status and metrics, and find the
first patch that changes the outcome.

Variants of one recipe share every layer but the engine's, so a variant costs its unique bytes;
those are read from the engine's layer store (local engines) and reported per variant.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from servebuild import procs
from servebuild.build.docker import DockerClient
from servebuild.errors import DockerError, InputError, RecipeError
from servebuild.fsutil import atomic_write, write_json
from servebuild.build.run import build
from servebuild.plan.make import make_plan
from servebuild.check.smoke import has_nvidia_runtime
from servebuild.render.aot import CACHE_TOOL
from servebuild.render.toolchain import VENV

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")  # a variant name: part of an image tag

METRICS_MARK = "SERVEBUILD-METRICS"
CACHE_MARK = "SERVEBUILD-CACHE"  # the image's census after the command: files written per JIT kind
CENSUS_FILE = "/tmp/.servebuild-census.json"


@dataclass(frozen=True)
class Probe:
    """What to run in every image: a shell command, its time limit, network, metrics file."""

    command: str
    timeout_s: int = 1800
    network: bool = False
    metrics_file: Optional[str] = None  # a JSON object the command writes inside the container
    volumes: tuple[str, ...] = ()        # docker -v specs: the model, the benchmark, a JIT cache

    def script(self) -> str:
        """The command, with /cache seeded and counted around it where the image has servebuild's cache
        tool (the zero-compile metric: jit_compiled_files), and the metrics file printed after it."""
        tool = f"{VENV}/bin/python {CACHE_TOOL}"
        lines = [f"if [ -f {CACHE_TOOL} ]; then {tool} seed >/dev/null 2>&1; "
                 f"{tool} census --listing {CENSUS_FILE} >/dev/null 2>&1; fi", self.command, "rc=$?",
                 f"if [ -f {CENSUS_FILE} ]; then printf '\\n{CACHE_MARK} '; {tool} census --since {CENSUS_FILE}; fi"]
        if self.metrics_file:
            path = shlex.quote(self.metrics_file)
            lines.append(f"if [ -f {path} ]; then printf '\\n{METRICS_MARK} '; tr -d '\\n' < {path}; printf '\\n'; fi")
        return "\n".join(lines + ["exit $rc"])

    def check(self) -> None:
        if self.timeout_s <= 0:
            raise InputError(f"{self.timeout_s} is not a positive number of seconds", field="--timeout")
        if not self.command.strip():
            raise InputError("the command to run is empty", field="--run")
        for volume in self.volumes:
            check_volume(volume)


VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")  # docker's grammar for a named volume
VOLUME_OPTIONS = {"ro", "rw", "z", "Z", "shared", "slave", "private", "rshared", "rslave", "rprivate", "nocopy",
                  "consistent", "cached", "delegated"}


def check_volume(volume: str) -> None:
    """SRC:DST[:OPTIONS] as docker reads it, checked before anything builds: SRC an existing absolute
    path or a volume name (a relative path would be taken as neither), DST absolute."""
    parts = volume.split(":")
    if volume.startswith("-") or len(parts) not in (2, 3):
        raise InputError(f"{volume!r} is not SRC:DST[:OPTIONS]", field="--volume")
    src, dst = parts[0], parts[1]
    if src.startswith("/"):
        if not Path(src).exists():
            raise InputError(f"{volume!r}: {src} does not exist", field="--volume")
    elif not VOLUME_NAME.fullmatch(src):
        raise InputError(f"{volume!r}: SRC must be an absolute path or a volume name", field="--volume")
    if not dst.startswith("/") or dst == "/":
        raise InputError(f"{volume!r}: DST must be an absolute path in the container (not /)", field="--volume")
    if len(parts) == 3 and not set(parts[2].split(",")) <= VOLUME_OPTIONS:
        raise InputError(f"{volume!r}: unknown volume option in {parts[2]!r} "
                          f"(one of {', '.join(sorted(VOLUME_OPTIONS))})", field="--volume")


@dataclass
class Row:
    variant: str
    patches: list[str]
    tag: str
    image_id: str
    build_s: float
    profile: Optional[str] = None
    exit: Optional[int] = None       # None: timed out
    run_s: float = 0.0
    metrics: dict = field(default_factory=dict)
    unique_bytes: Optional[int] = None
    output_tail: str = ""


def parse_metrics(output: str) -> dict:
    """The metrics file's JSON (marked), else the last line of output that is a JSON object; plus
    jit_compiled_files, the cache files the command wrote, where the image counted them."""
    lines = output.strip().splitlines()
    census = next((_object(line[len(CACHE_MARK) + 1:]) for line in reversed(lines)
                   if line.startswith(CACHE_MARK + " ")), {})
    compiled = ({"jit_compiled_files": sum(census["changed"].values())}
                if isinstance(census.get("changed"), dict) else {})
    lines = [line for line in lines if not line.startswith(CACHE_MARK + " ")]
    for line in reversed(lines):
        if line.startswith(METRICS_MARK + " "):
            return {**_object(line[len(METRICS_MARK) + 1:]), **compiled}
    for line in reversed(lines):
        if line.strip().startswith("{"):
            found = _object(line.strip())
            if found:
                return {**found, **compiled}
    return compiled


def _object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def run_in_image(docker: DockerClient, tag: str, probe: Probe, profile: Optional[str], gpus: bool) -> tuple:
    """(exit or None on timeout, seconds, output) of the probe in a throwaway container."""
    name = f"servebuild-bisect-{uuid.uuid4().hex[:12]}"
    args = [docker.client, "run", "--name", name, "--entrypoint", "/bin/sh"]
    if not probe.network:
        args += ["--network", "none"]
    if gpus:
        args += ["--gpus", "all", "--ipc=host"]
    for volume in probe.volumes:
        args += ["-v", volume]
    if profile:  # the command can start the server the way this profile does
        args += ["-e", f"SERVEBUILD_PROFILE={profile}", "-e", f"SERVEBUILD_LAUNCHER=/usr/local/bin/{profile}"]
    args += [tag, "-c", probe.script()]
    start = time.monotonic()
    try:
        proc = procs.run(args, "--run", capture_output=True, text=True, timeout=probe.timeout_s)
        code, output = proc.returncode, proc.stdout + proc.stderr
        if code == 125 and proc.stderr.lstrip().startswith("docker:"):  # docker run itself failed: no measurement
            raise DockerError(f"docker run of {tag} failed: {proc.stderr.strip()}", field="--run")
    except subprocess.TimeoutExpired as exc:
        code = None
        output = ((exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or ""))
    finally:
        docker.remove_container(name)
    return code, time.monotonic() - start, output


def layer_sizes(docker: DockerClient, image_id: str) -> list[tuple[str, Optional[int]]]:
    """(diff id, bytes) of each layer, from a local engine's layer store (None where unreadable)."""
    info = docker.info()
    store = Path(info.get("DockerRootDir", "/var/lib/docker")) / "image" / info.get("Driver", "overlay2") / \
        "layerdb" / "sha256"
    out, chain = [], None
    for diff in docker.image_inspect(image_id)["RootFS"]["Layers"]:
        chain = diff if chain is None else "sha256:" + hashlib.sha256(f"{chain} {diff}".encode()).hexdigest()
        size_file = store / chain.split(":", 1)[1] / "size"
        try:
            out.append((diff, int(size_file.read_text())))
        except (OSError, ValueError):
            out.append((diff, None))
    return out


def unique_bytes(sizes: dict[str, list[tuple[str, Optional[int]]]]) -> dict[str, Optional[int]]:
    """For each image, the bytes of the layers no other image of the set has."""
    out = {}
    for name, layers in sizes.items():
        others = {d for other, ls in sizes.items() if other != name for d, _ in ls}
        mine = [s for d, s in layers if d not in others]
        out[name] = None if any(s is None for s in mine) else sum(mine)
    return out


def outcome(row: Row, metric: Optional[str], threshold: Optional[float]) -> str:
    """What the search compares: pass/fail of the exit status, or of a metric against a threshold."""
    if row.exit is None:
        return "timeout"
    if metric is None:
        return "pass" if row.exit == 0 else "fail"
    value = row.metrics.get(metric)
    if not isinstance(value, (int, float)):
        return "no-metric"
    return "pass" if value >= threshold else "fail"


def variant_job(loaded, spec: str) -> tuple[str, Optional[tuple[str, ...]]]:
    """`NAME` (a recipe variant) or `NAME=ID+ID` (an ad-hoc stack; `NAME=` is the release as is):
    (name, stack or None). Unknown names and ids are one placed error; `requires` is checked
    when the plan is made, before anything builds."""
    name, eq, stack = spec.partition("=")
    if not NAME_RE.fullmatch(name):
        raise InputError(f"{spec!r} is not VARIANT or NAME=ID+ID (NAME: letters, digits, '-', '_')",
                          file=loaded.file, field="--variants")
    if not eq:
        if name not in loaded.recipe.variants:
            raise RecipeError(f"no variant {name!r} (known: {', '.join(loaded.recipe.variants) or 'none'}; "
                              f"or give a stack as NAME=ID+ID)", file=loaded.file, field="variants")
        return name, None
    ids = tuple(filter(None, stack.split("+")))
    engine = loaded.recipe.engine
    known = [e.id for e in engine.source.patches + engine.source.optional_patches] if engine else []
    missing = [i for i in ids if i not in known]
    if missing:
        raise InputError(f"variant {name}: no patch {missing[0]!r} (known: {', '.join(known) or 'none'})",
                          file=loaded.file, field="--variants")
    return name, ids


def first_change(n: int, result: Callable[[int], str]) -> Optional[int]:
    """The smallest prefix length i in 1..n whose outcome differs from prefix 0's, by bisection
    (the outcome is assumed to change once along the stack); None if prefix n agrees with 0.

    The full stack is measured first and prefix 0 only when the search ends next to it: a
    culprit in the middle of 8 patches costs 4 results (8, 4, 6, 5), not 5."""
    top = result(n)
    lo, hi = 0, n  # result(hi) == top; result(lo) != top once measured (lo 0: not yet)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if result(mid) == top:
            hi = mid
        else:
            lo = mid
    if lo == 0 and result(0) == top:
        return None
    return hi


def table(rows: list[Row]) -> str:
    """A Markdown table: one row per (variant, profile), one column per metric."""
    metrics = sorted({k for r in rows for k in r.metrics})
    head = ["variant", "profile", "patches", "build s", "unique", "exit", "run s", *metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        unique = "?" if r.unique_bytes is None else human_bytes(r.unique_bytes)
        cells = [r.variant, r.profile or "-", ",".join(r.patches) or "(none)", f"{r.build_s:.0f}", unique,
                 "timeout" if r.exit is None else str(r.exit), f"{r.run_s:.0f}",
                 *[str(r.metrics.get(m, "")) for m in metrics]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def write_report(rows: list[Row], out_dir: Path, extra: Optional[dict] = None) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {"rows": [asdict(r) for r in rows], **(extra or {})}
    write_json(out_dir / "bisect.json", data)
    atomic_write(out_dir / "bisect.md", table(rows))
    return out_dir / "bisect.json", out_dir / "bisect.md"


def parse_threshold(metric: Optional[str], threshold: Optional[str]) -> Optional[float]:
    """--metric and --threshold come together; the threshold is a finite number."""
    if (metric is None) != (threshold is None) or metric == "":
        raise InputError("give --metric NAME and --threshold NUMBER together (or neither: the exit status decides)",
                          field="--metric")
    if threshold is None:
        return None
    try:
        value = float(threshold)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InputError(f"{threshold!r} is not a finite number", field="--threshold")
    return value


class Session:
    """One bisect run: every plan is made (and checked) before anything builds; each image is
    built once and measured once per profile."""

    def __init__(self, root: Path, recipe: str, probe: Optional[Probe], profiles: list[Optional[str]],
                 options: dict):
        self.plans = {name: make_plan(root, recipe, o) for name, o in options.items()}
        self.probe, self.profiles = probe, profiles
        self.docker = DockerClient()
        self.gpus = has_nvidia_runtime(self.docker)
        self.rows: list[Row] = []
        self.measured: dict[str, list[Row]] = {}

    def measure(self, name: str) -> list[Row]:
        if name in self.measured:
            return self.measured[name]
        plan = self.plans[name]
        start = time.monotonic()
        result = build(plan, self.docker)
        build_s = time.monotonic() - start
        patches = [p.id for p in plan.loaded.recipe.engine.source.patches] if plan.loaded.recipe.engine else []
        rows = []
        for profile in self.profiles:
            row = Row(variant=name, patches=patches, tag=result.tag, image_id=result.image_id, build_s=build_s,
                      profile=profile)
            if self.probe:
                row.exit, row.run_s, output = run_in_image(self.docker, result.tag, self.probe, profile, self.gpus)
                row.metrics, row.output_tail = parse_metrics(output), output[-2000:]
            print(f"  {name}{' / ' + profile if profile else ''}: built in {build_s:.0f}s"
                  + (f", exit {row.exit}, metrics {row.metrics}" if self.probe else ""), flush=True)
            rows.append(row)
        self.rows += rows
        self.measured[name] = rows
        return rows

    def outcome(self, name: str, metric: Optional[str], threshold: Optional[float]) -> str:
        rows = self.measure(name)
        ran = [r for r in rows if r.exit is not None]
        if metric and ran and all(metric not in r.metrics for r in ran):
            printed = sorted({k for r in ran for k in r.metrics})
            raise InputError(f"the command printed no metric {metric!r} in {name} (it printed: "
                              f"{', '.join(printed) or 'no JSON metrics'}); the search cannot decide",
                              field="--metric")
        return ",".join(outcome(r, metric, threshold) for r in rows)

    def culprit(self, jobs: list[tuple], found: Optional[int]) -> str:
        if found is None:
            last = jobs[-1][0]
            return (f"no patch changes the outcome: {jobs[0][0]} and {last} agree "
                    f"({','.join(self.outcome_of(jobs[0][0]))})")
        name, stack = jobs[found]
        entry = self.plans[name].loaded.recipe.engine.source.patches[-1]
        manifest = json.loads((self.plans[name].build_dir / "manifest.json").read_text())
        applied = manifest["engine"]["source"]["patches"][-1]
        where = f"PR #{entry.pr} at {entry.commit}" if entry.pr else entry.file
        before, after = self.outcome_of(jobs[found - 1][0]), self.outcome_of(name)
        return (f"first patch that changes the outcome: {entry.id} ({where}, diff sha256 {applied['sha256']}): "
                f"{','.join(before)} with {jobs[found - 1][0]} -> {','.join(after)} with {name}; "
                f"{len(self.measured)} of {len(jobs)} prefixes built")

    def outcome_of(self, name: str) -> list[str]:
        return [f"exit {r.exit}" for r in self.measured[name]]

    def report(self, out_dir: Path) -> tuple[Path, Path]:
        sizes = {name: layer_sizes(self.docker, rows[0].image_id) for name, rows in self.measured.items()}
        unique = unique_bytes(sizes) if len(sizes) > 1 else {}
        for row in self.rows:
            row.unique_bytes = unique.get(row.variant)
        return write_report(self.rows, out_dir)


def jobs_for(loaded, variants: Optional[str], search: bool) -> list[tuple[str, Optional[tuple[str, ...]]]]:
    """What to build: with `search`, every prefix of the patch stack (prefix-0 is the release);
    else the named variants (ad-hoc NAME=ID+ID stacks allowed), or all the recipe's variants."""
    if search:
        if loaded.recipe.engine is None:
            raise RecipeError("a recipe without an engine has no patch stack", file=loaded.file, field="engine")
        stack = [e.id for e in loaded.recipe.engine.source.patches]
        return [(f"prefix-{i}", tuple(stack[:i])) for i in range(len(stack) + 1)]
    jobs = [variant_job(loaded, spec) for spec in (variants.split(",") if variants else list(loaded.recipe.variants))]
    if not jobs:
        raise RecipeError("the recipe defines no variants", file=loaded.file, field="variants")
    return jobs


def profile_names(loaded, profiles: Optional[str]) -> list[Optional[str]]:
    """--profiles a,b -> the recipe's launch profiles of those names ([None]: run the command once)."""
    names = profiles.split(",") if profiles else [None]
    unknown = [p for p in names if p is not None and p not in loaded.recipe.launch.profiles]
    if unknown:
        raise RecipeError(f"no profile {unknown[0]!r} (known: {', '.join(loaded.recipe.launch.profiles)})",
                          file=loaded.file, field="launch.profiles")
    return names
