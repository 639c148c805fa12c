"""Errors as values with a place and a kind: every user-facing failure names file, field and problem.

Kinds say what went wrong, so a caller can ask "is this the host?" without knowing which module
raised it:

- InputError: what the user gave is wrong (a recipe, a file it names, an option, an environment variable);
- HostError: this machine or what it reaches cannot do it (engine, disk, network; ToolError: a tool that failed);
- IntegrityError: bytes are not what they claim (a hash, digest or signature that does not match, a stale lock);
- Refused: a rule says no (an unpinned patch, a tag that would move, an image without a passing verdict).

`problem` says what is wrong; `hint`, kept apart, says what to do. The one line joins them as
"PLACE: PROBLEM; HINT", so advice is written once, where the error is raised, and a caller that
re-raises with more context keeps one hint instead of stacking two.
"""

from __future__ import annotations


class ServebuildError(Exception):
    """A failure the user can act on. `str()` is the one line the CLI prints."""

    exit_code = 2
    kind = "error"

    def __init__(
        self,
        problem: str,
        *,
        hint: str | None = None,
        file: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ):
        self.problem = problem
        self.hint = hint
        self.file = file
        self.field = field
        self.line = line
        super().__init__(self.one_line())

    def one_line(self) -> str:
        place = []
        if self.file:
            place.append(f"{_flat(self.file)}:{self.line}" if self.line else _flat(self.file))
        if self.field:
            place.append(_flat(self.field))
        prefix = ": ".join(place)
        text = " ".join(self.problem.split())  # always exactly one line
        if self.hint:
            text += "; " + " ".join(self.hint.split())
        return f"{prefix}: {text}" if prefix else text

    def moved(self, problem: str | None = None, **place) -> "ServebuildError":
        """The same error (same kind and hint) with a new problem text or place."""
        fields = {"file": self.file, "field": self.field, "line": self.line, **place}
        return type(self)(self.problem if problem is None else problem, hint=self.hint, **fields)


def _flat(text: str) -> str:
    """A file or field name from user input, shown on the one line: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class InputError(ServebuildError):
    """What the user gave is wrong: a recipe, a file it names, an option or an environment variable."""

    kind = "input"


class HostError(ServebuildError):
    """This machine, its engine or what it reaches cannot do what was asked."""

    kind = "host"


class ToolError(HostError):
    """A host tool (git, the docker client, uv, debootstrap) could not start, or failed where it must not."""


class IntegrityError(ServebuildError):
    """Bytes are not what they claim: a hash, digest or signature that does not match, a stale lock."""

    kind = "integrity"


class Refused(ServebuildError):
    """A rule of servebuild says no, on purpose (the message says which rule and how to proceed)."""

    kind = "refused"


class RecipeError(InputError):
    """The recipe (or a file it names) is wrong."""


class DockerError(HostError):
    """The Docker engine is missing, unreachable or lacks BuildKit, or a build failed."""


class DockerTimeout(DockerError):
    """A docker command given a time limit did not end within it (the client was stopped)."""


class SmokeError(HostError):
    """The smoke suite could not be started."""


class PlacedValueError(ValueError):
    """Raised inside a schema validator to say where below the validated model the problem is
    (e.g. ("profiles", "p")), so the one line points at that field and its line, not the model."""

    def __init__(self, loc: tuple, message: str):
        self.loc = tuple(loc)
        super().__init__(message)
