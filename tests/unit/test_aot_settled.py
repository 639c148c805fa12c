"""The aot seed as a function of the inputs (issue 20): ninja's state files (.ninja_log, .ninja_deps)
carry the step's settled time instead of the clock, and temporary directories are named from a
counter. Run against the real ninja the engine images install (ninja==1.13.0, log v7, deps v4) and
gcc: two builds at two times give the same bytes, and ninja finds nothing to do afterwards."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from servebuild import TOOLS_DIR

# a settled step time, in seconds: as in the image, newer than every input (the host's system headers)
SETTLED = int(time.time()) + 60
NINJA = Path(sys.executable).parent / "ninja"


def aot_build():
    spec = importlib.util.spec_from_file_location("aot_build_under_test", TOOLS_DIR / "aot_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(work: Path) -> list[str]:
    """A shared object from a C file with a header, built by ninja with gcc's depfile; the files it wrote."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    (work / "k.h").write_text("#define K 7\n")
    (work / "k.c").write_text('#include "k.h"\nint k(void) { return K; }\n')
    (work / "build.ninja").write_text(
        "rule cc\n  command = gcc -fPIC -MD -MF $out.d -c $in -o $out\n  deps = gcc\n  depfile = $out.d\n"
        "rule link\n  command = gcc -shared $in -o $out\n"
        "build k.o: cc k.c\nbuild k.so: link k.o\n"
    )
    subprocess.run([str(NINJA)], cwd=work, check=True, capture_output=True)
    return sorted(p.name for p in work.iterdir())


def settle(work: Path, normalize: bool) -> dict[str, bytes]:
    if normalize:
        aot_build().settle_ninja_state(str(work), sorted(p.name for p in work.iterdir()), SETTLED * 10**9)
    for path in work.iterdir():  # what the settle step then does to every file the step wrote
        os.utime(path, (SETTLED, SETTLED))
    return {name: (work / name).read_bytes() for name in (".ninja_log", ".ninja_deps")}


def test_settled_ninja_state_is_the_same_bytes_and_ninja_has_nothing_to_do(tmp_path):
    assert NINJA.exists(), "requirements-dev.txt installs ninja into the venv (scripts/setup.sh)"
    work = tmp_path / "kernel"
    build(work)
    first = settle(work, normalize=True)
    assert first[".ninja_log"].startswith(b"# ninja log v7\n"), first[".ninja_log"][:20]
    assert first[".ninja_deps"].startswith(b"# ninjadeps\n\x04\x00\x00\x00")
    explain = subprocess.run([str(NINJA), "-n", "-d", "explain"], cwd=work, capture_output=True, text=True)
    assert "no work to do" in explain.stdout, explain.stdout + explain.stderr
    build(work)  # the same build, later by the clock
    again = settle(work, normalize=True)
    assert again == first
    explain = subprocess.run([str(NINJA), "-n", "-d", "explain"], cwd=work, capture_output=True, text=True)
    assert "no work to do" in explain.stdout, explain.stdout + explain.stderr
    # and what it guards: left as ninja wrote them, the two builds' state differs
    build(work)
    assert settle(work, normalize=False) != first


def test_an_edited_source_is_still_rebuilt_after_the_settle(tmp_path):
    """The settled state hides nothing: a header edited later (newer than the settled time) makes ninja
    rebuild, as it would at serve time."""
    assert NINJA.exists(), "requirements-dev.txt installs ninja into the venv (scripts/setup.sh)"
    work = tmp_path / "kernel"
    build(work)
    settle(work, normalize=True)
    (work / "k.h").write_text("#define K 8\n")
    os.utime(work / "k.h", (SETTLED + 5, SETTLED + 5))  # edited after the build
    explain = subprocess.run([str(NINJA), "-n", "-d", "explain"], cwd=work, capture_output=True, text=True)
    assert "no work to do" not in explain.stdout and "k.o" in explain.stdout, explain.stdout


def test_temporary_directories_are_named_from_a_counter(tmp_path):
    """Triton compiles its C helpers in a temporary directory whose path lands in the .so: two runs of
    the tool name their temporary directories alike."""
    code = (
        f"import importlib.util, tempfile\nspec = importlib.util.spec_from_file_location('a', {str(TOOLS_DIR / 'aot_build.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.fixed_temp_names()\n"
        "import sys\nprint(tempfile.mkdtemp(dir=sys.argv[1])); print(tempfile.mkdtemp(dir=sys.argv[1]))\n"
        "with tempfile.TemporaryDirectory(dir=sys.argv[1]) as d: print(d)\n"
    )
    names = []
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / run)], check=True, capture_output=True, text=True
        )
        names.append([Path(line).name for line in out.stdout.split()])
    assert names[0] == names[1] and len(set(names[0])) == 3, names


NVCC_OBJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "nvcc"


def test_nvccs_temporary_names_are_made_one_so_two_compiles_are_the_same_bytes(tmp_path):
    """Two real nvcc 13.0.88 compiles of static_init.cu (`nvcc -c -arch=sm_90a`, kept in tests/fixtures/nvcc:
    this machine's nvcc, not CI's) differ only in nvcc's tmpxft_PID name; after canonical_nvcc_names they are
    the same bytes, the same size, and the object still names its own source."""
    tool = aot_build()
    for name in ("static_init.pid-a.o", "static_init.pid-b.o"):
        shutil.copyfile(NVCC_OBJECTS / name, tmp_path / name)
    a, b = (tmp_path / "static_init.pid-a.o").read_bytes(), (tmp_path / "static_init.pid-b.o").read_bytes()
    assert a != b and len(a) == len(b)
    assert tool.canonical_nvcc_names(str(tmp_path), ["static_init.pid-a.o", "static_init.pid-b.o", "missing.o"]) == 2
    fixed = (tmp_path / "static_init.pid-a.o").read_bytes()
    assert fixed == (tmp_path / "static_init.pid-b.o").read_bytes() and len(fixed) == len(a)
    assert fixed[:4] == b"\x7fELF" and b"tmpxft_00000000_00000000-6_static_init.compute_90a.cudafe1.cpp" in fixed
    assert tool.canonical_nvcc_names(str(tmp_path), ["static_init.pid-a.o"]) == 0  # already canonical
