"""`invoke warm` treats what the image's cache tool prints as hostile input (issue 31, point 7): the
command runs as root in the container and may replace the tool, so its census and pack output may be
anything. Each case is one line naming the tool's output, exit 2, nothing packed, copied or tagged.
No engine: the fake docker client of test_warm_stream.py answers with what each test writes."""

from __future__ import annotations

import pytest

from servebuild.check.warm import WarmRequest, run_warm
from servebuild.errors import ServebuildError
from unit import test_warm_stream
from unit.test_warm_stream import MANIFEST, quiet

fake_engine = test_warm_stream.fake_engine  # the fixture, shared with test_warm_stream.py


# ------------------------------------------------------------------ point 7: the cache tool's output is hostile

HOSTILE = {
    "not JSON": "servebuild-cache: replaced by the run\n",
    "an int": "42\n",
    "a list": "[1, 2]\n",
    "null": "null\n",
    "changed a list": '{"changed": ["a", "b"]}\n',
    "changed missing": '{"files": 3}\n',
    "a count a string": '{"changed": {"triton": "12"}}\n',
    "a count negative": '{"changed": {"triton": -1}}\n',
    "a count a bool": '{"changed": {"triton": true}}\n',
    "a count infinite": '{"changed": {"triton": 1e999}}\n',
    "a count 5,000 digits": '{"changed": {"triton": ' + "9" * 5000 + "}}\n",
    "a count 400 digits": '{"changed": {"triton": ' + "9" * 400 + "}}\n",
    "a kind 5,000 characters": '{"changed": {"' + "k" * 5000 + '": 1}}\n',
    "a kind with a newline": '{"changed": {"a\\nb": 1}}\n',
    "100k-deep": "[" * 100_000 + "]" * 100_000 + "\n",
    "100k-deep object": '{"changed": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001 + "\n",
    "empty": "",
    "4 MiB": "x" * (4 << 20) + "\n",
}


@pytest.mark.parametrize("printed", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_census_output_after_the_command_is_one_line_and_tags_nothing(fake_engine, tmp_path, printed):
    """The command runs as root in the container and can replace the image's cache tool: whatever its
    census prints after the run is one line naming the tool's output, exit 2, nothing packed or tagged."""
    engine, log, answers = fake_engine
    (answers / "since").write_text(printed)
    with pytest.raises(ServebuildError) as err:
        run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command="true", gpus="none", tag="servebuild/x:w"),
            tmp_path / "warm",
            echo=quiet,
        )
    message = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in message and len(message) < 600, message[:300]
    assert "cache tool" in message and "census --since" in message, message[:300]
    made = log.read_text().splitlines()
    assert not any(c.split()[0] in ("tag", "cp", "build") and c != "build --help" for c in made), made
    assert not any(" pack " in f" {c} " for c in made), made


@pytest.mark.parametrize(
    "printed",
    [
        "42\n",
        "[]\n",
        '{"manifest_sha256": 5, "origin": null}\n',
        '{"manifest_sha256": "' + MANIFEST + '", "origin": [1]}\n',
        '{"manifest_sha256": "' + MANIFEST + '", "origin": {"image_id": {"a": 1}}}\n',
        "[" * 100_000 + "]" * 100_000 + "\n",
        "not json\n",
    ],
)
def test_hostile_census_output_before_the_command_is_one_line(fake_engine, tmp_path, printed):
    engine, log, answers = fake_engine
    (answers / "listing").write_text(printed)
    with pytest.raises(ServebuildError) as err:
        run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command="echo ran", gpus="none", tag="servebuild/x:w"),
            tmp_path / "warm",
            echo=quiet,
        )
    message = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in message and len(message) < 600, message[:300]
    assert "cache tool" in message and "census --listing" in message, message[:300]
    assert not any("echo ran" in c for c in log.read_text().splitlines())


@pytest.mark.parametrize(
    "printed",
    [
        "7\n",
        '{"files": "3", "bytes": 1}\n',
        '{"files": 1}\n',
        '{"files": 1, "bytes": ' + "9" * 5000 + "}\n",
        "[" * 100_000 + "\n",
    ],
)
def test_hostile_pack_output_is_one_line_and_tags_nothing(fake_engine, tmp_path, printed):
    engine, log, answers = fake_engine
    (answers / "pack").write_text(printed)
    with pytest.raises(ServebuildError) as err:
        run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command="true", gpus="none", tag="servebuild/x:w"),
            tmp_path / "warm",
            echo=quiet,
        )
    message = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in message and len(message) < 600, message[:300]
    assert "cache tool" in message and "pack" in message, message[:300]
    assert not any(c.split()[0] in ("tag", "cp") for c in log.read_text().splitlines())


def test_a_sane_census_still_counts(fake_engine, tmp_path):
    engine, _, answers = fake_engine
    (answers / "since").write_text('noise from a warning\n{"changed": {"triton": 3, "flashinfer": 2}}\n')
    result = run_warm(
        engine,
        WarmRequest(image="servebuild/x:amd64", command="true", gpus="none", check_only=True),
        tmp_path / "warm",
        echo=quiet,
    )
    assert result.new_files == {"flashinfer": 2, "triton": 3}


class FakeBox:
    """A container whose nvidia-smi printed `printed` (the command may have replaced it)."""

    def __init__(self, printed: bytes, code: int = 0):
        self.name, self.printed, self.code = "box", printed, code
        self.docker = self

    def stream(self, *argv, out=None, keep=0, timeout=None):
        return self.code, self.printed[-keep:], len(self.printed)


@pytest.mark.parametrize(
    "printed, gpu, driver",
    [
        (b"NVIDIA H200, 580.95.05\n", "NVIDIA H200", "580.95.05"),
        (b"\x1b[31mH200, 580\n", "unknown", "580"),
        (b"G" * 500 + b", 580\n", "unknown", "580"),
        (b"G" * 5000 + b", 580\n", "unknown", "unknown"),
        (b"\xff\xfe, \x00\n", "unknown", "unknown"),
        (b"H200, 580\n" + b"x" * 100_000, "unknown", "unknown"),
        (b"", "unknown", "unknown"),
    ],
)
def test_gpu_identity_from_a_hostile_nvidia_smi_reaches_no_label(printed, gpu, driver):
    """The warm image's labels carry the GPU and driver nvidia-smi printed in the container; a command
    that replaced nvidia-smi gets "unknown" there, never a control character or 5,000 characters."""
    from servebuild.check.warm import gpu_identity

    assert gpu_identity(FakeBox(printed), "all") == {"gpu": gpu, "driver": driver}
    assert gpu_identity(FakeBox(b"H200, 580\n", code=1), "all") == {"gpu": "unknown", "driver": "unknown"}
