"""Hashed requirement sets regenerated from declared inputs.

Each stack has `constraints/<stack>/inputs.yaml` (requirements, CUDA line, exclude-newer date,
index, resolver version, targets). `generate` runs `uv pip compile --generate-hashes` once per
target and writes, for each:

- `pyX.Y-linux-ARCH.txt`: the whole resolve except the engine's own distribution;
- `precompiled-pyX.Y-linux-ARCH.txt`: the engine's release wheel alone (when the stack has one);
- `sdist.txt` (stacks with `sdist: true`): the hash-pinned source distribution of the engine.

Every file starts with comment lines that record its exact inputs and the command to rerun. The
output depends only on the inputs file and the index as of `exclude_newer` (same inputs, same
bytes). A set with a CUDA compiler wheel outside the declared CUDA line is never written.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import urllib.error
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


from servebuild import procs
from servebuild.recipe.requirements import (
    CUDA_COMPILER_WHEELS,
    check_hashed_requirements,
    cuda_compiler_problem,
    logical_lines,
    normalize,
    parse_pins,
)
from servebuild.errors import InputError, RecipeError
from servebuild.fsutil import atomic_write, read_input_text
from servebuild.platforms import PLATFORMS, machine_of
from servebuild.registry import index
from servebuild.registry.bounded import parse_json
from servebuild.registry.limits import JSON_DEPTH
from servebuild.yamlfile import load_yaml

CONSTRAINTS_DIR = "constraints"
INPUTS_NAME = "inputs.yaml"
FIELDS = {"stack", "engine", "sdist", "requirements", "cuda", "exclude_newer", "index_url", "uv", "targets", "absent"}
REQUIRED = ("stack", "engine", "requirements", "cuda", "exclude_newer", "index_url", "uv", "targets")
ARCHS = {p: machine_of(p) for p in PLATFORMS}  # platform -> uv's machine name
REQUIREMENT = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[a-z0-9,_-]+\])?((?:(?:===|==|!=|~=|>=|<=|>|<)"
    r"[A-Za-z0-9.*+!_-]+)(?:,(?:===|==|!=|~=|>=|<=|>|<)[A-Za-z0-9.*+!_-]+)*)?\Z"
)
EXCLUDE_NEWER = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")


@dataclass(frozen=True)
class Target:
    python: str  # "3.12"
    platform: str  # "linux/amd64"
    manylinux: str  # "2_34"

    @property
    def name(self) -> str:
        return f"py{self.python}-linux-{self.platform.split('/')[1]}"

    @property
    def uv_platform(self) -> str:
        return f"{ARCHS[self.platform]}-manylinux_{self.manylinux}"


@dataclass(frozen=True)
class Absent:
    requirement: str
    reason: str


@dataclass(frozen=True)
class Inputs:
    file: Path
    display: str  # path as recorded in headers and errors
    stack: str
    engine: str | None
    engine_version: str | None
    sdist: bool
    requirements: tuple[str, ...]
    cuda: str
    exclude_newer: str
    index_url: str
    uv: str
    targets: tuple[Target, ...]
    absent: tuple[Absent, ...]

    @property
    def directory(self) -> Path:
        return self.file.parent

    @property
    def constraints(self) -> tuple[str, ...]:
        """Constraints the resolver gets on top of the requirements: the CUDA compiler line."""
        return tuple(f"{name}=={self.cuda}.*" for name in CUDA_COMPILER_WHEELS)

    @property
    def rerun(self) -> str:
        return f"invoke deps --stack {self.stack}"


# ---------------------------------------------------------------------------------------------
# inputs


def inputs_path(root: Path, stack: str) -> Path:
    return root / CONSTRAINTS_DIR / stack / INPUTS_NAME


def stacks(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / CONSTRAINTS_DIR).glob(f"*/{INPUTS_NAME}"))


def load_stack(root: Path, stack: str) -> Inputs:
    path = inputs_path(root, stack)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", stack or "") or not path.is_file():
        known = ", ".join(stacks(root)) or "none"
        raise InputError(f"unknown stack {stack!r} (stacks with an {INPUTS_NAME}: {known})", field="--stack")
    return load_inputs(path, root)


def load_inputs(path: Path, root: Path | None = None) -> Inputs:
    """Read and validate an inputs file; any problem is one RecipeError naming file and field."""
    display = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)

    def bad(field: str, problem: str) -> RecipeError:
        return RecipeError(problem, file=display, field=field)

    data = load_yaml(path, display)[0]
    if not isinstance(data, dict):
        raise bad("(top level)", "must be a mapping of fields")
    unknown = sorted(set(map(str, data)) - FIELDS)
    if unknown:
        raise bad(unknown[0], f"unknown field (allowed: {', '.join(sorted(FIELDS))})")
    for key in REQUIRED:
        if key not in data:
            raise bad(key, "missing")
    stack = data["stack"]
    if stack != path.parent.name:
        raise bad("stack", f"{stack!r} must name the directory the file is in ({path.parent.name!r})")
    requirements = _requirements(data["requirements"], bad)
    engine, engine_version, sdist = _engine(data, requirements, bad)
    _check_scalars(data, bad)
    return Inputs(
        file=path,
        display=display,
        stack=stack,
        engine=normalize(engine) if engine else None,
        engine_version=engine_version,
        sdist=sdist,
        requirements=requirements,
        cuda=data["cuda"],
        exclude_newer=data["exclude_newer"],
        index_url=data["index_url"],
        uv=data["uv"],
        targets=_targets(data["targets"], bad),
        absent=_absent(data.get("absent") or [], bad),
    )


def _requirements(requirements, bad) -> tuple[str, ...]:
    if not isinstance(requirements, list) or not requirements:
        raise bad("requirements", "must be a non-empty list of requirement strings")
    seen = set()
    for i, req in enumerate(requirements):
        if not isinstance(req, str) or not REQUIREMENT.match(req.replace(" ", "")):
            raise bad(f"requirements[{i}]", f"{req!r} is not a requirement like name[extra]==1.2 or name>=1")
        name = normalize(REQUIREMENT.match(req.replace(" ", "")).group(1))
        if name in seen:
            raise bad(f"requirements[{i}]", f"{name} is listed twice")
        seen.add(name)
    return tuple(r.replace(" ", "") for r in requirements)


def _engine(data: dict, requirements: tuple[str, ...], bad) -> tuple[str | None, str | None, bool]:
    """The engine distribution, the version its requirement pins, and whether it comes as an sdist."""
    engine, engine_version = data["engine"], None
    if engine is not None:
        if not isinstance(engine, str):
            raise bad("engine", "must be a distribution name or null")
        for req in requirements:
            m = REQUIREMENT.match(req)
            if normalize(m.group(1)) == normalize(engine):
                pin = re.fullmatch(r"==([A-Za-z0-9.+!_-]+)", m.group(3) or "")
                if not pin:
                    raise bad("requirements", f"the engine {engine} must be pinned with == (got {req!r})")
                engine_version = pin.group(1)
        if engine_version is None:
            raise bad("engine", f"{engine!r} is not one of the requirements")
    sdist = data.get("sdist", False)
    if not isinstance(sdist, bool):
        raise bad("sdist", "must be true or false")
    if sdist and engine is None:
        raise bad("sdist", "needs an engine")
    return engine, engine_version, sdist


def _check_scalars(data: dict, bad) -> None:
    cuda = data["cuda"]
    if not isinstance(cuda, str) or not re.fullmatch(r"\d+\.\d+", cuda):
        raise bad("cuda", f'{cuda!r} must be a quoted major.minor CUDA line such as "13.0"')
    exclude_newer = data["exclude_newer"]
    if isinstance(exclude_newer, datetime):
        raise bad("exclude_newer", 'quote the date: "YYYY-MM-DDTHH:MM:SSZ"')
    if not isinstance(exclude_newer, str) or not EXCLUDE_NEWER.match(exclude_newer):
        raise bad("exclude_newer", f'{exclude_newer!r} must be a UTC timestamp "YYYY-MM-DDTHH:MM:SSZ"')
    try:
        datetime.strptime(exclude_newer, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise bad("exclude_newer", f"{exclude_newer!r} is not a real date") from None
    index_url = data["index_url"]
    if not isinstance(index_url, str) or not re.fullmatch(r"https?://\S+", index_url):
        raise bad("index_url", f"{index_url!r} must be an http(s) URL of a simple index")
    uv = data["uv"]
    if not isinstance(uv, str) or not re.fullmatch(r"\d+\.\d+\.\d+", uv):
        raise bad("uv", f'{uv!r} must be a quoted uv version such as "0.13.9"')


def _targets(raw_targets, bad) -> tuple[Target, ...]:
    if not isinstance(raw_targets, list) or not raw_targets:
        raise bad("targets", "must be a non-empty list of {python, platform, manylinux}")
    targets = []
    for i, t in enumerate(raw_targets):
        where = f"targets[{i}]"
        if not isinstance(t, dict) or set(map(str, t)) != {"python", "platform", "manylinux"}:
            raise bad(where, "must have exactly python, platform and manylinux")
        if not isinstance(t["python"], str) or not re.fullmatch(r"3\.\d+", t["python"]):
            raise bad(f"{where}.python", f'{t["python"]!r} must be a quoted version such as "3.12"')
        if t["platform"] not in ARCHS:
            raise bad(f"{where}.platform", f"{t['platform']!r} must be one of {', '.join(ARCHS)}")
        if not isinstance(t["manylinux"], str) or not re.fullmatch(r"2_\d+", t["manylinux"]):
            raise bad(f"{where}.manylinux", f'{t["manylinux"]!r} must be a quoted glibc tag such as "2_28"')
        target = Target(t["python"], t["platform"], t["manylinux"])
        if any(x.name == target.name for x in targets):
            raise bad(where, f"{target.name} is listed twice")
        targets.append(target)
    return tuple(targets)


def _absent(raw, bad) -> tuple[Absent, ...]:
    absent = []
    for i, a in enumerate(raw):
        where = f"absent[{i}]"
        if not isinstance(a, dict) or set(map(str, a)) != {"requirement", "reason"}:
            raise bad(where, "must have exactly requirement and reason")
        if not isinstance(a["requirement"], str) or not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+", a["requirement"]
        ):
            raise bad(f"{where}.requirement", f"{a['requirement']!r} must be name==version")
        if not isinstance(a["reason"], str) or not a["reason"].strip():
            raise bad(f"{where}.reason", "must say why it is not in the set")
        absent.append(Absent(a["requirement"], " ".join(a["reason"].split())))
    return tuple(absent)


def select_targets(inputs: Inputs, names: list[str] | None) -> tuple[Target, ...]:
    if not names:
        return inputs.targets
    by_name = {t.name: t for t in inputs.targets}
    for name in names:
        if name not in by_name:
            raise InputError(f"{name!r} is not a target of {inputs.stack} ({', '.join(by_name)})", field="--target")
    return tuple(by_name[n] for n in by_name if n in names)


# ---------------------------------------------------------------------------------------------
# file names and headers


def set_name(target: Target) -> str:
    return f"{target.name}.txt"


def precompiled_name(target: Target) -> str:
    return f"precompiled-{target.name}.txt"


SDIST_NAME = "sdist.txt"


def uv_args(inputs: Inputs, target: Target) -> list[str]:
    """The uv arguments (run in a directory holding requirements.in and constraints.txt)."""
    return [
        "pip",
        "compile",
        "--no-config",
        "--no-header",
        "--generate-hashes",
        "--index-url",
        inputs.index_url,
        "--python-version",
        target.python,
        "--python-platform",
        target.uv_platform,
        "--exclude-newer",
        inputs.exclude_newer,
        "requirements.in",
        "--constraint",
        "constraints.txt",
    ]


def header(inputs: Inputs, target: Target | None, kind: str) -> str:
    """The comment lines every generated file starts with: what it is, its exact inputs, how to rerun."""
    if kind == "set":
        rest = f", without {inputs.engine} itself (see {precompiled_name(target)})" if inputs.engine else ""
        what = (
            f"hashed requirement set of stack {inputs.stack} for python {target.python} on {target.platform} "
            f"({target.uv_platform}){rest}; installed with --require-hashes --no-deps"
        )
    elif kind == "precompiled":
        what = (
            f"hashed release wheel of {inputs.engine} {inputs.engine_version} (compiled parts reused) for python "
            f"{target.python} on {target.platform} ({target.uv_platform}); installed with --require-hashes --no-deps"
        )
    elif kind == "sdist":
        what = (
            f"hash-pinned source distribution of {inputs.engine} {inputs.engine_version} (the source tree of the "
            f"build); download with pip download --no-deps --no-binary :all: --require-hashes -r {SDIST_NAME}"
        )
    else:
        raise ValueError(kind)
    lines = [
        f"# {what}",
        f"# generated by `{inputs.rerun}` from {inputs.display}: do not edit, rerun it (--check compares)",
        f"# requirements: {' '.join(inputs.requirements)}",
        f"# constraints: {' '.join(inputs.constraints)}",
        f"# exclude-newer: {inputs.exclude_newer}; index: {inputs.index_url}; uv: {inputs.uv}",
    ]
    if target is not None:
        lines.append(
            f"# python: {target.python}; platform: {target.platform}; command: uv {' '.join(uv_args(inputs, target))}"
        )
    for a in inputs.absent:
        lines.append(f"# absent: {a.requirement}: {a.reason}")
    return "\n".join(lines) + "\n"


def header_lines(path: Path) -> list[str]:
    """The leading comment lines of a generated file."""
    out = []
    for line in read_input_text(path, "requirements").splitlines():
        if not line.startswith("#"):
            break
        out.append(line)
    return out


# ---------------------------------------------------------------------------------------------
# resolving


def find_uv() -> str:
    local = Path(sys.executable).parent / "uv"
    found = str(local) if local.exists() else shutil.which("uv")
    if not found:
        raise RecipeError("uv is not installed (pip install -r requirements.txt)", field="uv")
    return found


def uv_version(uv: str) -> str:
    proc = procs.run([uv, "--version"], "uv", capture_output=True, text=True)
    m = re.match(r"uv (\d+\.\d+\.\d+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise RecipeError(f"{uv} --version failed: {(proc.stderr or proc.stdout).strip()}", field="uv")
    return m.group(1)


def _uv_env() -> dict[str, str]:
    """The environment minus UV_* settings, so only the inputs file steers the resolver."""
    return {k: v for k, v in os.environ.items() if not k.startswith("UV_")}


def resolve(inputs: Inputs, target: Target, uv: str, workdir: Path) -> str:
    """uv's output for one target: hashed pins, `# via` annotations, no header."""
    workdir.mkdir(parents=True, exist_ok=True)
    # under build/RECIPE/lock-work: a link planted at either name is replaced, never written through
    atomic_write(workdir / "requirements.in", "\n".join(inputs.requirements) + "\n")
    atomic_write(workdir / "constraints.txt", "\n".join(inputs.constraints) + "\n")
    proc = procs.run([uv, *uv_args(inputs, target)], "uv", cwd=workdir, capture_output=True, text=True, env=_uv_env())
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
        raise RecipeError(
            f"uv pip compile failed for {target.name}: {' '.join(lines)[:1500]}",
            file=inputs.display,
            field="requirements",
        )
    return proc.stdout


