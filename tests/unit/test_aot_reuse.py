"""A variant that edits a kernel source compiles exactly the kernels that read it (issue 30): aot_build.py
--reuse-from copies every other kernel's files from the release's build, by the record of what each build
read (build.ninja's paths and the deps log gcc's depfiles fill). Run with the real ninja and gcc on toy
kernels laid out as the engine's are (sources and headers under the site's sglang/jit_kernel/); the JIT
kind `toy` is registered for this test only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unit.test_aot_settled import NINJA, aot_build

SETTLED = int(time.time()) + 60
TOY = """
import os, subprocess

def _build(name: str, header: str) -> None:
    site = os.environ["TOY_SITE"]
    out = os.path.join(os.environ["TOY_CACHE"], name)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(site, "sglang", "jit_kernel", "csrc", name + ".c")
    inc = os.path.join(site, "sglang", "jit_kernel", "include")
    with open(os.path.join(out, "build.ninja"), "w") as f:
        f.write("rule cc\\n  command = gcc -fPIC -I%s -MD -MF $out.d -c $in -o $out\\n  deps = gcc\\n  depfile = $out.d\\n"
                "rule link\\n  command = gcc -shared $in -o $out\\n"
                "build %s.o: cc %s\\nbuild %s.so: link %s.o\\n" % (inc, name, src, name, name))
    subprocess.run([os.environ["TOY_NINJA"]], cwd=out, check=True, capture_output=True)

def build_a():
    _build("a", "a.h")

def build_b():
    _build("b", "b.h")

