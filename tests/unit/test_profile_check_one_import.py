"""tools/profile_check.py parses every launch profile after one engine import (issue 30), driven with a
fake engine package: a module that counts its imports in a file and parses its argv with argparse, a
hook that stops it where the parser answers, launchers written as the image writes them (shell steps,
exported variables, `exec PYTHON -m MODULE ARGS`). The tool runs as the image runs it (a subprocess
of this interpreter, standard library only); the real engines are checked in the engine-image test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from servebuild import TOOLS_DIR

ENGINE = {
    "fakeengine/__init__.py": """
        import os
        with open(os.environ["FAKE_IMPORTS"], "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\\n")
    """,
    "fakeengine/launch.py": """
        import argparse
        import os

        def parse(argv):
            parser = argparse.ArgumentParser(prog="fakeengine")
            parser.add_argument("--model", required=True)
            parser.add_argument("--mode", choices=["fast", "exact"], default="fast")
            args = parser.parse_args(argv)
            if os.environ.get("FAKE_NEEDS_MODE") and args.mode != os.environ["FAKE_NEEDS_MODE"]:
                parser.error(f"--mode must be {os.environ['FAKE_NEEDS_MODE']} here")
            return args

        if __name__ == "__main__":
            import sys
            from fakeengine import server
            server.serve(parse(sys.argv[1:]))
    """,
    "fakeengine/server.py": """
        def serve(args):
            raise SystemExit("the server started")
    """,
}
HOOK = """
    def install(parsed):
        from fakeengine import server

        def serve(args):
            parsed(args, "fakeengine.launch.parse")

        server.serve = serve
