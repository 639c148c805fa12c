"""Bit-for-bit parts that need no engine (issue 20): the Dockerfile rewrite that settles every RUN and
COPY (render/settle.py), the creation time taken from the inputs (plan/make.py), and the config
rewrite (build/imageconfig.py). The engine-side proof is tests/integration/test_variants.py (a
--no-cache rebuild is the same image) and tests/integration/test_farm.py (two engines, one image)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess

import pytest

from servebuild.build.imageconfig import cache_config, canonical, settled_config
from servebuild.errors import InputError
from servebuild.plan.make import created_timestamp
from servebuild.recipe.load import load_recipe
from servebuild.render.context import render_dockerfile
from servebuild.render.settle import (
    BEGIN,
    COPY,
    END,
    ENV,
    EXPORTS,
    INDENT,
    MARK,
    MOUNTS,
    NEW,
    NEW_FILE,
    NEWEST,
    NEWEST_DIR,
    PAST_MARK,
    SETTLE,
    START,
    TMP,
    UNSETTLED,
    WRAPPER,
    SettleError,
    scripts,
    settle,
)
from support import REPO_ROOT

RECIPES = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.yaml") if not p.stem.endswith((".lock", ".ids")))


def instructions(text: str) -> list[str]:
    return re.findall(r"^(?:RUN|COPY|ADD)\b(?:.*\\\n)*.*$", text, re.M)


@pytest.mark.parametrize("name", RECIPES)
def test_every_run_of_every_recipe_is_settled_and_no_copy_is_left(name):
    loaded = load_recipe(name, REPO_ROOT)
    for platform in loaded.recipe.platforms:
        text = render_dockerfile(loaded.recipe, loaded.sha256, platform, {"build": "b", "runtime": "r"}, REPO_ROOT)
        steps = instructions(text)
        assert steps and not any(s.startswith("COPY") for s in steps)
        # the wrapper is in one place, the scripts: no step carries the prologue, the settle or the marker
        assert START not in text and SETTLE not in text and MARK not in text and ENV not in text
        unsettled = unsettled_stages(text)
        assert unsettled == ({"profile-check"} if " AS profile-check\n" in text else set()), unsettled
        for stage, step in ((st, s) for st, s in stage_steps(text) if s.startswith("RUN")):
            if stage in unsettled:  # its layer reaches no image (checked below): no walks, the rest as settled
                assert BEGIN not in step and END not in step and f"{EXPORTS} \\\n && ( " in step, step[:200]
            elif BEGIN not in step:  # one new file, settled without a walk: only the check's record, last
                assert stage == "runtime" and step.endswith(
                    f"{NEW} /mnt/profiles-checked.json /opt/servebuild/profiles-checked.json"
                )
                assert END not in step and step == stage_steps(text)[-1][1], step[:200]
            else:
                assert f"{INDENT}{BEGIN} \\\n && ( " in step and step.endswith(f" ) \\\n && {END}"), step[:120]
            binds = re.findall(r"--mount=type=bind,[^ ]*target=(\S+)", step)
            assert all(t.startswith("/mnt/") for t in binds), binds
            assert binds.count(WRAPPER) == 1 and step.count("--mount=type=tmpfs,target=/mnt ") == 1, step[:200]
            # the step's /tmp is a tmpfs: the image's /tmp is never copied up (it would be in the layer on
            # one engine and not on another); dpkg's journal likewise in every apt step; the scripts are
            # bind-mounted under the /mnt tmpfs, after it
            assert step.startswith(f"RUN {MOUNTS}{INDENT}"), step[:120]
            assert MOUNTS.index("target=/mnt ") < MOUNTS.index(f"target={WRAPPER}")
            assert ("apt-get install" not in step) or "--mount=type=tmpfs,target=/var/lib/dpkg/updates " in step
            assert not SETTLE.endswith(" /tmp") and not re.search(rf"{COPY} \S+ /tmp", step)


def stage_steps(text: str) -> list[tuple[str, str]]:
    """(stage name, instruction) for every RUN, COPY and ADD of a rendered Dockerfile."""
    out, stage = [], None
    for part in re.split(r"^(FROM \S+ AS \S+)$", text, flags=re.M):
        head = re.match(r"FROM \S+ AS (\S+)$", part)
        if head:
            stage = head.group(1)
        else:
            out += [(stage, step) for step in instructions(part)]
    return out


def unsettled_stages(text: str) -> set[str]:
    """The stages with an unsettled step; each must reach the image only as the profile check's record,
    bind-mounted and copied as a new file (no FROM, no COPY --from, no cp that keeps its times)."""
    stages = set()
    for stage, step in stage_steps(text):
        if step.startswith("RUN") and BEGIN not in step and NEW not in step:
            stages.add(stage)  # (the record's step, one new file settled without a walk, is checked above)
    assert stages <= {"profile-check"}, stages
    for stage in stages:
        assert not re.search(rf"^FROM {stage} ", text, re.M)
        uses = re.findall(rf"--mount=type=bind,from={stage},([^ ]+)", text)
        assert uses == ["source=/opt/servebuild/profiles-checked.json,target=/mnt/profiles-checked.json"], uses
        assert f"{NEW} /mnt/profiles-checked.json /opt/servebuild/profiles-checked.json" in text
        assert "--preserve=mode,timestamps /mnt/profiles-checked.json" not in text
    return stages


def test_an_unsettled_run_skips_the_walks_and_only_the_next_run():
    out = settle(f"FROM x\n{UNSETTLED} (test)\nRUN --mount=type=bind,source=a,target=/mnt/a a\nRUN b\n")
    first, second = instructions(out)
    assert BEGIN not in first and END not in first and first.startswith(f"RUN {MOUNTS}{INDENT}")
    assert first.endswith(f"{EXPORTS} \\\n && ( a )") and scripts()["env"].endswith(f"\nexport {ENV}\n")
    assert f"{BEGIN} \\\n && ( b ) \\\n && {END}" in second and second.endswith(END)
    with pytest.raises(SettleError, match="must come right before a RUN"):
        settle(f"FROM x\n{UNSETTLED}\nCOPY a /b\n")


def test_one_new_file_is_settled_without_a_walk(tmp_path):
    """The record's step, run here under a root of our own: the file gets the carried newest time and mode
    0644 whatever the umask and the source's time, its folder keeps its time, and nothing is walked; a file
    already there, or no carried time (no settled step before it), fails the step."""
    root = image_root(tmp_path)
    (root / "opt/servebuild").mkdir()
    os.utime(root / "opt/servebuild", (1_600_000_000, 1_600_000_000))
    (root / NEWEST_DIR.lstrip("/")).mkdir(parents=True)
    (root / NEWEST.lstrip("/")).write_text("")
    os.utime(root / NEWEST.lstrip("/"), (1_700_000_000, 1_700_000_000))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (mnt / "r.json").write_text("{}")
    os.chmod(mnt / "r.json", 0o600)
    text = f"{NEW_FILE} (test)\nRUN --mount=type=bind,source=r.json,target=/mnt/r.json cp /mnt/r.json /opt/servebuild/r.json\n"

    def step():
        shell = local_shell(text, root).rstrip("\n").rsplit(INDENT, 1)[1]  # the command, after its mounts
        assert shell.startswith("sh ") and shell.endswith(" /mnt/r.json /opt/servebuild/r.json")
        return subprocess.run(
            [
                "bash",
                "-o",
                "pipefail",
                "-c",
                shell.replace("/mnt/r.json", f"{mnt}/r.json").replace(" /opt/", f" {root}/opt/"),
            ],
            cwd=root,
        )

    assert step().returncode == 0
    made = root / "opt/servebuild/r.json"
    assert made.read_text() == "{}" and made.stat().st_mtime == 1_700_000_000 and made.stat().st_mode & 0o777 == 0o644
    assert (root / "opt/servebuild").stat().st_mtime == 1_600_000_000
    assert step().returncode != 0  # the file is there already: not a new file
    made.unlink()
    (root / NEWEST.lstrip("/")).unlink()
    assert step().returncode != 0 and not made.exists()


@pytest.mark.parametrize(
    "run",
    [
        "RUN cp /mnt/a /opt/a && rm -rf /opt/b",
        "RUN cp -a /mnt/a /opt/a",
        "RUN cp /etc/passwd /opt/a",
        "RUN cp /mnt/a opt/a",
        "RUN --mount=type=bind,source=a,target=/tmp/a cp /mnt/a /opt/a",
    ],
)
def test_one_new_file_takes_one_plain_copy_from_a_mount(run):
    with pytest.raises(SettleError):
        settle(f"FROM x\n{NEW_FILE}\n{run}\n")


def test_a_run_keeps_its_flags_and_runs_its_command_between_marker_and_settle():
    out = settle(
        "FROM x\nRUN --mount=type=cache,target=/c \\\n    --mount=type=secret,id=ca \\\n    a && b \\\n && c\nENV A=1\n"
    )
    assert out.startswith(
        f"FROM x\nRUN {MOUNTS} \\\n    --mount=type=cache,target=/c \\\n    --mount=type=secret,id=ca \\\n"
    )
    # /tmp and /mnt a tmpfs in every step, the scripts bound under /mnt after it, then the step's own flags
    assert MOUNTS == (
        "--mount=type=tmpfs,target=/tmp --mount=type=tmpfs,target=/mnt --mount=type=bind,source=settle,target=/mnt/settle"
    )
    assert f"{BEGIN} \\\n && ( a && b \\\n && c ) \\\n && {END}\nENV A=1\n" in out
    assert "SOURCE_DATE_EPOCH=946684800" in START and "PYTHONHASHSEED=0" in START and MARK in SETTLE


def script_chain(name: str) -> str:
    """A script of the wrapper without its comments, its `&&` list on one line."""
    body = "".join(line + "\n" for line in scripts()[name].splitlines() if not line.startswith("#"))
    return body.replace(" &&\n", " && ").rstrip("\n")


def test_the_scripts_hold_the_prologue_and_the_settle_one_part_a_line():
    """`begin` and `end` are the inline prologue and settle of before, one `&&` list each, a part a line
    (the same commands in the same order: the same times, truncation and carried newest time); every
    script parses in sh and in bash, and each is written whole (no `set -e` is needed)."""
    assert script_chain("begin") == START and script_chain("end") == SETTLE
    assert len(scripts()["begin"].splitlines()) > 5 and len(scripts()["end"].splitlines()) > 5
    assert BEGIN == f". {WRAPPER}/begin" and END == f". {WRAPPER}/end" and EXPORTS == f". {WRAPPER}/env"
    assert sorted(scripts()) == ["begin", "copy", "end", "env", "new-file"]
    for name, text in scripts().items():
        assert text.endswith("\n") and "\r" not in text and text.isascii(), name
        for shell in ("sh", "bash"):
            proc = subprocess.run([shell, "-n"], input=text, capture_output=True, text=True)
            assert proc.returncode == 0, (name, shell, proc.stderr)
    assert scripts() == scripts()  # a function of nothing: the same bytes every render


def test_a_part_of_the_sourced_settle_that_fails_fails_the_step(tmp_path):
    """`end` is sourced by the step's shell: a part of it that fails (here the carried time's folder is a
    file) fails the RUN, as it did inline, and what the step wrote is not reported as settled."""
    root = image_root(tmp_path)
    (root / "usr/header.h").write_text("x")
    (root / "var/lib").mkdir(parents=True)
    (root / NEWEST_DIR.lstrip("/")).write_text("not a folder")
    assert run_step("RUN echo hi > f\n", root).returncode != 0
    assert (root / "f").read_text() == "hi\n"  # the command ran: it is the settle that failed


def local_wrapper(root, source: str = "/mnt/src") -> str:
    """The wrapper's scripts (what render/context.py writes into the context) made to run here under
    `root` standing for the image's /: its /usr, /opt, /var/log and the carried newest time under it (the
    marker and the scratch files stay in this host's /tmp), a COPY's source at `source`. Their folder."""
    folder = root.parent / f"{root.name}-settle"
    folder.mkdir(exist_ok=True)
    for name, text in scripts().items():
        (folder / name).write_text(
            text.replace(NEWEST_DIR, f"{root}{NEWEST_DIR}")
            .replace("find /usr /opt ", f"find {root}/usr {root}/opt ")
            .replace("-path '/usr/*' -o -path '/opt/*'", f"-path '{root}/usr/*' -o -path '{root}/opt/*'")
            .replace("find /var/log /var/cache/ldconfig ", f"find {root}/var/log ")
            .replace("find / ", f"find {root} ")
            .replace("/mnt/src", source)
        )
    return str(folder)


def local_shell(text: str, root) -> str:
    """A settled RUN made to run here under `root` (local_wrapper): its command, the scripts' folder in
    place of their bind mount."""
    return settle(text).removeprefix(f"RUN {MOUNTS}{INDENT}").replace(WRAPPER, local_wrapper(root))


def image_root(tmp_path, name="root"):
    root = tmp_path / name
    for d in ("usr", "opt", "var/log"):
        (root / d).mkdir(parents=True)
    return root


def run_step(text: str, root) -> subprocess.CompletedProcess:
    for d in ("usr", "opt"):  # their own times (now, from the files put there) are no input's time
        os.utime(root / d, (900_000_000, 900_000_000))
    return subprocess.run(["bash", "-o", "pipefail", "-c", local_shell(text, root)], cwd=root)


def test_the_settled_step_really_settles(tmp_path):
    """The composed shell, run here under a root of our own: what the step writes gets one second after
    the newest file under /usr and /opt (newest at 1,700,000,000.5 s), so no output is older than what it
    was built from; what was there before keeps its own time; a failing command fails the step (no
    settle hides it)."""
    root = image_root(tmp_path)
    (root / "usr/header.h").write_text("x")
    os.utime(root / "usr/header.h", ns=(1_700_000_000_500_000_000,) * 2)
    old = root / "old"
    old.write_text("x")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    assert run_step("RUN echo hi > f\n", root).returncode == 0
    assert (root / "f").stat().st_mtime == 1_700_000_001 and old.stat().st_mtime == 1_600_000_000
    assert (root / NEWEST.lstrip("/")).stat().st_mtime == 1_700_000_001  # carried to the next step
    assert run_step("RUN false\n", root).returncode != 0
    # inputs older than 2000 (and nothing carried): the step's time is 2000-01-01 at the earliest (run_step
    # leaves /usr and /opt at 1998, nothing in them)
    bare = image_root(tmp_path, "bare")
    assert run_step("RUN echo hi > g\n", bare).returncode == 0
    assert (bare / "g").stat().st_mtime == 946684800


def test_the_newest_time_is_carried_from_step_to_step(tmp_path):
    """Each settled step leaves the newest time under /usr and /opt for the next (no walk of the image
    per step): a file the step put there with an older time that is still the newest (as dpkg and `cp -a`
    keep the times they are given) sets it; the next step reads it and does not walk (a file slipped in
    between the two steps, which no image build does, is not seen)."""
    root = image_root(tmp_path)
    (root / "usr/header.h").write_text("x")
    os.utime(root / "usr/header.h", (1_700_000_000, 1_700_000_000))
    assert run_step("RUN echo one > a\n", root).returncode == 0
    assert (root / "a").stat().st_mtime == 1_700_000_001
    step = "RUN echo lib > usr/lib.so && touch -d @1750000000 usr/lib.so && echo two > b\n"
    assert run_step(step, root).returncode == 0
    assert (root / "b").stat().st_mtime == 1_700_000_002 and (root / "usr/lib.so").stat().st_mtime == 1_750_000_000
    assert (root / NEWEST.lstrip("/")).stat().st_mtime == 1_750_000_000
    (root / "opt/slipped").write_text("x")
    os.utime(root / "opt/slipped", (1_760_000_000, 1_760_000_000))
    assert run_step("RUN echo three > c\n", root).returncode == 0
    assert (root / "c").stat().st_mtime == 1_750_000_001  # read from the carried time, not walked
    (root / NEWEST.lstrip("/")).unlink()  # no carried time (a stage on a base): the walk finds it
    assert run_step("RUN echo four > d\n", root).returncode == 0
    assert (root / "d").stat().st_mtime == 1_760_000_001


def test_the_settled_step_empties_the_logs_it_wrote(tmp_path):
    """The composed shell, run here: a log file (under /var/log) the step wrote or appended to is left
    empty, so the layer holds no apt or dpkg log of the day it was built; a log the step did not touch
    keeps its content."""
    root = image_root(tmp_path)
    logs = root / "var/log"
    (logs / "old.log").write_text("from an earlier step\n")
    (logs / "apt.log").write_text("earlier\n")
    os.utime(logs / "old.log", (1_700_000_000, 1_700_000_000))
    os.utime(logs / "apt.log", (1_700_000_000, 1_700_000_000))
    assert run_step("RUN echo installed >> var/log/apt.log && echo new > var/log/dpkg.log\n", root).returncode == 0
    assert (logs / "apt.log").read_text() == "" and (logs / "dpkg.log").read_text() == ""
    assert (logs / "old.log").read_text() == "from an earlier step\n"


@pytest.mark.parametrize(
    "copy, bind, command",
    [
        ("COPY --from=deps /opt/venv /opt/venv", "from=deps,source=/opt/venv,target=/mnt/src", "stage /opt/venv"),
        (
            "COPY launchers/ /usr/local/bin/",
            "source=launchers/,target=/mnt/src",
            "context /usr/local/bin /usr/local/bin/launchers",
        ),
        (
            "COPY manifest.json /opt/servebuild/manifest.json",
            "source=manifest.json,target=/mnt/src",
            "context /opt/servebuild/manifest.json",
        ),
    ],
)
def test_a_copy_becomes_a_settled_run_over_a_bind_under_a_tmpfs(copy, bind, command):
    out = settle(copy + "\n")
    assert (
        out
        == f"RUN {MOUNTS}{INDENT}--mount=type=bind,{bind}{INDENT}{BEGIN} \\\n && ( {COPY} {command} ) \\\n && {END}\n"
    )
    assert MOUNTS.startswith(f"{TMP} --mount=type=tmpfs,target=/mnt ")
    assert scripts()["copy"].count("cp -a --no-preserve=ownership /mnt/src") == 2


def test_a_copy_into_a_directory_runs_as_copy_would(tmp_path):
    """The composed copy, run here with /mnt/src and the destination under tmp_path: a directory's
    contents land in the destination, a file lands at the destination path or inside a dest/."""
    src = tmp_path / "mnt" / "src"
    (src / "nested").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "nested" / "b.txt").write_text("b")
    os.utime(src / "a.txt", (1_100_000_000, 1_100_000_000))
    os.utime(src / "nested", (1_700_000_123.5, 1_700_000_123.5))  # as BuildKit's context transfer left it

    wrapper = local_wrapper(tmp_path / "root", source=str(src))

    def run(copy: str):
        body = settle(copy + "\n").split("&& ( ", 1)[1].split(" ) \\\n", 1)[0]
        assert body.startswith(f"{COPY} ")
        body = body.replace(WRAPPER, wrapper).replace(" /dst", f" {tmp_path}/dst")
        subprocess.run(
            ["bash", "-c", body], check=True, env={"PATH": os.environ["PATH"], "SERVEBUILD_SETTLED": "1000000000"}
        )

    run("COPY dir/ /dst/d")
    assert (tmp_path / "dst" / "d" / "a.txt").read_text() == "a"
    # a file keeps its mtime; every directory of a context source gets the step's settled time
    assert os.stat(tmp_path / "dst" / "d" / "a.txt").st_mtime == 1_100_000_000
    assert os.stat(tmp_path / "dst" / "d" / "nested").st_mtime == 1_000_000_000
    assert os.stat(tmp_path / "dst" / "d").st_mtime == 1_000_000_000
    # from a stage, the directories keep theirs too (cp -a)
    run("COPY --from=deps /dir /dst/s")
    assert os.stat(tmp_path / "dst" / "s" / "nested").st_mtime == 1_700_000_123.5
    assert os.stat(tmp_path / "dst" / "s" / "a.txt").st_mtime == 1_100_000_000
    shutil.rmtree(src)
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("file")
    run("COPY f.txt /dst/e/f.txt")
    run("COPY f.txt /dst/g/")
    assert (tmp_path / "dst" / "e" / "f.txt").read_text() == "file"
    assert (tmp_path / "dst" / "g" / "f.txt").read_text() == "file"


@pytest.mark.parametrize(
    "text, words",
    [
        ('RUN ["/bin/sh", "-c", "x"]\n', "exec-form RUN"),
        ("RUN --mount=type=bind,source=a,target=/tmp/a cat /tmp/a\n", "must target /mnt/NAME"),
        ("RUN --mount=type=bind,source=a,target=/mnt/settle cat /mnt/settle\n", "finds the settle scripts"),
        ("RUN --mount=type=bind,source=a,target=/mnt/settle/begin true\n", "finds the settle scripts"),
        ("COPY --chown=1:1 a /a\n", "COPY --chown=1:1 cannot be settled"),
        ("COPY a b /dst/\n", "one source and one destination"),
        ("COPY wheels/ /tmp/wheels/\n", "writes into /tmp, which every step mounts as a tmpfs"),
        ("ADD source.tar /tmp/\n", "writes into /tmp, which every step mounts as a tmpfs"),
    ],
)
def test_what_cannot_be_settled_is_refused(text, words):
    with pytest.raises(SettleError, match=re.escape(words)):
        settle(text)


def test_created_is_a_fact_of_the_inputs(monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    torch = load_recipe("torch-cu130-bookworm", REPO_ROOT)
    assert created_timestamp(torch, "linux/amd64") == (
        "2026-03-24T00:00:00Z",
        "exclude-newer of constraints/torch-cu130/py3.11-linux-amd64.txt",
    )
    assert created_timestamp() == ("2000-01-01T00:00:00Z", "fixed (no dated input)")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert created_timestamp(torch, "linux/amd64") == ("2023-11-14T22:13:20Z", "$SOURCE_DATE_EPOCH")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(InputError, match="not a number of seconds"):
        created_timestamp(torch, "linux/amd64")


@pytest.mark.parametrize(
    "precompiled, created, source",
    [
        ("2026-05-01T00:00:00Z", "2026-07-26T00:00:00Z", "constraints/sglang/py3.12-linux-amd64.txt"),
        ("2026-08-01T00:00:00Z", "2026-08-01T00:00:00Z", "constraints/sglang/precompiled-py3.12-linux-amd64.txt"),
    ],
)
def test_created_is_the_newest_exclude_newer_date_of_the_sets_the_image_installs(
    tmp_path, monkeypatch, precompiled, created, source
):
    """Of two hashed sets with other exclude-newer dates the image is created at the newer one, whichever
    set holds it (issue 31, point 10: the oldest could be taken)."""
    from support import copy_real

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    root = tmp_path / "project"
    copy_real(
        root, "recipes/sglang-native-fp8.yaml", "recipes/torch-cu130.yaml", "constraints", "patches", "recordings"
    )
    path = root / "constraints/sglang/precompiled-py3.12-linux-amd64.txt"
    text = path.read_text()
    assert text.count("2026-07-26T00:00:00Z") >= 1
    path.write_text(text.replace("2026-07-26T00:00:00Z", precompiled))
    assert created_timestamp(load_recipe("sglang-native-fp8", root), "linux/amd64") == (
        created,
        f"exclude-newer of {source}",
    )


def test_the_settled_config_changes_only_the_times_after_the_base():
    config = {
        "architecture": "amd64",
        "created": "2026-12-01T10:00:00.123Z",
        "rootfs": {"diff_ids": ["a", "b"]},
        "history": [
            {"created": "2026-07-01T00:00:00Z", "created_by": "ADD rootfs.tar /"},
            {"created": "2026-12-01T10:00:00.1Z", "created_by": "RUN x"},
            {"created": "2026-12-01T10:00:01.5Z", "created_by": "ENV A=1", "empty_layer": True},
        ],
        "config": {"Labels": {"b": "1", "a": "2"}},
    }
    out = settled_config(config, "2000-01-01T00:00:00Z", keep=1)
    assert out["created"] == "2000-01-01T00:00:00Z"
    assert [h["created"] for h in out["history"]] == ["2026-07-01T00:00:00Z"] + ["2000-01-01T00:00:00Z"] * 2
    assert {k: v for k, v in out.items() if k not in ("created", "history")} == {
        k: v for k, v in config.items() if k not in ("created", "history")
    }
    assert [{k: v for k, v in h.items() if k != "created"} for h in out["history"]] == [
        {k: v for k, v in h.items() if k != "created"} for h in config["history"]
    ]
    # canonical bytes: key order does not matter, so two engines' configs of one image hash alike
    shuffled = dict(reversed(list(config.items())))
    shuffled["config"] = {"Labels": {"a": "2", "b": "1"}}
    assert canonical(settled_config(shuffled, "2000-01-01T00:00:00Z", 1)) == canonical(out)


def _with_cache(records: list) -> dict:
    return {
        "created": "x",
        "rootfs": {"diff_ids": []},
        "moby.buildkit.cache.v0": base64.b64encode(json.dumps(records).encode()).decode(),
    }


CACHE = [
    {"digest": "sha256:1"},
    {
        "layers": [{"layer": 1, "createdAt": "2026-12-02T00:10:26.419068792Z"}],
        "digest": "sha256:2",
        "inputs": [[{"link": 0}]],
    },
]


def test_the_image_config_carries_no_inline_cache():
    """BuildKit's inline cache lists every path the builder has seen to each result, so an engine that
    built the same steps before writes more records than a fresh one (CI: one image, two engines, two
    ids): the image's config is settled without it, and two builders' histories give one config."""
    seen_before = CACHE + [{"digest": "sha256:2", "inputs": [[{"link": 3}]]}, {"digest": "sha256:9"}]
    fresh, used = (settled_config(_with_cache(c), "2000-01-01T00:00:00Z", 0) for c in (CACHE, seen_before))
    assert "moby.buildkit.cache.v0" not in fresh
    assert canonical(fresh) == canonical(used)
    assert fresh == {"created": "2000-01-01T00:00:00Z", "rootfs": {"diff_ids": []}}


def test_the_cache_carrier_keeps_the_inline_cache_with_the_settled_time():
    """--cache-to pushes the same layers under a config with the inline cache, the clock in each of its
    layer records set to the build's time; a build without one has no carrier."""
    config = _with_cache(CACHE)
    settled = settled_config(config, "2000-01-01T00:00:00Z", 0)
    out = cache_config(config, settled, "2000-01-01T00:00:00Z")
    records = json.loads(base64.b64decode(out["moby.buildkit.cache.v0"]))
    assert records[1]["layers"] == [{"layer": 1, "createdAt": "2000-01-01T00:00:00Z"}]
    assert records[0] == CACHE[0] and records[1]["inputs"] == CACHE[1]["inputs"]
    assert {k: v for k, v in out.items() if k != "moby.buildkit.cache.v0"} == settled
    assert cache_config(settled, settled, "2000-01-01T00:00:00Z") is None


