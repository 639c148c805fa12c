"""Host faults under the paths servebuild writes, through the real CLI: a build directory that is a
file, a full file system, a read-only file system, a relative $SERVEBUILD_CACHE. Each is one line
naming the path, what was being written and the errno text, exit 2, no traceback, nothing half-done.

The faults are real: a small tmpfs mounted over the path (full: filled first; read-only: remounted
ro), unmounted in the fixture's finalizer. This needs root (CI and this machine run tests as root)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT, assert_one_line, fixture_recipe, make_project, make_upstream

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return make_upstream(tmp_path_factory.mktemp("faults-upstream"))


@pytest.fixture
def project(tmp_path, upstream):
    """The toy fixture project (a copy of tasks.py over this checkout's servebuild), amd64 only."""
    root = make_project(tmp_path, upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    shutil.copyfile(REPO_ROOT / "tasks.py", root / "tasks.py")
    return root


def run_cli(project: Path, *args, cwd=None, **env):
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(project.parent / "cache"), **env}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(project), *args],
        cwd=cwd or project,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def mount():
    """mount(DIR, full=False, read_only=False): a 256 KiB tmpfs on DIR, unmounted at the end."""
    mounted = []

    def make(path: Path, full: bool = False, read_only: bool = False) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], check=True)
        mounted.append(path)
        if full:
            fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:  # ENOSPC: full
                pass
            finally:
                os.close(fd)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        return path

    yield make
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name)


DRY_RUN = ("build", "--recipe", "toy", "--dry-run")


@pytest.mark.parametrize("blocker", ["build", "build/toy", "build/toy/linux-amd64"])
def test_a_build_dir_that_is_a_file_is_assert_one_line(project, blocker):
    (project / blocker).parent.mkdir(parents=True, exist_ok=True)
    (project / blocker).write_text("a file where a directory goes\n")
    line = assert_one_line(run_cli(project, *DRY_RUN), "not a directory", "cannot write")
    assert f"{project / blocker}" in line or f"{blocker} " in line or f"{blocker}:" in line, line


def test_a_full_build_dir_is_one_line_and_leaves_no_half_context(project, mount):
    build = mount(project / "build", full=True)
    assert_one_line(
        run_cli(project, *DRY_RUN), "build/toy", "cannot write the build context", "No space left on device"
    )
    assert not (build / "toy" / "linux-amd64" / "dry-run" / "context").exists()
    assert leftovers(build) == []


def test_a_read_only_build_dir_is_assert_one_line(project, mount):
    mount(project / "build", read_only=True)
    assert_one_line(run_cli(project, *DRY_RUN), "build/toy", "cannot write", "Read-only file system")


def test_a_read_only_cache_is_assert_one_line(project, mount):
    cache = mount(project.parent / "ro-cache", read_only=True)
    assert_one_line(
        run_cli(project, "fetch", "--recipe", "toy", SERVEBUILD_CACHE=str(cache)),
        str(cache),
        "source cache",
        "Read-only file system",
    )


def test_a_full_cache_is_assert_one_line(project, mount):
    cache = mount(project.parent / "full-cache", full=True)
    assert_one_line(
        run_cli(project, "fetch", "--recipe", "toy", SERVEBUILD_CACHE=str(cache)), str(cache), "No space left on device"
    )
    assert leftovers(cache) == []


def test_a_relative_cache_is_taken_from_the_working_directory(project, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    proc = run_cli(project, "fetch", "--recipe", "toy", cwd=work, SERVEBUILD_CACHE="rel/cache")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"tarball: {work / 'rel' / 'cache' / 'tarballs'}" in proc.stdout, proc.stdout
    assert not (project / "rel").exists()


def test_a_read_only_bench_output_is_assert_one_line(project, mount):
    out = mount(project.parent / "bench-out", read_only=True)
    assert_one_line(
        run_cli(project, "bench", "--suite", "decode", "--url", "http://127.0.0.1:9", "--out", str(out / "x")),
        str(out / "x"),
        "Read-only file system",
    )


def test_a_full_bisect_report_dir_is_assert_one_line(mount, tmp_path):
    """bisect's report writer (the last thing a bisect run writes), called directly: a real full tmpfs."""
    from servebuild.check.bisect import Row, write_report
    from servebuild.errors import HostError

    out = mount(tmp_path / "bisect", full=True)
    rows = [Row(variant="a", patches=[], tag="t", image_id="sha256:" + "0" * 64, build_s=1.0)]
    with pytest.raises(HostError) as caught:
        write_report(rows, out / "report")
    assert "cannot write the bisect report" in str(caught.value) and "No space left on device" in str(caught.value)
    assert leftovers(out) == []


def test_a_full_manifest_dir_is_assert_one_line(mount, tmp_path):
    """The build manifest's writer (fsutil.writing around write_json, as run.build calls it): a real full tmpfs."""
    from servebuild.errors import HostError
    from servebuild.fsutil import write_json, writing

    out = mount(tmp_path / "b", full=True)
    with pytest.raises(HostError) as caught:
        with writing(out / "manifest.json", "the build manifest"):
            write_json(out / "manifest.json", {"x": "y" * 10000})
    assert str(caught.value) == f"{out / 'manifest.json'}: cannot write the build manifest: No space left on device"
    assert leftovers(out) == []


def test_the_front_door_turns_any_unnamed_host_fault_into_assert_one_line(mount, tmp_path):
    """The net under fsutil.writing: a write no `writing` block names still ends as one line, exit 2;
    an OSError that is no host fault (a bug) is not hidden."""
    from invoke import Exit
    from servebuild.cli.front import one_line_errors

    out = mount(tmp_path / "ro", read_only=True)

    @one_line_errors
    def task(c, path=None):
        Path(path).write_text("x")

    with pytest.raises(Exit) as caught:
        task(None, path=str(out / "f"))
    assert caught.value.code == 2 and caught.value.message == f"error: {out / 'f'}: Read-only file system"

    @one_line_errors
    def buggy(c):
        raise OSError(errno.EBADF, "Bad file descriptor")

    with pytest.raises(OSError):
        buggy(None)


def test_a_bench_output_that_fills_up_is_one_line(project, mount):
    """Issue 31, point 9: a real tmpfs with two pages left: the samples fit, what follows does not. The
    bench said its line, then `invoke bench` drew ttft.png into the full directory and printed a second
    one; now the bench's is the one line, and no empty bench.json is left (written whole or not at all)."""
    from unit.test_bench_wire import StandIn, sse

    out = mount(project.parent / "bench-full", full=True)
    filler = out / "filler"
    os.truncate(filler, max(0, filler.stat().st_size - 8192))
    server = StandIn(sse(["a", "b", "c", "d"], "\n", usage=4))
    try:
        proc = run_cli(
            project,
            "bench",
            "--suite",
            "decode",
            "--url",
            server.url,
            "--out",
            str(out / "x"),
            "--runs",
            "3",
            "--warmup",
            "0",
            "--calibrate",
            "off",
            "--max-tokens",
            "4",
            MPLCONFIGDIR=str(project.parent / "mpl"),
        )
    finally:
        server.close()
    assert_one_line(proc, str(out / "x"), "No space left on device")
    bench_json = out / "x" / "bench.json"
    assert not bench_json.exists() or bench_json.read_text().strip().startswith("{")
