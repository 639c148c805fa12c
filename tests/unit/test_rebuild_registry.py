"""rebuild --check against a registry served over HTTP by the test (tests/layer_registry.py: a fake
registry in pure Python, since no real registry trickles, floods or lies on demand), read through the real
RegistryClient: the bounds on a layer (inflated bytes, the registry deadline per request, the total
deadline of the command's registry reads), what is refused before any layer blob is asked for, and
the behaviours of issue 31 point 10 that no test held. The engine's part (the build) is replaced by
`fake_build`, which returns the config the test chooses; nothing here needs docker.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from typing import Optional

import pytest

from layer_registry import OCI_INDEX, RECIPE, REPO, LayerRegistry, gzip_bomb, labels, layer, sha
from servebuild.errors import InputError, IntegrityError
from servebuild.registry.client import RegistryClient, RegistryError, RegistryTimeout
from servebuild.release import rebuild as rebuilding
from support import REPO_ROOT


@pytest.fixture
def registry():
    started = []

    def start(*args, **kwargs) -> LayerRegistry:
        started.append(LayerRegistry(*args, **kwargs))
        return started[-1]

    yield start
    for r in started:
        r.stop()


class Built:
    """What the faked build returns: the rebuilt image's config, and its id (the config's digest)."""

    def __init__(self):
        self.config: Optional[dict] = None
        self.calls = 0


@pytest.fixture
def fake_build(monkeypatch):
    """The engine's part of rebuild --check replaced: `rebuild` returns the test's config (and counts
    its calls); `_saved_layer` finds no rebuilt layer tar (the paths are not listed)."""
    built = Built()

    def rebuild(*args, **kwargs):
        built.calls += 1
        if built.config is None:
            raise AssertionError("rebuild --check went on to the build")
        data = json.dumps(built.config, sort_keys=True).encode()
        return sha(data), built.config

    monkeypatch.setattr(rebuilding, "rebuild", rebuild)
    monkeypatch.setattr(rebuilding, "_saved_layer", lambda *args: None)
    return built


def check(reg: LayerRegistry):
    client = RegistryClient(reg.address)
    return rebuilding.check(REPO_ROOT, client, REPO, "v1", "linux/amd64", docker=None, echo=False)


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == 2, message
    return message


# -- (issue 31, point 4) the inflated bytes of a layer are bounded ------------------------------------


def test_the_inflated_bound_is_a_hundred_times_the_blob_with_a_64_mib_floor():
    from servebuild.registry import limits

    assert rebuilding.inflated_limit(1 << 10) == 64 << 20  # the floor
    assert rebuilding.inflated_limit(10 << 20) == 1000 << 20  # 100 times the blob
    assert rebuilding.inflated_limit(limits.LAYER_BYTES) == limits.IMAGE_INFLATED_BYTES  # at most this


def test_uncompressing_a_layer_stops_writing_at_its_limit(tmp_path):
    blob, _ = gzip_bomb(8 << 20)
    (tmp_path / "bomb.blob").write_bytes(blob)
    with pytest.raises(IntegrityError, match=r"layer 0 \(sha256:\w+\) inflates past 1048576 bytes") as err:
        rebuilding._uncompressed(tmp_path / "bomb.blob", tmp_path / "bomb.tar", 1 << 20, f"layer 0 ({sha(blob)})")
    one_line(err)
    assert (tmp_path / "bomb.tar").stat().st_size <= 1 << 20


def test_a_layer_that_inflates_past_its_bound_is_refused_naming_its_digest(registry, fake_build):
    """A gzip bomb served as a layer (about 100 KiB that inflate to 100 MiB, with its true diff_id):
    it was inflated whole to the temp dir (a ~1 MiB one filled a 300 MiB tmpfs). Now the inflation stops
    at the bound (64 MiB here: the floor), one line naming the layer's digest, nothing built."""
    bomb = gzip_bomb(100 << 20)
    reg = registry([bomb], labels())
    with pytest.raises(IntegrityError) as err:
        check(reg)
    message = one_line(err)
    assert f"layer 0 ({sha(bomb[0])})" in message and f"inflates past {64 << 20} bytes" in message, message
    assert fake_build.calls == 0


