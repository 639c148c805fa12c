"""What an image carries to start and check its servers: launcher scripts, the profile-check argv and files,
and the HEALTHCHECK of the default profile.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Optional

from servebuild.engines.profiles import launcher_script
from servebuild.recipe.schema import Recipe
from servebuild.render.payload import CACHE_TOOL, SEED
from servebuild.render.toolchain import VENV


# the HEALTHCHECK's probe: the image's own Python, no curl needed; $SERVEBUILD_HEALTH_URL moves it
HEALTH_PROBE = (
    "import os, sys, urllib.request; "
    "sys.exit(0 if urllib.request.urlopen(os.environ['SERVEBUILD_HEALTH_URL'], timeout=8).status == 200 else 1)"
)


def healthcheck(kind, profile) -> Optional[dict]:
    if kind is None or kind.health_path is None or profile is None:
        return None
    port = kind.profile_port(profile)
    return {
        "url": f"http://127.0.0.1:{port}{kind.health_path}",
        "start_period": kind.health_start_period,
        "cmd": json.dumps([f"{VENV}/bin/python", "-c", HEALTH_PROBE]),
    }


def argcheck_argv(recipe: Recipe, root: str, launchers: str, out: str) -> list[str]:
    """The profile check's command (tools/profile_check.py, its files under `root` in the image)."""
    name = recipe.engine.name
    return [
        "/opt/venv/bin/python",
        f"{root}/profile_check.py",
        "--recipe",
        recipe.name,
        "--engine",
        name,
        "--dist",
        name,
        "--site",
        f"{root}/site",
        "--hook",
        f"{root}/hook.py",
        "--launchers",
        launchers,
        "--out",
        out,
        *sorted(recipe.launch.profiles),
    ]


# a kind that compiles while serving: copy the image's compiled kernels into /cache where it lacks them
# (a mounted volume included) before the server starts; SERVEBUILD_NO_SEED=1 skips it
SEED_STEP = (
    f'if [ -z "${{SERVEBUILD_NO_SEED:-}}" ] && [ -d {SEED}/cache ]; then '
    f"{VENV}/bin/python {CACHE_TOOL} seed "
    '|| echo "servebuild: /cache not seeded; the server compiles what it lacks" >&2; fi'
)


def write_launchers(recipe: Recipe, directory: Path) -> None:
    """One executable per launch profile: what the image installs in /usr/local/bin."""
    kind = recipe.engine.kind if recipe.engine else None
    prelude = (SEED_STEP,) if kind is not None and kind.serve_time_jit else ()
    for name, profile in sorted(recipe.launch.profiles.items()):
        script = directory / name
        script.parent.mkdir(parents=True, exist_ok=True)
        listen = tuple(kind.listen_args(profile)) if kind else ()
        script.write_text(launcher_script(name, profile, listen, prelude=prelude))
        script.chmod(0o755)


_SHELL_OPS = {"&&", "||", ";", "|", "(", ")", "&", ";;", "!"}
_SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac", "{", "}"}
_RUN_FLAG = re.compile(r"--(?:mount|network|security)=\S+\s*")


def step_commands(dockerfile: str) -> set[str]:
    """The command words the RUN steps of a rendered Dockerfile run (the first word of each simple command,
    the command of a `-exec`, and the same inside an `sh -c`/`bash -c` script), as a shell would look them up
    on PATH: what a launcher in /usr/local/bin, ahead of /usr/bin on PATH, must not be named (the recipe's
    RESERVED_COMMANDS is held to cover them by a unit test over every committed recipe)."""
    found: set[str] = set()
    text = dockerfile.replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith("RUN "):
            _commands(_RUN_FLAG.sub("", line[4:]), found)
    return found


def _commands(script: str, found: set[str]) -> None:
    lex = shlex.shlex(script, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        words = list(lex)
    except ValueError:  # an unbalanced quote: not a script of ours
        return
    start, skip, prev = True, 0, None
    for i, word in enumerate(words):
        if skip:
            skip -= 1
        elif word in _SHELL_OPS:
            start = True
        elif start and word == "for":  # `for NAME in WORDS;`: no command until the `do`
            skip, start = next((j for j in range(i + 1, len(words)) if words[j] in {";", "do"}), len(words)) - i, True
        elif start and (word in _SHELL_KEYWORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word)):
            pass
        elif start:
            found.add(word)
            start = False
        elif prev == "-exec":
            found.add(word)
        elif prev == "-c" and i >= 2 and words[i - 2] in ("sh", "bash", "/bin/sh", "/bin/bash"):
            _commands(word, found)
        prev = word
