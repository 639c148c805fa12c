"""Which build-time stages a variant shares with its release engine (render/reuse.py, issue 30): decided
by the files its patch stack really changes (the committed patches' own file lists here), never by a
variant's name; a stage that reads a changed file runs on the variant's engine, and the Dockerfile says so."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from servebuild.recipe.load import load_recipe
from servebuild.render.context import aot_owner, render_dockerfile, write_context
from servebuild.render.reuse import KERNELS, PARSER, RELEASE, VARIANT, Overlay, stage_bases
from servebuild.sources.stack import numstat_paths
from support import REPO_ROOT

SGLANG = "sglang-native-fp8-bookworm"
BASES = {"build": "b", "runtime": "r"}


def engine(name=SGLANG):
    return load_recipe(name, REPO_ROOT).recipe.engine


def patch_files(name: str) -> list[str]:
    """The files a committed patch changes, as the sources station lists them (git apply --numstat)."""
    out = subprocess.run(
        ["git", "apply", "--numstat", "-z", str(REPO_ROOT / "patches" / name)],
        capture_output=True,
        check=True,
        cwd=REPO_ROOT,
    ).stdout
    return numstat_paths(out)


def bases(files, name=SGLANG):
    return {stage: b.base for stage, b in stage_bases(engine(name), files, "linux/amd64").items()}


def test_the_release_and_a_scheduler_only_stack_share_both_stages():
    assert bases([]) == {"aot": RELEASE, "profile-check": RELEASE}
    assert bases(["python/sglang/srt/managers/scheduler.py"]) == {"aot": RELEASE, "profile-check": RELEASE}


def test_the_committed_loader_fix_shares_both_stages():
    files = patch_files("sglang-dspark-shared-expert-remap.patch")
    assert files == ["python/sglang/srt/models/deepseek_v4_dspark.py"]
    assert bases(files) == {"aot": RELEASE, "profile-check": RELEASE}


def test_the_adaptive_prefill_patch_shares_the_kernels_but_its_parser_files_are_parsed_again():
    """It edits environ.py, which SGLang's parser imports (its defaults read it): parsed again, on the release
    engine with that file and the file the patch adds (environ.py may import it); no kernel input."""
    files = patch_files("sglang-adaptive-prefill.patch")
    assert "python/sglang/srt/environ.py" in files
    added = "python/sglang/srt/managers/adaptive_prefill.py"
    decided = stage_bases(engine(), Overlay(tuple(files), (added,)), "linux/amd64")
    assert decided["aot"].base == RELEASE
    assert decided["profile-check"].base == PARSER
    assert decided["profile-check"].changed == ("sglang/srt/environ.py", "sglang/srt/managers/adaptive_prefill.py")
    assert "python/sglang/srt/environ.py" in decided["profile-check"].because
    # scheduler.py, which the patch also changes, is not read by the parser: not carried
    assert decided == stage_bases(engine(), Overlay((*files, "python/sglang/srt/models/x.py"), (added,)), "linux/amd64")


def test_a_parser_file_the_stack_deletes_is_parsed_on_the_variants_engine():
    """The release engine would still have it: the check runs on the variant's own engine, and says why."""
    gone = "python/sglang/srt/configs/model_config.py"
    decided = stage_bases(engine(), Overlay((gone, "python/sglang/srt/environ.py"), (), (gone,)), "linux/amd64")
    assert decided["profile-check"].base == VARIANT
    assert f"deletes {gone}" in decided["profile-check"].because


@pytest.mark.parametrize(
    "path",
    [
        "python/sglang/jit_kernel/add_constant.py",
        "python/sglang/jit_kernel/include/sgl_kernel/utils.cuh",
        "python/sglang/srt/layers/attention/kernel.cuh",
    ],
)
def test_a_kernel_source_or_any_native_file_gets_its_own_kernels(path):
    decided = stage_bases(engine(), ["python/sglang/srt/managers/scheduler.py", path], "linux/amd64")
    # its own kernels: on the release engine with the source (a header alone), else on the variant's engine
    own = KERNELS if path.endswith("utils.cuh") else VARIANT
    assert decided["aot"].base == own and path in decided["aot"].because


@pytest.mark.parametrize(
    "path",
    ["python/sglang/srt/server_args.py", "python/sglang/launch_server.py", "python/sglang/srt/configs/model_config.py"],
)
def test_a_file_the_parser_reads_gets_its_own_profile_check(path):
    decided = stage_bases(engine(), [path], "linux/amd64")
    assert decided["profile-check"].base == PARSER and path in decided["profile-check"].because
    assert decided["profile-check"].changed == (path.removeprefix("python/"),)
    assert decided["aot"].base == RELEASE


