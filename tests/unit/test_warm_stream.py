"""`invoke warm` streams the command's output to build/.../warm/warm.log and holds only a bounded tail
(issue 31, point 4: 400 MB of output peaked at 1.17 GiB). No engine: a fake docker client
(tests/unit/test_warm_bounds.py's kind) answers the calls warm makes and runs the command on this host."""

from __future__ import annotations

import hashlib
import os
import tracemalloc

import pytest

from servebuild import procs
from servebuild.build.docker import DockerClient
from servebuild.check.warm import WarmRequest, run_warm
from servebuild.errors import HostError

IMAGE_ID = "sha256:" + "a" * 64
MANIFEST = "0" * 64

# As in test_warm_bounds.py, with the cache tool's answers read from files the test writes (a command
# that replaced the tool in the container prints whatever it likes) and a pack/cp/build/tag that
# succeed, so a run that got past the census would reach `docker tag`.
FAKE_CLIENT = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  build)
    [ "$2" = --help ] && echo "  --secret stringArray   Secret to expose to the build" && exit 0
    exit 1 ;;
  version) echo 20.10.24; exit 0 ;;
  info) echo '{{"Architecture": "x86_64"}}'; exit 0 ;;
  image)
    if [ "$2" = inspect ] && [ "$3" = --format ]; then echo "{image_id}"; exit 0; fi
    if [ "$2" = inspect ]; then
      echo '[{{"Id": "{image_id}", "Os": "linux", "Architecture": "amd64",
              "Config": {{"Labels": {{"io.servebuild.manifest.sha256": "{manifest}"}}}}}}]'
      exit 0
    fi ;;
  run) echo 0123456789abcdef; exit 0 ;;
  rm) exit 0 ;;
  tag) exit 0 ;;
  exec)
    shift 2
    if [ "$1" = /bin/sh ] && [ "$2" = -c ]; then exec /bin/sh -c "$3"; fi
    case "$3 $4" in
      "seed ") exit 0 ;;
      "census --listing") cat "{answers}/listing"; exit 0 ;;
      "census --since") cat "{answers}/since"; exit 0 ;;
      "pack --out") cat "{answers}/pack"; exit 0 ;;
    esac ;;
esac
echo "Error response from daemon: the fake client does not do: $*" >&2
exit 1
"""


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    log, answers = tmp_path / "calls.log", tmp_path / "answers"
    answers.mkdir()
    (answers / "listing").write_text(f'{{"manifest_sha256": "{MANIFEST}", "origin": null}}\n')
    (answers / "since").write_text('{"changed": {}}\n')
    (answers / "pack").write_text('{"files": 0, "bytes": 0}\n')
    client = tmp_path / "docker"
    client.write_text(FAKE_CLIENT.format(log=log, image_id=IMAGE_ID, manifest=MANIFEST, answers=answers))
    client.chmod(0o755)
    monkeypatch.setenv("SERVEBUILD_DOCKER", str(client))
    monkeypatch.setattr(DockerClient, "_connect_api", lambda self: None)
    return DockerClient(), log, answers


def quiet(*_):
    pass


# ------------------------------------------------------------------ point 4: output streamed, memory bounded


def test_copy_tail_writes_every_chunk_and_holds_a_bounded_tail(tmp_path):
    """A fake stream (a generator of 512 chunks of 64 KiB, 32 MiB in all): the file holds every byte in
    order, the memory held stays under 1 MiB, and the tail is the stream's last `keep` bytes."""
    digest = hashlib.sha256()

    def stream():
        for i in range(512):
            chunk = bytes([i % 251]) * ((64 << 10) - 1) + b"\n"
            digest.update(chunk)
            yield chunk

    path = tmp_path / "out.log"
    tracemalloc.start()
    try:
        with open(path, "wb") as out:
            tail, total = procs.copy_tail(stream(), out, keep=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 512 * (64 << 10) == path.stat().st_size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest.hexdigest()
    assert tail == (bytes([511 % 251]) * ((64 << 10) - 1) + b"\n")[-4096:]
    assert peak < 1 << 20, peak


def test_copy_tail_keeps_the_tail_across_small_and_huge_chunks():
    tail, total = procs.copy_tail(iter([b"a" * 10, b"b" * 3, b"", b"c" * 100_000, b"de"]), None, keep=5)
    assert (tail, total) == (b"cccde", 100_015)
    assert procs.copy_tail(iter([]), None, keep=5) == (b"", 0)


def test_warm_streams_the_commands_output_to_its_log_not_memory(fake_engine, tmp_path):
    """A fake runner: a command that prints 24 MB. The log holds all of it; the Python heap never held
    it (the old run_warm captured it whole, twice over: its peak was several times the output)."""
    engine, _, _ = fake_engine
    size = 24_000_000
    command = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo the-last-line >&2"
    tracemalloc.start()
    try:
        result = run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command=command, gpus="none", check_only=True),
            tmp_path / "warm",
            echo=quiet,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.new_files == {}
    log = tmp_path / "warm" / "warm.log"
    assert log.stat().st_size == len(f"$ {command}\n") + size + len("\nthe-last-line\n")
    with open(log, "rb") as fh:
        assert fh.readline() == f"$ {command}\n".encode()
        fh.seek(-30, os.SEEK_END)
        assert fh.read().endswith(b"x\nthe-last-line\n")
    assert peak < 8 << 20, f"peak {peak} bytes for {size} bytes of output"


