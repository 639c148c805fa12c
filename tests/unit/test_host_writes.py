"""Files servebuild writes on the host (the build lock, the build log, the temp file of an atomic write)
are never written through a symlink planted at their path, and a FIFO, device or directory there is
refused without blocking: one line naming the path and the problem (a ServebuildError), and the
file a link points at is left as it was. The link targets are temp files outside the build dir."""

from __future__ import annotations

import os
import signal
import stat
from contextlib import contextmanager
from pathlib import Path

import pytest

from servebuild.build.buildlock import build_lock
from servebuild.build.docker import BuildRequest, DockerClient
from servebuild.errors import ServebuildError
from servebuild import fsutil
from servebuild.fsutil import atomic_write

PRECIOUS = "root:x:0:0:root:/root:/bin/bash\n"


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) if the block takes longer: a FIFO opened for writing blocks."""

    def expired(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file outside the build dir that a planted link points at."""
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path


@pytest.fixture
def build_dir(tmp_path) -> Path:
    path = tmp_path / "build" / "toy" / "linux-amd64"
    path.mkdir(parents=True)
    return path


def one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert isinstance(exc, ServebuildError), repr(exc)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text


def test_the_build_lock_is_not_taken_through_a_planted_symlink(build_dir, victim):
    (build_dir / "build.lock").symlink_to(victim)
    with within(10), pytest.raises(ServebuildError) as caught:
        with build_lock(build_dir, "toy"):
            pass
    assert victim.read_text() == PRECIOUS
    one_line(caught.value, str(build_dir / "build.lock"), "the build lock", "symbolic link")
    assert (build_dir / "build.lock").is_symlink()


def test_a_fifo_at_the_build_lock_is_refused_without_blocking(build_dir):
    os.mkfifo(build_dir / "build.lock")
    with within(10), pytest.raises(ServebuildError) as caught:
        with build_lock(build_dir, "toy"):
            pass
    one_line(caught.value, str(build_dir / "build.lock"), "the build lock", "FIFO")