class StoreDocker:
    """A stand-in for the engine's CLI in the store read alone, because a real engine cannot be made to
    answer with other bytes, or with no store, on demand (the real store read runs in every build of
    tests/integration): it answers `info` and `run` with what it is given."""

    def __init__(self, out: bytes, code: int = 0, info: dict | None = None):
        self.out, self.code, self.calls = out, code, []
        self._info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlay2"} if info is None else info

    def info(self):
        return self._info

    def run(self, *args, check=True):
        self.calls.append(args)
        return subprocess.CompletedProcess(args, self.code, self.out.decode(), "")


def test_the_image_store_is_trusted_only_for_bytes_that_hash_to_the_image_id():
    from servebuild.build.imageconfig import config_from_store

    raw = b'{"created":"x","rootfs":{"type":"layers","diff_ids":[]}}'
    image_id = "sha256:" + __import__("hashlib").sha256(raw).hexdigest()
    good = StoreDocker(raw)
    assert config_from_store(good, image_id, "linux/amd64") == json.loads(raw)
    assert any("/var/lib/docker/image/overlay2/imagedb/content/sha256:/store:ro" in a for a in good.calls[0])
    assert config_from_store(StoreDocker(raw.replace(b"x", b"y")), image_id, "linux/amd64") is None  # other bytes
    assert config_from_store(StoreDocker(b"", code=125), image_id, "linux/amd64") is None  # no such store
    assert config_from_store(StoreDocker(raw, info={}), image_id, "linux/amd64") is None  # an engine that does not say