def build_c():
    _build("c", "c.h")
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    assert NINJA.exists(), "requirements-dev.txt installs ninja into the venv (scripts/setup.sh)"
    site = tmp_path / "site"
    (site / "sglang" / "jit_kernel" / "csrc").mkdir(parents=True)
    (site / "sglang" / "jit_kernel" / "include").mkdir()
    for name, value in (("a", 1), ("b", 2), ("shared", 3)):
        (site / "sglang" / "jit_kernel" / "include" / f"{name}.h").write_text(f"#define {name.upper()} {value}\n")
    (site / "sglang" / "jit_kernel" / "csrc" / "a.c").write_text('#include "a.h"\nint a(void) { return A; }\n')
    (site / "sglang" / "jit_kernel" / "csrc" / "b.c").write_text(
        '#include "b.h"\n#include "shared.h"\nint b(void) { return B + SHARED; }\n'
    )
    (site / "sglang" / "jit_kernel" / "csrc" / "c.c").write_text(
        '#include "shared.h"\nint c(void) { return SHARED; }\n'
    )
    (tmp_path / "toykern.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TOY_SITE", str(site))
    monkeypatch.setenv("TOY_NINJA", str(NINJA))
    monkeypatch.setenv("SERVEBUILD_SETTLED", str(SETTLED))
    module = aot_build()
    module.BUILDERS["toy"] = lambda func, values, archs: (func(*values), list(archs))[1]
    spec = {
        "recipe": "toy",
        "arch_list": "9.0a",
        "max_bytes": 10**9,
        "kernels": [
            {"jit": "toy", "builder": f"toykern:build_{k}", "args": [], "where": f"aot.kernels.{i}"}
            for i, k in enumerate("abc")
        ],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    sys.modules.pop("toykern", None)

    def run(name: str, *extra: str) -> tuple[Path, list[str]]:
        out = tmp_path / name
        cache = tmp_path / f"cache-{name}"
        cache.mkdir()
        monkeypatch.setenv("TOY_CACHE", str(cache))
        monkeypatch.setattr(
            sys,
            "argv",
            [
                "aot_build.py",
                "--spec",
                str(tmp_path / "spec.json"),
                "--cache",
                str(cache),
                "--seed",
                str(out / "seed"),
                *extra,
            ],
        )
        lines = []
        monkeypatch.setattr("builtins.print", lambda *a, **k: lines.append(" ".join(map(str, a))))
        assert module.main() == 0, lines
        return out, lines

    return site, run


def seed_files(out: Path) -> dict[str, bytes]:
    root = out / "seed" / "cache"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_header_edit_compiles_the_kernel_that_reads_it_and_copies_the_others(toy):
    site, run = toy
    release, _ = run("release")
    files = json.loads((release / "aot-files.json").read_text())
    reads_a = files["toy toykern:build_a []"]["reads"]
    assert any(r.endswith("/sglang/jit_kernel/include/a.h") for r in reads_a), reads_a  # from gcc's depfile
    assert not any(r.endswith("/b.h") for r in reads_a)
    (site / "sglang" / "jit_kernel" / "include" / "a.h").write_text("#define A 41\n")
    variant, lines = run("variant", "--reuse-from", str(release), "--changed", "sglang/jit_kernel/include/a.h")
    said = "\n".join(lines)
    assert "build_a() for 9.0a" in said and "it reads sglang/jit_kernel/include/a.h, which the patches change" in said
    assert "build_b(): the release's build, copied" in said and "build_c(): the release's build, copied" in said
    before, after = seed_files(release), seed_files(variant)
    assert before.keys() == after.keys()
    differ = sorted(p for p in before if before[p] != after[p])
    assert differ and all(p.startswith("a/") for p in differ), differ  # a's objects, nothing of b or c
    assert before["a/a.o"] != after["a/a.o"]
    record = json.loads((variant / "seed" / "aot.json").read_text())
    assert [k["builder"] for k in record["kernels"]] == ["toykern:build_a", "toykern:build_b", "toykern:build_c"]
    assert record == {**json.loads((release / "seed" / "aot.json").read_text()), "kernels": record["kernels"]}


def test_a_header_two_kernels_read_compiles_both(toy):
    site, run = toy
    release, _ = run("release")
    (site / "sglang" / "jit_kernel" / "include" / "shared.h").write_text("#define SHARED 30\n")
    variant, lines = run("variant", "--reuse-from", str(release), "--changed", "sglang/jit_kernel/include/shared.h")
    said = "\n".join(lines)
    assert "build_a(): the release's build, copied" in said
    assert said.count("it reads sglang/jit_kernel/include/shared.h") == 2, said
    before, after = seed_files(release), seed_files(variant)
    assert before["b/b.o"] != after["b/b.o"] and before["c/c.o"] != after["c/c.o"] and before["a/a.o"] == after["a/a.o"]


def test_a_copied_kernel_is_settled_to_this_step_and_ninja_finds_nothing_to_do(toy):
    """The copy carries the release step's time in its deps log; this step's time replaces it, which the
    settle step then gives every file's mtime: ninja at serve time has nothing to redo."""
    site, run = toy
    release, _ = run("release")
    os.environ["SERVEBUILD_SETTLED"] = str(SETTLED + 100)  # the variant's step settles later
    variant, _ = run("variant", "--reuse-from", str(release), "--changed", "sglang/jit_kernel/include/a.h")
    b = variant / "seed" / "cache" / "b"
    for path in [*b.iterdir(), *(site / "sglang" / "jit_kernel").rglob("*")]:
        os.utime(path, (SETTLED + 100, SETTLED + 100))
    explain = subprocess.run([str(NINJA), "-n", "-d", "explain"], cwd=b, capture_output=True, text=True)
    assert "no work to do" in explain.stdout, explain.stdout + explain.stderr
    assert (b / ".ninja_deps").read_bytes() != (release / "seed" / "cache" / "b" / ".ninja_deps").read_bytes()


def test_a_kernel_whose_build_recorded_no_inputs_is_compiled_again(toy):
    site, run = toy
    release, _ = run("release")
    files = json.loads((release / "aot-files.json").read_text())
    files["toy toykern:build_b []"]["reads"] = None  # a build with no deps log: what it read is not known
    (release / "aot-files.json").write_text(json.dumps(files))
    _, lines = run("variant", "--reuse-from", str(release), "--changed", "sglang/jit_kernel/include/a.h")
    said = "\n".join(lines)
    assert "build_b() for 9.0a" in said and "(its build recorded no inputs)" in said
    assert "build_c(): the release's build, copied" in said


def test_a_build_without_a_depfile_records_no_inputs(tmp_path):
    """With no depfile ninja keeps no deps log, and the
    headers the compiler opened are then unknown (build.ninja names only the .c)."""
    work = tmp_path / "k"
    work.mkdir()
    (work / "k.h").write_text("#define K 7\n")
    (work / "k.c").write_text('#include "k.h"\nint k(void) { return K; }\n')
    (work / "build.ninja").write_text(f"rule cc\n  command = gcc -fPIC -c $in -o $out\nbuild k.o: cc {work}/k.c\n")
    subprocess.run([str(NINJA)], cwd=work, check=True, capture_output=True)
    names = sorted(p.name for p in work.iterdir())
    module = aot_build()
    assert module.ninja_reads(str(work), names) is None
    (work / "build.ninja").write_text(
        f"rule cc\n  command = gcc -fPIC -MD -MF $out.d -c $in -o $out\n  deps = gcc\n"
        f"  depfile = $out.d\nbuild k.o: cc {work}/k.c\n"
    )
    (work / "k.o").unlink()
    subprocess.run([str(NINJA)], cwd=work, check=True, capture_output=True)
    assert f"{work}/k.h" in module.ninja_reads(str(work), sorted(p.name for p in work.iterdir()))