def test_many_layers_each_within_the_bound_are_bounded_together(registry, fake_build):
    """Three bombs of 40 MiB inflated each (under the 64 MiB floor alone): the temp dir would hold them
    all (a manifest may list thousands). The layers read so far share one bound, so layer 1 passes it."""
    bombs = [gzip_bomb((40 << 20) + i) for i in range(3)]
    reg = registry(bombs, labels())
    with pytest.raises(IntegrityError) as err:
        check(reg)
    message = one_line(err)
    assert f"layer 1 ({sha(bombs[1][0])}) inflates past" in message, message
    assert len(reg.layer_gets()) == 2 and fake_build.calls == 0


# -- (issue 31, point 3) every request under the registry deadline; a total for the command -----------


def test_a_layer_trickled_a_byte_at_a_time_ends_at_the_registry_deadline(registry, fake_build, monkeypatch):
    """The layer read had its own 3,600 s (limits.LAYER_S) outside any operation, whatever
    SERVEBUILD_REGISTRY_DEADLINE said; now each layer read is one operation under it."""
    monkeypatch.setenv("SERVEBUILD_REGISTRY_DEADLINE", "1")
    blob = layer({"etc/x": b"x"})
    reg = registry([blob], labels(), trickle=(0,), trickle_s=0.1)  # ~12 s for the whole blob
    start = time.monotonic()
    with pytest.raises(RegistryTimeout) as err:
        check(reg)
    seconds = time.monotonic() - start
    message = one_line(err)
    assert seconds < 4, (seconds, message)
    assert f"layer 0 ({sha(blob[0])})" in message and "did not finish within 1 s" in message, message
    assert fake_build.calls == 0


def test_the_registry_reads_of_one_rebuild_end_at_its_total_deadline(registry, fake_build, monkeypatch):
    """Each layer within SERVEBUILD_REGISTRY_DEADLINE, but many of them: the command's registry reads
    together end at SERVEBUILD_REBUILD_DEADLINE."""
    monkeypatch.setenv("SERVEBUILD_REGISTRY_DEADLINE", "30")
    monkeypatch.setenv("SERVEBUILD_REBUILD_DEADLINE", "2")
    layers = [layer({f"etc/{i}": b"x" * i}) for i in range(4)]
    reg = registry(layers, labels(), trickle=(0, 1, 2, 3), trickle_s=0.01)  # about 1.3 s each
    start = time.monotonic()
    with pytest.raises(RegistryTimeout) as err:
        check(reg)
    seconds = time.monotonic() - start
    message = one_line(err)
    assert seconds < 3.5, (seconds, message)
    assert "SERVEBUILD_REBUILD_DEADLINE" in message and "did not finish within 2 s" in message, message
    assert 1 <= len(reg.layer_gets()) < 4 and fake_build.calls == 0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "x", "90000"])
def test_a_bad_total_deadline_is_refused_before_the_registry_is_asked(value, monkeypatch):
    from servebuild.cli import release as cli_release

    monkeypatch.setenv("SERVEBUILD_REBUILD_DEADLINE", value)
    with pytest.raises(InputError) as err:  # port 1: nothing listens, and nothing may be asked
        cli_release.rebuild_check(REPO_ROOT, "127.0.0.1:1/servebuild/toy:v1", "linux/amd64")
    assert err.value.field == "SERVEBUILD_REBUILD_DEADLINE", str(err.value)
    one_line(err)


# -- (issue 31, point 6) labels and the plan are checked before any layer blob is asked for -----------


