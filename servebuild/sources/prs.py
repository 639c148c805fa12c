"""A recipe's PR entry -> the commit it names, read from the mirrored upstream (no GitHub API)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from servebuild.errors import InputError
from servebuild.recipe.schema import PatchEntry
from servebuild.sources.gitmirror import git
from servebuild.sources.stack import SourceCache


def find_pr_commit(cache: SourceCache, repo: Path, entry: PatchEntry) -> tuple[Optional[str], Optional[str], str]:
    """(commit, base, how) for a PR entry, from the mirrored upstream."""
    if entry.commit:
        return entry.commit, entry.base, "pinned in recipe"
    if entry.commit_hint:
        full = cache.resolve(repo, entry.commit_hint)
        if full is None:
            raise InputError(
                f"commit_hint {entry.commit_hint} of {entry.id} (PR #{entry.pr}) is not in the upstream",
                field=f"engine.source.patches.{entry.id}.commit_hint",
            )
        return full, entry.base, f"commit_hint {entry.commit_hint}"
    log = git("log", "--all", "--format=%H %s", "-E", f"--grep=\\(#{entry.pr}\\)$", cwd=repo, check=False)
    for line in log.stdout.decode().splitlines():
        sha, subject = line.split(" ", 1)
        if (
            subject.endswith(f"(#{entry.pr})")
            and not git("rev-parse", f"{sha}^2", cwd=repo, check=False).returncode == 0
        ):
            branch = cache.resolve(repo, "HEAD")
            merged = branch and git("merge-base", "--is-ancestor", sha, branch, cwd=repo, check=False).returncode == 0
            if merged:
                return sha, None, "squash-merge commit on the default branch"
    head = cache.resolve(repo, f"refs/pull/{entry.pr}/head")
    if head:
        base = git("merge-base", "HEAD", head, cwd=repo).stdout.decode().strip()
        return head, base, f"refs/pull/{entry.pr}/head against its merge-base"
    raise InputError(
        f"PR #{entry.pr} ({entry.id}) found neither as a squash-merge commit nor as refs/pull/{entry.pr}/head upstream",
        field=f"engine.source.patches.{entry.id}",
    )
