"""Every problem pymlgo knows, by name: adding one is its package plus one line here."""

from __future__ import annotations

from pymlgo.problems.base import Problem
from pymlgo.problems.inlining.problem import INLINING
from pymlgo.problems.regalloc.problem import REGALLOC_EVICT, REGALLOC_PRIORITY

PROBLEMS: tuple[Problem, ...] = (INLINING, REGALLOC_EVICT, REGALLOC_PRIORITY)
DEFAULT: Problem = INLINING


class UnknownProblemError(ValueError):
    """A problem name no registered problem has."""


def _by_name() -> dict[str, Problem]:
    return {n: p for p in PROBLEMS for n in (p.name, *p.aliases)}


def names() -> list[str]:
    """Every name a problem is known by (canonical names and aliases): the CLI's choices."""
    return list(_by_name())


def problem(name: str | Problem) -> Problem:
    """The registered problem called `name` (or an alias of it); a Problem is returned as
    it is."""
    if not isinstance(name, str):
        return name
    found = _by_name().get(name)
    if found is None:
        raise UnknownProblemError(
            f"unknown problem {name!r}: expected one of {', '.join(names())}")
    return found


def help_text() -> str:
    """The `--problem` help: each problem's one-line summary."""
    return "; ".join(p.summary for p in PROBLEMS)