def blocks(text: str) -> list[tuple[str | None, str]]:
    """Split uv output into (normalized name, block text) per requirement; comment lines before the first keep None."""
    out: list[tuple[str | None, list[str]]] = []
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==", line)
        if m:
            out.append((normalize(m.group(1)), [line]))
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            out.append((None, [line]))
    return [(name, "\n".join(lines) + "\n") for name, lines in out]


def split_engine(text: str, engine: str | None) -> tuple[str, str | None]:
    """(everything but the engine, the engine's block) of a resolve."""
    if engine is None:
        return text, None
    parts = blocks(text)
    mine = [b for n, b in parts if n == engine]
    if len(mine) != 1:
        raise RecipeError(f"the resolve holds {len(mine)} entries of {engine}, expected exactly one", field="engine")
    return "".join(b for n, b in parts if n != engine), mine[0]


def _problem(text: str, cuda: str) -> str | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "set.txt"
        path.write_text(text)
        return check_hashed_requirements(path) or cuda_compiler_problem(parse_pins(path), cuda)


def build_target(inputs: Inputs, target: Target, resolved: str) -> dict[str, str]:
    """File name -> content for one target, from uv's output; refuses a set that fails a check."""
    rest, engine_block = split_engine(resolved, inputs.engine)
    files = {set_name(target): header(inputs, target, "set") + rest}
    if engine_block is not None:
        pinned = re.match(r"^[^=]+==(\S+)", engine_block).group(1)
        if pinned != inputs.engine_version:
            raise RecipeError(
                f"{target.name}: resolved {inputs.engine}=={pinned}, not {inputs.engine_version}",
                file=inputs.display,
                field="requirements",
            )
        files[precompiled_name(target)] = header(inputs, target, "precompiled") + engine_block
    for name, content in files.items():
        problem = _problem(content, inputs.cuda)
        if problem:
            raise RecipeError(f"refusing to write {name}: {problem}", file=inputs.display, field="requirements")
    return files