def test_the_lists_read_beside_the_config_do_not_loosen_its_check():
    """The package lists are read in the container that reads the config (one container a build): the
    config is still taken only for bytes that hash to the image id, and what the command printed after it
    never reaches the config; a store that lies, or a command that fails, gives neither (then the build
    reads the config from `docker save` and the lists in a container of their own)."""
    from servebuild.build.imageconfig import OUTPUT_AFTER, config_and_output

    raw = b'{"created":"x","rootfs":{"type":"layers","diff_ids":[]}}'
    image_id = "sha256:" + __import__("hashlib").sha256(raw).hexdigest()
    printed = b"torch==2.11.0\n#apt\nbash=5.2\n#aot\n"
    both = StoreDocker(raw + b"\n" + OUTPUT_AFTER.encode() + b"\n" + printed)
    assert config_and_output(both, image_id, "linux/amd64", "cat lists") == (json.loads(raw), printed.decode())
    assert "/bin/sh" in both.calls[0] and "cat lists; }" in both.calls[0][-1]
    lying = StoreDocker(raw.replace(b"x", b"y") + b"\n" + OUTPUT_AFTER.encode() + b"\n" + printed)
    assert config_and_output(lying, image_id, "linux/amd64", "cat lists") == (None, None)
    no_marker = StoreDocker(raw + printed)  # the marker never printed: the bytes are not the config alone
    assert config_and_output(no_marker, image_id, "linux/amd64", "cat lists") == (None, None)
    failed = StoreDocker(raw + b"\n" + OUTPUT_AFTER.encode() + b"\n", code=1)
    assert config_and_output(failed, image_id, "linux/amd64", "cat lists") == (None, None)
    assert config_and_output(StoreDocker(raw), image_id, "linux/amd64") == (json.loads(raw), None)  # nothing to run


