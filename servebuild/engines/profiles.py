"""Launch profiles: validated server command lines, installed in images as named commands."""

from __future__ import annotations

import re
import shlex
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

PROFILE_FIELDS = ("description", "module", "args", "extra_args", "env", "dspark_block_size", "port")

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*\Z")
PORT = re.compile(r"[0-9]{1,5}")
MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def module_names(names: list[str]) -> list[str]:
    """Dotted Python module names only: they reach `python -m` and `import` on the host under test."""
    for name in names:
        if not MODULE.match(name):
            raise ValueError(f"{name!r} is not a dotted Python module name")
    return names


def printable(text: str, what: str) -> str:
    """One line of printable text: no control character (NUL cannot even reach an argv), no line
    or paragraph separator. Quoting in the launcher is the second wall, not the only one."""
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"{what}: {text!r} holds the control character {bad!r}; one printable line only")
    return text


class LaunchProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    description: str = ""  # one line of free text
    module: str  # run as `python -m MODULE`
    args: list[str] = []  # the server's arguments, one word each
    extra_args: list[str] = []  # appended after args; lets a child recipe add flags only
    env: dict[str, str] = {}  # environment of the launcher (the caller's environment overrides it)
    dspark_block_size: Optional[int] = Field(default=None, ge=1)  # from the model's config
    port: Optional[int] = Field(default=None, ge=1, le=65535)  # default: the engine kind's port

    @field_validator("description", "args", "extra_args")
    @classmethod
    def _printable(cls, v, info):
        for text in [v] if isinstance(v, str) else v:
            printable(text, info.field_name)
        return v

    @field_validator("module")
    @classmethod
    def _module(cls, v: str) -> str:
        return module_names([v])[0]

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not ENV_NAME.match(key):
                raise ValueError(f"environment variable name {key!r} is not valid")
            printable(value, f"env {key}")
        return v

    def argv(self) -> list[str]:
        return ["python", "-m", self.module, *self.args, *self.extra_args]


def resolve_profile_bases(profiles: dict) -> dict:
    """Expand `from: OTHER` profiles: OTHER's fields, the child's env on top, extra_args appended."""
    if not isinstance(profiles, dict):
        return profiles
    out: dict = {}

    def expand(name: str, trail: tuple) -> dict:
        raw = profiles[name]
        if not isinstance(raw, dict) or "from" not in raw:
            return raw
        parent = raw["from"]
        if not isinstance(parent, str) or parent not in profiles:
            raise ValueError(f"profile {name!r}: `from` names unknown profile {parent!r}")
        if parent in trail:
            raise ValueError(f"profile {name!r}: cyclic `from`: {' -> '.join(trail + (parent,))}")
        base = expand(parent, trail + (parent,))
        child = {k: v for k, v in raw.items() if k != "from"}
        for part in (base, child):  # the merge needs the right shapes; field validation comes after
            if (
                not isinstance(part, dict)
                or not isinstance(part.get("env") or {}, dict)
                or not isinstance(part.get("extra_args") or [], list)
            ):
                raise ValueError(
                    f"profile {name!r}: `from` needs mapping profiles with an `env` mapping and an `extra_args` list"
                )
        merged = {k: v for k, v in base.items() if k in PROFILE_FIELDS}
        merged.update({k: v for k, v in child.items() if k not in ("env", "extra_args")})
        merged["env"] = {**(base.get("env") or {}), **(child.get("env") or {})}
        merged["extra_args"] = list(base.get("extra_args") or []) + list(child.get("extra_args") or [])
        return merged

    for name in profiles:
        out[name] = expand(name, (name,))
    return out


def flag_values(args: list[str]) -> dict[str, list[Optional[str]]]:
    """Collect `--flag value` and `--flag=value` occurrences."""
    found: dict[str, list[Optional[str]]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if "=" in arg:
                flag, value = arg.split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                flag, value = arg, args[i + 1]
                i += 1
            else:
                flag, value = arg, None
            found.setdefault(flag, []).append(value)
        i += 1
    return found


NUMBER = re.compile(r"-?[0-9][0-9.e+-]*\Z")


def canonical_flags(
    args: list[str], known: tuple[str, ...] = (), aliases: Optional[dict[str, str]] = None, underscores: bool = False
) -> dict[str, list[Optional[str]]]:
    """The flags of an argv as the engine's parser reads them, whatever the spelling: `--f=v` and
    `--f v`; short aliases (`-sc`); `--f_g` as `--f-g` where the parser converts underscores
    (vLLM); a unique prefix of a `known` flag as that flag (argparse's abbreviations; a prefix of
    several is refused, as argparse refuses it); dotted sub-keys (`--f.key v`) kept as `--f.key`."""
    aliases = aliases or {}
    found: dict[str, list[Optional[str]]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and len(arg) > 1 and not NUMBER.match(arg):
            flag, eq, value = arg.partition("=")
            if not eq:
                following = args[i + 1] if i + 1 < len(args) else None
                if following is not None and not (
                    following.startswith("-") and len(following) > 1 and not NUMBER.match(following)
                ):
                    value = following
                    i += 1
                else:
                    value = None
            flag = aliases.get(flag, flag)
            if flag.startswith("--"):
                parent, dot, key = flag[2:].partition(".")
                parent = "--" + (parent.replace("_", "-") if underscores else parent)
                flag = _unabbreviated(parent, known) + (f".{key}" if dot else "")
            found.setdefault(flag, []).append(value)
        i += 1
    return found


def _unabbreviated(flag: str, known: tuple[str, ...]) -> str:
    if flag in known:
        return flag
    matches = [k for k in known if k.startswith(flag)]
    if len(matches) > 1:
        raise ValueError(f"{flag} is an ambiguous abbreviation of {', '.join(matches)}")
    return matches[0] if matches else flag


def validate_profile(name: str, profile: LaunchProfile) -> None:
    """Rules for every engine: each flag at most once. Engine kinds add their own (servebuild/engines)."""
    flags = flag_values(profile.args + profile.extra_args)
    for flag, values in flags.items():
        if len(values) > 1:
            raise ValueError(f"profile {name!r}: flag {flag} is given {len(values)} times")
    for value in flags.get("--port", []):  # it is EXPOSEd and listened on: a TCP port, ASCII digits
        if value is None or not PORT.fullmatch(value) or not 1 <= int(value) <= 65535:
            raise ValueError(f"profile {name!r}: --port {value!r} is not a TCP port 1..65535")


def launcher_script(
    name: str,
    profile: LaunchProfile,
    listen: tuple[str, ...] = (),
    python: str = "/opt/venv/bin/python",
    prelude: tuple[str, ...] = (),
) -> str:
    """A POSIX shell script that sets the profile's environment, runs `prelude` and execs the server."""
    lines = [
        "#!/bin/sh",
        f"# servebuild launch profile {name}: {profile.description}".rstrip(": "),
        "# Extra arguments are appended; the environment can be overridden by the caller.",
        *prelude,
    ]
    for key, value in sorted(profile.env.items()):
        lines.append(f'[ -n "${{{key}+set}}" ] || {key}={shlex.quote(value)}; export {key}')
    argv = [python, *profile.argv()[1:], *listen]
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv) + ' "$@"')
    return "\n".join(lines) + "\n"
