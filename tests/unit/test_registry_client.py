"""Registry client retries and credentials parsing.

The retry tests use a small HTTP server in the test that answers like a registry that flakes on
demand (5xx, dropped connections): a real registry cannot be made to do that deterministically.
Everything else about the registry is tested against a real one in tests/integration/test_publish.py.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servebuild.release import credentials
from servebuild.release.credentials import Credentials, CredentialsError, DockerConfigDir
from servebuild.release.provenance import cyclonedx, statement
from servebuild.registry.client import RegistryClient, RegistryError
from support import one_printable_line


class FlakyRegistry:
    """Plain-HTTP registry stand-in on 127.0.0.1: /v2/ answers 200; tags/list fails `failures` times
    with `how` ('503', '500' or 'drop': the connection closed without an answer), then answers."""

    def __init__(self, failures: int, how: str, final: int = 200):
        self.failures, self.how, self.final, self.calls = failures, how, final, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/v2/":
                    return self._send(200, b"{}")
                outer.calls += 1
                if outer.calls <= outer.failures:
                    if outer.how == "drop":
                        self.close_connection = True
                        self.connection.close()
                        return
                    return self._send(int(outer.how), b'{"errors":[{"code":"UNAVAILABLE","message":"busy"}]}')
                self._send(outer.final, json.dumps({"name": "r", "tags": ["a", "b"]}).encode())

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def flaky(request):
    servers = []

    def make(*args, **kwargs):
        servers.append(FlakyRegistry(*args, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("how", ["503", "500", "drop"])
def test_transient_failures_are_retried_with_backoff(flaky, how):
    reg = flaky(2, how)
    client = RegistryClient(reg.address, retries=4, backoff=0.01)
    assert client.insecure  # a loopback registry without TLS is used over HTTP
    assert client.tags("r") == ["a", "b"]
    assert reg.calls == 3


def test_retries_are_bounded_and_end_in_one_line(flaky):
    reg = flaky(100, "503")
    client = RegistryClient(reg.address, retries=3, backoff=0.01)
    with pytest.raises(RegistryError) as info:
        client.tags("r")
    assert reg.calls == 4
    line = str(info.value)
    assert "\n" not in line and "answered 503" in line and "UNAVAILABLE: busy" in line


def test_client_errors_are_not_retried(flaky):
    reg = flaky(0, "503", final=404)
    assert RegistryClient(reg.address, retries=3, backoff=0.01).tags("r") == []
    assert reg.calls == 1


def test_unreachable_registry_is_one_line(flaky):
    reg = flaky(0, "503")
    address = reg.address
    reg.close()
    with pytest.raises(RegistryError, match=r"unreachable after 3 tries"):
        RegistryClient(address, retries=2, backoff=0.01)


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_credentials_file(tmp_path):
    good = write(tmp_path / "c.json", json.dumps({"username": "alice", "password": "s3cret pass"}))
    creds = credentials.from_file(good)
    assert (creds.username, creds.password) == ("alice", "s3cret pass")
    assert "s3cret" not in repr(creds)


@pytest.mark.parametrize(
    "text,mode,fragment",
    [
        ('{"username": "alice"}', 0o600, "missing 'password'"),
        ('{"username": "alice", "password": ""}', 0o600, "password must be a non-empty string"),
        ('{"username": "alice", "password": "hunter2\\nb"}', 0o600, "control character"),
        ('{"username": "al ice:", "password": "x"}', 0o600, "username must be"),
        ('{"username": 7, "password": "x"}', 0o600, "username must be"),
        ('{"username": "a", "password": "x", "email": "e"}', 0o600, "unknown key 'email'"),
        ('["a", "x"]', 0o600, "must hold a JSON object"),
        ("user: a\npassword: hunter2-secret", 0o600, "is not JSON"),
        ('{"username": "a", "password": "hunter2-secret"}', 0o640, "readable by others"),
    ],
)
def test_bad_credentials_files_are_one_line_without_the_secret(tmp_path, text, mode, fragment):
    path = write(tmp_path / "c.json", text, mode)
    with pytest.raises(CredentialsError) as info:
        credentials.from_file(path)
    line = str(info.value)
    assert fragment in line and "\n" not in line and "hunter2" not in line


def test_credentials_from_the_docker_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert credentials.from_docker_config("reg.example:5000") is None  # no config at all
    auth = base64.b64encode(b"bob:pw:with:colons").decode()
    write(
        tmp_path / "config.json",
        json.dumps(
            {"auths": {"https://reg.example:5000": {"auth": auth}, "other.example": {"username": "u", "password": "p"}}}
        ),
    )
    creds = credentials.from_docker_config("reg.example:5000")
    assert (creds.username, creds.password) == ("bob", "pw:with:colons")
    assert credentials.from_docker_config("other.example").username == "u"
    assert credentials.from_docker_config("third.example") is None
    write(tmp_path / "config.json", json.dumps({"auths": {"reg.example:5000": {"auth": "***"}}}))
    with pytest.raises(CredentialsError, match="not base64"):
        credentials.from_docker_config("reg.example:5000")


# -- a password never appears in an error line, control characters or not ----------------------------------------

PASSWORDS = [
    "hunter2-secret\x07",
    "hunter2-secret\nX",
    "hunter2-secret\x1b[2J",
    "\x00hunter2-secret",
    "hunter2-secret\u2028",
]


def write_private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_credentials_file_password_with_a_control_character_is_refused_unquoted(tmp_path, password):
    path = write_private(tmp_path / "c.json", json.dumps({"username": "alice", "password": password}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_file(path)
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("form", ["auth", "fields"])
def test_a_docker_config_password_with_a_control_character_is_refused_unquoted(tmp_path, monkeypatch, password, form):
    import base64

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    entry = (
        {"auth": base64.b64encode(f"alice:{password}".encode()).decode()}
        if form == "auth"
        else {"username": "alice", "password": password}
    )
    write_private(tmp_path / "config.json", json.dumps({"auths": {"reg.example": entry}}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_docker_config("reg.example")
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_credential_helper_password_with_a_control_character_is_refused_unquoted(tmp_path, monkeypatch, password):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"ServerURL": "reg.example", "Username": "alice", "Secret": password}))
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(f"#!/bin/sh\ncat {answer}\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    write_private(tmp_path / "config.json", json.dumps({"credsStore": "fake"}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_docker_config("reg.example")
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


def test_private_docker_config_for_the_push_is_0600_and_removed():
    creds = Credentials("alice", "pw", "test")
    with DockerConfigDir("reg.example:5000", creds) as folder:
        config = folder / "config.json"
        assert config.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
        assert json.loads(config.read_text())["auths"]["reg.example:5000"]["auth"] == creds.basic()
    assert not folder.exists()
    with DockerConfigDir("reg.example:5000", None) as folder:
        assert folder is None


def test_sbom_and_statement_are_deterministic():
    installed = {"python": "3.11.2", "distributions": [{"name": "six", "version": "1.17.0", "license": "MIT"}]}
    digest = "sha256:" + "a" * 64
    one = cyclonedx(installed, "r.example/x", digest, "linux/arm64", "sha256:" + "b" * 64)
    assert one == cyclonedx(installed, "r.example/x", digest, "linux/arm64", "sha256:" + "b" * 64)
    assert one["components"][0]["purl"] == "pkg:pypi/six@1.17.0"
    manifest = {
        "recipe": {"name": "toy", "sha256": "c" * 64},
        "platform": "linux/arm64",
        "bases": {
            "runtime": {"ref": "debian:{arch}", "resolved": "debian:arm64", "id": "sha256:" + "d" * 64, "digest": None}
        },
        "engine": {
            "source": {
                "url": "https://git.example/e.git",
                "commit": "e" * 40,
                "patches": [{"id": "p1", "file": "patches/p1.patch", "sha256": "f" * 64}],
            }
        },
        "files": [],
        "outputs": {"image_id": "sha256:" + "b" * 64},
    }
    lock = {"path": "recipes/toy.lock.yaml", "sha256": "1" * 64}
    st = statement(manifest, "r.example/x", digest, lock, {"sbom": "sha256:" + "2" * 64})
    deps = {d["name"]: d for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["engine-source"]["digest"] == {"gitCommit": "e" * 40}
    assert deps["patch:p1"]["digest"] == {"sha256": "f" * 64}
    assert deps["base:runtime"]["digest"] == {"sha256": "d" * 64}
    assert st["predicate"]["buildDefinition"]["externalParameters"]["lock"] == lock
    assert st["subject"] == [{"name": "r.example/x", "digest": {"sha256": "a" * 64}}]


def test_lock_digest_lookup_goes_through_the_bounded_client(monkeypatch):
    """`invoke lock`'s base-digest lookup: a HEAD through the same client, so the same bounds hold
    (tests/hostile_registry.py stands in for a registry that misbehaves on demand)."""
    import time
    from hostile_registry import HostileRegistry, sha
    from servebuild.lock.basedigest import registry_digest
    from servebuild.registry.client import RegistryTimeout

    good = HostileRegistry("ok")
    try:
        assert registry_digest(good.ref) == sha(good.t["index"])
        assert good.requests[-1] == ("HEAD", "/v2/servebuild/toy/manifests/v1")
    finally:
        good.stop()
    monkeypatch.setenv("SERVEBUILD_REGISTRY_TIMEOUT", "1")
    stuck = HostileRegistry("never-answers")
    start = time.monotonic()
    try:
        with pytest.raises(RegistryTimeout, match="GET /v2/ did not finish within 1 s"):
            registry_digest(stuck.ref)
    finally:
        stuck.stop()
    assert time.monotonic() - start < 6
    lying = HostileRegistry("slow-loris-body")  # headers at once, but no Docker-Content-Digest among them
    try:
        with pytest.raises(RegistryError, match="gave no sha256 digest for servebuild/toy:v1"):
            registry_digest(lying.ref)
    finally:
        lying.stop()


@pytest.mark.parametrize(
    "extra",
    [
        [{"digest": "sha256:" + "e" * 64, "platform": {"os": "linux", "architecture": "arm64"}}],  # an extra platform
        [],  # exactly ours
    ],
)
def test_publish_read_back_refuses_an_index_naming_other_or_extra_platforms(tmp_path, extra):
    """publish's last check: the tag must name exactly the platforms it published. A registry cannot serve
    other bytes under the digest the client checks, so this is a stand-in: a client subclass (on a
    hostile-registry 'ok' server, for its real handshake) answers the read-back with an index holding one
    more platform, under the digest publish wrote, as a broken proxy that rewrites answers would."""
    import json as _json
    from hostile_registry import HostileRegistry
    from servebuild.release.publish import PlatformBuild, PublishError, read_back

    image, digest = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    ours = {"digest": digest, "platform": {"os": "linux", "architecture": "amd64"}}
    index = _json.dumps({"manifests": [ours, *extra]}).encode()

    class Rewriting(RegistryClient):
        def get_manifest(self, repo, reference):
            if reference == "v1":
                return index, "sha256:" + "c" * 64, "application/vnd.oci.image.index.v1+json"
            return _json.dumps({"config": {"digest": image}}).encode(), reference, "m"

    server = HostileRegistry("ok")
    try:
        build = PlatformBuild(platform="linux/amd64", build_dir=tmp_path, manifest={}, image_id=image, digest=digest)
        client = Rewriting(server.address)
        if extra:
            with pytest.raises(
                PublishError,
                match=r"v1 names platforms \['linux/amd64', 'linux/arm64'\], "
                r"published \['linux/amd64'\]",
            ):
                read_back(client, "servebuild/toy", "v1", [build], "sha256:" + "c" * 64)
        else:
            read_back(client, "servebuild/toy", "v1", [build], "sha256:" + "c" * 64)  # the control: accepted
    finally:
        server.stop()


class BlobCDN:
    """An HTTPS server on 127.0.0.1 with a certificate for `localhost` from a CA made here (trustme):
    where a registry sends blob reads (Docker Hub and GHCR use a CDN on another host). It serves `body`
    at /config and records the Authorization header each request carried."""

    def __init__(self, body: bytes, tmp_path: Path, tls: bool = True):
        import ssl
        import trustme

        self.body, self.seen = body, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.ca_file = tmp_path / "cdn-ca.pem"
        if tls:
            ca = trustme.CA()
            ca.cert_pem.write_to_path(str(self.ca_file))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ca.issue_cert("localhost").configure_cert(context)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://localhost:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_blob_read_may_move_to_another_https_host_without_the_credentials(tmp_path, monkeypatch):
    """The one cross-host redirect the client follows: a blob GET, to HTTPS, whose certificate is checked
    (here against the CDN's own CA, through REQUESTS_CA_BUNDLE: the registry is a plain-HTTP loopback one,
    for which the client does not verify TLS, but the other host is verified), and no Authorization goes."""
    from hostile_registry import HostileRegistry, REPO, sha

    config = HostileRegistry("ok").t["config"]
    cdn = BlobCDN(config, tmp_path)
    registry = HostileRegistry("blob-cdn", cdn=cdn.url)
    try:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cdn.ca_file))
        client = RegistryClient(registry.address, Credentials("u", "secret-pass", "test"))
        assert client.get_blob(REPO, sha(config)) == config
        assert registry.authorization[-1] == "Bearer tkn-for-the-registry"  # the registry got the token...
        assert cdn.seen == [None]  # ...the other host did not
        monkeypatch.delenv("REQUESTS_CA_BUNDLE")  # the default roots do not know the CDN's CA: refused
        with pytest.raises(RegistryError, match="untrusted certificate"):
            RegistryClient(registry.address, Credentials("u", "p", "test")).get_blob(REPO, sha(config))
    finally:
        registry.stop()
        cdn.stop()


def test_a_blob_redirect_to_plain_http_on_another_host_is_refused(tmp_path):
    from hostile_registry import HostileRegistry, REPO, sha

    config = HostileRegistry("ok").t["config"]
    cdn = BlobCDN(config, tmp_path, tls=False)
    registry = HostileRegistry("blob-cdn", cdn=cdn.url)
    try:
        with pytest.raises(
            RegistryError,
            match=r"redirects blob sha256:\w+ to localhost:\d+; only a blob read "
            r"may move to another host, over HTTPS",
        ):
            RegistryClient(registry.address, Credentials("u", "p", "test")).get_blob(REPO, sha(config))
        assert cdn.seen == []
    finally:
        registry.stop()
        cdn.stop()


def test_publish_checks_the_tag_within_the_operation_deadline(tmp_path):
    """Each request of publish's first phase within its own deadline (30 s), the phase itself past its
    operation's (1 s): one line naming the phase, before any push (publish's engine is never reached)."""
    import time
    from hostile_registry import HostileRegistry
    from servebuild.registry.client import RegistryTimeout
    from servebuild.release.publish import PlatformBuild, publish

    registry = HostileRegistry("slow-loris-body")
    try:
        client = RegistryClient(registry.address, timeout=30, operation_s=1)
        build = PlatformBuild(platform="linux/amd64", build_dir=tmp_path, manifest={}, image_id="sha256:" + "a" * 64)
        start = time.monotonic()
        with pytest.raises(RegistryTimeout) as info:
            publish(None, [build], client, "servebuild/toy", "v1")
        seconds = time.monotonic() - start
        assert "checking what v1 of servebuild/toy names now did not finish within 1 s" in str(info.value), (
            str(info.value),
            seconds,
        )
        assert seconds < 10, (seconds, str(info.value))  # the 1 s deadline, not the 30 s request's (or the trickle's)
        assert registry.writes() == []
    finally:
        registry.stop()
