"""bisect: A/B images of a recipe's variants (or its patch stack's prefixes), a command run in each, one table."""

from __future__ import annotations

from pathlib import Path

from servebuild.check import bisect as ab
from servebuild.cli.options import build_options, whole_seconds
from servebuild.errors import InputError
from servebuild.recipe.load import load_recipe


def bisect(root: Path, recipe: str, variants=None, platform=None, locked=False, offline=False, ca_bundle=None,
           run=None, search=False, metric=None, threshold=None, profiles=None, timeout=None, network=False,
           metrics_file=None, volume=None) -> None:
    threshold = ab.parse_threshold(metric, threshold)
    loaded = load_recipe(recipe, root)
    if search and not run:
        raise InputError("give the command that decides the outcome with --run", field="--search")
    names = ab.profile_names(loaded, profiles)
    seconds = whole_seconds(timeout, 1800)
    probe = ab.Probe(run, timeout_s=seconds, network=network, metrics_file=metrics_file,
                     volumes=tuple(volume or ())) if run is not None else None
    if probe:
        probe.check()
    jobs = ab.jobs_for(loaded, variants, search)
    options = {name: build_options(platform=platform, locked=locked, offline=offline, ca_bundle=ca_bundle,
                                   variant=name, stack=stack) for name, stack in jobs}
    session = ab.Session(root, recipe, probe, names, options)  # plans checked before anything builds
    if search:
        found = ab.first_change(len(jobs) - 1, lambda i: session.outcome(jobs[i][0], metric, threshold))
        print(session.culprit(jobs, found))
    else:
        for name, _ in jobs:
            session.measure(name)
    json_path, md_path = session.report(root / "build" / loaded.recipe.name / "bisect")
    print(ab.table(session.rows), end="")
    print(f"report: {json_path} and {md_path}")
