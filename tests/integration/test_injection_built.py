"""Hostile values the validators accept (they are legal launch arguments, environment values and
descriptions) are built into a real image: no payload runs while building or launching, the
Dockerfile has the unedited recipe's instructions, and the installed launcher hands the server
exactly the declared argv and environment (run inside the image, with a stand-in interpreter)."""

from __future__ import annotations

import json
import subprocess

from integration.conftest import build_fixture
from servebuild.plan.make import BuildOptions, make_plan
from servebuild.render.context import render_dockerfile
from support import fixture_recipe, make_project
from unit.test_fuzz_fields import instructions

ARGS = ["--port", "30000", "$(touch /pwned-args)", "`touch /pwned-bt`; touch /pwned-semi", "a'b\"c", "--x=$HOME"]
ENV = {"TOY_MODE": "$(touch /pwned-env) `touch /pwned-env2` ; y", "TOY_QUOTE": 'it\'s "quoted"'}
DESCRIPTION = "quotes ' \" and $(touch /pwned-desc) and `id`"
SHOW = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
    "'env': {k: os.environ.get(k) for k in ('TOY_MODE', 'TOY_QUOTE')}}))"
)


def render(root):
    plan = make_plan(root, "toy", BuildOptions(platform="linux/amd64", dry_run=True, fetching=False))
    return render_dockerfile(plan.loaded.recipe, plan.loaded.sha256, plan.platform, plan.bases, root)


def test_accepted_hostile_values_are_inert_in_a_built_image(engine, base_images, upstream, tmp_path):
    plain = make_project(tmp_path / "plain", upstream, fixture_recipe(upstream, platforms=["linux/amd64"]))
    recipe = fixture_recipe(upstream, platforms=["linux/amd64"], description=DESCRIPTION)
    recipe["launch"]["profiles"]["toy-serve"].update(args=ARGS, env=ENV, description=DESCRIPTION)
    root = make_project(tmp_path / "hostile", upstream, recipe)
    assert instructions(render(root)) == instructions(render(plain))

    tag = "servebuild-test/toy-inert:amd64"
    result, _ = build_fixture(root, engine, "linux/amd64", tag, tmp_path / "cache")
    script = (
        "printf '%s' \"$SHOW\" > /tmp/show.py; "
        "sed 's#^exec /opt/venv/bin/python #exec /opt/venv/bin/python /tmp/show.py #' "
        "/usr/local/bin/toy-serve > /tmp/launcher; sh /tmp/launcher EXTRA; ls / | grep -c pwned || true"
    )
    proc = subprocess.run(
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-e",
            f"SHOW={SHOW}",
            "--entrypoint",
            "/bin/sh",
            result.tag,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    shown, pwned = proc.stdout.strip().splitlines()
    seen = json.loads(shown)
    assert seen["argv"] == ["-m", "toyserve", *ARGS, "EXTRA"]
    assert seen["env"] == ENV
    assert pwned == "0", "a payload ran while building or launching the image"
    subprocess.run(["/usr/bin/docker", "image", "rm", "-f", tag], capture_output=True)
