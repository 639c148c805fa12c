"""Careless and hostile recipes fail in loading with one placed error: no Dockerfile line, shell
word or path outside the project can be smuggled in (unit level: no engine, no subprocess)."""

from __future__ import annotations

import time

import pytest
import yaml

from servebuild.errors import InputError, RecipeError
from servebuild.recipe.load import load_recipe
from support import REPO_ROOT, copy_real

BASE = {
    "name": "hostile", "description": "d", "platforms": ["linux/amd64"], "python": "3.12",
    "bases": {"build": {"ref": "servebuild/debian:bookworm-{arch}"}, "runtime": {"ref": "servebuild/debian:bookworm-{arch}"}},
    "constraints": {"linux/amd64": "constraints/torch-cu130/py3.12-linux-amd64.txt"},
    "engine": {"name": "vllm", "version": "0.26.0", "install": "pip-source",
               "source": {"url": "https://github.com/vllm-project/vllm.git",
                          "commit": "568afb3a13806beb53bb2e6bd518269357b237c0"}},
    "launch": {"profiles": {"p": {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m"]}}},
}

INJECT = "x\nRUN touch /pwned"
CASES = {
    "apt.build": ({"apt": {"build": [INJECT]}}, "apt.build"),
    "apt.runtime": ({"apt": {"runtime": ["ok; touch /pwned"]}}, "apt.runtime"),
    "launch.workdir": ({"launch": {"workdir": "/w" + INJECT}}, "launch.workdir"),
    "launch.user": ({"launch": {"user": "0\nUSER 1"}}, "launch.user"),
    "launch.cache_dirs": ({"launch": {"cache_dirs": ["/c $(touch /pwned)"]}}, "launch.cache_dirs"),
    "engine.version": ({"engine": {"version": "1.0\nRUN id"}}, "engine.version"),
    "engine.source.subdir": ({"engine": {"source": {"subdir": "py; touch /pwned"}}}, "engine.source.subdir"),
    "engine.overlay_from": ({"engine": {"overlay_from": "../../etc"}}, "engine.overlay_from"),
    "profile description": ({"launch": {"profiles": {"p": {"description": "a\ntouch /pwned"}}}}, "launch.profiles"),
    "commit with newline": ({"engine": {"source": {"commit": "568afb3a13806beb53bb2e6bd518269357b237c0\n"}}},
                            "engine.source.commit"),
    "python with newline": ({"python": "3.12\n"}, "python"),
    "arch list with newline": ({"cuda_arch_list": "9.0a\n"}, "cuda_arch_list"),
    "name with newline": ({"name": "hostile\n"}, "name"),
    "env name with newline": ({"launch": {"profiles": {"p": {"env": {"A\n": "1"}}}}}, "launch.profiles"),
    "import is code": ({"expect": {"imports": ["os; open('/tmp/pwned','w')"]}}, "expect.imports"),
    "constraints escape": ({"constraints": {"linux/amd64": "../../etc/passwd"}}, "constraints.linux/amd64"),
    "absolute constraints": ({"constraints": {"linux/amd64": "/etc/passwd"}}, "constraints.linux/amd64"),
    "unknown install mode": ({"engine": {"install": "curl-pipe-sh"}}, "engine.install"),
    "git tag with newline": ({"engine": {"source": {"tag": "v1\nRUN id"}}}, "engine.source.tag"),
    "expected version as code": ({"expect": {"versions": {"vllm": "$(id)"}}}, "expect.versions"),
    "expected dist name as path": ({"expect": {"versions": {"../x": "1.0"}}}, "expect.versions"),
    "cuda as code": ({"expect": {"cuda": "13.0; id"}}, "expect.cuda"),
    "arch with newline": ({"expect": {"archs": ["sm_90a\n"]}}, "expect.archs"),
    "description with escape": ({"description": "ok\x1b[2J"}, "description"),
    "base ref a:b:c": ({"bases": {"build": {"ref": "a:b:c"}}}, "bases.build.ref"),
    "base ref x//y": ({"bases": {"runtime": {"ref": "x//y"}}}, "bases.runtime.ref"),
    "base ref empty tag": ({"bases": {"runtime": {"ref": "a/b:"}}}, "bases.runtime.ref"),
    "version not PEP 440": ({"engine": {"version": "1!!"}}, "engine.version"),
    "profile named like a command": ({"launch": {"profiles": {"cat": {"module": "vllm.entrypoints.cli.main"}}}},
                                     "launch.profiles.cat"),
    "variant description newline": ({"variants": {"v": {"description": "a\nb", "patches": []}}},
                                    "variants.v.description"),
}


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


@pytest.fixture
def project(tmp_path):
    copy_real(tmp_path, "constraints/torch-cu130/py3.12-linux-amd64.txt")
    (tmp_path / "recipes").mkdir()
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_field_is_one_placed_error(project, case):
    edits, field = CASES[case]
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(RecipeError) as info:
        load_recipe("hostile", project)
    line = str(info.value)
    assert "\n" not in line and line.startswith("recipes/hostile.yaml") and field in line, line


def test_the_unedited_base_loads(project):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE))
    assert load_recipe("hostile", project).recipe.engine.kind.name == "vllm"


def test_yaml_alias_bomb_is_refused_quickly(project):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8))
    (project / "recipes" / "hostile.yaml").write_text(bomb)
    start = time.monotonic()
    with pytest.raises(RecipeError, match="more than 100000 nodes once aliases are expanded"):
        load_recipe("hostile", project)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("blob,message", [(b"name: \xff\xfe\n", "not UTF-8"), (b"a:" + b"[" * 5000, "YAML")])
