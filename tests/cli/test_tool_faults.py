"""Each external tool failing, through the real CLI: one line on stderr that names the tool, exit 2,
no traceback. The failing tools are stand-ins written here (a git that reports a fault, a docker
client whose engine errors, a debootstrap that cannot be executed): they stand for host faults that
cannot be staged on demand on a real machine, and nothing else about the commands is faked."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_bad_input import assert_one_line, cli

FAKE_DOCKER = """#!/bin/sh
case "$1 $2" in
  "build --help") echo "  --secret stringArray   Secret to expose to the build"; exit 0 ;;
  "version --format") echo "20.10.24"; exit 0 ;;
esac
echo "Error response from daemon: simulated engine fault" >&2
exit 1
"""


def tool(directory: Path, name: str, text: str, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(mode)
    return path


def path_without(*names: str, extra: Path | None = None) -> str:
    """PATH with the directories holding `names` dropped (the interpreter's own directory kept)."""
    keep = [
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not any((Path(d) / n).exists() for n in names)
    ]
    return os.pathsep.join(([str(extra)] if extra else []) + keep + [str(Path(sys.executable).parent)])


@pytest.fixture
def cache(tmp_path):
    return {"SERVEBUILD_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home")}


def test_a_failing_git_is_one_line(tmp_path, cache):
    fake = tmp_path / "bin"
    tool(fake, "git", "#!/bin/sh\necho 'fatal: simulated fault: No space left on device' >&2\nexit 128\n")
    proc = cli(
        "lock", "--recipe", "sglang-native-fp8", env={**cache, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    )
    line = assert_one_line(proc, "git", "simulated fault")
    assert "CalledProcessError" not in line


def test_a_missing_git_is_one_line(tmp_path, cache):
    if shutil.which("git", path=path_without("git")):
        pytest.fail("git is still on the reduced PATH")
    proc = cli("lock", "--recipe", "sglang-native-fp8", env={**cache, "PATH": path_without("git")})
    assert_one_line(proc, "git", "cannot run git")


def test_a_failing_engine_client_is_one_line(tmp_path, cache):
    docker = tool(
        tmp_path / "bin", "docker", FAKE_DOCKER.replace('  "version --format") echo "20.10.24"; exit 0 ;;\n', "")
    )
    proc = cli("build", "--recipe", "torch-cu130-bookworm", env={**cache, "SERVEBUILD_DOCKER": str(docker)})
    assert_one_line(proc, "engine", "not reachable", "simulated engine fault")


def test_an_engine_client_that_cannot_be_executed_is_one_line(tmp_path, cache):
    docker = tool(tmp_path / "bin", "docker", "#!/nonexistent/interpreter\n")
    proc = cli("build", "--recipe", "torch-cu130-bookworm", env={**cache, "SERVEBUILD_DOCKER": str(docker)})
    assert_one_line(proc, "cannot run docker client", str(docker))


def test_a_failing_mmdebstrap_is_one_line(tmp_path, cache):
    """(An mmdebstrap that cannot be executed is not staged: exec would go on to the next one on PATH.)
    trixie is not pinned by the main job's lock: the base is resolved from the mirror, which runs mmdebstrap."""
    fake = tmp_path / "bin"
    docker = tool(fake, "docker", FAKE_DOCKER)
    tool(fake, "mmdebstrap", "#!/bin/sh\necho 'E: simulated fault: Failed getting release file' >&2\nexit 1\n")
    proc = cli(
        "bootstrap-base",
        "--arch",
        "amd64",
        "--suite",
        "trixie",
        "--tag",
        "servebuild-test/never:1",
        env={**cache, "SERVEBUILD_DOCKER": str(docker), "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: bootstrap-base: mmdebstrap trixie amd64 failed (exit 1)"), (
        proc.stderr
    )
    assert not list((tmp_path / "cache" / "rootfs").glob("*.tar")), "a failed mmdebstrap left a rootfs"
