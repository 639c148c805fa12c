"""The commit a release sdist was cut from, as its version file says (setuptools-scm / vcs-versioning
write `__commit_id__ = commit_id = 'g<short sha>'` into the package's _version.py), and the rule that
checks it against the recipe: the tag's commit, or the commit the recipe declares as
`engine.source.sdist_commit`. A release pipeline may cut the sdist from a commit after the tag
(vLLM v0.26.0 says `gf2654939e`; its tag's commit is 568afb3a1380), so the tree built
is named by what the sdist says, not by the tag alone. The file gives a short SHA only; nothing
here lengthens it.
"""

from __future__ import annotations

import ast
import re
import tarfile
import zlib
from pathlib import Path
from typing import Optional

from servebuild.errors import IntegrityError

MAX_BYTES = 64 << 10  # a generated version file is a few hundred bytes
GIT_NODE = re.compile(r"^g([0-9a-f]{7,40})\Z")  # setuptools-scm's node of a git checkout: `g` + the SHA


def commit_in(text: str) -> tuple[Optional[str], Optional[str]]:
    """(the value of `commit_id` as written, the git commit it names) from a version file's text;
    (None, None) where it assigns no commit_id or assigns None."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # not Python, or nested past the parser
        return None, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "commit_id" for t in node.targets):
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if not isinstance(value, str):
                return None, None
            found = GIT_NODE.match(value)
            return value, found.group(1) if found else None
    return None, None


def commit_in_tree(tree: Path, version_file: str) -> tuple[Optional[str], Optional[str]]:
    """`commit_in` of `version_file` in an unpacked tree ((None, None) if the tree has no such file)."""
    path = tree / version_file
    if not path.is_file() or path.is_symlink():
        return None, None
    with path.open("rb") as handle:
        return commit_in(handle.read(MAX_BYTES).decode("utf-8", "replace"))


def commit_in_sdist(sdist: Path, version_file: str) -> tuple[Optional[str], Optional[str]]:
    """`commit_in` of `version_file` in an sdist (under its one top directory), read from the archive.
    An archive that cannot be read is one line naming it."""
    try:
        with tarfile.open(sdist) as tf:
            for member in tf:
                parts = member.name.split("/", 1)
                if member.isfile() and len(parts) == 2 and parts[1] == version_file:
                    with tf.extractfile(member) as handle:
                        return commit_in(handle.read(MAX_BYTES).decode("utf-8", "replace"))
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error) as exc:  # truncated, corrupt, not a tarball
        raise IntegrityError(f"{sdist.name} cannot be read as an sdist ({type(exc).__name__}: {exc})") from None
    return None, None


def same_commit(a: str, b: str) -> bool:
    """Two SHAs, either of them short, that name the same commit as far as both go."""
    return a.startswith(b) or b.startswith(a)


def check_sdist_commit(
    found: Optional[str],
    written: Optional[str],
    tag_commit: str,
    declared: Optional[str],
    where: str,
    recipe_file: str,
) -> None:
    """Refuse an sdist whose version file names a commit that is neither the tag's nor the declared one
    (`where`: the sdist and its version file, e.g. `vllm-0.26.0.tar.gz:vllm/_version.py`); and a
    declared commit the sdist does not state. An sdist that states no commit, with none declared,
    passes: there is nothing to check it against."""
    field = "engine.source.sdist_commit"
    if found is None:
        if declared is None:
            return
        said = f"commit_id = {written!r}" if written else "no git commit"
        raise IntegrityError(
            f"{where} states {said}, the recipe declares sdist_commit {declared}",
            hint="remove sdist_commit or pin the sdist it names",
            file=recipe_file,
            field=field,
        )
    if same_commit(found, tag_commit) or (declared is not None and same_commit(found, declared)):
        return
    if declared is not None:
        raise IntegrityError(
            f"{where} says the sdist was cut from commit {found}, the recipe declares sdist_commit {declared}"
            f" (tag commit {tag_commit})",
            hint="pin the sdist of the declared commit, or declare the one it states",
            file=recipe_file,
            field=field,
        )
    raise IntegrityError(
        f"{where} says the sdist was cut from commit {found}, not the recipe's commit {tag_commit}",
        hint=f"if that is the release, declare `sdist_commit: {found}` under engine.source",
        file=recipe_file,
        field=field,
    )
