"""Git mirrors: bare repositories of upstreams keyed by URL, holding only what a stack pins.

A mirror fetches branches and tags plus the pull refs a stack names (never every refs/pull/*),
is created atomically (an interrupted fetch never leaves a half mirror) and is checked before use.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from servebuild import procs
from servebuild.errors import HostError, InputError, IntegrityError, Refused, ToolError
from servebuild.fsutil import sha256_bytes

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
UNREACHABLE = re.compile(
    r"(Could not resolve host|unable to access|Connection refused|"
    r"Could not read from remote|does not appear to be a git repository|"
    r"unable to connect|Network is unreachable|timed out)",
    re.I,
)


def git(
    *args: str, cwd: Optional[Path] = None, env: Optional[dict] = None, check: bool = True
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    proc = procs.run(["git", *args], "git", cwd=cwd, env=full_env, capture_output=True)
    if check and proc.returncode != 0:  # one line that names the git command, not a CalledProcessError
        raise ToolError(f"git {args[0]} failed (exit {proc.returncode}): {procs.last_line(proc)}", field="git")
    return proc


class GitMirrors:
    """Bare mirrors under ROOT/git, one per upstream URL (a config may map a URL to a mirror)."""

    def __init__(
        self, root: Path, mirrors: Optional[dict[str, str]] = None, offline: bool = False, recipe: str = "recipe"
    ):
        self.root = root
        self.mirrors = mirrors or {}
        self.offline = offline
        self.recipe = recipe  # errors name it
        (root / "git").mkdir(parents=True, exist_ok=True)

    def repo_dir(self, url: str) -> Path:
        return self.root / "git" / (sha256_bytes(url.encode())[:24] + ".git")

    def _fetch_into(self, repo: Path, url: str, prs: tuple[int, ...] = ()) -> None:
        """Branches and tags, plus only the pull refs this stack names (never every refs/pull/*)."""
        remote = self.mirrors.get(url, url)
        pull = [f"+refs/pull/{n}/head:refs/pull/{n}/head" for n in sorted(set(prs))]
        if pull:  # a PR ref the upstream lacks must not fail the whole fetch
            listed = git(
                "ls-remote", "--", remote, *[f"refs/pull/{n}/head" for n in sorted(set(prs))], cwd=repo, check=False
            ).stdout.decode()
            pull = [r for r in pull if r.split(":")[0][1:] in listed]
        proc = git(
            "fetch",
            "--quiet",
            "--prune",
            "--no-tags",
            "--",
            remote,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
            *pull,
            cwd=repo,
            check=False,
        )
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            detail = err[-1] if err else f"git exit {proc.returncode}"
            host = urlparse(remote).hostname or remote
            if UNREACHABLE.search(proc.stderr.decode(errors="replace")):
                raise HostError(
                    f"upstream {host} is unreachable ({detail})",
                    hint=f"build with --offline from a filled cache, or map {url} to a mirror in the "
                    f"servebuild config (git_mirrors)",
                    file=self.recipe,
                    field="engine.source.url",
                )
            raise HostError(f"fetching {remote} failed: {detail}", file=self.recipe, field="engine.source.url")

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
                raise IntegrityError(
                    f"source cache entry {repo} for {url} is corrupted",
                    hint="run fetch without --offline to refetch it",
                    file=self.recipe,
                    field="engine.source.url",
                )
            shutil.rmtree(repo)
        if not repo.exists():
            if self.offline:
                raise Refused(
                    f"{url} is not in the source cache and --offline was given",
                    hint="run `invoke fetch` first",
                    file=self.recipe,
                    field="engine.source.url",
                )
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
            raise InputError(f"commit {missing[0]} not found in {where}", file=self.recipe, field="engine.source")
        return repo

    @staticmethod
    def _healthy(repo: Path) -> bool:
        return git("rev-parse", "--git-dir", cwd=repo, check=False).returncode == 0 and (repo / "objects").is_dir()

    @staticmethod
    def has_commit(repo: Path, commit: str) -> bool:
        return git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo, check=False).returncode == 0

    def resolve(self, repo: Path, rev: str) -> Optional[str]:
        proc = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None
