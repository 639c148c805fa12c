"""Bounded YAML for every input file (recipes, locks, mirror maps, config, farm files).

One parse: libyaml composes the node graph, which is bounded in lines, expanded size (alias bombs)
and depth before any data is constructed; duplicate and non-scalar keys are refused; every
problem is one RecipeError with the file and, where known, the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

from servebuild.errors import RecipeError
from servebuild.fsutil import read_small_text

MAX_YAML_LINES = 20_000  # a recipe is a few hundred lines
MAX_YAML_NODES = 100_000  # a recipe is a few hundred nodes; aliases must not expand into millions
MAX_YAML_TEXT = 4 << 20  # characters of scalar text after alias expansion (files are at most 1 MiB)
MAX_YAML_DEPTH = 64  # a recipe is about six levels deep
# libyaml's composer where PyYAML was built with it (fast on big hostile input); same nodes and marks
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line_map(root: Optional[yaml.Node], display: str) -> dict[tuple, int]:
    """Map each key path of a YAML document to its 1-based line, for error places.

    Aliased nodes are walked once (first path wins) and the document's expanded size is bounded,
    so an alias bomb is refused instead of expanded.
    """
    lines: dict[tuple, int] = {}
    if root is not None:
        _check_expanded_size(root, display)
        _walk_keys(root, (), display, lines, set())
    return lines


def _check_expanded_size(root: yaml.Node, display: str) -> None:
    """Refuse a document that is too deep, recursive, or too large once its aliases are expanded."""
    sizes: dict[int, int] = {}
    weights: dict[int, int] = {}  # characters of scalar text once aliases are expanded
    active: set[int] = set()  # the nodes on the path being sized

    def size(node: yaml.Node, depth: int = 0) -> int:
        if depth > MAX_YAML_DEPTH:
            raise RecipeError(
                f"the YAML is nested more than {MAX_YAML_DEPTH} levels deep",
                file=display,
                line=node.start_mark.line + 1,
            )
        if id(node) in active:  # an alias inside the node it names: no data is infinite
            raise RecipeError(
                "a YAML alias refers to a node that contains it (a recursive structure)",
                file=display,
                line=node.start_mark.line + 1,
            )
        if id(node) not in sizes:
            active.add(id(node))
            children = (
                [v for pair in node.value for v in pair]
                if isinstance(node, yaml.MappingNode)
                else (node.value if isinstance(node, yaml.SequenceNode) else [])
            )
            sizes[id(node)] = 1 + sum(size(c, depth + 1) for c in children)
            weights[id(node)] = (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(
                weights[id(c)] for c in children
            )
            active.discard(id(node))
        return sizes[id(node)]

    if size(root) > MAX_YAML_NODES:
        raise RecipeError(
            f"the YAML has more than {MAX_YAML_NODES} nodes once aliases are expanded (a recipe has a few hundred)",
            file=display,
        )
    if weights[id(root)] > MAX_YAML_TEXT:
        raise RecipeError(
            f"the YAML holds more than {MAX_YAML_TEXT} characters of text once aliases are expanded", file=display
        )


def _walk_keys(node: yaml.Node, path: tuple, display: str, lines: dict[tuple, int], seen: set[int]) -> None:
    """Record each key path's line; refuse complex and duplicate keys."""
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set = set()
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise RecipeError(
                    "a recipe's keys are plain names, not lists or mappings", file=display, line=key.start_mark.line + 1
                )
            if key.value in keys:  # YAML would silently keep the last one
                raise RecipeError(
                    f"key {key.value!r} is given twice",
                    file=display,
                    field=".".join(map(str, path + (key.value,))),
                    line=key.start_mark.line + 1,
                )
            keys.add(key.value)
            child = path + (key.value,)
            lines.setdefault(child, key.start_mark.line + 1)
            _walk_keys(value, child, display, lines, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk_keys(item, path + (i,), display, lines, seen)


def _compose_and_construct(text: str, display: str) -> tuple[Any, dict[tuple, int]]:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        lines = _line_map(node, display)
        return (loader.construct_document(node) if node is not None else None), lines
    finally:
        loader.dispose()


def parse_bounded(text: str, display: str) -> tuple[Any, dict[tuple, int]]:
    """Parse once: compose the node graph, bound it (lines, size, depth, keys), then construct the data."""
    if text.count("\n") > MAX_YAML_LINES:
        raise RecipeError(f"has {text.count(chr(10))} lines; an input file has at most {MAX_YAML_LINES}", file=display)
    try:
        return _compose_and_construct(text, display)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise RecipeError(f"invalid YAML: {problem}", file=display, line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise RecipeError("the YAML is nested too deeply", file=display) from None


def load_yaml(path: Path, display: Optional[str] = None) -> tuple[Any, dict[tuple, int]]:
    """Read (size-bounded, regular files only) and parse an input file: (data, line of each key path)."""
    display = display or str(path)
    return parse_bounded(read_small_text(path, display), display)
