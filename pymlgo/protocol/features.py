"""Feature versioning: match the features a model needs against what the compiler sends.

The rule is LLVM's (MLModelRunner): features are matched by name, a model may know fewer
features than the compiler sends (newer compilers add features; the extra ones are
ignored), but every feature the model needs must be present with the same type and shape.
"""

from __future__ import annotations

from collections.abc import Sequence

from pymlgo.protocol.tensor_spec import TensorSpec


class FeatureMismatchError(ValueError):
    """The compiler does not send a feature the model needs, or sends it with another type."""


def select_features(
    header_features: Sequence[TensorSpec], required: Sequence[str | TensorSpec]
) -> list[int]:
    """Positions in `header_features` of the `required` features, in `required`'s order.

    `result[k]` is the header index of `required[k]`, so `[obs.tensors[i] for i in result]`
    lists the model's inputs in the model's own order. A required `TensorSpec` (rather than
    a bare name) must also agree on type and shape.
    """
    position: dict[str, int] = {}
    for i, spec in enumerate(header_features):
        position.setdefault(spec.name, i)  # a duplicated name: the first one wins
    names = [r.name if isinstance(r, TensorSpec) else r for r in required]

    missing = [name for name in names if name not in position]
    if missing:
        sent = ", ".join(spec.name for spec in header_features) or "(none)"
        raise FeatureMismatchError(
            f"the compiler does not send feature(s) {', '.join(missing)} that the model needs;"
            f" it sent: {sent}"
        )

    conflicts = []
    for want in required:
        if not isinstance(want, TensorSpec):
            continue
        got = header_features[position[want.name]]
        if (got.type, got.shape) != (want.type, want.shape):
            conflicts.append(
                f"{want.name}: model expects {want.type}{list(want.shape)},"
                f" compiler sends {got.type}{list(got.shape)}"
            )
    if conflicts:
        raise FeatureMismatchError("incompatible feature(s): " + "; ".join(conflicts))
    return [position[name] for name in names]
