"""Test helpers: real git upstreams and a small fixture project that uses the real templates.

GitHub cannot be reached here, so upstreams are local git repositories that the tests create,
with PR-like refs (`refs/pull/N/head`) and squash-merge commits, as GitHub lays them out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
# what was checked for each committed recipe (render, lock, profile parse): printed at the end of a run
RECIPE_CHECKS: list[str] = []

# Small pure-Python wheels from PyPI, hash-pinned (sha256 of the py3-none-any wheels).
FIXTURE_REQUIREMENTS = textwrap.dedent("""\
    # hashed requirement set for the fixture recipe (same wheels on every platform)
    packaging==24.2 \\
        --hash=sha256:09abb1bccd265c01f4a3aa3f7a7db064b36514d2cba19a2f694fe6150451a759
    setuptools==75.8.0 \\
        --hash=sha256:e3982f444617239225d675215d51f6ba05f845d4eec313da4418fdbb56fb27e3
    six==1.17.0 \\
        --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274
    """)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "upstream",
    "GIT_AUTHOR_EMAIL": "up@example.invalid",
    "GIT_COMMITTER_NAME": "upstream",
    "GIT_COMMITTER_EMAIL": "up@example.invalid",
    "GIT_AUTHOR_DATE": "2026-07-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-07-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, check=True, capture_output=True, text=True
    ).stdout.strip()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@dataclass
class Upstream:
    path: Path  # non-bare working repository
    url: str  # file:// URL of the bare repository that plays GitHub
    bare: Path
    base: str  # the release commit the recipe pins
    pr1_merge: str  # squash-merge commit of PR 1 on main
    pr2_head: str  # head of open PR 2, on top of PR 1 (refs/pull/2/head)
    pr3_head: str  # a PR that needs PR 2 to apply


def make_upstream(tmp: Path, name: str = "toyserve", extra: dict[str, bytes] | None = None) -> Upstream:
    work = tmp / f"{name}-work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    write(
        work / "pyproject.toml",
        f"""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "1.0.0"

        [tool.setuptools.package-data]
        {name} = ["*.so"]
        """,
    )
    for rel, data in (extra or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    write(work / name / "__init__.py", '__version__ = "1.0.0"\n')
    write(work / name / "greeting.py", 'GREETING = "hello"\n')
    write(
        work / name / "__main__.py",
        f"""\
        import argparse

        from {name}.greeting import GREETING


        def main():
            parser = argparse.ArgumentParser(prog="{name}", description="toy inference server")
            parser.add_argument("--port", type=int, default=30000)
            args = parser.parse_args()
            print(GREETING, args.port)


        if __name__ == "__main__":
            main()
        """,
    )
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "release 1.0.0")
    git(work, "tag", "v1.0.0")
    base = git(work, "rev-parse", "HEAD")

    # PR 1: developed on a branch, squash-merged onto main as one commit
    git(work, "checkout", "-q", "-b", "pr1")
    write(work / name / "greeting.py", 'GREETING = "hello"\nFAREWELL = "bye"\n')
    git(work, "commit", "-q", "-am", "wip farewell")
    pr1_head = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    git(work, "merge", "-q", "--squash", "pr1")
    git(work, "commit", "-q", "-m", "Add farewell (#1)")
    pr1_merge = git(work, "rev-parse", "HEAD")

    # PR 2: open, its head sits on top of PR 1's merge
    git(work, "checkout", "-q", "-b", "pr2")
    write(work / name / "greeting.py", 'GREETING = "hello, hopper"\nFAREWELL = "bye"\n')
    git(work, "commit", "-q", "-am", "Greet Hopper (#2)")
    pr2_head = git(work, "rev-parse", "HEAD")

    # PR 3: builds on PR 2's text
    git(work, "checkout", "-q", "-b", "pr3")
    write(work / name / "greeting.py", 'GREETING = "hello, hopper"\nFAREWELL = "bye, hopper"\n')
    git(work, "commit", "-q", "-am", "Say bye to Hopper (#3)")
    pr3_head = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")

    bare = tmp / f"{name}.git"
    git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    for number, head in ((1, pr1_head), (2, pr2_head), (3, pr3_head)):
        git(bare, "update-ref", f"refs/pull/{number}/head", head)
    # as on GitHub: a PR's head is reachable only through refs/pull/N/head, not through a branch
    git(bare, "branch", "-q", "-D", "pr1", "pr2", "pr3")
    return Upstream(work, f"file://{bare}", bare, base, pr1_merge, pr2_head, pr3_head)


LOCAL_PATCH = """\
servebuild fixture patch: print the package version at startup.

Why: proves a local patch file is applied after the upstream PRs.
Against: toyserve v1.0.0 plus PRs 1 and 2.
Drop when: never; it is a test fixture.
---
diff --git a/toyserve/__main__.py b/toyserve/__main__.py
--- a/toyserve/__main__.py
+++ b/toyserve/__main__.py
@@ -1,5 +1,6 @@
 import argparse
 
+from toyserve import __version__
 from toyserve.greeting import GREETING
 
 
