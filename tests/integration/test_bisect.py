"""bisect --run and --search on the fixture recipe, on the real engine: a command runs in every
variant image, its metrics come back in one table, and the search names the patch that changes
the outcome while building only what bisection needs. (The real SGLang variants are measured by
`invoke bisect` on a GPU host; here the command is the toy server's banner.)"""

from __future__ import annotations

import json
import subprocess

import pytest

from integration.conftest import CREATED_TAGS, HOST_CA
from servebuild.check import bisect
from servebuild.plan.make import BuildOptions
from support import fixture_recipe, make_project, make_upstream, own_cache_keys

VARIANTS = {
    "release": {"patches": []},
    "prs": {"patches": ["pr-1", "pr-2"]},
    "banner-only": {"patches": ["local-version-banner"]},
}
# the toy server's banner says "patched" once the local patch is in; a JSON line carries the metric
COMMAND = (
    'out=$(toy-serve --port 5); echo "$out"; '
    'printf \'{"patched": %s, "hopper": %s}\\n\' "$(echo "$out" | grep -c patched)" '
    '"$(echo "$out" | grep -c hopper)"'
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bisect")
    up = make_upstream(tmp)
    root = make_project(
        tmp, up, fixture_recipe(up, platforms=["linux/amd64"], variants=VARIANTS, **own_cache_keys("debianutils"))
    )
    return root, tmp / "cache"


def options(cache, name, stack=None):
    tag = f"servebuild-test/toy-bisect:{name}"
    CREATED_TAGS.append(tag)
    return BuildOptions(
        platform="linux/amd64",
        tag=tag,
        cache_dir=cache,
        echo=False,
        variant=name,
        stack=stack,
        ca_bundle=HOST_CA if HOST_CA.exists() else None,
    )


def every(names, profiles):
    return {name: list(profiles) for name in names}


def test_run_measures_every_variant(engine, base_images, project, tmp_path):
    root, cache = project
    session = bisect.Session(
        root,
        "toy",
        bisect.Probe(COMMAND, timeout_s=120),
        every(VARIANTS, [None, "toy-serve"]),
        {name: options(cache, name) for name in VARIANTS},
        out_dir=tmp_path / "report",
    )
    for name in VARIANTS:
        session.measure(name)
    json_path, md_path, _ = session.report()
    rows = {(r.variant, r.profile): r for r in session.rows}
    assert len(rows) == 6 and all(r.exit == 0 for r in rows.values())
    assert {v: rows[(v, None)].metrics for v in VARIANTS} == {
        "release": {"patched": 0, "hopper": 0},
        "prs": {"patched": 0, "hopper": 1},
        "banner-only": {"patched": 1, "hopper": 0},
    }
    assert rows[("prs", "toy-serve")].metrics == rows[("prs", None)].metrics
    report = json.loads(json_path.read_text())
    assert len(report["rows"]) == 6 and "| banner-only | - | local-version-banner |" in md_path.read_text()
    assert all(len(r["runs"]) == 1 and (tmp_path / "report" / r["runs"][0]["log"]).is_file() for r in report["rows"])
    # a variant costs its engine layers, not an image
    size = int(engine.image_inspect(rows[("prs", None)].image_id)["Size"])
    for name in VARIANTS:
        unique = rows[(name, None)].unique_bytes
        assert unique is not None and 0 < unique < size * 0.05, (name, unique, size)
    print("\n" + bisect.table(session.rows))


def test_search_names_the_first_patch_that_changes_the_metric(engine, base_images, project):
    root, cache = project
    stack = ["pr-1", "pr-2", "local-version-banner"]
    jobs = [(f"prefix-{i}", tuple(stack[:i])) for i in range(len(stack) + 1)]
    session = bisect.Session(
        root,
        "toy",
        bisect.Probe(COMMAND, timeout_s=120),
        every(dict(jobs), [None]),
        {name: options(cache, name, s) for name, s in jobs},
    )
    found = bisect.first_change(len(stack), lambda i: session.outcome(jobs[i][0], "patched", 1.0))
    assert found == 3
    message = session.culprit(jobs, found)
    assert message.startswith(
        "first patch that changes the outcome: local-version-banner (patches/toy-version-banner.patch, diff sha256 "
    )
    found = bisect.first_change(len(stack), lambda i: session.outcome(jobs[i][0], "hopper", 1.0))
    assert found == 2 and "pr-2" in session.culprit(jobs, found)
    # the full stack first, prefix 0 only when the search ends next to it: prefixes 3, 1, 2, each
    # built once for both questions
    assert sorted(session.measured) == ["prefix-1", "prefix-2", "prefix-3"]


def test_bisection_costs_a_logarithmic_number_of_results():
    seen = []

    def result(i):
        seen.append(i)
        return "pass" if i < 37 else "fail"

    assert bisect.first_change(100, result) == 37
    assert len(set(seen)) <= 2 + 7  # ends, then log2(100) probes


def test_metric_and_threshold_come_together():
    from servebuild.errors import InputError

    with pytest.raises(InputError, match="--metric NAME and --threshold NUMBER together"):
        bisect.parse_threshold("ttft", None)


def step_patch(i: int) -> str:
    """Local patch i of an 8-patch stack: each adds a module; patch 6 also changes the greeting."""
    header = f"servebuild fixture: step {i} of a stack of eight.\n\nWhy: bisection fixture.\n---\n"
    body = (
        f"diff --git a/toyserve/step{i}.py b/toyserve/step{i}.py\nnew file mode 100644\n"
        f"--- /dev/null\n+++ b/toyserve/step{i}.py\n@@ -0,0 +1 @@\n+STEP = {i}\n"
    )
    if i == 6:
        body += (
            "diff --git a/toyserve/greeting.py b/toyserve/greeting.py\n--- a/toyserve/greeting.py\n"
            '+++ b/toyserve/greeting.py\n@@ -1 +1 @@\n-GREETING = "hello"\n+GREETING = "goodbye"\n'
        )
    return header + body


@pytest.fixture(scope="module")
def stack_project(tmp_path_factory):
    import hashlib

    tmp = tmp_path_factory.mktemp("bisect8")
    up = make_upstream(tmp)
    recipe = fixture_recipe(up, platforms=["linux/amd64"])
    texts = {i: step_patch(i) for i in range(1, 9)}
    recipe["engine"]["source"]["patches"] = [
        {"id": f"step-{i}", "file": f"patches/step-{i}.patch", "sha256": hashlib.sha256(texts[i].encode()).hexdigest()}
        for i in texts
    ]
    recipe["expect"]["versions"].pop("toyserve")
    root = make_project(tmp, up, recipe)
    for i, text in texts.items():
        (root / "patches" / f"step-{i}.patch").write_text(text)
    yield root, tmp / "cache"
    # a prefix measured again is rebuilt under its tag: the earlier image is left dangling; remove
    # those of this test only (labelled with its s8- variants)
    listed = subprocess.run(
        [
            "/usr/bin/docker",
            "images",
            "-q",
            "--no-trunc",
            "--filter",
            "dangling=true",
            "--filter",
            "label=io.servebuild.recipe=toy",
        ],
        capture_output=True,
        text=True,
    ).stdout
    for image in listed.split():
        variant = subprocess.run(
            [
                "/usr/bin/docker",
                "image",
                "inspect",
                "--format",
                '{{index .Config.Labels "io.servebuild.variant"}}',
                image,
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if variant.startswith("s8-"):
            subprocess.run(["/usr/bin/docker", "image", "rm", image], capture_output=True)


def test_search_over_eight_patches_finds_patch_six_in_four_builds(engine, base_images, stack_project):
    root, cache = stack_project
    stack = [f"step-{i}" for i in range(1, 9)]
    jobs = [(f"prefix-{i}", tuple(stack[:i])) for i in range(len(stack) + 1)]
    plans = {name: options(cache, f"s8-{name}", s) for name, s in jobs}
    greets = bisect.Probe("toy-serve --port 5 | grep -q hello", timeout_s=120)
    session = bisect.Session(root, "toy", greets, every(plans, [None]), {name: plans[name] for name, _ in jobs})
    found = bisect.first_change(len(stack), lambda i: session.outcome(jobs[i][0], None, None))
    print(f"\n8-patch search: culprit prefix {found}, builds {sorted(session.measured)}")
    assert found == 6 and len(session.measured) <= 4
    line = session.culprit(jobs, found)
    assert line.startswith("first patch that changes the outcome: step-6 (patches/step-6.patch, diff sha256 ")
    assert "exit 0 with prefix-5 -> exit 1 with prefix-6" in line and "4 of 9 prefixes built" in line

    # a check no patch changes: "no change", reusing the prefixes already built
    quiet = bisect.Session(
        root,
        "toy",
        bisect.Probe("toy-serve --port 5 | grep -q 5", timeout_s=120),
        every(plans, [None]),
        {name: plans[name] for name, _ in jobs},
    )
    assert bisect.first_change(len(stack), lambda i: quiet.outcome(jobs[i][0], None, None)) is None
    assert quiet.culprit(jobs, None).startswith("no patch changes the outcome: prefix-0 and prefix-8 agree")
    assert set(quiet.measured) == {"prefix-8", "prefix-4", "prefix-2", "prefix-1", "prefix-0"}
    print(bisect.table(quiet.rows))


# each run: its order (a counter file on the host, through a volume), the variable given with --env, the
# profile it was given, 3,000 lines of output (the log must keep all of them), and two JSONL metric lines
# (the last one counts)
REPEAT_COMMAND = (
    "n=$(cat /counter/n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > /counter/n; "
    'seq 1 3000 | sed "s/^/line /"; echo "end of output"; '
    'printf \'{"order": 0}\\n{"order": %s, "flavour": "%s", "profile_is_%s": 1}\\n\' "$n" "$FLAVOUR" '
    '"${SERVEBUILD_PROFILE:-none}" > /tmp/m.jsonl'
)


def test_repeat_interleaves_rows_and_keeps_every_log(engine, base_images, project, tmp_path):
    """--repeat 3 over two variants and three (variant, profile) rows, with --env and VARIANT:PROFILE:
    rounds alternate direction, medians and ranges land in the table, every run's whole log is kept,
    and a JSONL metrics file is read as its last object."""
    from servebuild.check.container import RunOptions
    from servebuild.recipe.load import load_recipe

    root, cache = project
    counter = tmp_path / "counter"
    counter.mkdir()
    counter.chmod(0o777)
    names = bisect.profile_names(load_recipe("toy", root), "toy-serve,release:toy-serve", ["release", "prs"])
    assert names == {"release": ["toy-serve"], "prs": ["toy-serve"]}
    names["prs"] = [None, "toy-serve"]  # two rows for prs: the command alone, and with the profile
    probe = bisect.Probe(
        REPEAT_COMMAND,
        timeout_s=120,
        metrics_file="/tmp/m.jsonl",
        run=RunOptions(gpus="none", env=(("FLAVOUR", "tart"),), volumes=(f"{counter}:/counter",)),
    )
    out = tmp_path / "bisect"
    session = bisect.Session(
        root, "toy", probe, names, {n: options(cache, n) for n in ("release", "prs")}, repeat=3, out_dir=out
    )
    session.measure_all(["release", "prs"])
    json_path, md_path, _ = session.report()
    rows = {r.key: r for r in session.rows}
    assert list(rows) == ["release-toy-serve", "prs", "prs-toy-serve"]
    orders = {k: [run["metrics"]["order"] for run in r.runs] for k, r in rows.items()}
    assert orders == {"release-toy-serve": [1, 6, 7], "prs": [2, 5, 8], "prs-toy-serve": [3, 4, 9]}, orders
    assert rows["prs"].metrics["order"] == 5 and rows["prs"].spread["order"] == [2, 8]
    assert rows["release-toy-serve"].metrics["flavour"] == "tart"
    assert "profile_is_toy-serve" in rows["prs-toy-serve"].metrics and "profile_is_none" in rows["prs"].metrics
    for row in rows.values():
        assert len(row.runs) == 3 and row.exit == 0
        for run in row.runs:
            log = (out / run["log"]).read_text()
            assert "line 1\n" in log and "line 3000\nend of output" in log, run["log"]
    table = md_path.read_text()
    assert "| prs | - | pr-1,pr-2 |" in table and "| 3 | 0 |" in table and "5 (2-8)" in table
    assert "logs/prs-toy-serve-run{1..3}.log" in table
    assert json.loads(json_path.read_text())["repeat"] == 3


def test_gpus_on_an_engine_without_gpus_is_one_line(engine):
    """--gpus all (or devices) where the engine has no NVIDIA runtime: one line, exit 2, nothing built
    (without --gpus the runs go on without a GPU, and bisect says so)."""
    import sys
    from pathlib import Path
    from support import REPO_ROOT

    if "nvidia" in (engine.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")  # the refusal is for engines without one

    def images() -> set:
        return set(
            subprocess.run(
                ["/usr/bin/docker", "images", "-q", "--no-trunc"], capture_output=True, text=True
            ).stdout.split()
        )

    before = images()
    for gpus in ("all", "0,1"):
        proc = subprocess.run(
            [
                str(Path(sys.executable).parent / "invoke"),
                "bisect",
                "--recipe",
                "sglang-native-fp8-bookworm",
                "--variants",
                "local-stack",
                "--run",
                "true",
                "--gpus",
                gpus,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert f"--gpus {gpus}: the local Docker engine has no NVIDIA runtime" in lines[0], lines[0]
        assert "Traceback" not in proc.stderr and "built in" not in proc.stdout
    assert images() == before  # nothing built or tagged