def test_a_failed_command_is_one_line_with_its_last_output_line_and_the_log(fake_engine, tmp_path):
    engine, log, _ = fake_engine
    with pytest.raises(HostError) as err:
        run_warm(
            engine,
            WarmRequest(
                image="servebuild/x:amd64",
                command="seq 100000; echo 'nvcc: \x1b[31mboom' >&2; exit 3",
                gpus="none",
                tag="servebuild/x:w",
            ),
            tmp_path / "warm",
            echo=quiet,
        )
    message = str(err.value)
    assert err.value.field == "--run" and err.value.exit_code == 2 and "\n" not in message
    assert "exited 3" in message and "nvcc: \\x1b[31mboom" in message, message
    assert str(tmp_path / "warm" / "warm.log") in message and len(message) < 600, message
    assert (tmp_path / "warm" / "warm.log").read_bytes().endswith(b"99999\n100000\nnvcc: \x1b[31mboom\n")
    assert not any(c.split()[0] in ("tag", "cp") for c in log.read_text().splitlines())


def test_binary_output_is_kept_byte_for_byte(fake_engine, tmp_path):
    """The old run decoded the output as text (a command printing invalid UTF-8 raised in the decoder)."""
    engine, _, _ = fake_engine
    run_warm(
        engine,
        WarmRequest(image="servebuild/x:amd64", command="printf '\\377\\376\\000ok'", gpus="none", check_only=True),
        tmp_path / "warm",
        echo=quiet,
    )
    assert (tmp_path / "warm" / "warm.log").read_bytes().endswith(b"\n\xff\xfe\x00ok")


def test_a_link_planted_at_the_warm_log_is_refused_before_the_command_runs(fake_engine, tmp_path):
    """No byte is written through a link planted at build/.../warm/warm.log, and the hour of work is
    not spent first: the log is opened (no link followed) before the command starts."""
    engine, log, _ = fake_engine
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm" / "warm.log").symlink_to(victim)
    with pytest.raises(HostError, match="symbolic link") as err:
        run_warm(
            engine,
            WarmRequest(
                image="servebuild/x:amd64", command=f"echo ran > {tmp_path / 'ran.txt'}", gpus="none", check_only=True
            ),
            tmp_path / "warm",
            echo=quiet,
        )
    assert "\n" not in str(err.value) and str(tmp_path / "warm" / "warm.log") in str(err.value)
    assert victim.read_text() == "precious\n"
    assert not any("echo ran" in c for c in log.read_text().splitlines()) and not (tmp_path / "ran.txt").exists()