def test_the_lists_are_parsed_as_the_image_printed_them():
    from servebuild.build.run import parse_lists
    from servebuild.errors import DockerError

    assert parse_lists("torch==2.11.0\nnumpy==2.3\n#apt\nbash=5.2\n#aot\n") == (
        ["torch==2.11.0", "numpy==2.3"],
        ["bash=5.2"],
        None,
    )
    assert parse_lists('a==1\n#apt\n#aot\n{"kernels": []}\n')[2] == {"kernels": []}
    with pytest.raises(DockerError, match="aot.json is not JSON"):
        parse_lists("a==1\n#apt\n#aot\n{not json\n")


def test_the_store_script_runs_in_a_real_shell_and_parts_where_the_reader_parts(tmp_path):
    """The line the container runs, run here by /bin/sh: the config's bytes, then the marker line, then the
    lists, parted by config_and_output's own rule. (The marker once held an apostrophe inside single quotes:
    the shell refused the line, and every build fell back to a `docker save` of the whole image, 70 s for
    SGLang's, with nothing but the time to show it.)"""
    from servebuild.build.imageconfig import OUTPUT_AFTER, store_script
    from servebuild.build.run import LISTS

    raw = '{"created":"x","rootfs":{"type":"layers","diff_ids":[]}}'
    (tmp_path / "config").write_text(raw)
    root = tmp_path / "image"
    (root / "opt/servebuild").mkdir(parents=True)
    (root / "opt/servebuild/packages.txt").write_text("torch==2.11.0\n")
    (root / "opt/servebuild/apt-runtime.txt").write_text("bash=5.2\n")
    script = store_script(str(tmp_path / "config"), LISTS.replace("/opt/", f"{root}/opt/"))
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    head, found, output = proc.stdout.partition(f"\n{OUTPUT_AFTER}\n")
    assert found and head == raw and output == "torch==2.11.0\n#apt\nbash=5.2\n#aot\n"