def test_a_listed_file_covers_itself_not_every_name_it_begins():
    """`sglang/srt/server_args.py` is one file of the parser; a stub beside it is not imported."""
    assert bases(["python/sglang/srt/server_args.pyi"]) == {"aot": RELEASE, "profile-check": RELEASE}
    assert bases(["python/sglang/srt/server_args.py"])["profile-check"] == PARSER


def test_files_the_overlay_does_not_install_decide_nothing():
    assert bases(["test/srt/test_server_args.py", "docs/kernels.cu"]) == {"aot": RELEASE, "profile-check": RELEASE}


def test_unknown_files_and_a_mode_without_a_release_engine_share_nothing():
    assert bases(None) == {"aot": VARIANT, "profile-check": VARIANT}
    # vllm-precompiled installs the patched tree in its engine stage: every variant has its own engine
    assert bases([], "vllm-dspark-bookworm") == {"aot": VARIANT, "profile-check": VARIANT}


def test_a_kind_that_declares_nothing_shares_nothing():
    e = engine()
    kind = type("Undeclared", (type(e.kind),), {"kernel_inputs": ("",), "parser_inputs": ("",)})()
    decided = stage_bases(_with_kind(e, kind), ["python/sglang/srt/managers/scheduler.py"], "linux/amd64")
    assert {s: b.base for s, b in decided.items()} == {"aot": VARIANT, "profile-check": PARSER}
    assert decided["profile-check"].changed == ("sglang/srt/managers/scheduler.py",)  # every changed file


def _with_kind(e, kind):
    class Wrapped:
        mode = e.mode
        overlay_from = e.overlay_from

    Wrapped.kind = kind
    return Wrapped()


def _stage_from(text: str, stage: str) -> str:
    return re.search(rf"^FROM (\S+) AS {stage}$", text, re.M).group(1)


def _render(overlay_files) -> str:
    """The SGLang recipe's Dockerfile for linux/amd64 with these patched files (render/reuse.py decides)."""
    loaded = load_recipe(SGLANG, REPO_ROOT)
    return render_dockerfile(loaded.recipe, loaded.sha256, "linux/amd64", BASES, REPO_ROOT, overlay_files=overlay_files)


def test_the_dockerfile_puts_each_stage_where_the_rule_says_and_names_why():
    shared = _render([])
    assert _stage_from(shared, "aot") == _stage_from(shared, "profile-check") == "engine-release"
    assert "FROM runtime-release AS engine-release" in shared and "FROM runtime-release AS runtime-base" in shared
    own = _render(["python/sglang/jit_kernel/add_constant.py"])
    assert _stage_from(own, "aot") == "runtime-base" and _stage_from(own, "profile-check") == "engine-release"
    assert "# aot: built on this variant's engine (python/sglang/jit_kernel/add_constant.py is a kernel input" in own
    # everything up to the build-time stages is the same text: the runtime image's layers do not move
    assert shared.split("# ---- profile-check")[0] == own.split("# ---- profile-check")[0]


def test_a_recipe_extending_another_without_touching_aot_shares_its_aot_spec(tmp_path):
    """The aot spec the build context carries names the recipe whose file declares the kernels, not the one
    built: a derived recipe (another profile, a bad profile in a test) gets the same spec, hence the same
    aot stage; one that changes aot names itself."""
    parent = load_recipe(SGLANG, REPO_ROOT)
    for rf in parent.chain:
        (tmp_path / rf.path.name).write_text(rf.path.read_text())
    (tmp_path / "child.yaml").write_text(f"name: child\nextends: {SGLANG}\n")
    (tmp_path / "own.yaml").write_text(f"name: own\nextends: {SGLANG}\naot:\n  max_bytes: 123456789\n")
    (tmp_path / "source.tar").write_bytes(b"")

    def spec(loaded, name):
        context = write_context(loaded, "linux/amd64", BASES, tmp_path / name, {}, tmp_path / "source.tar")
        return json.loads((context / "aot" / "spec.json").read_text())

    child = spec(load_recipe(str(tmp_path / "child.yaml"), REPO_ROOT), "child-ctx")
    assert child == spec(parent, "parent-ctx")
    assert child["recipe"] == aot_owner(parent) != "child"
    assert spec(load_recipe(str(tmp_path / "own.yaml"), REPO_ROOT), "own-ctx")["recipe"] == "own"


