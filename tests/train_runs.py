"""`mlgo train` runs of every registered problem, shared by the tests that read them
(the session fixtures `train_corpus` and `trained` in conftest.py).

One small real corpus (eight demo modules with call sites, spill code, eviction and priority
decisions; real clang) and one config per problem: ppo, seeded, after a behaviour-cloning
warm start where the problem has one (so torch, sampling and the worker pool are all on the
path). A problem added to the registry gets a run, and the tests over it, with no edit here.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.cli.main import main
from pymlgo.policy.store import load_policy
from pymlgo.problems import registry
from pymlgo.train.hooks import training_of

PROBLEMS = tuple(p.name for p in registry.PROBLEMS)
ITERATIONS = 3
# small modules (well under a second each) with call sites, spill code under the stock
# eviction advisor, and eviction and priority decisions
MODULES = ("zstd/lib/compress/hist", "brotli/c/enc/compound_dictionary",
           "zstd/lib/compress/zstd_compress_literals", "brotli/c/enc/histogram",
           "brotli/c/enc/literal_cost", "brotli/c/dec/huffman", "brotli/c/enc/bit_cost",
           "brotli/c/enc/entropy_encode")
PPO_MODULES, PPO_SAMPLES = 2, 2


def config_text(problem: str) -> str:
    """The run's TOML: the same for every problem but for its name and, where clang sends
    its own decisions, the bc warm start."""
    bc = training_of(registry.problem(problem)).bc_warmstart
    return "\n".join([
        f'problem = "{problem}"', 'algo = "ppo"', "seed = 7",
        f'warmstart = "{"bc" if bc else ""}"',
        "[split]", "validation = 0.25", "heldout = 0.0",
        "[policy]", "hidden = [8]",
        *(["[bc]", "batch_size = 32", "warmstart_epochs = 10"] if bc else []),
        "[ppo]", f"modules_per_iteration = {PPO_MODULES}",
        f"samples_per_module = {PPO_SAMPLES}", "minibatch_size = 256", ""])


def mlgo_train(corpus: Path, config: Path, out: Path, *extra: str) -> list[str]:
    """`mlgo train` as a user runs it (a subprocess), `ITERATIONS` unless `extra` says."""
    return [sys.executable, "-m", "pymlgo.cli.main", "train", "--corpus", str(corpus),
            "--config", str(config), "--output_dir", str(out), "--workers", "2",
            "--iterations", str(ITERATIONS), *extra]


def train_in_process(corpus: Path, config: Path, out: Path, *extra: str) -> str:
    """Stderr of `mlgo train` (the arguments `mlgo_train` gives) run in this process."""
    argv = mlgo_train(corpus, config, out, *extra)[3:]  # after `python -m pymlgo.cli.main`
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0, err.getvalue()
    return err.getvalue()


def policy_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def scalars(run: Path) -> list[dict[str, float]]:
    return [json.loads(ln) for ln in (run / "scalars.jsonl").read_text().splitlines()]


def last_logged_iteration(out: Path) -> int:
    """The iteration of the last line of scalars.jsonl, -1 before the first."""
    path = out / "scalars.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return json.loads(lines[-1])["iteration"] if lines else -1


def change_name(problem: str) -> str:
    """The problem's scalar prefix: `size_change` (inlining), `cost_change` (regalloc)."""
    return f"{training_of(registry.problem(problem)).scoring.name}_change"


def saved_policy(problem: str, directory: Path) -> Any:
    """A saved policy directory, read by the problem's codec."""
    return load_policy(str(directory), problem=problem)


@dataclass(frozen=True)
class Run:
    """One uninterrupted `mlgo train` of `problem` (TensorBoard on), in a subprocess."""

    problem: str
    corpus: Path
    config: Path
    out: Path

    def argv(self, out: Path, *extra: str) -> list[str]:
        return mlgo_train(self.corpus, self.config, out, *extra)