def test_what_the_command_writes_in_the_markers_clock_tick_is_newer_than_the_marker(tmp_path):
    """File times come from the kernel's coarse clock: a file written in the same tick as the step's marker
    has the marker's time, is not `-newer` than it and would keep the real time it was made (CI's farm
    test built one recipe into two images on two engines this way; 51 of 300 directories made right after
    the marker kept theirs in a container of the base). Every settled step starts by waiting until the
    clock has moved past its marker, so what its command writes first is newer, every time (with a plain
    `touch` of the marker, nearly every directory made right after it is missed on this host)."""
    assert START.startswith(PAST_MARK + " && ") and PAST_MARK.startswith(f"touch {MARK} ")
    missed = []
    for attempt in range(60):
        made = tmp_path / f"made{attempt}"
        shell = f"{PAST_MARK} && mkdir {made} && find {made} -newer {MARK}"
        out = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True).stdout
        if out.strip() != str(made):
            missed.append(made.name)
    assert missed == [], f"made in the marker's tick, not newer than it: {missed}"


class FakeEngine:
    """A fake local engine (no Docker here: this tier runs without one) whose `run_in_image` prints canned
    lists; `ran` counts the containers started."""

    endpoint = None
    name = "local engine"  # as DockerClient.name says it

    def __init__(self):
        self.ran = 0

    def run_in_image(self, image_id, *args, **kwargs):
        self.ran += 1
        return "torch==2.11.0\n#apt\nbash=5.2\n#aot\n"


