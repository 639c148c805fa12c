"""Publishing to a registry with bearer-token auth, as GHCR and Docker Hub have it.

Real things: Debian's docker-registry (distribution 2.8) with `auth: token` and TLS from a private CA
(trustme); the local dockerd, which does the token dance itself on `docker push`; the fixture recipe
built for both platforms and proven by the real smoke suite (test_publish's `smoked`); the real CLI
(`invoke publish`, `invoke verify`).
Not real: the token service. GHCR's (https://ghcr.io/token) cannot be reached from here; `TokenServer`
(tests/registry_support.py) stands in for it: basic credentials in, an ES256 JWT for the scopes asked
for out (only on repositories the user may access), over TLS with a certificate of the registry's CA.
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from integration import test_publish as basic
from integration.test_publish import (
    DOCKER,
    PLATFORMS,
    REPO,
    USER,
    assert_one_line,
    cli,
    docker_config_with,
    index_of,
    platforms_of,
    publish_args,
)
from registry_support import TokenRegistry, new_password, write_credentials

smoked = basic.smoked  # the same module fixture: both platforms built and smoke-passed
OUTSIDER = "bob"  # may pull and push other/repo only


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    password = new_password()
    registry = TokenRegistry(
        tmp_path_factory.mktemp("token-registry"),
        {USER: password, OUTSIDER: new_password()},
        access={OUTSIDER: {"other/repo"}},
    )
    registry.password = password
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def creds(reg, tmp_path_factory):
    return write_credentials(tmp_path_factory.mktemp("token-creds") / "registry.json", USER, reg.password)


@pytest.fixture(scope="module")
def empty_docker_config(tmp_path_factory):
    return tmp_path_factory.mktemp("token-docker-config-empty")


def push_tokens(reg, agent: str) -> list[str]:
    """Users given a token to push to REPO by a client whose User-Agent starts with `agent`."""
    return [
        user
        for user, ua, access in reg.tokens.issued
        if ua.startswith(agent) and any(a["name"] == REPO and "push" in a["actions"] for a in access)
    ]


@pytest.fixture(scope="module")
def published(smoked, reg, creds, project, empty_docker_config):
    """`invoke publish` of both platforms under one tag, credentials from a --credentials file."""
    proc = cli(project, *publish_args(reg, creds, "v1"), docker_config=empty_docker_config)
    assert proc.returncode == 0, proc.stderr
    print(f"\npublish of 2 platforms to a token registry: {proc.seconds:.1f}s")
    index, digest = index_of(reg, "v1")
    return {"proc": proc, "index": index, "digest": digest, "platforms": platforms_of(index)}


def test_publish_with_a_credentials_file_gets_tokens_and_pushes(published, smoked, reg):
    assert set(published["platforms"]) == set(PLATFORMS)
    for platform, digest in published["platforms"].items():
        code, body = reg.manifest(REPO, digest)
        assert code == 200 and json.loads(body)["config"]["digest"] == smoked[platform].image_id
    assert f"published {reg.address}/{REPO}:v1" in published["proc"].stdout
    # both clients did the token dance for a push scope: dockerd (the images), oras-py (artifacts, index)
    assert set(push_tokens(reg, "docker/")) == set(push_tokens(reg, "oras-py")) == {USER}
    assert reg.catalog() == [REPO] and {"v1", "v1-amd64", "v1-arm64"} <= set(reg.tags(REPO))


def test_verify_passes_on_the_published_tag(published, reg, creds, project, empty_docker_config):
    proc = cli(
        project,
        "verify",
        f"{reg.address}/{REPO}:v1",
        "--credentials",
        str(creds),
        "--ca",
        str(reg.ca_file),
        docker_config=empty_docker_config,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"verified {reg.address}/{REPO}:v1 (index {published['digest']})" in proc.stdout


def test_publish_and_verify_with_docker_config_credentials(published, reg, project, tmp_path):
    """Credentials from the Docker config's `auths` entry: the same images under another tag make the same index."""
    config = docker_config_with(reg, tmp_path)
    proc = cli(
        project,
        "publish",
        "--recipe",
        "toy",
        "--registry",
        reg.address,
        "--platform",
        "linux/amd64,linux/arm64",
        "--tag",
        "v1-docker-config",
        "--ca",
        str(reg.ca_file),
        docker_config=config,
    )
    assert proc.returncode == 0, proc.stderr
    assert index_of(reg, "v1-docker-config") == (published["index"], published["digest"])
    proc = cli(
        project, "verify", f"{reg.address}/{REPO}:v1-docker-config", "--ca", str(reg.ca_file), docker_config=config
    )
    assert proc.returncode == 0, proc.stderr
    assert f"verified {reg.address}/{REPO}:v1-docker-config (index {published['digest']})" in proc.stdout


