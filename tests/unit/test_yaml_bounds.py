"""The bounded YAML reader (servebuild/yamlfile.py) that every input file goes through: servebuild's own
nesting limit (64 levels, below libyaml's 1,000), alias expansion, bytes that are not UTF-8 or not
YAML; each refusal is one line naming the file (unit level: no engine, no subprocess)."""

from __future__ import annotations

import time

import pytest
import yaml

from servebuild.errors import RecipeError
from servebuild.recipe.load import load_recipe
from servebuild.yamlfile import MAX_YAML_DEPTH, parse_bounded
from support import REPO_ROOT, one_printable_line
from unit.minimal_recipe import BASE


# -- YAML nesting: servebuild's own limit, below libyaml's (1,000 levels) ------------------------------------------

# depth as servebuild counts it: the document's root node is at 0, each node one below its parent


def flow(depth: int) -> str:
    """A mapping whose value is `depth` nested flow sequences: the innermost is at `depth`."""
    return "a: " + "[" * depth + "]" * depth + "\n"


def block(depth: int) -> str:
    """The same depth in block style: a chain of one-key mappings, one level per line; the scalar is at `depth`."""
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth - 1)) + "  " * (depth - 1) + "k: 1\n"


def depth_of(data) -> int:
    return (
        1 + max(map(depth_of, data.values() if isinstance(data, dict) else data), default=-1)
        if isinstance(data, (dict, list))
        else 0
    )


def test_the_documented_depth_is_64():
    assert MAX_YAML_DEPTH == 64
    assert "at most 64 levels" in (REPO_ROOT / "docs" / "reference" / "input-limits.md").read_text()
    assert "≤ 64 levels" in (REPO_ROOT / "docs" / "input-validation.md").read_text()


@pytest.mark.parametrize("style", [flow, block])
def test_yaml_at_the_depth_limit_is_read(style):
    data, _ = parse_bounded(style(MAX_YAML_DEPTH), "deep.yaml")
    assert depth_of(data) == MAX_YAML_DEPTH


@pytest.mark.parametrize("style", [flow, block])
@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 1, 100, 500, 999])
def test_yaml_past_the_depth_limit_is_refused_by_servebuild_not_by_libyaml(style, depth):
    with pytest.raises(RecipeError) as info:
        parse_bounded(style(depth), "deep.yaml")
    line = one_printable_line(info.value)
    assert line.startswith("deep.yaml:") and "nested more than 64 levels deep" in line, line


# -- alias expansion, unreadable bytes, every reader ----------------------------------------------------------------


def test_yaml_alias_bomb_is_refused_quickly(project):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    (project / "recipes" / "hostile.yaml").write_text(bomb)
    start = time.monotonic()
    with pytest.raises(RecipeError, match="more than 100000 nodes once aliases are expanded"):
        load_recipe("hostile", project)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("blob,message", [(b"name: \xff\xfe\n", "not UTF-8"), (b"a:" + b"[" * 5000, "YAML")])
def test_unreadable_yaml_is_one_line(project, blob, message):
    (project / "recipes" / "hostile.yaml").write_bytes(blob)
    with pytest.raises(RecipeError, match=message):
        load_recipe("hostile", project)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8)
)


@pytest.mark.parametrize(
    "blob,words",
    [
        (BOMB, "more than 100000 nodes"),
        ("a: " + "[" * 3000 + "\n", "nesting depth"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels deep"),
        ('d: &s "' + "x" * 100_000 + '"\na: [' + "*s, " * 50 + "*s]\n", "characters of text"),
        ("images: {a: b}\nimages: {c: d}\n", "given twice"),
        (b"images:\n  \xff: x\n", "not UTF-8"),
        ("".join(f"k{i}: 1\n" for i in range(30000)), "at most 20000"),
        ("images: [unclosed\n", "invalid YAML"),
    ],
)
@pytest.mark.parametrize("reader", ["mirror map", "config", "lock"])
def test_every_input_file_is_parsed_with_the_same_bounds(project, tmp_path, reader, blob, words):
    """Mirror maps, the user config and lock files go through the recipe's bounded YAML reader."""
    from servebuild.plan.config import load_config, load_mirror_map
    from servebuild.errors import ServebuildError
    from servebuild.lock import lockfile

    path = tmp_path / "input.yaml"
    if reader == "lock":
        (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(BASE))
        path = project / "recipes" / "hostile.lock.yaml"
    path.write_bytes(blob if isinstance(blob, bytes) else blob.encode())
    start = time.monotonic()
    with pytest.raises(ServebuildError) as info:
        {
            "mirror map": lambda: load_mirror_map(path),
            "config": lambda: load_config(path),
            "lock": lambda: lockfile.load_lock_file(load_recipe("hostile", project)),
        }[reader]()
    line = str(info.value)
    assert "\n" not in line and words in line and path.name in line, line
    assert time.monotonic() - start < 5  # a hang guard, not a speed target (see scripts/bench_hostile_yaml.py)