def test_a_local_build_says_when_its_config_came_from_docker_save():
    """The lists come from the container that read the config (no second container, nothing said); when
    that read failed on a local engine (the build then took the config from a `docker save` of the whole
    image: 70 s a variant when a quoting bug made every build do so, seen only as time), it says so in one
    line, naming the engine, and reads the lists in a container of their own."""
    import io

    from servebuild.build.run import image_lists

    engine, echo = FakeEngine(), io.StringIO()
    lists = image_lists(engine, "sha256:" + "a" * 64, "linux/amd64", "torch==2.11.0\n#apt\nbash=5.2\n#aot\n", echo)
    assert lists == (["torch==2.11.0"], ["bash=5.2"], None) and engine.ran == 0 and echo.getvalue() == ""
    assert image_lists(engine, "sha256:" + "a" * 64, "linux/amd64", None, echo) == lists and engine.ran == 1
    said = echo.getvalue().splitlines()
    assert len(said) == 1 and "docker save" in said[0] and "local engine's image store" in said[0], said


def test_a_comment_ending_in_a_backslash_does_not_swallow_the_next_run():
    """Docker reads a comment line whole, a backslash at its end included: the RUN after it is its own
    instruction, and settled."""
    out = settle("FROM x\n# ends in a backslash \\\nRUN echo hi\n")
    assert out.startswith("FROM x\n# ends in a backslash \\\nRUN ") and f"{BEGIN} \\\n && ( echo hi )" in out


