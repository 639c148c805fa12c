"""Pinned, verified, hermetic sources against real git upstreams made by the tests.

GitHub is unreachable here: upstreams are local bare repositories with GitHub's layout
(squash-merge commits on main, `refs/pull/N/head`), served over file:// and a `git daemon`
on 127.0.0.1. A lock names what it pins: `--locked` refuses a named file changed by one bit and a
lock file of the wrong shape; a commit is exactly 40 lowercase hex.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from integration.conftest import build_fixture
from servebuild.lock import lockfile
from servebuild.lock import compute
from servebuild.errors import IntegrityError, RecipeError, Refused, ServebuildError
from servebuild.recipe.schema import EngineSource
from servebuild.recipe.load import load_recipe
from servebuild.sources.stack import SourceCache
from support import REPO_ROOT, diff_sha, fixture_recipe, free_port, make_project, make_upstream


@pytest.fixture()
def daemon_upstream(tmp_path):
    """The upstream served by a real `git daemon` on 127.0.0.1."""
    up = make_upstream(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={tmp_path}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"git://127.0.0.1:{port}/{up.bare.name}"
    for _ in range(50):
        if subprocess.run(["git", "ls-remote", url], capture_output=True).returncode == 0:
            break
        time.sleep(0.1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("git daemon did not come up")
    yield up, url, proc
    # `git daemon` runs git-daemon as a child: end the whole group, or the child outlives the test
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def source(up, url=None, patches=None) -> EngineSource:
    data = fixture_recipe(up)["engine"]["source"]
    if url:
        data["url"] = url
    if patches is not None:
        data["patches"] = patches
    return EngineSource.model_validate(data)


def test_fetch_applies_three_entry_stack_over_git_daemon(daemon_upstream, tmp_path):
    up, url, _ = daemon_upstream
    root = make_project(tmp_path, up)
    start = time.monotonic()
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    cold = cache.prepare(source(up, url), root, tmp_path / "w1")
    cold_s = time.monotonic() - start
    start = time.monotonic()
    warm = cache.prepare(source(up, url), root, tmp_path / "w2")
    warm_s = time.monotonic() - start
    print(f"\nfetch over git daemon: cold {cold_s:.2f}s, warm {warm_s:.2f}s")
    assert [p.id for p in cold.patches] == ["pr-1", "pr-2", "local-version-banner"]
    assert cold.tarball_sha256 == warm.tarball_sha256
    assert warm.tarball == cold.tarball and not (tmp_path / "w2" / "tree").exists()  # remembered
    with tarfile.open(warm.tarball) as tar:
        read = lambda name: tar.extractfile(f"src/{name}").read().decode()  # noqa: E731
        assert read("toyserve/greeting.py") == 'GREETING = "hello, hopper"\nFAREWELL = "bye"\n'
        assert "patched" in read("toyserve/__main__.py")


def test_a_remembered_preparation_is_reused_only_for_the_same_inputs(upstream, tmp_path):
    """Same origin and diffs: the tarball is reused (no tree laid out). One byte of a local patch, a
    damaged tarball or another mode rule: prepared afresh."""
    root = make_project(tmp_path, upstream)
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    first = cache.prepare(source(upstream), root, tmp_path / "w1")
    again = cache.prepare(source(upstream), root, tmp_path / "w2")
    assert not (tmp_path / "w2" / "tree").exists()
    assert again.as_dict() == first.as_dict() and again.tarball == first.tarball
    assert cache.prepare(source(upstream), root, tmp_path / "w3", rule_key="other").tarball == first.tarball
    assert (tmp_path / "w3" / "tree").exists()  # another rule: laid out and checked again
    patch = root / "patches" / "toy-version-banner.patch"
    patch.write_text(patch.read_text().replace("servebuild fixture patch", "servebuild fixture Patch"))
    data = fixture_recipe(upstream)["engine"]["source"]
    data["patches"][2]["sha256"] = hashlib.sha256(patch.read_bytes()).hexdigest()
    edited = cache.prepare(EngineSource.model_validate(data), root, tmp_path / "w4")
    assert (tmp_path / "w4" / "tree").exists()
    assert edited.patches[2].sha256 != first.patches[2].sha256
    patch.write_text(patch.read_text().replace("servebuild fixture Patch", "servebuild fixture patch"))
    first.tarball.write_bytes(first.tarball.read_bytes()[:-1] + b"x")  # a damaged cache entry
    repaired = cache.prepare(source(upstream), root, tmp_path / "w5")
    assert repaired.tarball_sha256 == first.tarball_sha256
    assert hashlib.sha256(repaired.tarball.read_bytes()).hexdigest() == first.tarball_sha256
    assert (tmp_path / "w5" / "tree").exists()


def test_tarball_is_bit_identical_across_caches_days_and_umasks(upstream, project, tmp_path):
    """Two fetches into two caches, with a different clock, time zone and umask: same bytes."""
    script = (
        "import sys; from pathlib import Path; sys.path[:0] = [sys.argv[1]];"
        "from servebuild.recipe.schema import EngineSource; from servebuild.sources.stack import SourceCache;"
        "import json; src = EngineSource.model_validate(json.loads(sys.argv[2]));"
        "p = SourceCache(Path(sys.argv[3]), recipe='toy').prepare(src, Path(sys.argv[4]), Path(sys.argv[5]));"
        "print(p.tarball_sha256)"
    )
    data = json.dumps(fixture_recipe(upstream)["engine"]["source"])
    digests = []
    for i, (tz, umask) in enumerate((("UTC", 0o022), ("Asia/Tokyo", 0o077))):
        env = {**os.environ, "TZ": tz}
        out = subprocess.run(
            [
                "sh",
                "-c",
                f'umask {umask:o}; exec "$@"',
                "sh",
                sys.executable,
                "-c",
                script,
                str(REPO_ROOT),
                data,
                str(tmp_path / f"cache{i}"),
                str(project),
                str(tmp_path / f"w{i}"),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.append(out.stdout.strip())
        time.sleep(1.1)  # a different wall-clock second for every file the checkout writes
    assert digests[0] == digests[1] and len(digests[0]) == 64


def test_lock_build_locked_then_offline_with_upstream_gone(engine, base_images, tmp_path):
    """lock resolves a short hint and a bare PR number; build --locked; upstream deleted; --offline rebuild."""
    up = make_upstream(tmp_path)
    recipe = fixture_recipe(up, platforms=["linux/amd64"])
    patches = recipe["engine"]["source"]["patches"]
    patches[0] = {"id": "pr-1", "pr": 1, "commit_hint": up.pr1_merge[:10]}
    patches[1] = {"id": "pr-2", "pr": 2, "requires": ["pr-1"]}  # found as refs/pull/2/head
    root = make_project(tmp_path, up, recipe)
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    loaded = load_recipe("toy", root)

    with pytest.raises(Refused, match="no lock file; run `invoke lock --recipe toy`"):
        lockfile.read_lock(loaded)
    data = compute.compute_lock(loaded, cache, {}, tmp_path / "lockwork")
    lockfile.write_lock(lockfile.lock_path(loaded), data)
    assert data.unresolved == []
    by_id = {p.id: p for p in data.patches}
    assert by_id["pr-1"].commit == up.pr1_merge
    assert by_id["pr-2"].commit == up.pr2_head and by_id["pr-2"].base == up.pr1_merge
    assert by_id["pr-2"].sha256 == diff_sha(up, up.pr1_merge, up.pr2_head)
    assert by_id["pr-1"].python_only is True

    tag = "servebuild-test/toy-locked:amd64"
    first, _ = build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache", locked=True)
    first_manifest = json.loads(first.manifest_path.read_text())
    shutil.rmtree(up.bare)  # the upstream is gone
    second, _ = build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache", locked=True, offline=True)
    manifest = json.loads(second.manifest_path.read_text())
    assert manifest["engine"]["source"]["patches"][1]["commit"] == up.pr2_head
    assert manifest["recipe"]["sha256"] == loaded.sha256  # the recipe as written, not the locked copy
    # the same inputs went in, and the same image came out (created is a fact of the inputs)
    assert {k: v for k, v in manifest.items() if k != "outputs"} == {
        k: v for k, v in first_manifest.items() if k != "outputs"
    }
    assert second.image_id == first.image_id and manifest["outputs"]["created"] == first_manifest["outputs"]["created"]

    # a recipe change makes the lock stale, named as such, and nothing is tagged
    data_recipe = yaml.safe_load((root / "recipes/toy.yaml").read_text())
    data_recipe["description"] = "changed after lock"
    (root / "recipes/toy.yaml").write_text(yaml.safe_dump(data_recipe))
    with pytest.raises(IntegrityError, match="lock is stale: recipe toy changed"):
        build_fixture(
            root,
            engine,
            "linux/amd64",
            "servebuild-test/toy-stale:amd64",
            tmp_path / "cache",
            locked=True,
            offline=True,
        )
    assert engine.image_id("servebuild-test/toy-stale:amd64") is None


def test_unresolved_lock_is_refused_naming_the_entry(tmp_path):
    loaded = load_recipe("sglang-native-fp8", REPO_ROOT)
    with pytest.raises(ServebuildError) as info:
        lockfile.read_lock(loaded)
    assert "recipes/sglang-native-fp8.lock.yaml" in str(info.value)
    assert "unresolved entries, first: bases.build" in str(info.value)


def test_committed_locks_list_what_is_unknown_here():
    lock = yaml.safe_load((REPO_ROOT / "recipes/vllm-dspark.lock.yaml").read_text())
    entry = next(p for p in lock["patches"] if p["id"] == "vllm-pr-48993")
    assert entry["commit"] is None and entry["commit_hint"] == "f3a920a07640" and entry["sha256"] is None
    assert any("vllm-pr-48993" in u for u in lock["unresolved"])
    sglang = yaml.safe_load((REPO_ROOT / "recipes/sglang-native-fp8.lock.yaml").read_text())
    ids = {u.split(":")[0] for u in sglang["unresolved"]}
    assert "engine.source.patches.sglang-pr-33276" in ids
    # the local backports that stand for #33312 and #34189 need no upstream
    assert not any("sglang-dsv4" in i for i in ids)


# ------------------------------------------------------------------ errors: one line, nothing half-done


def no_leftovers(cache_root: Path) -> None:
    leftovers = [p.name for p in (cache_root / "git").iterdir() if not p.name.endswith(".git")]
    leftovers += [p.name for p in (cache_root / "tarballs").iterdir() if not p.name.endswith(".tar")]
    assert leftovers == [], leftovers


def expect_error(src, root, tmp_path, *fragments, offline=False, mirrors=None):
    cache = SourceCache(tmp_path / "cache", mirrors=mirrors, offline=offline, recipe="recipes/toy.yaml")
    with pytest.raises(ServebuildError) as info:
        cache.prepare(src, root, tmp_path / "work")
    line = str(info.value)
    assert "\n" not in line and line.startswith("recipes/toy.yaml")
    for f in fragments:
        assert f in line, line
    no_leftovers(tmp_path / "cache")
    return line


def test_commit_not_found_upstream(upstream, project, tmp_path):
    src = source(upstream).model_copy(update={"commit": "1" * 40})
    expect_error(src, project, tmp_path, f"commit {'1' * 40} not found in {upstream.url}")


def test_patch_sha256_mismatch(upstream, project, tmp_path):
    patches = fixture_recipe(upstream)["engine"]["source"]["patches"]
    patches[1]["sha256"] = "f" * 64
    expect_error(
        source(upstream, patches=patches),
        project,
        tmp_path,
        "patch sha256 mismatch for pr-2 (PR #2 at",
        "recorded " + "f" * 64,
    )


def test_patch_does_not_apply_names_patch_file_and_hunk(upstream, project, tmp_path):
    """PR 3 was written on top of PR 2; without PR 2 in the stack its hunk cannot apply."""
    patches = [{"id": "pr-3", "pr": 3, "commit": upstream.pr3_head, "base": upstream.pr2_head}]
    line = expect_error(source(upstream, patches=patches), project, tmp_path)
    assert line == (
        f"recipes/toy.yaml: engine.source.patches.pr-3: PR #3 (commit {upstream.pr3_head}) does not apply on "
        f"v1.0.0 (commit {upstream.base}) with no patch before it: toyserve/greeting.py hunk @@ -1,2 +1,2 @@ "
        f"does not apply, nor merge 3-way (it was written on upstream {upstream.pr2_head[:12]}, which has 2 "
        "commits v1.0.0 lacks); write a backport patch of PR #3 for v1.0.0 under patches/ and list it with "
        "`file:` in place of `pr: 3`"
    )
    assert not (tmp_path / "work" / "tree").exists()  # no half-patched tree left behind


def test_requires_not_satisfied_is_a_validation_error(upstream):
    patches = [{"id": "pr-2", "pr": 2, "commit": upstream.pr2_head, "base": upstream.pr1_merge, "requires": ["pr-1"]}]
    with pytest.raises(ValueError, match="requires 'pr-1', which is not in the stack"):
        source(upstream, patches=patches)


def test_unreachable_upstream_names_host_and_way_out(project, upstream, tmp_path):
    url = f"git://127.0.0.1:{free_port()}/toyserve.git"
    line = expect_error(
        source(upstream, url), project, tmp_path, "upstream 127.0.0.1 is unreachable", "--offline", "git_mirrors"
    )
    assert url in line


def test_mirror_config_reaches_an_unreachable_upstream(upstream, project, tmp_path):
    url = "https://github.invalid/toy/toyserve.git"
    cache = SourceCache(tmp_path / "cache", mirrors={url: str(upstream.bare)}, recipe="toy")
    prepared = cache.prepare(source(upstream, url), project, tmp_path / "w")
    assert prepared.url == url and len(prepared.patches) == 3


def test_offline_without_cache_is_refused(upstream, project, tmp_path):
    expect_error(
        source(upstream), project, tmp_path, "is not in the source cache and --offline was given", offline=True
    )


def test_interrupted_fetch_leaves_cache_usable(upstream, project, tmp_path, monkeypatch):
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    real = SourceCache._fetch_into

    def interrupted(self, repo, url, prs=()):
        real(self, repo, url, prs)
        raise KeyboardInterrupt  # as if the user pressed ^C after the objects arrived

    monkeypatch.setattr(SourceCache, "_fetch_into", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.prepare(source(upstream), project, tmp_path / "w")
    no_leftovers(tmp_path / "cache")
    assert not cache.repo_dir(upstream.url).exists()
    monkeypatch.setattr(SourceCache, "_fetch_into", real)
    assert len(cache.prepare(source(upstream), project, tmp_path / "w").patches) == 3


def test_corrupted_cache_entry_is_detected(upstream, project, tmp_path):
    cache = SourceCache(tmp_path / "cache", recipe="toy")
    first = cache.prepare(source(upstream), project, tmp_path / "w")
    repo = cache.repo_dir(upstream.url)
    shutil.rmtree(repo / "objects")
    offline = SourceCache(tmp_path / "cache", offline=True, recipe="recipes/toy.yaml")
    with pytest.raises(IntegrityError, match="is corrupted; run fetch without --offline"):
        offline.prepare(source(upstream), project, tmp_path / "w")
    again = cache.prepare(source(upstream), project, tmp_path / "w")  # refetched
    assert again.tarball_sha256 == first.tarball_sha256


def test_modes_that_reuse_compiled_parts_refuse_native_changes():
    """The rule each mode applies to every path a patch touches (prepare() raises with it)."""
    from types import SimpleNamespace
    from servebuild.modes import get_mode

    engine = SimpleNamespace(overlay_from="python/sglang")
    overlay, precompiled, source = (get_mode(m) for m in ("wheel-overlay", "vllm-precompiled", "pip-source"))
    shipped = {"python/sglang/jit_kernel/dsv4/topk.cuh"}
    assert overlay.patch_problem("python/sglang/srt/x.py", shipped, engine) is None
    assert overlay.patch_problem("python/sglang/jit_kernel/dsv4/topk.cuh", shipped, engine) is None  # JIT source
    assert "native" in overlay.patch_problem("python/sglang/kernel.cu", shipped, engine)
    assert "outside python/sglang" in overlay.patch_problem("sgl-kernel/csrc/x.cu", shipped, engine)
    assert overlay.patch_problem("test/srt/test_x.py", shipped, engine) is None  # dropped, recorded
    for path in ("csrc/kernel.cu", "CMakeLists.txt", "setup.py", "rust/src/lib.rs", "x/y.pyx", "p.proto"):
        assert precompiled.patch_problem(path, None, engine) == "touches native code", path
        assert source.patch_problem(path, None, engine) is None


def test_native_classification_sees_every_path_name(tmp_path):
    """Names git would C-quote (non-ASCII, tabs, quotes) and compiled artifacts are classified by
    what they are: `git apply --numstat -z` gives them unquoted; a binary .so swap is native."""
    from servebuild.patchfiles import is_native
    from servebuild.recipe.schema import PatchEntry

    cache = SourceCache(tmp_path / "cache", recipe="toy")
    diff = (
        "diff --git a/python/k\u00e9rnel.cu b/python/k\u00e9rnel.cu\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/python/k\u00e9rnel.cu\n@@ -0,0 +1 @@\n+__global__ void k() {}\n"
        'diff --git "a/python/te\\tst.py" "b/python/te\\tst.py"\nnew file mode 100644\n--- /dev/null\n'
        '+++ "b/python/te\\tst.py"\n@@ -0,0 +1 @@\n+x = 1\n'
    ).encode()
    files = cache.diff_files(PatchEntry(id="p", file="patches/p.patch", sha256="0" * 64), diff)
    assert files == ["python/k\u00e9rnel.cu", "python/te\tst.py"]
    assert is_native(files[0]) and not is_native(files[1])
    for artifact in ("sglang/_kernels.abi3.so", "vllm/_C.so", "x/lib.so.1.2", "k.cubin", "k.ptx", "k.fatbin"):
        assert is_native(artifact), artifact


def test_plain_build_uses_the_current_lock_and_names_what_is_unpinned(tmp_path):
    """A plain build (no --locked) of a stack whose PR entries have no full commit: one line that
    names the entry and the exact command; once `lock` has run, the same plain build takes the
    lock's commits (no engine needed: both stop or pass at the plan, before the engine is asked)."""
    from servebuild.plan.make import BuildOptions, make_plan

    up = make_upstream(tmp_path)
    recipe = fixture_recipe(up, platforms=["linux/amd64"])
    patches = recipe["engine"]["source"]["patches"]
    patches[0] = {"id": "pr-1", "pr": 1, "commit_hint": up.pr1_merge[:10]}
    patches[1] = {"id": "pr-2", "pr": 2, "requires": ["pr-1"]}
    root = make_project(tmp_path, up, recipe)
    options = BuildOptions(platform="linux/amd64", build_root=tmp_path / "build", echo=False)
    with pytest.raises(ServebuildError) as info:
        make_plan(root, "toy", options)
    line = str(info.value)
    assert "\n" not in line and "None" not in line, line
    assert line.startswith("recipes/toy.yaml"), line
    assert (
        "patch entry pr-1 (PR #1) is not pinned to a full commit: only the short SHA "
        f"{up.pr1_merge[:10]} is known; there is no current lock"
    ) in line, line
    assert (
        f"run `invoke lock --recipe toy` now on a host that reaches {up.url} (this one, if it does), then build" in line
    )

    loaded = load_recipe("toy", root)
    data = compute.compute_lock(loaded, SourceCache(tmp_path / "cache", recipe="toy"), {}, tmp_path / "lockwork")
    lockfile.write_lock(lockfile.lock_path(loaded), data)
    plan = make_plan(root, "toy", options)
    by_id = {e.id: e for e in plan.loaded.recipe.engine.source.patches}
    assert by_id["pr-1"].commit == up.pr1_merge and by_id["pr-2"].commit == up.pr2_head
    assert by_id["pr-2"].base == up.pr1_merge

    # a stale lock is not used: the plain build names the entry again (and says why)
    data_recipe = yaml.safe_load((root / "recipes/toy.yaml").read_text())
    data_recipe["description"] = "changed after lock"
    (root / "recipes/toy.yaml").write_text(yaml.safe_dump(data_recipe))
    with pytest.raises(Refused, match=r"patch entry pr-1 .* there is no current lock"):
        make_plan(root, "toy", options)


