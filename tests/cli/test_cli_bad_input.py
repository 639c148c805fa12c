"""Hostile command lines, environments and input files through the real CLI: each is one line on
stderr naming the option, variable or file and field, exit 2, no traceback, nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO_ROOT, assert_one_line

INVOKE = str(Path(sys.executable).parent / "invoke")


def cli(*args, env=None, cwd=REPO_ROOT, timeout=120):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([INVOKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def recipes(tmp_path):
    """A copy of three real recipes (a base and two engine recipes) and their locks, outside the project."""
    for name in ("torch-cu130", "sglang-native-fp8", "vllm-dspark"):
        for suffix in (".yaml", ".lock.yaml"):
            shutil.copy(REPO_ROOT / "recipes" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path


# ------------------------------------------------------------------ item 4: explicit empty values


@pytest.mark.parametrize(
    "args,option",
    [
        (["build", "--tag", ""], "--tag"),
        (["build", "--tag="], "--tag"),
        (["build", "--mirror-map", ""], "--mirror-map"),
        (["build", "--ca-bundle", ""], "--ca-bundle"),
        (["build", "--netrc", ""], "--netrc"),
        (["build", "--platform", ""], "--platform"),
        (["build", "--variant", ""], "--variant"),
        (["build", "--cache-from", ""], "--cache-from"),
        (["publish", "--registry", "localhost:5000", "--tag", ""], "--tag"),
        (["publish", "--registry", "localhost:5000", "--repository", ""], "--repository"),
        (["bootstrap-base", "--tag", ""], "--tag"),
        (["render", "--recipe", ""], "--recipe"),
        (["bisect", "--recipe", "sglang-native-fp8-bookworm", "--run", ""], "--run"),
        (["bisect", "--recipe", "sglang-native-fp8-bookworm", "--run", "  "], "--run"),
    ],
)
def test_an_explicit_empty_value_is_refused(args, option):
    assert_one_line(cli(*args), f"{option}: empty value")


def test_invoke_parse_errors_exit_2():
    assert_one_line(cli("build", "--bogus"), "No idea what '--bogus' is")
    assert_one_line(cli("build", "--tag"), "--tag")


# ------------------------------------------------------------------ item 3: launch --port


@pytest.mark.parametrize("port", ["\u00b2", "99999", "0", "-1", "８０"])
def test_a_launch_port_outside_1_65535_is_refused(recipes, port):
    child = {
        "name": "child",
        "extends": "sglang-native-fp8",
        "launch": {"profiles": {"p": {"module": "sglang.launch_server", "args": ["--port", port]}}},
    }
    (recipes / "child.yaml").write_text(yaml.safe_dump(child, allow_unicode=True))
    proc = cli("render", "--recipe", str(recipes / "child.yaml"))
    assert_one_line(proc, "launch", "--port", "1..65535")
    assert "EXPOSE" not in proc.stdout


def test_a_launch_port_in_range_is_exposed(recipes):
    child = {
        "name": "child",
        "extends": "sglang-native-fp8",
        "launch": {"profiles": {"p": {"module": "sglang.launch_server", "args": ["--port=65535"]}}},
    }
    (recipes / "child.yaml").write_text(yaml.safe_dump(child))
    proc = cli("render", "--recipe", str(recipes / "child.yaml"))
    assert proc.returncode == 0 and "65535" in proc.stdout, proc.stderr


# ------------------------------------------------------------------ item 5, 6, 7: bisect

B = ["bisect", "--recipe", "sglang-native-fp8-bookworm"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--run", "true", "--volume", "rel/dir:/x"], ["--volume", "absolute path or a volume name"]),
        (["--run", "true", "--volume", "/no/such/dir:/x"], ["--volume", "does not exist"]),
        (["--run", "true", "--volume", "/tmp:x"], ["--volume", "DST must be an absolute path"]),
        (["--run", "true", "--volume", "/tmp:/x:bogus"], ["--volume", "unknown volume option"]),
        (["--run", "true", "--volume", "a:b:c:d"], ["--volume", "SRC:DST"]),
        (["--run", "true", "--timeout", "abc"], ["--timeout", "whole number of seconds"]),
        (["--run", "true", "--timeout", "1e3"], ["--timeout", "whole number of seconds"]),
    ],
)
def test_bad_bisect_input_fails_before_anything_builds(args, words):
    assert_one_line(cli(*B, *args), *words)


def test_good_volumes_pass_the_check():
    from servebuild.check.container import check_volume

    for spec in ("/tmp:/data", "/tmp:/data:ro", "hf-cache:/cache", "hf-cache:/cache:ro,z"):
        check_volume(spec)


def test_docker_run_failing_itself_is_an_error_not_a_measurement(tmp_path):
    from servebuild.check.bisect import Probe, run_in_image
    from servebuild.errors import DockerError

    fake = tmp_path / "docker"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = rm ] && exit 0\n'
        "echo 'docker: Error response from daemon: invalid mount config.' >&2\nexit 125\n"
    )
    fake.chmod(0o755)

    class Client:  # the engine client's two calls run_in_image makes: the CLI (the run) and the cleanup
        client = str(fake)

        def remove_container(self, name):
            pass

    with pytest.raises(DockerError, match="docker run of img failed: docker: Error response"):
        run_in_image(Client(), "img", Probe("true"), None, "none", tmp_path / "run.log")
    assert "invalid mount config" in (tmp_path / "run.log").read_text()  # the log keeps what docker said


# ------------------------------------------------------------------ item 7: tracebacks


@pytest.mark.parametrize(
    "text", ["git_mirrors: {1: /srv/x}\n", "git_mirrors: {null: /srv/x}\n", "image_mirrors: {1: busybox}\n"]
)
def test_config_keys_must_be_strings(tmp_path, text):
    (tmp_path / "config.yaml").write_text(text)
    proc = cli(
        "build", "--recipe", "torch-cu130", "--dry-run", env={"SERVEBUILD_CONFIG": str(tmp_path / "config.yaml")}
    )
    assert_one_line(proc, "config.yaml", "mirrors", "must map strings to strings")


def _edit_lock(recipes, name, edit):
    path = recipes / f"{name}.lock.yaml"
    lock = yaml.safe_load(path.read_text())
    edit(lock)
    path.write_text(yaml.safe_dump(lock))


@pytest.mark.parametrize(
    "edit,words",
    [
        (lambda lock: lock.update(unresolved=None), None),
        (lambda lock: lock["patches"][0].pop("base"), ["base", "must be given"]),
        (lambda lock: lock["patches"][0].update(commit=["x"]), ["commit", "string or null"]),
        (lambda lock: lock["bases"]["build"].update(digest=["x"]), ["bases", "string or null"]),
    ],
)
@pytest.mark.parametrize("command", [["render"], ["build", "--dry-run"], ["build", "--dry-run", "--locked"]])
def test_malformed_lock_entries_are_one_line(recipes, edit, words, command):
    # vllm-dspark: its lock's first patch entry is a PR left unpinned (#48993, a short SHA only)
    _edit_lock(recipes, "vllm-dspark", edit)
    proc = cli(*command, "--recipe", str(recipes / "vllm-dspark.yaml"))
    if words is None:  # a null list is an empty one; the dry run still says the unpinned PR stops it
        stops = command[0] == "build"
        assert proc.returncode == (2 if stops else 0) and "Traceback" not in proc.stderr, proc.stderr
        return
    assert_one_line(proc, "vllm-dspark.lock.yaml", "malformed lock", *words)
    assert "Warning" not in proc.stderr


def test_a_lock_value_of_the_wrong_type_is_one_line_without_a_warning(recipes):
    def edit(lock):
        next(p for p in lock["patches"] if p["id"] == "sglang-pr-33276").update(sha256="not-a-hash")

    _edit_lock(recipes, "sglang-native-fp8", edit)
    proc = cli("build", "--dry-run", "--recipe", str(recipes / "sglang-native-fp8.yaml"))
    assert_one_line(proc, "sglang-native-fp8.lock.yaml")
    assert "Warning" not in proc.stderr


def test_locked_refuses_a_lock_that_omits_a_named_file(recipes):
    _edit_lock(recipes, "torch-cu130", lambda lock: lock.update(files={}))
    proc = cli("build", "--locked", "--dry-run", "--recipe", str(recipes / "torch-cu130.yaml"))
    assert_one_line(proc, "torch-cu130.lock.yaml", "files.", "lock is stale", "does not record")


def test_the_real_locks_record_every_named_file():
    from servebuild.recipe.load import load_recipe
    from servebuild.lock.lockfile import file_names, load_lock_file

    for path in sorted((REPO_ROOT / "recipes").glob("*.lock.yaml")):
        loaded = load_recipe(path.name.removesuffix(".lock.yaml"), REPO_ROOT)
        assert sorted(load_lock_file(loaded).files) == file_names(loaded), path


def test_recursive_yaml_aliases_are_refused(tmp_path):
    base = (REPO_ROOT / "recipes" / "torch-cu130.yaml").read_text()
    (tmp_path / "torch-cu130.yaml").write_text(base.replace("\nlaunch:\n", "\nlaunch: &l\n  profiles: *l\n", 1))
    (tmp_path / "child.yaml").write_text("name: child\nextends: torch-cu130\nlaunch: &l {profiles: *l}\n")
    for name in ("child", "torch-cu130"):
        proc = cli("validate", "--recipe", str(tmp_path / f"{name}.yaml"))
        assert_one_line(proc, f"{name}.yaml:", "recursive")


@pytest.mark.parametrize("value", ["abc", "99999999999999", "-5", "1.5"])
def test_source_date_epoch_is_checked_before_anything_is_written(value):
    proc = cli("build", "--recipe", "torch-cu130", "--dry-run", env={"SOURCE_DATE_EPOCH": value})
    assert_one_line(proc, "$SOURCE_DATE_EPOCH", repr(value))


@pytest.mark.parametrize(
    "command",
    [
        ["fetch", "--recipe", "torch-cu130"],
        ["build", "--recipe", "torch-cu130", "--dry-run"],
        ["lock", "--recipe", "torch-cu130", "--offline"],
    ],
)
def test_a_source_cache_that_is_a_file_is_one_line(command):
    assert_one_line(cli(*command, env={"SERVEBUILD_CACHE": "/etc/passwd"}), "$SERVEBUILD_CACHE", "not a directory")


@pytest.mark.parametrize("client", ["/nonexist", "/etc/passwd"])
def test_a_docker_client_that_is_not_one_is_one_line(client):
    proc = cli("build", "--recipe", "torch-cu130", env={"SERVEBUILD_DOCKER": client})
    assert_one_line(proc, "$SERVEBUILD_DOCKER", "not an executable docker client")


@pytest.mark.parametrize("image", ["--help", "-v", "a b", "UPPER:case", "x;rm"])
def test_test_image_refuses_what_is_not_an_image_reference(image):
    line = assert_one_line(cli("test-image", f"--image={image}"), "--image")
    assert "not an image reference" in line or "needed value" in line, line  # invoke's parser takes -v as a flag


def test_publish_platform_naming_nothing_is_one_line():
    assert_one_line(
        cli("publish", "--registry", "localhost:5000", "--platform", ","), "--platform", "has an empty entry"
    )


def test_validate_into_a_closed_pipe_is_quiet():
    proc = subprocess.run(
        f"'{INVOKE}' validate | head -c 10", shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------ item 14: smoke-expect --output


def test_smoke_expect_never_replaces_what_is_not_a_regular_file(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dir").mkdir()
    for output in ("/dev/null", str(tmp_path / "link"), str(tmp_path / "dir"), str(tmp_path / "new") + "/"):
        assert_one_line(cli("smoke-expect", "--output", output), "--output")
    assert target.read_text() == "keep" and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "link", "target"]
    assert list((tmp_path / "dir").iterdir()) == []


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path):
    from servebuild.fsutil import atomic_write

    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        atomic_write(tmp_path / "dir", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


# ------------------------------------------------------------------ items 7, 15: release downloads


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local simple-API index: /simple/demo/ answers what `pages` holds; every other path is 404."""
    import hashlib
    import http.server
    import json
    import threading
    from servebuild.sources import artifacts

    payload = b"not really a tarball"
    digest = hashlib.sha256(payload).hexdigest()
    pages: dict = {"/files/demo-1.0.tar.gz": payload}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    monkeypatch.setattr(artifacts, "INDEX", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("SERVEBUILD_CA_BUNDLE", raising=False)
    req = tmp_path / "req.txt"
    req.write_text(f"demo==1.0 \\\n    --hash=sha256:{digest}\n")

    def fetch(files, **kw):
        pages["/simple/demo/"] = {"files": files}
        return artifacts.fetch_artifact(req, "req.txt", "sdist", "linux/amd64", "3.12", tmp_path / "cache", **kw)

    fetch.digest = digest
    fetch.tmp = tmp_path
    yield fetch
    server.shutdown()


def test_a_release_file_that_is_404_is_one_line(index):
    from servebuild.errors import HostError

    files = [{"filename": "demo-1.0.tar.gz", "url": "/files/missing.tar.gz", "hashes": {"sha256": index.digest}}]
    with pytest.raises(HostError, match="cannot download demo-1.0.tar.gz of demo==1.0.*404") as info:
        index(files)
    assert "\n" not in str(info.value)
    assert not list((index.tmp / "cache").rglob("*.part*"))
    files[0]["url"] = "/files/demo-1.0.tar.gz"  # relative to the page, as PEP 691 allows
    path, digest = index(files)
    assert digest == index.digest and path.parent.parent == index.tmp / "cache" / "artifacts"


@pytest.mark.parametrize(
    "filename",
    [
        "../../../demo-1.0.tar.gz",
        "/tmp/demo-1.0.tar.gz",
        "sub/demo-1.0.tar.gz",
        "other-1.0.tar.gz",
        "demo-extra-1.0.tar.gz",
        "..demo-1.0.tar.gz",
    ],
)
def test_a_release_filename_must_be_a_plain_name_of_the_project(index, filename):
    from servebuild.errors import InputError

    files = [{"filename": filename, "url": "/files/demo-1.0.tar.gz", "hashes": {"sha256": index.digest}}]
    with pytest.raises(InputError, match="no sdist of demo==1.0"):
        index(files)
    assert sorted(str(p.relative_to(index.tmp)) for p in index.tmp.rglob("*")) == ["req.txt"]


def test_a_ca_bundle_that_is_not_pem_is_one_line(index, monkeypatch):
    from servebuild.errors import InputError

    bad = index.tmp / "ca.pem"
    bad.write_text("not a certificate\n")
    files = [{"filename": "demo-1.0.tar.gz", "url": "/files/demo-1.0.tar.gz", "hashes": {"sha256": index.digest}}]
    with pytest.raises(InputError, match="--ca-bundle: cannot use .*ca.pem as a CA bundle"):
        index(files, ca_bundle=bad)  # build --ca-bundle
    monkeypatch.setenv("SERVEBUILD_CA_BUNDLE", str(bad))
    with pytest.raises(InputError, match="cannot use .*ca.pem as a CA bundle"):
        index(files)


def test_dry_run_exit_code_says_whether_the_build_would_stop(recipes):
    """`build --dry-run` used to exit 0 while printing `would stop:`: a script could not tell."""
    stops = cli("build", "--dry-run", "--recipe", str(recipes / "vllm-dspark.yaml"))  # #48993: a short SHA only
    assert stops.returncode == 2, stops
    assert "  would stop: " in stops.stdout and "is not pinned to a full commit" in stops.stdout
    assert stops.stderr.strip().splitlines() == ["error: the build would stop (see `would stop:` above)"]
    goes = cli("build", "--dry-run", "--recipe", str(recipes / "torch-cu130.yaml"))
    assert goes.returncode == 0 and "would stop" not in goes.stdout, goes


# ------------------------------------------------------------------ warm: every option before the engine


@pytest.mark.parametrize(
    "args,words",
    [
        ([], ["--run", "give the command to run"]),
        (["--run", "  "], ["--run", "empty value"]),
        (["--run", "true", "--gpus", "0;1"], ["--gpus", "is not all, none or a GPU list"]),
        (["--run", "true", "--gpus", "all,0"], ["--gpus", "is not all, none or a GPU list"]),
        (["--run", "true", "--network", "host;rm"], ["--network", "is not a docker network name"]),
        (["--run", "true", "--volume", "/tmp:/x\n"], ["--volume", "line break"]),
        (["--run", "true", "--volume", "rel/dir:/x"], ["--volume", "absolute path or a volume name"]),
        (["--run", "true", "--max-bytes", "16T"], ["--max-bytes", "is not a size in bytes"]),
        (["--run", "true", "--timeout", "soon"], ["--timeout", "whole number of seconds"]),
        (["--run", "true", "--timeout", "0"], ["--timeout", "whole number of seconds above 0"]),
        (["--run", "true", "--timeout=-5"], ["--timeout", "whole number of seconds"]),
        (["--run", "true", "--tag", "Bad Tag"], ["--tag", "is not an image reference"]),
        (
            ["--run", "true", "--profile", "nope"],
            ["--profile", "has no launch profile 'nope' (it has: sglang-native-fp8, sglang-native-fp8-fixed-prefill)"],
        ),
        (
            ["--run", "true", "--variant", "nope"],
            ["variants: unknown variant 'nope'; this recipe has: final, fusion-policy-only, local-stack"],
        ),
    ],
)
def test_bad_warm_input_is_one_line_before_the_engine(args, words):
    """DOCKER_HOST points nowhere: a message that needed the engine would name it instead."""
    proc = cli("warm", "--recipe", "sglang-native-fp8-bookworm", *args, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_one_line(proc, *words)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--image", "sha256:" + "a" * 64], ["--tag", "is an image id: there is no tag to add -warm to; give --tag"]),
        (["--image", "servebuild/x:" + "t" * 125], ["--tag", "is not a tag docker takes"]),
        (
            ["--image", "servebuild/x:amd64", "--tag", "servebuild/x@sha256:" + "b" * 64],
            ["--tag", "is not a tag docker takes"],
        ),
        (
            ["--image", "servebuild/x:amd64", "--profile", "p\nSERVEBUILD_X=1"],
            ["--profile", "is not a launch profile name"],
        ),
    ],
)
def test_warm_image_tag_and_profile_are_checked_before_the_engine(args, words):
    """Point 8 of issue 31: the warm image's tag failed at `docker tag` after an hour's run and build,
    and --profile with --image was not checked. DOCKER_HOST points nowhere: an engine message would show."""
    proc = cli("warm", *args, "--run", "true", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_one_line(proc, *words)


def test_warm_check_of_an_image_given_by_id_asks_no_tag():
    """--check tags nothing: an image id without --tag goes on to the engine (here: none)."""
    proc = cli(
        "warm",
        "--image",
        "sha256:" + "a" * 64,
        "--check",
        "--run",
        "true",
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert_one_line(proc, "engine", "not reachable")


def test_warm_needs_a_recipe_or_an_image():
    assert_one_line(cli("warm", "--run", "true"), "--recipe", "give --recipe NAME (its built image) or --image REF")


@pytest.mark.parametrize(
    "args, words",
    [
        ((), ["--check", "give the published tag"]),
        (("--check", "not a ref"), ["REF", "not a registry reference"]),
        (("--check", "127.0.0.1:1/r/x:v1", "--platform", "linux/s390x"), ["--platform", "unknown platform"]),
        (("--check", "127.0.0.1:1/r/x:v1"), ["127.0.0.1:1"]),  # nothing listens there: one line, no build
        (("--committed", "torch-cu130-bookworm", "--check", "127.0.0.1:1/r/x:v1"), ["--committed", "not both"]),
        (
            ("--committed", "torch-cu130-bookworm", "--platform", "linux/arm64", "--variant", "nope"),
            ["variants: unknown variant 'nope'"],
        ),
        (
            ("--committed", "torch-cu130", "--platform", "linux/amd64"),
            ["--committed", "torch-cu130.ids.yaml has no committed id for linux/amd64"],
        ),
        (("--committed", "no-such-recipe"), ["no-such-recipe"]),
        (("--variant", "release", "--check", "127.0.0.1:1/r/x:v1"), ["--variant", "goes with --committed"]),
    ],
)
def test_rebuild_check_bad_input_is_one_line(args, words):
    proc = cli("rebuild", *args, env={"SERVEBUILD_REGISTRY_TIMEOUT": "5"})
    assert_one_line(proc, *words)
    assert "built" not in proc.stdout


# ------------------------------------------------------------------ issue 43 item 4: the commit an sdist was cut from


@pytest.fixture
def sdist_project(tmp_path):
    """tasks.py, the minimal recipe as vllm-precompiled over an sdist of vLLM's shape whose vllm/_version.py is
    v0.26.0's (commit_id 'gf2654939e'), seeded in the artifact cache: a stand-in for PyPI's 38 MB file, which
    the CLI would fetch by the same hash (tests/unit/test_sdist_commit.py says what is real)."""
    from support import copy_real
    from unit.minimal_recipe import BASE, merge
    from unit.test_sdist_commit import make_sdist, version_py

    root = tmp_path / "project"
    copy_real(root, "tasks.py", "constraints/torch-cu130/py3.12-linux-amd64.txt")
    (root / "recipes").mkdir()
    sdist = tmp_path / "vllm-0.26.0.tar.gz"
    digest = make_sdist(sdist, version_py("gf2654939e"))
    (root / "cache" / "artifacts" / digest).mkdir(parents=True)
    shutil.copy(sdist, root / "cache" / "artifacts" / digest / sdist.name)
    (root / "constraints" / "sdist.txt").write_text(f"vllm==0.26.0 \\\n    --hash=sha256:{digest}\n")
    (root / "constraints" / "pre.txt").write_text(f"vllm==0.26.0 \\\n    --hash=sha256:{'ab' * 32}\n")

    def write(source: dict) -> Path:
        engine = {"install": "vllm-precompiled", "sdist": "constraints/sdist.txt", "source": source}
        engine["precompiled"] = {"linux/amd64": "constraints/pre.txt"}
        (root / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, {"engine": engine})))
        return root

    return write


