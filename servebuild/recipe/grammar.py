"""The value grammar every station shares: names, SHAs, versions, directories, docker references.

Patterns only (no models, no I/O): the schema validates fields with them, the plan checks --tag and
--cache-from, the CLI checks --registry and --image.
"""

from __future__ import annotations

import re

SHA40 = re.compile(r"^[0-9a-f]{40}\Z")
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}\Z")
ARCH_LIST = re.compile(r"^[0-9]+\.[0-9]+a?(;[0-9]+\.[0-9]+a?)*(\+PTX)?\Z")
# docker reference grammar: [host[:port]/]path-components[:tag][@digest], lower-case path,
# tag <= 128 characters; `{arch}` (per-arch local bases) stands for an architecture name
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
HOST = r"(?:(?:[a-zA-Z0-9-]+\.)+[a-zA-Z0-9-]+(?::[0-9]+)?|[a-zA-Z0-9-]+:[0-9]+|localhost)"  # has . or :port
REFERENCE = re.compile(
    rf"^(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    rf"(?:@sha256:[0-9a-f]{{64}})?\Z"
)


MAX_REFERENCE = 255  # characters of a docker reference, as --tag and --cache-from take it
IMAGE_ID = re.compile(r"\A(sha256:)?[0-9a-f]{12,64}\Z")  # an image id, whole or its first 12+ digits


class _ImageRef:
    """`IMAGE_REF.match(value)`: the docker reference grammar, `{arch}` allowed where a name is, at
    most MAX_REFERENCE characters (wherever it comes from: a recipe, a mirror map's key or value)."""

    @staticmethod
    def match(value: object):
        if not isinstance(value, str) or len(value) > MAX_REFERENCE:
            return None
        return REFERENCE.match(value.replace("{arch}", "amd64"))


IMAGE_REF = _ImageRef()
# values that reach Dockerfile lines or shell words: no whitespace, quotes, `$`, `;` or control characters
REL_DIR = re.compile(r"^(\.|[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)*)\Z")
ABS_DIR = re.compile(r"^(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+/?\Z")
VERSION = re.compile(r"^[0-9][0-9A-Za-z.!+-]{0,63}\Z")
APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,100}(=[A-Za-z0-9.+:~-]{1,100})?\Z")
GIT_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,127}\Z")
DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?\Z")
CUDA_VERSION = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}\Z")
SM_ARCH = re.compile(r"^sm_[0-9]{2,3}a?\Z")
# launchers go to /usr/local/bin, ahead of /usr/bin and /bin on PATH: a profile must not shadow a
# command that servebuild, the smoke suite or an operator runs in the image
RESERVED_COMMANDS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "cat",
        "sleep",
        "env",
        "ls",
        "id",
        "rm",
        "cp",
        "mv",
        "touch",
        "test",
        "true",
        "false",
        "python",
        "python3",
        "pip",
        "pip3",
        "nvcc",
        "nvidia-smi",
        "uname",
        "grep",
        "sed",
        "awk",
        "tar",
        "du",
        "df",
        "printenv",
        "which",
        "su",
        "sudo",
        "ldconfig",
        "git",
        "curl",
        "wget",
        "docker",
        "make",
        "gcc",
        "cc",
        "servebuild-bench",
        # what the image's own RUN steps run after the launchers are on PATH (render.launchers.step_commands
        # over every committed recipe: tests/unit/test_reserved_launchers.py holds this list to cover them)
        "apt-get",
        "chmod",
        "dpkg-query",
        "echo",
        "exit",
        "export",
        "find",
        "ln",
        "mkdir",
        "read",
        "sort",
        "stat",
        "truncate",
        # what the image runs by name at test and serve time, ahead of which /usr/local/bin sits on PATH: the
        # smoke suite (`numactl --show`, `cuobjdump --list-elf`), vLLM's NUMA binding (numactl), torch's and the
        # engines' JIT compiles (ninja)
        "cuobjdump",
        "ninja",
        "numactl",
    }
)  # servebuild-bench: the bench every engine image carries; every servebuild-* name is reserved too
RESERVED_PREFIX = "servebuild"  # servebuild's own commands and tools (servebuild-bench, -info, -cache)


def reserved_command(name: str) -> bool:
    """Whether a launcher of this name would shadow a command servebuild, the smoke suite or an operator runs."""
    return name in RESERVED_COMMANDS or name.startswith(RESERVED_PREFIX)


USER = re.compile(r"^([0-9]{1,10}(:[0-9]{1,10})?|[a-z_][a-z0-9_-]{0,31})\Z")
# an image tag as `docker tag` takes it: [host[:port]/]path-components[:tag] (no digest, no `{arch}`)
TAG = re.compile(rf"^(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?\Z")


def shown(value: object, at_most: int = 80) -> str:
    """A value quoted for an error line, cut to `at_most` characters (a 5,000-character name is not echoed)."""
    text = repr(value)
    return text if len(text) <= at_most else f"{text[:at_most]}... ({len(str(value))} characters)"


def matches(pattern: re.Pattern, value: str, what: str) -> str:
    if not pattern.match(value) or ".." in value.split("/"):
        raise ValueError(f"{value!r} is not {what}")
    return value
