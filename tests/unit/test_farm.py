"""Farm files: bad input is one line naming file, field (and line) and problem; the CLI exits 2.

Real parts: the loader, the docker client against endpoints that do not answer (a closed TCP
port, a missing socket), invoke. Simulated: an engine of the wrong architecture without QEMU
(no such engine exists on this machine), as a stand-in client that answers `docker info` and
the `uname -m` probe the way such an engine does.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest

from servebuild.build import farm as farms
from servebuild.build.docker import DockerClient, Endpoint
from servebuild.errors import DockerError, RecipeError, ServebuildError

ROOT = Path(__file__).resolve().parents[2]
CERT = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
KEY_SECRET = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC-not-a-real-key"
KEY = f"-----BEGIN PRIVATE KEY-----\n{KEY_SECRET}\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def certs(tmp_path) -> Path:
    d = tmp_path / "certs"
    d.mkdir()
    (d / "ca.pem").write_text(CERT)
    (d / "client-cert.pem").write_text(CERT)
    (d / "client-key.pem").write_text(KEY)
    os.chmod(d / "client-key.pem", 0o600)
    return d


def farm_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "farm.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ServebuildError) as info:
        farms.load_farm(farm_file(tmp_path, text), tmp_path)
    line = str(info.value)
    assert "\n" not in line
    assert KEY_SECRET not in line
    return line


GOOD = """\
platforms:
  linux/amd64:
    - host: unix:///var/run/docker.sock
  linux/arm64:
    - host: tcp://node2.lab:2376
      tls: {ca: certs/ca.pem, cert: certs/client-cert.pem, key: certs/client-key.pem}
      network: host
    - host: ssh://builder@gh200-02:2222