"""


def _write(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _launcher(path: Path, exports: dict, command: str) -> None:
    lines = ["#!/bin/sh", "echo 'a shell step before the server' >&2"]
    lines += [f'[ -n "${{{k}+set}}" ] || {k}={v}; export {k}' for k, v in exports.items()]
    path.write_text("\n".join(lines + [command]) + "\n")
    path.chmod(0o755)


def run_check(
    tmp_path: Path, launchers: dict, engine: dict | None = None
) -> tuple[subprocess.CompletedProcess, list[str], Path]:
    _write(tmp_path / "pkgs", {**ENGINE, **(engine or {})})
    _write(tmp_path / "pkgs", {"fakeengine-0.1.dist-info/METADATA": "Name: fakeengine\nVersion: 0.1\n"})
    site = tmp_path / "site"
    site.mkdir()
    shutil.copyfile(TOOLS_DIR / "argcheck_site.py", site / "sitecustomize.py")
    _write(tmp_path, {"hook.py": HOOK})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, (exports, command) in launchers.items():
        _launcher(bin_dir / name, exports, command.format(python=sys.executable))
    imports = tmp_path / "imports.txt"
    imports.write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pkgs"), "FAKE_IMPORTS": str(imports)}
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOLS_DIR / "profile_check.py"),
            "--recipe",
            "r",
            "--engine",
            "fake",
            "--dist",
            "fakeengine",
            "--site",
            str(site),
            "--hook",
            str(tmp_path / "hook.py"),
            "--launchers",
            str(bin_dir),
            "--out",
            str(tmp_path / "record.json"),
            *launchers,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    return proc, imports.read_text().split(), tmp_path / "record.json"


def test_every_profile_is_parsed_after_one_import(tmp_path):
    proc, imports, record = run_check(
        tmp_path,
        {
            "a": ({"FAKE_A": "1"}, 'exec {python} -m fakeengine.launch --model m "$@"'),
            "b": ({"FAKE_B": "1"}, 'exec {python} -m fakeengine.launch --model m --mode exact "$@"'),
            "c": ({}, "exec {python} -m fakeengine.launch --model m --mode fast"),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "profile check: 3 of 3 profiles replayed after one import of fake" in proc.stdout
    assert len(imports) == 1, imports  # one import, by the checker (the captures import nothing)
    assert json.loads(record.read_text())["profiles"] == {n: {"parsed_by": "fakeengine.launch.parse"} for n in "abc"}


def test_a_rejection_names_its_profile_and_the_engines_words_and_the_others_still_pass(tmp_path):
    proc, imports, record = run_check(
        tmp_path,
        {
            "good": ({}, "exec {python} -m fakeengine.launch --model m"),
            "bad": ({}, "exec {python} -m fakeengine.launch --model m --mode sloppy"),
        },
    )
    assert proc.returncode == 1 and not record.exists()
    ours = [line for line in proc.stdout.splitlines() if line.startswith("servebuild: ")]
    assert ours == [
        "servebuild: recipe r, launch profile bad: fake 0.1 rejects the launcher's arguments: "
        "argument --mode: invalid choice: 'sloppy' (choose from 'fast', 'exact')"
    ], proc.stdout
    assert "profile good: accepted" in proc.stdout and len(imports) == 1


def test_each_profile_parses_under_its_own_environment(tmp_path):
    """A variable one profile sets is seen when it parses, and not by the other profile."""
    proc, _, _ = run_check(
        tmp_path,
        {
            "strict": ({"FAKE_NEEDS_MODE": "exact"}, "exec {python} -m fakeengine.launch --model m"),
            "plain": ({}, "exec {python} -m fakeengine.launch --model m"),
        },
    )
    ours = [line for line in proc.stdout.splitlines() if line.startswith("servebuild: ")]
    assert ours == [
        "servebuild: recipe r, launch profile strict: fake 0.1 rejects the launcher's arguments: "
        "--mode must be exact here"
    ], proc.stdout
    assert "profile plain: accepted" in proc.stdout


def test_a_launcher_that_starts_python_another_way_is_run_whole(tmp_path):
    """`python -X dev -m ...` is not replayed (its interpreter options would be lost): it runs as before."""
    proc, imports, record = run_check(
        tmp_path,
        {
            "replayed": ({}, "exec {python} -m fakeengine.launch --model m"),
            "whole": ({}, "exec {python} -X dev -m fakeengine.launch --model m"),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 2 profiles replayed after one import of fake (the others run whole)" in proc.stdout
    assert len(imports) == 2 and sorted(json.loads(record.read_text())["profiles"]) == ["replayed", "whole"]


def test_a_server_that_never_parses_is_a_finding_not_a_pass(tmp_path):
    proc, _, record = run_check(tmp_path, {"nothing": ({}, "exec {python} -m fakeengine")})
    assert proc.returncode == 1 and not record.exists()
    assert (
        "servebuild: recipe r, launch profile nothing: its launcher exited (rc 4) before fake's argument "
        "parser answered"
    ) in proc.stdout, proc.stdout


RUNTIME_WITHOUT_GET_EXEC = {"fakeengine/runtime.py": "def declare_load_time_override(name):\n    return name\n"}


def test_an_import_error_on_the_hooks_path_fails_every_profile_in_one_line_each(tmp_path):
    """A patched module the hook imports (here the server) asks the base for a name it lacks (issue 43):
    the check fails at build, naming the ImportError, instead of the server failing at serve time."""
    engine = {
        **RUNTIME_WITHOUT_GET_EXEC,
        "fakeengine/server.py": """
            from fakeengine.runtime import get_exec

            def serve(args):
                raise SystemExit(get_exec())
        """,
    }
    proc, _, record = run_check(tmp_path, {"a": ({}, "exec {python} -m fakeengine.launch --model m")}, engine)
    assert proc.returncode == 1 and not record.exists()
    ours = [line for line in proc.stdout.splitlines() if line.startswith("servebuild: ")]
    assert len(ours) == 1 and ours[0].startswith(
        "servebuild: recipe r, launch profile a: servebuild cannot hook fake 0.1's argument parser: "
        "ImportError: cannot import name 'get_exec' from 'fakeengine.runtime' ("
    ), proc.stdout


def test_an_import_error_in_the_launch_module_is_a_finding_with_its_words(tmp_path):
    """The module the launcher runs imports the missing name itself: the profile fails with the error."""
    launch = "from fakeengine.runtime import get_exec\n" + textwrap.dedent(ENGINE["fakeengine/launch.py"])
    proc, _, record = run_check(
        tmp_path,
        {"a": ({}, "exec {python} -m fakeengine.launch --model m")},
        {**RUNTIME_WITHOUT_GET_EXEC, "fakeengine/launch.py": launch},
    )
    assert proc.returncode == 1 and not record.exists()
    assert (
        "servebuild: recipe r, launch profile a: its launcher exited (rc 4) before fake's argument parser answered: "
        "ImportError: cannot import name 'get_exec' from 'fakeengine.runtime' ("
    ) in proc.stdout, proc.stdout
