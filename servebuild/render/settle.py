"""Settled layers: every RUN and COPY of a rendered Dockerfile rewritten so that the layer it makes is
a function of what it installs, not of when, where or under which umask it ran (issue 20).

Docker 20.10's BuildKit stamps each file a step writes with the time it ran, and COPY moves the
mtime of the directories it writes into. One rewrite, applied to the whole rendered text, settles
every step the same way:

- each RUN runs between a marker and a settle: everything on the image's filesystem newer than the
  marker gets the step's settled time (STEP_TIME below; one walk of the filesystem a step, NEWEST below), log files and ldconfig's cache that the step wrote are
  truncated; the step runs with SOURCE_DATE_EPOCH (py_compile, hence pip, writes checked-hash .pyc,
  whose bytes do not hold a time), PYTHONHASHSEED=0 (set and frozenset constants marshal in one
  order) and PYTHONDONTWRITEBYTECODE=1 (an import during the step writes no timestamped .pyc);
- each COPY becomes such a RUN: the source is bind-mounted (from the context or a stage) and copied
  with `cp -a`, files owned by root (as COPY makes them); mtimes come from the source, but for the
  directories of a context source (BuildKit's context transfer stamps nested ones with its clock),
  which get the step's settled time;
- every bind mount sits under a tmpfs at /mnt, so the mount points BuildKit creates (and removes
  after the step, moving their parent's mtime) live in the tmpfs, never in the layer.

The wrapper is written once, as small POSIX sh scripts in the build context's folder `settle/`
(`scripts()` gives their bytes; render/context.py writes them), bind-mounted read-only into every step
at /mnt/settle: it lands in no layer, and each RUN reads as what it does,
`. /mnt/settle/begin && ( COMMAND ) && . /mnt/settle/end`; a COPY reads `sh /mnt/settle/copy
context|stage INTO [TARGET]`. `begin` and `end` are sourced by the step's own shell (what `begin`
exports reaches the command and `end`), and each is one `&&` list: a failing part fails the step.

The templates write plain RUN and COPY; nothing else in them knows about settling, but for one
line: a RUN right after the comment `# servebuild: unsettled ...` keeps its tmpfs mounts and its
environment but skips the settle's walk of the filesystem (about 0.5 s on SGLang's image). Only a step whose
layer reaches no image may carry it: the profile check, whose record is copied into the image as a
new file (the copying step settles it).
"""

from __future__ import annotations

import re
import shlex

from servebuild.sources.archives import TAR_MTIME

