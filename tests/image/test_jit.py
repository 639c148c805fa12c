"""JIT checks: the kernels the engines compile while serving compile on the host under test.

Runs tests/image/jit_probes.py ON the tested host (the image's container, or a GPU host through
the local backend) for each probe listed under the expectations' `jit` key. Without a GPU the
probes compile for sm_90a only; with --require-gpu they also launch each kernel and check it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

PROBES_PY = Path(__file__).with_name("jit_probes.py")


def pytest_generate_tests(metafunc):
    if "jit_probe" not in metafunc.fixturenames:
        return
    path = metafunc.config.getoption("--expect")
    data = json.loads(Path(path).read_text()) if path else {}
    probes = data.get("jit")
    if not probes:
        metafunc.parametrize(
            "jit_probe",
            [
                pytest.param(
                    None,
                    marks=pytest.mark.skip(
                        reason="the expectations list no JIT probes (`jit`): no engine that compiles while serving"
                    ),
                )
            ],
        )
    else:
        metafunc.parametrize("jit_probe", list(probes))


def jit_arch(expect: dict) -> str:
    """The arch the probes compile for: the recipe's first sm_XY[a] arch as X.Y[a], else 9.0a."""
    for arch in expect.get("archs") or []:
        m = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
        if m:
            return f"{m.group(1)}.{m.group(2)}{m.group(3)}"
    return "9.0a"


@pytest.fixture(scope="module")
def jit_script(copy_to_host):
    return copy_to_host(PROBES_PY)


def test_jit_probe(host, python, expect, require_gpu, jit_script, jit_probe):
    cmd = [python, jit_script, jit_probe, "--arch", jit_arch(expect)]
    if expect.get("cuda"):
        cmd += ["--nvcc-release", ".".join(str(expect["cuda"]).split(".")[:2])]
    if require_gpu:
        cmd.append("--launch")
    result = host.run(" ".join(shlex.quote(c) for c in cmd))
    lines = [line for line in result.stdout.splitlines() if line.startswith('{"probe"')]
    assert lines, (
        f"jit probe {jit_probe} printed no result (rc {result.rc}): {(result.stdout + result.stderr).strip()[-600:]}"
    )
    out = json.loads(lines[-1])
    assert out["ok"], f"jit probe {jit_probe}: {out['detail'][:1500]}"
    # the probe's own verdict is its exit status too (1 if any probe failed): a result line that says
    # ok beside a failing exit (a probe that raised after printing) is a failure, not a pass
    assert result.rc == 0, f"jit probe {jit_probe} printed ok but exited {result.rc}: {result.stderr.strip()[-600:]}"
    if require_gpu and jit_probe not in ("cext", "nvcc"):
        assert out.get("launched"), f"jit probe {jit_probe} compiled but did not launch: {out['detail'][:600]}"