@@ -8,6 +9,6 @@ def main():
     parser.add_argument("--port", type=int, default=30000)
     args = parser.parse_args()
-    print(GREETING, args.port)
+    print(GREETING, args.port, "version", __version__, "patched")
 
 
 if __name__ == "__main__":
"""  # noqa: W293  (a blank context line of a diff is one space)


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def diff_sha(upstream: Upstream, base: str, commit: str) -> str:
    out = subprocess.run(
        [
            "git",
            "-c",
            "diff.algorithm=myers",
            "-c",
            "core.quotepath=false",
            "diff",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            base,
            commit,
        ],
        cwd=upstream.bare,
        capture_output=True,
        check=True,
    ).stdout
    return sha256(out)


def fixture_recipe(upstream: Upstream, **overrides) -> dict:
    recipe = {
        "name": "toy",
        "description": "fixture: same templates and stages as the real recipes, small inputs",
        "platforms": ["linux/amd64", "linux/arm64"],
        "python": "3.11",
        "cuda_arch_list": "9.0a",
        "bases": {
            "build": {"ref": "servebuild/debian:bookworm-{arch}"},
            "runtime": {"ref": "servebuild/debian:bookworm-{arch}"},
        },
        "constraints": {"linux/amd64": "constraints/toy.txt", "linux/arm64": "constraints/toy.txt"},
        "engine": {
            "name": "toyserve",
            "version": "1.0.0",
            "source": {
                "url": upstream.url,
                "commit": upstream.base,
                "tag": "v1.0.0",
                "patches": [
                    {
                        "id": "pr-1",
                        "pr": 1,
                        "commit": upstream.pr1_merge,
                        "sha256": diff_sha(upstream, upstream.pr1_merge + "^1", upstream.pr1_merge),
                    },
                    {
                        "id": "pr-2",
                        "pr": 2,
                        "commit": upstream.pr2_head,
                        "base": upstream.pr1_merge,
                        "requires": ["pr-1"],
                        "sha256": diff_sha(upstream, upstream.pr1_merge, upstream.pr2_head),
                    },
                    {
                        "id": "local-version-banner",
                        "file": "patches/toy-version-banner.patch",
                        "sha256": sha256(LOCAL_PATCH),
                    },
                ],
            },
        },
        "launch": {
            "cache_dirs": ["/root/.cache/toy"],
            "profiles": {
                "toy-serve": {
                    "description": "toy server",
                    "module": "toyserve",
                    "args": ["--port", "30000"],
                    "env": {"TOY_MODE": "fast lane"},
                }
            },
        },
        "expect": {
            "imports": ["six", "packaging", "toyserve"],
            "versions": {"six": "1.17.0", "packaging": "24.2", "toyserve": "1.0.0"},
        },
    }
    recipe.update(overrides)
    return recipe


def own_cache_keys(package: str) -> dict:
    """Recipe overrides that give a test module build-cache keys of its own from the first step on.

    BuildKit can hold two records for one step (every --no-cache build of the same recipe adds one)
    and which one a later build gets is not fixed: two variants can then get different copies of a
    layer they should share. Tests that assert sharing build where no other module's --no-cache
    builds reach. `package` is one that debootstrap's minbase already holds: nothing more is fetched.
    """
    return {"apt": {"build": [package], "runtime": [package]}}


def copy_recipe_chain(chain, dest: Path) -> None:
    """A recipe's files (itself and every file it extends) copied into `dest` with their committed locks,
    for a test recipe that extends it there: a recipe with no lock of its own borrows its parent's Debian
    pins only when the parent's lock is beside it (else its apt steps resolve unpinned and the whole venv
    is built again: 9 GB and minutes in the engine-image tests)."""
    for rf in chain:
        (dest / rf.path.name).write_text(rf.path.read_text())
        lock = rf.path.with_name(rf.path.stem + ".lock.yaml")
        if lock.exists():
            shutil.copyfile(lock, dest / lock.name)


def make_project(tmp: Path, upstream: Upstream, recipe: dict | None = None, name: str = "toy") -> Path:
    """A project root with recipes/, constraints/ and patches/, as the real repository has."""
    root = tmp / "project"
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    (root / "constraints").mkdir(exist_ok=True)
    (root / "patches").mkdir(exist_ok=True)
    (root / "constraints" / "toy.txt").write_text(FIXTURE_REQUIREMENTS)
    (root / "patches" / "toy-version-banner.patch").write_text(LOCAL_PATCH)
    data = recipe or fixture_recipe(upstream)
    (root / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def copy_real(root: Path, *rel: str) -> None:
    for r in rel:
        src = REPO_ROOT / r
        dst = root / r
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)


def requirement_blocks(path: Path, names: set[str]) -> str:
    """The hashed entries for `names` out of a uv-compiled requirement set."""
    out, keep = [], False
    for line in path.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            keep = line.split("==", 1)[0].lower() in names
        if keep and not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out) + "\n"


def local_torch_cpu_wheel() -> Path:
    """The CPU torch 2.13.0 wheel this machine kind keeps on disk (PIP_FIND_LINKS)."""
    for folder in filter(None, [os.environ.get("PIP_FIND_LINKS"), "/opt/wheels"]):
        for wheel in sorted(Path(folder).glob("torch-2.13.0+cpu-cp311-*x86_64.whl")):
            return wheel
    raise FileNotFoundError("torch-2.13.0+cpu wheel not found in $PIP_FIND_LINKS or /opt/wheels")


SM_KERNEL = """\
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" void launch(float *x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""


