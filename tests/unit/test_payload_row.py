"""What adding an in-image file takes: the file and one row of render/payload.py, nothing else: the table makes
the Dockerfile's copy steps, and the templates name none of its paths."""

from __future__ import annotations

import fnmatch
import re

import pytest

from servebuild.recipe.load import load_recipe
from servebuild.render import payload
from servebuild.render.aot import aot_kernels
from servebuild.render.context import write_context
from support import REPO_ROOT

BASES = {"build": "b", "runtime": "r"}
TOOL = '"""A tool for the image."""\n\nprint("hello from the image")\n'


def context_for(recipe: str, tmp_path, name: str):
    (tmp_path / "source.tar").write_bytes(b"")  # the engine tree is not what this test reads
    return write_context(
        load_recipe(recipe, REPO_ROOT), "linux/amd64", BASES, tmp_path / name, {}, tmp_path / "source.tar"
    )


def add_row(monkeypatch, tmp_path, what: str, context: str, image: str, when: str, text: str = TOOL) -> payload.Row:
    """One more row of the table, its file written under tmp_path: all a new in-image file takes."""
    source = tmp_path / context.rpartition("/")[2]
    source.write_text(text)
    row = payload.Row(what, source, context, image, "runtime", when)
    monkeypatch.setattr(payload, "PAYLOAD", (*payload.PAYLOAD, row))
    return row


@pytest.fixture
def one_more_row(tmp_path, monkeypatch):
    tool = "servebuild_hello.py"
    return add_row(
        monkeypatch,
        tmp_path,
        "a demo tool",
        f"launchers/.tools/{tool}",
        f"{payload.IMAGE_TOOLS}/{tool}",
        "serve-time-jit",
    )


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


def copies(step: str) -> list[tuple[str, str]]:
    """(source, destination) of each cp of a generated runtime step."""
    return [tuple(m.groups()) for m in re.finditer(r"cp --preserve=mode,timestamps (\S+) (\S+)", step)]


@pytest.mark.parametrize("recipe", ["sglang-native-fp8-bookworm", "vllm-dspark", "torch-cu130-bookworm"])
def test_every_runtime_row_an_image_carries_lands_at_its_image_path(recipe):
    """The generated step and the table agree, row by row: each runtime row's context file is matched by one
    cp's source and lands at the row's image path (a folder row: its files in the row's folder)."""
    loaded = load_recipe(recipe, REPO_ROOT).recipe
    has_aot = bool(aot_kernels(loaded, REPO_ROOT))
    site = "/opt/venv/lib/python3.12/site-packages"
    step = payload.runtime_step(loaded, has_aot, site)
    carried = [r for r in payload.rows(loaded, has_aot) if r.stage == "runtime"]
    assert carried
    if not loaded.launch.profiles:
        assert step == "\n".join(f"COPY {r.context} {r.image}" for r in carried)
        return
    pairs = copies(step)
    for row in carried:
        file = f"/mnt/{row.context}" + ("prompt.txt" if row.context.endswith("/") else "")
        image = row.image.replace(payload.SITE_PACKAGES, site)
        landed = [
            dest + file.rpartition("/")[2] if dest.endswith("/") else dest
            for source, dest in pairs
            if fnmatch.fnmatchcase(file, source) and file.count("/") == source.count("/")
        ]
        assert landed == [image + ("prompt.txt" if row.context.endswith("/") else "")], (row, pairs)
    assert step.count("--mount=type=bind,") == len({r.context.split("/")[0] for r in carried})


@pytest.fixture
def row_in_a_new_folder(tmp_path, monkeypatch):
    tool = "servebuild_hello.py"
    folder = f"{payload.SERVEBUILD}/hello"
    return add_row(
        monkeypatch, tmp_path, "a tool in a new folder", f"launchers/.hello/{tool}", f"{folder}/{tool}", "bench"
    )


def test_a_row_in_a_new_folder_is_one_row_the_step_makes_its_folder_and_copies_it(row_in_a_new_folder, tmp_path):
    context = context_for("sglang-native-fp8-bookworm", tmp_path, "sglang")
    assert (context / row_in_a_new_folder.context).read_text() == TOOL
    dockerfile = (context / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.index("AS runtime\n") :]
    want = "mkdir -p /opt/servebuild/hello && cp --preserve=mode,timestamps /mnt/launchers/.hello/*.py /opt/servebuild/hello/"
    assert want in runtime


@pytest.fixture
def top_level_row(tmp_path, monkeypatch):
    image = f"{payload.SERVEBUILD}/NOTICE.txt"
    return add_row(monkeypatch, tmp_path, "a notice", "NOTICE.txt", image, "always", text="made by servebuild\n")


def test_a_top_level_file_row_is_bound_and_copied_or_copied_alone(top_level_row, tmp_path):
    """With launchers the file is one more bind and cp of the runtime step; without (torch), one more COPY."""
    sglang = (context_for("sglang-native-fp8-bookworm", tmp_path, "sglang") / "Dockerfile").read_text()
    runtime = sglang[sglang.index("AS runtime\n") :]
    assert "--mount=type=bind,source=NOTICE.txt,target=/mnt/NOTICE.txt" in runtime
    assert (
        "mkdir -p /opt/servebuild && cp --preserve=mode,timestamps /mnt/NOTICE.txt /opt/servebuild/NOTICE.txt"
        in runtime
    )
    torch = (context_for("torch-cu130-bookworm", tmp_path, "torch") / "Dockerfile").read_text()
    runtime = torch[torch.index("AS runtime\n") :]
    assert "--mount=type=bind,source=NOTICE.txt,target=/mnt/src" in runtime and "/opt/servebuild/NOTICE.txt" in runtime


def test_the_templates_name_no_in_image_path_the_table_holds():
    """The templates under images/ print the table's copy steps; none spells a row's image path, or the folder
    one is copied to (but /opt/servebuild itself, which the engine stage's files share). The install modes'
    fragments copy their own context files (InstallMode.context_files), which are not rows."""
    held = set()
    for row in payload.PAYLOAD:
        image = row.image.rstrip("/")
        held |= {image, image.rpartition("/")[0]}
    held = {
        h.replace("/PROFILE", "").replace(f"/{payload.BENCH_COMMAND}", "")
        for h in held
        if payload.SITE_PACKAGES not in h and h != payload.SERVEBUILD
    }
    assert payload.BIN in held and payload.ARGCHECK in held and payload.AOT in held
    templates = [*(REPO_ROOT / "images").rglob("*.j2")]
    for template in templates:
        text = template.read_text()
        named = sorted(h for h in held if re.search(re.escape(h) + r"(?![A-Za-z0-9_.-])", text))
        assert named == [], (template.name, named)


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