def test_unreadable_yaml_is_one_line(project, blob, message):
    (project / "recipes" / "hostile.yaml").write_bytes(blob)
    with pytest.raises(RecipeError, match=message):
        load_recipe("hostile", project)


def test_trailing_newline_commit_sha_in_a_patch_entry(project):
    edits = {"engine": {"source": {"patches": [{"id": "p", "pr": 1, "commit": "a" * 40 + "\n"}]}}}
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(RecipeError, match="full 40-hex"):
        load_recipe("hostile", project)


def test_the_real_recipes_still_load_under_the_hostile_input_rules():
    for name in ("sglang-native-fp8", "vllm-dspark", "sglang-fused-fp4"):
        assert load_recipe(name, REPO_ROOT).recipe.name == name


def test_committed_locks_survive_schema_growth(monkeypatch):
    """A lock hashes the recipe files as written: loading the committed recipes through a schema
    with one more defaulted field (a subclass swapped in where loading validates) leaves every
    committed lock current, as the build's own lock check sees it."""
    from pydantic import Field

    from servebuild.recipe import load as recipe_load
    from servebuild.lock.lockfile import pin_for_build
    from servebuild.recipe.schema import Recipe

    class GrownRecipe(Recipe):
        new_knob: int = Field(default=7)

    before = {name: load_recipe(name, REPO_ROOT).sha256 for name in REAL_LOCKED}
    monkeypatch.setattr(recipe_load, "Recipe", GrownRecipe)
    for name in REAL_LOCKED:
        loaded = load_recipe(name, REPO_ROOT)
        assert isinstance(loaded.recipe, GrownRecipe) and loaded.recipe.new_knob == 7
        assert loaded.sha256 == before[name]
        _, lock = pin_for_build(loaded)
        assert lock is not None, f"{name}: the committed lock went stale with the grown schema"
        assert lock.recipe_sha256 == loaded.sha256


REAL_LOCKED = sorted(p.name.removesuffix(".lock.yaml") for p in (REPO_ROOT / "recipes").glob("*.lock.yaml"))


def test_a_set_with_a_cuda_compiler_outside_13_0_is_refused(project):
    """The old sglang set (nvcc/crt/nvvm 13.5.37 via humming-kernels) cannot be named by a CUDA 13.0 recipe."""
    copy_real(project, "tests/fixtures/old-sglang-set.txt")
    edits = {"constraints": {"linux/amd64": "tests/fixtures/old-sglang-set.txt"}, "expect": {"cuda": "13.0"}}
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edits)))
    with pytest.raises(RecipeError, match=r"constraints.linux/amd64: .*CUDA compiler wheels outside CUDA 13.0.x: "
                                          r".*nvidia-cuda-nvcc==13.5.37"):
        load_recipe("hostile", project)


LOCK_BASE = {"lock_version": 1, "recipe": "hostile", "files": {}, "unresolved": [], "source": None,
             "bases": {"build": {"ref": "x", "digest": None}, "runtime": {"ref": "y", "digest": None}}}