def compile_kernel(out: Path, arch: str) -> Path:
    """A real CUDA shared object built by this host's nvcc for one SASS arch (e.g. sm_80)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    src = out.with_suffix(".cu")
    src.write_text(SM_KERNEL)
    number = arch.removeprefix("sm_")
    subprocess.run(
        [
            nvcc,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            f"-gencode=arch=compute_{number},code={arch}",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry(root: Path, htpasswd: Path | None = None):
    """A real registry (distribution 2.8, Debian's docker-registry) on 127.0.0.1, plain HTTP.

    Returns (HOST:PORT, process); an htpasswd file turns on basic auth.
    """
    import time
    import urllib.error
    import urllib.request

    port = free_port()
    auth = f"auth: {{htpasswd: {{realm: test, path: {htpasswd}}}}}\n" if htpasswd else ""
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {root}/data}}\n"
        f"  delete: {{enabled: true}}\nhttp: {{addr: 127.0.0.1:{port}}}\n{auth}"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return f"127.0.0.1:{port}", proc
        except urllib.error.HTTPError:
            return f"127.0.0.1:{port}", proc  # 401 with auth: it is up
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("docker-registry did not start")


class EngineSnapshot:
    """What the engine held when the test run started, so cleanup removes only what the tests made.

    A user may run the suite on their build host: their images (dangling ones included) and their
    build cache must survive it. BuildKit prunes one record id per call, so new records go in
    parallel.
    """

    DOCKER = "/usr/bin/docker"

    def __init__(self) -> None:
        self.images = self.all_images()  # tagged too: a user's tag the run displaces stays theirs
        self.made: set[str] = set()
        self.cache = self.cache_records()

    @classmethod
    def _lines(cls, *args: str) -> set[str]:
        proc = subprocess.run([cls.DOCKER, *args], capture_output=True, text=True)
        return {line.strip() for line in proc.stdout.splitlines() if line.strip()}

    @classmethod
    def all_images(cls) -> set[str]:
        return cls._lines("image", "ls", "-aq", "--no-trunc")

    @classmethod
    def cache_records(cls, kind: str | None = None) -> set[str]:
        """The engine's build-cache record ids (`kind`: only those of that CacheType, e.g. "regular")."""
        import json

        proc = subprocess.run(
            [cls.DOCKER, "system", "df", "-v", "--format", "{{json .BuildCache}}"], capture_output=True, text=True
        )
        try:
            return {
                r["ID"] for r in json.loads(proc.stdout or "[]") or [] if kind is None or r.get("CacheType") == kind
            }
        except ValueError:
            return set()

    def remember(self, image_id: str | None) -> None:
        """An image a test built (its tag may later move to a rebuild and leave it dangling)."""
        if image_id and image_id not in self.images:
            self.made.add(image_id)

    def remove_new_dangling(self) -> list[str]:
        """Dangling images among those the run's builds made (a concurrent build of the user's,
        dangling too, is not ours: only images the run remembered go)."""
        dangling = self._lines("image", "ls", "-q", "--no-trunc", "--filter", "dangling=true")
        ours = sorted(dangling & self.made)
        for image in ours:
            subprocess.run([self.DOCKER, "image", "rm", image], capture_output=True)
        return ours

    def prune_new_cache(self, layers_only: bool = False) -> int:
        """Build-cache records made since the start (the user's own cache stays). BuildKit does not
        say which build made a record: one the user's own concurrent build made during the run
        would go too (run the suite on a quiet engine, or leave SERVEBUILD_TEST_PRUNE unset).
        `layers_only`: the layer records only; the cache mounts (pip's and apt's downloads, a few GB)
        stay for the next engine build of the run, which then downloads only what it does not share."""
        from concurrent.futures import ThreadPoolExecutor

        kind = "regular" if layers_only else None
        new = sorted(self.cache_records(kind) - self.cache)

        def prune(record: str) -> None:
            subprocess.run([self.DOCKER, "builder", "prune", "-af", "--filter", f"id={record}"], capture_output=True)

        # records depend on each other: a parent stays while a child holds it, so go again while
        # a pass removes something (two passes left records behind, and a later run then found
        # them as the "user's" cache: stale copies of the toy's layers)
        while new:
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(prune, new))
            left = sorted(self.cache_records(kind) - self.cache)
            progress, new = len(left) < len(new), left
            if not progress:
                break
        return len(new)


def assert_one_line(proc, *words) -> str:
    """A CLI run that failed as servebuild promises: exit 2, one line on stderr, no traceback, holding `words`."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def one_printable_line(exc: Exception) -> str:
    line = str(exc)
    assert line.isprintable(), repr(line)  # no newline, no escape, no bell: one line a terminal shows as is
    return line
