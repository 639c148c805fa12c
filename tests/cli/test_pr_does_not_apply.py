"""A PR that cannot apply on the recipe's base is named exactly (issue 43, item 3), through the real CLI
(`invoke lock`, `invoke fetch`) against a toy upstream that is a real git repository made here:

    v1.0.0 ── Add a banner (#1) ── Runtime context refactor ── Run loads through the executor (#4)
                                                            └─ Add an executor module (#5)
      └─ (branch) Drop declare_load_time_override (#6)

The refactor adds `get_exec()` to toyserve/runtime.py and removes `declare_load_time_override`, which
v1.0.0 still calls; #4 changes lines the refactor wrote, so its diff does not apply on v1.0.0 (as
SGLang #33889 on v0.5.16). #5 adds a new file that imports `get_exec`: it applies cleanly and imports
a name the base lacks. #6 removes a name that an unchanged module of the base imports (relatively).
Each is one line, exit 2, and nothing half-written: no lock file changed, no tarball, no prepared
record, no patched tree left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from support import FIXTURE_REQUIREMENTS, REPO_ROOT, git, sha256, write

DIGEST = "sha256:" + "0" * 64  # the bases are pinned in the recipe: lock asks no registry


@dataclass
class Upstream:
    work: Path  # the non-bare repository the upstream was made in
    url: str
    base: str  # v1.0.0
    pr1: str
    refactor: str
    pr4: str
    pr5: str
    pr6: str


def make_refactor_upstream(tmp: Path) -> Upstream:
    work = tmp / "toyserve-work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    write(work / "pyproject.toml", '[project]\nname = "toyserve"\nversion = "1.0.0"\n')
    write(work / "toyserve/__init__.py", '__version__ = "1.0.0"\n')
    write(
        work / "toyserve/runtime.py",
        '''\
        """Runtime helpers."""


        def declare_load_time_override(name):
            return name


        def current_device():
            return "cpu"
        ''',
    )
    write(
        work / "toyserve/loader.py",
        """\
        from toyserve import runtime


        def load(name):
            device = runtime.current_device()
            return runtime.declare_load_time_override(name), device
        """,
    )
    write(work / "toyserve/models/__init__.py", "")
    write(
        work / "toyserve/models/llama.py",
        """\
        from ..runtime import declare_load_time_override


        def build():
            return declare_load_time_override("llama")
        """,
    )
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "release 1.0.0")
    git(work, "tag", "v1.0.0")
    base = git(work, "rev-parse", "HEAD")

    write(work / "toyserve/__init__.py", '__version__ = "1.0.0"\nBANNER = "toyserve"\n')
    git(work, "commit", "-q", "-am", "Add a banner (#1)")
    pr1 = git(work, "rev-parse", "HEAD")

    write(
        work / "toyserve/runtime.py",
        '''\
        """Runtime helpers."""


        def get_exec():
            return lambda name: name


        def current_device():
            return "cpu"
        ''',
    )
    write(
        work / "toyserve/loader.py",
        """\
        from toyserve import runtime


        def load(name):
            device = runtime.current_device()
            return runtime.get_exec()(name), device
        """,
    )
    write(
        work / "toyserve/models/llama.py",
        """\
        from ..runtime import get_exec


        def build():
            return get_exec()("llama")
        """,
    )
    git(work, "commit", "-q", "-am", "Runtime context refactor")
    refactor = git(work, "rev-parse", "HEAD")

    write(
        work / "toyserve/loader.py",
        """\
        from toyserve import runtime


        def load(name):
            device = runtime.current_device()
            return runtime.get_exec()(name.strip()), device
        """,
    )
    git(work, "commit", "-q", "-am", "Run loads through the executor (#4)")
    pr4 = git(work, "rev-parse", "HEAD")

    write(
        work / "toyserve/executor.py",
        """\
        \"\"\"Jobs run through the runtime's executor.\"\"\"

        from toyserve.runtime import current_device, get_exec


        def run(job):
            return get_exec()(job), current_device()
        """,
    )
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "Add an executor module (#5)")
    pr5 = git(work, "rev-parse", "HEAD")

    git(work, "checkout", "-q", "-b", "drop", "v1.0.0")
    write(work / "toyserve/runtime.py", '"""Runtime helpers."""\n\n\ndef current_device():\n    return "cpu"\n')
    git(work, "commit", "-q", "-am", "Drop declare_load_time_override (#6)")
    pr6 = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")

    bare = tmp / "toyserve.git"
    git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "update-ref", "refs/pull/6/head", pr6)
    git(bare, "branch", "-q", "-D", "drop")
    return Upstream(work, f"file://{bare}", base, pr1, refactor, pr4, pr5, pr6)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return make_refactor_upstream(tmp_path_factory.mktemp("refactor-upstream"))


def recipe(upstream: Upstream, patches: list[dict]) -> dict:
    return {
        "name": "toy",
        "description": "fixture: a PR stacked on a refactor its base lacks",
        "platforms": ["linux/amd64"],
        "python": "3.11",
        "cuda_arch_list": "9.0a",
        "bases": {
            "build": {"ref": "debian:bookworm-slim", "digest": DIGEST},
            "runtime": {"ref": "debian:bookworm-slim", "digest": DIGEST},
        },
        "constraints": {"linux/amd64": "constraints/toy.txt"},
        "engine": {
            "name": "toyserve",
            "version": "1.0.0",
            "source": {"url": upstream.url, "commit": upstream.base, "tag": "v1.0.0", "patches": patches},
        },
        "launch": {
            "cache_dirs": ["/root/.cache/toy"],
            "profiles": {"toy-serve": {"description": "toy server", "module": "toyserve", "args": []}},
        },
    }


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    for d in ("recipes", "constraints", "patches"):
        (root / d).mkdir(parents=True)
    (root / "constraints" / "toy.txt").write_text(FIXTURE_REQUIREMENTS)
    (root / "tasks.py").write_text((REPO_ROOT / "tasks.py").read_text())
    return root


def write_recipe(project: Path, upstream: Upstream, patches: list[dict]) -> None:
    (project / "recipes" / "toy.yaml").write_text(yaml.safe_dump(recipe(upstream, patches), sort_keys=False))


def cli(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(project.parent / "cache")}
    env.pop("DOCKER_HOST", None)
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(project), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def refused(proc: subprocess.CompletedProcess) -> str:
    """The one line a refused command prints: exit 2, stderr that line alone, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def snapshot(project: Path) -> dict[str, bytes]:
    """Every file of the project and the source cache but the git mirrors (which a refused run may fill
    and keep: they are whole fetches of the upstream, kept for the next run)."""
    out = {}
    for top in (project, project.parent / "cache"):
        for p in sorted(top.rglob("*")):
            rel = p.relative_to(project.parent)
            if p.is_file() and not str(rel).startswith("cache/git/") and "/build/" not in f"/{rel}":
                out[str(rel)] = p.read_bytes()
    return out


