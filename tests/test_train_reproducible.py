"""es, dqn, bc (with and without an annealed rate) and il are reproducible: two runs with one
seed give the same policy bytes, and a run stopped after iteration 1 and resumed ends with
the bytes of an uninterrupted run.
(ppo, over every problem, with killed runs, is in test_train_resume.py.)

Real `mlgo train` on four demo-corpus modules: the uninterrupted run in a subprocess of
its own (another process, another hash seed), the others in this process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from pymlgo.cli.main import main
from pymlgo.policy.store import load_policy_dir
from tests.test_train_algorithms import TINY_DEMO_MODULES, copy_demo_subset
from tests.train_runs import mlgo_train, policy_bytes

MODULES = TINY_DEMO_MODULES[:4]
COMMON = """
seed = 11
[split]
validation = 0.25
heldout = 0.0
[policy]
hidden = [8]
quantiles = 100
"""
CONFIGS = {
    "es": 'algo = "es"\nwarmstart = ""\n' + COMMON
          + "[es]\npopulation = 2\nmodules_per_iteration = 2\n",
    "dqn": 'algo = "dqn"\nwarmstart = ""\n' + COMMON
           + "[dqn]\nmodules_per_iteration = 2\nupdates_per_iteration = 5\nbatch_size = 32\n",
    "bc": 'algo = "bc"\nwarmstart = ""\n' + COMMON + "[bc]\nbatch_size = 32\n",
    # the learning rate annealed over the two iterations' epochs: the schedule is resumed too
    "bc-annealed": 'algo = "bc"\nwarmstart = ""\n' + COMMON
                   + "[bc]\nbatch_size = 32\nlr_anneal_epochs = 4\n",
    # search (seeded flips through the worker pool) and cloning from a random network
    "il": 'algo = "il"\nwarmstart = ""\n' + COMMON
          + "[il]\nbudget = 4\nsearch_batch = 2\nmodules_per_iteration = 2\n"
          + "epochs_per_iteration = 2\nbatch_size = 32\n",
}


@pytest.fixture(scope="module")
def corpus(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_demo_subset(demo_corpus_dir, tmp_path_factory.mktemp("repro") / "corpus",
                            MODULES)


def in_process(corpus: Path, config: Path, out: Path, iterations: int) -> str:
    """Stderr of `mlgo train` (the arguments `mlgo_train` gives) run in this process."""
    argv = mlgo_train(corpus, config, out, "--iterations", str(iterations),
                      "--no-tensorboard")[3:]  # after `python -m pymlgo.cli.main`
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0, err.getvalue()
    return err.getvalue()


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_one_seed_gives_one_policy_and_a_resumed_run_ends_with_the_same_bytes(
    algo, corpus, tmp_path
):
    config = tmp_path / f"{algo}.toml"
    config.write_text(CONFIGS[algo])
    done = subprocess.run(mlgo_train(corpus, config, tmp_path / "a", "--iterations", "2",
                                     "--no-tensorboard"), capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert done.returncode == 0, done.stderr
    in_process(corpus, config, tmp_path / "b", 2)
    in_process(corpus, config, tmp_path / "stopped", 1)
    assert load_policy_dir(tmp_path / "stopped" / "final").hyperparameters["iteration"] == 1
    resumed = in_process(corpus, config, tmp_path / "stopped", 2)
    assert "resuming" in resumed and "at iteration 2" in resumed
    for name in ("final", "best"):
        expected = policy_bytes(tmp_path / "a" / name)
        assert policy_bytes(tmp_path / "b" / name) == expected
        assert policy_bytes(tmp_path / "stopped" / name) == expected
    rows = [json.loads(ln) for ln in (tmp_path / "a" / "scalars.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    if "lr_anneal_epochs" in CONFIGS[algo]:
        assert [r["bc/learning_rate"] for r in rows[1:]] == pytest.approx([0.0015, 0.0])
    for row in rows[1:]:
        # every compile of the iteration counts, validation included (one module here); bc
        # learns from no compile, but the trainer measures it on every training module
        assert row["compiles"] == len(MODULES) if algo == "bc" else row["compiles"] > 1
        assert row["failures"] == 0 and row["decisions_per_second"] > 0
