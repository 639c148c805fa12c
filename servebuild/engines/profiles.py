"""Launch profiles: validated server command lines, installed in images as named commands."""

from __future__ import annotations

import functools
import re
import shlex
from types import MappingProxyType
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
    extra_args: list[str] = []  # appended after args; an inheriting profile's are appended to its parent's
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


def profile_fields() -> tuple[str, ...]:
    """A profile's fields, read from the model (`LaunchProfile`) when asked: what `from:` carries over
    (recipe/inherit.py). A field added to the model is inherited with no list to edit beside it."""
    return tuple(LaunchProfile.model_fields)


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


def check_common(name: str, flags: dict[str, list[Optional[str]]]) -> None:
    """Rules for every engine, on the profile's flags as its engine reads them: each long flag at most
    once, --port a TCP port. Engine kinds add their own (servebuild/engines)."""
    for flag, values in flags.items():
        if flag.startswith("--") and len(values) > 1:
            raise ValueError(f"profile {name!r}: flag {flag} is given {len(values)} times")
    for value in flags.get("--port", []):  # it is EXPOSEd and listened on: a TCP port, ASCII digits
        if value is None or not PORT.fullmatch(value) or not 1 <= int(value) <= 65535:
            raise ValueError(f"profile {name!r}: --port {value!r} is not a TCP port 1..65535")


@functools.lru_cache(maxsize=512)
def _parsed(argv: tuple[str, ...], known: tuple[str, ...], aliases: tuple, underscores: bool) -> MappingProxyType:
    return MappingProxyType(canonical_flags(list(argv), known, dict(aliases), underscores))


def profile_flags(
    profile: LaunchProfile, known: tuple[str, ...] = (), aliases: Optional[dict[str, str]] = None, underscores=False
) -> MappingProxyType:
    """The profile's flags (args, then extra_args) by `canonical_flags`, parsed once per argv and grammar
    however many rules and renderers read them; read-only."""
    return _parsed(
        (*profile.args, *profile.extra_args), tuple(known), tuple(sorted((aliases or {}).items())), underscores
    )


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
