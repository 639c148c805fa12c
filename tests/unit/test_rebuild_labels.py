"""rebuild --check: the published image's labels name what is built, so they are checked by the
recipe-name grammar (the one --recipe names follow) before any layer is fetched (issue 31, point 6).
The registry here is FakeRegistryClient, a fake in memory: it serves one image and records each read."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from contextlib import contextmanager

import pytest

from servebuild.errors import InputError
from servebuild.registry.client import DOCKER_MANIFEST, RegistryError
from servebuild.release import rebuild as rebuilding
from support import REPO_ROOT


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_bytes() -> tuple[bytes, str]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("etc/x")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return gzip.compress(buf.getvalue(), mtime=0), sha(buf.getvalue())


class FakeRegistryClient:
    """A fake registry client (no registry, no network): one linux/amd64 image under TAG whose
    config carries `labels`; `fetched` lists every layer blob read."""

    registry = "registry.example:5000"

    def __init__(self, labels: dict, rootfs=None):
        self.blob, diff_id = layer_bytes()
        rootfs = {"type": "layers", "diff_ids": [diff_id]} if rootfs is None else rootfs
        self.config = json.dumps(
            {"os": "linux", "architecture": "amd64", "config": {"Labels": labels}, "rootfs": rootfs}
        ).encode()
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": DOCKER_MANIFEST,
                "config": {"digest": sha(self.config), "size": len(self.config)},
                "layers": [{"digest": sha(self.blob), "size": len(self.blob)}],
            }
        ).encode()
        self.fetched: list[str] = []

    @contextmanager
    def operation(self, what: str):
        yield

    def get_manifest(self, repo, reference):
        return self.manifest, sha(self.manifest), DOCKER_MANIFEST

    def get_blob(self, repo, digest, limit=None):
        assert digest == sha(self.config)
        return self.config

    def get_blob_into(self, repo, digest, sink, limit, seconds):
        self.fetched.append(digest)
        sink.write(self.blob)


def labels(recipe, variant=None) -> dict:
    out = {
        "io.servebuild.manifest.sha256": "0" * 64,
        "io.servebuild.recipe": recipe,
        "io.servebuild.platform": "linux/amd64",
    }
    if variant is not None:
        out["io.servebuild.variant"] = variant
    return out


@pytest.fixture
def no_build(monkeypatch):
    """What rebuild would build, recorded instead of built (no engine here)."""
    built = []

    def record(plan, image, docker):
        built.append((image.label("recipe"), image.label("variant")))
        raise AssertionError(f"rebuild built {image.label('recipe')!r} variant {image.label('variant')!r}")

    monkeypatch.setattr(rebuilding, "rebuild", record)
    return built


@pytest.mark.parametrize(
    "recipe, variant, field",
    [
        ("recipes/hostile-base.yaml", None, "io.servebuild.recipe"),  # a path in the checkout: it was loaded and built
        ("/etc/servebuild/hostile.yaml", None, "io.servebuild.recipe"),  # absolute: refused only by accident before
        ("../torch-cu130", None, "io.servebuild.recipe"),
        ("torch-cu130.yaml", None, "io.servebuild.recipe"),
        ("Torch", None, "io.servebuild.recipe"),
        ("torch-cu130\nx", None, "io.servebuild.recipe"),
        ("t" * 64, None, "io.servebuild.recipe"),
        ("sglang-native-fp8", "../x", "io.servebuild.variant"),
        ("sglang-native-fp8", "fixed prefill", "io.servebuild.variant"),
    ],
)
def test_a_label_that_is_not_a_name_is_refused_before_any_layer_is_fetched(no_build, recipe, variant, field):
    client = FakeRegistryClient(labels(recipe, variant))
    with pytest.raises(
        InputError, match=f"{field} label .* is not a recipe name|{field} label .* is not a variant name"
    ) as err:
        rebuilding.check(REPO_ROOT, client, "servebuild/toy", "v1", "linux/amd64", docker=None, echo=False)
    assert err.value.field == "--check" and "\n" not in str(err.value)
    assert client.fetched == [] and no_build == []


def test_a_recipe_name_label_goes_on_to_the_layers_and_the_build(no_build):
    """The control case: a name passes, its layers are read, then the recipe is built."""
    client = FakeRegistryClient(labels("torch-cu130-bookworm"))
    with pytest.raises(AssertionError, match="rebuild built 'torch-cu130-bookworm'"):
        rebuilding.check(REPO_ROOT, client, "servebuild/toy", "v1", "linux/amd64", docker=None, echo=False)
    assert client.fetched == [sha(client.blob)] and no_build == [("torch-cu130-bookworm", "")]


@pytest.mark.parametrize(
    "rootfs, field, words",
    [
        ("layers", "rootfs", "is a str, not a mapping"),  # a string: `.get` on it was an AttributeError traceback
        (["sha256:" + "0" * 64], "rootfs", "is a list, not a mapping"),
        ({"type": "layers", "diff_ids": "sha256:" + "0" * 64}, "rootfs.diff_ids", "is a str, not a list"),
        ({"type": "layers", "diff_ids": [7]}, "rootfs.diff_ids[0]", "7 is not a sha256:<64 hex> digest"),
        (
            {"type": "layers", "diff_ids": ["sha256:x"]},
            "rootfs.diff_ids[0]",
            "'sha256:x' is not a sha256:<64 hex> digest",
        ),
    ],
)
def test_a_config_whose_rootfs_is_not_a_mapping_of_digests_is_one_line(no_build, rootfs, field, words):
    """A fake registry serves a config whose rootfs is malformed: rebuild --check said it with an
    AttributeError traceback (issue 31, trust); now it is one RegistryError line naming the config and
    the field (exit 2 at the CLI), before any layer is fetched or anything is built."""
    client = FakeRegistryClient(labels("torch-cu130-bookworm"), rootfs=rootfs)
    with pytest.raises(RegistryError) as err:
        rebuilding.check(REPO_ROOT, client, "servebuild/toy", "v1", "linux/amd64", docker=None, echo=False)
    message = str(err.value)
    assert err.value.field == field and err.value.exit_code == 2 and "\n" not in message, message
    assert message.startswith(f"registry.example:5000/servebuild/toy:v1 linux/amd64 image config: {field}: "), message
    assert words in message, message
    assert client.fetched == [] and no_build == []


def test_an_image_without_layers_or_diff_ids_goes_on_to_the_build(no_build):
    """No layers and a rootfs without diff_ids agree (0 and 0): the layer reads indexed
    config["rootfs"]["diff_ids"] and raised KeyError; now the checked (empty) list is used."""
    client = FakeRegistryClient(labels("torch-cu130-bookworm"), rootfs={"type": "layers"})
    manifest = json.loads(client.manifest)
    manifest["layers"] = []
    client.manifest = json.dumps(manifest).encode()
    with pytest.raises(AssertionError, match="rebuild built 'torch-cu130-bookworm'"):
        rebuilding.check(REPO_ROOT, client, "servebuild/toy", "v1", "linux/amd64", docker=None, echo=False)
    assert client.fetched == [] and no_build == [("torch-cu130-bookworm", "")]


@pytest.mark.parametrize("container", ["x", {"Labels": ["io.servebuild.platform=linux/amd64"]}])
def test_a_config_whose_labels_are_not_a_mapping_is_one_line(no_build, container):
    """config.config (or its Labels) not a mapping: Published.label raised AttributeError; now the
    image has no labels, which is the one-line --platform refusal, before any layer is fetched."""
    client = FakeRegistryClient(labels("torch-cu130-bookworm"))
    config = json.loads(client.config)
    config["config"] = container
    client.config = json.dumps(config).encode()
    manifest = json.loads(client.manifest)
    manifest["config"]["digest"] = sha(client.config)
    client.manifest = json.dumps(manifest).encode()
    with pytest.raises(InputError, match="its linux/amd64 image is labelled no platform") as err:
        rebuilding.check(REPO_ROOT, client, "servebuild/toy", "v1", "linux/amd64", docker=None, echo=False)
    assert err.value.field == "--platform" and "\n" not in str(err.value)
    assert client.fetched == [] and no_build == []
