"""The built-in inlining policies by name: which specs name one and whether it reads clang's
own decision. No numpy here: `deploy.cc` decides from these before its compiler starts, and
`policies.builtin_policy` builds the policy a spec names from them (so a built-in added
here is known to both)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FEATURE = "inlining_default"  # clang's own decision, sent only when asked for
RANDOM_PREFIX, SHIFT_PREFIX = "random:", "shift:"


@dataclass(frozen=True)
class Builtin:
    """One built-in: a whole name, or a family's prefix followed by its parameters."""

    key: str  # "never", or "random:" (a prefix ends with ':')
    usage: str  # how it is written, as help and errors show it
    reads_default: bool  # whether it reads DEFAULT_FEATURE (which costs clang work)

    @property
    def prefix(self) -> bool:
        return self.key.endswith(":")

    def names(self, spec: str) -> bool:
        return spec.startswith(self.key) if self.prefix else spec == self.key


BUILTINS = (
    Builtin("default", "default", reads_default=True),
    Builtin("never", "never", reads_default=False),
    Builtin("always", "always", reads_default=False),
    Builtin(RANDOM_PREFIX, "random:P[:SEED]", reads_default=False),
    Builtin(SHIFT_PREFIX, "shift:DOWN[:UP[:USERS[:MAX]]]", reads_default=True),
)
USAGE = ", ".join(b.usage for b in BUILTINS)


def builtin(spec: str) -> Builtin | None:
    """The built-in `spec` names (its parameters not checked yet), or None for a spec that
    names no built-in (pretrained:NAME, a saved policy directory, or a mistake)."""
    return next((b for b in BUILTINS if b.names(spec)), None)
