"""Committed image ids (servebuild/build/committed.py, RECIPE.ids.yaml): the reproducibility promise's verdict
and the file it reads, each behaviour asserted on its own (issue 45, items 4 and 7; the mutants
committed-* of scripts/mutants.py). No engine: the verdict takes the layers and ids a build read."""

from __future__ import annotations

import pytest
import yaml
from unit.test_debian_base import copy_project

from servebuild.build import committed
from servebuild.cli import build as cli_build
from servebuild.errors import ServebuildError
from servebuild.recipe.load import load_recipe

RECIPE = "torch-cu130-bookworm"
D = {c: "sha256:" + c * 64 for c in "abcdef0123"}
IMAGE, OTHER = "sha256:" + "9" * 64, "sha256:" + "8" * 64


@pytest.fixture
def project(tmp_path):
    root = copy_project(tmp_path)
    (root / "recipes" / f"{RECIPE}.ids.yaml").unlink()  # each test writes its own
    return root


def ids_file(root):
    return root / "recipes" / f"{RECIPE}.ids.yaml"


def loaded(root):
    return load_recipe(RECIPE, root)


def write(root, data) -> None:
    ids_file(root).write_text(yaml.safe_dump(data))


def refusal(root, *said) -> str:
    with pytest.raises(ServebuildError) as info:
        committed.load_committed(loaded(root))
    line = str(info.value)
    assert "\n" not in line and f"recipes/{RECIPE}.ids.yaml" in line, line
    for s in said:
        assert s in line, (s, line)
    return line


# -- the verdict ---------------------------------------------------------------------------------------------------


def _recorded(root, layers=(D["a"], D["b"], D["c"]), image=IMAGE):
    committed.record(loaded(root), "linux/amd64", committed.CommittedImage(image=image, layers=list(layers)))
    return loaded(root)


def test_the_same_layers_under_another_image_id_do_not_match(project):
    """The image id decides, not the layers: a config that differs (labels, env, created) is another image."""
    lo = _recorded(project)
    same, line = committed.verdict(lo, "linux/amd64", OTHER, [D["a"], D["b"], D["c"]], ["a", "b", "c"])
    assert not same and line.endswith("every layer is the same, the config differs"), line


def test_the_same_image_id_matches(project):
    lo = _recorded(project)
    same, line = committed.verdict(lo, "linux/amd64", IMAGE, [D["a"], D["b"], D["c"]], [])
    assert same and line == f"matches the committed digest {IMAGE} (recipes/{RECIPE}.ids.yaml)"


@pytest.mark.parametrize("built", [[D["a"], D["b"], D["c"], D["d"]], [D["a"], D["b"]]], ids=["one-more", "one-less"])
def test_a_layer_count_that_differs_is_named_when_every_shared_layer_is_the_same(project, built):
    lo = _recorded(project)
    same, line = committed.verdict(lo, "linux/amd64", OTHER, built, ["a", "b", "c", "d"][: len(built)])
    assert not same and f": {len(built)} layers, the committed image has 3" in line, line


def test_the_first_differing_layer_is_named_with_its_step(project):
    lo = _recorded(project)
    same, line = committed.verdict(lo, "linux/amd64", OTHER, [D["a"], D["e"], D["f"]], ["a", "RUN  pip\n install", "c"])
    assert not same and "first differing layer 2 of 3 (sha256:eeeeeeeeeeee… vs sha256:bbbbbbbbbbbb…)" in line, line
    assert line.endswith("made by: RUN pip install"), line


# -- record ----------------------------------------------------------------------------------------------------------


def test_record_keeps_every_other_platform_and_variant(project):
    lo = loaded(project)
    committed.record(lo, "linux/amd64", committed.CommittedImage(image=IMAGE, layers=[D["a"]]))
    committed.record(lo, "linux/arm64", committed.CommittedImage(image=OTHER, base=D["f"], layers=[D["b"]]))
    committed.record(lo, "linux/amd64", committed.CommittedImage(image=OTHER, layers=[D["c"]]), variant="v")
    got = committed.load_committed(loaded(project))
    assert sorted(got) == ["linux/amd64", "linux/amd64:v", "linux/arm64"]
    assert (got["linux/amd64"].image, got["linux/arm64"].base, got["linux/amd64:v"].layers) == (IMAGE, D["f"], [D["c"]])
    assert ids_file(project).read_text().startswith(committed.HEADER)


def test_record_replaces_its_own_platform_only(project):
    lo = loaded(project)
    committed.record(lo, "linux/amd64", committed.CommittedImage(image=IMAGE, layers=[D["a"]]))
    committed.record(lo, "linux/arm64", committed.CommittedImage(image=IMAGE, layers=[D["a"]]))
    committed.record(lo, "linux/amd64", committed.CommittedImage(image=OTHER, layers=[D["b"]]))
    got = committed.load_committed(loaded(project))
    assert (got["linux/amd64"].image, got["linux/arm64"].image) == (OTHER, IMAGE)


