"""What adding an in-image tool takes: the tool and one row of render/payload.py, nothing else."""

from __future__ import annotations

import pytest

from servebuild.recipe.load import load_recipe
from servebuild.render import payload
from servebuild.render.context import write_context
from support import REPO_ROOT

BASES = {"build": "b", "runtime": "r"}
TOOL = '"""A tool for the image."""\n\nprint("hello from the image")\n'


def context_for(recipe: str, tmp_path, name: str):
    (tmp_path / "source.tar").write_bytes(b"")  # the engine tree is not what this test reads
    return write_context(
        load_recipe(recipe, REPO_ROOT), "linux/amd64", BASES, tmp_path / name, {}, tmp_path / "source.tar"
    )


@pytest.fixture
def one_more_row(tmp_path, monkeypatch):
    tool = tmp_path / "servebuild_hello.py"
    tool.write_text(TOOL)
    row = payload.Row(
        "a demo tool",
        tool,
        "launchers/.tools/servebuild_hello.py",
        f"{payload.IMAGE_TOOLS}/servebuild_hello.py",
        "runtime",
        "serve-time-jit",
    )
    monkeypatch.setattr(payload, "PAYLOAD", (*payload.PAYLOAD, row))
    return row


def test_one_row_puts_a_tool_in_the_context_and_the_runtime_step_copies_it(one_more_row, tmp_path):
    context = context_for("sglang-native-fp8-bookworm", tmp_path, "sglang")
    assert (context / one_more_row.context).read_text() == TOOL
    dockerfile = (context / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime\n") :]
    # the runtime step copies the folder the row's context path is in to the folder of its image path
    assert f"/mnt/launchers/.tools/*.py {payload.IMAGE_TOOLS}/" in runtime


def test_the_rows_condition_decides_which_images_carry_it(one_more_row, tmp_path):
    """The torch recipe compiles nothing while serving: its image gets no runtime tools, the new one neither."""
    context = context_for("torch-cu130-bookworm", tmp_path, "torch")
    assert not (context / one_more_row.context).exists()
    assert payload.rows(load_recipe("torch-cu130-bookworm", REPO_ROOT).recipe, False, "serve-time-jit") == []


def test_every_copied_runtime_row_lands_where_the_runtime_step_copies_its_folder():
    """The table's image paths and the template's folder copies agree, row by row: a row naming an image
    path its folder's copy does not reach would be a tool the image never gets."""
    folders = {"launchers/.tools/": payload.IMAGE_TOOLS + "/", "launchers/.bench/": payload.BENCH_DIR + "/"}
    checked = 0
    for row in payload.PAYLOAD:
        if row.stage != "runtime" or row.source is payload.WRITTEN or not row.context.startswith("launchers/."):
            continue
        folder = next(f for f in folders if row.context.startswith(f))
        assert row.image == folders[folder] + row.context.removeprefix(folder), row
        checked += 1
    assert checked >= 7  # the bench's four rows and the three runtime tools


def _no_profiles(recipe):
    return recipe.model_copy(update={"launch": recipe.launch.model_copy(update={"profiles": {}})})


def test_each_condition_of_the_table_is_what_it_says():
    """always; profiles: launch profiles; argcheck: an engine kind with a hook and profiles; bench: an engine
    with profiles; serve-time-jit: an engine kind that compiles while serving; aot: the aot stage compiles."""
    torch = load_recipe("torch-cu130", REPO_ROOT).recipe
    sglang = load_recipe("sglang-native-fp8", REPO_ROOT).recipe
    every = dict.fromkeys(("always", "profiles", "argcheck", "bench", "serve-time-jit", "aot"), True)
    assert payload.carried(sglang, True) == every
    assert payload.carried(sglang, False) == {**every, "aot": False}
    assert payload.carried(_no_profiles(sglang), False) == {
        **every, "profiles": False, "argcheck": False, "bench": False, "aot": False,
    }  # fmt: skip
    assert payload.carried(torch, False) == {**dict.fromkeys(every, False), "always": True}
    with_profiles = torch.model_copy(update={"launch": sglang.launch})  # profiles, no engine
    assert payload.carried(with_profiles, False) == {**dict.fromkeys(every, False), "always": True, "profiles": True}


def test_an_engine_kind_without_an_argcheck_hook_carries_no_argcheck_row(monkeypatch):
    sglang = load_recipe("sglang-native-fp8", REPO_ROOT).recipe
    monkeypatch.setattr(type(sglang.engine.kind), "argcheck", None)
    got = payload.carried(sglang, False)
    assert got["argcheck"] is False and got["bench"] is True