def fetch_sdist(root: Path):
    env = {"PYTHONPATH": str(REPO_ROOT), "SERVEBUILD_CACHE": str(root / "cache")}
    return cli("fetch", "--recipe", "hostile", "--offline", env=env, cwd=root)


def test_an_sdist_cut_from_another_commit_is_refused_in_one_line(sdist_project):
    root = sdist_project({})
    line = assert_one_line(fetch_sdist(root), "recipes/hostile.yaml", "engine.source.sdist_commit")
    assert "vllm-0.26.0.tar.gz:vllm/_version.py says the sdist was cut from commit f2654939e, not the recipe's" in line
    assert "568afb3a13806beb53bb2e6bd518269357b237c0" in line
    line = assert_one_line(fetch_sdist(sdist_project({"sdist_commit": "abcdef0"})), "engine.source.sdist_commit")
    assert "cut from commit f2654939e, the recipe declares sdist_commit abcdef0" in line
    assert not list((root / "build").rglob("Dockerfile"))  # nothing rendered, nothing built


def test_an_sdist_cut_from_the_declared_commit_is_fetched_and_named(sdist_project):
    proc = fetch_sdist(sdist_project({"sdist_commit": "f2654939e"}))
    assert proc.returncode == 0, proc.stderr
    assert "  tree: vllm-0.26.0.tar.gz, cut from commit f2654939e (its vllm/_version.py)\n" in proc.stdout
