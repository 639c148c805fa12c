"""Every input file through one bounded reader (issue 19, part 2): each kind has its limit, and a
file over it, a FIFO, a device or a directory is one line naming the file, the limit and the
actual size, without reading it whole (or at all) and without blocking. Real files in tmp_path."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
import yaml

from servebuild import fsutil
from servebuild.errors import RecipeError, ServebuildError
from servebuild.recipe.load import load_recipe
from support import copy_real

CONSTRAINTS = "constraints/torch-cu130/py3.12-linux-amd64.txt"
BASE = {
    "name": "inputs",
    "description": "d",
    "platforms": ["linux/amd64"],
    "python": "3.12",
    "bases": {
        "build": {"ref": "servebuild/debian:bookworm-{arch}"},
        "runtime": {"ref": "servebuild/debian:bookworm-{arch}"},
    },
    "constraints": {"linux/amd64": CONSTRAINTS},
    "engine": {
        "name": "vllm",
        "version": "0.26.0",
        "install": "pip-source",
        "source": {
            "url": "https://github.com/vllm-project/vllm.git",
            "commit": "568afb3a13806beb53bb2e6bd518269357b237c0",
        },
    },
    "launch": {"profiles": {"p": {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m"]}}},
}


@pytest.fixture
def project(tmp_path):
    copy_real(tmp_path, CONSTRAINTS)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "patches").mkdir()
    return tmp_path


def write_recipe(project, **over) -> None:
    data = {**BASE, **over}
    (project / "recipes" / "inputs.yaml").write_text(yaml.safe_dump(data))


def with_patch(project, data: bytes) -> None:
    (project / "patches" / "big.patch").write_bytes(data)
    entry = {"id": "big", "file": "patches/big.patch", "sha256": hashlib.sha256(data).hexdigest()}
    write_recipe(project, engine={**BASE["engine"], "source": {**BASE["engine"]["source"], "patches": [entry]}})


def refused(project) -> str:
    start = time.monotonic()
    with pytest.raises(ServebuildError) as info:
        load_recipe("inputs", project)
    assert time.monotonic() - start < 10  # a hang guard: nothing is read whole, nothing blocks
    line = str(info.value)
    assert "\n" not in line and info.value.exit_code == 2, line
    return line


# ------------------------------------------------------------------ patches


def test_a_patch_over_8_mib_is_refused_naming_file_limit_and_size(project):
    data = (b"+" + b"x" * 1023 + b"\n") * (9 << 10)  # 9 MiB in 9,216 lines: over the bytes, under the lines
    with_patch(project, data)
    line = refused(project)
    assert "patches/big.patch" in line and str(8 << 20) in line and str(len(data)) in line, line
    assert not (project / "build").exists()  # nothing half-done


def test_a_patch_over_200000_lines_is_refused(project):
    data = b"+\n" * 250_000  # 500 kB: under the bytes, over the lines
    with_patch(project, data)
    line = refused(project)
    assert "patches/big.patch" in line and "200000" in line and "250000" in line, line


def test_a_patch_that_is_a_fifo_is_refused_without_blocking(project):
    with_patch(project, b"x")
    (project / "patches" / "big.patch").unlink()
    os.mkfifo(project / "patches" / "big.patch")
    line = refused(project)
    assert "patches/big.patch" in line and "not a regular file" in line, line


def test_the_patch_read_for_the_tree_is_bounded_too(project):
    """The source stack reads the patch again when it applies it: through the same reader."""
    from servebuild.recipe.schema import PatchEntry
    from servebuild.sources.stack import SourceCache

    data = b"+\n" * 250_000
    (project / "patches" / "big.patch").write_bytes(data)
    entry = PatchEntry(id="big", file="patches/big.patch", sha256=hashlib.sha256(data).hexdigest())
    cache = SourceCache(project / "cache", offline=True)
    with pytest.raises(ServebuildError) as info:
        cache.entry_diff(None, entry, project)
    assert "patches/big.patch" in str(info.value) and "200000" in str(info.value)


# ------------------------------------------------------------------ hashed requirement sets


def test_a_constraints_file_over_4_mib_is_refused(project):
    path = project / CONSTRAINTS
    size_before = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"# padding " + b"x" * (5 << 20) + b"\n")
    write_recipe(project)
    line = refused(project)
    assert CONSTRAINTS in line and str(4 << 20) in line and str(size_before + (5 << 20) + 11) in line, line


@pytest.mark.parametrize("second", ["cuda-bindings", "Cuda_Bindings", "CUDA.bindings"])
def test_a_package_pinned_twice_is_refused_naming_file_line_and_package(project, second):
    path = project / CONSTRAINTS
    text = path.read_text()
    lines = text.count("\n")
    path.write_text(text + f"{second}==13.2.1 \\\n    --hash=sha256:{'ab' * 32}\n")
    write_recipe(project)
    line = refused(project)
    assert CONSTRAINTS in line and f"line {lines + 1}" in line and "cuda-bindings" in line and "twice" in line, line


def test_parse_hashes_refuses_a_package_pinned_twice(tmp_path):
    """fetch_artifact reads the release requirement with parse_hashes: two pins of one name must not
    collapse into one (pip would then accept either hash)."""
    from servebuild.recipe.requirements import parse_hashes

    path = tmp_path / "sdist.txt"
    path.write_text(f"vllm==0.26.0 --hash=sha256:{'aa' * 32}\nVLLM==0.26.0 --hash=sha256:{'bb' * 32}\n")
    with pytest.raises(RecipeError, match="line 2.*vllm.*twice"):
        parse_hashes(path)


# ------------------------------------------------------------------ wheels named by a recipe


def test_a_local_wheel_is_size_checked_without_reading_it(project):
    wheel = project / "wheels" / "x-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with wheel.open("wb") as fh:  # sparse: 5 GiB on paper, nothing on disk
        fh.truncate(5 << 30)
    write_recipe(project, wheels=["wheels/x-1.0-py3-none-any.whl"])
    line = refused(project)
    assert "wheels/x-1.0-py3-none-any.whl" in line and str(4 << 30) in line and str(5 << 30) in line, line


def test_a_local_wheel_that_is_a_fifo_is_refused(project):
    (project / "wheels").mkdir()
    os.mkfifo(project / "wheels" / "x-1.0-py3-none-any.whl")
    write_recipe(project, wheels=["wheels/x-1.0-py3-none-any.whl"])
    assert "not a regular file" in refused(project)


def test_a_ca_bundle_from_the_environment_that_is_a_fifo_is_refused_without_blocking(tmp_path, monkeypatch):
    """$SERVEBUILD_CA_BUNDLE reaches the release download without build's option check: ssl would
    block opening a FIFO."""
    from servebuild.sources.artifacts import _context

    os.mkfifo(tmp_path / "ca.pem")
    monkeypatch.setenv("SERVEBUILD_CA_BUNDLE", str(tmp_path / "ca.pem"))
    with pytest.raises(ServebuildError, match="not a regular file"):
        _context(None, "sdist.txt")


# ------------------------------------------------------------------ the reader itself


@pytest.mark.parametrize(
    "kind", ["yaml", "patch", "requirements", "private-key", "public-key", "credentials", "tls", "artifact", "secret"]
)
def test_every_kind_refuses_a_fifo_a_directory_and_a_device_without_blocking(tmp_path, kind):
    from servebuild import fsutil

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for path in (tmp_path / "fifo", tmp_path / "dir", fsutil.Path("/dev/zero")):
        with pytest.raises(RecipeError, match="not a regular file"):
            fsutil.check_input(path, kind, file=str(path))
        if fsutil.LIMITS[kind].read:
            with pytest.raises(RecipeError, match="not a regular file"):
                fsutil.read_input(path, kind, file=str(path))


def test_the_limits_table_in_the_docs_is_the_code(tmp_path):
    from servebuild import fsutil
    from support import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "reference" / "input-limits.md").read_text()
    rows = {
        line.split(" | ")[0].lstrip("| "): line.rstrip(" |").split(" | ")[2:]
        for line in doc.splitlines()
        if line.startswith("| a ") or line.startswith("| an ")
    }
    for kind, limit in fsutil.LIMITS.items():
        assert rows.get(limit.what) == [fsutil.human(limit.max_bytes), str(limit.max_lines or "-")], (kind, rows)


def test_fifo_and_huge_recipes_are_refused_without_reading(project):
    import os

    fifo = project / "recipes" / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(RecipeError, match="is not a regular file"):
        load_recipe("fifo", project)
    (project / "recipes" / "huge.yaml").write_text("description: " + "x" * (2 << 20) + "\n")
    with pytest.raises(RecipeError, match="at most 1048576 are read"):
        load_recipe("huge", project)


# -- the readers' limits at their edges, append mode, a FIFO by stat and on the open file (issue 45, item 7)


@pytest.mark.parametrize("kind", ["public-key", "yaml"])
def test_a_file_of_exactly_its_limit_is_read_and_one_byte_more_is_not(tmp_path, kind):
    limit = fsutil.LIMITS[kind].max_bytes
    path = tmp_path / "f"
    path.write_bytes(b"a" * limit)
    assert len(fsutil.read_input(path, kind)) == limit
    path.write_bytes(b"a" * (limit + 1))
    with pytest.raises(ServebuildError, match=f"is {limit + 1} bytes; at most {limit} are read"):
        fsutil.read_input(path, kind)


def test_a_file_of_exactly_the_line_limit_is_read_and_one_line_more_is_not(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a\n" * 20_000)
    assert fsutil.read_input(path, "yaml").count(b"\n") == 20_000
    path.write_bytes(b"a\n" * 20_001)
    with pytest.raises(ServebuildError, match="has 20001 lines; at most 20000 are read"):
        fsutil.read_input(path, "yaml")


def test_append_mode_keeps_what_the_file_held(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"old ")
    fd = fsutil.open_host_file(path, "the log", append=True)
    os.write(fd, b"new")
    os.close(fd)
    assert path.read_bytes() == b"old new"


def test_a_fifo_is_not_a_regular_file_by_stat(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ServebuildError, match="is not a regular file"):
        fsutil.check_input(tmp_path / "fifo", "yaml")


def test_a_fifo_swapped_in_after_the_stat_is_refused_on_the_open_file(tmp_path, monkeypatch):
    """The second check, on the open file: the stat saw a regular file (made here: the stat is skipped)."""
    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setattr(fsutil, "check_input", lambda *a, **k: None)
    with pytest.raises(ServebuildError, match="is not a regular file"):
        fsutil.read_input(tmp_path / "fifo", "yaml")
