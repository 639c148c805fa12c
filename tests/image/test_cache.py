"""One cache root, proven by the packages that decide it.

For every resolver the expectations list under `cache_paths` (name -> the directory its paths must
be under), tests/image/cache_paths.py runs on the host under test and asks the installed package
where it will write; and a run of the engine kind's JIT probes with the image's own cache
environment must write nothing outside the cache root (a listing of $HOME, /root/.cache and /tmp
before and after).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

HERE = Path(__file__).parent
# the probes whose compiles land in a cache (cext and nvcc write none)
CACHED_PROBES = ("triton", "tvm-ffi", "tilelang", "flashinfer")
WATCHED = ("$HOME", "/root/.cache", "/tmp")


def pytest_generate_tests(metafunc):
    if "cache_path" not in metafunc.fixturenames:
        return
    path = metafunc.config.getoption("--expect")
    data = json.loads(Path(path).read_text()) if path else {}
    names = sorted(data.get("cache_paths") or {})
    metafunc.parametrize(
        "cache_path",
        names
        or [
            pytest.param(
                None,
                marks=pytest.mark.skip(
                    reason="the expectations list no cache_paths: no engine that compiles while serving"
                ),
            )
        ],
    )


@pytest.fixture(scope="module")
def resolver_script(copy_to_host):
    return copy_to_host(HERE / "cache_paths.py")


def under(path: str, root: str) -> bool:
    path, root = path.rstrip("/"), root.rstrip("/")
    return path == root or path.startswith(root + "/")


def test_cache_path(host, python, expect, resolver_script, cache_path):
    root = expect["cache_paths"][cache_path]
    result = host.run(f"{shlex.quote(python)} {shlex.quote(resolver_script)} {shlex.quote(cache_path)}")
    lines = [line for line in result.stdout.splitlines() if line.startswith('{"name"')]
    assert lines, (
        f"cache resolver {cache_path} printed nothing (rc {result.rc}): {(result.stdout + result.stderr)[-600:]}"
    )
    out = json.loads(lines[-1])
    assert out["ok"], f"cache resolver {cache_path}: {out['detail']}"
    wrong = {what: path for what, path in out["paths"].items() if not under(path, root)}
    settings = ", ".join(f"{k}={v!r}" if v is not None else f"{k} unset" for k, v in out["set"].items())
    assert not wrong, (
        f"{cache_path} writes outside {root}: "
        + "; ".join(f"{what} is {path}" for what, path in sorted(wrong.items()))
        + f" (moved by {', '.join(out['variables'])}; in this image {settings})"
    )


LISTING = r"""
import json, os, sys
seen = []
for top in sys.argv[1:]:
    top = os.path.expanduser(top) if top != "$HOME" else os.path.expanduser("~")
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            seen.append(os.path.join(d, n))
print(json.dumps(sorted(set(seen))))
"""


def listing(host, python, exclude: str) -> set[str]:
    result = host.run(f"{shlex.quote(python)} -c {shlex.quote(LISTING)} " + " ".join(shlex.quote(w) for w in WATCHED))
    assert result.rc == 0, f"cannot list {', '.join(WATCHED)}: {result.stderr[-300:]}"
    return {p for p in json.loads(result.stdout) if not under(p, exclude)}


def test_jit_writes_nothing_outside_the_cache_root(host, python, expect, copy_to_host):
    """The compiles an engine does while serving, with the image's own environment, land under /cache only."""
    probes = [p for p in expect.get("jit") or [] if p in CACHED_PROBES]
    if not expect.get("cache_paths") or not probes:
        pytest.skip("no engine that compiles while serving: no cache root to hold")
    script = copy_to_host(HERE / "jit_probes.py")
    scripts_dir = script.rsplit("/", 1)[0]
    root = "/cache"
    before = listing(host, python, scripts_dir)
    cache_before = host.run(f"find {root} -type f | wc -l").stdout.strip()
    result = host.run(" ".join(shlex.quote(c) for c in [python, script, *probes, "--image-caches"]))
    after = listing(host, python, scripts_dir)
    cache_after = host.run(f"find {root} -type f | wc -l").stdout.strip()
    failed = [
        json.loads(line)
        for line in result.stdout.splitlines()
        if line.startswith('{"probe"') and not json.loads(line)["ok"]
    ]
    assert result.rc == 0 and not failed, (
        f"JIT probes with the image's caches failed: {[f['detail'][:300] for f in failed] or result.stderr[-600:]}"
    )
    new = sorted(after - before)
    assert not new, f"compiling wrote {len(new)} paths outside {root}: {', '.join(new[:12])}"
    assert int(cache_after) > int(cache_before), (
        f"the probes wrote nothing under {root}: they did not use the image's caches"
    )


def test_aot_kernels_load_from_the_seed_with_no_compile(host, python, expect, copy_to_host):
    """Every kernel the image compiled at build time is found by the engine's own lookup after the
    launcher's seed step: loading it writes no file under /cache."""
    if not expect.get("aot"):
        pytest.skip("the recipe compiles no kernel ahead of time (aot.kernels)")
    script = copy_to_host(HERE / "aot_check.py")
    result = host.run(f"{shlex.quote(python)} {shlex.quote(script)}")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"kernel"')]
    assert lines, f"aot_check printed nothing (rc {result.rc}): {(result.stdout + result.stderr)[-600:]}"
    bad = [
        f"{k['kernel']}{tuple(k['args'])}: {k['error'] or str(k['new_files']) + ' new files (it compiled)'}"
        for k in lines
        if not k["ok"]
    ]
    assert not bad and result.rc == 0, "; ".join(bad)
    assert len(lines) >= len([k for k in expect["aot"] if k["jit"] != "triton"]), lines