MARK = "/tmp/.servebuild-layer-start"
MOUNT_ROOT = "/mnt"
SOURCE = f"{MOUNT_ROOT}/src"  # where a COPY's source is bind-mounted
ENV = f"SOURCE_DATE_EPOCH={TAR_MTIME} PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1"
# The settled time of a step: one second after the newest file under /usr and /opt before it ran (never
# before TAR_MTIME). What a step builds is then never older than what it was built from: ninja and make
# rebuild an output older than one of its inputs, and FlashInfer's kernels compiled at build time were
# found stale at serve time when every output was set to 2000-01-01 under newer system headers. The
# time is a function of the earlier layers (no mount point BuildKit makes lies under /usr or /opt).
STEP_TIME = "SERVEBUILD_SETTLED"  # exported: a tool that records times (aot_build's ninja state) writes this one
TIMES = "/tmp/.servebuild-layer-times"
# The newest time under /usr and /opt, carried from step to step: each settled step leaves it as the mtime
# of NEWEST (in the layer, outside /usr and /opt), so the next step reads it instead of walking the image
# (0.6-0.9 s a step on SGLang's 116,618 files). The settle's one walk computes it: the step's settled time
# (what it wrote now has it), or a file it put under /usr or /opt with an older time that is still newer
# (dpkg and `cp -a` keep the times they are given), whichever is newer. A stage on a base without NEWEST
# walks /usr and /opt once. REF holds the same time for the settle's `-newer` (in the step's tmpfs).
NEWEST_DIR = "/var/lib/servebuild"
NEWEST = f"{NEWEST_DIR}/newest"
REF = "/tmp/.servebuild-newest"
# File times come from the kernel's coarse clock (a tick of a few ms): a file the command wrote in the tick
# the marker was made in has the marker's time, is not `-newer` than it, and would keep the real time it
# was made (51 of 300 directories made right after the marker, in a container of the base). So the step
# waits until a probe in its /tmp is newer than the marker (a few ms) before the command runs; a clock
# that does not move past it in 20,000 tries (a clock stepped back) fails the step with a message. The
# probe stays until the settle (one fork fewer between the wait and the command).
PROBE = "/tmp/.servebuild-layer-probe"
PAST_MARK = (
    f'touch {MARK} && n=0 && until touch {PROBE} && [ -n "$(find {PROBE} -newer {MARK})" ]; do n=$((n + 1)); '
    f"[ $n -lt 20000 ] || {{ echo 'servebuild: the clock did not move past the step marker' >&2; exit 1; }}; "
    f"done"
)
# the wrapper's two halves, one part of each `&&` list a line in the scripts (scripts(): begin, end)
START_PARTS = (
    PAST_MARK,
    f"export {ENV}",
    f"if [ -f {NEWEST} ]; then newest=$(stat -c %Y {NEWEST}); else "
    f"{{ find /usr /opt -xdev -printf '%T@\\n' > {TIMES} 2>/dev/null || true; }} "
    f"&& sort -n -r -o {TIMES} {TIMES} && {{ read -r newest < {TIMES} || newest=0; }}; fi",
    "newest=${newest%%.*}",
    f'touch -d "@$newest" {REF}',
    f"export {STEP_TIME}=$(( newest + 1 > {TAR_MTIME} ? newest + 1 : {TAR_MTIME} ))",
)
SETTLE_PARTS = (
    f"find /var/log /var/cache/ldconfig -xdev -type f -newer {MARK} -exec truncate -s 0 {{}} +",
    f"mkdir -p {NEWEST_DIR}",
    f"touch {NEWEST}",
    f'find / -xdev \\( -newer {MARK} -exec touch -h -d "@${STEP_TIME}" {{}} + \\) '
    f"-o \\( -newer {REF} \\( -path '/usr/*' -o -path '/opt/*' \\) -printf '%T@\\n' \\) > {TIMES}",
    f"sort -n -r -o {TIMES} {TIMES}",
    f"{{ read -r newest < {TIMES} || newest=0; }}",
    "newest=${newest%%.*}",
    f'touch -h -d "@$(( newest > {STEP_TIME} ? newest : {STEP_TIME} ))" {NEWEST}',
    f"rm {MARK} {PROBE} {TIMES} {REF}",
)
START = " && ".join(START_PARTS)
SETTLE = " && ".join(SETTLE_PARTS)
# the wrapper: scripts() in the context's folder CONTEXT_DIR, bind-mounted read-only at WRAPPER in every step
CONTEXT_DIR = "settle"
WRAPPER = f"{MOUNT_ROOT}/settle"
WRAPPER_BIND = f"--mount=type=bind,source={CONTEXT_DIR},target={WRAPPER}"
MNT = f"--mount=type=tmpfs,target={MOUNT_ROOT}"
BEGIN = f". {WRAPPER}/begin"  # sourced: what it exports reaches the command and END
END = f". {WRAPPER}/end"
EXPORTS = f". {WRAPPER}/env"  # the environment alone (an unsettled step)
COPY = f"sh {WRAPPER}/copy"  # a COPY as a RUN: copy context|stage INTO [TARGET]
NEW = f"sh {WRAPPER}/new-file"  # one new file: new-file SOURCE DEST
UNSETTLED = "# servebuild: unsettled"
# the next RUN copies one file new to the image from a bind mount: settled without a walk (_new_file)
NEW_FILE = "# servebuild: one new file"
INDENT = " \\\n    "
# /tmp of the step is a tmpfs: the marker, pip's and nvcc's scratch never touch the image's /tmp. A directory
# a step writes into and leaves as it was but for its mtime (/tmp after pip, the marker and the times file)
# is in the layer or not depending on how the engine takes the diff: the overlay upper directory (Docker's
# native diff) holds every directory copied up, the walking diff (used when the layer's parent in the store
# is not its overlay parent: an engine that already held an equal parent layer) skips a directory whose only
# change is its mtime. The same step then gave two layers on two engines (issue 29, CI of stop 34).
TMP = "--mount=type=tmpfs,target=/tmp"
# every step's first mounts, on the RUN line itself: the step's own flags follow, one a line
MOUNTS = f"{TMP} {MNT} {WRAPPER_BIND}"


class SettleError(ValueError):
    """A rendered instruction that cannot be settled (a template bug, not a user's input)."""