def test_kernel_sources_alone_compile_only_the_kernels_that_read_them():
    """A header or .cu under the kernel inputs: the variant's aot stage is told which (site paths) and
    compiles only the kernels whose release build read one; Python there, or a native file elsewhere,
    may change any builder: every kernel again."""
    header = "python/sglang/jit_kernel/include/sgl_kernel/add_constant.cuh"
    decided = stage_bases(engine(), ["python/sglang/srt/managers/scheduler.py", header], "linux/amd64")["aot"]
    # kernel sources alone: the release engine with those sources (aot-base), whatever Python elsewhere changes
    assert decided.base == KERNELS and decided.changed == ("sglang/jit_kernel/include/sgl_kernel/add_constant.cuh",)
    assert "only the kernels that read sglang/jit_kernel/include/sgl_kernel/add_constant.cuh" in decided.describe("aot")
    assert decided.describe("aot").startswith("aot: built on the release engine with the files of this variant")
    for other in ("python/sglang/jit_kernel/add_constant.py", "python/sglang/srt/layers/attention/kernel.cuh"):
        mixed = stage_bases(engine(), [header, other], "linux/amd64")["aot"]
        assert mixed.base == VARIANT and mixed.changed == (), other
    # a deleted kernel source: the release engine would still have it, so the variant's own engine
    gone = stage_bases(engine(), Overlay((header,), deleted=(header,)), "linux/amd64")["aot"]
    assert gone.base == VARIANT and "the stack deletes" in gone.because


def test_the_verify_pad_fix_compiles_only_the_compress_plan_on_a_stage_shared_by_every_row():
    """sglang-dsv4-verify-pad changes deepseek_v4/c_plan.cuh (a kernel source) and pool_configurator.py (no
    kernel input): every variant carrying it, whatever else it patches, gets one aot stage (the same text,
    the same kernel-overlay bytes), which compiles the compress plan only."""
    pad = patch_files("sglang-dsv4-verify-pad.patch")
    decided = {}
    for other in ("sglang-dspark-shared-expert-remap.patch", "sglang-adaptive-prefill.patch"):
        decided[other] = stage_bases(engine(), pad + patch_files(other), "linux/amd64")["aot"]
        assert decided[other].base == KERNELS
        assert decided[other].changed == ("sglang/jit_kernel/csrc/deepseek_v4/c_plan.cuh",)
    a, b = (_stage_body(_render(pad + patch_files(o)), "aot") for o in decided)
    assert a == b and "--changed sglang/jit_kernel/csrc/deepseek_v4/c_plan.cuh" in a


def _stage_body(text: str, stage: str) -> str:
    """The lines of one stage, from its FROM to the next (the settle step has made each COPY a RUN)."""
    body = re.search(rf"^FROM \S+ AS {re.escape(stage)}\n((?:(?!FROM ).*\n)*)", text, re.M).group(1)
    return "".join(line for line in body.splitlines(keepends=True) if not line.startswith("#"))


def test_the_dockerfile_of_a_kernel_source_edit_reuses_the_release_build():
    text = _render(["python/sglang/jit_kernel/include/sgl_kernel/add_constant.cuh"])
    assert _stage_from(text, "aot-release") == "engine-release" and _stage_from(text, "aot") == "aot-base"
    assert _stage_from(text, "aot-base") == "engine-release"
    assert "kernel-overlay/" in _stage_body(text, "aot-base")
    # the release's aot stage is the release build's own text (BuildKit finds it cached)
    shared = _render([])
    assert _stage_body(text, "aot-release") == _stage_body(shared, "aot")
    variant = _stage_body(text, "aot")
    assert (
        "--reuse-from /opt/servebuild/release --changed sglang/jit_kernel/include/sgl_kernel/add_constant.cuh"
    ) in variant, variant
    assert "--reuse-from" not in _stage_body(shared, "aot")
    assert "from=aot-release" in variant and "/opt/servebuild/release/aot-files.json" in variant, variant
    # the image takes the variant's seed only
    runtime = _stage_body(text, "runtime")
    assert "aot-release" not in runtime and "from=aot" in runtime, runtime


def _check_stages(text: str) -> str:
    """The check-base and profile-check stages' text (what BuildKit keys those steps on, with the context)."""
    return _stage_body(text, "check-base") + _stage_body(text, "profile-check")


