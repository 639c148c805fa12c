"""A command's options are declared once (issue 46, item 3): one dataclass per command whose fields
(cli.options.option) give the invoke task its parameters, their order (and so the short flags), defaults,
help lines and repeatable options; the command's function takes the object. A new field is a new option
of the task and a line of its --help with no other edit."""

from __future__ import annotations

import dataclasses
import sys
from typing import Optional

import pytest
from invoke import Collection, Context, Program

from servebuild.cli.bisect import BisectArgs
from servebuild.cli.build import BuildArgs
from servebuild.cli.front import options_task
from servebuild.cli.options import build_options, option
from servebuild.cli.release import PublishArgs
from servebuild.cli.test import TestImageArgs
from servebuild.cli.warm import WarmArgs
from support import REPO_ROOT

COMMANDS = {
    "build": BuildArgs,
    "bisect": BisectArgs,
    "warm": WarmArgs,
    "publish": PublishArgs,
    "test_image": TestImageArgs,
}


@pytest.fixture(scope="module")
def tasks_module():
    sys.path.insert(0, str(REPO_ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(REPO_ROOT))
    return tasks


def arguments(task) -> dict:
    return {a.name: a for a in task.get_arguments()}


def run(collection: Collection, *argv: str, capsys) -> tuple[int, str, str]:
    """`invoke ARGV` against `collection`: (exit code, stdout, stderr)."""
    try:
        Program(namespace=collection, name="invoke", binary="invoke").run(["invoke", *argv], exit=True)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_task_takes_exactly_its_options_fields_in_order(tasks_module, name):
    options = COMMANDS[name]
    task = getattr(tasks_module, name)
    got = list(arguments(task).values())
    fields = dataclasses.fields(options)
    assert [a.name for a in got] == [f.name for f in fields]
    for arg, field in zip(got, fields):
        assert arg.help == field.metadata["help"], field.name
        assert arg.kind is (
            list if field.metadata["repeatable"] else type(field.default) if field.default is not None else str
        )


def test_a_new_field_is_a_new_option_with_its_help_and_no_other_edit(capsys):
    """The copy of `build` with one more field: `--help build` shows it, the task takes it, the body gets it."""

    @dataclasses.dataclass(frozen=True)
    class Wider(BuildArgs):
        squash_layers: bool = option(False, "squash the image into one layer")
        label: Optional[list[str]] = option(None, "K=V label on the image (repeatable)", repeatable=True)

    seen = []

    @options_task(Wider)
    def build(c, args):
        """Build, wider."""
        seen.append(args)

    collection = Collection(build)
    code, out, _ = run(collection, "--help", "build", capsys=capsys)
    assert code == 0
    assert "--squash-layers" in out and "squash the image into one layer" in out, out
    assert "--label" in out and "K=V label on the image (repeatable)" in out, out
    assert "--record-id" in out and "Build, wider." in out  # the old options and the docstring stay

    code, _, _ = run(
        collection, "build", "--squash-layers", "--label", "a=1", "--label", "b=2", "--tag", "x", capsys=capsys
    )
    assert code == 0
    assert isinstance(seen[-1], Wider)
    assert (seen[-1].squash_layers, seen[-1].label, seen[-1].tag, seen[-1].recipe) == (
        True,
        ["a=1", "b=2"],
        "x",
        BuildArgs().recipe,
    )


def test_an_empty_value_of_a_declared_option_is_one_line_exit_2(capsys):
    seen = []

    @options_task(WarmArgs)
    def warm(c, args):
        seen.append(args)

    code, _, err = run(Collection(warm), "warm", "--tag", "", capsys=capsys)
    assert code == 2 and seen == []
    assert "error: --tag: empty value" in err


def test_a_task_called_from_python_binds_by_name_and_by_position():
    seen = []

    @options_task(PublishArgs)
    def publish(c, args):
        seen.append(args)

    publish(Context(), "toy", registry="127.0.0.1:5000", force=True)
    assert seen[-1] == PublishArgs(recipe="toy", registry="127.0.0.1:5000", force=True)


def test_the_plan_takes_only_the_fields_marked_plan():
    """warm's --tag names the warm image, not the build's: it must not become the plan's tag."""
    warm = build_options(WarmArgs(tag="mine:warm", platform="linux/amd64", variant="v1"), fetching=False)
    assert (warm.tag, warm.platform, warm.variant, warm.fetching) == (None, "linux/amd64", "v1", False)
    built = build_options(BuildArgs(tag="t", cache_from=["a", "b"], netrc="n"), platform="linux/arm64")
    assert (built.tag, built.cache_from, str(built.netrc), built.platform) == ("t", ("a", "b"), "n", "linux/arm64")
    with pytest.raises(TypeError, match="no field record_id"):
        build_options(record_id=True)