# ---------------------------------------------------------------------------------------------
# the index (sdist hash, absent packages)


def _index_files(index_url: str, project: str) -> list[dict] | None:
    """Files of a project from the index's JSON simple API (PEP 691); None when the project does not exist."""
    url = f"{index_url.rstrip('/')}/{normalize(project)}/"
    try:
        doc = parse_json(index.get(url, accept="application/vnd.pypi.simple.v1+json"), url, JSON_DEPTH)
        return doc["files"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise RecipeError(f"{url}: HTTP {exc.code}", field="index_url") from None
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        raise RecipeError(f"{url}: {getattr(exc, 'reason', exc)}", field="index_url") from None


def _uploaded_by(file: dict, exclude_newer: str) -> bool:
    cutoff = datetime.strptime(exclude_newer, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    uploaded = file.get("upload-time")
    return bool(uploaded) and datetime.fromisoformat(uploaded.replace("Z", "+00:00")) <= cutoff


def _file_version(filename: str) -> tuple[str, str] | None:
    """(normalized name, version) of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (normalize(parts[0]), parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return normalize(name), version
    return None


def check_absent(inputs: Inputs) -> None:
    """Each `absent` entry must still have no file on the index before exclude_newer."""
    for i, a in enumerate(inputs.absent):
        name, version = a.requirement.split("==")
        for f in _index_files(inputs.index_url, name) or []:
            if _file_version(f["filename"]) == (normalize(name), version) and _uploaded_by(f, inputs.exclude_newer):
                raise RecipeError(
                    f"{a.requirement} is on the index before {inputs.exclude_newer} "
                    f"({f['filename']}, {f['upload-time']}): move it into requirements",
                    file=inputs.display,
                    field=f"absent[{i}]",
                )


def sdist_file(inputs: Inputs) -> str:
    """sdist.txt: the engine's source distribution pinned by its sha256."""
    for f in _index_files(inputs.index_url, inputs.engine) or []:
        if (
            f["filename"].endswith(".tar.gz")
            and _file_version(f["filename"]) == (inputs.engine, inputs.engine_version)
            and _uploaded_by(f, inputs.exclude_newer)
            and not f.get("yanked")
        ):
            sha = f["hashes"]["sha256"]
            body = (
                f"# file: {f['filename']} (uploaded {f['upload-time']}): {f['url']}\n"
                f"{inputs.engine}=={inputs.engine_version} --hash=sha256:{sha}\n"
            )
            return header(inputs, None, "sdist") + body
    raise RecipeError(
        f"no sdist of {inputs.engine}=={inputs.engine_version} on {inputs.index_url} before {inputs.exclude_newer}",
        file=inputs.display,
        field="sdist",
    )


# ---------------------------------------------------------------------------------------------
# the task


def render(inputs: Inputs, targets: tuple[Target, ...], uv: str | None = None) -> dict[str, str]:
    """File name -> content of every file the inputs produce for `targets` (resolves; nothing written)."""
    uv = uv or find_uv()
    found = uv_version(uv)
    if found != inputs.uv:
        raise RecipeError(
            f"the inputs need uv {inputs.uv}, found uv {found} at {uv} (pip install uv=={inputs.uv})",
            file=inputs.display,
            field="uv",
        )
    check_absent(inputs)
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="servebuild-deps-") as tmp:
        for target in targets:
            files.update(build_target(inputs, target, resolve(inputs, target, uv, Path(tmp) / target.name)))
    if inputs.sdist:
        files[SDIST_NAME] = sdist_file(inputs)
    return files


def generate(
    root: Path, stack: str, target_names: list[str] | None = None, out_dir: Path | None = None, uv: str | None = None
) -> list[Path]:
    """Regenerate a stack's files into out_dir (default: next to its inputs file); all or nothing."""
    inputs = load_stack(root, stack)
    files = render(inputs, select_targets(inputs, target_names), uv)
    out_dir = out_dir or inputs.directory
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in sorted(files.items()):
        path = out_dir / name
        atomic_write(path, content)
        written.append(path)
    return written


def check(root: Path, stack: str, target_names: list[str] | None = None, uv: str | None = None) -> list[str]:
    """Regenerate into a temp dir; one line per committed file that differs (empty: all match)."""
    inputs = load_stack(root, stack)
    files = render(inputs, select_targets(inputs, target_names), uv)
    problems = []
    for name, content in sorted(files.items()):
        path = inputs.directory / name
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif (committed := read_input_text(path, "requirements", str(rel))) != content:
            old = _pins_text(committed)
            new = _pins_text(content)
            changed = sorted(n for n in set(old) | set(new) if old.get(n) != new.get(n))
            detail = ", ".join(f"{n} {old.get(n, '-')} -> {new.get(n, '-')}" for n in changed[:5])
            more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            problems.append(
                f"{rel}: differs from a fresh `{inputs.rerun}`"
                + (f" ({len(changed)} pins: {detail}{more})" if changed else " (header, hashes or annotations)")
            )
    return problems


def _pins_text(text: str) -> dict[str, str]:
    pins = {}
    for line in logical_lines(text):
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            pins[normalize(m.group(1))] = m.group(3)
    return pins
