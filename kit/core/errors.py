"""One error family for everything the user can fix.

A ``KitError`` is printed as one line naming the file and field, plus a hint;
anything else is a bug and gets a traceback (with ``-v``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit.core.secretrules import redact

# Everything that ends a line on a terminal or in a log reader (C0/C1 controls, DEL, Unicode line and
# paragraph separators): an error is one line per problem whatever text it quotes from the input.
_LINE_BREAKERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` as an error prints it: every control character written as an escape, so it is exactly one
    line, and credentials (URL passwords, token-shaped strings) masked, so no error ever repeats a secret."""
    text = redact(text)
    return _LINE_BREAKERS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def shown(value: object, limit: int = 60) -> str:
    """An offending value as an error quotes it: its repr, cut to ``limit`` characters (an input may be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input: where, what, and how to fix it."""

    where: str  # "presets/a100x8.yaml: engine.tensor_parallel_size" or just a field path
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return one_line(text + (f" (hint: {self.hint})" if self.hint else ""))


class KitError(Exception):
    """An error the user can act on. ``problems`` lists every problem found at once."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, problems: list[Problem] | None = None,
                 detail: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = list(problems or [])
        # lines shown under the error as they are (a diff): each printed through one_line, so none can break out
        self.detail = list(detail or [])

    def lines(self) -> list[str]:
        if self.problems:
            return [str(p) for p in self.problems]
        return [one_line(self.message)]


class PresetError(KitError):
    """The preset (file, override or model) is invalid."""


class DockerUnavailable(KitError):
    """No Docker engine answers."""


class BuildError(KitError):
    """An image build failed."""


class SmokeError(KitError):
    """A smoke run could not be carried out (not: a check failed)."""


class PlanError(KitError):
    """The memory planner cannot plan these inputs (missing model field, impossible parallelism).

    ``field``: the preset field the problem is about (``engine.max_model_len``), so a preset's error names it, and
    names the override when the value came from the command line."""

    def __init__(self, message: str, *, hint: str | None = None, problems: list[Problem] | None = None,
                 field: str | None = None):
        super().__init__(message, hint=hint, problems=problems)
        self.field = field


class WriteError(KitError):
    """The output directory cannot take the write (an OS error, something else at a target path, the lock held)."""
