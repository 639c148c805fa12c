"""The in-image cache tool stays in the cache (issue 31, point 5): `seed` never writes through a linked
directory, never copies a seed link as its target's content, leaves no temp file when a write fails and
never rewrites an origin.json that is there; `census` and `pack` name a directory they cannot read
rather than undercount. Each tool runs as the image runs it (a subprocess, a timeout), except where a
read error is simulated in-process (the suite runs as root, who reads every directory)."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile

import pytest

from servebuild import TOOLS_DIR

CACHE_TOOL = str(TOOLS_DIR / "servebuild_cache.py")


def make_seed(tmp_path):
    seed = tmp_path / "seed" / "cache"
    (seed / "tvm-ffi" / "mod_a").mkdir(parents=True)
    (seed / "tvm-ffi" / "mod_a" / "a.so").write_bytes(b"seeded a")
    (tmp_path / "manifest.json").write_text("{}")
    return seed


def run_seed(tmp_path, cache, preexec=None, image_id="sha256:" + "1" * 64):
    return subprocess.run(
        [sys.executable, CACHE_TOOL, "seed", "--cache", str(cache), "--seed", str(tmp_path / "seed")],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=tmp_path,
        preexec_fn=preexec,
        env={**os.environ, "SERVEBUILD_MANIFEST": str(tmp_path / "manifest.json"), "SERVEBUILD_IMAGE_ID": image_id},
    )


def one_line(proc, code=2):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1 and "Traceback" not in proc.stderr, (
        proc.returncode,
        proc.stderr,
    )
    assert lines[0].startswith("servebuild-cache: seed"), lines[0]
    return lines[0]


def everything_under(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files)


@pytest.mark.parametrize("linked", [".servebuild", "tvm-ffi", "tvm-ffi/mod_a", "."])
def test_seed_refuses_a_cache_directory_that_is_a_link_and_writes_nothing_outside(tmp_path, linked):
    make_seed(tmp_path)
    cache, outside = tmp_path / "cache", tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    if linked == ".":
        cache = tmp_path / "cache-link"
        cache.symlink_to(outside)
    else:
        (cache / linked).parent.mkdir(parents=True, exist_ok=True)
        (cache / linked).symlink_to(outside)
    line = one_line(run_seed(tmp_path, cache))
    assert "is a link" in line and str(cache / linked).rstrip("/.") in line, line
    assert everything_under(outside) == ["passwd"] and (outside / "passwd").read_text() == "root:x:0:0\n"


def test_seed_copies_a_link_inside_the_seed_as_a_link_and_skips_one_that_leaves_it(tmp_path):
    seed = make_seed(tmp_path)
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    (seed / "tvm-ffi" / "shadow").symlink_to(secret)  # absolute, outside the seed
    (seed / "tvm-ffi" / "up").symlink_to("../../../shadow")  # relative, outside the seed
    (seed / "tvm-ffi" / "etc").symlink_to(tmp_path)  # a directory outside the seed
    (seed / "tvm-ffi" / "alias.so").symlink_to("mod_a/a.so")  # inside the seed: kept as a link
    cache = tmp_path / "cache"
    proc = run_seed(tmp_path, cache)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if "not copied" in line]
    assert len(skipped) == 3 and all("a link out of the seed" in line for line in skipped), proc.stderr
    assert "seeded 2 files" in proc.stderr, proc.stderr
    assert not os.path.lexists(cache / "tvm-ffi" / "shadow") and not os.path.lexists(cache / "tvm-ffi" / "up")
    assert not os.path.lexists(cache / "tvm-ffi" / "etc")
    assert os.readlink(cache / "tvm-ffi" / "alias.so") == "mod_a/a.so"
    assert (cache / "tvm-ffi" / "alias.so").read_bytes() == b"seeded a"  # the cache's own copy


def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, like ENOSPC
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_a_write_that_fails_mid_seed_leaves_no_temp_file(tmp_path):
    seed = make_seed(tmp_path)
    (seed / "tvm-ffi" / "mod_a" / "big.so").write_bytes(b"x" * 100_000)
    cache = tmp_path / "cache"
    cache.mkdir()
    line = one_line(run_seed(tmp_path, cache, preexec=limit_file_size), code=1)
    assert "big.so" in line, line
    leftovers = [p for p in everything_under(cache) if "servebuild" in os.path.basename(p) and "seed" in p]
    assert leftovers == [] and not os.path.lexists(cache / "tvm-ffi" / "mod_a" / "big.so"), everything_under(cache)


OTHER = {"image_id": "sha256:" + "9" * 64, "manifest_sha256": "0" * 64}


def test_seed_keeps_an_origin_from_another_image_and_warm_still_refuses_the_cache(tmp_path):
    from servebuild.check.warm import check_origin
    from servebuild.errors import IntegrityError

    make_seed(tmp_path)
    cache = tmp_path / "cache"
    (cache / ".servebuild").mkdir(parents=True)
    origin = cache / ".servebuild" / "origin.json"
    origin.write_text(json.dumps(OTHER))
    before = os.stat(origin)
    assert run_seed(tmp_path, cache).returncode == 0
    after = os.stat(origin)
    assert json.loads(origin.read_text()) == OTHER and (after.st_ino, after.st_mtime_ns) == (
        before.st_ino,
        before.st_mtime_ns,
    )
    census = json.loads(
        subprocess.run(
            [sys.executable, CACHE_TOOL, "census", "--cache", str(cache)],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "SERVEBUILD_MANIFEST": str(tmp_path / "manifest.json")},
        ).stdout
    )
    assert census["origin"] == OTHER
    with pytest.raises(IntegrityError, match="first seeded by another image"):
        check_origin(census, "sha256:" + "1" * 64)


def test_a_second_seed_does_not_rewrite_the_origin_it_wrote(tmp_path):
    make_seed(tmp_path)
    cache = tmp_path / "cache"
    assert run_seed(tmp_path, cache).returncode == 0
    origin = cache / ".servebuild" / "origin.json"
    first = os.stat(origin)
    assert json.loads(origin.read_text())["image_id"] == "sha256:" + "1" * 64
    assert run_seed(tmp_path, cache, image_id="sha256:" + "2" * 64).returncode == 0
    again = os.stat(origin)
    assert json.loads(origin.read_text())["image_id"] == "sha256:" + "1" * 64
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)


@pytest.mark.parametrize("plant", ["link", "fifo", "not json", "a list"])
def test_seed_refuses_an_origin_that_is_not_one_and_leaves_it(tmp_path, plant):
    make_seed(tmp_path)
    cache = tmp_path / "cache"
    (cache / ".servebuild").mkdir(parents=True)
    origin = cache / ".servebuild" / "origin.json"
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    if plant == "link":
        origin.symlink_to(target)
    elif plant == "fifo":
        os.mkfifo(origin)
    else:
        origin.write_text("{oops" if plant == "not json" else "[1]")
    line = one_line(run_seed(tmp_path, cache))
    assert "origin.json" in line and ("not a regular file" in line or "not an origin" in line), line
    assert target.read_text() == "root:x:0:0\n"
    assert os.path.islink(origin) if plant == "link" else True


def cache_tool(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS_DIR))
    spec = importlib.util.spec_from_file_location("servebuild_cache_under_test", CACHE_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("command", ["census", "pack"])
def test_census_and_pack_name_a_directory_they_cannot_read(tmp_path, monkeypatch, capsys, command):
    tool = cache_tool(monkeypatch)
    cache = tmp_path / "cache"
    (cache / "triton" / "locked").mkdir(parents=True)
    (cache / "triton" / "locked" / "k.cubin").write_bytes(b"x")
    (cache / "triton" / "open.cubin").write_bytes(b"y")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    args = ["--out", str(tmp_path / "new.tar"), "--seed", str(tmp_path / "no-seed")] if command == "pack" else []
    code = tool.main([command, "--cache", str(cache), *args])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and len(lines) == 1, (code, out, err)
    assert "Permission denied" in lines[0] and str(cache / "triton" / "locked") in lines[0], lines[0]


@pytest.mark.parametrize("command,flag", [("census", "--listing"), ("census", "--out"), ("pack", "--out")])
def test_what_census_and_pack_write_replaces_a_link_there_never_writes_through_it(tmp_path, command, flag):
    cache = tmp_path / "cache"
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "k.cubin").write_bytes(b"x")
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    out = tmp_path / "out.json"
    out.symlink_to(victim)
    extra = ["--seed", str(tmp_path / "no-seed")] if command == "pack" else []
    proc = subprocess.run(
        [sys.executable, CACHE_TOOL, command, "--cache", str(cache), flag, str(out), *extra],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert victim.read_text() == "root:x:0:0\n" and not out.is_symlink() and out.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


# -- pack's limit and owner, seed's modes (issue 45, item 7) ------------------------------------------------------------


def added_cache(tmp_path):
    cache = tmp_path / "cache"
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "a.cubin").write_bytes(b"x" * 60)
    (cache / "triton" / "b.cubin").write_bytes(b"y" * 40)
    return cache


def test_pack_takes_a_run_of_exactly_its_limit_and_refuses_one_byte_more(tmp_path, monkeypatch, capsys):
    tool = cache_tool(monkeypatch)
    cache, out = added_cache(tmp_path), tmp_path / "new.tar"
    assert tool.pack(str(cache), str(tmp_path / "no-seed"), str(out), 99) == 3 and not out.exists()
    assert "added 100 bytes" in capsys.readouterr().err
    assert tool.pack(str(cache), str(tmp_path / "no-seed"), str(out), 100) == 0 and out.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_pack_writes_every_file_as_root_s_whoever_owned_it(tmp_path, monkeypatch, capsys):
    tool = cache_tool(monkeypatch)
    cache, out = added_cache(tmp_path), tmp_path / "new.tar"
    for f in (cache / "triton").iterdir():
        os.chown(f, 1234, 1234)  # the server's user wrote them
    assert tool.pack(str(cache), str(tmp_path / "no-seed"), str(out), 1 << 20) == 0
    with tarfile.open(out) as tar:
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}


def test_seed_keeps_each_file_s_mode(tmp_path):
    seed = make_seed(tmp_path)
    tool = seed / "tvm-ffi" / "mod_a" / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o755)
    (seed / "tvm-ffi" / "mod_a" / "a.so").chmod(0o644)
    cache = tmp_path / "cache"
    assert run_seed(tmp_path, cache).returncode == 0
    assert (cache / "tvm-ffi" / "mod_a" / "tool").stat().st_mode & 0o7777 == 0o755
    assert (cache / "tvm-ffi" / "mod_a" / "a.so").stat().st_mode & 0o7777 == 0o644
