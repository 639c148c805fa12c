"""A/B images that answer a question: build each variant (or each prefix of the patch stack), run
one command in a throwaway container of each, collect its exit status and metrics, and find the
first patch that changes the outcome.

Variants of one recipe share every layer but the engine's, so a variant costs its unique bytes;
those are read from the engine's layer store (local engines) and reported per variant.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from servebuild import procs
from servebuild.build.docker import DockerClient
from servebuild.build.farm import engine_for_plans
from servebuild.build.run import build
from servebuild.check import plots
from servebuild.check.container import RunOptions
from servebuild.errors import DockerError, InputError, RecipeError
from servebuild.fsutil import atomic_write, make_dir, open_host_file, write_json, writing
from servebuild.plan.make import make_plan
from servebuild.recipe.grammar import NAME
from servebuild.render.payload import BENCH_COMMAND, CACHE_TOOL
from servebuild.render.toolchain import VENV

NAME_RE = NAME  # a variant name, ad hoc or not, follows the recipe's rule for variants (part of an image tag)

METRICS_MARK = "SERVEBUILD-METRICS"
CACHE_MARK = "SERVEBUILD-CACHE"  # the image's census after the command: files written per JIT kind
CENSUS_FILE = "/tmp/.servebuild-census.json"


# a cold DSV4-Flash start (weights, prewarm) plus the 1M-token prefill (~6 min) fit with room to spare
DEFAULT_TIMEOUT_S = 7200
BENCH_OUT = "/tmp/servebuild-bench"  # where the default --run writes inside the container (copied out)


@dataclass(frozen=True)
class Probe:
    """What to run in every image: a shell command, its time limit, its metrics file, the directory
    copied out of the container after it (the bench's raw samples), and the container's options."""

    command: str
    timeout_s: int = DEFAULT_TIMEOUT_S
    metrics_file: Optional[str] = None  # a JSON object (or JSONL: the last object) the command writes
    artifacts: Optional[str] = None  # a directory in the container, copied next to the row's log
    run: RunOptions = RunOptions()

    def script(self) -> str:
        """The command, with /cache seeded and counted around it where the image has servebuild's cache
        tool (the zero-compile metric: jit_compiled_files), and the metrics file printed after it (in
        base64, one line: a JSONL file keeps its lines)."""
        tool = f"{VENV}/bin/python {CACHE_TOOL}"
        lines = [
            f"if [ -f {CACHE_TOOL} ]; then {tool} seed >/dev/null 2>&1; "
            f"{tool} census --listing {CENSUS_FILE} >/dev/null 2>&1; fi",
            self.command,
            "rc=$?",
            f"if [ -f {CENSUS_FILE} ]; then printf '\\n{CACHE_MARK} '; {tool} census --since {CENSUS_FILE}; fi",
        ]
        if self.metrics_file:
            path = shlex.quote(self.metrics_file)
            lines.append(
                f"if [ -f {path} ]; then printf '\\n{METRICS_MARK} '; base64 < {path} | tr -d '\\n'; printf '\\n'; fi"
            )
        return "\n".join(lines + ["exit $rc"])

    def check(self) -> None:
        if self.timeout_s <= 0:
            raise InputError(f"{self.timeout_s} is not a positive number of seconds", field="--timeout")
        if not self.command.strip():
            raise InputError("the command to run is empty", field="--run")
        self.run.check()


def bench_probe(suite: str, timeout_s: int, run: RunOptions) -> Probe:
    """The default --run: start the profile's launcher, wait for its health endpoint, run servebuild-bench
    with the named suite (and any options after it), stop the server; bench.json is the row's metrics."""
    words = shlex.split(suite)
    command = (
        f'{BENCH_COMMAND} --serve "$SERVEBUILD_LAUNCHER" --url "$SERVEBUILD_BENCH_URL" '
        f"--health-timeout {max(60, timeout_s - 300)} --out {BENCH_OUT} --suite {shlex.join(words)}"
    )
    return Probe(command, timeout_s=timeout_s, metrics_file=f"{BENCH_OUT}/bench.json", artifacts=BENCH_OUT, run=run)


@dataclass
class Row:
    """One (variant, profile): its image, and its runs (--repeat N); metrics are the runs' medians."""

    variant: str
    patches: list[str]
    tag: str
    image_id: str
    build_s: float
    profile: Optional[str] = None
    exit: Optional[int] = None  # 0 when every run exited 0, else the first other exit; None: a run timed out
    run_s: float = 0.0  # median
    metrics: dict = field(default_factory=dict)  # median of each numeric metric over the runs
    spread: dict = field(default_factory=dict)  # metric -> [min, max] over the runs (--repeat > 1)
    runs: list = field(default_factory=list)  # each run: exit, run_s, metrics, log, artifacts
    unique_bytes: Optional[int] = None

    @property
    def key(self) -> str:
        return self.variant + (f"-{self.profile}" if self.profile else "")

    def add(self, exit_code: Optional[int], run_s: float, metrics: dict, log: str, artifacts: Optional[str]) -> None:
        self.runs.append(
            {"exit": exit_code, "run_s": round(run_s, 2), "metrics": metrics, "log": log, "artifacts": artifacts}
        )
        exits = [r["exit"] for r in self.runs]
        self.exit = None if None in exits else next((e for e in exits if e != 0), 0)
        self.run_s = statistics.median(r["run_s"] for r in self.runs)
        names = sorted({k for r in self.runs for k, v in r["metrics"].items() if _number(v)})
        self.metrics = {k: v for r in self.runs for k, v in r["metrics"].items() if not _number(v)}
        for name in names:
            values = [r["metrics"][name] for r in self.runs if _number(r["metrics"].get(name))]
            self.metrics[name] = statistics.median(values)
            if len(values) > 1:
                self.spread[name] = [min(values), max(values)]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_metrics(output: str) -> dict:
    """The metrics file (marked, base64): a JSON object, or JSONL whose last object counts (SGLang's
    bench_serving appends one per run); without the file, the last line of output that is a JSON
    object; plus jit_compiled_files, the cache files the command wrote, where the image counted them."""
    lines = output.strip().splitlines()
    census = next(
        (_object(line[len(CACHE_MARK) + 1 :]) for line in reversed(lines) if line.startswith(CACHE_MARK + " ")), {}
    )
    compiled = (
        {"jit_compiled_files": sum(census["changed"].values())} if isinstance(census.get("changed"), dict) else {}
    )
    lines = [line for line in lines if not line.startswith(CACHE_MARK + " ")]
    for line in reversed(lines):
        if line.startswith(METRICS_MARK + " "):
            try:
                text = base64.b64decode(line[len(METRICS_MARK) + 1 :].strip(), validate=True).decode(errors="replace")
            except (binascii.Error, ValueError):
                text = ""
            return {**(_object(text) or _last_object(text.splitlines())), **compiled}
    return {**_last_object(lines), **compiled}


def _last_object(lines: list[str]) -> dict:
    for line in reversed(lines):
        if line.strip().startswith("{"):
            found = _object(line.strip())
            if found:
                return found
    return {}


def _object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def run_in_image(
    docker: DockerClient,
    tag: str,
    probe: Probe,
    profile: Optional[str],
    gpus: str,
    log: Path,
    artifacts: Optional[Path] = None,
    url: Optional[str] = None,
) -> tuple[Optional[int], float, str]:
    """(exit or None on timeout, seconds, output) of the probe in a throwaway container; the whole
    output is written to `log` as it comes, and the probe's artifacts directory copied to `artifacts`."""
    name = f"servebuild-bisect-{uuid.uuid4().hex[:12]}"
    args = [docker.client, "run", "--name", name, "--entrypoint", "/bin/sh", *probe.run.docker_args(gpus)]
    if profile:  # the command can start the server the way this profile does
        args += ["-e", f"SERVEBUILD_PROFILE={profile}", "-e", f"SERVEBUILD_LAUNCHER=/usr/local/bin/{profile}"]
    if url:
        args += ["-e", f"SERVEBUILD_BENCH_URL={url}"]
    args += [tag, "-c", probe.script()]
    with writing(log, "the run log"):
        log.parent.mkdir(parents=True, exist_ok=True)
        out = os.fdopen(open_host_file(log, "the run log"), "wb")  # no link followed, no FIFO opened
    start = time.monotonic()
    try:
        with out:
            proc = procs.popen(args, "--run", stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                code: Optional[int] = proc.wait(timeout=probe.timeout_s)
            except subprocess.TimeoutExpired:
                code = None
                proc.kill()
                proc.wait()
        output = log.read_text(errors="replace")
        if code == 125 and output.lstrip().startswith("docker:"):  # docker run itself failed: no measurement
            raise DockerError(f"docker run of {tag} failed: {output.strip().splitlines()[0]}", field="--run")
        if artifacts is not None and probe.artifacts:
            make_dir(artifacts.parent, "the run's artifacts")
            docker.run("cp", f"{name}:{probe.artifacts}", str(artifacts), check=False)
    finally:
        docker.remove_container(name)
    return code, time.monotonic() - start, output


def layer_sizes(docker: DockerClient, image_id: str) -> list[tuple[str, Optional[int]]]:
    """(diff id, bytes) of each layer, from a local engine's layer store (None where unreadable)."""
    info = docker.info()
    store = (
        Path(info.get("DockerRootDir", "/var/lib/docker"))
        / "image"
        / info.get("Driver", "overlay2")
        / "layerdb"
        / "sha256"
    )
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
        raise InputError(
            f"{spec!r} is not VARIANT or NAME=ID+ID (NAME: a lowercase letter, then lowercase "
            f"letters, digits and '-', as a recipe's variant names)",
            file=loaded.file,
            field="--variants",
        )
    if not eq:
        if name not in loaded.recipe.variants:
            raise RecipeError(
                f"no variant {name!r} (known: {', '.join(loaded.recipe.variants) or 'none'}; "
                f"or give a stack as NAME=ID+ID)",
                file=loaded.file,
                field="variants",
            )
        return name, None
    ids = tuple(filter(None, stack.split("+")))
    engine = loaded.recipe.engine
    known = [e.id for e in engine.source.patches + engine.source.optional_patches] if engine else []
    missing = [i for i in ids if i not in known]
    if missing:
        raise InputError(
            f"variant {name}: no patch {missing[0]!r} (known: {', '.join(known) or 'none'})",
            file=loaded.file,
            field="--variants",
        )
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


# ranges of a bench's own runs, and its bookkeeping: in bisect.json, not the table
SUMMARY_ONLY = ("_min", "_max", "_n", "_mean", "_requests", "_completion_tokens", "_latency_s_p50", "_latency_s_p90")


def table_metrics(rows: list[Row]) -> list[str]:
    """The numeric metrics the table shows (every metric is in bisect.json)."""
    names = {k for r in rows for k, v in r.metrics.items() if _number(v)}
    return sorted(
        k
        for k in names
        if not k.endswith(SUMMARY_ONLY)
        and not k.startswith(("calibration_", "requests_", "token_count_"))  # the bench's bookkeeping
        and not re.fullmatch(r"[a-z]+_s", k)
    )


def _cell(row: Row, name: str) -> str:
    value = row.metrics.get(name)
    if not _number(value):
        return ""
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    lo_hi = row.spread.get(name)
    if lo_hi and lo_hi[0] != lo_hi[1]:
        text += f" ({lo_hi[0]:.4g}-{lo_hi[1]:.4g})"
    return text


def table(rows: list[Row]) -> str:
    """A Markdown table: one row per (variant, profile), one column per metric: the median of the runs,
    with their range when there were several; the log of each run is named."""
    metrics = table_metrics(rows)
    head = ["variant", "profile", "patches", "build s", "unique", "runs", "exit", "run s", *metrics, "log"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        unique = "?" if r.unique_bytes is None else human_bytes(r.unique_bytes)
        exits = (
            "-"
            if not r.runs
            else ("timeout" if r.exit is None else ",".join(str(x["exit"]) for x in r.runs) if r.exit else "0")
        )
        log = (
            "-"
            if not r.runs
            else r.runs[0]["log"]
            if len(r.runs) == 1
            else r.runs[0]["log"].replace("-run1.log", "-run{1.." + str(len(r.runs)) + "}.log")
        )
        cells = [
            r.variant,
            r.profile or "-",
            ",".join(r.patches) or "(none)",
            f"{r.build_s:.0f}",
            unique,
            str(len(r.runs)),
            exits,
            f"{r.run_s:.0f}" if r.runs else "-",
            *[_cell(r, m) for m in metrics],
            log,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def write_report(rows: list[Row], out_dir: Path, extra: Optional[dict] = None) -> tuple[Path, Path, list[Path]]:
    """bisect.json (every run, every metric), bisect.md (the table) and the PNGs the runs have data for."""
    data = {"rows": [asdict(r) for r in rows], **(extra or {})}
    with writing(out_dir, "the bisect report"):
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / "bisect.json", data)
        atomic_write(out_dir / "bisect.md", table(rows))
        return out_dir / "bisect.json", out_dir / "bisect.md", plots.bisect_plots(data, out_dir)


def parse_threshold(metric: Optional[str], threshold: Optional[str]) -> Optional[float]:
    """--metric and --threshold come together; the threshold is a finite number."""
    if (metric is None) != (threshold is None) or metric == "":
        raise InputError(
            "give --metric NAME and --threshold NUMBER together (or neither: the exit status decides)", field="--metric"
        )
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
    built once and measured `repeat` times per profile (interleaved across rows by `measure_all`)."""

    def __init__(
        self,
        root: Path,
        recipe: str,
        probe: Optional[Probe],
        profiles: dict[str, list[Optional[str]]],
        options: dict,
        repeat: int = 1,
        out_dir: Optional[Path] = None,
        urls: Optional[dict] = None,
        farm_file: Optional[Path] = None,
    ):
        """`farm_file`: build and run on its engine for the platform, as `build --farm` would (None: local)."""
        self.plans = {name: make_plan(root, recipe, o) for name, o in options.items()}
        self.probe, self.profiles, self.repeat = probe, profiles, repeat
        self.urls = urls or {}
        self.out_dir = out_dir or (root / "build" / recipe / "bisect")
        self.docker = engine_for_plans(root, list(self.plans.values()), farm_file)
        # before any build: a bisect that cannot report builds nothing; no folder servebuild makes under build/
        # (or under --out, the user's) is a link
        make_dir(self.out_dir, "the bisect output", under=self.out_dir if out_dir else root / "build")
        self.gpus = probe.run.resolved_gpus(self.docker, "every bisect run") if probe else "none"
        if probe:
            print(
                f"bisect: runs get {'no GPU' if self.gpus == 'none' else 'GPUs ' + self.gpus} "
                f"(--gpus {probe.run.gpus}), network {probe.run.network}; logs in {self.out_dir / 'logs'}",
                flush=True,
            )
        self.rows: list[Row] = []
        self.measured: dict[str, list[Row]] = {}

    def built(self, name: str) -> list[Row]:
        """The variant's image (built, or reused through the build cache) and its rows, not yet run."""
        if name in self.measured:
            return self.measured[name]
        plan = self.plans[name]
        start = time.monotonic()
        result = build(plan, self.docker)
        build_s = time.monotonic() - start
        patches = [p.id for p in plan.loaded.recipe.engine.source.patches] if plan.loaded.recipe.engine else []
        rows = [
            Row(
                variant=name,
                patches=patches,
                tag=result.tag,
                image_id=result.image_id,
                build_s=build_s,
                profile=profile,
            )
            for profile in self.profiles.get(name, [None])
        ]
        print(f"  {name}: built in {build_s:.0f}s", flush=True)
        self.rows += rows
        self.measured[name] = rows
        return rows

    def run_row(self, row: Row) -> None:
        n = len(row.runs) + 1
        log = Path("logs") / f"{row.key}-run{n}.log"
        artifacts = Path("runs") / f"{row.key}-run{n}"
        code, secs, output = run_in_image(
            self.docker,
            row.tag,
            self.probe,
            row.profile,
            self.gpus,
            self.out_dir / log,
            self.out_dir / artifacts,
            self.urls.get(row.profile),
        )
        row.add(
            code, secs, parse_metrics(output), str(log), str(artifacts) if (self.out_dir / artifacts).exists() else None
        )
        print(
            f"  {row.variant}{' / ' + row.profile if row.profile else ''} run {n}/{self.repeat}: "
            f"{'timeout' if code is None else 'exit ' + str(code)} in {secs:.0f}s, "
            f"{len(row.runs[-1]['metrics'])} metrics, log {self.out_dir / log}",
            flush=True,
        )

    def measure(self, name: str) -> list[Row]:
        """Build and run one variant `repeat` times (the search measures one variant at a time)."""
        rows = self.built(name)
        if self.probe:
            for row in rows:
                while len(row.runs) < self.repeat:
                    self.run_row(row)
        return rows

    def measure_all(self, names: list[str]) -> None:
        """Build every variant first, then run round by round, each round in the other direction
        (A B C, C B A, ...), so a drift of the host (heat, a neighbour) falls on every row alike."""
        rows = [row for name in names for row in self.built(name)]
        if not self.probe:
            return
        for round_no in range(self.repeat):
            for row in rows if round_no % 2 == 0 else list(reversed(rows)):
                self.run_row(row)

    def outcome(self, name: str, metric: Optional[str], threshold: Optional[float]) -> str:
        rows = self.measure(name)
        ran = [r for r in rows if r.exit is not None]
        if metric and ran and all(metric not in r.metrics for r in ran):
            printed = sorted({k for r in ran for k in r.metrics})
            raise InputError(
                f"the command printed no metric {metric!r} in {name} (it printed: "
                f"{', '.join(printed) or 'no JSON metrics'}); the search cannot decide",
                field="--metric",
            )
        return ",".join(outcome(r, metric, threshold) for r in rows)

    def culprit(self, jobs: list[tuple], found: Optional[int]) -> str:
        if found is None:
            last = jobs[-1][0]
            return (
                f"no patch changes the outcome: {jobs[0][0]} and {last} agree ({','.join(self.outcome_of(jobs[0][0]))})"
            )
        name, stack = jobs[found]
        entry = self.plans[name].loaded.recipe.engine.source.patches[-1]
        manifest = json.loads((self.plans[name].build_dir / "manifest.json").read_text())
        applied = manifest["engine"]["source"]["patches"][-1]
        where = f"PR #{entry.pr} at {entry.commit}" if entry.pr else entry.file
        before, after = self.outcome_of(jobs[found - 1][0]), self.outcome_of(name)
        return (
            f"first patch that changes the outcome: {entry.id} ({where}, diff sha256 {applied['sha256']}): "
            f"{','.join(before)} with {jobs[found - 1][0]} -> {','.join(after)} with {name}; "
            f"{len(self.measured)} of {len(jobs)} prefixes built"
        )

    def outcome_of(self, name: str) -> list[str]:
        return [f"exit {r.exit}" for r in self.measured[name]]

    def report(self) -> tuple[Path, Path, list[Path]]:
        sizes = {name: layer_sizes(self.docker, rows[0].image_id) for name, rows in self.measured.items()}
        unique = unique_bytes(sizes) if len(sizes) > 1 else {}
        for row in self.rows:
            row.unique_bytes = unique.get(row.variant)
        return write_report(
            self.rows,
            self.out_dir,
            {"repeat": self.repeat, "gpus": self.gpus, "command": self.probe.command if self.probe else None},
        )


def jobs_for(loaded, variants: Optional[str], search: bool) -> list[tuple[str, Optional[tuple[str, ...]]]]:
    """What to build: with `search`, every prefix of the patch stack (prefix-0 is the release) from the
    first one whose launch profiles meet no known defect of the engine (a SGLang 0.5.16 DSpark recipe:
    from the prefix that carries the verify-pad fix, since shorter ones are refused); else the named
    variants (ad-hoc NAME=ID+ID stacks allowed), or all the recipe's variants."""
    if search:
        if loaded.recipe.engine is None:
            raise RecipeError("a recipe without an engine has no patch stack", file=loaded.file, field="engine")
        entries = loaded.recipe.engine.source.patches
        start = next(i for i in range(len(entries) + 1) if loaded.recipe.defect_met(entries[:i]) is None)
        stack = [e.id for e in entries]
        return [(f"prefix-{i}", tuple(stack[:i])) for i in range(start, len(stack) + 1)]
    jobs = [variant_job(loaded, spec) for spec in (variants.split(",") if variants else list(loaded.recipe.variants))]
    if not jobs:
        raise RecipeError("the recipe defines no variants", file=loaded.file, field="variants")
    names = [name for name, _ in jobs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise InputError(
            f"variant {twice!r} is named twice (each is one image, one tag)", file=loaded.file, field="--variants"
        )
    return jobs


def profile_names(loaded, profiles: Optional[str], variants: list[str]) -> dict[str, list[Optional[str]]]:
    """--profiles a,b (every variant) and/or VARIANT:PROFILE (that variant only) -> each variant's launch
    profiles, in order. Without --profiles: the recipe's default profile (so $SERVEBUILD_LAUNCHER starts
    the server the image's CMD starts), or one run with no profile when the recipe has none."""
    known = loaded.recipe.launch.profiles
    default = loaded.recipe.launch.default_profile()
    if not profiles:
        return {v: [default] for v in variants}
    common: list[str] = []
    own: dict[str, list[str]] = {}
    for spec in profiles.split(","):
        variant, colon, name = spec.strip().rpartition(":")
        if colon and variant not in variants:
            raise InputError(
                f"{spec!r}: {variant!r} is not a variant of this run ({', '.join(variants)})",
                file=loaded.file,
                field="--profiles",
            )
        if name not in known:
            raise RecipeError(
                f"no profile {name!r} (known: {', '.join(known) or 'none'})", file=loaded.file, field="launch.profiles"
            )
        target = own.setdefault(variant, []) if colon else common
        if name in target:
            raise InputError(f"{spec!r} names profile {name!r} twice for one variant", field="--profiles")
        target.append(name)
    return {v: (own.get(v) or common or [default]) for v in variants}
