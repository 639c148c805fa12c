"""One --platform grammar for build and publish (issue 33: build took `linux/sparc` and refused
`linux/arm64,`; publish did the opposite for both)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servebuild.errors import InputError
from servebuild.platforms import platform_list
from support import REPO_ROOT

BAD = [
    ("linux/arm64,", "--platform: 'linux/arm64,' has an empty entry"),
    ("linux/sparc", "--platform: unknown platform 'linux/sparc' (one of linux/amd64, linux/arm64)"),
    ("linux/amd64, linux/amd64", "--platform: linux/amd64 is given twice"),
    (",", "--platform: ',' has an empty entry"),
]


@pytest.mark.parametrize("value", [None, ""])
def test_no_platform_is_the_callers_default(value):
    assert platform_list(value) == [None]


def test_each_platform_once_in_the_order_given():
    assert platform_list(" linux/arm64 ,linux/amd64") == ["linux/arm64", "linux/amd64"]


@pytest.mark.parametrize("value, line", BAD)
def test_the_grammar_refuses(value, line):
    with pytest.raises(InputError) as caught:
        platform_list(value)
    assert caught.value.one_line() == line


@pytest.mark.parametrize("task", [["build", "--dry-run"], ["publish", "--registry", "127.0.0.1:1"]])
@pytest.mark.parametrize("value, line", BAD)
def test_build_and_publish_refuse_the_same_platform_lists_in_the_same_line(task, value, line):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "-r",
            str(REPO_ROOT),
            task[0],
            "--recipe",
            "torch-cu130-bookworm",
            *task[1:],
            "--platform",
            value,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr == f"error: {line}\n", proc.stderr
