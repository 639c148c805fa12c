"""rebuild --check's parts that need no engine (the whole command runs against a real registry and
engine in tests/integration/test_rebuild.py): the streamed layer read against the hostile registry,
the layer comparison, the config comparison."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from hostile_registry import REPO, HostileRegistry, sha
from servebuild.registry.client import RegistryClient, RegistryError
from servebuild.release.rebuild import _uncompressed, config_differences, paths_differing


def layer(tmp_path, name: str, files: dict[str, bytes], mtime: int = 946684800):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, body in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(body), mtime, 0o644
            tar.addfile(info, io.BytesIO(body))
    path = tmp_path / name
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize(
    "mode, words",
    [
        ("ok", None),
        ("wrong-blob", "with content hashing to"),
        ("huge-blob", "is 629145600 bytes (Content-Length); the limit is 1048576"),
        ("huge-blob-undeclared", "larger than its limit of 1048576 bytes"),
    ],
)
def test_a_layer_blob_is_streamed_to_disk_within_its_limit_and_checked(tmp_path, mode, words):
    registry = HostileRegistry(mode)
    config = HostileRegistry("ok").t["config"]
    try:
        client = RegistryClient(registry.address)
        with (tmp_path / "blob").open("w+b") as sink:
            if words is None:
                client.get_blob_into(REPO, sha(config), sink, 1 << 20, 10)
                assert (tmp_path / "blob").read_bytes() == config
            else:
                with pytest.raises(RegistryError, match=words.replace("(", r"\(").replace(")", r"\)")):
                    client.get_blob_into(REPO, sha(config), sink, 1 << 20, 10)
        assert client.blob_sink is None and client.blob_limit == 8 << 20  # the client is as it was
    finally:
        registry.stop()


def test_the_differing_paths_are_named_with_what_differs(tmp_path):
    a = layer(tmp_path, "a.tar", {"usr/bin/x": b"one", "etc/y": b"same", "etc/gone": b"z"})
    b = layer(tmp_path, "b.tar", {"usr/bin/x": b"two", "etc/y": b"same", "etc/new": b"z"})
    lines = paths_differing(a, b)
    assert lines[0] == "  etc/gone: only in the registry"
    assert lines[1] == "  etc/new: only in the rebuild"
    assert lines[2].startswith("  usr/bin/x: content ") and len(lines) == 3
    c = layer(tmp_path, "c.tar", {"usr/bin/x": b"one", "etc/y": b"same", "etc/gone": b"z"}, mtime=1)
    assert all(": mtime 946684800 -> 1" in line for line in paths_differing(a, c))
    assert "not a readable tar" in paths_differing(tmp_path / "missing.tar", b)[0]


def test_many_differing_paths_are_cut_after_twenty(tmp_path):
    a = layer(tmp_path, "a.tar", {f"f{i:03}": b"a" for i in range(50)})
    b = layer(tmp_path, "b.tar", {f"f{i:03}": b"b" for i in range(50)})
    lines = paths_differing(a, b)
    assert len(lines) == 21 and lines[-1] == "  ... and 30 more paths"


def test_a_gzipped_layer_is_uncompressed_and_hashed(tmp_path):
    plain = layer(tmp_path, "a.tar", {"x": b"1"})
    blob = tmp_path / "a.blob"
    blob.write_bytes(gzip.compress(plain.read_bytes()))
    assert (
        _uncompressed(blob, tmp_path / "out.tar", 1 << 20, "layer") == "sha256:" + sha(plain.read_bytes()).split(":")[1]
    )
    assert (tmp_path / "out.tar").read_bytes() == plain.read_bytes()
    blob.write_bytes(b"\x1f\x8b" + b"garbage")
    assert _uncompressed(blob, tmp_path / "out.tar", 1 << 20, "layer") == ""


def test_the_config_fields_that_differ_are_named():
    theirs = {"created": "a", "config": {"Labels": {"x": "1"}, "Env": ["A=1"]}, "rootfs": {"diff_ids": ["d"]}}
    ours = {"created": "b", "config": {"Labels": {"x": "2"}, "Env": ["A=1"]}, "rootfs": {"diff_ids": ["d"]}}
    assert config_differences(theirs, ours) == ["config.Labels", "created"]


def test_a_layer_is_named_by_its_step_without_the_settle_preamble():
    from servebuild.release.rebuild import Published
    from servebuild.render.settle import INDENT, MOUNTS, SETTLE, START, settle

    # BuildKit's history holds a RUN's command without its --mount flags
    run = (
        settle("RUN cp -p /mnt/launchers/* /usr/local/bin/\n")
        .removeprefix(f"RUN {MOUNTS}{INDENT}")
        .replace(" \\\n", " ")
    )
    inline = f"{START} && ( cp -a /mnt/src /opt/x ) && {SETTLE}"  # an image built when the wrapper was inline
    image = Published(
        "r",
        "linux/amd64",
        "d",
        "c",
        {
            "history": [
                {"created_by": "ADD rootfs.tar / # buildkit"},
                {"created_by": "ENV A=1", "empty_layer": True},
                {"created_by": "RUN /bin/bash -o pipefail -c " + run},
                {"created_by": "RUN /bin/bash -o pipefail -c " + inline},
            ]
        },
        [],
    )
    assert [image.created_by(i) for i in range(4)] == [
        "ADD rootfs.tar / # buildkit",
        "RUN cp -p /mnt/launchers/* /usr/local/bin/",
        "RUN cp -a /mnt/src /opt/x",
        "",
    ]
