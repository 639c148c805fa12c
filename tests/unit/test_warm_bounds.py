"""`invoke warm`'s bounds that need no engine: --timeout enforced on the local engine (driven through
the real DockerClient and run_warm by a fake docker client), and every value that must hold before
an hour-long run checked before anything runs (issue 31, points 2 and 8)."""

from __future__ import annotations

import time

import pytest

from servebuild.build.docker import DockerClient
from servebuild.check.warm import WarmRequest, run_warm
from servebuild.errors import HostError, InputError

IMAGE_ID = "sha256:" + "a" * 64

# A stand-in for the docker CLI, not an engine: it logs every call, answers the calls warm makes on
# the local engine as an engine would (the image's inspect, `run -d`, the cache tool's seed and
# census), and runs `exec NAME /bin/sh -c CMD` as CMD on this host; anything else (pack, cp, build,
# tag) fails as an engine fault would.
FAKE_CLIENT = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  build) [ "$2" = --help ] && echo "  --secret stringArray   Secret to expose to the build" && exit 0 ;;
  version) echo 20.10.24; exit 0 ;;
  image)
    if [ "$2" = inspect ] && [ "$3" = --format ]; then echo "{image_id}"; exit 0; fi
    if [ "$2" = inspect ]; then
      echo '[{{"Id": "{image_id}", "Os": "linux", "Architecture": "amd64",
              "Config": {{"Labels": {{"io.servebuild.manifest.sha256": "{manifest}"}}}}}}]'
      exit 0
    fi ;;
  run) echo 0123456789abcdef; exit 0 ;;
  rm) exit 0 ;;
  exec)
    shift 2
    if [ "$1" = /bin/sh ] && [ "$2" = -c ]; then exec /bin/sh -c "$3"; fi
    case "$3 $4" in
      "seed ") exit 0 ;;
      "census --listing") echo '{{"manifest_sha256": "{manifest}", "origin": null}}'; exit 0 ;;
      "census --since") echo '{{"changed": {{}}}}'; exit 0 ;;
    esac ;;
esac
echo "Error response from daemon: the fake client does not do: $*" >&2
exit 1
"""


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """A DockerClient for the local engine whose client is FAKE_CLIENT (a fake: no engine exists here);
    the CLI serves every call, as it does where the SDK cannot be used. Returns (client, its call log)."""
    log = tmp_path / "calls.log"
    client = tmp_path / "docker"
    client.write_text(FAKE_CLIENT.format(log=log, image_id=IMAGE_ID, manifest="0" * 64))
    client.chmod(0o755)
    monkeypatch.setenv("SERVEBUILD_DOCKER", str(client))
    monkeypatch.setattr(DockerClient, "_connect_api", lambda self: None)
    engine = DockerClient()
    assert engine.endpoint is None  # the local engine, the kind whose timeout was not enforced
    return engine, log


def calls(log) -> list[str]:
    return log.read_text().splitlines()


def test_warm_timeout_is_enforced_on_the_local_engine(fake_engine, tmp_path):
    """A fake runner: `--timeout 1 --run 'sleep 10'` stops the command after 1 s, one line naming
    --timeout, nothing built or tagged, the container removed (point 2: it ran 43 s and tagged)."""
    engine, log = fake_engine
    start = time.monotonic()
    with pytest.raises(HostError, match=r"the command ran past --timeout 1 s") as err:
        run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command="sleep 10", gpus="none", timeout=1),
            tmp_path / "warm",
            echo=lambda *_: None,
        )
    assert time.monotonic() - start < 8
    assert err.value.field == "--timeout" and err.value.exit_code == 2 and "\n" not in str(err.value)
    made = calls(log)
    assert not [c for c in made if c.split()[0] in ("build", "tag", "cp") and c != "build --help"], made
    assert not any("pack" in c.split() for c in made), made
    names = [c.split()[3] for c in made if c.startswith("run -d --name ")]
    assert len(names) == 1 and f"rm -f -v {names[0]}" in made, made  # the container removed


def test_a_command_within_its_timeout_is_not_stopped(fake_engine, tmp_path):
    """A fake runner: a command that ends in time goes on to the census and --check's count."""
    engine, log = fake_engine
    result = run_warm(
        engine,
        WarmRequest(image="servebuild/x:amd64", command="sleep 0.2", gpus="none", timeout=5, check_only=True),
        tmp_path / "warm",
        echo=lambda *_: None,
    )
    assert result.new_files == {}
    assert (tmp_path / "warm" / "warm.log").read_text() == "$ sleep 0.2\n"


@pytest.mark.parametrize(
    "value, words",
    [
        ("0", "'0' is not a whole number of seconds above 0"),
        ("-5", "'-5' is not a whole number of seconds"),
        ("abc", "'abc' is not a whole number of seconds"),
        ("1.5", "'1.5' is not a whole number of seconds"),
    ],
)
def test_warm_timeout_must_be_a_positive_whole_number(value, words):
    from servebuild.cli.warm import WarmArgs, checked_request

    with pytest.raises(InputError, match=words) as err:
        checked_request(WarmArgs(image="servebuild/x:amd64", run="true", gpus="none", timeout=value))
    assert err.value.field == "--timeout"


