"""bisect: A/B images of a recipe's variants (or its patch stack's prefixes), a command run in each, one table."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from servebuild import TOOLS_DIR
from servebuild.build import farm as farms
from servebuild.check import bisect as ab
from servebuild.check.container import RunOptions, check_env, check_gpus
from servebuild.cli.options import DEFAULT_RECIPE, build_options, option, whole_seconds
from servebuild.errors import InputError
from servebuild.recipe.load import load_recipe


SET_BY_BISECT = ("--serve", "--url", "--out", "--check")  # each row's bench gets these from bisect


def check_suite(suite: str) -> None:
    """The bench's own argument check (servebuild-bench --check), before anything builds."""
    try:
        words = shlex.split(suite) if suite.strip() else []
    except ValueError as exc:
        raise InputError(
            f"{suite!r} is not a suite and its options as a shell would split them ({exc})", field="--suite"
        ) from None
    given = [w.split("=", 1)[0] for w in words if w.split("=", 1)[0] in SET_BY_BISECT]
    if given:
        raise InputError(
            f"{given[0]} is bisect's to set for each row's bench (it starts $SERVEBUILD_LAUNCHER and "
            f"keeps {ab.BENCH_OUT}); give only the suite and its measuring options",
            field="--suite",
        )
    proc = subprocess.run(
        [sys.executable, str(TOOLS_DIR / "servebuild_bench.py"), "--check", "--suite", *words],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["the bench refused its options"])[-1]
        raise InputError(line.replace("servebuild-bench: error: ", ""), field="--suite")


@dataclass(frozen=True)
class BisectArgs:
    """`invoke bisect`'s options, in the order invoke gives their short flags."""

    recipe: str = option(DEFAULT_RECIPE, "recipe with `variants` (or a patch stack, with --search)")
    variants: Optional[str] = option(
        None,
        "comma-separated recipe variants (default: all), or ad-hoc NAME=ID+ID stacks "
        "(`release=` is the stack-less release)",
    )
    platform: Optional[str] = option(None, "platform (default: this host's if the recipe has it)", plan=True)
    locked: bool = option(False, "build what the lock pins", plan=True)
    offline: bool = option(False, "sources from the cache only", plan=True)
    ca_bundle: Optional[str] = option(None, "extra CA bundle for pip (BuildKit secret)", plan=True)
    run: Optional[str] = option(
        None, "shell command run in a throwaway container of each image (exit status + JSON metrics)"
    )
    search: bool = option(
        False, "find the first patch of the stack whose prefix changes the outcome (needs --run or --suite)"
    )
    metric: Optional[str] = option(
        None, "metric whose value against --threshold is the outcome (default: the exit status)"
    )
    threshold: Optional[str] = option(None, "pass when the metric is at least this")
    profiles: Optional[str] = option(
        None,
        "comma-separated launch profiles, each run per variant, and/or VARIANT:PROFILE for one "
        "variant only (default: the recipe's default profile; $SERVEBUILD_LAUNCHER)",
    )
    timeout: Optional[str] = option(None, "seconds per run (default 7200: a cold DSV4 start plus a 1M prefill)")
    network: Optional[str] = option(
        None, "network of the run containers: none (default), bridge, host or a network's name"
    )
    metrics_file: Optional[str] = option(
        None,
        "JSON (or JSONL: its last object) the command writes in the container (default: its last JSON line)",
    )
    volume: Optional[list[str]] = option(
        None,
        "docker -v SRC:DST[:ro] for the run containers (repeatable: model, benchmark, cache)",
        repeatable=True,
    )
    gpus: Optional[str] = option(
        None, "all, none, or devices such as 0,1 (default: all where the engine has the NVIDIA runtime)"
    )
    env: Optional[list[str]] = option(None, "K=V for the run containers (repeatable)", repeatable=True)
    shm_size: Optional[str] = option(None, "shared memory of the run containers (32g)")
    repeat: Optional[str] = option(
        None, "runs per row, interleaved across rows (A B C, C B A, ...); the table shows medians"
    )
    suite: Optional[str] = option(
        None,
        "instead of --run: start $SERVEBUILD_LAUNCHER, wait for health, run servebuild-bench with "
        "this suite (and any bench options after it: 'tail --requests 50')",
    )
    keep: Optional[str] = option(
        None, "a directory in the container copied next to each run's log (--suite: the bench's output)"
    )
    farm: Optional[str] = option(
        None,
        "farm file mapping platforms to engines, as for build: the variants build and run on the "
        "platform's engine (default: farm.yaml at the project root, if any)",
    )