@pytest.mark.parametrize("edit,message", [
    ({"bases": {"build": {"digest": "sha256:" + "a" * 64 + "\nRUN touch /pwned"}, "runtime": {}}}, "lock value refused"),
    ({"bases": 5}, "bases: malformed lock"),
    ({"files": {"/etc/hostname": "x"}}, "files: malformed lock"),
    ({"files": {"/dev/zero": "x"}}, "files: malformed lock"),
    ({"unresolved": 5}, "unresolved: malformed lock"),
    ({"patches": [1]}, r"patches\.0: malformed lock: must be a mapping"),
    ("- a list", r"\(top level\): malformed lock"),
])
def test_hostile_lock_is_one_line_and_reaches_no_dockerfile(project, edit, message):
    from servebuild.errors import ServebuildError
    from servebuild.plan.make import BuildOptions, make_plan
    path = project / "recipes" / "hostile.yaml"
    path.write_text(yaml.safe_dump({**BASE, "engine": None}))
    loaded = load_recipe("hostile", project)
    from servebuild.lock.lockfile import file_hashes  # a lock records every file the recipe names (else it is stale)
    current = {**LOCK_BASE, "recipe_sha256": loaded.sha256, "files": file_hashes(loaded)}
    lock = yaml.safe_dump(merge(current, edit)) if isinstance(edit, dict) else edit
    (project / "recipes" / "hostile.lock.yaml").write_text(lock)
    for locked in (False, True):
        with pytest.raises(ServebuildError, match=message) as info:
            make_plan(project, "hostile", BuildOptions(platform="linux/amd64", locked=locked, dry_run=True))
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("text,message", [
    ("extends: /tmp/outside.yaml\n", "is not a recipe name"),
    ("extends: ../../x\n", "is not a recipe name"),
    ("? [a, b]\n: 1\n", "keys are plain names"),
    ({"launch": {"profiles": {"a": 5, "b": {"from": "a"}}}}, "`from` needs mapping profiles"),
    ({"launch": {"profiles": {"a": {"module": "x"}, "b": {"from": ["a"]}}}}, "`from` names unknown profile"),
    ({"launch": {"profiles": {"a": {"module": "x", "extra_args": 5}, "b": {"from": "a"}}}}, "`from` needs mapping"),
    ({"bad\nkey": 1}, r"bad\\nkey: unknown field"),
])
def test_hostile_structure_is_one_line(project, text, message):
    if isinstance(text, dict):
        text = yaml.safe_dump(merge(BASE, text))
    (project / "recipes" / "hostile.yaml").write_text(text)
    with pytest.raises(RecipeError, match=message) as info:
        load_recipe("hostile", project)
    assert "\n" not in str(info.value)


def test_fifo_and_huge_recipes_are_refused_without_reading(project):
    import os
    fifo = project / "recipes" / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(RecipeError, match="is not a regular file"):
        load_recipe("fifo", project)
    (project / "recipes" / "huge.yaml").write_text("description: " + "x" * (2 << 20) + "\n")
    with pytest.raises(RecipeError, match="at most 1048576 are read"):
        load_recipe("huge", project)


@pytest.mark.parametrize("tag", ["x:1:2", "a:", "a//b", "a..b", "a:--x", "a/b:c/d", "A/b", "a:" + "x" * 200, "-x"])
def test_tags_follow_the_docker_reference_grammar(tag):
    from servebuild.plan.make import BuildOptions, make_plan
    with pytest.raises(InputError, match="not a valid image tag"):
        make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/amd64", tag=tag, dry_run=True))


@pytest.mark.parametrize("tag", ["servebuild/x:amd64", "127.0.0.1:5000/a/b:v1.0", "a__b/c-d:x_y"])
def test_good_tags_pass(tag):
    from servebuild.plan.make import BuildOptions, make_plan
    assert make_plan(REPO_ROOT, "torch-cu130", BuildOptions(platform="linux/amd64", tag=tag, dry_run=True)).tag == tag


def test_bisect_options_are_checked_before_anything_builds():
    from servebuild.check import bisect
    for metric, threshold, message in (("m", "abc", "not a finite number"), ("m", "nan", "not a finite number"),
                                       ("", "1", "together"), ("m", None, "together")):
        with pytest.raises(InputError, match=message):
            bisect.parse_threshold(metric, threshold)
    from servebuild.check.container import RunOptions
    for probe, message in ((bisect.Probe("true", timeout_s=0), "positive"), (bisect.Probe(" "), "empty"),
                           (bisect.Probe("true", run=RunOptions(volumes=("--privileged",))), "SRC:DST"),
                           (bisect.Probe("true", run=RunOptions(volumes=("/tmp:/x\n",))), "line break"),
                           (bisect.Probe("true", run=RunOptions(network="none;rm")), "not a docker network"),
                           (bisect.Probe("true", run=RunOptions(shm_size="32 gigs")), "not a size"),
                           (bisect.Probe("true", run=RunOptions(gpus="device=0")), "not all, none")):
        with pytest.raises(InputError, match=message):
            probe.check()
    script = bisect.Probe("true", metrics_file="x'; touch /pwned; '").script()
    import shlex
    assert shlex.quote("x'; touch /pwned; '") in script and "[ -f 'x'; touch" not in script


