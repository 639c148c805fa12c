"""servebuild_info.py (runs in the image): what the image is, read from what its build left in it, and one
line, exit 2, when there is no manifest to read. The run in a real image is tests/image/test_smoke.py's
test_the_image_says_what_it_is."""

from __future__ import annotations

import json
import subprocess
import sys

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
