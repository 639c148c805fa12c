"""Docker credential helpers (`credHelpers`, `credsStore` in the Docker config), through the real
helper protocol: `docker-credential-NAME get` reads the server on stdin and prints
{"ServerURL", "Username", "Secret"}. The helpers here are small executables written by the test (a
stand-in for docker-credential-pass / -secretservice / -ecr-login, which need a desktop keyring or
a cloud account); what servebuild does with them is the real code path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servebuild.release import credentials
from servebuild.errors import ServebuildError

SECRET = "s3cr3t-helper-value-0451"


def helper(folder: Path, name: str, body: str) -> None:
    path = folder / f"docker-credential-{name}"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def env(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    # answers only for ghcr.io, and records what it was asked
    helper(
        bin_dir,
        "store",
        f'read server; echo "$1 $server" >> {tmp_path}/asked\n'
        f'[ "$server" = ghcr.io ] || {{ echo "credentials not found in native keychain"; exit 1; }}\n'
        f'printf \'{{"ServerURL":"ghcr.io","Username":"octo","Secret":"{SECRET}"}}\'\n',
    )
    helper(bin_dir, "garbage", f'echo "not json {SECRET}"\n')
    return tmp_path


def config(folder: Path, data: dict) -> None:
    (folder / "config.json").write_text(json.dumps(data))


def test_creds_store_answers_for_its_registry(env):
    config(env, {"credsStore": "store"})
    creds = credentials.from_docker_config("ghcr.io")
    assert (creds.username, creds.password) == ("octo", SECRET)
    assert (env / "asked").read_text() == "get ghcr.io\n"
    assert credentials.from_docker_config("registry.example:5000") is None  # nothing stored: anonymous


def test_cred_helpers_win_over_creds_store_per_registry(env):
    config(env, {"credsStore": "garbage", "credHelpers": {"ghcr.io": "store"}})
    assert credentials.from_docker_config("ghcr.io").password == SECRET
    with pytest.raises(ServebuildError) as info:  # other registries go to the store, which answers junk
        credentials.from_docker_config("registry.example:5000")
    assert "docker-credential-garbage answered something that is not credentials" in str(info.value)
    assert SECRET not in str(info.value)


def test_auths_entry_wins_over_the_helper(env):
    import base64

    config(env, {"auths": {"ghcr.io": {"auth": base64.b64encode(b"file:pw").decode()}}, "credsStore": "store"})
    assert credentials.from_docker_config("ghcr.io").username == "file"
    assert not (env / "asked").exists()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("missing", "credential helper docker-credential-missing could not be run"),
        ("../../bin/sh", "credential helper name '../../bin/sh' is not a name"),
        ("store --version", "is not a name"),
    ],
)
def test_bad_helpers_are_one_line(env, name, expected):
    config(env, {"credsStore": name})
    with pytest.raises(ServebuildError) as info:
        credentials.from_docker_config("ghcr.io")
    line = str(info.value)
    assert expected in line and "\n" not in line and str(env / "config.json") in line
