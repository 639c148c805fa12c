"""No write through planted links (issue 45, item 2): a symbolic link planted at any folder servebuild makes
under build/ (the recipe's folder, _context, its platform folder, a slot) or at a file the bench writes in
its --out (samples.jsonl, server.log, ttft.png) is refused in one line naming the path, exit 2, and the
folder or file it points at is neither emptied nor written. The link targets are folders and files of the
test's own outside the build dir."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servebuild import fsutil
from servebuild.build.contextslot import context_slot
from servebuild.check import plots
from servebuild.errors import ServebuildError
from support import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "servebuild" / "tools"))
import servebuild_bench  # noqa: E402

PRECIOUS = "keep me\n"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside build/ holding one file, that a planted link points at."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious").write_text(PRECIOUS)
    return path


def untouched(folder: Path) -> bool:
    return sorted(p.name for p in folder.iterdir()) == ["precious"] and (folder / "precious").read_text() == PRECIOUS


def one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert isinstance(exc, ServebuildError) and exc.exit_code == 2, repr(exc)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text


@pytest.mark.parametrize("planted", ["toy", "toy/_context", "toy/_context/linux-amd64", "toy/_context/linux-amd64/0"])
def test_a_link_planted_at_any_folder_of_the_context_slot_is_refused(tmp_path, outside, planted):
    build = tmp_path / "build"
    link = build / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ServebuildError) as caught:
        with context_slot(build, "toy", "linux/amd64") as slot:
            fsutil.fresh_dir(slot, "the build context", build)  # what write_context does with the slot
    one_line(caught.value, str(link), "symbolic link")
    assert untouched(outside)


def test_a_fresh_context_empties_its_own_folder_and_not_a_linked_one(tmp_path, outside):
    build = tmp_path / "build"
    slot = build / "toy" / "ctx"
    (slot / "old").mkdir(parents=True)
    (slot / "old" / "link").symlink_to(outside, target_is_directory=True)  # a link inside is removed, not followed
    fsutil.fresh_dir(slot, "the build context", build)
    assert list(slot.iterdir()) == [] and untouched(outside)


def test_a_file_where_a_folder_goes_is_one_line(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "toy").write_text("x")
    with pytest.raises(ServebuildError) as caught:
        fsutil.no_link_dir(build / "toy" / "linux-amd64", "the build directory", build)
    one_line(caught.value, str(build / "toy"), "not a directory")


def _bench_args(out: Path) -> list[str]:
    return ["--url", "http://127.0.0.1:9", "--out", str(out), "--suite", "decode"]


@pytest.mark.parametrize("name", ["samples.jsonl", "server.log"])
def test_the_bench_writes_no_file_through_a_link_planted_in_its_out(tmp_path, outside, name, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(outside / "precious")
    code = servebuild_bench.main(_bench_args(out) + ["--serve", "true"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and str(out / name) in err and "link" in err, err
    assert untouched(outside)


def test_the_bench_pictures_are_not_drawn_through_a_planted_link(tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    sample = {"suite": "decode", "case": "decode", "ok": True, "ttft_s": 0.1}
    (out / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    (out / "bench.json").write_text(json.dumps({"suite": "decode"}))
    (out / "ttft.png").symlink_to(outside / "precious")
    with pytest.raises(ServebuildError) as caught:
        plots.bench_plots(out)
    one_line(caught.value, str(out / "ttft.png"), "symbolic link")
    assert untouched(outside)


def test_a_link_planted_in_the_artifact_cache_is_refused_before_a_deb_is_fetched(tmp_path, outside, monkeypatch):
    from servebuild.sources import debs

    pin = debs.DebPackage(
        name="hello",
        version="1.0-1",
        arch="amd64",
        sha256="a" * 64,
        size=1,
        filename="pool/main/h/hello/hello_1.0-1_amd64.deb",
    )
    cache = tmp_path / "cache"
    (cache / "debs").mkdir(parents=True)
    (cache / "debs" / pin.sha256).symlink_to(outside, target_is_directory=True)
    monkeypatch.setattr(debs, "_download", lambda *a: pytest.fail("downloaded through a planted link"))
    with pytest.raises(ServebuildError) as caught:
        debs.fetch_debs([pin], "http://127.0.0.1:9/debian", cache, "r", "r.lock.yaml")
    one_line(caught.value, str(cache / "debs" / pin.sha256), "symbolic link")
    assert untouched(outside)


@pytest.mark.parametrize("planted", ["images", "images/x/smoke", "toy"])
def test_an_output_folder_below_a_planted_link_is_refused_and_nothing_is_made(tmp_path, outside, planted):
    """warm, test-image and lock check their folders under build/ (no_link_below) before their writers make them."""
    build = tmp_path / "build"
    link = build / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    target = build / planted / "deeper" / "out"
    with pytest.raises(ServebuildError) as caught:
        fsutil.no_link_below(target, "the smoke output", build)
    one_line(caught.value, str(link), "symbolic link")
    assert untouched(outside)


def test_no_link_below_makes_nothing(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    assert fsutil.no_link_below(build / "a" / "b", "x", build) == build / "a" / "b"
    assert list(build.iterdir()) == []


def test_no_link_dir_made_by_many_threads_at_once_is_no_error(tmp_path):
    """Two platforms' builds make build/RECIPE/ at the same moment (CI's farm test met 'cannot write the build
    directory: File exists'): a folder another thread made between the look and the mkdir is taken."""
    import threading

    from servebuild.fsutil import no_link_dir

    for round_ in range(5):
        errors = []
        barrier = threading.Barrier(8)

        def make(i, round_=round_):
            barrier.wait()
            try:
                no_link_dir(tmp_path / f"r{round_}" / "toy" / f"linux-{i}", "the build directory", tmp_path)
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)

        threads = [threading.Thread(target=make, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