def test_the_settle_sets_a_links_own_time_and_leaves_its_target_alone(tmp_path):
    """The step's outputs are touched with -h: a link the step made gets the step's time, the older file it
    points to keeps its own (touch without -h would set the target's, and the link keep its real time)."""
    root = image_root(tmp_path)
    (root / "usr/header.h").write_text("x")
    os.utime(root / "usr/header.h", (1_700_000_000, 1_700_000_000))
    old = root / "old"
    old.write_text("x")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    assert run_step("RUN ln -s old link\n", root).returncode == 0
    assert old.stat().st_mtime == 1_600_000_000
    assert os.lstat(root / "link").st_mtime == 1_700_000_001


def test_the_renderer_writes_the_scripts_into_the_context_every_step_binds(tmp_path):
    """render/context.py writes the wrapper's scripts into the context's folder `settle/` (the bind every
    step mounts), their bytes scripts()'s, their mode and mtime from their content like every context
    file: two contexts of one recipe hold the same folder, byte for byte and time for time."""
    from servebuild.render.context import content_mtime, write_context
    from servebuild.render.settle import CONTEXT_DIR, WRAPPER_BIND

    assert WRAPPER_BIND == f"--mount=type=bind,source={CONTEXT_DIR},target={WRAPPER}"
    (tmp_path / "source.tar").write_bytes(b"")
    loaded = load_recipe("torch-cu130-bookworm", REPO_ROOT)
    made = [
        write_context(loaded, "linux/amd64", {"build": "b", "runtime": "r"}, tmp_path / n, {}, tmp_path / "source.tar")
        for n in ("one", "two")
    ]
    for context in made:
        folder = context / CONTEXT_DIR
        assert sorted(p.name for p in folder.iterdir()) == sorted(scripts())
        for name, text in scripts().items():
            path = folder / name
            assert path.read_text() == text and path.stat().st_mode & 0o777 == 0o644
            assert path.stat().st_mtime_ns == content_mtime(path)
        assert f"source={CONTEXT_DIR},target={WRAPPER}" in (context / "Dockerfile").read_text()
    assert [(folder / n).stat().st_mtime_ns for n in scripts() for folder in [made[0] / CONTEXT_DIR]] == [
        (made[1] / CONTEXT_DIR / n).stat().st_mtime_ns for n in scripts()
    ]