def settle(dockerfile: str) -> str:
    """The Dockerfile with every RUN and COPY settled; other lines as they were."""
    out = []
    marker = None  # UNSETTLED or NEW_FILE: the comment that names how the next RUN is composed
    for instruction in _instructions(dockerfile.splitlines()):
        keyword = instruction.split(None, 1)[0].upper() if instruction.strip() else ""
        named = next((name for name in (UNSETTLED, NEW_FILE) if instruction.startswith(name)), None)
        if named:
            marker = named
            out.append(instruction)
            continue
        if marker and keyword != "RUN":
            raise SettleError(f"{marker!r} must come right before a RUN, not {instruction[:80]!r}")
        if keyword == "RUN":
            out.append(_new_file(instruction) if marker == NEW_FILE else _run(instruction, settled=not marker))
            marker = None
        elif keyword == "COPY":
            out.append(_copy(instruction))
        elif keyword == "ADD" and _dest(instruction).startswith("/tmp"):
            raise SettleError(
                f"{instruction.split(chr(10))[0][:80]!r} writes into /tmp, which every step mounts as a "
                f"tmpfs (the next RUN sees nothing of it): bind-mount the file in the RUN that "
                f"uses it, e.g. RUN --mount=type=bind,source=source.tar,target=/mnt/source.tar "
                f"tar -xf /mnt/source.tar -C /tmp && ..."
            )
        else:
            out.append(instruction)
    return "\n".join(out) + "\n"


def _new_file(instruction: str) -> str:
    """A RUN that is one `cp /mnt/FILE DEST` of a file new to the image, settled without a walk: DEST gets
    the carried newest time (the step writes nothing else: no input is newer), mode 0644, and its folder
    keeps its time. The carried time must be there (a settled step ran before it in the stage)."""
    flags, command = _split_flags(instruction.split(None, 1)[1])
    words = shlex.split(command.replace("\\\n", " "))
    if len(words) != 3 or words[0] != "cp" or not words[1].startswith(MOUNT_ROOT + "/") or not words[2].startswith("/"):
        raise SettleError(f"{NEW_FILE!r} takes one `cp {MOUNT_ROOT}/FILE /DEST`: {instruction[:120]!r}")
    _run(instruction)  # the same checks of its mounts
    source, dest = words[1], words[2]
    return "RUN " + INDENT.join([MOUNTS, *flags]) + INDENT + f"{NEW} {shlex.quote(source)} {shlex.quote(dest)}"


def _instructions(lines: list[str]) -> list[str]:
    """Physical lines joined into instructions (a line ending in a backslash continues)."""
    out, current = [], []
    for line in lines:
        current.append(line)
        if not line.endswith("\\") or line.lstrip().startswith("#"):
            out.append("\n".join(current))
            current = []
    if current:
        out.append("\n".join(current))
    return out


def _split_flags(body: str) -> tuple[list[str], str]:
    """`--flag ... command` -> ([flags], command), continuations between flags dropped."""
    flags, rest = [], body
    while True:
        rest = re.sub(r"\A(?:\s|\\\n)+", "", rest)
        flag = re.match(r"--[^\s\\]+", rest)
        if flag is None:
            return flags, rest
        flags.append(flag.group())
        rest = rest[flag.end() :]


def _dest(instruction: str) -> str:
    """The destination of an ADD or COPY (its last word)."""
    words = instruction.replace("\\\n", " ").split()
    return words[-1] if len(words) > 1 else ""


def _run(instruction: str, settled: bool = True) -> str:
    flags, command = _split_flags(instruction.split(None, 1)[1])
    if command.startswith("["):
        raise SettleError(f"an exec-form RUN cannot be settled: {instruction[:80]!r}")
    binds = [f for f in flags if f.startswith("--mount=type=bind")]
    for flag in binds:
        target = dict(kv.split("=", 1) for kv in flag.removeprefix("--mount=").split(",") if "=" in kv).get(
            "target", ""
        )
        if not target.startswith(MOUNT_ROOT + "/"):
            raise SettleError(
                f"a bind mount must target {MOUNT_ROOT}/NAME (its mount point then lives in a "
                f"tmpfs, not in the layer): {flag!r}"
            )
        if target == WRAPPER or target.startswith(WRAPPER + "/"):
            raise SettleError(f"{WRAPPER} is where every step finds the settle scripts; bind elsewhere: {flag!r}")
    return _compose(flags, command, settled)


def _compose(flags: list[str], command: str, settled: bool = True) -> str:
    """The RUN: /tmp's and /mnt's tmpfs and the scripts' bind (MOUNTS), then its own flags; its command between
    `begin` and `end` (unsettled: after the environment alone). The command stays in a subshell, as it
    was inline: an `exit` or `cd` of its own cannot skip or move the settle."""
    head = "RUN " + INDENT.join([MOUNTS, *flags]) + INDENT
    if not settled:
        return f"{head}{EXPORTS} \\\n && ( {command} )"
    return f"{head}{BEGIN} \\\n && ( {command} ) \\\n && {END}"