def no_half_work(project: Path, before: dict[str, bytes]) -> None:
    assert snapshot(project) == before  # no lock written or changed, no tarball, no prepared record
    assert [p for p in (project / "build").rglob("tree") if p.is_dir()] == []  # no half-patched tree
    cache = project.parent / "cache"
    assert [p.name for p in (cache / "git").iterdir() if not p.name.endswith(".git")] == []


def conflict_line(upstream: Upstream, before: str) -> str:
    return (
        f"error: recipes/toy.yaml: engine.source.patches.pr-4: PR #4 (commit {upstream.pr4}) does not apply on v1.0.0 "
        f"(commit {upstream.base}) with {before} applied before it: toyserve/loader.py hunk @@ -3,4 +3,4 @@ "
        f"does not apply, nor merge 3-way (it was written on upstream {upstream.refactor[:12]}, which has 2 "
        "commits v1.0.0 lacks); write a backport patch of PR #4 for v1.0.0 under patches/ and list it with "
        "`file:` in place of `pr: 4`"
    )


def test_lock_names_the_pr_that_does_not_apply_and_leaves_the_old_lock(project, upstream):
    write_recipe(project, upstream, [{"id": "pr-1", "pr": 1}])
    proc = cli(project, "lock", "--recipe", "toy")
    assert proc.returncode == 0, proc.stderr
    old_lock = (project / "recipes" / "toy.lock.yaml").read_bytes()
    assert yaml.safe_load(old_lock)["patches"][0]["commit"] == upstream.pr1

    write_recipe(project, upstream, [{"id": "pr-1", "pr": 1}, {"id": "pr-4", "pr": 4}])
    before = snapshot(project)
    line = refused(cli(project, "lock", "--recipe", "toy"))
    assert line == conflict_line(upstream, "pr-1")
    assert (project / "recipes" / "toy.lock.yaml").read_bytes() == old_lock
    no_half_work(project, before)


def test_fetch_names_the_pr_that_does_not_apply(project, upstream):
    write_recipe(
        project,
        upstream,
        [{"id": "pr-1", "pr": 1, "commit": upstream.pr1}, {"id": "pr-4", "pr": 4, "commit": upstream.pr4}],
    )
    before = snapshot(project)
    assert refused(cli(project, "fetch", "--recipe", "toy")) == conflict_line(upstream, "pr-1")
    no_half_work(project, before)