# ------------------------------------------------------------------ point 8: checked before anything runs


def engine_calls(log) -> list[str]:
    """What the fake client was asked beyond finding and pinging it (DockerClient's own start)."""
    return [c for c in calls(log) if c not in ("build --help", "version --format {{.Server.Version}}")]


@pytest.mark.parametrize(
    "image, tag, words",
    [
        (IMAGE_ID, None, "is an image id: there is no tag to add -warm to; give --tag"),
        ("a" * 64, None, "is an image id: there is no tag to add -warm to; give --tag"),
        ("servebuild/x:" + "t" * 125, None, "is not a tag docker takes"),
        ("servebuild/x@sha256:" + "b" * 64, None, "is not a tag docker takes"),
        ("servebuild/x:amd64", "servebuild/x@sha256:" + "b" * 64, "is not a tag docker takes"),
        ("servebuild/x:amd64", "c" * 64, "is not a tag docker takes"),
    ],
)
def test_warm_refuses_a_tag_docker_would_refuse_before_anything_runs(fake_engine, tmp_path, image, tag, words):
    """A fake runner: the warm image's tag (--tag, else IMAGE-warm) is checked before the engine is
    asked anything (point 8: it failed at `docker tag`, after the run and the build)."""
    engine, log = fake_engine
    with pytest.raises(InputError, match=words) as err:
        run_warm(
            engine,
            WarmRequest(image=image, command="true", gpus="none", tag=tag),
            tmp_path / "warm",
            echo=lambda *_: None,
        )
    assert err.value.field == "--tag" and "\n" not in str(err.value)
    assert engine_calls(log) == []


def test_warm_check_of_an_image_given_by_id_needs_no_tag(fake_engine, tmp_path):
    """A fake runner: --check builds and tags nothing, so an image id without --tag is fine."""
    engine, _ = fake_engine
    result = run_warm(
        engine,
        WarmRequest(image=IMAGE_ID, command="true", gpus="none", check_only=True),
        tmp_path / "warm",
        echo=lambda *_: None,
    )
    assert result.new_files == {} and result.tag is None


@pytest.mark.parametrize("profile", ["p\nSERVEBUILD_X=1", "../../bin/sh", "Upper", "", "sh", "p" * 64])
def test_warm_refuses_a_profile_that_is_not_a_profile_name_before_anything_runs(fake_engine, tmp_path, profile):
    """A fake runner: --profile reaches a label and SERVEBUILD_LAUNCHER=/usr/local/bin/PROFILE; with
    --image no recipe lists the profiles, so the name grammar holds it (point 8: a newline got through)."""
    engine, log = fake_engine
    with pytest.raises(InputError, match="is not a launch profile name") as err:
        run_warm(
            engine,
            WarmRequest(image="servebuild/x:amd64", command="true", gpus="none", profile=profile),
            tmp_path / "warm",
            echo=lambda *_: None,
        )
    assert err.value.field == "--profile"
    assert engine_calls(log) == []


@pytest.mark.parametrize("spec", ["/" + "a" * 5000 + ":/x", "/tmp/" + "a/" * 2500 + ":/x", "/" + "a" * 300 + ":/x:ro"])
def test_warm_names_volume_for_a_source_path_too_long_to_check(spec):
    """A 5,000-character --volume SRC made the existence check raise ENAMETOOLONG, which the front door
    printed as 'error: /aaaa…: File name too long', a 5,000-character line naming no option (issue 31,
    trust). Now it is one short InputError line on --volume, raised before the engine is asked anything."""
    from servebuild.cli.warm import WarmArgs, checked_request

    with pytest.raises(InputError) as err:
        checked_request(WarmArgs(image="servebuild/x:amd64", run="true", gpus="none", volume=[spec]))
    message = str(err.value)
    assert err.value.field == "--volume" and err.value.exit_code == 2, message[:200]
    assert message.startswith("--volume: ") and "SRC cannot be checked: File name too long" in message, message[:200]
    assert "\n" not in message and len(message) < 300, message[:200]


@pytest.mark.parametrize("changed, status", [({}, 0), ({"triton": 2, "inductor": 1}, 1)])
def test_warm_check_exits_1_when_the_command_added_cache_files_else_0(fake_engine, tmp_path, capsys, changed, status):
    """A fake runner: `warm --check` (cli.warm) is 0 when the command's start compiled nothing and 1 when
    the census after it counts new compile products; --check tags nothing either way (issue 31, point 10)."""
    import json

    from servebuild.cli.warm import WarmArgs, warm

    engine, log = fake_engine
    client = tmp_path / "docker"
    client.write_text(
        client.read_text().replace("""echo '{"changed": {}}'""", f"echo '{json.dumps({'changed': changed})}'")
    )
    root = tmp_path / "project"
    root.mkdir()
    assert warm(root, WarmArgs(image=IMAGE_ID, run="true", gpus="none", check=True)) == status
    assert f"warm --check: {sum(changed.values())} new cache files while the command ran" in capsys.readouterr().out
    assert [
        c
        for c in calls(log)
        if c.split()[0] in ("tag", "commit", "cp")
        or c.startswith("image tag")
        or (c.startswith("build") and c != "build --help")
    ] == []
