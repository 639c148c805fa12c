"""Why a patch does not apply: the first file and hunk git itself refused, read from `git apply --check -v`
(straight application) and the `git apply --3way` run that decided, mapped back to the hunk header of the
diff (`@@ -120,7 +120,9 @@`), so a conflict names its place instead of "does not apply"."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# `error: PATH: REASON` endings git apply prints for a whole file (apply.c), in the words we show
FILE_REASONS = {
    "patch does not apply": "does not apply",
    "does not exist in index": "is not in the tree",
    "No such file or directory": "is not in the tree",
    "already exists in index": "already exists in the tree",
    "already exists in working directory": "already exists in the tree",
    "does not match index": "does not match the index",
    "wrong type": "has another file type in the tree",
}
_BINARY = re.compile(r"^error: (?:cannot apply binary patch to|binary patch does not apply to|binary patch to) '(.+?)'")
_CONFLICT = re.compile(r"^Applied patch to '(.+)' with conflicts\.$")


@dataclass(frozen=True)
class Failure:
    """One file git refused: the hunk header that failed (None for a whole-file reason) and why."""

    path: str
    hunk: Optional[str]
    reason: str

    def shown(self) -> str:
        return f"{self.path} hunk {self.hunk} {self.reason}" if self.hunk else f"{self.path} {self.reason}"


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(name: str) -> str:
    """A path as git writes it in a diff header: C-quoted ("a/t\\tb", octal bytes) when it has odd characters."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            if re.match(r"[0-7]{3}", body[i + 1 : i + 4]):
                out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
            if body[i + 1] in _ESCAPES:
                out.append(_ESCAPES[body[i + 1]])
                i += 2
                continue
        out += c.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _diff_path(line: str) -> Optional[str]:
    """The path of a `--- a/PATH` or `+++ b/PATH` line (None for /dev/null), one leading directory
    stripped as git apply does by default (-p1)."""
    name = line[4:].rstrip("\r\n")
    if not name.startswith('"') and "\t" in name:
        name = name.split("\t", 1)[0]  # a plain diff's timestamp
    name = _unquote(name)
    if name == "/dev/null":
        return None
    return name.split("/", 1)[1] if "/" in name else name


def hunks(diff: bytes) -> dict[str, list[tuple[int, str]]]:
    """path -> [(old start, hunk header)] of every hunk of the diff, in order (both old and new path
    of a section name its hunks: a failure may name either). A hunk's body is skipped by its line
    counts, so a removed line that reads `-- x` is not taken for a file header."""
    out: dict[str, list[tuple[int, str]]] = {}
    lines = diff.decode("utf-8", "surrogateescape").split("\n")  # not splitlines: \f or \r may be content
    paths: list[str] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        if raw.startswith("diff --git "):
            paths = []
        elif raw.startswith("--- ") and i < len(lines) and lines[i].startswith("+++ "):
            paths = sorted({p for p in (_diff_path(raw), _diff_path(lines[i])) if p})
            i += 1
            continue
        m = re.match(r"^(@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@)", raw)
        if not m or not paths:
            continue
        for p in paths:
            out.setdefault(p, []).append((int(m.group(2)), m.group(1)))
        old = int(m.group(3)) if m.group(3) is not None else 1
        new = int(m.group(4)) if m.group(4) is not None else 1
        while i < len(lines) and (old > 0 or new > 0):
            body = lines[i]
            i += 1
            if body.startswith("\\"):  # "\ No newline at end of file"
                continue
            tag = body[:1]
            if tag in (" ", ""):
                old, new = old - 1, new - 1
            elif tag == "-":
                old -= 1
            elif tag == "+":
                new -= 1
            else:
                i -= 1  # not a hunk line: the counts were wrong; read it as a header
                break
    return out


def _hunk_at(table: dict[str, list[tuple[int, str]]], path: str, line: int) -> str:
    """The header of the hunk git reported as `patch failed: PATH:LINE` (LINE is its old start)."""
    for start, header in table.get(path, []):
        if start == line:
            return header
    return f"at line {line}"


def failures(stderr: str, diff: bytes) -> list[Failure]:
    """The files a `git apply` run refused, in the order git reported them; for each, its first
    failing hunk where git names one."""
    table = hunks(diff)
    found: dict[str, Failure] = {}
    for line in stderr.splitlines():
        line = line.rstrip()
        conflict = _CONFLICT.match(line)
        binary = _BINARY.match(line)
        if line.startswith("error: patch failed: "):
            path, _, number = line[len("error: patch failed: ") :].rpartition(":")
            if path and number.isdigit() and path not in found:
                found[path] = Failure(path, _hunk_at(table, path, int(number)), "does not apply")
        elif conflict:
            found.setdefault(conflict.group(1), Failure(conflict.group(1), None, "conflicts in a 3-way merge"))
        elif binary:
            found.setdefault(binary.group(1), Failure(binary.group(1), "(binary)", "does not apply"))
        elif line.startswith("error: "):
            for ending, reason in FILE_REASONS.items():
                if line.endswith(": " + ending):
                    path = line[len("error: ") : -len(": " + ending)]
                    if path and path not in found:
                        found[path] = Failure(path, None, reason)
                    break
    return list(found.values())


def first_failure(straight: str, merged: str, diff: bytes) -> Optional[Failure]:
    """The first file the deciding 3-way run (`merged`'s stderr) refused, with the hunk the straight
    check (`straight`'s stderr, `git apply --check -v`) found failing in it; None if neither names one."""
    checked = failures(straight, diff)
    refused = failures(merged, diff)
    by_path = {f.path: f for f in checked}
    for f in refused:
        plain = by_path.get(f.path)
        if f.hunk is not None or plain is None:
            return f
        merged = "3-way" in f.reason
        if plain.hunk is not None:
            return Failure(f.path, plain.hunk, "does not apply, nor merge 3-way" if merged else f.reason)
        return Failure(f.path, None, f"{plain.reason} (and a 3-way merge conflicts)" if merged else f.reason)
    return checked[0] if checked else None
