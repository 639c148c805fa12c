"""The real engine images, built on the real engine from the recipe files users build, and proven
by the smoke suite: SGLang 0.5.16 (wheel-overlay) and vLLM 0.26.0 (vllm-precompiled), linux/amd64.

What differs from a GH200/H200 build, and why: the bases are Debian bookworm images made here with
debootstrap (no registry is reachable), which forces Python 3.11 (the `-bookworm` recipes change
only bases, Python and the matching hashed sets); GitHub is unreachable, so the variants built are
the ones whose stacks need no upstream PR (adaptive prefill alone; the original loader fix alone;
vLLM as released). The engine trees come from the hash-pinned PyPI release artifacts of the pinned
tags. No GPU here: the GPU checks skip; the JIT checks compile for sm_90a without one.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from integration import warm_checks
from integration.conftest import build_fixture, drop_now
from servebuild.build import committed
from servebuild.check import engine_parser
from servebuild.check import bisect
from servebuild.check import smoke
from servebuild.errors import ServebuildError
from servebuild.fsutil import sha256_file
from servebuild.recipe.load import load_recipe
from support import RECIPE_CHECKS, REPO_ROOT, copy_recipe_chain

CASES = [("sglang-native-fp8-bookworm", "local-stack"), ("vllm-dspark-bookworm", "release")]
# launch profiles each engine's own parser must refuse: the default profile with (flag, value) set
# in place of what it gives, and the engine's own words for it
BAD_PROFILES = {
    "sglang": {
        "value": ("--moe-runner-backend", "flashinfer", "argument --moe-runner-backend: invalid choice: 'flashinfer'"),
        "flag": ("--no-such-flag", None, "unrecognized arguments: --no-such-flag"),
        "type": ("--max-running-requests", "many", "argument --max-running-requests: invalid int value: 'many'"),
    },
    "vllm": {
        "value": ("--dtype", "float7", "argument --dtype: invalid choice: 'float7'"),
        "flag": ("--no-such-flag", None, "unrecognized arguments: --no-such-flag"),
        "type": ("--max-num-seqs", "many", "argument --max-num-seqs: invalid int value: 'many'"),
    },
}
# a second variant of the same image: it must cost only what its patch changes
SECOND = {"sglang-native-fp8-bookworm": "original-fix"}


def image_size(tag: str) -> int:
    out = subprocess.run(
        ["/usr/bin/docker", "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.engine_image
@pytest.mark.parametrize("recipe,variant", CASES, ids=[c[0] for c in CASES])
def test_engine_image_builds_and_passes_the_smoke_suite(engine, amd64_base, tmp_path_factory, recipe, variant):
    cache = tmp_path_factory.mktemp("engine-source-cache")
    tag = f"servebuild-test/{recipe}:{variant}-amd64"
    tags = [tag]
    try:
        result, seconds = build_fixture(REPO_ROOT, engine, "linux/amd64", tag, cache, recipe=recipe, variant=variant)
        # the committed id (recipes/RECIPE.ids.yaml, recorded where two engines agreed) is what this engine
        # builds too: in CI a fresh machine, its own base bootstrapped from the lock, an empty build cache
        layers, steps = committed.layers_of(engine, result.image_id, "linux/amd64")
        same, line = committed.verdict(
            load_recipe(recipe, REPO_ROOT), "linux/amd64", result.image_id, layers, steps, variant
        )
        assert same, line
        RECIPE_CHECKS.append(f"{recipe} {variant}: {line}")
        manifest = json.loads(result.manifest_path.read_text())
        engine_info = manifest["engine"]
        tree = engine_info["source"]["tree"]
        assert tree["from"].startswith("pypi-"), tree
        # the release wheel/sdist the tree came from, by the sha256 its hashed requirement file pins
        assert re.fullmatch(r"[0-9a-f]{64}", tree["sha256"]), tree
        assert any(
            f"--hash=sha256:{tree['sha256']}" in f.read_text() for f in (REPO_ROOT / "constraints").rglob("*.txt")
        ), tree
        if "version_file" in tree:  # a release sdist: the commit it says it was cut from is the recipe's or declared
            source = load_recipe(recipe, REPO_ROOT).recipe.engine.source
            assert tree["sdist_commit"] in (source.sdist_commit, source.commit[: len(tree["sdist_commit"] or "")]), tree
        patches = [p["id"] for p in engine_info["source"]["patches"]]
        assert patches == load_recipe(recipe, REPO_ROOT).recipe.variants[variant].patches
        if patches:
            assert "+sb" in engine_info["installed_version"]
        if "sglang-dsv4-verify-pad" in patches:
            # the fix changes the compress plan's kernel source: this build compiles that module (and no other)
            # on the release engine with the patched source, and copies every other kernel from the release's
            built_log = result.log_path.read_text()
            compiled = re.findall(
                r"aot: (\S+?)\(.*\) for .* \(it reads sglang/jit_kernel/csrc/deepseek_v4/c_plan\.cuh, which the "
                r"patches change\)$",
                built_log,
                re.M,
            )
            assert compiled == ["sglang.jit_kernel.dsv4.compress:_jit_compress_plan_module"], compiled
            assert re.search(r"aot: \S+topk\S*\(.*\): the release's build, copied", built_log, re.M), built_log[-3000:]
            RECIPE_CHECKS.append(
                f"{recipe} {variant}: aot compiled {compiled[0]} (c_plan.cuh patched), copied the rest"
            )
        assert any(p.startswith("build-essential=") for p in manifest["outputs"]["apt_packages"])
        out_dir = tmp_path_factory.mktemp("smoke")
        start = time.monotonic()
        code = smoke.test_image(engine, tag, load_recipe(recipe, REPO_ROOT).with_variant(variant), out_dir)
        smoke_seconds = time.monotonic() - start
        junit = (out_dir / "smoke-junit.xml").read_text()
        record = {
            "recipe": recipe,
            "variant": variant,
            "build_s": round(seconds),
            "smoke_s": round(smoke_seconds),
            "size_bytes": image_size(tag),
            "installed_version": engine_info["installed_version"],
        }
        # warm: the same build again (every layer cached); size against the runtime base and the parts
        _, warm_seconds = build_fixture(REPO_ROOT, engine, "linux/amd64", tag, cache, recipe=recipe, variant=variant)
        du = subprocess.run(
            [
                "/usr/bin/docker",
                "run",
                "--rm",
                "--network",
                "none",
                "--entrypoint",
                "du",
                tag,
                "-sb",
                "/opt/venv",
                "/opt/engine",
                "/usr",
                "/opt/servebuild",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        record.update(
            warm_build_s=round(warm_seconds, 1),
            runtime_base_bytes=image_size(manifest["bases"]["runtime"]["resolved"]),
            runtime_parts_bytes={line.split("\t")[1]: int(line.split("\t")[0]) for line in du.splitlines()},
        )
        print(f"\nengine image {json.dumps(record)}")
        bench = REPO_ROOT / "build" / "bench"
        bench.mkdir(parents=True, exist_ok=True)
        (bench / f"{recipe}.json").write_text(json.dumps(record, indent=2) + "\n")
        assert code == 0, f"smoke suite failed on {tag}; see {out_dir}/smoke-junit.xml\n{junit[-3000:]}"
        record["aot"] = warm_checks.check_aot_record(manifest)
        RECIPE_CHECKS.extend(f"{recipe} aot: {line}" for line in record["aot"])
        engine_name = manifest["engine"]["name"]
        if engine_name == "sglang":
            loaded = load_recipe(recipe, REPO_ROOT).with_variant(variant)
            warm_checks.cache_checks_fail_where_they_must(engine, tag, loaded, tmp_path_factory)
            record.update(
                warm_checks.warm_end_to_end(
                    engine, tag, manifest["bases"]["runtime"]["resolved"], tmp_path_factory, tags
                )
            )
            RECIPE_CHECKS.append(
                "bad-aot (sglang): build refused: "
                + warm_checks.unknown_builder_stops_the_build(engine, recipe, variant, cache, tmp_path_factory, tags)[
                    :200
                ]
            )
            (bench / f"{recipe}.json").write_text(json.dumps(record, indent=2) + "\n")
        parse_every_recipe_of_the_engine(engine, tag, engine_name)
        bad_profiles_are_refused(engine, tag, recipe, variant, engine_name, cache, tmp_path_factory, tags)
        if recipe in SECOND:
            other = f"servebuild-test/{recipe}:{SECOND[recipe]}-amd64"
            tags.append(other)
            other_result, other_seconds = build_fixture(
                REPO_ROOT, engine, "linux/amd64", other, cache, recipe=recipe, variant=SECOND[recipe]
            )
            unique = bisect.unique_bytes({t: bisect.layer_sizes(engine, t) for t in (tag, other)})
            record.update(second_variant=SECOND[recipe], second_build_s=round(other_seconds, 1), unique_bytes=unique)
            (bench / f"{recipe}.json").write_text(json.dumps(record, indent=2) + "\n")
            print(f"second variant: {json.dumps(record)}")
            for t, n in unique.items():
                assert n is not None and n < 0.01 * record["size_bytes"], (t, n)
            # both variants carry the verify-pad fix (c_plan.cuh, a kernel source) and nothing else under the kernel
            # inputs: one aot stage on the release engine with that source, built by the first and CACHED here; the
            # loader fix touches nothing the parser reads, so its profile-check is the release's (built here for the
            # first time: the first variant's adaptive prefill changes a module the parser reads)
            shared_stages_are_cached(
                other_result.log_path, {"aot": False, "profile-check": True}, judged=(), cached=("aot",)
            )
            record.update(variant_stages(engine, recipe, tag, cache, tmp_path_factory, tags))
            (bench / f"{recipe}.json").write_text(json.dumps(record, indent=2) + "\n")
    finally:
        drop_now(tags)  # engine images are many GB: they and their layer records go now


FIXTURE_PATCHES = REPO_ROOT / "tests" / "fixtures" / "patches"
STAGE_NOTE = re.compile(
    r"^servebuild: (aot|profile-check): (shared with the release engine|built on this variant's engine|built on "
    r"the release engine with the files of this variant)",
    re.M,
)


def shared_stages_are_cached(log_path, want: dict[str, bool], judged=("aot", "profile-check"), cached=()) -> None:
    """The build log says, per build-time stage, whether the variant shares its release's (`want`); a shared
    stage in `judged` has all its steps CACHED there (the release built them earlier in this run), and so
    has a stage of its own in `cached` (an earlier variant of this run built the same one: an aot-base of
    the same kernel-source bytes). Another stage of its own may be cached too (a second run of this test):
    what it built is judged by its output. A recipe of another name checks its profiles again whatever the
    engine (the record names the recipe)."""
    log = log_path.read_text()
    said = {m.group(1): m.group(2).startswith("shared") for m in STAGE_NOTE.finditer(log)}
    assert said == want, (said, want)
    for stage in [s for s in judged if want[s]] + list(cached):
        steps = re.findall(rf"^#(\d+) \[{stage} \d+/\d+\]", log, re.M)
        assert steps, f"no {stage} step in {log_path}"
        cached = [n for n in steps if re.search(rf"^#{n} CACHED$", log, re.M)]
        assert cached == steps, (stage, steps, cached)


def _fixture_project(dest):
    """A scratch copy of the project's recipes, patches, constraints and recordings, with the fixture
    patches beside the real ones (a local patch lives in patches/)."""
    for part in ("recipes", "patches", "constraints", "recordings"):
        shutil.copytree(REPO_ROOT / part, dest / part)
    for patch in FIXTURE_PATCHES.glob("*.patch"):
        shutil.copyfile(patch, dest / "patches" / patch.name)
    return dest


def _fixture_recipe(root, base: str, name: str, variant: str, patch: str, extra_profile: dict | None = None):
    """A recipe extending `base` with one fixture patch as a variant of its own (after the verify-pad fix,
    without which SGLang 0.5.16's DSpark launchers are refused)."""
    loaded = load_recipe(base, root)
    optional = [
        e.model_dump(exclude_none=True, exclude_defaults=True) for e in loaded.recipe.engine.source.optional_patches
    ]
    optional.append({"id": variant, "file": f"patches/{patch}", "sha256": sha256_file(root / "patches" / patch)})
    data = {
        "name": name,
        "extends": base,
        "engine": {"source": {"optional_patches": optional}},
        "variants": {
            variant: {"description": f"test fixture: {patch}", "patches": ["sglang-dsv4-verify-pad", variant]}
        },
    }
    if extra_profile:
        data["launch"] = {"profiles": extra_profile}
    (root / "recipes" / f"{name}.yaml").write_text(json.dumps(data, indent=1) + "\n")
    return name


def _seed_files(engine, tag: str) -> dict[str, dict[str, str]]:
    """kernel (builder and args) -> {file under its cache keys: sha256} of the image's ahead-of-time seed:
    what was compiled (ninja's state files record the step's settled time, which moves with the stage's base)."""
    out = subprocess.run(
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/bin/sh",
            tag,
            "-c",
            "cat /opt/servebuild/seed/aot.json; echo '#files'; cd /opt/servebuild/seed/cache && "
            "find . -type f -exec sha256sum {} +",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    record, files = out.split("#files\n")
    sums = {
        line[66:].removeprefix("./"): line[:64]
        for line in files.splitlines()
        if not line.endswith(("/.ninja_log", "/.ninja_deps"))
    }
    kernels = {}
    for k in json.loads(record)["kernels"]:
        keys = tuple(k["keys"])
        kernels[f"{k['builder']}{tuple(k['args'])}"] = {p: h for p, h in sums.items() if p.startswith(keys)}
    return kernels


def variant_stages(engine, recipe, release_tag, cache, tmp_path_factory, tags) -> dict:
    """Two fixture variants of the SGLang image (issue 30). One edits a kernel source: the kernel that
    reads it is compiled on its own engine (the log names the file), the others are copied from the
    release's build; the edited kernel's files differ from the release's, every other kernel's are the
    same bytes. One adds an argument to SGLang's parser with a
    profile that uses it: parsed by the patched engine (the release's parser refuses the flag), its kernels
    still the release's."""
    root = _fixture_project(tmp_path_factory.mktemp("fixture-variants") / "project")
    kernel_tag, flag_tag = "servebuild-test/fixture-kernel:amd64", "servebuild-test/fixture-flag:amd64"
    tags += [kernel_tag, flag_tag]
    name = _fixture_recipe(root, recipe, "fixture-kernel", "kernel-edit", "sglang-kernel-edit.patch")
    # (each fixture variant carries the verify-pad fix too: SGLang 0.5.16's DSpark profiles are refused without it)
    built, kernel_s = build_fixture(root, engine, "linux/amd64", kernel_tag, cache, recipe=name, variant="kernel-edit")
    # the release's profile-check, built by the second variant: its two RUN steps were seen CACHED here, its
    # settle step not (why is open), so the note is judged, not the steps
    shared_stages_are_cached(built.log_path, {"aot": False, "profile-check": True}, judged=())
    log = built.log_path.read_text()
    assert (
        "aot: built on the release engine with the files of this variant its kernels read "
        "(python/sglang/jit_kernel/csrc/add_constant.cuh is a kernel input of sglang); only the kernels that read "
        "sglang/jit_kernel/csrc/add_constant.cuh, sglang/jit_kernel/csrc/deepseek_v4/c_plan.cuh are compiled"
    ) in log
    # exactly the kernels that read an edited source compiled (by the deps log nvcc's depfile filled); the
    # others copied from the release's aot stage, which this build found cached
    compiled = re.findall(
        r"aot: (\S+?)\(.*\) for .* \(it reads sglang/jit_kernel/csrc/(?:add_constant|deepseek_v4/c_plan)\.cuh, "
        r"which the patches change\)$",
        log,
        re.M,
    )
    copied = re.findall(r"aot: (\S+?)\(.*\): the release's build, copied", log, re.M)
    # the recipe compiles add_constant for two args (5, 7): both read the header; the compress plan reads
    # c_plan.cuh; the three DSV4 top-k modules and the Triton kernel are copied
    assert set(compiled) == {
        "sglang.jit_kernel.add_constant:_jit_add_constant_module",
        "sglang.jit_kernel.dsv4.compress:_jit_compress_plan_module",
    }, (compiled, copied)
    assert not any("add_constant" in c for c in copied) and sum("dsv4.topk" in c for c in copied) == 3, copied
    # against the first variant's image (the verify-pad fix alone among kernel sources)
    release, edited = _seed_files(engine, release_tag), _seed_files(engine, kernel_tag)
    assert sorted(release) == sorted(edited)
    changed = sorted(k for k in release if release[k] != edited[k])
    assert any("add_constant" in k for k in changed) and all(
        "add_constant" in k or "compress_plan" in k for k in changed
    ), changed
    assert all(release[k] == edited[k] for k in release if "add_constant" not in k and "compress_plan" not in k)
    default = load_recipe(recipe, REPO_ROOT).recipe.launch
    profile = default.profiles[default.default_profile()]
    flagged = {
        "fixture-flag": {
            "module": profile.module,
            "dspark_block_size": profile.dspark_block_size,
            "env": profile.env,
            "args": list(profile.args) + ["--servebuild-fixture-flag", "3"],
        }
    }
    name = _fixture_recipe(root, recipe, "fixture-flag", "adds-a-flag", "sglang-adds-a-flag.patch", flagged)
    built, flag_s = build_fixture(root, engine, "linux/amd64", flag_tag, cache, recipe=name, variant="adds-a-flag")
    # its kernel sources are the first variant's (the verify-pad fix): that aot stage, CACHED
    shared_stages_are_cached(built.log_path, {"aot": False, "profile-check": False}, cached=("aot",))
    checked = json.loads(
        subprocess.run(
            [
                "/usr/bin/docker",
                "run",
                "--rm",
                "--network",
                "none",
                "--entrypoint",
                "/bin/cat",
                flag_tag,
                "/opt/servebuild/profiles-checked.json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    # parsed on the release engine with the patch's parser file (check-base): the record names it
    assert "fixture-flag" in checked["profiles"] and "sglang/srt/server_args.py" in checked["variant_files"], checked
    with pytest.raises(ServebuildError) as err:  # the release's parser does not know the flag
        engine_parser.check_in_image(engine, release_tag, load_recipe(name, root))
    assert "unrecognized arguments: --servebuild-fixture-flag 3" in str(err.value), str(err.value)
    RECIPE_CHECKS.append(
        f"fixture variants: kernel edit recompiled {', '.join(changed)} in {kernel_s:.0f} s; "
        f"a flag-adding PR parsed by its own engine in {flag_s:.0f} s"
    )
    return {"kernel_edit_build_s": round(kernel_s, 1), "flag_pr_build_s": round(flag_s, 1)}


def parse_every_recipe_of_the_engine(engine, tag, engine_name):
    """Every committed recipe of this engine (the derived ones share this image's engine and
    version) has each launch profile parsed by the engine's own parser inside the built image."""
    for path in sorted((REPO_ROOT / "recipes").glob("*.yaml")):
        if path.stem.endswith((".lock", ".ids")):
            continue
        loaded = load_recipe(path.stem, REPO_ROOT)
        if not loaded.recipe.engine or loaded.recipe.engine.name != engine_name:
            continue
        record = engine_parser.check_in_image(engine, tag, loaded)
        assert sorted(record["profiles"]) == sorted(loaded.recipe.launch.profiles), record
        assert record["version"].startswith(loaded.recipe.engine.version), record
        RECIPE_CHECKS.append(
            f"{path.stem}: profiles {', '.join(sorted(record['profiles']))} parsed by "
            f"{record['engine']} {record['version']} in {tag}"
        )


def _bad_recipe(dest, base: str, engine_name: str, which: str):
    """A recipe extending `base` (copied with its chain) whose one profile the engine must refuse:
    the default profile's argv with one flag set to a bad value (or an unknown flag added)."""
    loaded = load_recipe(base, REPO_ROOT)
    copy_recipe_chain(loaded.chain, dest)
    profile = loaded.recipe.launch.profiles[loaded.recipe.launch.default_profile()]
    flag, value, _ = BAD_PROFILES[engine_name][which]
    args, given = [], list(profile.args) + list(profile.extra_args)
    while given:
        arg = given.pop(0)
        if arg == flag:
            given.pop(0)  # the value it had
            continue
        args.append(arg)
    args += [flag] + ([value] if value is not None else [])
    path = dest / f"bad-{which}.yaml"
    path.write_text(
        f"name: bad-{which}\nextends: {base}\nlaunch:\n  default: bad\n  profiles:\n"
        f"    bad: {{module: {profile.module}, dspark_block_size: {profile.dspark_block_size},\n"
        f"          env: {json.dumps(profile.env)}, args: {json.dumps(args)}}}\n"
    )
    return path


def bad_profiles_are_refused(engine, tag, recipe, variant, engine_name, cache, tmp_path_factory, tags):
    """A recipe with a bad choice fails its build at the profile-check stage in one line with the
    engine's own message, and nothing is tagged; an unknown flag and a wrong type are refused by the
    same check run in the built image (one build each would re-run only that stage)."""
    dest = tmp_path_factory.mktemp("bad-profiles")
    bad_tag = f"servebuild-test/bad-profile:{engine_name}"
    path = _bad_recipe(dest, recipe, engine_name, "value")
    start = time.monotonic()
    with pytest.raises(ServebuildError) as err:
        tags.append(bad_tag)
        build_fixture(REPO_ROOT, engine, "linux/amd64", bad_tag, cache, recipe=str(path), variant=variant)
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == 2, message
    assert f"recipe bad-value, launch profile bad: {engine_name} " in message, message
    assert f"rejects the launcher's arguments: {BAD_PROFILES[engine_name]['value'][2]}" in message, message
    assert engine.image_id(bad_tag) is None
    RECIPE_CHECKS.append(
        f"bad-value ({engine_name}): build refused in {time.monotonic() - start:.0f} s: {message[:160]}"
    )
    for which in ("flag", "type"):
        loaded = load_recipe(str(_bad_recipe(dest, recipe, engine_name, which)), REPO_ROOT)
        with pytest.raises(ServebuildError) as err:
            engine_parser.check_in_image(engine, tag, loaded)
        assert "\n" not in str(err.value) and BAD_PROFILES[engine_name][which][2] in str(err.value), str(err.value)
        RECIPE_CHECKS.append(f"bad-{which} ({engine_name}): refused in {tag}: {str(err.value)[-110:]}")
