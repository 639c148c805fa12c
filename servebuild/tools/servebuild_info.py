"""What this image is, from what its build left in it (runs in the image; standard library only).

usage: python /opt/servebuild/tools/servebuild_info.py [--json] [--manifest FILE]

Reads the build manifest ($SERVEBUILD_MANIFEST, else /opt/servebuild/manifest.json), the profile check's
record and the seed's record beside it, and prints: the recipe and variant, the engine and its version,
the tree it was built from (a release sdist: the tag's commit and the commit the sdist says it was cut from),
each patch of the stack (its PR and commit or its file, and the files it changes), the engine each
build-time stage ran on, each launch profile with the parser that accepted it, and the kernels the seed
holds. --json prints the same as one JSON object. A missing or unreadable record, one that is not a
regular file (a FIFO is not waited on), larger than 16 MiB, nested too deep, or whose fields are not of
their kind (a list for an object, a number for a text, NaN, a text over 4,096 characters) is one line
naming the file and field, exit 2, and nothing on stdout. Text output shows every character that is not
printable (escape sequences, line breaks, direction marks) as its Python escape, never raw.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys

MANIFEST = "/opt/servebuild/manifest.json"
MAX_BYTES = 16 << 20  # a record larger than this is not one a build wrote
MAX_TEXT = 4096  # characters of one text field
MAX_ARGS = 64  # arguments of one seed kernel
MAX_NUMBER = 2**63  # magnitude of a number field (a PR number, a kernel's argument)


class Bad(ValueError):
    """One line: the file, the field and what is wrong with it."""


def shown(text: str) -> str:
    """`text` with every character that is not printable (control and escape characters, line breaks,
    format and direction marks, lone surrogates) written as its Python escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _kind(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a text", int: "a number", float: "a fractional number"}[
        type(value)
    ]


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_record(path: str, what: str, required: bool) -> dict:
    """A JSON object from the regular file `path`; {} for an optional one that is absent. Raises Bad (one line
    naming the file). scripts/first_start_gpu.py reads its own record with it too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    except FileNotFoundError:
        if required:
            raise Bad(f"{path}: no {what} (is this an image servebuild built?)") from None
        return {}
    except OSError as exc:
        raise Bad(f"{path}: the {what} cannot be read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Bad(f"{path}: the {what} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise Bad(f"{path}: the {what} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise Bad(f"{path}: the {what} is larger than {MAX_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise Bad(f"{path}: the {what} is nested too deep") from None
    except ValueError as exc:  # not UTF-8, not JSON, NaN/Infinity, a number of more digits than Python reads
        raise Bad(f"{path}: the {what} is not JSON: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(data, dict):
        raise Bad(f"{path}: the {what} is {_kind(data)}, not a JSON object")
    return data


class Record:
    """Typed reads of one JSON record's fields; each wrong kind is Bad naming the file and the field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, field: str, problem: str):
        raise Bad(f"{self.path}: {field}: {problem}")

    def obj(self, parent: dict, key: str, field: str) -> dict:
        """An object field; {} where absent or null."""
        return self.as_obj(parent.get(key), field)

    def as_obj(self, value, field: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(field, f"is {_kind(value)}, not an object")
        return value

    def items(self, parent: dict, key: str, field: str) -> list:
        """A list field; [] where absent or null."""
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"is {_kind(value)}, not a list")
        return value

    def text(self, value, field: str):
        """A text (or null)."""
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(field, f"is {_kind(value)}, not a text")
        if len(value) > MAX_TEXT:
            self.fail(field, f"is a text of {len(value)} characters (more than {MAX_TEXT})")
        return value

    def texts(self, parent: dict, key: str, field: str) -> list:
        return [self.text(v, f"{field}[{i}]") for i, v in enumerate(self.items(parent, key, field))]

    def whole(self, value, field: str):
        """A whole number (or null) of at most MAX_NUMBER in magnitude; true/false is not one."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, f"is {_kind(value)}, not a whole number")
        if abs(value) >= MAX_NUMBER:
            self.fail(field, f"is a number of {len(str(abs(value)))} digits (at most {MAX_NUMBER})")
        return value

    def scalar(self, value, field: str):
        """A kernel argument: a text, a whole number, a finite bounded number, true/false or null."""
        if isinstance(value, (dict, list)):
            self.fail(field, f"is {_kind(value)}, not a text or number")
        if isinstance(value, float) and not abs(value) < MAX_NUMBER:
            self.fail(field, "is not a finite number of at most 2**63")
        if isinstance(value, str):
            return self.text(value, field)
        if isinstance(value, int) and not isinstance(value, bool):
            return self.whole(value, field)
        return value

    def entries(self, parent: dict, key: str, field: str) -> list:
        """A list field of objects: [(the object, its field name)]."""
        out = []
        for i, entry in enumerate(self.items(parent, key, field)):
            if not isinstance(entry, dict):
                self.fail(f"{field}[{i}]", f"is {_kind(entry)}, not an object")
            out.append((entry, f"{field}[{i}]"))
        return out


def _short(value) -> str:
    return str(value)[:12]


def _patch(r: Record, entry: dict, field: str) -> dict:
    pr = r.whole(entry.get("pr"), f"{field}.pr")
    commit = r.text(entry.get("commit"), f"{field}.commit")
    file = r.text(entry.get("file"), f"{field}.file")
    origin = f"PR #{pr} at {_short(commit)}" if pr is not None else file or _short(commit)
    return {
        "id": r.text(entry.get("id"), f"{field}.id"),
        "from": origin,
        "files": r.texts(entry, "files", f"{field}.files"),
    }


def _tree(r: Record, source: dict) -> str:
    """Where the unpatched tree came from: the commit, or the release artifact, the tag's commit and the
    commit the artifact says it was cut from (its version file's commit_id, as short as it is there)."""
    tree = r.obj(source, "tree", "engine.source.tree")
    got = {
        key: r.text(tree.get(key), f"engine.source.tree.{key}")
        for key in ("from", "commit", "file", "tag_commit", "version_file", "sdist_commit", "commit_id")
    }
    origin = got["from"] if "from" in tree else "git"
    if origin == "git":
        return f"git commit {_short(got['commit'] or r.text(source.get('commit'), 'engine.source.commit'))}"
    line = f"{got['file']} ({origin}) of the tag commit {_short(got['tag_commit'])}"
    if "version_file" not in tree:
        return line
    if got["sdist_commit"] is None:
        return f"{line}; its {got['version_file']} names no commit"
    return f"{line}, cut from commit {got['sdist_commit']} ({got['version_file']}: commit_id = {got['commit_id']!r})"


def _engine(r: Record, manifest: dict):
    engine = r.obj(manifest, "engine", "engine")
    if not engine:
        return None
    source = r.obj(engine, "source", "engine.source")
    return {
        "name": r.text(engine.get("name"), "engine.name"),
        "version": r.text(engine.get("installed_version"), "engine.installed_version")
        or r.text(engine.get("version"), "engine.version"),
        "release": r.text(engine.get("version"), "engine.version"),
        "install": r.text(engine.get("install"), "engine.install"),
        "tree": _tree(r, source) if source else None,
        "patches": [_patch(r, p, f) for p, f in r.entries(source, "patches", "engine.source.patches")],
    }


def describe(manifest_path: str) -> dict:
    manifest = read_record(manifest_path, "build manifest", required=True)
    here = os.path.dirname(manifest_path)
    checked_path, seed_path = os.path.join(here, "profiles-checked.json"), os.path.join(here, "seed", "aot.json")
    checked = read_record(checked_path, "profile check's record", required=False)
    seed = read_record(seed_path, "seed's record", required=False)
    m, c, s = Record(manifest_path), Record(checked_path), Record(seed_path)
    recipe, launch = m.obj(manifest, "recipe", "recipe"), m.obj(manifest, "launch", "launch")
    parsed = c.obj(checked, "profiles", "profiles")
    stages = {}
    for name, stage in sorted(m.obj(manifest, "stages", "stages").items()):
        m.text(name, "stages (a stage's name)")
        stages[name] = m.text(m.as_obj(stage, f"stages.{name}").get("on"), f"stages.{name}.on")
    profiles = {}
    for i, name in enumerate(m.texts(launch, "profiles", "launch.profiles")):
        if name is None:
            m.fail(f"launch.profiles[{i}]", "is null, not a text")
        profiles[name] = c.text(c.obj(parsed, name, f"profiles.{name}").get("parsed_by"), f"profiles.{name}.parsed_by")
    checked_by = None
    if checked:
        files = c.texts(checked, "variant_files", "variant_files")
        checked_by = f"{c.text(checked.get('engine'), 'engine')} {c.text(checked.get('version'), 'version')}" + (
            f" with the variant's {', '.join(map(str, files))}" if files else ""
        )
    kernels = []
    for k, field in s.entries(seed, "kernels", "kernels"):
        args = s.items(k, "args", f"{field}.args")
        if len(args) > MAX_ARGS:
            s.fail(f"{field}.args", f"holds {len(args)} arguments (at most {MAX_ARGS})")
        args = tuple(s.scalar(a, f"{field}.args[{i}]") for i, a in enumerate(args))
        kernels.append(f"{s.text(k.get('builder'), f'{field}.builder')}{args}")
    return {
        "recipe": m.text(recipe.get("name"), "recipe.name"),
        "variant": m.text(recipe.get("variant"), "recipe.variant"),
        "platform": m.text(manifest.get("platform"), "platform"),
        "engine": _engine(m, manifest),
        "stages": stages,
        "profiles": profiles,
        "default_profile": m.text(launch.get("default"), "launch.default"),
        "checked_by": checked_by,
        "seed_kernels": kernels,
    }


def text(info: dict) -> str:
    """The human form; every line's non-printable characters escaped (a manifest's text cannot end a line,
    forge another or send the terminal an escape sequence)."""
    lines = [f"image: {info['recipe']}, variant {info['variant'] or '(none)'}, {info['platform']}"]
    engine = info["engine"]
    if engine:
        lines.append(f"engine: {engine['name']} {engine['version']} ({engine['install']} of {engine['release']})")
        if engine["tree"]:
            lines.append(f"tree: {engine['tree']}")
        lines.append(f"patches: {len(engine['patches'])}")
        lines += [f"  {p['id']} ({p['from']}): {', '.join(map(str, p['files']))}" for p in engine["patches"]]
    for stage, on in info["stages"].items():
        lines.append(f"{stage} stage ran on: {on}")
    if info["profiles"]:
        lines.append(f"profiles (default {info['default_profile']}), checked by {info['checked_by'] or 'nothing'}:")
        lines += [f"  {name}: {how or 'not checked'}" for name, how in info["profiles"].items()]
    lines.append(f"seed: {len(info['seed_kernels'])} kernels")
    lines += [f"  {k}" for k in info["seed_kernels"]]
    return "\n".join(shown(line) for line in lines)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2, no usage block
        print(f"servebuild-info: {shown(message)}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> int:
    parser = OneLineParser(description="what this image is, from its build manifest")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--manifest", default=os.environ.get("SERVEBUILD_MANIFEST") or MANIFEST)
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(errors="backslashreplace")  # a stdout that is not UTF-8 still takes every name
    try:
        info = describe(args.manifest)
    except Bad as exc:
        print(f"servebuild-info: {shown(str(exc))}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1, sort_keys=True) if args.json else text(info))  # JSON: every non-ASCII escaped
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