def _locked_project(upstream, tmp_path):
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"])
    recipe["wheels"] = ["wheels/extra-1.0-py3-none-any.whl"]
    root = make_project(tmp_path, upstream, recipe)
    (root / "wheels").mkdir()
    (root / "wheels" / "extra-1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    loaded = load_recipe("toy", root)
    lockfile.write_lock(
        lockfile.lock_path(loaded),
        compute.compute_lock(loaded, SourceCache(tmp_path / "cache", recipe="toy"), {}, tmp_path / "lockwork"),
    )
    return root


@pytest.mark.parametrize(
    "rel", ["constraints/toy.txt", "wheels/extra-1.0-py3-none-any.whl", "patches/toy-version-banner.patch"]
)
def test_locked_refuses_a_changed_named_file(upstream, tmp_path, rel):
    root = _locked_project(upstream, tmp_path)
    lockfile.read_lock(load_recipe("toy", root))  # current: accepted
    path = root / rel
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit, same size
    with pytest.raises((ServebuildError, RecipeError)) as info:
        lockfile.read_lock(load_recipe("toy", root))
    line = str(info.value)
    assert "\n" not in line and rel in line
    if rel.startswith("patches/"):  # a local patch's hash is in the recipe too: refused on loading
        assert "sha256" in line and "engine.source.patches.2" in line
    else:
        assert f"lock is stale: {rel} hashes to" in line and f"files.{rel}" in line


@pytest.mark.parametrize("commit", ["a" * 39, "a" * 41, "A" * 40, "a" * 40 + "\n", " " + "a" * 39])
def test_commit_must_be_exactly_40_lowercase_hex(upstream, tmp_path, commit):
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"])
    recipe["engine"]["source"]["commit"] = commit
    root = make_project(tmp_path, upstream, recipe)
    with pytest.raises(RecipeError) as info:
        load_recipe("toy", root)
    assert "\n" not in str(info.value) and "engine.source.commit" in str(info.value)


def test_the_lock_file_shape_is_checked_before_use(upstream, tmp_path):
    root = _locked_project(upstream, tmp_path)
    loaded = load_recipe("toy", root)
    path = lockfile.lock_path(loaded)
    data = yaml.safe_load(path.read_text())
    data["files"] = ["not", "a", "mapping"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServebuildError) as info:
        lockfile.read_lock(load_recipe("toy", root))
    assert "\n" not in str(info.value) and "toy.lock.yaml" in str(info.value)