def test_the_build_lock_still_holds_and_names_its_pid(build_dir):
    with build_lock(build_dir, "toy"):
        assert (build_dir / "build.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(ServebuildError) as caught:
            with build_lock(build_dir, "toy"):
                pass
        one_line(caught.value, f"pid {os.getpid()}")
    assert stat.S_IMODE((build_dir / "build.lock").stat().st_mode) == 0o644 & ~_umask()


FAKE_DOCKER = """#!/bin/sh
# `docker build ... --iidfile FILE ...`: a line of progress, then the image id
while [ $# -gt 0 ]; do
  if [ "$1" = --iidfile ]; then printf 'sha256:%064d' 0 > "$2"; fi
  shift
done
echo '#1 [internal] load build definition from Dockerfile'
"""


def fake_client(tmp_path: Path) -> DockerClient:
    script = tmp_path / "fake-docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(0o755)
    client = DockerClient.__new__(DockerClient)  # no engine is asked: build() only runs the client
    client.client, client.endpoint, client.timeout, client._endpoint_env, client._api = (
        str(script),
        None,
        None,
        {},
        None,
    )
    return client


def request(tmp_path: Path) -> BuildRequest:
    context = tmp_path / "context"
    context.mkdir(exist_ok=True)
    return BuildRequest(context=context, platform="linux/amd64", build_args={}, labels={}, secrets={})


def test_the_build_log_is_written_where_no_link_was_planted(tmp_path, build_dir):
    image_id = fake_client(tmp_path).build(request(tmp_path), build_dir / "build.log", echo=None)
    assert image_id == "sha256:" + "0" * 64
    log = (build_dir / "build.log").read_text()
    assert log.startswith("$ ") and "load build definition" in log


def test_the_build_log_is_not_written_through_a_planted_symlink(tmp_path, build_dir, victim):
    (build_dir / "build.log").symlink_to(victim)
    with within(10), pytest.raises(ServebuildError) as caught:
        fake_client(tmp_path).build(request(tmp_path), build_dir / "build.log", echo=None)
    assert victim.read_text() == PRECIOUS
    one_line(caught.value, str(build_dir / "build.log"), "the build log", "symbolic link")


def test_a_fifo_at_the_build_log_is_refused_without_blocking(tmp_path, build_dir):
    os.mkfifo(build_dir / "build.log")
    with within(10), pytest.raises(ServebuildError) as caught:
        fake_client(tmp_path).build(request(tmp_path), build_dir / "build.log", echo=None)
    one_line(caught.value, str(build_dir / "build.log"), "the build log", "FIFO")


def test_a_directory_at_the_build_log_is_one_line(tmp_path, build_dir):
    (build_dir / "build.log").mkdir()
    with within(10), pytest.raises(ServebuildError) as caught:
        fake_client(tmp_path).build(request(tmp_path), build_dir / "build.log", echo=None)
    one_line(caught.value, str(build_dir / "build.log"), "the build log", "directory")


def test_an_atomic_write_does_not_follow_a_planted_temp_file_link(build_dir, victim):
    """The temp file's name is predictable (.NAME.tmpPID): a link planted there is not written through."""
    target = build_dir / "manifest.json"
    (build_dir / f".manifest.json.tmp{os.getpid()}").symlink_to(victim)
    atomic_write(target, "{}\n")
    assert victim.read_text() == PRECIOUS
    assert target.read_text() == "{}\n" and not target.is_symlink()
    assert sorted(p.name for p in build_dir.iterdir()) == ["manifest.json"]


def test_an_atomic_write_replaces_a_planted_link_instead_of_following_it(build_dir, victim):
    (build_dir / "manifest.json").symlink_to(victim)
    atomic_write(build_dir / "manifest.json", "{}\n")
    assert victim.read_text() == PRECIOUS and not (build_dir / "manifest.json").is_symlink()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_open_host_file_creates_truncates_and_keeps_open_modes(tmp_path):
    path = tmp_path / "out.txt"
    fd = fsutil.open_host_file(path, "a test file")
    with os.fdopen(fd, "w") as fh:
        fh.write("long first text\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
    fd = fsutil.open_host_file(path, "a test file")
    assert os.get_blocking(fd)  # O_NONBLOCK is cleared once the file is known to be regular
    with os.fdopen(fd, "w") as fh:
        fh.write("short\n")
    assert path.read_text() == "short\n"


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo", "directory", "device"])
def test_open_host_file_refuses_what_is_not_a_regular_file(tmp_path, victim, kind):
    path = tmp_path / "out.txt"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "outside" / "new-file")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")  # a device node needs root to make; the link is refused first
    with within(10), pytest.raises(ServebuildError) as caught:
        os.close(fsutil.open_host_file(path, "a test file"))
    one_line(caught.value, str(path), "cannot write a test file")
    assert victim.read_text() == PRECIOUS
    assert not (tmp_path / "outside" / "new-file").exists()


def test_open_host_file_refuses_a_device_node_without_a_link():
    """/dev/null itself: a character device, opened without blocking and refused after fstat."""
    with within(10), pytest.raises(ServebuildError) as caught:
        os.close(fsutil.open_host_file(Path("/dev/null"), "a test file"))
    one_line(caught.value, "/dev/null", "character device")


def test_a_fault_on_the_temp_file_of_an_atomic_write_names_the_file_being_written(build_dir):
    """writing(PATH) takes an OSError naming PATH's temp file (.PATH.tmpPID) as its own: one line naming PATH."""
    from servebuild.errors import HostError
    from servebuild.fsutil import writing

    target = build_dir / "dry-run-source.tar"
    (build_dir / f".dry-run-source.tar.tmp{os.getpid()}").mkdir()  # the temp file cannot be made
    with pytest.raises(HostError) as caught:
        with writing(target, "the dry run's source placeholder"):
            atomic_write(target, b"")
    one_line(caught.value, f"{target}: cannot write the dry run's source placeholder")


def test_a_planted_link_target_is_shown_escaped(tmp_path):
    """The link's target is whatever the planter chose: no control character reaches the terminal."""
    path = tmp_path / "build.log"
    path.symlink_to("/tmp/\x1b[2Jx\ry")
    with pytest.raises(ServebuildError) as caught:
        os.close(fsutil.open_host_file(path, "the build log"))
    text = one_line(caught.value, "symbolic link", "\\x1b")
    assert "\x1b" not in text and "\r" not in text
