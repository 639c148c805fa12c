"""An ssh:// farm engine reached through a real OpenSSH server started by this test.

The sshd listens on 127.0.0.1 with its own host key, accepts one client key and nothing else
(no passwords, no PAM). Behind it is this machine's engine: the docker client's ssh transport runs
`docker system dial-stdio` on the far side, as it would on a GH200 build host. The farm entry's
`ssh_config` names the identity and the known-hosts file, so nothing in ~/.ssh is read or written.
Nothing is faked.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from invoke import Context, Exit

import tasks
from integration.conftest import HOST_CA
from support import free_port, make_project

DOCKER = "/usr/bin/docker"
SSHD = Path("/usr/sbin/sshd")
TAG = "servebuild-test/farm-ssh:{arch}"


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "servebuild-test", "-f", str(path)], check=True
    )
    return path.with_suffix(".pub").read_text().strip()


class SSHServer:
    """sshd -D on 127.0.0.1:PORT, key login for root only; every file is in this test's dir."""

    def __init__(self, folder: Path):
        self.dir = folder
        self.port = free_port()
        self.host_pub = keygen(folder / "host_key")
        self.client_pub = keygen(folder / "client_key")
        (folder / "authorized_keys").write_text(self.client_pub + "\n")
        (folder / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
            f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nLogLevel VERBOSE\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        self.log = (folder / "sshd.log").open("w")
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(folder / "sshd_config")], stdout=self.log, stderr=subprocess.STDOUT
        )
        for _ in range(100):
            if "Server listening" in (folder / "sshd.log").read_text():
                break
            if self.proc.poll() is not None:
                raise RuntimeError((folder / "sshd.log").read_text())
            time.sleep(0.05)

    @property
    def host(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def client_config(self, name: str, known_host_key: str | None = None, identity: str = "client_key") -> Path:
        known = self.dir / f"{name}.known_hosts"
        known.write_text(f"[127.0.0.1]:{self.port} {known_host_key or self.host_pub}\n")
        path = self.dir / f"{name}.ssh_config"
        path.write_text(
            f"Host 127.0.0.1\n  IdentityFile {self.dir / identity}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
            f"  GlobalKnownHostsFile /dev/null\n"
        )
        return path

    def accepted_logins(self) -> int:
        return (self.dir / "sshd.log").read_text().count("Accepted publickey for root")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not SSHD.exists():
        pytest.fail("openssh-server is not installed; scripts/setup.sh installs it")
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def project(tmp_path_factory, upstream) -> Path:
    return make_project(tmp_path_factory.mktemp("farm-ssh"), upstream)


@pytest.fixture(autouse=True)
def _project(monkeypatch, project):
    monkeypatch.setattr(tasks, "ROOT", project)
    if HOST_CA.exists():
        monkeypatch.setenv("SERVEBUILD_CA_BUNDLE", str(HOST_CA))
    yield
    subprocess.run([DOCKER, "image", "rm", "-f", TAG.format(arch="amd64")], capture_output=True)


def write_farm(project: Path, host: str, config: Path) -> Path:
    farm = project / "farm-ssh.yaml"
    farm.write_text(f"platforms:\n  linux/amd64:\n    - host: {host}\n      ssh_config: {config}\n")
    return farm


def test_ssh_engine_builds_and_smoke_tests(base_images, sshd, project, capsys):
    farm = write_farm(project, sshd.host, sshd.client_config("good"))
    before = sshd.accepted_logins()
    tasks.build(Context(), recipe="toy", platform="linux/amd64", farm=str(farm), tag=TAG)
    out = capsys.readouterr()
    assert sshd.host in out.out + out.err, "the build should say which engine built it"
    assert sshd.accepted_logins() > before, "the build did not go through the ssh server"
    tag = TAG.format(arch="amd64")
    inspect = subprocess.run(
        [DOCKER, "image", "inspect", "--format", "{{.Architecture}}", tag], capture_output=True, text=True
    )
    assert inspect.stdout.strip() == "amd64", inspect.stderr
    logins = sshd.accepted_logins()
    tasks.test_image(Context(), recipe="toy", platform="linux/amd64", farm=str(farm))
    verdict = json.loads((project / "build" / "toy" / "linux-amd64" / "smoke" / "verdict.json").read_text())
    assert verdict["passed"]
    assert sshd.accepted_logins() > logins, "the smoke suite did not reach the engine through ssh"


@pytest.mark.parametrize("case", ["wrong host key", "key not authorized"])
def test_ssh_refusals_are_one_line_and_nothing_is_tagged(base_images, sshd, project, capsys, case):
    if case == "wrong host key":
        config = sshd.client_config("impostor", known_host_key=keygen(sshd.dir / "other_host"))
        expected = "Host key verification failed"
    else:
        keygen(sshd.dir / "stranger")
        config = sshd.client_config("stranger", identity="stranger")
        expected = "Permission denied (publickey)"
    farm = write_farm(project, sshd.host, config)
    start = time.monotonic()
    with pytest.raises(Exit) as info:
        tasks.build(Context(), recipe="toy", platform="linux/amd64", farm=str(farm), tag=TAG)
    message = info.value.message
    assert info.value.code == 2 and "\n" not in message, message
    assert message.startswith(f"error: farm-ssh.yaml:3: platforms.linux/amd64.0: engine {sshd.host} not reachable: "), (
        message
    )
    assert expected in message, message
    assert time.monotonic() - start < 60, "BatchMode: ssh must fail, not wait for a prompt"
    gone = subprocess.run([DOCKER, "image", "inspect", TAG.format(arch="amd64")], capture_output=True)
    assert gone.returncode != 0


def test_ssh_config_is_checked_before_anything_connects(project, capsys):
    farm = project / "farm-bad.yaml"
    farm.write_text("platforms:\n  linux/amd64:\n    - host: ssh://root@127.0.0.1:1\n      ssh_config: nope\n")
    with pytest.raises(Exit) as info:
        tasks.build(Context(), recipe="toy", platform="linux/amd64", farm=str(farm), tag=TAG)
    assert info.value.message == (
        "error: farm-bad.yaml:4: platforms.linux/amd64.0.ssh_config: "
        "nope: cannot read a TLS or ssh_config file: no such file or directory"
    )
    (project / "not-ssh.txt").write_text("just words\n")
    farm.write_text(
        "platforms:\n  linux/amd64:\n    - host: unix:///var/run/docker.sock\n      ssh_config: not-ssh.txt\n"
    )
    with pytest.raises(Exit) as info:
        tasks.build(Context(), recipe="toy", platform="linux/amd64", farm=str(farm), tag=TAG)
    assert "`ssh_config` is for ssh:// engines, not unix://" in info.value.message
    assert os.environ.get("DOCKER_HOST") is None or "ssh" not in os.environ["DOCKER_HOST"]
