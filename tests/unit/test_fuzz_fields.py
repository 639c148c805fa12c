"""Fuzz every string a recipe can carry into a Dockerfile, a launcher or a shell (hypothesis).

For each generated value put in one field, loading either refuses with one placed line, or the
rendered Dockerfile has exactly the instructions of the unedited recipe and every launcher, run
by a real /bin/sh with a stand-in interpreter that prints what it was given, receives exactly the
profile's argv and environment. No engine: rendering is pure; the launcher really runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from servebuild.errors import ServebuildError
from servebuild.engines.profiles import launcher_script
from servebuild.plan.make import BuildOptions, make_plan
from servebuild.render.context import render_dockerfile
from support import copy_real
from unit.minimal_recipe import BASE, merge

RECIPE = merge(
    BASE,
    {
        "name": "fuzz",
        "apt": {"build": ["git"], "runtime": ["curl"]},
        "launch": {
            "workdir": "/workspace",
            "user": "root",
            "cache_dirs": ["/cache/x"],
            "profiles": {
                "p": {
                    "description": "d",
                    "module": "vllm.entrypoints.cli.main",
                    "args": ["serve", "/m", "--port", "8000"],
                    "env": {"A_B": "v"},
                }
            },
        },
        "engine": {"source": {"subdir": "python", "tag": "v0.26.0"}},
        "expect": {"imports": ["vllm"], "versions": {"vllm": "0.26.0"}, "cuda": "13.0", "archs": ["sm_90a"]},
        "variants": {"bare": {"description": "the release", "patches": []}},
    },
)

# every string leaf the fuzzer may replace: (path into RECIPE, is it a dict key?)
FIELDS = [
    ("name",),
    ("description",),
    ("python",),
    ("cuda_arch_list",),
    ("bases", "build", "ref"),
    ("bases", "runtime", "ref"),
    ("apt", "build", 0),
    ("apt", "runtime", 0),
    ("engine", "version"),
    ("engine", "source", "url"),
    ("engine", "source", "commit"),
    ("engine", "source", "subdir"),
    ("launch", "workdir"),
    ("launch", "user"),
    ("launch", "cache_dirs", 0),
    ("launch", "profiles", "p", "description"),
    ("launch", "profiles", "p", "module"),
    ("launch", "profiles", "p", "args", 1),
    ("launch", "profiles", "p", "args", 3),
    ("launch", "profiles", "p", "env", "A_B"),
    ("expect", "imports", 0),
    ("constraints", "linux/amd64"),
    ("engine", "source", "tag"),
    ("expect", "versions", "vllm"),
    ("expect", "cuda"),
    ("expect", "archs", 0),
    ("variants", "bare", "description"),
]
KEYS = [
    ("launch", "profiles", "p", "env"),
    ("launch", "profiles"),
    ("expect", "versions"),
    ("variants",),
]  # dicts whose key is fuzzed

CONTROL = ["\n", "\r", "\t", "\x00", "\x1b", "\u2028", "\nRUN id", "\nRUN touch /pwned"]
SHELL = [
    "'",
    '"',
    "`",
    "$(",
    ")",
    "${",
    "}",
    ";",
    "&&",
    "|",
    "\\",
    " ",
    "#",
    "RUN touch /pwned",
    "$(touch /pwned)",
    "`touch /pwned`",
    "..",
    "/",
    "*",
    "~",
    "-",
    "=",
    "%",
    "{{",
    "{%",
]
PRINTABLE = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=6)
# two classes of value, each tried in every field: one that holds a control character somewhere
# (must be refused) and one of printable shell metacharacters and text only (may be accepted,
# and must then be inert). The examples per (field, class) come from the hypothesis profile that
# tests/conftest.py loads: "ci" (derandomized, the default) or HYPOTHESIS_PROFILE=nightly.
SOME = st.lists(st.one_of(st.sampled_from(SHELL), PRINTABLE), min_size=0, max_size=3).map("".join)
WITH_CONTROL = st.tuples(SOME, st.sampled_from(CONTROL), SOME).map("".join)
PRINTABLE_ONLY = st.lists(st.one_of(st.sampled_from(SHELL), PRINTABLE), min_size=1, max_size=6).map("".join)
CLASSES = {"control": WITH_CONTROL, "printable": PRINTABLE_ONLY}


def instructions(dockerfile: str) -> list[str]:
    """Logical instructions: continuation lines joined, comments and blanks dropped; keyword only."""
    out, current = [], ""
    for line in dockerfile.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line
        if line.endswith("\\"):
            current = current[:-1]
            continue
        out.append(current.split(None, 1)[0].upper())
        current = ""
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    copy_real(root, "constraints/torch-cu130/py3.12-linux-amd64.txt")
    (root / "recipes").mkdir()
    shim = root / "show-argv"  # stands in for the venv's python: prints argv and environment
    shim.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n"
    )
    shim.chmod(0o755)
    return root


def render(root: Path, recipe: dict):
    (root / "recipes" / "fuzz.yaml").write_text(yaml.safe_dump(recipe))
    plan = make_plan(root, "fuzz", BuildOptions(platform="linux/amd64", dry_run=True, fetching=False))
    dockerfile = render_dockerfile(plan.loaded.recipe, plan.loaded.sha256, plan.platform, plan.bases, root)
    return plan.loaded.recipe, dockerfile


def run_launcher(root: Path, name: str, profile) -> dict:
    script = root / "launcher"
    script.write_text(launcher_script(name, profile, python=str(root / "show-argv")))
    proc = subprocess.run(
        ["/bin/sh", str(script), "EXTRA"], capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=10
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def set_at(recipe: dict, path: tuple, value) -> dict:
    node = recipe
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return recipe


def rename_key(recipe: dict, path: tuple, new: str) -> dict:
    node = recipe
    for key in path:
        node = node[key]
    old = sorted(node)[0]
    node[new] = node.pop(old)
    return recipe


def check(project: Path, recipe: dict) -> str:
    baseline = instructions(render(project, RECIPE)[1])
    try:
        loaded, dockerfile = render(project, recipe)
    except ServebuildError as exc:
        line = str(exc)
        assert "\n" not in line and "\r" not in line and line.startswith("recipes/fuzz.yaml"), line
        return "refused"
    assert instructions(dockerfile) == baseline, dockerfile
    for name, profile in loaded.launch.profiles.items():
        seen = run_launcher(project, name, profile)
        assert seen["argv"] == [*profile.argv()[1:], "EXTRA"]
        assert {k: seen["env"].get(k) for k in profile.env} == dict(profile.env)
    return "rendered"


def label(path: tuple) -> str:
    return ".".join(map(str, path))


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("field", FIELDS, ids=label)
@FUZZ
@given(value=WITH_CONTROL)
def test_a_value_with_a_control_character_is_refused_in_every_field(project, field, value):
    import copy

    assert check(project, set_at(copy.deepcopy(RECIPE), field, value)) == "refused", (field, value)


@pytest.mark.parametrize("field", FIELDS, ids=label)
@FUZZ
@given(value=PRINTABLE_ONLY)
def test_a_printable_value_in_any_field_is_refused_or_inert(project, field, value):
    import copy

    event(f"{label(field)}: {check(project, set_at(copy.deepcopy(RECIPE), field, value))}")


@pytest.mark.parametrize("kind", sorted(CLASSES))
@pytest.mark.parametrize("where", KEYS, ids=label)
@FUZZ
@given(data=st.data())
def test_any_key_is_refused_or_inert(project, where, kind, data):
    import copy

    value = data.draw(CLASSES[kind], label="key")
    result = check(project, rename_key(copy.deepcopy(RECIPE), where, value))
    assert kind == "printable" or result == "refused", (where, value)
    event(f"key of {where[-1]}: {result}")


def test_the_fuzzer_can_see_an_injection(project):
    """The oracle itself: a Dockerfile with one more instruction or a launcher with another argv fails."""
    loaded, dockerfile = render(project, RECIPE)
    assert instructions(dockerfile + "RUN touch /pwned\n") != instructions(dockerfile)
    assert instructions(dockerfile.replace("\\\n", "\n", 1)) != instructions(dockerfile)
    profile = loaded.launch.profiles["p"]
    evil = profile.model_copy(update={"args": ["serve", "/m; touch /pwned"]})
    script = launcher_script("p", evil, python=str(project / "show-argv")).replace("'", "")
    (project / "launcher").write_text(script)
    proc = subprocess.run(
        ["/bin/sh", str(project / "launcher")],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        cwd=project,
    )
    assert json.loads(proc.stdout.splitlines()[0])["argv"] != evil.argv()[1:]  # unquoted: argv splits
