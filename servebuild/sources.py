"""Source cache: mirror upstreams into bare git repos, apply the patch stack, write a deterministic tarball."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urlparse

from .errors import SourceError
from .fsutil import atomic_write, canonical_json, sha256_bytes, sha256_file
from .patchfiles import is_native, is_test_or_doc
from .recipe import EngineSource, PatchEntry

# (path, release files or None) -> why the install mode cannot carry a change to path, or None
PatchRule = Callable[[str, Optional[set]], Optional[str]]
TAR_MTIME = 946684800  # 2000-01-01: fixed, and late enough for zip-based wheel builds
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
DIFF_OPTS = ["-c", "diff.algorithm=myers", "-c", "core.quotepath=false"]
UNREACHABLE = re.compile(r"(Could not resolve host|unable to access|Connection refused|"
                         r"Could not read from remote|does not appear to be a git repository|"
                         r"unable to connect|Network is unreachable|timed out)", re.I)


@dataclass
class AppliedPatch:
    id: str
    kind: str
    pr: Optional[int]
    commit: Optional[str]
    file: Optional[str]
    sha256: str
    files: list[str]
    python_only: bool
    dropped: list[str] = field(default_factory=list)  # test/doc files absent from a release tree

    def as_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "pr": self.pr, "commit": self.commit,
                "file": self.file, "sha256": self.sha256, "files": self.files,
                "python_only": self.python_only, "dropped": self.dropped}


@dataclass
class PreparedSource:
    url: str
    commit: str
    tarball: Path
    tarball_sha256: str
    patches: list[AppliedPatch] = field(default_factory=list)
    tree: dict = field(default_factory=lambda: {"from": "git"})  # where the unpatched tree came from

    def as_dict(self) -> dict:
        return {"url": self.url, "commit": self.commit, "tarball_sha256": self.tarball_sha256,
                "tree": self.tree, "patches": [p.as_dict() for p in self.patches]}

    def version(self, release: str) -> str:
        """The release version, with a PEP 440 local label naming the patch stack when there is one."""
        if not self.patches:
            return release
        stack = sha256_bytes(canonical_json([[p.id, p.sha256] for p in self.patches]).encode())
        return f"{release}+sb{len(self.patches)}.{stack[:12]}"


def numstat_paths(out: bytes) -> list[str]:
    """Paths from `git apply --numstat -z`: `ADD\tDEL\tPATH\0`, or for a rename `ADD\tDEL\t\0OLD\0NEW\0`
    (both paths count: the old one is deleted)."""
    fields = out.split(b"\0")
    paths, i = [], 0
    while i < len(fields):
        entry = fields[i]
        if not entry:
            i += 1
            continue
        parts = entry.split(b"\t", 2)
        if len(parts) == 3 and parts[2]:
            paths.append(parts[2].decode("utf-8", "surrogateescape"))
            i += 1
        else:  # rename/copy: the two names follow as fields of their own
            paths += [f.decode("utf-8", "surrogateescape") for f in fields[i + 1:i + 3] if f]
            i += 3
    return paths


def _literal(path: str) -> str:
    """A path as a git wildmatch pattern that matches only itself."""
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def git(*args: str, cwd: Optional[Path] = None, env: Optional[dict] = None,
        check: bool = True) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc


def default_cache_dir() -> Path:
    env = os.environ.get("SERVEBUILD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "servebuild"


class SourceCache:
    """Bare mirrors keyed by upstream URL, and tarballs keyed by their sha256."""

    def __init__(self, root: Path, mirrors: Optional[dict[str, str]] = None, offline: bool = False,
                 recipe: str = "recipe"):
        self.root = root
        self.mirrors = mirrors or {}
        self.offline = offline
        self.recipe = recipe
        (root / "git").mkdir(parents=True, exist_ok=True)
        (root / "tarballs").mkdir(parents=True, exist_ok=True)

    def repo_dir(self, url: str) -> Path:
        return self.root / "git" / (sha256_bytes(url.encode())[:24] + ".git")

    # -- mirroring

    def _fetch_into(self, repo: Path, url: str, prs: tuple[int, ...] = ()) -> None:
        """Branches and tags, plus only the pull refs this stack names (never every refs/pull/*)."""
        remote = self.mirrors.get(url, url)
        pull = [f"+refs/pull/{n}/head:refs/pull/{n}/head" for n in sorted(set(prs))]
        if pull:  # a PR ref the upstream lacks must not fail the whole fetch
            listed = git("ls-remote", "--", remote, *[f"refs/pull/{n}/head" for n in sorted(set(prs))],
                         cwd=repo, check=False).stdout.decode()
            pull = [r for r in pull if r.split(":")[0][1:] in listed]
        proc = git("fetch", "--quiet", "--prune", "--no-tags", "--", remote,
                   "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", *pull, cwd=repo, check=False)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            detail = err[-1] if err else f"git exit {proc.returncode}"
            host = urlparse(remote).hostname or remote
            if UNREACHABLE.search(proc.stderr.decode(errors="replace")):
                raise SourceError(
                    f"upstream {host} is unreachable ({detail}); build with --offline from a filled "
                    f"cache, or map {url} to a mirror in the servebuild config (git_mirrors)",
                    file=self.recipe, field="engine.source.url")
            raise SourceError(f"fetching {remote} failed: {detail}", file=self.recipe,
                              field="engine.source.url")

    def _set_head(self, repo: Path, url: str) -> None:
        """Point HEAD at the upstream's default branch, as a clone would."""
        remote = self.mirrors.get(url, url)
        out = git("ls-remote", "--symref", "--", remote, "HEAD", cwd=repo, check=False).stdout.decode()
        m = re.search(r"^ref: (refs/heads/\S+)\tHEAD", out, re.M)
        if m:
            git("symbolic-ref", "HEAD", m.group(1), cwd=repo)

    def mirror(self, url: str, commits: list[str], prs: tuple[int, ...] = ()) -> Path:
        """Make sure the bare mirror of `url` holds every commit in `commits`."""
        repo = self.repo_dir(url)
        if repo.exists() and not self._healthy(repo):
            if self.offline:
                raise SourceError(f"source cache entry {repo} for {url} is corrupted; "
                                  f"run fetch without --offline to refetch it", file=self.recipe,
                                  field="engine.source.url")
            shutil.rmtree(repo)
        if not repo.exists():
            if self.offline:
                raise SourceError(f"{url} is not in the source cache and --offline was given; "
                                  f"run `invoke fetch` first", file=self.recipe, field="engine.source.url")
            tmp = Path(tempfile.mkdtemp(prefix=repo.name + ".", dir=repo.parent))
            try:
                git("init", "--quiet", "--bare", str(tmp))
                self._fetch_into(tmp, url, prs)
                self._set_head(tmp, url)
                tmp.rename(repo)  # atomic: an interrupted fetch never leaves a half mirror in place
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp)
        missing = [c for c in commits if not self.has_commit(repo, c)]
        if missing and not self.offline:
            self._fetch_into(repo, url, prs)
            missing = [c for c in commits if not self.has_commit(repo, c)]
        if missing:
            where = "the source cache (--offline)" if self.offline else url
            raise SourceError(f"commit {missing[0]} not found in {where}", file=self.recipe,
                              field="engine.source")
        return repo

    @staticmethod
    def _healthy(repo: Path) -> bool:
        return git("rev-parse", "--git-dir", cwd=repo, check=False).returncode == 0 and \
            (repo / "objects").is_dir()

    @staticmethod
    def has_commit(repo: Path, commit: str) -> bool:
        return git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo, check=False).returncode == 0

    def resolve(self, repo: Path, rev: str) -> Optional[str]:
        proc = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    # -- patches

    def entry_diff(self, repo: Path, entry: PatchEntry, root: Path) -> bytes:
        if entry.file is not None:
            return (root / entry.file).read_bytes()
        assert entry.commit is not None
        base = entry.base or f"{entry.commit}^1"
        return git(*DIFF_OPTS, "diff", "--binary", "--full-index", "--no-renames", "--no-color",
                   "--no-ext-diff", base, entry.commit, cwd=repo).stdout

    def prepare(self, source: EngineSource, project_root: Path, work: Path,
                release: Optional[tuple[Path, str, str, str]] = None,
                rule: Optional[PatchRule] = None, rule_key: str = "") -> PreparedSource:
        """Lay out the unpatched tree (the pinned commit, or the release artifact `release` =
        (file, sha256, artifact kind, prefix)), apply the stack in order, write the tarball.

        The result is remembered under a key of everything it depends on (tree origin, each
        entry's diff bytes, the mode's rule as `rule_key`): an A/B variant or a rebuild with the
        same inputs reuses its tarball (checked by hash) instead of laying out the tree again."""
        unresolved = [e for e in source.patches if e.pr is not None and e.commit is None]
        if unresolved:
            e = unresolved[0]
            pinned = f"only the short commit_hint {e.commit_hint}" if e.commit_hint else "no pinned commit"
            raise SourceError(f"patch entry {e.id} (PR #{e.pr}) has {pinned}; run `invoke lock --recipe NAME` "
                              f"where the upstream is reachable",
                              file=self.recipe, field=f"engine.source.patches.{e.id}.commit")
        commits = [e.commit for e in source.patches if e.commit] + [e.base for e in source.patches if e.base]
        needs_git = release is None or bool(commits)
        prs = tuple(e.pr for e in source.patches if e.pr is not None)  # a PR head may live only under refs/pull
        repo = (self.mirror(source.url, ([source.commit] if release is None else []) + commits, prs=prs)
                if needs_git else None)

        diffs = {entry.id: self._checked_diff(repo, entry, project_root) for entry in source.patches}
        memo = self.root / "prepared" / (sha256_bytes(canonical_json({
            "v": 1, "url": source.url, "commit": source.commit, "subdir": source.subdir,
            "release": list(release[1:]) if release else None, "rule": rule_key,
            "patches": [[e.id, e.kind, e.pr, e.commit, e.base, e.file, sha256_bytes(diffs[e.id])]
                        for e in source.patches]}).encode()) + ".json")
        remembered = self._remembered(memo)
        if remembered is not None:
            return remembered
        tree = work / "tree"
        env, origin, release_files = self._lay_out(source, tree, repo, release)
        applied = [self._apply_entry(tree, project_root, entry, diffs[entry.id], env, release_files, rule)
                   for entry in source.patches]
        tar_path, tar_sha = self.write_tarball(tree, env)
        prepared = PreparedSource(source.url, source.commit, tar_path, tar_sha, applied, origin)
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(memo, canonical_json({**prepared.as_dict(), "tarball": tar_path.name}).encode())
        return prepared

    def _remembered(self, memo: Path) -> Optional[PreparedSource]:
        """A PreparedSource from an earlier identical preparation, if its tarball is intact."""
        import json
        try:
            data = json.loads(memo.read_text())
            tarball = self.root / "tarballs" / data["tarball"]
            if sha256_file(tarball) != data["tarball_sha256"]:
                return None
            patches = [AppliedPatch(**p) for p in data["patches"]]
            return PreparedSource(data["url"], data["commit"], tarball, data["tarball_sha256"], patches,
                                  data["tree"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, partial or from another version: prepare afresh

    def _checked_diff(self, repo: Optional[Path], entry: PatchEntry, project_root: Path) -> bytes:
        diff = self.entry_diff(repo, entry, project_root)
        digest = sha256_bytes(diff)
        if entry.sha256 is not None and digest != entry.sha256:
            what = entry.file or f"PR #{entry.pr} at {entry.commit}"
            raise SourceError(f"patch sha256 mismatch for {entry.id} ({what}): recorded "
                              f"{entry.sha256}, got {digest}", file=self.recipe,
                              field=f"engine.source.patches.{entry.id}.sha256")
        return diff

    @staticmethod
    def _lay_out(source: EngineSource, tree: Path, repo: Optional[Path],
                 release: Optional[tuple[Path, str, str, str]]) -> tuple[dict, dict, Optional[set]]:
        """A fresh git work tree of the unpatched source: (git env, origin record, release files)."""
        if tree.exists():
            shutil.rmtree(tree)
        tree.mkdir(parents=True)
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / "objects")} if repo else {}
        git("init", "--quiet", cwd=tree)
        if release is None:
            git("read-tree", "--reset", "-u", source.commit, cwd=tree, env=env)
            return env, {"from": "git", "commit": source.commit}, None
        path, digest, kind, prefix = release
        release_files = unpack_release(path, kind, prefix, tree)
        git("add", "-A", ".", cwd=tree, env=env)
        return env, {"from": f"pypi-{kind}", "file": path.name, "sha256": digest, "prefix": prefix,
                     "tag_commit": source.commit}, release_files

    def _apply_entry(self, tree: Path, project_root: Path, entry: PatchEntry, diff: bytes, env: dict,
                     release_files: Optional[set], rule: Optional[PatchRule]) -> AppliedPatch:
        """Check every path of the entry's (hash-checked) diff against the mode's rule, then apply it."""
        digest = sha256_bytes(diff)
        files = self.diff_files(entry, diff)
        # test/doc files a release artifact does not ship are dropped (and recorded), not applied
        dropped = [f for f in files if release_files is not None and f not in release_files
                   and is_test_or_doc(f) and not (tree / f).exists()]
        for f in files:
            problem = rule(f, release_files) if rule else None
            if problem and f not in dropped:
                raise SourceError(f"patch {entry.id}: {f} {problem}; the install mode cannot carry it "
                                  f"(use install: pip-source)", file=self.recipe, field="engine.install")
        self._apply(tree, entry, diff, env, exclude=dropped)
        return AppliedPatch(id=entry.id, kind=entry.kind, pr=entry.pr, commit=entry.commit, file=entry.file,
                            sha256=digest, files=files, python_only=not any(is_native(f) for f in files),
                            dropped=dropped)

    def diff_files(self, entry: PatchEntry, diff: bytes) -> list[str]:
        """The files a diff touches (git apply --numstat reads the diff and applies nothing). Run
        outside any work tree: inside one, git filters the paths to that tree and prints nothing."""
        with tempfile.TemporaryDirectory(prefix="servebuild-numstat-") as tmp:
            patch = Path(tmp) / "change.diff"
            patch.write_bytes(diff)
            # -z: names exactly as they are (no C-style quoting of non-ASCII, tabs or quotes)
            numstat = git("apply", "--numstat", "-z", str(patch), cwd=Path(tmp), check=False,
                          env={"GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)})
        if numstat.returncode != 0:
            raise SourceError(f"patch {entry.id} is not a valid diff: "
                              f"{numstat.stderr.decode(errors='replace').strip()}",
                              file=self.recipe, field=f"engine.source.patches.{entry.id}")
        files = sorted(numstat_paths(numstat.stdout))
        if not files and diff.strip():
            raise SourceError(f"patch {entry.id} touches no file that git can read", file=self.recipe,
                              field=f"engine.source.patches.{entry.id}")
        return files

    def _apply(self, tree: Path, entry: PatchEntry, diff: bytes, env: dict, exclude: list[str] = ()) -> None:
        patch = tree.parent / f"{entry.id}.patch"
        patch.write_bytes(diff)
        proc = git("apply", "--3way", "--index", "--whitespace=nowarn", *[f"--exclude={_literal(f)}" for f in exclude],
                   str(patch), cwd=tree, env=env, check=False)
        if proc.returncode != 0:
            raise SourceError(self._conflict(entry, proc.stderr.decode(errors="replace")),
                              file=self.recipe, field=f"engine.source.patches.{entry.id}")

    @staticmethod
    def _conflict(entry: PatchEntry, stderr: str) -> str:
        file, hunk = "?", "?"
        m = re.search(r"patch failed: (.+):(\d+)", stderr)
        if m:
            file, hunk = m.group(1), f"at line {m.group(2)}"
        else:
            m = re.search(r"(?:error: )?(\S+): (does not exist in index|does not match index|No such file|patch does not apply)",
                          stderr)
            if m:
                file, hunk = m.group(1), m.group(2)
        conflict = re.search(r"Applied patch to '(.+)' with conflicts", stderr)
        if conflict:
            file, hunk = conflict.group(1), "3-way merge left conflicts"
        hint = f" (it requires {', '.join(entry.requires)})" if entry.requires else ""
        return (f"patch {entry.id} does not apply: file {file}, hunk {hunk}; an earlier entry of the "
                f"stack may be missing{hint}")

    def write_tarball(self, tree: Path, env: dict) -> tuple[Path, str]:
        """Sorted entries, owner 0, fixed mtime, no compression: the same bytes on every machine."""
        listing = git("ls-files", "-s", "-z", cwd=tree, env=env).stdout.split(b"\0")
        entries = []
        for raw in listing:
            if not raw:
                continue
            meta, name = raw.split(b"\t", 1)
            mode = meta.split()[0].decode()
            entries.append((name.decode(), mode))
        entries.sort()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            dirs: set[str] = set()
            for name, mode in entries:
                parts = name.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        tar.addfile(self._info(f"src/{d}", tarfile.DIRTYPE, 0o755))
                path = tree / name
                if mode == "120000":
                    info = self._info(f"src/{name}", tarfile.SYMTYPE, 0o777)
                    info.linkname = os.readlink(path)
                    tar.addfile(info)
                elif mode == "160000":
                    continue  # submodule: not part of the pinned tree
                else:
                    data = path.read_bytes()
                    info = self._info(f"src/{name}", tarfile.REGTYPE, 0o755 if mode == "100755" else 0o644)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        blob = buf.getvalue()
        digest = sha256_bytes(blob)
        final = self.root / "tarballs" / f"{digest}.tar"
        if not final.exists() or sha256_file(final) != digest:  # absent, or damaged since
            atomic_write(final, blob)
        return final, digest

    @staticmethod
    def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.mtime = TAR_MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info


def unpack_release(path: Path, kind: str, prefix: str, tree: Path) -> set[str]:
    """Unpack a wheel (its packages, not its .dist-info) or an sdist (its top directory stripped)
    under `prefix` of `tree`; return the tree paths it holds."""
    names: set[str] = set()

    def place(rel: str, data: bytes, mode: int) -> None:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise SourceError(f"{path.name} holds an unsafe path {rel!r}", field="engine")
        target = tree / prefix / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if mode & 0o111 else 0o644)
        names.add(prefix + rel)

    if kind == "wheel":
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                top = info.filename.split("/", 1)[0]
                if info.is_dir() or top.endswith((".dist-info", ".data")):
                    continue
                place(info.filename, zf.read(info), info.external_attr >> 16)
    else:
        with tarfile.open(path) as tf:
            for member in tf.getmembers():
                if not member.isfile() or "/" not in member.name:
                    continue
                place(member.name.split("/", 1)[1], tf.extractfile(member).read(), member.mode)
    return names