@pytest.mark.parametrize(
    "recipe, variant",
    [("recipes/hostile-base.yaml", None), ("/etc/hostile.yaml", None), ("../x", None), (RECIPE, "../x")],
)
def test_a_hostile_label_fails_before_a_single_layer_blob_get(registry, fake_build, recipe, variant):
    reg = registry([layer({"etc/x": b"x"})], labels(recipe, variant))
    with pytest.raises(InputError, match="label .* is not a (recipe|variant) name") as err:
        check(reg)
    one_line(err)
    assert f"/v2/{REPO}/blobs/{sha(reg.config)}" in reg.gets  # the labels are in the config, read first
    assert reg.layer_gets() == [] and fake_build.calls == 0


@pytest.mark.parametrize(
    "recipe, variant, words",
    [
        ("no-such-recipe", None, "unknown recipe 'no-such-recipe'"),
        (RECIPE, "no-such-variant", "unknown variant 'no-such-variant'"),
    ],
)
def test_a_label_naming_what_this_checkout_cannot_build_fails_before_a_layer_get(
    registry, fake_build, recipe, variant, words
):
    """A name by the grammar, but no recipe (or variant) of this checkout: every layer was downloaded
    (gigabytes) before the plan was made and refused it; now the plan is made first."""
    reg = registry([layer({"etc/x": b"x"})], labels(recipe, variant))
    with pytest.raises(InputError) as err:
        check(reg)
    message = one_line(err)
    assert words in message and "io.servebuild.recipe" in message, message
    assert reg.layer_gets() == [] and fake_build.calls == 0


# -- (issue 31, point 10) behaviours no test held -----------------------------------------------------


def test_two_images_whose_configs_alone_differ_are_called_different(registry, fake_build):
    reg = registry([layer({"etc/x": b"x"})], labels())
    theirs = json.loads(reg.config)
    fake_build.config = theirs  # the control: the same config, the same id
    report = check(reg)
    assert report.identical and report.rebuilt_id == sha(reg.config), report.difference
    fake_build.config = dict(theirs, config={"Labels": {**labels(), "org.example.extra": "1"}})
    report = check(reg)
    assert not report.identical
    assert report.difference == ["every layer is the same; the config differs: config.Labels"]


@pytest.mark.parametrize("differing", [(0, 1), (1, 2), (2,)])
def test_only_the_first_differing_layer_is_named(registry, fake_build, differing):
    layers = [layer({f"etc/{i}": b"x" * (i + 1)}) for i in range(3)]
    reg = registry(layers, labels())
    theirs = json.loads(reg.config)
    ours = [sha(b"other %d" % i) if i in differing else d for i, (_, d) in enumerate(layers)]
    fake_build.config = dict(theirs, rootfs={"type": "layers", "diff_ids": ours})
    report = check(reg)
    named = [line for line in report.difference if line.startswith("layer ")]
    assert named == [
        f"layer {differing[0]} (no history) differs: registry {layers[differing[0]][1]}, rebuild {ours[differing[0]]}"
    ], report.difference


def test_an_index_with_two_entries_for_the_platform_is_refused_in_one_line(registry, fake_build):
    reg = registry([layer({"etc/x": b"x"})], labels(), entries=2)
    with pytest.raises(InputError, match="its index lists 2 images for linux/amd64") as err:
        check(reg)
    assert err.value.field == "--platform"
    one_line(err)
    assert not any("/manifests/sha256:" in p for p in reg.gets)  # neither entry is followed
    assert reg.layer_gets() == [] and fake_build.calls == 0


def test_a_layer_matching_its_blob_digest_but_not_its_diff_id_is_an_integrity_error_before_any_build(
    registry, fake_build
):
    """The blob hashes to its descriptor; its uncompressed bytes are not the config's diff_id (an image
    not self-consistent). It was a 'difference' found after the whole --no-cache build; now it is an
    IntegrityError before the build."""
    blob = layer({"etc/x": b"x"})
    other = sha(b"not this layer")
    reg = registry([blob], labels(), diff_ids=[other])
    with pytest.raises(IntegrityError) as err:
        check(reg)
    message = one_line(err)
    assert f"layer 0 ({sha(blob[0])})" in message and blob[1] in message and other in message, message
    assert fake_build.calls == 0