def _copy(instruction: str) -> str:
    flags, rest = _split_flags(instruction.split(None, 1)[1])
    words = shlex.split(rest.replace("\\\n", " "))
    stage = None
    for flag in flags:
        if not flag.startswith("--from="):
            raise SettleError(f"COPY {flag} cannot be settled (only --from): {instruction[:80]!r}")
        stage = flag.removeprefix("--from=")
    if len(words) != 2:
        raise SettleError(f"a settled COPY takes one source and one destination: {instruction[:80]!r}")
    source, dest = words
    if dest.startswith("/tmp"):
        raise SettleError(
            f"{instruction[:80]!r} writes into /tmp, which every step mounts as a tmpfs (the next RUN "
            f"sees nothing of it): bind-mount the file in the RUN that uses it "
            f"(RUN --mount=type=bind,source=FILE,target=/mnt/FILE ...)"
        )
    bind = f"--mount=type=bind,{f'from={stage},' if stage else ''}source={source},target={SOURCE}"
    into = dest.rstrip("/") or "/"
    target = f"{into}/{source.rstrip('/').rsplit('/', 1)[-1]}" if dest.endswith("/") else dest
    q = shlex.quote
    return _compose(
        [bind], f"{COPY} {'stage' if stage else 'context'} {q(into)}" + (f" {q(target)}" if target != into else "")
    )


def _lines(parts) -> str:
    """One `&&` list written a part a line (a newline after `&&` continues the list, in sh as in bash)."""
    return " &&\n".join(parts) + "\n"


def scripts() -> dict[str, str]:
    """The wrapper's scripts by name, the bytes of the build context's folder CONTEXT_DIR (render/context.py
    writes it): POSIX sh; `begin`, `end` and `env` are sourced by the step's shell, `copy` and `new-file`
    run by sh."""
    head = f"# servebuild's settle wrapper (servebuild/render/settle.py), bind-mounted at {WRAPPER} in every step\n"
    # from the build context, a directory's mtime is not the one written there: BuildKit's context
    # transfer stamped nested directories (launchers/.tools) with the time it received them, so each
    # directory copied from the context gets the step's settled time (files keep theirs)
    copy = (
        f"{head}# copy context|stage INTO [TARGET]: a COPY of the source bind-mounted at {SOURCE}, owned by\n"
        f"# root; a folder's contents into INTO, a file to TARGET (INTO if not given)\n"
        f"from=$1 into=$2 target=${{3:-$2}}\n"
        f"parent=${{target%/*}}\n"
        f"if [ -d {SOURCE} ]; then\n"
        f'  mkdir -p "$into" && cp -a --no-preserve=ownership {SOURCE}/. "$into" && {{\n'
        f'    [ "$from" = stage ] || find {SOURCE} -type d -exec sh -c '
        f'\'for d; do touch -h -d "@${STEP_TIME}" "$0${{d#{SOURCE}}}"; done\' "$into" {{}} +\n'
        f"  }}\n"
        f"else\n"
        f'  mkdir -p "${{parent:-/}}" && cp -a --no-preserve=ownership {SOURCE} "$target"\n'
        f"fi\n"
    )
    # the record of the profile check (NEW_FILE): DEST gets the carried newest time (the step writes
    # nothing else: no input is newer) and mode 0644, its folder keeps its time
    new_file = (
        f"{head}# new-file SOURCE DEST: one file new to the image, settled without a walk\n"
        f"source=$1 dest=$2 folder=${{2%/*}}\n"
        f"folder=${{folder:-/}}\n"
        + _lines(
            (
                f"export {ENV}",
                f"newest=$(stat -c %Y {NEWEST})",
                'folder_time=$(stat -c %Y "$folder")',
                'test ! -e "$dest"',
                'cp "$source" "$dest"',
                'chmod 0644 "$dest"',
                'touch -h -d "@$newest" "$dest"',
                'touch -h -d "@$folder_time" "$folder"',
            )
        )
    )
    return {
        "begin": f"{head}# . begin: the marker, the wait past it, the exports, the step's settled time\n"
        + _lines(START_PARTS),
        "end": f"{head}# . end: logs emptied, what the step wrote set to its time, the newest time carried\n"
        + _lines(SETTLE_PARTS),
        "env": f"{head}# . env: the environment of a step that is not settled\nexport {ENV}\n",
        "copy": copy,
        "new-file": new_file,
    }