preflight_timeout: 20
"""


def test_good_farm_file(tmp_path, certs):
    farm = farms.load_farm(farm_file(tmp_path, GOOD), tmp_path)
    arm = farm.engines["linux/arm64"]
    assert [e.endpoint.host for e in arm] == ["tcp://node2.lab:2376", "ssh://builder@gh200-02:2222"]
    assert arm[0].endpoint.key == (certs / "client-key.pem").resolve()
    assert arm[0].endpoint.network == "host" and arm[0].field == "platforms.linux/arm64.0"
    assert farm.timeout == 20


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "platforms:\n  linux/riscv64:\n    - host: unix:///var/run/docker.sock\n",
            "farm.yaml:2: platforms.linux/riscv64: unknown platform 'linux/riscv64'",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n    - host: unix:///var/run//docker.sock\n",
            "farm.yaml:4: platforms.linux/amd64.1.host: unix:///var/run//docker.sock is listed twice for linux/amd64",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: ssh://Builder@NODE\n    - host: ssh://Builder@node:22\n",
            "is listed twice",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: http://node:2375\n",
            "farm.yaml:3: platforms.linux/amd64.0.host: 'http://node:2375': unsupported scheme 'http'",
        ),
        ("platforms:\n  linux/amd64:\n    - host: /var/run/docker.sock\n", "unsupported scheme '(none)'"),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n",
            "platforms.linux/amd64.0: tcp://node:2376 needs `tls`",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///run/d.sock\n      tls: {ca: certs/ca.pem}\n",
            "`tls` is for tcp:// engines",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n      tls: {ca: certs/ca.pem, key: certs/client-key.pem}\n",
            "platforms.linux/amd64.0.tls: key is given without cert",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n      tls: {ca: certs/ca.pem, cert: certs/nope.pem, key: certs/client-key.pem}\n",
            "farm.yaml:4: platforms.linux/amd64.0.tls.cert: certs/nope.pem: cannot read a TLS or ssh_config file: no such file or directory",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n      tls: {ca: certs}\n",
            "platforms.linux/amd64.0.tls.ca: certs is not a regular file",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n      tls: {ca: certs/ca.pem, cert: certs/client-key.pem, key: certs/client-cert.pem}\n",
            "platforms.linux/amd64.0.tls.cert: certs/client-key.pem is not a PEM certificate",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n      user: root\n",
            "farm.yaml:4: platforms.linux/amd64.0.user: unknown field",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\nregistry: r:5000\n",
            "farm.yaml:4: registry: unknown field",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: 2375\n",
            "platforms.linux/amd64.0.host: Input should be a valid string",
        ),
        ("platforms:\n  - linux/amd64\n", "farm.yaml:1: platforms: Input should be a valid dictionary"),
        (
            "platforms:\n  linux/amd64: unix:///var/run/docker.sock\n",
            "platforms.linux/amd64: Input should be a valid list",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\npreflight_timeout: '30'\n",
            "preflight_timeout: Input should be a valid integer",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n      network: bridge\n",
            "platforms.linux/amd64.0.network: Input should be 'host'",
        ),
        ("platforms:\n  linux/amd64:\n    - host: ssh://-oProxyCommand=sh\n", "is not a ssh:// engine address"),
        (
            "platforms:\n  linux/amd64:\n    - host: ssh://b@node\n      ssh_config: certs/none\n",
            "farm.yaml:4: platforms.linux/amd64.0.ssh_config: certs/none: cannot read a TLS or ssh_config file: no such file or directory",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: ssh://b@node\n      ssh_config: certs/ca.pem\n",
            "platforms.linux/amd64.0.ssh_config: certs/ca.pem is not an ssh_config file",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n      tls: {ca: certs/ca.pem}\n      ssh_config: x\n",
            "platforms.linux/amd64.0: `ssh_config` is for ssh:// engines, not tcp://",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: tcp://node:70000\n      tls: {ca: certs/ca.pem}\n",
            "port 70000 is out of range",
        ),
        ("platforms:\n  linux/amd64:\n    - host: unix:///run/../etc/d.sock\n", "is not a unix:// engine address"),
        ("platforms:\n  linux/amd64: []\n", "platforms.linux/amd64: lists no engine"),
        ("platforms: {}\n", "platforms: names no platform"),
        (
            "platforms:\n  linux/amd64:\n    - host: unix:///a.sock\n  linux/amd64:\n    - host: unix:///b.sock\n",
            "farm.yaml:4: platforms.linux/amd64: key 'linux/amd64' is given twice",
        ),
        ("- just a list\n", "farm.yaml: a farm file is a YAML mapping"),
        ("platforms: [unclosed\n", "farm.yaml:2: invalid YAML"),
    ],
)
def test_bad_farm_file(tmp_path, certs, text, expected):
    assert expected in load_error(tmp_path, text)


def test_key_problems_never_show_the_key(tmp_path, certs):
    """A key file holding a certificate, and a certificate file holding the key: the line names the
    file, never its bytes."""
    (certs / "swapped.pem").write_text(CERT)
    line = load_error(
        tmp_path,
        "platforms:\n  linux/amd64:\n    - host: tcp://node:2376\n"
        "      tls: {ca: certs/client-key.pem, cert: certs/client-cert.pem, key: certs/swapped.pem}\n",
    )
    assert "tls.ca: certs/client-key.pem is not a PEM certificate" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_key(tmp_path, certs):
    os.chmod(certs / "client-key.pem", 0)
    assert "permission denied" in load_error(tmp_path, GOOD)


def test_tls_files_linked_into_a_private_dir(tmp_path, certs):
    """The 20.10 client wants ca.pem/cert.pem/key.pem in one folder: other names get a 0700 dir of links."""
    client = DockerClient.__new__(DockerClient)
    endpoint = Endpoint(
        "tcp://node:2376", ca=certs / "ca.pem", cert=certs / "client-cert.pem", key=certs / "client-key.pem"
    )
    env = client._endpoint_variables(endpoint)
    folder = Path(env["DOCKER_CERT_PATH"])
    assert env["DOCKER_HOST"] == "tcp://node:2376" and env["DOCKER_TLS_VERIFY"] == "1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert os.readlink(folder / "key.pem") == str(certs / "client-key.pem")
    del client  # the folder goes with the client
    assert not folder.exists()
    same = Endpoint("tcp://node:2376", ca=certs / "ca.pem")
    assert DockerClient.__new__(DockerClient)._endpoint_variables(same)["DOCKER_CERT_PATH"] == str(certs)


def test_endpoint_env_replaces_the_callers(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://elsewhere:2376")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    client = DockerClient.__new__(DockerClient)
    client.endpoint = Endpoint("unix:///run/node2.sock")
    client._endpoint_env = client._endpoint_variables(client.endpoint)
    env = client._env()
    assert env["DOCKER_HOST"] == "unix:///run/node2.sock" and "DOCKER_TLS_VERIFY" not in env
    local = DockerClient.__new__(DockerClient)
    local.endpoint = None
    assert local._env()["DOCKER_HOST"] == "tcp://elsewhere:2376"  # no endpoint: the environment, as before


def _plan(platform="linux/amd64"):
    return SimpleNamespace(
        platform=platform,
        bases={"build": "servebuild/debian:bookworm-arm64", "runtime": "servebuild/debian:bookworm-arm64"},
        loaded=SimpleNamespace(
            file="recipes/toy.yaml",
            recipe=SimpleNamespace(
                bases=SimpleNamespace(
                    build=SimpleNamespace(ref="base:bookworm-{arch}"),
                    runtime=SimpleNamespace(ref="base:bookworm-{arch}"),
                )
            ),
        ),
        lock=None,
        debian=None,
    )


def test_unreachable_endpoints_are_one_line(tmp_path):
    """Real client, real refusals: a closed TCP port (with TLS files) and a socket that is not there."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    (tmp_path / "ca.pem").write_text(CERT)
    farm = farms.load_farm(
        farm_file(
            tmp_path,
            f"""\
        platforms:
          linux/amd64:
            - host: unix://{tmp_path}/nothing.sock
            - host: tcp://127.0.0.1:{port}
              tls: {{ca: ca.pem}}
        preflight_timeout: 10
        """,
        ),
        tmp_path,
    )
    notes = StringIO()
    with pytest.raises(DockerError) as info:
        farms.preflight(farm, {"linux/amd64": _plan()}, note=notes)
    line = str(info.value)
    assert line.startswith(
        f"farm.yaml:3: platforms.linux/amd64.0: engine unix://{tmp_path}/nothing.sock not reachable: "
    )
    assert "not reachable" in line and "(and 1 more engines for linux/amd64 failed)" in line and "\n" not in line
    assert f"skipping tcp://127.0.0.1:{port}" in notes.getvalue()


