"""servebuild_info.py (runs in the image): what the image is, read from what its build left in it, and one
line, exit 2, when there is no manifest to read. The run in a real image is tests/image/test_smoke.py's
test_the_image_says_what_it_is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO_ROOT

TOOL = REPO_ROOT / "servebuild" / "tools" / "servebuild_info.py"


def run(*args):
    return subprocess.run([sys.executable, "-I", str(TOOL), *args], capture_output=True, text=True, env={})


def test_it_names_the_recipe_variant_patches_profiles_and_seed(tmp_path):
    manifest = {
        "platform": "linux/amd64",
        "recipe": {"name": "sglang-native-fp8-bookworm", "variant": "both"},
        "engine": {
            "name": "sglang",
            "version": "0.5.16",
            "installed_version": "0.5.16+sb2.abc",
            "install": "wheel-overlay",
            "source": {
                "patches": [
                    {"id": "pr-33276", "pr": 33276, "commit": "0123456789abcdef", "files": ["python/a.py"]},
                    {"id": "adaptive", "pr": None, "file": "patches/x.patch", "files": ["python/b.py"]},
                ]
            },
        },
        "stages": {"profile-check": {"on": "check-base"}, "aot": {"on": "engine-release"}},
        "launch": {"profiles": ["serve", "serve-fixed"], "default": "serve"},
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "profiles-checked.json").write_text(
        json.dumps(
            {
                "engine": "sglang",
                "version": "0.5.16",
                "profiles": {"serve": {"parsed_by": "sglang.srt.server_args.prepare_server_args"}},
                "variant_files": ["sglang/srt/environ.py"],
            }
        )
    )
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "aot.json").write_text(json.dumps({"kernels": [{"builder": "m:topk", "args": [512]}]}))
    out = run("--json", "--manifest", str(tmp_path / "manifest.json"))
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["engine"]["version"] == "0.5.16+sb2.abc"
    assert [(p["id"], p["from"]) for p in info["engine"]["patches"]] == [
        ("pr-33276", "PR #33276 at 0123456789ab"),
        ("adaptive", "patches/x.patch"),
    ]
    assert info["profiles"] == {"serve": "sglang.srt.server_args.prepare_server_args", "serve-fixed": None}
    assert info["checked_by"] == "sglang 0.5.16 with the variant's sglang/srt/environ.py"
    assert info["stages"] == {"aot": "engine-release", "profile-check": "check-base"}
    assert info["seed_kernels"] == ["m:topk(512,)"]
    text = run("--manifest", str(tmp_path / "manifest.json")).stdout
    assert text.startswith("image: sglang-native-fp8-bookworm, variant both, linux/amd64\n")
    assert "  serve-fixed: not checked" in text and "  adaptive (patches/x.patch): python/b.py" in text


def test_no_manifest_or_a_bad_one_is_one_line_exit_2(tmp_path):
    missing = run("--manifest", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().count("\n") == 0 and "no build manifest" in missing.stderr
    for body in ("{not json", "[1, 2]"):
        (tmp_path / "m.json").write_text(body)
        bad = run("--manifest", str(tmp_path / "m.json"))
        assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr, bad


# -- issue 45, item 6: the one-line standard on hostile manifests ------------------------------------------------
# Each case: exit 2, nothing on stdout, ONE line on stderr naming the file and the field, no traceback; the tool
# runs with a deadline, so a hang (a FIFO) fails the test instead of stalling it.

GOOD = {
    "platform": "linux/amd64",
    "recipe": {"name": "r", "variant": None},
    "engine": {
        "name": "sglang",
        "version": "0.5.16",
        "install": "wheel-overlay",
        "source": {"commit": "c" * 40, "patches": [{"id": "p", "pr": 1, "commit": "a" * 40, "files": ["x.py"]}]},
    },
    "stages": {"aot": {"on": "engine-release"}},
    "launch": {"profiles": ["serve"], "default": "serve"},
}


def run_bounded(*args):
    return subprocess.run([sys.executable, "-I", str(TOOL), *args], capture_output=True, text=True, env={}, timeout=20)


def refused(out, *names):
    """The one-line refusal: exit 2, stdout empty, one stderr line holding every one of `names`."""
    assert out.returncode == 2, (out.returncode, out.stdout[-300:], out.stderr[-600:])
    assert out.stdout == "", out.stdout[-300:]
    assert "Traceback" not in out.stderr and out.stderr.endswith("\n") and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("servebuild-info: "), out.stderr
    for name in names:
        assert name in out.stderr, (name, out.stderr)
    return out.stderr


def edited(tmp_path, edit, body=None) -> str:
    manifest = json.loads(json.dumps(GOOD))
    edit(manifest)
    path = tmp_path / "manifest.json"
    path.write_text(body if body is not None else json.dumps(manifest))
    return str(path)


def _set(path, value):
    def edit(m):
        *parents, last = path
        node = m
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


WRONG_SHAPES = [
    (("recipe",), ["r"], "recipe"),
    (("engine",), ["sglang"], "engine"),
    (("engine", "source"), "abc", "engine.source"),
    (("engine", "source", "tree"), [1], "engine.source.tree"),
    (("engine", "source", "patches"), {"id": "p"}, "engine.source.patches"),
    (("engine", "source", "patches", 0), ["p"], "engine.source.patches[0]"),
    (("engine", "source", "patches", 0, "files"), "x.py", "engine.source.patches[0].files"),
    (("engine", "source", "patches", 0, "files", 0), {"x": 1}, "engine.source.patches[0].files[0]"),
    (("engine", "source", "patches", 0, "pr"), "12", "engine.source.patches[0].pr"),
    (("engine", "source", "patches", 0, "pr"), True, "engine.source.patches[0].pr"),
    (("engine", "source", "patches", 0, "pr"), 1.5, "engine.source.patches[0].pr"),
    (("engine", "source", "patches", 0, "id"), {"a": 1}, "engine.source.patches[0].id"),
    (("engine", "name"), ["sglang"], "engine.name"),
    (("engine", "installed_version"), 7, "engine.installed_version"),
    (("stages",), ["aot"], "stages"),
    (("stages", "aot"), "engine-release", "stages.aot"),
    (("stages", "aot", "on"), ["x"], "stages.aot.on"),
    (("launch",), "serve", "launch"),
    (("launch", "profiles"), {"serve": 1}, "launch.profiles"),
    (("launch", "profiles"), [None], "launch.profiles[0]"),
    (("launch", "profiles"), [["serve"]], "launch.profiles[0]"),
    (("launch", "default"), {"x": 1}, "launch.default"),
    (("platform",), {"os": "linux"}, "platform"),
]


@pytest.mark.parametrize("where,value,field", WRONG_SHAPES, ids=[f for _, _, f in WRONG_SHAPES])
def test_a_manifest_field_of_the_wrong_kind_is_one_line_naming_it(tmp_path, where, value, field):
    path = edited(tmp_path, _set(where, value))
    for args in (("--manifest", path), ("--json", "--manifest", path)):
        refused(run_bounded(*args), path, f": {field}: ")


def test_the_records_beside_the_manifest_are_held_to_their_shapes_too(tmp_path):
    path = edited(tmp_path, lambda m: None)
    checked = tmp_path / "profiles-checked.json"
    for body, field in (
        ({"profiles": ["serve"]}, "profiles"),
        ({"profiles": {"serve": ["x"]}}, "profiles.serve"),
        ({"profiles": {"serve": {"parsed_by": 3}}}, "profiles.serve.parsed_by"),
        ({"variant_files": "a.py"}, "variant_files"),
        ({"engine": ["sglang"]}, "engine"),
    ):
        checked.write_text(json.dumps(body))
        refused(run_bounded("--manifest", path), str(checked), f": {field}: ")
    checked.unlink()
    (tmp_path / "seed").mkdir()
    seed = tmp_path / "seed" / "aot.json"
    for body, field in (
        ({"kernels": {"builder": "m:f"}}, "kernels"),
        ({"kernels": ["m:f"]}, "kernels[0]"),
        ({"kernels": [{"builder": "m:f", "args": 5}]}, "kernels[0].args"),
        ({"kernels": [{"builder": "m:f", "args": [{"a": 1}]}]}, "kernels[0].args[0]"),
        ({"kernels": [{"builder": "m:f", "args": list(range(1000))}]}, "kernels[0].args"),
        ({"kernels": [{"builder": ["m:f"]}]}, "kernels[0].builder"),
    ):
        seed.write_text(json.dumps(body))
        refused(run_bounded("--manifest", path), str(seed), f": {field}: ")


@pytest.mark.parametrize(
    "body,problem",
    [
        ('{"recipe": ' * 100_000 + "{}" + "}" * 100_000, "nested too deep"),
        ('{"recipe": {"name": "' + "n" * 5000 + '"}}', ": recipe.name: is a text of 5000 characters"),
        ('{"engine": {"name": "e", "source": {"patches": [{"id": "p", "pr": 1' + "0" * 40 + "}]}}}", "pr: is a number"),
        ('{"engine": {"name": "e", "source": {"patches": [{"id": "p", "pr": NaN}]}}}', "NaN"),
        ('{"engine": {"name": "e", "source": {"patches": [{"id": "p", "pr": -Infinity}]}}}', "Infinity"),
        ('{"platform": 1' + "0" * 5000 + "}", "not JSON"),
        ('{"platform": 1e999}', ": platform: "),
        (b'{"platform": "\xff"}', "not JSON"),
    ],
    ids=["deep", "long-text", "huge-pr", "nan", "inf", "5000-digits", "float-overflow", "not-utf8"],
)
def test_deep_nesting_and_huge_or_non_finite_values_are_one_line(tmp_path, body, problem):
    path = tmp_path / "manifest.json"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    refused(run_bounded("--manifest", str(path)), str(path), problem)


def test_a_record_over_16_mib_is_refused_unread(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_bytes(b"{" + b" " * (16 << 20) + b"}")  # 16 MiB + 2 bytes of valid JSON
    refused(run_bounded("--manifest", str(path)), str(path), "larger than 16777216 bytes")
    path.write_bytes(b"{" + b" " * ((16 << 20) - 2) + b"}")  # exactly the limit: read
    out = run_bounded("--manifest", str(path))
    assert out.returncode == 0 and out.stdout.startswith("image: None"), out.stderr


@pytest.mark.parametrize("which", ["manifest.json", "profiles-checked.json", "seed/aot.json"])
def test_a_fifo_or_a_directory_is_refused_without_waiting(tmp_path, which):
    path = edited(tmp_path, lambda m: None)
    (tmp_path / "seed").mkdir()
    special = tmp_path / which
    special.unlink(missing_ok=True)
    os.mkfifo(special)
    refused(run_bounded("--manifest", path), str(special), "not a regular file")
    special.unlink()
    special.mkdir()
    refused(run_bounded("--manifest", path), str(special), "not a regular file")


HOSTILE_TEXTS = ["\x1b[2J\x1b[31mred", "x\nengine: forged 1.0", "\x9b31m", "a\u202eb", "\ud800", "tab\there", "\r\x07"]


@pytest.mark.parametrize("hostile", HOSTILE_TEXTS, ids=["csi", "newline", "c1", "bidi", "surrogate", "tab", "cr-bel"])
def test_no_control_or_format_character_of_a_manifest_is_printed_raw(tmp_path, hostile):
    def edit(m):
        m["recipe"]["name"] = hostile
        m["engine"]["source"]["patches"][0]["files"] = [hostile]
        m["stages"] = {hostile: {"on": hostile}}
        m["launch"]["profiles"] = [hostile]

    path = edited(tmp_path, edit)
    out = run_bounded("--manifest", path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    assert not any(line.startswith("engine: forged") for line in lines)
    raw = run_bounded("--json", "--manifest", path)
    assert raw.returncode == 0 and raw.stdout.isascii() and json.loads(raw.stdout)["recipe"] == hostile
    (tmp_path / "plain").mkdir()
    assert len(lines) == len(run_bounded("--manifest", edited(tmp_path / "plain", lambda m: None)).stdout.split("\n"))
    # and in a refusal: the field's name holds the text
    bad = run_bounded("--manifest", edited(tmp_path, _set(("stages",), {hostile: ["x"]})))
    refused(bad, "stages.")
    assert bad.stderr.isprintable() or bad.stderr[:-1].isprintable(), bad.stderr


def test_an_unknown_option_is_one_line(tmp_path):
    refused(run_bounded("--bogus"), "unrecognized arguments: --bogus")