def test_a_pr_that_applies_but_imports_a_name_the_base_lacks_is_refused(project, upstream):
    write_recipe(project, upstream, [{"id": "pr-1", "pr": 1}, {"id": "pr-5", "pr": 5}])
    before = snapshot(project)
    line = refused(cli(project, "lock", "--recipe", "toy"))
    assert line == (
        f"error: recipes/toy.yaml: engine.source.patches.pr-5: PR #5 (commit {upstream.pr5}): with it applied, "
        "toyserve/executor.py line 3 imports get_exec from toyserve.runtime, which toyserve/runtime.py does not define (static check "
        f"of the patched tree: v1.0.0 (commit {upstream.base}) with pr-1, pr-5 applied); it needs an upstream "
        "change v1.0.0 lacks: write a backport patch of PR #5 for v1.0.0 under patches/ and list it with `file:` "
        "in place of `pr: 5`"
    )
    assert not (project / "recipes" / "toy.lock.yaml").exists()
    no_half_work(project, before)


def test_a_pr_that_removes_a_name_an_unchanged_module_imports_is_refused(project, upstream):
    """#6 applies cleanly; toyserve/models/llama.py, which no patch touches, imports the name it removes
    (relatively): the module that would fail at serve time is named, and the PR that removed the name."""
    write_recipe(project, upstream, [{"id": "pr-6", "pr": 6, "commit": upstream.pr6, "base": upstream.base}])
    before = snapshot(project)
    line = refused(cli(project, "fetch", "--recipe", "toy"))
    assert line == (
        f"error: recipes/toy.yaml: engine.source.patches.pr-6: PR #6 (commit {upstream.pr6}): with it applied, "
        "toyserve/models/llama.py line 1 imports declare_load_time_override from toyserve.runtime, which toyserve/runtime.py does not "
        f"define (static check of the patched tree: v1.0.0 (commit {upstream.base}) with pr-6 applied); v1.0.0's "
        "own code still imports what it removes: write a backport patch of PR #6 for v1.0.0 under patches/ and "
        "list it with `file:` in place of `pr: 6`"
    )
    no_half_work(project, before)


def test_the_stack_that_applies_and_imports_is_fetched(project, upstream):
    """The control: #1 alone applies and imports, so fetch writes its tarball."""
    write_recipe(project, upstream, [{"id": "pr-1", "pr": 1, "commit": upstream.pr1}])
    proc = cli(project, "fetch", "--recipe", "toy")
    assert proc.returncode == 0, proc.stderr
    assert "tarball:" in proc.stdout


def local_patch(project: Path, name: str, text: str) -> dict:
    (project / "patches" / f"{name}.patch").write_text(text)
    return {"id": name, "file": f"patches/{name}.patch", "sha256": sha256(text)}


def test_a_local_patch_that_does_not_apply_says_to_refresh_it(project, upstream):
    """A local patch written against the refactor, not the tag (its blobs are in the mirror, so the 3-way
    merge is tried too): the straight check names the hunk, and the way out is to refresh the file."""
    diff = git(upstream.work, "diff", upstream.refactor, upstream.pr4) + "\n"
    recipe_patches = [{"id": "pr-1", "pr": 1, "commit": upstream.pr1}, local_patch(project, "loads", diff)]
    write_recipe(project, upstream, recipe_patches)
    before = snapshot(project)
    assert refused(cli(project, "fetch", "--recipe", "toy")) == (
        f"error: recipes/toy.yaml: engine.source.patches.loads: patches/loads.patch does not apply on v1.0.0 "
        f"(commit {upstream.base}) with pr-1 applied before it: toyserve/loader.py hunk @@ -3,4 +3,4 @@ does not "
        "apply, nor merge 3-way; refresh patches/loads.patch against v1.0.0 and the entries before it"
    )
    no_half_work(project, before)


def test_a_local_patch_that_leaves_a_file_python_cannot_compile_is_refused(project, upstream):
    broken = (
        "diff --git a/toyserve/broken.py b/toyserve/broken.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/toyserve/broken.py\n"
        "@@ -0,0 +1,2 @@\n"
        "+def run(job):\n"
        "+    return job +\n"
    )
    write_recipe(project, upstream, [local_patch(project, "broken", broken)])
    before = snapshot(project)
    assert refused(cli(project, "fetch", "--recipe", "toy")) == (
        "error: recipes/toy.yaml: engine.source.patches.broken: patches/broken.patch: with it applied, "
        "toyserve/broken.py line 2 does not compile: invalid syntax (static check of the patched tree: v1.0.0 "
        f"(commit {upstream.base}) with broken applied); refresh "
        "patches/broken.patch against v1.0.0 and the entries before it"
    )
    no_half_work(project, before)
