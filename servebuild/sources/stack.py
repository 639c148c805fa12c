"""Prepared engine sources: lay out the pinned tree (gitmirror.py, archives.py), apply the patch
stack in order, and remember the deterministic tarball under a key of everything it depends on."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from servebuild.sources import applyfail, pycheck, releases
from servebuild.sources.archives import write_tarball
from servebuild.errors import InputError, IntegrityError, Refused
from servebuild.fsutil import atomic_write, canonical_json, read_input, sha256_bytes, sha256_file
from servebuild.sources.gitmirror import GitMirrors, git
from servebuild.sources.versionfile import commit_in_sdist, commit_in_tree
from servebuild.patchfiles import is_native, is_test_or_doc
from servebuild.recipe.schema import EngineSource, PatchEntry

# (path, release files or None) -> why the install mode cannot carry a change to path, or None
PatchRule = Callable[[str, Optional[set]], Optional[str]]
DIFF_OPTS = ["-c", "diff.algorithm=myers", "-c", "core.quotepath=false"]


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
    created: list[str] = field(default_factory=list)  # files absent from the tree before this patch

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "pr": self.pr,
            "commit": self.commit,
            "file": self.file,
            "sha256": self.sha256,
            "files": self.files,
            "python_only": self.python_only,
            "dropped": self.dropped,
            "created": self.created,
        }


@dataclass
class PreparedSource:
    url: str
    commit: str
    tarball: Path
    tarball_sha256: str
    patches: list[AppliedPatch] = field(default_factory=list)
    tree: dict = field(default_factory=lambda: {"from": "git"})  # where the unpatched tree came from
    deleted: list[str] = field(default_factory=list)  # changed files the patched tree no longer has

    def as_dict(self) -> dict:
        return {
            "url": self.url,
            "commit": self.commit,
            "tarball_sha256": self.tarball_sha256,
            "tree": self.tree,
            "patches": [p.as_dict() for p in self.patches],
            "deleted": self.deleted,
        }

    def changed_files(self) -> list[str]:
        """Every file of the tree the stack changes (applied, not dropped), sorted."""
        return sorted({f for p in self.patches for f in p.files if f not in p.dropped})

    def created_files(self) -> list[str]:
        """The files the stack adds to the tree (and does not delete again), sorted."""
        return sorted({f for p in self.patches for f in p.created} - set(self.deleted))

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
            paths += [f.decode("utf-8", "surrogateescape") for f in fields[i + 1 : i + 3] if f]
            i += 3
    return paths


def _literal(path: str) -> str:
    """A path as a git wildmatch pattern that matches only itself."""
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def default_cache_dir() -> Path:
    """$SERVEBUILD_CACHE (a relative path is taken from the working directory, once, here: git runs in
    other directories), else ~/.cache/servebuild."""
    env = os.environ.get("SERVEBUILD_CACHE")
    return Path(env).absolute() if env else Path.home() / ".cache" / "servebuild"


class SourceCache(GitMirrors):
    """The prepared engine sources: a tree (pinned commit or release artifact) with the patch stack
    applied, as a tarball keyed by its sha256; mirroring is GitMirrors'."""

    def __init__(
        self, root: Path, mirrors: Optional[dict[str, str]] = None, offline: bool = False, recipe: str = "recipe"
    ):
        super().__init__(root, mirrors, offline, recipe)
        (root / "tarballs").mkdir(parents=True, exist_ok=True)

    def write_tarball(self, tree: Path, env: dict) -> tuple[Path, str]:
        return write_tarball(tree, env, self.root / "tarballs")

    # -- patches

    def entry_diff(self, repo: Path, entry: PatchEntry, root: Path) -> bytes:
        if entry.file is not None:
            return read_input(root / entry.file, "patch", entry.file)
        assert entry.commit is not None
        base = entry.base or f"{entry.commit}^1"
        return git(
            *DIFF_OPTS,
            "diff",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            base,
            entry.commit,
            cwd=repo,
        ).stdout

    def prepare(
        self,
        source: EngineSource,
        project_root: Path,
        work: Path,
        release: Optional[tuple[Path, str, str, str]] = None,
        rule: Optional[PatchRule] = None,
        rule_key: str = "",
        version_file: Optional[str] = None,
        python: Optional[str] = None,
    ) -> PreparedSource:
        """Lay out the unpatched tree (the pinned commit, or the release artifact `release` =
        (file, sha256, artifact kind, prefix)), apply the stack in order, write the tarball. A release
        tree's `version_file` (its path in the artifact) is read for the commit the artifact was cut from, recorded in
        the tree's origin (`sdist_commit`, as the file states it, often short).

        The result is remembered under a key of everything it depends on (tree origin, each
        entry's diff bytes, the mode's rule as `rule_key`): an A/B variant or a rebuild with the
        same inputs reuses its tarball (checked by hash) instead of laying out the tree again.

        Before the tarball is written, the patched Python is checked statically (pycheck.py) for the
        target interpreter `python` ("3.12"): a patch that leaves a file that cannot compile, or an
        import of a module or name the tree lacks, is refused in one line naming it."""
        unresolved = [e for e in source.patches if e.pr is not None and e.commit is None]
        if unresolved:
            e = unresolved[0]
            pinned = f"only the short commit_hint {e.commit_hint}" if e.commit_hint else "no pinned commit"
            raise Refused(
                f"patch entry {e.id} (PR #{e.pr}) has {pinned}; run `invoke lock --recipe NAME` "
                f"where the upstream is reachable",
                file=self.recipe,
                field=f"engine.source.patches.{e.id}.commit",
            )
        commits = [e.commit for e in source.patches if e.commit] + [e.base for e in source.patches if e.base]
        needs_git = release is None or bool(commits)
        prs = tuple(e.pr for e in source.patches if e.pr is not None)  # a PR head may live only under refs/pull
        repo = (
            self.mirror(source.url, ([source.commit] if release is None else []) + commits, prs=prs)
            if needs_git
            else None
        )

        diffs = {entry.id: self._checked_diff(repo, entry, project_root) for entry in source.patches}
        memo = (
            self.root
            / "prepared"
            / (
                sha256_bytes(
                    canonical_json(
                        {
                            "v": 4,
                            "url": source.url,
                            "commit": source.commit,
                            "subdir": source.subdir,
                            "release": list(release[1:]) if release else None,
                            "rule": rule_key,
                            "version_file": version_file,
                            "python": python,
                            "patches": [
                                [e.id, e.kind, e.pr, e.commit, e.base, e.file, sha256_bytes(diffs[e.id])]
                                for e in source.patches
                            ],
                        }
                    ).encode()
                )
                + ".json"
            )
        )
        remembered = self._remembered(memo)
        if remembered is not None:
            return remembered
        tree = work / "tree"
        env, origin, release_files = self._lay_out(source, tree, repo, release, version_file)
        applied: list[AppliedPatch] = []
        try:
            for entry in source.patches:
                try:
                    applied.append(
                        self._apply_entry(tree, project_root, entry, diffs[entry.id], env, release_files, rule)
                    )
                except PatchConflict as conflict:
                    raise self._conflict(source, origin, repo, entry, [p.id for p in applied], conflict) from None
            self._check_python(source, tree, work, repo, release, origin, applied, diffs, python)
        except BaseException:
            shutil.rmtree(tree, ignore_errors=True)  # no half-patched tree is left to be taken for the source
            raise
        tar_path, tar_sha = self.write_tarball(tree, env)
        changed = sorted({f for p in applied for f in p.files if f not in p.dropped})
        deleted = [f for f in changed if not (tree / f).exists() and not (tree / f).is_symlink()]
        prepared = PreparedSource(source.url, source.commit, tar_path, tar_sha, applied, origin, deleted)
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(memo, canonical_json({**prepared.as_dict(), "tarball": tar_path.name}).encode())
        return prepared

    def _remembered(self, memo: Path) -> Optional[PreparedSource]:
        """A PreparedSource from an earlier identical preparation, if its tarball is intact."""
        try:
            data = json.loads(memo.read_text())
            tarball = self.root / "tarballs" / data["tarball"]
            if sha256_file(tarball) != data["tarball_sha256"]:
                return None
            patches = [AppliedPatch(**p) for p in data["patches"]]
            return PreparedSource(
                data["url"], data["commit"], tarball, data["tarball_sha256"], patches, data["tree"], data["deleted"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, partial or from another version: prepare afresh

    def _checked_diff(self, repo: Optional[Path], entry: PatchEntry, project_root: Path) -> bytes:
        diff = self.entry_diff(repo, entry, project_root)
        digest = sha256_bytes(diff)
        if entry.sha256 is not None and digest != entry.sha256:
            what = entry.file or f"PR #{entry.pr} at {entry.commit}"
            raise IntegrityError(
                f"patch sha256 mismatch for {entry.id} ({what}): recorded {entry.sha256}, got {digest}",
                file=self.recipe,
                field=f"engine.source.patches.{entry.id}.sha256",
            )
        return diff

    def _lay_out(
        self,
        source: EngineSource,
        tree: Path,
        repo: Optional[Path],
        release: Optional[tuple[Path, str, str, str]],
        version_file: Optional[str] = None,
    ) -> tuple[dict, dict, Optional[set]]:
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
        release_files = releases.check_out(self.root, path, digest, kind, prefix, tree, env)
        origin = {
            "from": f"pypi-{kind}",
            "file": path.name,
            "sha256": digest,
            "prefix": prefix,
            "tag_commit": source.commit,
        }
        if version_file is not None:  # from the artifact itself: its own .gitignore may keep the file out of the tree
            written, commit = (
                commit_in_sdist(path, version_file) if kind == "sdist" else commit_in_tree(tree / prefix, version_file)
            )
            origin.update({"version_file": version_file, "commit_id": written, "sdist_commit": commit})
        return env, origin, release_files

    def _apply_entry(
        self,
        tree: Path,
        project_root: Path,
        entry: PatchEntry,
        diff: bytes,
        env: dict,
        release_files: Optional[set],
        rule: Optional[PatchRule],
    ) -> AppliedPatch:
        """Check every path of the entry's (hash-checked) diff against the mode's rule, then apply it."""
        digest = sha256_bytes(diff)
        files = self.diff_files(entry, diff)
        # test/doc files a release artifact does not ship are dropped (and recorded), not applied
        dropped = [
            f
            for f in files
            if release_files is not None and f not in release_files and is_test_or_doc(f) and not (tree / f).exists()
        ]
        for f in files:
            problem = rule(f, release_files) if rule else None
            if problem and f not in dropped:
                raise InputError(
                    f"patch {entry.id}: {f} {problem}; the install mode cannot carry it (use install: pip-source)",
                    file=self.recipe,
                    field="engine.install",
                )
        created = [f for f in files if f not in dropped and not (tree / f).exists() and not (tree / f).is_symlink()]
        self._apply(tree, entry, diff, env, exclude=dropped)
        return AppliedPatch(
            id=entry.id,
            kind=entry.kind,
            pr=entry.pr,
            commit=entry.commit,
            file=entry.file,
            sha256=digest,
            files=files,
            python_only=not any(is_native(f) for f in files),
            dropped=dropped,
            created=created,
        )

    def diff_files(self, entry: PatchEntry, diff: bytes) -> list[str]:
        """The files a diff touches (git apply --numstat reads the diff and applies nothing). Run
        outside any work tree: inside one, git filters the paths to that tree and prints nothing."""
        with tempfile.TemporaryDirectory(prefix="servebuild-numstat-") as tmp:
            patch = Path(tmp) / "change.diff"
            patch.write_bytes(diff)
            # -z: names exactly as they are (no C-style quoting of non-ASCII, tabs or quotes)
            numstat = git(
                "apply",
                "--numstat",
                "-z",
                str(patch),
                cwd=Path(tmp),
                check=False,
                env={"GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)},
            )
        if numstat.returncode != 0:
            raise InputError(
                f"patch {entry.id} is not a valid diff: {numstat.stderr.decode(errors='replace').strip()}",
                file=self.recipe,
                field=f"engine.source.patches.{entry.id}",
            )
        files = sorted(numstat_paths(numstat.stdout))
        if not files and diff.strip():
            raise InputError(
                f"patch {entry.id} touches no file that git can read",
                file=self.recipe,
                field=f"engine.source.patches.{entry.id}",
            )
        return files

    def _apply(self, tree: Path, entry: PatchEntry, diff: bytes, env: dict, exclude: list[str] = ()) -> None:
        """Apply one diff to the tree and its index, 3-way where the blobs are at hand. A straight
        `git apply --check -v` first names the hunks that do not apply as they are; if the 3-way run
        fails too, PatchConflict carries the first file it refused, with that hunk."""
        patch = tree.parent / f"{entry.id}.patch"
        patch.write_bytes(diff)
        opts = ["--index", "--whitespace=nowarn", *[f"--exclude={_literal(f)}" for f in exclude]]
        straight = git("apply", "--check", "-v", *opts, str(patch), cwd=tree, env=env, check=False)
        proc = git("apply", "--3way", *opts, str(patch), cwd=tree, env=env, check=False)
        if proc.returncode != 0:
            failure = applyfail.first_failure(
                straight.stderr.decode(errors="replace"), proc.stderr.decode(errors="replace"), diff
            )
            raise PatchConflict(failure, proc.stderr.decode(errors="replace"))

    def _conflict(
        self,
        source: EngineSource,
        origin: dict,
        repo: Optional[Path],
        entry: PatchEntry,
        before: list[str],
        conflict: "PatchConflict",
    ) -> InputError:
        """The one line for an entry that does not apply: what (the PR and its commit, or the file),
        on what (tag, commit, the entries applied before it), where (first file and hunk), and the
        way out (a backport file)."""
        onto = self._onto(source, origin, [])
        onto += f" with {', '.join(before)} applied before it" if before else " with no patch before it"
        failure = conflict.failure
        if failure is None:
            last = [line for line in conflict.stderr.splitlines() if line.strip()][-1:] or ["git apply failed"]
            where = f"git apply: {last[0].strip()}"
        else:
            where = failure.shown()
        base = source.tag or "this base"
        if entry.pr is None:
            return InputError(
                f"{entry.file} does not apply on {onto}: {where}",
                hint=f"refresh {entry.file} against {base} and the entries before it",
                file=self.recipe,
                field=f"engine.source.patches.{entry.id}",
            )
        return InputError(
            f"PR #{entry.pr} (commit {entry.commit}) does not apply on {onto}: {where}{self._lag(repo, source, entry)}",
            hint=f"write a backport patch of PR #{entry.pr} for {base} under patches/ and list it with `file:` "
            f"in place of `pr: {entry.pr}`",
            file=self.recipe,
            field=f"engine.source.patches.{entry.id}",
        )

    def _check_python(
        self,
        source: EngineSource,
        tree: Path,
        work: Path,
        repo: Optional[Path],
        release: Optional[tuple[Path, str, str, str]],
        origin: dict,
        applied: list[AppliedPatch],
        diffs: dict[str, bytes],
        python: Optional[str],
    ) -> None:
        """Refuse the first finding of the static Python check that the unpatched tree does not have."""
        changed = sorted({f for p in applied for f in p.files if f not in p.dropped})
        words = pycheck.last_names(tree, source.subdir, changed)
        if not words:
            return
        # the files that name a changed module, found by git grep (the SGLang tree: 0.1 s, not 1.5 s)
        spec = "*.py" if source.subdir in (".", "") else f"{source.subdir.strip('/')}/*.py"
        grep = git(
            "grep", "-l", "-z", "-F", "-w", *[a for w in words for a in ("-e", w)], "--", spec, cwd=tree, check=False
        )
        candidates = grep.stdout.decode("utf-8", "surrogateescape").split("\0") if grep.returncode in (0, 1) else None
        files = pycheck.scope(tree, source.subdir, changed, [c for c in candidates if c] if candidates else candidates)
        added = pycheck.added_lines([diffs[p.id] for p in applied])
        findings = pycheck.check(tree, source.subdir, files, set(changed), python, added)
        if not findings:
            return
        base = work / "base-tree"  # the unpatched tree, laid out again only when there is something to compare
        try:
            self._lay_out(source, base, repo, release)
            known = {f.key() for f in pycheck.check(base, source.subdir, files, set(changed), python, added)}
        finally:
            shutil.rmtree(base, ignore_errors=True)
        new = [f for f in findings if f.key() not in known]
        if not new:
            return
        order = {p.id: i for i, p in enumerate(applied)}
        culprit, finding = min(
            ((self._culprit(f, applied, diffs), f) for f in new),
            key=lambda cf: (order[cf[0].id], cf[1].path, cf[1].line),
        )
        entry = next(e for e in source.patches if e.id == culprit.id)
        onto = self._onto(source, origin, [p.id for p in applied])
        what = f"PR #{entry.pr} (commit {entry.commit})" if entry.pr is not None else entry.file
        tag = source.tag or "the base"
        wrote = finding.path in culprit.files and bool(finding.text) and _adds_line(diffs[culprit.id], finding.text)
        why = (
            ""
            if finding.kind == "syntax"
            else f"it needs an upstream change {tag} lacks: "
            if wrote
            else f"{tag}'s own code still imports what it removes: "
        )
        hint = why + (
            f"write a backport patch of PR #{entry.pr} for {tag} under patches/ and list it with `file:` "
            f"in place of `pr: {entry.pr}`"
            if entry.pr is not None
            else f"refresh {entry.file} against {tag} and the entries before it"
        )
        raise Refused(
            f"{what}: with it applied, {finding.shown()} (static check of the patched tree: {onto})",
            hint=hint,
            file=self.recipe,
            field=f"engine.source.patches.{entry.id}",
        )

    @staticmethod
    def _culprit(finding: pycheck.Finding, applied: list[AppliedPatch], diffs: dict[str, bytes]) -> AppliedPatch:
        """The entry a finding is held against: the last that added the statement's line to the file,
        else the last that changed the module it imports (it removed the name), else the last that
        changed the file."""
        touching = [p for p in applied if finding.path in p.files and finding.path not in p.dropped]
        if finding.text:
            added = [p for p in touching if _adds_line(diffs[p.id], finding.text)]
            if added:
                return added[-1]
        if finding.module:
            stem = finding.module.replace(".", "/")
            targets = {f"{stem}.py", f"{stem}/__init__.py", finding.detail}
            changers = [p for p in applied if any(f == t or f.endswith("/" + t) for f in p.files for t in targets if t)]
            if changers:
                return changers[-1]
        return touching[-1] if touching else applied[-1]

    @staticmethod
    def _onto(source: EngineSource, origin: dict, before: list[str]) -> str:
        onto = f"{source.tag} (commit {source.commit})" if source.tag else f"commit {source.commit}"
        if origin.get("from", "git") != "git":
            onto += f" as its {origin['from'].removeprefix('pypi-')} from PyPI"
        return onto + (f" with {', '.join(before)} applied" if before else "")

    @staticmethod
    def _lag(repo: Optional[Path], source: EngineSource, entry: PatchEntry) -> str:
        """How far past the base the PR was written: the upstream commits its diff's base has and the
        tree lacks (a refactor it builds on), or nothing where that cannot be told."""
        parent = entry.base or f"{entry.commit}^1"
        if repo is None:
            return ""
        count = git("rev-list", "--count", f"{source.commit}..{parent}", cwd=repo, check=False)
        sha = git("rev-parse", "--verify", "--quiet", f"{parent}^{{commit}}", cwd=repo, check=False)
        n = count.stdout.decode().strip()
        if count.returncode != 0 or sha.returncode != 0 or not n.isdigit() or n == "0":
            return ""
        commits = "commit" if n == "1" else "commits"
        return (
            f" (it was written on upstream {sha.stdout.decode().strip()[:12]}, which has {n} {commits} "
            f"{source.tag or source.commit[:12]} lacks)"
        )


def _adds_line(diff: bytes, text: str) -> bool:
    """Whether the diff adds a line that reads `text` (leading and trailing blanks aside)."""
    want = text.strip().encode("utf-8", "surrogateescape")
    return any(
        line[:1] == b"+" and not line.startswith(b"+++ ") and line[1:].strip() == want for line in diff.split(b"\n")
    )


class PatchConflict(Exception):
    """An entry git could not apply: the first file and hunk it refused (None if git named none)."""

    def __init__(self, failure: Optional[applyfail.Failure], stderr: str):
        super().__init__(failure.shown() if failure else stderr)
        self.failure = failure
        self.stderr = stderr
