"""Promises that a mutation run of the suite (issue 19) changed without any test noticing.

Each test here was seen to fail against the one-line change that scripts/mutants.py lists for it,
and to pass on the real code. Unit level: no engine, no network; git and /bin/sh are real.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from servebuild.check import bisect
from servebuild.errors import IntegrityError, RecipeError, ServebuildError
from servebuild.recipe.load import load_recipe
from servebuild.release import credentials, signing
from servebuild.release.credentials import CredentialsError
from servebuild.release.signing import SigningError
from servebuild.sources.archives import unpack_release, write_tarball
from servebuild.yamlfile import MAX_YAML_DEPTH, parse_bounded
from support import REPO_ROOT, git
from unit.test_hostile_recipes import BASE, merge


def one_printable_line(exc: Exception) -> str:
    line = str(exc)
    assert line.isprintable(), repr(line)  # no newline, no escape, no bell: one line a terminal shows as is
    return line


# -- YAML nesting: servebuild's own limit, below libyaml's (1,000 levels) ------------------------------------------

# depth as servebuild counts it: the document's root node is at 0, each node one below its parent

def flow(depth: int) -> str:
    """A mapping whose value is `depth` nested flow sequences: the innermost is at `depth`."""
    return "a: " + "[" * depth + "]" * depth + "\n"


def block(depth: int) -> str:
    """The same depth in block style: a chain of one-key mappings, one level per line; the scalar is at `depth`."""
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth - 1)) + "  " * (depth - 1) + "k: 1\n"


def depth_of(data) -> int:
    return 1 + max(map(depth_of, data.values() if isinstance(data, dict) else data), default=-1) \
        if isinstance(data, (dict, list)) else 0


def test_the_documented_depth_is_64():
    assert MAX_YAML_DEPTH == 64
    assert "at most 64 levels" in (REPO_ROOT / "docs" / "reference" / "input-limits.md").read_text()
    assert "≤ 64 levels" in (REPO_ROOT / "docs" / "input-validation.md").read_text()


@pytest.mark.parametrize("style", [flow, block])
def test_yaml_at_the_depth_limit_is_read(style):
    data, _ = parse_bounded(style(MAX_YAML_DEPTH), "deep.yaml")
    assert depth_of(data) == MAX_YAML_DEPTH


@pytest.mark.parametrize("style", [flow, block])
@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 1, 100, 500, 999])
def test_yaml_past_the_depth_limit_is_refused_by_servebuild_not_by_libyaml(style, depth):
    with pytest.raises(RecipeError) as info:
        parse_bounded(style(depth), "deep.yaml")
    line = one_printable_line(info.value)
    assert line.startswith("deep.yaml:") and "nested more than 64 levels deep" in line, line


# -- a profile's port: a TCP port, an integer 1..65535 --------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    from support import copy_real
    copy_real(tmp_path, "constraints/torch-cu130/py3.12-linux-amd64.txt")
    (tmp_path / "recipes").mkdir()
    return tmp_path


def load_with(project: Path, edit: dict):
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(merge(BASE, edit)))
    return load_recipe("hostile", project)


def profile_port(port) -> dict:
    return {"launch": {"profiles": {"p": {"port": port}}}}


@pytest.mark.parametrize("port", [1, 8000, 65535])
def test_a_profile_port_in_range_is_kept(project, port):
    assert load_with(project, profile_port(port)).recipe.launch.profiles["p"].port == port


@pytest.mark.parametrize("port", [0, 65536, 99999, -1, -8000, True, False, "8000", 8000.0, None])
def test_a_profile_port_out_of_range_or_not_an_integer_is_refused(project, port):
    if port is None:  # an explicit null is the default (the engine kind's port), not an error
        assert load_with(project, profile_port(port)).recipe.launch.profiles["p"].port is None
        return
    with pytest.raises(ServebuildError) as info:
        load_with(project, profile_port(port))
    line = one_printable_line(info.value)
    assert "hostile.yaml" in line and "launch.profiles" in line and "port" in line, line


# -- workdir and cache_dirs: absolute, letters, digits and '._-' only ----------------------------------------------

BAD_DIRS = ["/work space", "/work$HOME", "/$(id)", "/a/${X}", "/a b/c", "/a\tb", "/a;b", "/a'b", "relative",
            "/a/../../etc", "//", ""]


@pytest.mark.parametrize("path", BAD_DIRS)
@pytest.mark.parametrize("field", ["workdir", "cache_dirs"])
def test_a_launch_directory_with_a_space_or_dollar_is_refused(project, field, path):
    with pytest.raises(ServebuildError) as info:
        load_with(project, {"launch": {field: path if field == "workdir" else ["/cache/ok", path]}})
    line = one_printable_line(info.value)
    assert f"launch.{field}" in line and "absolute" in line, line


@pytest.mark.parametrize("path", ["/workspace", "/w", "/opt/models.v1/_x-y", "/cache/x/"])
def test_a_plain_absolute_launch_directory_is_kept(project, path):
    launch = load_with(project, {"launch": {"workdir": path, "cache_dirs": [path]}}).recipe.launch
    assert launch.workdir == path and launch.cache_dirs == [path]


# -- vLLM: the DSpark rule matches the method in any case (vLLM lowercases it) ----------------------------------

@pytest.mark.parametrize("method", ["dspark", "DSpark", "DSPARK"])
def test_vllm_dspark_is_recognised_in_any_case(project, method):
    spec = json.dumps({"method": method, "num_speculative_tokens": 2})
    profile = {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m", "--speculative-config", spec],
               "dspark_block_size": 5}
    with pytest.raises(ServebuildError) as info:
        load_with(project, {"launch": {"profiles": {"p": profile}}})
    assert "num_speculative_tokens is 2, below the DSpark block size 5" in one_printable_line(info.value)
    profile["args"][-1] = json.dumps({"method": method, "num_speculative_tokens": 6})
    assert load_with(project, {"launch": {"profiles": {"p": profile}}}).recipe.launch.profiles["p"]
    profile["args"][-1] = json.dumps({"method": method})  # no token count: DSpark cannot be checked
    with pytest.raises(ServebuildError, match="DSpark needs an integer num_speculative_tokens"):
        load_with(project, {"launch": {"profiles": {"p": profile}}})


def test_another_vllm_method_is_not_held_to_the_dspark_rule(project):
    spec = json.dumps({"method": "eagle", "num_speculative_tokens": 2})
    profile = {"module": "vllm.entrypoints.cli.main", "args": ["serve", "/m", "--speculative-config", spec]}
    assert load_with(project, {"launch": {"profiles": {"p": profile}}})


# -- the source tarball keeps the exec bit, and only where git has it --------------------------------------------

def test_the_source_tarball_keeps_the_exec_bit_and_only_that(tmp_path):
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "bin" / "run.sh").chmod(0o755)
    (tree / "lib.py").write_text("x = 1\n")
    (tree / "lib.py").chmod(0o664)  # group-writable on disk: the tarball says 644 (git's 100644)
    (tree / "odd").write_text("y\n")
    (tree / "odd").chmod(0o700)  # git records 100755: executable for all in the tarball
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", "-A")
    out = tmp_path / "out"
    out.mkdir()
    path, _ = write_tarball(tree, {}, out)
    with tarfile.open(path) as tar:
        modes = {m.name: stat.S_IMODE(m.mode) for m in tar.getmembers() if m.isfile()}
    assert modes == {"src/bin/run.sh": 0o755, "src/lib.py": 0o644, "src/odd": 0o755}, modes


def test_a_release_archive_keeps_the_exec_bit_and_only_that(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, mode in (("pkg/tool.sh", 0o755), ("pkg/mod.py", 0o644)):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, "x\n")
    tree = tmp_path / "tree"
    assert unpack_release(wheel, "wheel", "python/", tree) == {"python/pkg/tool.sh", "python/pkg/mod.py"}
    assert stat.S_IMODE((tree / "python/pkg/tool.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "python/pkg/mod.py").stat().st_mode) == 0o644


# -- a release wheel or sdist may not hold a path out of its place ----------------------------------------------

def make_wheel(path: Path, member: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        zf.writestr(zipfile.ZipInfo(member), "evil\n")  # ZipInfo keeps the name as given
    return path


def make_sdist(path: Path, member: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("pkg-1.0/setup.py", b""), (member, b"evil\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind,member", [
    ("wheel", "../evil"), ("wheel", "pkg/../../evil"), ("wheel", "/tmp/evil"),
    ("sdist", "pkg-1.0/../evil"), ("sdist", "pkg-1.0/../../evil"), ("sdist", "pkg-1.0/a/../../../evil"),
    ("sdist", "pkg-1.0//tmp/evil")])
def test_a_release_archive_with_a_path_out_of_the_tree_is_refused(tmp_path, kind, member):
    make = make_wheel if kind == "wheel" else make_sdist
    archive = make(tmp_path / ("pkg-1.0-py3-none-any.whl" if kind == "wheel" else "pkg-1.0.tar.gz"), member)
    tree = tmp_path / "deep" / "er" / "tree"
    with pytest.raises(IntegrityError) as info:
        unpack_release(archive, kind, "python/", tree)
    line = one_printable_line(info.value)
    assert archive.name in line and "unsafe path" in line, line
    written = [p for p in tmp_path.rglob("evil")]
    assert written == [], written  # refused before anything was placed out of the tree


# -- bisect: the last metrics line counts; an exit status decides when there is no metric ----------------------

def test_of_several_json_lines_the_last_one_counts():
    out = 'noise\n{"ttft": 9, "run": 1}\nmore noise\n{"ttft": 3, "run": 2}\ntail\n'
    assert bisect.parse_metrics(out) == {"ttft": 3, "run": 2}


def test_of_several_metrics_files_the_last_one_counts():
    import base64
    marked = [f"{bisect.METRICS_MARK} {base64.b64encode(json.dumps({'ttft': v}).encode()).decode()}" for v in (9, 3)]
    assert bisect.parse_metrics("\n".join(["x", marked[0], '{"ttft": 1}', marked[1], "y"]) + "\n") == {"ttft": 3}


def test_of_several_cache_censuses_the_last_one_counts():
    out = (f'{bisect.CACHE_MARK} {{"changed": {{"a": 5}}}}\n{bisect.CACHE_MARK} {{"changed": {{"a": 1, "b": 1}}}}\n'
           '{"ttft": 3}\n')
    assert bisect.parse_metrics(out) == {"ttft": 3, "jit_compiled_files": 2}


def row(exit_code, metrics=None) -> bisect.Row:
    return bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0, exit=exit_code, metrics=metrics or {})


@pytest.mark.parametrize("exit_code,metric,threshold,expected", [
    (0, None, None, "pass"), (1, None, None, "fail"), (137, None, None, "fail"), (None, None, None, "timeout"),
    (0, "tok_s", 2.0, "pass"), (0, "tok_s", 4.0, "fail"), (0, "ttft", 1.0, "no-metric"),
    (None, "tok_s", 2.0, "timeout")])
def test_the_outcome_without_a_metric_is_the_exit_status(exit_code, metric, threshold, expected):
    assert bisect.outcome(row(exit_code, {"tok_s": 3}), metric, threshold) == expected


@pytest.mark.parametrize("value, expected", [(2.0, "pass"), (2, "pass"), (1.999, "fail"), ("2.0", "no-metric"),
                                             ([2.0], "no-metric")])
def test_a_metric_exactly_at_the_threshold_passes(value, expected):
    """--threshold is the least passing value; a metric that is not a number is no metric, never compared."""
    assert bisect.outcome(row(0, {"tok_s": value}), "tok_s", 2.0) == expected


@pytest.mark.parametrize("n, first", [(8, 1), (8, 5), (8, 8), (1, 1), (8, None), (3, None)])
def test_the_search_finds_the_first_prefix_whose_outcome_differs(n, first):
    """Prefixes below `first` fail, from it on they pass (None: every prefix passes): the search names
    `first`, or None when the whole stack agrees with the release, measuring each prefix at most once."""
    asked = []

    def result(i):
        asked.append(i)
        return "fail" if first is None or i < first else "pass"
    assert bisect.first_change(n, result) == first
    assert len(asked) == len(set(asked)) and asked[0] == n, asked


def test_a_row_exits_with_its_first_failing_run():
    r = bisect.Row(variant="v", patches=[], tag="t", image_id="i", build_s=1.0)
    r.add(0, 1.0, {}, "log1", None)
    assert r.exit == 0
    r.add(3, 1.0, {}, "log2", None)
    r.add(5, 1.0, {}, "log3", None)
    assert r.exit == 3
    r.add(None, 1.0, {}, "log4", None)
    assert r.exit is None


# -- a signing key is readable by its owner only ---------------------------------------------------------------

def write_key(tmp_path: Path, mode: int) -> Path:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                                             ser.NoEncryption())
    path = tmp_path / "sign.key"
    path.write_bytes(pem)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o606, 0o620, 0o602, 0o610, 0o601, 0o644])
def test_a_signing_key_others_can_read_is_refused(tmp_path, mode):
    path = write_key(tmp_path, mode)
    with pytest.raises(SigningError) as info:
        signing.load_private_key(path)
    line = one_printable_line(info.value)
    assert f"readable by others (mode {mode:o})" in line and "chmod 600" in line, line


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_signing_key_only_its_owner_can_read_is_loaded(tmp_path, mode):
    assert signing.load_private_key(write_key(tmp_path, mode)).keyid


# -- a password never appears in an error line, control characters or not ----------------------------------------

PASSWORDS = ["hunter2-secret\x07", "hunter2-secret\nX", "hunter2-secret\x1b[2J", "\x00hunter2-secret",
             "hunter2-secret\u2028"]


def write_private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_credentials_file_password_with_a_control_character_is_refused_unquoted(tmp_path, password):
    path = write_private(tmp_path / "c.json", json.dumps({"username": "alice", "password": password}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_file(path)
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("form", ["auth", "fields"])
def test_a_docker_config_password_with_a_control_character_is_refused_unquoted(tmp_path, monkeypatch, password,
                                                                                form):
    import base64
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    entry = ({"auth": base64.b64encode(f"alice:{password}".encode()).decode()} if form == "auth"
             else {"username": "alice", "password": password})
    write_private(tmp_path / "config.json", json.dumps({"auths": {"reg.example": entry}}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_docker_config("reg.example")
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_credential_helper_password_with_a_control_character_is_refused_unquoted(tmp_path, monkeypatch,
                                                                                    password):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"ServerURL": "reg.example", "Username": "alice", "Secret": password}))
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(f"#!/bin/sh\ncat {answer}\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    write_private(tmp_path / "config.json", json.dumps({"credsStore": "fake"}))
    with pytest.raises(CredentialsError) as info:
        credentials.from_docker_config("reg.example")
    line = one_printable_line(info.value)
    assert "control character" in line and "hunter2" not in line, line


# -- the default platform, as documented ---------------------------------------------------------------------------

def test_a_recipe_without_platforms_is_for_linux_arm64_as_documented(project, monkeypatch):
    from servebuild.plan import make
    recipe = {k: v for k, v in merge(BASE, {"constraints": {"linux/arm64": BASE["constraints"]["linux/amd64"]}}).items()
              if k != "platforms"}
    (project / "recipes" / "hostile.yaml").write_text(yaml.safe_dump(recipe))
    assert load_recipe("hostile", project).recipe.platforms == ["linux/arm64"]
    assert "| `platforms` | `list[str]` | `['linux/arm64']` |" in (REPO_ROOT / "docs/recipe-reference.md").read_text()
    # and a build without --platform on an amd64 host builds the only platform the recipe has
    monkeypatch.setattr(make, "host_platform", lambda: "linux/amd64")
    plan = make.make_plan(project, "hostile", make.BuildOptions(dry_run=True, fetching=False))
    assert plan.platform == "linux/arm64"


@pytest.mark.parametrize("host,expected", [("linux/amd64", "linux/amd64"), ("linux/arm64", "linux/arm64"),
                                           ("linux/s390x", "linux/arm64")])
def test_without_platform_a_build_is_for_the_host_if_listed_else_the_first_listed(monkeypatch, host, expected):
    from servebuild.plan import make
    monkeypatch.setattr(make, "host_platform", lambda: host)
    plan = make.make_plan(REPO_ROOT, "torch-cu130", make.BuildOptions(dry_run=True, fetching=False))
    assert plan.platform == expected