@pytest.mark.parametrize("diff_ids", [1, 3], ids=["fewer", "more"])
def test_a_config_naming_other_than_one_diff_id_per_layer_is_refused_before_a_layer_get(registry, fake_build, diff_ids):
    """The manifest's layers and the config's rootfs.diff_ids are one per layer: a registry image whose two
    lists differ in length is one RegistryError line before any layer blob is read (an IndexError, or a
    layer compared with nothing, without the check)."""
    layers = [layer({"etc/a": b"a"}), layer({"etc/b": b"b"})]
    ids = [d for _, d in layers] + [sha(b"a third")]
    reg = registry(layers, labels(), diff_ids=ids[:diff_ids])
    with pytest.raises(RegistryError, match=f"the manifest names 2 layers, the config {diff_ids}") as err:
        check(reg)
    assert "\n" not in str(err.value)
    assert reg.layer_gets() == [] and fake_build.calls == 0


class SavedDocker:
    """A docker whose `docker save` stream holds the given members (name -> bytes)."""

    name = "fake-engine"

    def __init__(self, members: dict[str, bytes]):
        self.members = members

    def saved(self, image_id):
        from contextlib import contextmanager

        @contextmanager
        def stream():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for name, body in self.members.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
            buf.seek(0)
            with tarfile.open(fileobj=buf, mode="r|") as tar:
                yield tar

        return stream()


@pytest.mark.parametrize("extra, refused", [(0, False), (1, True)])
def test_a_docker_save_config_is_read_within_its_size_limit(extra, refused):
    """`docker save` of the rebuilt image: its config is read within imageconfig.CONFIG_LIMIT (8 MiB;
    exactly at the limit is read)."""
    from servebuild.build.imageconfig import CONFIG_LIMIT, read_config
    from servebuild.errors import DockerError

    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config += b" " * (CONFIG_LIMIT + extra - len(config))
    docker = SavedDocker({"abc.json": config, "manifest.json": json.dumps([{"Config": "abc.json"}]).encode()})
    if not refused:
        assert read_config(docker, "sha256:abc") == {"rootfs": {"type": "layers", "diff_ids": []}}
        return
    with pytest.raises(DockerError, match=f"holds abc.json of {CONFIG_LIMIT + 1} bytes, over {CONFIG_LIMIT}") as err:
        read_config(docker, "sha256:abc")
    one_line(err)


def _index(entries) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()


@pytest.mark.parametrize(
    "make, kind, words",
    [
        (lambda reg: _index(7), RegistryError, "index: manifests is a int, not a list"),
        (
            lambda reg: _index([{"digest": sha(reg.image), "platform": "linux/amd64"}]),
            InputError,
            "holds no linux/amd64 image (it lists None/None)",
        ),
        (
            lambda reg: _index([{"digest": 7, "platform": {"os": "linux", "architecture": "amd64"}}]),
            RegistryError,
            "its linux/amd64 entry names 7, not a sha256 digest",
        ),
        (
            lambda reg: reg.image.replace(b'"config": {', b'"config": "x", "c": {'),
            RegistryError,
            "its config is not a descriptor",
        ),
        (
            lambda reg: reg.image.replace(b'"layers": [', b'"layers": ["x", '),
            RegistryError,
            "its layers not a list of descriptors",
        ),
    ],
)
def test_an_index_or_manifest_of_the_wrong_shape_is_one_line(registry, fake_build, make, kind, words):
    """A platform that is a string, an entry digest that is a number, a config descriptor that is a
    string: AttributeError tracebacks before (`.get` on a str, `.startswith` on an int); manifests
    that is a number: a TypeError. Now each is one line, exit 2, before any layer is read."""
    reg = registry([layer({"etc/x": b"x"})], labels())
    reg.tagged = make(reg)
    with pytest.raises(kind) as err:
        check(reg)
    message = one_line(err)
    assert words in message, message
    assert reg.layer_gets() == [] and fake_build.calls == 0