def test_duplicate_keys_and_wheel_names_are_refused(project):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE) + "python: '3.11'\n")
    with pytest.raises(RecipeError, match=r"python: key 'python' is given twice"):
        load_recipe("hostile", project)
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump({**BASE, "wheels": ["a/x.whl", "b/x.whl"]}))
    with pytest.raises(RecipeError, match="wheels: two wheels are named x.whl"):
        load_recipe("hostile", project)


@pytest.mark.parametrize("edit,field", [({"build": {"max_jobs": True}}, "build.max_jobs"),
                                         ({"expect": {"torchvision_pair": "yes"}}, "expect.torchvision_pair"),
                                         ({"python": "3.\u0661\u0662"}, "python")])
def test_loose_types_and_unicode_digits_are_refused(project, edit, field):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edit)))
    with pytest.raises(RecipeError, match=field):
        load_recipe("hostile", project)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8))


@pytest.mark.parametrize("blob,words", [
    (BOMB, "more than 100000 nodes"), ("a: " + "[" * 3000 + "\n", "nesting depth"),
    ("a: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels deep"),
    ('d: &s "' + "x" * 100_000 + '"\na: [' + "*s, " * 50 + "*s]\n", "characters of text"),
    ("images: {a: b}\nimages: {c: d}\n", "given twice"), (b"images:\n  \xff: x\n", "not UTF-8"),
    ("".join(f"k{i}: 1\n" for i in range(30000)), "at most 20000"), ("images: [unclosed\n", "invalid YAML")])
@pytest.mark.parametrize("reader", ["mirror map", "config", "lock"])
def test_every_input_file_is_parsed_with_the_same_bounds(project, tmp_path, reader, blob, words):
    """Mirror maps, the user config and lock files go through the recipe's bounded YAML reader."""
    from servebuild.plan.config import load_config, load_mirror_map
    from servebuild.errors import ServebuildError
    from servebuild.lock import lockfile
    path = tmp_path / "input.yaml"
    if reader == "lock":
        (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE))
        path = project / "recipes" / "hostile.lock.yaml"
    path.write_bytes(blob if isinstance(blob, bytes) else blob.encode())
    start = time.monotonic()
    with pytest.raises(ServebuildError) as info:
        {"mirror map": lambda: load_mirror_map(path), "config": lambda: load_config(path),
         "lock": lambda: lockfile.load_lock_file(load_recipe("hostile", project))}[reader]()
    line = str(info.value)
    assert "\n" not in line and words in line and path.name in line, line
    assert time.monotonic() - start < 5  # a hang guard, not a speed target (see scripts/bench_hostile_yaml.py)


def test_a_recipe_must_be_named_as_its_file(project, tmp_path):
    """A file elsewhere that borrows another recipe's name would share its build directory,
    default tag and verdicts (publish would take its image for the real recipe's)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "other.yaml").write_text(yaml.safe_dump({**BASE, "name": "torch-cu130"}))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(outside / "other.yaml"), project)
    line = str(info.value)
    assert "\n" not in line and "name" in line and "must be named 'other'" in line


def test_release_artifact_must_be_the_engine_version(tmp_path):
    """wheel-overlay relabels the installed dist-info from engine.version: 0.5.17 over the pinned
    0.5.16 wheel would publish a false version."""
    data = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.yaml").read_text())
    data["engine"]["version"] = "0.5.17"
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "torch-cu130.yaml").write_text((REPO_ROOT / "recipes/torch-cu130.yaml").read_text())
    (tmp_path / "recipes" / "sglang-native-fp8.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RecipeError) as info:
        load_recipe(str(tmp_path / "recipes" / "sglang-native-fp8.yaml"), REPO_ROOT)
    line = str(info.value)
    assert "\n" not in line and "pins sglang==0.5.16, but engine.version is 0.5.17" in line and "engine.precompiled" in line
