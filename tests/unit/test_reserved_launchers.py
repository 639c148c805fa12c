"""Reserved launcher names derived from what the image's steps run (issue 45, item 4): a launch profile
becomes /usr/local/bin/NAME, ahead of /usr/bin on PATH, so a profile named after a command a later RUN step
runs (`mkdir`, `find`: the launcher step's own) broke servebuild's own step with a message naming neither.
Every command word of every committed recipe's rendered RUN steps must be reserved, and servebuild's own
names (servebuild-bench, servebuild-info, servebuild-cache) are; such a profile is refused by validate in
one line naming it."""

from __future__ import annotations

import pytest
import yaml

from servebuild.errors import ServebuildError
from servebuild.recipe.grammar import NAME, RESERVED_COMMANDS, reserved_command
from servebuild.recipe.load import load_recipe
from servebuild.render.launchers import step_commands
from support import REPO_ROOT
from unit.test_recipe import REAL, render


@pytest.mark.parametrize("name", REAL)
def test_every_command_a_rendered_step_runs_is_a_reserved_name(name):
    for platform in ("linux/amd64", "linux/arm64"):
        run = {c for c in step_commands(render(name, platform)) if NAME.match(c)}
        assert run, name
        assert run <= RESERVED_COMMANDS, sorted(run - RESERVED_COMMANDS)


def test_step_commands_reads_chains_exec_and_nested_scripts():
    dockerfile = (
        "FROM x\nRUN --mount=type=bind,source=a,target=/b A=1 mkdir -p /x \\\n"
        " && for d in a b; do cp $d /x; done && find / -xdev -exec touch {} + | sort"
        " && sh -c 'chmod 755 /x; ln -s /x /y'\n"
    )
    assert step_commands(dockerfile) == {"mkdir", "cp", "find", "touch", "sort", "sh", "chmod", "ln"}


@pytest.mark.parametrize("profile", ["mkdir", "find", "chmod", "servebuild-info", "servebuild-cache", "servebuild-x"])
def test_a_profile_named_after_a_reserved_command_is_one_line(tmp_path, profile):
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    for rel in ("recipes/torch-cu130.yaml",):
        (root / rel).write_text((REPO_ROOT / rel).read_text())
    (root / "constraints").symlink_to(REPO_ROOT / "constraints")
    path = root / "recipes" / "torch-cu130.yaml"
    data = yaml.safe_load(path.read_text())
    launch = data.setdefault("launch", {})
    launch["profiles"] = {profile: {"module": "http.server", "args": ["8000"]}}
    launch.pop("default", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ServebuildError) as caught:
        load_recipe("torch-cu130", root)
    line = str(caught.value)
    assert "\n" not in line and profile in line and "shadow" in line and caught.value.exit_code == 2, line
    assert reserved_command(profile)


def test_an_ordinary_profile_name_is_not_reserved():
    assert not reserved_command("serve") and not reserved_command("dsv4-fp8")


@pytest.mark.parametrize("command", ["numactl", "cuobjdump", "ninja"])
def test_commands_the_image_runs_by_path_at_test_and_serve_time_are_reserved(command):
    """hostile-45: a launcher in /usr/local/bin is ahead of /usr/bin on PATH for everything the image runs, not
    only its RUN steps: the smoke suite runs `numactl --show` and `cuobjdump --list-elf` by name (tests/image),
    vLLM's NUMA binding runs numactl, and torch's and the engines' JIT compiles run ninja. A profile of that
    name validated and rendered (exit 0) and would run the server in their place."""
    assert reserved_command(command)
