"""bisect: A/B images of a recipe's variants (or its patch stack's prefixes), a command run in each, one table."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from servebuild import TOOLS_DIR
from servebuild.build import farm as farms
from servebuild.check import bisect as ab
from servebuild.check.container import RunOptions, check_env, check_gpus
from servebuild.cli.options import build_options, whole_seconds
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


def bisect(
    root: Path,
    recipe: str,
    variants=None,
    platform=None,
    locked=False,
    offline=False,
    ca_bundle=None,
    run=None,
    search=False,
    metric=None,
    threshold=None,
    profiles=None,
    timeout=None,
    network=None,
    metrics_file=None,
    volume=None,
    gpus=None,
    env=None,
    shm_size=None,
    repeat=None,
    suite=None,
    keep=None,
    farm=None,
) -> None:
    farm_file = farms.farm_path(root, farm)  # as `build` takes it: --farm FILE, else farm.yaml if any
    threshold = ab.parse_threshold(metric, threshold)
    loaded = load_recipe(recipe, root)
    if run is not None and suite is not None:
        raise InputError("give --run CMD or --suite NAME (which runs servebuild-bench), not both", field="--suite")
    if search and not (run or suite):
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
    seconds = whole_seconds(timeout, ab.DEFAULT_TIMEOUT_S)
    options = RunOptions(
        gpus=check_gpus(gpus or "auto"),
        network=network or "none",
        env=check_env(env),
        shm_size=shm_size or "",
        volumes=tuple(volume or ()),
    ).check()
    jobs = ab.jobs_for(loaded, variants, search)
    names = ab.profile_names(loaded, profiles, [name for name, _ in jobs])
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
            ab.Probe(run, timeout_s=seconds, metrics_file=metrics_file, artifacts=keep, run=options)
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
    build_opts = {
        name: build_options(
            platform=platform, locked=locked, offline=offline, ca_bundle=ca_bundle, variant=name, stack=stack
        )
        for name, stack in jobs
    }
    session = ab.Session(
        root,
        recipe,
        probe,
        names,
        build_opts,
        repeat=count,
        out_dir=root / "build" / loaded.recipe.name / "bisect",
        urls=urls,
        farm_file=farm_file,
    )  # plans checked first
    if search:
        found = ab.first_change(len(jobs) - 1, lambda i: session.outcome(jobs[i][0], metric, threshold))
        print(session.culprit(jobs, found))
    else:
        session.measure_all([name for name, _ in jobs])
    json_path, md_path, pictures = session.report()
    print(ab.table(session.rows), end="")
    print(f"report: {json_path} and {md_path}" + "".join(f", {p}" for p in pictures))
