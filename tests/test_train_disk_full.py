"""`mlgo train` on a full disk: one line that says what happened and what to do; the last
checkpoint stays whole, and the same command resumes once there is space again.

A real file-size limit (RLIMIT_FSIZE, as in test_hardening_errors.py) stands in for the
full disk: it lets every file smaller than the limit through (compiles, setup, policies)
and fails the checkpoint, made large on purpose by a wide network.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from pymlgo.cli.main import main
from pymlgo.policy.store import load_policy_dir
from pymlgo.train.trainer import CHECKPOINT_FILE
from tests.test_hardening_errors import file_size_limit
from tests.test_train_algorithms import TINY_DEMO_MODULES, copy_demo_subset

CONFIG = """
algo = "es"
warmstart = ""
seed = 1
[split]
validation = 0.25
heldout = 0.0
[policy]
hidden = [128, 128]  # parameters and Adam moments: a checkpoint of ~750 KB
quantiles = 100
[es]
population = 1
modules_per_iteration = 1
"""


def mlgo_train(corpus: Path, config: Path, out: Path, iterations: int) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "--corpus", str(corpus), "--config", str(config),
                     "--output_dir", str(out), "--iterations", str(iterations),
                     "--workers", "1", "--no-tensorboard"])
    return code, err.getvalue()


def test_a_full_disk_during_a_checkpoint_is_one_line_and_the_same_command_resumes(
    demo_corpus_dir, tmp_path
):
    corpus = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", TINY_DEMO_MODULES[:4])
    config = tmp_path / "es.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    assert mlgo_train(corpus, config, out, 1)[0] == 0
    checkpoint = (out / CHECKPOINT_FILE).read_bytes()
    others = max(p.stat().st_size for p in out.rglob("*")
                 if p.is_file() and p.name != CHECKPOINT_FILE)
    assert others < len(checkpoint) // 2  # room for a limit only the checkpoint exceeds

    with file_size_limit((others + len(checkpoint)) // 2):
        code, err = mlgo_train(corpus, config, out, 2)
    assert code == 2
    errors = [ln for ln in err.splitlines() if ln.startswith("mlgo train: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    assert f"cannot write {out / CHECKPOINT_FILE}: File too large" in errors[0]
    assert "intact" in errors[0] and "run the same command again to resume" in errors[0]
    assert (out / CHECKPOINT_FILE).read_bytes() == checkpoint  # the previous one, whole
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]

    code, err = mlgo_train(corpus, config, out, 2)  # space again: the same command
    assert code == 0, err
    assert "resuming" in err
    assert load_policy_dir(out / "final").hyperparameters["iteration"] == 2


def test_a_scalars_line_cut_short_is_dropped_when_the_run_resumes(tmp_path):
    from pymlgo.train.trainer import SCALARS_FILE, ScalarLog, read_scalars

    whole = '{"iteration": 0, "x": 1.0}\n{"iteration": 1, "x": 2.0}\n'
    (tmp_path / SCALARS_FILE).write_text(whole + '{"iteration": 2, "x"')
    assert [r["iteration"] for r in read_scalars(tmp_path)] == [0, 1]
    ScalarLog(tmp_path, resume_after=1, tensorboard=False).close()
    assert (tmp_path / SCALARS_FILE).read_text() == whole