# -- the file's grammar: one line naming the file and the field ------------------------------------------------------


def entry(**over):
    return {"linux/amd64": {"image": IMAGE, "layers": [D["a"], D["b"]], **over}}


@pytest.mark.parametrize(
    "data,field",
    [
        (entry(extra="x"), "linux/amd64.extra"),
        (entry(image=IMAGE + "00"), "linux/amd64.image"),
        (entry(image="sha256:" + "A" * 64), "linux/amd64.image"),
        (entry(base=D["a"] + "ff"), "linux/amd64.base"),
        (entry(layers=[D["a"], "sha256:abc"]), "linux/amd64.layers"),
        (entry(layers=[D["a"] + "0"]), "linux/amd64.layers"),
        (entry(layers=["sha512:" + "a" * 64]), "linux/amd64.layers"),
        (entry(layers=D["a"]), "linux/amd64.layers"),
        ({"linux/amd64": {"layers": [D["a"]]}}, "linux/amd64.image"),
        ({"linux/amd64": [IMAGE]}, "linux/amd64"),
    ],
    ids=[
        "unknown-key",
        "image-prefix",
        "image-upper",
        "base-prefix",
        "layer-short",
        "layer-prefix",
        "layer-sha512",
        "layers-text",
        "no-image",
        "entry-list",
    ],  # fmt: skip
)
def test_a_malformed_entry_is_one_line_naming_its_field(project, data, field):
    write(project, data)
    refusal(project, "malformed ids file", field)


def test_an_ids_file_that_is_not_a_mapping_is_one_line(project):
    ids_file(project).write_text("- linux/amd64\n")
    refusal(project, "malformed ids file: a mapping of platform to image")


def test_an_ids_file_linking_out_of_the_project_is_refused(project, tmp_path):
    outside = tmp_path / "elsewhere.ids.yaml"
    outside.write_text(yaml.safe_dump(entry()))
    ids_file(project).symlink_to(outside)
    refusal(project, "outside the project")


def test_an_ids_file_linking_inside_the_project_is_read(project):
    inside = project / "recipes" / "kept.yaml.txt"
    inside.write_text(yaml.safe_dump(entry()))
    ids_file(project).symlink_to(inside)
    assert committed.load_committed(loaded(project))["linux/amd64"].image == IMAGE


# -- item 4: read before any build starts ---------------------------------------------------------------------------


class NoEngine:
    """Stands in for the Docker client: a test that reaches the engine fails (nothing may be built)."""

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        raise AssertionError(f"the engine was asked ({name}) before the ids file was read")


@pytest.fixture
def no_build(monkeypatch):
    def reached(*a, **k):
        raise AssertionError("a build (or dry run) started before the ids file was read")

    monkeypatch.setattr(cli_build, "DockerClient", NoEngine)
    monkeypatch.setattr(cli_build.run, "build", reached)
    monkeypatch.setattr(cli_build.run, "dry_run", reached)
    monkeypatch.setattr(cli_build.bases, "bootstrappable_refs", reached)


@pytest.mark.parametrize("dry_run", [False, True], ids=["build", "dry-run"])
def test_build_refuses_a_malformed_ids_file_before_building(project, no_build, dry_run):
    write(project, entry(layers=["sha256:abc"]))
    with pytest.raises(ServebuildError) as info:
        cli_build.build(project, cli_build.BuildArgs(recipe=RECIPE, platform="linux/amd64", dry_run=dry_run))
    assert f"recipes/{RECIPE}.ids.yaml" in str(info.value) and "linux/amd64.layers" in str(info.value)


def test_main_refuses_a_malformed_ids_file_before_bootstrapping_a_base(project, no_build):
    ids_file(project).write_text("linux/amd64: [1]\n")
    with pytest.raises(ServebuildError) as info:
        cli_build.main(project, RECIPE, platform="linux/amd64")
    assert f"recipes/{RECIPE}.ids.yaml" in str(info.value)


@pytest.mark.parametrize(
    "key",
    ["linux/s390x", "linux/amd64:", "linux/amd64:Bad Variant", "linux/amd64:release:x", "amd64", 1],
    ids=["unknown-platform", "empty-variant", "bad-variant", "two-variants", "bare-arch", "number"],
)
def test_an_entry_for_no_platform_servebuild_builds_is_one_line(project, key):
    """hostile-45: an ids file's key is PLATFORM or PLATFORM:VARIANT; `linux/s390x` (or a key no build ever
    writes) was taken, so `build --dry-run` exited 0 and a build ran with a malformed ids file."""
    write(project, {**entry(), key: entry()["linux/amd64"]})
    refusal(project, "malformed ids file", str(key))


def test_a_variant_entry_is_still_read(project):
    write(project, {**entry(), "linux/amd64:release": entry()["linux/amd64"]})
    assert set(committed.load_committed(loaded(project))) == {"linux/amd64", "linux/amd64:release"}
