"""Registry credentials: from a `--credentials FILE` or the Docker client config, never from argv.

A credentials file is a JSON object `{"username": "...", "password": "..."}` that only its owner
can read. The Docker config is `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`):
an `auths` entry for the registry (`auth` = base64 of `user:password`, or `username`/`password`),
or the credential helper it names (`credHelpers`, `credsStore`). No error line ever holds a secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from servebuild.errors import InputError
from servebuild.fsutil import read_input_text

USERNAME = re.compile(r"[A-Za-z0-9._@+-][A-Za-z0-9._@+ -]{0,254}\Z")


class CredentialsError(InputError):
    """Credentials missing, unreadable or malformed (the secret itself is never shown)."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for error lines ("--credentials FILE", "docker config FILE")

    def basic(self) -> str:
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _check(username, password, where: str) -> Credentials:
    if not isinstance(username, str) or not USERNAME.match(username):
        raise CredentialsError(
            "username must be a non-empty string of letters, digits and ._@+- (at most 255)",
            file=where,
            field="username",
        )
    if not isinstance(password, str) or not password:
        raise CredentialsError("password must be a non-empty string", file=where, field="password")
    if any(not c.isprintable() for c in password):
        raise CredentialsError("password holds a control character (a stray newline?)", file=where, field="password")
    return Credentials(username, password, where)


def _read_small(path: Path, kind: str) -> str:
    """The file through the bounded reader (fsutil.LIMITS[kind]); a problem is one CredentialsError."""
    return read_input_text(path, kind, str(path), error=CredentialsError)


def _json_object(text: str, path: Path, what: str) -> dict:
    try:
        data = json.loads(text)  # JSONDecodeError names a position, never the text
    except json.JSONDecodeError as exc:
        raise CredentialsError(f"{what} is not JSON ({exc.msg} at line {exc.lineno})", file=str(path)) from None
    if not isinstance(data, dict):
        raise CredentialsError(f"{what} must hold a JSON object", file=str(path))
    return data


def from_file(path: Path) -> Credentials:
    """A `--credentials` file: {"username": ..., "password": ...}, readable by its owner only."""
    text = _read_small(path, "credentials")
    if path.stat().st_mode & 0o077:
        raise CredentialsError(
            f"credentials file is readable by others (mode {path.stat().st_mode & 0o777:o}); chmod 600 it",
            file=str(path),
        )
    data = _json_object(text, path, "credentials file")
    extra = sorted(set(data) - {"username", "password"})
    if extra:
        raise CredentialsError(
            f"unknown key {extra[0]!r} (a credentials file holds username and password)", file=str(path)
        )
    for key in ("username", "password"):
        if key not in data:
            raise CredentialsError(f"missing {key!r}", file=str(path))
    return _check(data["username"], data["password"], f"--credentials {path}")


def docker_config_path() -> Path:
    folder = os.environ.get("DOCKER_CONFIG")
    return (Path(folder) if folder else Path.home() / ".docker") / "config.json"


def _host_keys(registry: str) -> list[str]:
    keys = [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v2/", f"https://{registry}/v1/"]
    if registry.startswith("localhost:"):
        keys += [k.replace("localhost", "127.0.0.1", 1) for k in keys]
    elif registry.startswith("127.0.0.1:"):
        keys += [k.replace("127.0.0.1", "localhost", 1) for k in keys]
    return keys


def from_docker_config(registry: str) -> Optional[Credentials]:
    path = docker_config_path()
    if not path.exists():
        return None
    where = f"docker config {path}"
    data = _json_object(_read_small(path, "docker-config"), path, "Docker config")
    auths = data.get("auths") or {}
    if not isinstance(auths, dict):
        raise CredentialsError("`auths` must be an object", file=str(path), field="auths")
    for key in _host_keys(registry):
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                decoded = base64.b64decode(entry["auth"], validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, TypeError):
                raise CredentialsError(
                    "`auth` is not base64 of USER:PASSWORD", file=str(path), field=f"auths.{key}.auth"
                ) from None
            username, sep, password = decoded.partition(":")
            if not sep:
                raise CredentialsError(
                    "`auth` is not base64 of USER:PASSWORD", file=str(path), field=f"auths.{key}.auth"
                )
            return _check(username, password, where)
        if entry.get("username") or entry.get("password"):
            return _check(entry.get("username"), entry.get("password"), where)
        if entry.get("identitytoken"):
            raise CredentialsError(
                "identity tokens are not supported; use --credentials FILE", file=str(path), field=f"auths.{key}"
            )
    helper = (data.get("credHelpers") or {}).get(registry) or data.get("credsStore")
    if helper:
        return _from_helper(str(helper), registry, path)
    return None


def _from_helper(helper: str, registry: str, path: Path) -> Optional[Credentials]:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", helper):
        raise CredentialsError(f"credential helper name {helper!r} is not a name", file=str(path))
    try:
        proc = subprocess.run(
            [f"docker-credential-{helper}", "get"], input=registry, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        raise CredentialsError(
            f"credential helper docker-credential-{helper} could not be run", file=str(path)
        ) from None
    if proc.returncode != 0:
        return None  # the helper has nothing for this registry
    try:
        data = json.loads(proc.stdout)
        return _check(data["Username"], data["Secret"], f"docker-credential-{helper}")
    except (ValueError, KeyError, TypeError):
        raise CredentialsError(
            f"docker-credential-{helper} answered something that is not credentials", file=str(path)
        ) from None


def resolve(registry: str, credentials_file: Optional[Path]) -> Optional[Credentials]:
    """--credentials FILE wins; else the Docker config; else none (an anonymous registry)."""
    if credentials_file is not None:
        return from_file(credentials_file)
    return from_docker_config(registry)


class DockerConfigDir:
    """A private, temporary Docker client config holding one registry's credentials, for `docker push`:
    the password travels in a 0600 file, never on a command line, and is removed afterwards."""

    def __init__(self, registry: str, creds: Optional[Credentials]):
        self.registry = registry
        self.creds = creds
        self.path: Optional[Path] = None

    def __enter__(self) -> Optional[Path]:
        if self.creds is None:
            return None
        self.path = Path(tempfile.mkdtemp(prefix="servebuild-docker-"))
        config = self.path / "config.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"auths": {self.registry: {"auth": self.creds.basic()}}}, fh)
        return self.path

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            for child in self.path.iterdir():
                child.unlink()
            self.path.rmdir()