def test_silent_endpoint_times_out(tmp_path):
    """A TCP peer that accepts and never answers: the preflight gives up after preflight_timeout."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    (tmp_path / "ca.pem").write_text(CERT)
    try:
        farm = farms.load_farm(
            farm_file(
                tmp_path,
                f"""\
            platforms:
              linux/amd64:
                - host: tcp://127.0.0.1:{server.getsockname()[1]}
                  tls: {{ca: ca.pem}}
            preflight_timeout: 2
            """,
            ),
            tmp_path,
        )
        with pytest.raises(DockerError) as info:
            farms.preflight(farm, {"linux/amd64": _plan()})
        assert "did not answer `docker version` within 2s" in str(info.value) or "not reachable" in str(info.value)
    finally:
        server.close()


class AnsweringEngine:
    """Stands in for an aarch64 engine without QEMU binfmt (none exists on this machine): it answers
    `docker info`, holds the bases and fails the amd64 probe container with exec format error."""

    def __init__(self, arch="aarch64", probe=(1, "", "exec /usr/bin/uname: exec format error")):
        self.arch, self.probe, self.endpoint, self.calls = arch, probe, None, []
        self.name = "tcp://gh200:2376"

    def info(self):
        return {"Architecture": self.arch, "ID": "X"}

    def image_id(self, ref):
        return "sha256:" + "1" * 64

    def image_inspect(self, ref):
        return {"Id": "sha256:" + "1" * 64, "Architecture": ref.rsplit("-", 1)[1], "RepoDigests": []}

    def run(self, *args, check=True, timeout=None):
        self.calls.append(args)
        code, out, err = self.probe
        return subprocess.CompletedProcess(args, code, out, err)


def _gh200_farm(tmp_path):
    (tmp_path / "ca.pem").write_text(CERT)
    return farms.load_farm(
        farm_file(
            tmp_path,
            """\
        platforms:
          linux/amd64:
            - host: tcp://gh200:2376
              tls: {ca: ca.pem}
        """,
        ),
        tmp_path,
    )


def test_wrong_arch_engine_without_qemu(tmp_path):
    farm, engine = _gh200_farm(tmp_path), AnsweringEngine()
    plan = _plan("linux/amd64")
    plan.bases = {"build": "base:bookworm-amd64", "runtime": "base:bookworm-amd64"}
    with pytest.raises(DockerError) as info:
        farms.preflight(farm, {"linux/amd64": plan}, connect=lambda ep, t: engine)
    assert str(info.value) == (
        "farm.yaml:3: platforms.linux/amd64.0: tcp://gh200:2376 is arm64 and cannot run linux/amd64 containers "
        "(exec /usr/bin/uname: exec format error); register QEMU binfmt on that host (`invoke binfmt`) "
        "or list a amd64 engine for linux/amd64"
    )
    assert engine.calls[-1][:6] == ("run", "--rm", "--network", "none", "--platform", "linux/amd64")


def test_foreign_engine_with_qemu_passes(tmp_path):
    farm, engine = _gh200_farm(tmp_path), AnsweringEngine(probe=(0, "x86_64\n", ""))
    plan = _plan("linux/amd64")
    plan.bases = {"build": "base:bookworm-amd64", "runtime": "base:bookworm-amd64"}
    nodes = farms.preflight(farm, {"linux/amd64": plan}, connect=lambda ep, t: engine)
    assert nodes["linux/amd64"].client is engine


def test_platform_missing_from_the_farm(tmp_path):
    farm = _gh200_farm(tmp_path)
    with pytest.raises(RecipeError) as info:
        farms.preflight(farm, {"linux/arm64": _plan("linux/arm64")})
    assert str(info.value) == "farm.yaml: platforms: no engine for linux/arm64; the farm lists linux/amd64"


def test_prefixed_stream_keeps_lines_whole():
    out, lock = StringIO(), threading.Lock()
    a, b = farms.PrefixedStream("[a] ", out, lock), farms.PrefixedStream("[b] ", out, lock)
    a.write("#1 sta")
    b.write("#2 one\n#2 two\n")
    a.write("rt\n")
    assert out.getvalue() == "[b] #2 one\n[b] #2 two\n[a] #1 start\n"


def invoke(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--platform", "linux/amd64,linux/amd64"], "error: --platform: linux/amd64 is given twice"),
        (
            ["--platform", "linux/amd64,linux/arm64", "--tag", "me/toy:latest"],
            "error: --tag: 'me/toy:latest' would name every platform's image; put {arch} in it",
        ),
        (
            ["--platform", "linux/amd64,linux/arm64", "--cache-to", "127.0.0.1:5000/cache/toy"],
            "error: --cache-to: '127.0.0.1:5000/cache/toy' would name every platform's image",
        ),
        (
            ["--platform", "linux/amd64", "--cache-to", "cache/toy:{arch}"],
            "error: --cache-to: 'cache/toy:amd64' is not a registry reference",
        ),
        (["--platform", "linux/s390x,linux/amd64"], "error: --platform: unknown platform 'linux/s390x'"),
        (
            ["--platform", "linux/amd64", "--farm", "/nonexistent/farm.yaml"],
            "error: --farm: farm file '/nonexistent/farm.yaml' does not exist",
        ),
    ],
)
def test_cli_bad_options(args, expected):
    proc = invoke("build", "--recipe", "torch-cu130-bookworm", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(expected) and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""


def test_cli_bad_farm_file_and_unreachable_engine(tmp_path):
    bad = farm_file(tmp_path, "platforms:\n  linux/amd64:\n    - host: ftp://node\n")
    proc = invoke("build", "--recipe", "torch-cu130-bookworm", "--platform", "linux/amd64", "--farm", str(bad))
    assert proc.returncode == 2
    assert (
        proc.stderr == f"error: {bad}:3: platforms.linux/amd64.0.host: 'ftp://node': unsupported scheme 'ftp'; "
        f"an engine is {farms.SCHEMES}\n"
    )
    dead = farm_file(
        tmp_path,
        f"platforms:\n  linux/amd64:\n    - host: unix://{tmp_path}/dead.sock\n"
        f"  linux/arm64:\n    - host: unix:///var/run/docker.sock\n",
    )
    proc = invoke(
        "build", "--recipe", "torch-cu130-bookworm", "--platform", "linux/amd64,linux/arm64", "--farm", str(dead)
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(
        f"error: {dead}:3: platforms.linux/amd64.0: engine unix://{tmp_path}/dead.sock not reachable: "
    )
    assert "not reachable" in proc.stderr and proc.stderr.count("\n") == 1


def test_one_failed_platform_reports_the_others(capsys):
    """The CLI's report when one platform fails: the built one is printed, the failed one is one line,
    exit 2. The farm steps are stand-ins here (the real concurrent build is tests/integration/test_farm.py)."""
    from servebuild.cli.build import farm_build

    built = SimpleNamespace(
        tag="me/toy:amd64",
        image_id="sha256:" + "a" * 64,
        manifest_path=Path("m.json"),
        log_path=Path("b.log"),
        cache_ref=None,
    )
    node = SimpleNamespace(name="unix:///var/run/docker.sock", client=SimpleNamespace(server_version="20.10"))
    stand_in = SimpleNamespace(
        local_farm=lambda platforms: None,
        preflight=lambda farm, plans: {p: node for p in plans},
        build_all=lambda plans, nodes: (
            {"linux/amd64": built},
            {
                "linux/arm64": DockerError(
                    "build failed (exit 1): pip: no match; full log: build/toy/linux-arm64/build.log", field="build"
                )
            },
        ),
    )
    with pytest.raises(DockerError) as info:
        farm_build(Path("."), stand_in, {"linux/arm64": None, "linux/amd64": None}, None)
    assert info.value.exit_code == 2
    assert str(info.value) == (
        "linux/arm64: build: build failed (exit 1): pip: no match; full log: "
        "build/toy/linux-arm64/build.log; built: me/toy:amd64"
    )
    assert "built me/toy:amd64 (sha256:" in capsys.readouterr().out


def test_missing_base_names_the_node(tmp_path):
    """An engine without the recipe's base that cannot pull it (simulated: no second engine here;
    the integration test loads the bases into its real second engine)."""
    farm = _gh200_farm(tmp_path)
    engine = AnsweringEngine(arch="x86_64", probe=(1, "", "pull access denied for base"))
    engine.image_id = lambda ref: None
    plan = _plan("linux/amd64")
    plan.bases = {"build": "base:bookworm-amd64", "runtime": "base:bookworm-amd64"}
    with pytest.raises(DockerError) as info:
        farms.preflight(farm, {"linux/amd64": plan}, connect=lambda ep, t: engine)
    assert str(info.value) == (
        "farm.yaml:3: platforms.linux/amd64.0: tcp://gh200:2376 has no base image base:bookworm-amd64 "
        "(recipes/toy.yaml: bases.build) and cannot pull it; load it there (`docker save base:bookworm-amd64 | "
        "DOCKER_HOST=tcp://gh200:2376 docker load`) or make it with `invoke bootstrap-base` against that engine"
    )
    assert engine.calls == [("pull", "--platform", "linux/amd64", "base:bookworm-amd64")]