def bisect(root: Path, args: BisectArgs) -> None:
    farm_file = farms.farm_path(root, args.farm)  # as `build` takes it: --farm FILE, else farm.yaml if any
    threshold = ab.parse_threshold(args.metric, args.threshold)
    loaded = load_recipe(args.recipe, root)
    run, suite, keep, repeat = args.run, args.suite, args.keep, args.repeat
    if run is not None and suite is not None:
        raise InputError("give --run CMD or --suite NAME (which runs servebuild-bench), not both", field="--suite")
    if args.search and not (run or suite):
        raise InputError("give the command that decides the outcome with --run (or --suite)", field="--search")
    if repeat is not None and not str(repeat).isdigit():
        raise InputError(f"{repeat!r} is not a whole number of runs", field="--repeat")
    count = int(repeat) if repeat is not None else 1
    if not 1 <= count <= 50:
        raise InputError(f"--repeat {repeat}: from 1 to 50 runs per row", field="--repeat")
    if keep is not None and (suite is not None or not keep.startswith("/") or not keep.isprintable()):
        raise InputError(
            f"{keep!r}: give an absolute directory in the container, without control characters "
            f"(and not with --suite, which keeps the bench's output itself)",
            field="--keep",
        )
    seconds = whole_seconds(args.timeout, ab.DEFAULT_TIMEOUT_S)
    options = RunOptions(
        gpus=check_gpus(args.gpus or "auto"),
        network=args.network or "none",
        env=check_env(args.env),
        shm_size=args.shm_size or "",
        volumes=tuple(args.volume or ()),
    ).check()
    jobs = ab.jobs_for(loaded, args.variants, args.search)
    names = ab.profile_names(loaded, args.profiles, [name for name, _ in jobs])
    if suite is not None:
        check_suite(suite)
        if loaded.recipe.engine is None or not loaded.recipe.launch.profiles:
            raise InputError(
                f"--suite starts a launch profile's server; recipe {loaded.recipe.name} has none",
                file=loaded.file,
                field="--suite",
            )
        probe = ab.bench_probe(suite, seconds, options)
    else:
        probe = (
            ab.Probe(run, timeout_s=seconds, metrics_file=args.metrics_file, artifacts=keep, run=options)
            if run is not None
            else None
        )
    if probe:
        probe.check()
    kind = loaded.recipe.engine.kind if loaded.recipe.engine else None
    ports = {
        p: kind.profile_port(loaded.recipe.launch.profiles[p]) if kind else None
        for ps in names.values()
        for p in ps
        if p
    }
    urls = {p: f"http://127.0.0.1:{port}" for p, port in ports.items() if port}  # where the bench finds the server
    build_opts = {name: build_options(args, variant=name, stack=stack) for name, stack in jobs}
    session = ab.Session(
        root,
        args.recipe,
        probe,
        names,
        build_opts,
        repeat=count,
        out_dir=root / "build" / loaded.recipe.name / "bisect",
        urls=urls,
        farm_file=farm_file,
    )  # plans checked first
    if args.search:
        found = ab.first_change(len(jobs) - 1, lambda i: session.outcome(jobs[i][0], args.metric, threshold))
        print(session.culprit(jobs, found))
    else:
        session.measure_all([name for name, _ in jobs])
    json_path, md_path, pictures = session.report()
    print(ab.table(session.rows), end="")
    print(f"report: {json_path} and {md_path}" + "".join(f", {p}" for p in pictures))
