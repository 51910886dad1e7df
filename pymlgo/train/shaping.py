"""Partial rewards: split an episode's final reward over its inlining decisions.

MLGO's final reward arrives once per module compile, `R = 1 - size / size(-Oz)`, and
every decision of the episode shares it. With an IR2Native model the compile also reports
each function's estimated bytes and the function (caller) each decision was made in, so a
decision can be credited with what happened to *its* function:

    r_i = -(est[c_i] - est_oz[c_i]) / size(-Oz) / k(c_i)

where c_i is decision i's caller, est/est_oz the caller's estimated bytes after this
compile and after plain -Oz, and k(c_i) the number of decisions made in that caller. The
estimate is not the measured size, so the last decision also gets the residual
`R - sum(r)`: the shaped rewards of an episode always sum to the true final reward, and
a policy that reproduces -Oz gets 0 everywhere.

Torch-free (numpy); PPO turns these per-step rewards into returns (`returns_to_go`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pymlgo.train.env import Episode


def caller_rewards(callers: Sequence[str], estimates: Mapping[str, float],
                   oz_estimates: Mapping[str, float], baseline_bytes: int) -> np.ndarray:
    """Each decision's share of its caller's estimated size change vs -Oz (no residual).

    A function missing from an estimate map counts as 0 bytes (it does not exist there).
    """
    k = Counter(callers)
    return np.array([
        -(estimates.get(c, 0.0) - oz_estimates.get(c, 0.0)) / baseline_bytes / k[c]
        for c in callers
    ], dtype=np.float64)


def shaped_rewards(callers: Sequence[str] | None, estimates: Mapping[str, float],
                   oz_estimates: Mapping[str, float], baseline_bytes: int,
                   final_reward: float, decisions: int) -> np.ndarray:
    """Per-decision rewards of one episode (`decisions` of them) summing to `final_reward`.

    Without callers for every decision (`callers` None, or of another length; e.g. the
    remarks did not match the channel) nothing is shaped: the whole reward arrives on the
    last decision, which with undiscounted returns is the final-reward-only signal.
    """
    if decisions == 0:
        return np.zeros(0, dtype=np.float64)
    if callers is None or len(callers) != decisions or not all(callers):
        r = np.zeros(decisions, dtype=np.float64)
    else:
        r = caller_rewards(callers, estimates, oz_estimates, baseline_bytes)
    r[-1] += final_reward - r.sum()
    return r


def returns_to_go(rewards: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """G_i = r_i + gamma * G_{i+1}.

    Undiscounted by default: the inliner visits functions bottom-up, so a decision can
    change its own caller and the functions visited after it (which may inline that
    caller), never the ones before; the return from i on is exactly what i can affect.
    """
    out = np.zeros_like(rewards, dtype=np.float64)
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[i]) + gamma * acc
        out[i] = acc
    return out


@dataclass(frozen=True)
class IR2NativeShaper:
    """Shaped rewards of a recorded episode, given the -Oz estimates of its module."""

    oz_estimates: Mapping[str, Mapping[str, float]]  # module -> function -> bytes at -Oz

    def mapped(self, episode: Episode) -> bool:
        """Whether the episode's decisions were credited to callers (else: final reward)."""
        return (episode.callers is not None and episode.estimates is not None
                and episode.module in self.oz_estimates)

    def residual(self, episode: Episode) -> float:
        """Final reward minus the sum of the caller credits (what the estimates miss)."""
        assert episode.callers is not None and episode.estimates is not None
        credits = caller_rewards(episode.callers, episode.estimates,
                                 self.oz_estimates.get(episode.module, {}), episode.baseline)
        return episode.reward - float(credits.sum())

    def __call__(self, episode: Episode) -> np.ndarray:
        assert episode.actions is not None, "partial rewards need a recorded episode"
        ok = self.mapped(episode)
        return shaped_rewards(episode.callers if ok else None, episode.estimates or {},
                              self.oz_estimates.get(episode.module, {}), episode.baseline,
                              episode.reward, len(episode.actions))
