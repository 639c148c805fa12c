"""`invoke bisect` refuses bad input in one line, exit 2, before anything builds (real CLI, real
recipes; every case fails before the engine is asked for anything)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO_ROOT

INVOKE = str(Path(sys.executable).parent / "invoke")
R = ["--recipe", "sglang-native-fp8-bookworm"]


@pytest.mark.parametrize(
    "args,words",
    [
        (R + ["--search"], "--search: give the command"),
        (R + ["--variants", "nope", "--run", "true"], "no variant 'nope'"),
        (R + ["--variants", "x=not-a-patch", "--run", "true"], "variant x: no patch 'not-a-patch'"),
        (R + ["--variants", "a b=", "--run", "true"], "is not VARIANT or NAME=ID+ID"),
        (R + ["--variants", "Release=", "--run", "true"], "a lowercase letter, then lowercase letters"),
        (R + ["--variants", "under_score=", "--run", "true"], "is not VARIANT or NAME=ID+ID"),
        (R + ["--variants", "original-fix,original-fix", "--run", "true"], "variant 'original-fix' is named twice"),
        (R + ["--variants", "a=,a=sglang-adaptive-prefill", "--run", "true"], "variant 'a' is named twice"),
        (
            R
            + [
                "--variants",
                "x=sglang-dsv4-verify-pad+sglang-adaptive-prefill+sglang-dsv4-verify-pad",
                "--run",
                "true",
            ],
            "duplicate patch entry 'sglang-dsv4-verify-pad'",
        ),
        (
            R
            + [
                "--variants",
                "x=sglang-dsv4-verify-pad+sglang-dsv4-shared-expert-fusion-policy+sglang-original-shared-expert-remap",
                "--run",
                "true",
            ],
            "patch entries 'sglang-dsv4-shared-expert-fusion-policy' (patches/sglang-dsv4-shared-expert-fusion-policy.patch)"
            " and 'sglang-original-shared-expert-remap' (patches/sglang-dspark-shared-expert-remap.patch) conflict",
        ),
        (
            R + ["--variants", "x=sglang-adaptive-prefill", "--run", "true"],
            "profile 'sglang-native-fp8': DSpark verifies 6 tokens (--speculative-num-draft-tokens 6) on sglang 0.5.16",
        ),
        (R + ["--profiles", "nope", "--run", "true"], "no profile 'nope'"),
        (R + ["--metric", "ttft", "--run", "true"], "--metric NAME and --threshold NUMBER together"),
        (R + ["--run", "true", "--timeout", "0"], "positive"),
        (R + ["--run", "true", "--volume", "--privileged"], "SRC:DST"),
        (R + ["--run", "true", "--volume", "/tmp:/x\n-v /:/host"], "line break"),
        (R + ["--run", "true", "--env", "BAD NAME=1"], "is not NAME=VALUE"),
        (R + ["--run", "true", "--env", "NOVALUE"], "is not NAME=VALUE"),
        (R + ["--run", "true", "--env", "A=b\nc"], "line break"),
        (R + ["--run", "true", "--shm-size", "32 gigs"], "is not a size such as 32g"),
        (R + ["--run", "true", "--network", "none;reboot"], "is not a docker network"),
        (R + ["--run", "true", "--gpus", "device=0"], "is not all, none, auto or a GPU list"),
        (R + ["--run", "true", "--repeat", "0"], "--repeat 0: from 1 to 50"),
        (R + ["--run", "true", "--repeat", "three"], "is not a whole number of runs"),
        (
            R + ["--run", "true", "--variants", "original-fix", "--profiles", "final:sglang-native-fp8"],
            "'final' is not a variant of this run",
        ),
        (R + ["--run", "true", "--profiles", "original-fix:nope"], "no profile 'nope'"),
        (R + ["--suite", "taill"], "--suite 'taill': one or more of prefill"),
        (R + ["--suite", "tail --requests 0"], "--requests 0: give a whole number from 1 to 100,000"),
        (R + ["--suite", "tail", "--run", "true"], "not both"),
        (R + ["--run", "true", "--keep", "relative/dir"], "give an absolute directory"),
        (R + ["--run", "true", "--keep", "/a\nb"], "without control characters"),
        (R + ["--suite", "tail", "--keep", "/tmp/x"], "not with --suite"),
        (R + ["--suite", "decode --out /elsewhere"], "--out is bisect's to set"),
        (R + ["--suite", "decode --check"], "--check is bisect's to set"),
        (R + ["--suite", "decode --model 'abc"], "as a shell would split them"),
        (R + ["--suite", "decode --health-timeout nan"], "is not a number of seconds"),
        (R + ["--run", "true", "--gpus", "0,0"], "names a GPU twice"),
        (R + ["--run", "true", "--shm-size", "9999999999999g"], "more shared memory than any host has"),
        (R + ["--run", "true", "--repeat", "-1"], "is not a whole number of runs"),
        (
            R + ["--run", "true", "--farm", "/nonexistent/farm.yaml"],
            "--farm: farm file '/nonexistent/farm.yaml' does not exist",
        ),
        (R + ["--run", "true", "--platform", "linux/amd64,linux/arm64"], "unknown platform 'linux/amd64,linux/arm64'"),
    ],
)
def test_bad_bisect_input_is_one_line(args, words):
    proc = subprocess.run([INVOKE, "bisect", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_metric_the_command_never_printed_stops_the_search():
    from servebuild.check import bisect
    from servebuild.errors import InputError

    class Measured(bisect.Session):
        def __init__(self):
            self.measured = {
                "prefix-1": [
                    bisect.Row(
                        variant="prefix-1", patches=[], tag="t", image_id="i", build_s=1, exit=0, metrics={"tok_s": 3}
                    )
                ]
            }

        def measure(self, name):
            return self.measured[name]

    with pytest.raises(InputError) as info:
        Measured().outcome("prefix-1", "ttft", 1.0)
    assert "printed no metric 'ttft'" in str(info.value) and "tok_s" in str(info.value)
    assert Measured().outcome("prefix-1", "tok_s", 2.0) == "pass"


@pytest.fixture
def toy(tmp_path):
    """The toy fixture project (pinned, so plans are made and the farm is what is checked next)."""
    import shutil
    from support import fixture_recipe, make_project, make_upstream

    up = make_upstream(tmp_path)
    root = make_project(tmp_path, up, fixture_recipe(up, platforms=["linux/amd64"]))
    shutil.copyfile(REPO_ROOT / "tasks.py", root / "tasks.py")
    return root


def toy_cli(root: Path, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(root.parent / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "invoke", "-r", str(root), *args, "--recipe", "toy"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


BISECT = ("bisect", "--variants", "stackless=", "--run", "true")


def test_bisect_refuses_a_bad_farm_file_as_build_does(toy, tmp_path):
    """The same farm file, the same line from `build` and from `bisect`, before anything builds."""
    bad = tmp_path / "farm.yaml"
    bad.write_text("platforms:\n  linux/amd64:\n    - host: ftp://node\n")
    said = {}
    for command in (("build",), BISECT):
        proc = toy_cli(toy, *command, "--farm", str(bad))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        said[command[0]] = proc.stderr
    assert (
        said["bisect"]
        == said["build"]
        == (
            f"error: {bad}:3: platforms.linux/amd64.0.host: 'ftp://node': "
            f"unsupported scheme 'ftp'; an engine is unix:///PATH, "
            f"ssh://[USER@]HOST[:PORT] or tcp://HOST:PORT (with tls)\n"
        )
    )
    assert not (toy / "build" / "toy" / "stackless").exists()


@pytest.mark.parametrize(
    "farm, line",
    [
        (
            "platforms:\n  linux/arm64:\n    - host: unix:///var/run/docker.sock\n",
            "error: {farm}: platforms: no engine for linux/amd64; the farm lists linux/arm64",
        ),
        (
            "platforms:\n  linux/amd64:\n    - host: unix://{tmp}/dead.sock\n",
            "error: {farm}:3: platforms.linux/amd64.0: engine unix://{tmp}/dead.sock not reachable: ",
        ),
    ],
)
def test_bisect_preflights_the_farm_as_build_does(toy, tmp_path, farm, line):
    path = tmp_path / "farm.yaml"
    path.write_text(farm.format(tmp=tmp_path))
    for command in (("build",), BISECT):
        proc = toy_cli(toy, *command, "--farm", str(path))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(line.format(farm=path, tmp=tmp_path)), (command, proc.stderr)
    assert not (toy / "build" / "toy" / "stackless").exists()