def test_stacks_whose_parser_reads_the_same_files_share_one_profile_check(tmp_path):
    """The adaptive patch alone, and with the loader fix before or after it: the parser reads the same
    patched environ.py, so the three variants get the same check-base and profile-check stages, and the
    same check-overlay/ in their contexts: BuildKit runs the check once. The patched bytes come from
    the prepared source's tarball (src/TREE_PATH)."""
    import tarfile

    loaded = load_recipe(SGLANG, REPO_ROOT)
    env, added, fix = (
        "python/sglang/srt/environ.py",
        "python/sglang/srt/managers/adaptive_prefill.py",
        "python/sglang/srt/models/deepseek_v4_dspark.py",
    )
    sched = "python/sglang/srt/managers/scheduler.py"

    def tarball(name, files):
        path = tmp_path / f"{name}.tar"
        with tarfile.open(path, "w") as tar:
            for tree, data in files.items():
                info = tarfile.TarInfo(f"src/{tree}")
                info.size = len(data)
                tar.addfile(info, __import__("io").BytesIO(data))
        return path

    contexts, texts = {}, {}
    for name, overlay, files in (
        ("adaptive", Overlay((env, added, sched), (added,)), {env: b"E", added: b"A", sched: b"S1"}),
        ("both", Overlay((env, added, fix, sched), (added,)), {env: b"E", added: b"A", sched: b"S1", fix: b"F"}),
        ("both-rev", Overlay((env, added, fix, sched), (added,)), {env: b"E", added: b"A", sched: b"S2", fix: b"F"}),
    ):
        ctx = write_context(loaded, "linux/amd64", BASES, tmp_path / name, {}, tarball(name, files), None, overlay)
        contexts[name] = {
            p.relative_to(ctx / "check-overlay").as_posix(): (p.read_bytes(), p.stat().st_mtime, p.stat().st_mode)
            for p in (ctx / "check-overlay").rglob("*")
            if p.is_file()
        }
        texts[name] = _check_stages((ctx / "Dockerfile").read_text())
    assert contexts["adaptive"] == contexts["both"] == contexts["both-rev"]
    assert {k: v[0] for k, v in contexts["adaptive"].items()} == {
        "sglang/srt/environ.py": b"E",
        "sglang/srt/managers/adaptive_prefill.py": b"A",
    }
    assert texts["adaptive"] == texts["both"] == texts["both-rev"]
    assert "--mount=type=bind,source=check-overlay" in texts["adaptive"] and "/opt/engine/site/" in texts["adaptive"]
    text = (tmp_path / "adaptive" / "Dockerfile").read_text()
    assert _stage_from(text, "check-base") == "engine-release" and _stage_from(text, "profile-check") == "check-base"
    # a parser file the tarball lacks (a sources station that lied): one error, no context left to trust
    from servebuild.errors import IntegrityError

    with pytest.raises(IntegrityError, match="lacks src/python/sglang/srt/environ.py"):
        write_context(
            loaded, "linux/amd64", BASES, tmp_path / "bad", {}, tarball("bad", {sched: b"S"}), None, Overlay((env,))
        )


def test_the_release_seed_sits_below_the_overlay_and_the_per_build_files_are_two_last_layers():
    """A variant whose kernels are the release's gets them in runtime-base, under its overlay, so its own
    steps are the overlay and two last layers: the launchers and the manifest, which do not wait for the
    profile check, then the check's record alone; a variant with its own kernels gets them above its
    overlay, where they are newer than what they read."""
    shared = _render([])
    base, runtime = _stage_body(shared, "runtime-base"), _stage_body(shared, "runtime")
    assert "from=aot,source=/opt/servebuild/seed" in base and base.index("from=aot") < base.index("overlay_package.py")
    assert "from=aot" not in runtime and runtime.count("\nRUN ") + runtime.startswith("RUN ") == 2, runtime
    launchers, record = re.split(r"^RUN ", runtime, flags=re.M)[1:]
    assert "source=launchers" in launchers and "source=manifest.json" in launchers and "profile-check" not in launchers
    assert "from=profile-check" in record and "launchers" not in record and "manifest" not in record
    own = _render(["python/sglang/jit_kernel/add_constant.py"])
    assert "from=aot" not in _stage_body(own, "runtime-base")
    assert _stage_body(own, "runtime").index("from=aot") < _stage_body(own, "runtime").index("source=manifest.json")
