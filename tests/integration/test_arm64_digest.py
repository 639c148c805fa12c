"""The arm64 side in CI (issue 47): one arm64 image built from scratch and compared with its committed id.

The GH200 is aarch64. The cheapest real recipe whose arm64 build proves the arm64 path end to end is the
torch pair (`torch-cu130-bookworm`): its base is bootstrapped here from the lock's arm64 Debian packages
(mmdebstrap's second stage under QEMU), and every RUN step goes through the settle wrapper, so the id
it must reach (recipes/torch-cu130-bookworm.ids.yaml, `linux/arm64`, recorded where two engines agreed)
is reached only if the arm64 bootstrap, the wheels' installation and the settle all give the same
bytes on this machine. Under QEMU on an x86_64 host: about 11 minutes on 2 cores (docs/benchmarks.md).
Marked engine_image: it runs on the engine-image run's engine, after the two engine images, beside the
rest of the suite (scripts/run_tests.py).
"""

from __future__ import annotations

import time

import pytest

from integration.conftest import build_fixture, drop_now
from servebuild.build import committed
from servebuild.recipe.load import load_recipe
from support import RECIPE_CHECKS, REPO_ROOT

RECIPE = "torch-cu130-bookworm"


@pytest.mark.engine_image
def test_the_torch_pair_for_arm64_is_its_committed_id(engine, arm64_base, tmp_path_factory):
    loaded = load_recipe(RECIPE, REPO_ROOT)
    recorded = committed.load_committed(loaded)["linux/arm64"]
    base_id = engine.image_id(arm64_base)
    assert base_id == recorded.base, (
        f"the arm64 base bootstrapped from the lock is {base_id}, the committed {recorded.base}"
    )
    tag = f"servebuild-test/{RECIPE}:arm64"
    try:
        start = time.monotonic()
        result, _ = build_fixture(
            REPO_ROOT,
            engine,
            "linux/arm64",
            tag,
            tmp_path_factory.mktemp("arm64-cache"),
            recipe=RECIPE,
            no_cache=True,
            build_root=tmp_path_factory.mktemp("arm64-build"),
        )
        seconds = time.monotonic() - start
        assert engine.image_inspect(tag)["Architecture"] == "arm64"
        layers, steps = committed.layers_of(engine, result.image_id, "linux/arm64")
        same, line = committed.verdict(loaded, "linux/arm64", result.image_id, layers, steps, None)
        assert same, line
        RECIPE_CHECKS.append(f"{RECIPE} linux/arm64 (QEMU, --no-cache, {seconds:.0f} s): {line}")
        print(f"\n{RECIPE} linux/arm64 built under QEMU in {seconds:.0f} s: {line}")
    finally:  # the image and the layer records it made go now, before the engine images' disk peak
        drop_now([tag])
