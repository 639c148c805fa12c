"""sources/applyfail.py reads git's own refusal: real `git apply --check -v` and `git apply --3way` runs on
small repositories made here, and the failing hunk mapped back to its `@@` header in the diff."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servebuild.sources import applyfail

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "LC_ALL": "C",
}


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, check=check)


def lines(n: int, tag: str = "") -> str:
    return "".join(f"line {i}{tag}\n" for i in range(1, n + 1))


def refusal(tmp_path: Path, base: dict[str, str], pr_from: dict[str, str], pr_to: dict[str, str]):
    """(first failure, diff) for a diff pr_from -> pr_to applied on `base`, as stack.py applies it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")

    def commit(files: dict[str, str], message: str) -> str:
        for p in repo.iterdir():
            if p.name != ".git":
                git(repo, "rm", "-rq", "--cached", p.name, check=False)
                subprocess.run(["rm", "-rf", str(p)], check=True)
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
        return git(repo, "rev-parse", "HEAD").stdout.decode().strip()

    a = commit(pr_from, "pr base")
    b = commit(pr_to, "pr")
    diff = git(repo, "-c", "core.quotepath=false", "diff", "--full-index", "--binary", a, b).stdout
    commit(base, "tree")
    (tmp_path / "change.diff").write_bytes(diff)
    straight = git(repo, "apply", "--check", "-v", "--index", str(tmp_path / "change.diff"), check=False)
    merged = git(repo, "apply", "--3way", "--index", str(tmp_path / "change.diff"), check=False)
    assert merged.returncode != 0
    return applyfail.first_failure(straight.stderr.decode(), merged.stderr.decode(), diff), diff


def test_the_failing_hunk_is_named_by_its_header_not_the_first_one(tmp_path):
    before = lines(40)
    after = before.replace("line 30\n", "line 30 changed\n").replace("line 3\n", "line 3 changed\n")
    base = before.replace("line 31\n", "line 31 moved on upstream\n")
    failure, diff = refusal(tmp_path, {"m.py": base}, {"m.py": before}, {"m.py": after})
    assert [h for _, h in applyfail.hunks(diff)["m.py"]] == ["@@ -1,6 +1,6 @@", "@@ -27,7 +27,7 @@"]
    assert failure.shown() == "m.py hunk @@ -27,7 +27,7 @@ does not apply, nor merge 3-way"


def test_a_file_the_base_does_not_have(tmp_path):
    failure, _ = refusal(
        tmp_path, {"other.py": "x\n"}, {"new_in_refactor.py": lines(5)}, {"new_in_refactor.py": lines(6)}
    )
    assert failure.shown() == "new_in_refactor.py is not in the tree"


def test_a_file_the_pr_creates_and_the_base_has(tmp_path):
    failure, _ = refusal(tmp_path, {"made.py": "already\n"}, {"x.py": "x\n"}, {"x.py": "x\n", "made.py": "new\n"})
    assert failure.shown() == "made.py already exists in the tree (and a 3-way merge conflicts)"


def test_odd_paths_and_a_removed_line_that_looks_like_a_header(tmp_path):
    """A path with a space and a non-ASCII letter; a removed line `-- x` inside the first hunk must not
    be taken for the next file's header."""
    name = "dir/a fil\u00e9.py"
    before = "-- x\n" + lines(20)
    after = lines(20).replace("line 15\n", "line 15 changed\n")
    base = before.replace("line 16\n", "line 16 upstream\n")
    failure, diff = refusal(tmp_path, {name: base}, {name: before}, {name: after})
    assert applyfail.hunks(diff)[name][0][1] == "@@ -1,4 +1,3 @@"
    assert failure.shown() == f"{name} hunk @@ -13,7 +12,7 @@ does not apply, nor merge 3-way"


def test_quoted_diff_paths_are_read_back():
    assert applyfail._unquote('"a/t\\tb\\303\\251.py"') == "a/t\tb\u00e9.py"
    assert applyfail._diff_path('+++ "b/x\\"y.py"') == 'x"y.py'
    assert applyfail._diff_path("--- /dev/null") is None


def test_binary_and_unknown_refusals():
    assert applyfail.failures("error: cannot apply binary patch to 'w.bin' without full index line\n", b"") == [
        applyfail.Failure("w.bin", "(binary)", "does not apply")
    ]
    assert applyfail.first_failure("", "error: something git has never said\n", b"") is None
