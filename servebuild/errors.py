"""Errors as values with a place: every user-facing failure names file, field and problem."""

from __future__ import annotations


class ServebuildError(Exception):
    """A failure the user can act on. `str()` is the one line the CLI prints."""

    exit_code = 2

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None,
                 line: int | None = None):
        self.problem = problem
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
        return f"{prefix}: {text}" if prefix else text


def _flat(text: str) -> str:
    """A file or field name from user input, shown on the one line: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class RecipeError(ServebuildError):
    """The recipe (or a file it names) is wrong."""


class SourceError(ServebuildError):
    """A source, patch or lock problem."""


class DockerError(ServebuildError):
    """The Docker engine is missing, unreachable or lacks BuildKit, or a build failed."""


class SmokeError(ServebuildError):
    """The smoke suite could not be started."""


class PlacedValueError(ValueError):
    """Raised inside a schema validator to say where below the validated model the problem is
    (e.g. ("profiles", "p")), so the one line points at that field and its line, not the model."""

    def __init__(self, loc: tuple, message: str):
        self.loc = tuple(loc)
        super().__init__(message)