def assert_nothing_pushed(proc, reg, tag, catalog, tags):
    assert reg.catalog() == catalog and reg.tags(REPO) == tags  # read with a valid token
    assert tag not in tags
    local = subprocess.run(
        [DOCKER, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True
    ).stdout
    assert tag not in local
    assert reg.password not in proc.stdout + proc.stderr


@pytest.mark.parametrize("source", ["credentials-file", "docker-config"])
def test_wrong_password_is_one_line_and_pushes_nothing(source, published, reg, project, tmp_path, empty_docker_config):
    catalog, tags = reg.catalog(), reg.tags(REPO)
    tag = f"wrong-{source}"
    wrong = write_credentials(tmp_path / "wrong.json", USER, "not-" + reg.password)
    if source == "credentials-file":
        proc = cli(project, *publish_args(reg, wrong, tag), docker_config=empty_docker_config)
        where = f"--credentials {wrong}"
    else:
        config = tmp_path / "docker-config"
        config.mkdir()
        auth = base64.b64encode(f"{USER}:not-{reg.password}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": auth}}}))
        proc = cli(
            project,
            "publish",
            "--recipe",
            "toy",
            "--registry",
            reg.address,
            "--platform",
            "linux/amd64,linux/arm64",
            "--tag",
            tag,
            "--ca",
            str(reg.ca_file),
            docker_config=config,
        )
        where = f"docker config {config / 'config.json'}"
    line = assert_one_line(proc)
    assert line == f"error: registry: wrong credentials for {reg.address}: user '{USER}' (from {where}) was refused"
    assert_nothing_pushed(proc, reg, tag, catalog, tags)


def test_user_without_access_to_the_repository_pushes_nothing(published, reg, project, tmp_path, empty_docker_config):
    """The token service grants OUTSIDER nothing on REPO: its token opens /v2/ but no manifest of REPO."""
    catalog, tags = reg.catalog(), reg.tags(REPO)
    outsider = write_credentials(tmp_path / "outsider.json", OUTSIDER, reg.users[OUTSIDER])
    proc = cli(project, *publish_args(reg, outsider, "outsider"), docker_config=empty_docker_config)
    line = assert_one_line(proc)
    assert line == (
        f"error: registry: reading {REPO}:outsider: {reg.address} answered 401 (UNAUTHORIZED: authentication required)"
    )
    asked = [access for user, _, access in reg.tokens.issued if user == OUTSIDER]
    assert asked and not [a for access in asked for a in access if a["name"] == REPO]  # asked, given nothing on REPO
    assert_nothing_pushed(proc, reg, "outsider", catalog, tags)


@pytest.mark.parametrize("command", ["publish", "verify"])
def test_token_service_down_is_one_line_naming_the_realm(command, published, reg, creds, project, empty_docker_config):
    catalog, tags = reg.catalog(), reg.tags(REPO)
    tag = f"token-down-{command}"
    args = (
        publish_args(reg, creds, tag)
        if command == "publish"
        else ["verify", f"{reg.address}/{REPO}:v1", "--credentials", str(creds), "--ca", str(reg.ca_file)]
    )
    reg.tokens.stop()
    try:
        proc = cli(project, *args, docker_config=empty_docker_config)
    finally:
        reg.tokens.start()
    line = assert_one_line(proc)
    assert line == (
        f"error: registry: token service {reg.tokens.realm} of {reg.address} unreachable after 5 tries "
        f"(ConnectionError on GET /v2/)"
    )
    assert_nothing_pushed(proc, reg, tag, catalog, tags)
