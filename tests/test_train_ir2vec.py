"""Training, evaluating and exporting a policy that reads IR2Vec embeddings, on real modules.

`mlgo train --ir2vec V` (behaviour cloning) on eight demo-corpus modules: every compile
passes the vocabulary to the real bundled clang, the network reads `callee_embedding` and
`caller_embedding`, and the saved policy carries the file. The vocabulary is a seeded
random one over exactly the entities clang 22 looks up (`mlgo ir2vec vocab` learns better
ones; test_ir2vec.py shows clang accepts those too): what matters here is that the floats
clang sends flow through training, inference and export unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pymlgo.ir2vec import vocab_file
from pymlgo.ir2vec.entities import REQUIRED, SECTIONS
from pymlgo.policy.store import IR2VEC_FILE, load_policy_dir
from pymlgo.problems.base import CompileSettings
from pymlgo.problems.inlining.problem import INLINING
from tests.test_train_algorithms import TINY_DEMO_MODULES, copy_demo_subset

DIM = 8
CONFIG = """
algo = "bc"
seed = 5
[split]
validation = 0.25
heldout = 0.0
[policy]
hidden = [16, 16]
ir2vec_vocab = "{vocab}"
[bc]
batch_size = 32
epochs_per_iteration = 10
"""


def random_vocab(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    vocab_file.save(vocab_file.IR2VecVocab(
        {s: {n: tuple(rng.normal(size=DIM).round(4).tolist()) for n in REQUIRED[s]}
         for s in SECTIONS}), path)
    return path


def mlgo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pymlgo.cli.main", *args],
                          capture_output=True, text=True, check=False)


def train_args(corpus: Path, config: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--corpus", str(corpus), "--config", str(config), "--output_dir",
            str(out), "--workers", "2", "--iterations", "2", "--no-tensorboard", *extra]


@pytest.fixture(scope="module")
def run(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory
        ) -> tuple[Path, Path, Path]:
    """(corpus, the vocabulary given, the run directory) of one finished bc run."""
    root = tmp_path_factory.mktemp("ir2vec-train")
    corpus = copy_demo_subset(demo_corpus_dir, root / "corpus", TINY_DEMO_MODULES)
    vocab = random_vocab(root / "v.json", seed=1)
    config = root / "bc.toml"
    config.write_text(CONFIG.format(vocab=vocab))
    out = root / "run"
    done = mlgo(*train_args(corpus, config, out))
    assert done.returncode == 0, done.stderr
    return corpus, vocab, out


def recorded(corpus: Path, policy, compiler) -> list:
    """Every module compiled by the real clang with `policy` answering, trajectories kept
    (the policy's own vocabulary is the only one given)."""
    from pymlgo.corpus.format import load_corpus
    from pymlgo.evaluate.eval import corpus_jobs

    c = load_corpus(corpus)
    results = [INLINING.compile(compiler, job, policy, CompileSettings(record=True))
               for job in corpus_jobs(c, c.names)]
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return [r for r in results if r.trajectory is not None and len(r.trajectory)]


def test_the_trained_policy_reads_embeddings_and_carries_the_vocabulary(run):
    _, vocab, out = run
    policy = load_policy_dir(out / "best")
    assert policy.required_features[-2:] == vocab_file.EMBEDDING_FEATURES
    assert [e.dim for e in policy.vocab.embeddings] == [DIM, DIM]
    assert (out / "best" / IR2VEC_FILE).read_bytes() == vocab.read_bytes()
    doc = json.loads((out / "best" / "policy.json").read_text())
    sha = vocab_file.file_sha256(vocab)
    assert doc["files"][IR2VEC_FILE]["sha256"] == sha
    assert doc["hyperparameters"]["config"]["policy"]["ir2vec_vocab"] == f"sha256:{sha}"
    # the normalization was fitted on clang's embeddings, not left at its identity
    assert all(np.abs(e.mean).sum() > 0 and (e.scale != 1).any()
               for e in policy.vocab.embeddings)
    # the network learned from them: the first layer's embedding weights moved
    rows = policy.vocab.input_dim - 2 * DIM
    scalars = json.loads((out / "scalars.jsonl").read_text().splitlines()[-1])
    assert scalars["bc/accuracy_train"] > 0.85
    assert np.abs(policy.params.weights[0][rows:]).sum() > 0


def test_its_decisions_through_clang_are_those_of_numpy_inference(run, compiler):
    corpus, _, out = run
    policy = load_policy_dir(out / "best")
    results = recorded(corpus, policy, compiler)
    decisions = 0
    for res in results:
        traj = res.trajectory
        assert traj.features["callee_embedding"].shape == (len(traj), DIM)
        x = policy.vocab.matrix(traj.features)
        expected = (policy.logits(x) >= 0).astype(np.int64)
        assert np.asarray(traj.advice).reshape(-1).tolist() == expected.tolist(), res.module
        decisions += len(traj)
    assert decisions > 150


def test_mlgo_eval_compiles_the_policy_with_its_own_vocabulary(run, tmp_path):
    corpus, vocab, out = run
    copy = tmp_path / "policy"
    shutil.copytree(out / "best", copy)
    vocab.write_text("{}")  # the file trained with is gone: the policy's copy is used
    try:
        report = tmp_path / "eval.json"
        done = mlgo("eval", "--corpus", str(corpus), "--policy", str(copy), "--json",
                    str(report), "--workers", "2")
    finally:
        random_vocab(vocab, seed=1)
    assert done.returncode == 0, done.stderr
    rows = json.loads(report.read_text())["modules"]
    assert not any(r["error"] for r in rows)
    # without the embeddings clang would not send, the policy could not decide at all
    assert sum(r["decisions"] for r in rows) > 150


def test_a_run_resumed_with_another_vocabulary_is_refused(run, tmp_path):
    corpus, _, out = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    other = random_vocab(tmp_path / "other.json", seed=2)
    config = tmp_path / "bc.toml"
    config.write_text(CONFIG.format(vocab=other))
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    done = mlgo(*train_args(corpus, config, copy, "--iterations", "3"))
    assert done.returncode == 2
    assert "another configuration" in done.stderr and "policy.ir2vec_vocab" in done.stderr
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_a_moved_run_resumes_with_its_own_copy_of_the_vocabulary(run, tmp_path):
    # setup.pkl and checkpoint.pkl name the run's ir2vec.json where the run was made; a
    # moved run compiles with the copy where it is now (the old place is gone meanwhile)
    corpus, vocab, out = run
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    original = out / IR2VEC_FILE
    kept = original.read_bytes()
    original.unlink()
    try:
        done = mlgo(*train_args(corpus, out.parent / "bc.toml", moved, "--iterations", "3"))
    finally:
        original.write_bytes(kept)
    assert done.returncode == 0, done.stderr
    last = json.loads((moved / "scalars.jsonl").read_text().splitlines()[-1])
    assert last["iteration"] == 3 and last["failures"] == 0 and last["compiles"] > 0
    for saved in ("best", "final"):
        assert (moved / saved / IR2VEC_FILE).read_bytes() == vocab.read_bytes()


def test_a_trace_made_without_the_vocabulary_is_refused(run, tmp_path):
    corpus, vocab, _ = run
    traces = tmp_path / "traces"
    done = mlgo("trace", "--corpus", str(corpus), "--policy", "default", "--output_dir",
                str(traces), "--workers", "2")
    assert done.returncode == 0, done.stderr
    config = tmp_path / "bc.toml"
    config.write_text(CONFIG.format(vocab=vocab))
    done = mlgo(*train_args(corpus, config, tmp_path / "out", "--traces", str(traces)))
    assert done.returncode == 2
    assert "traced without an IR2Vec vocabulary" in done.stderr
    assert not (tmp_path / "out").exists()


def test_exported_models_take_the_embeddings_and_decide_as_the_policy(run, compiler,
                                                                      tmp_path):
    pytest.importorskip("tensorflow", reason="the export extra: pip install 'pymlgo[export]'")
    from pymlgo.policy import export

    corpus, _, out = run
    policy = load_policy_dir(out / "best")
    results = recorded(corpus, policy, compiler)
    cols = {name: np.concatenate([np.asarray(r.trajectory.features[name]).reshape(
        len(r.trajectory), -1) for r in results]) for name in policy.required_features}
    cols = {k: v[:, 0] if v.shape[1] == 1 else v for k, v in cols.items()}
    native = np.concatenate([np.asarray(r.trajectory.advice).reshape(-1) for r in results])
    assert 0 < native.mean() < 1
    export.export_policy(policy, "savedmodel", tmp_path / "sm")
    export.export_policy(policy, "tflite", tmp_path / "tflite")
    assert export.saved_model_decisions(tmp_path / "sm", cols).tolist() == native.tolist()
    assert export.tflite_decisions(tmp_path / "tflite", cols).tolist() == native.tolist()
    for fmt in ("sm", "tflite"):  # the vocabulary the inputs need travels with the model
        exported = tmp_path / fmt / export.IR2VEC_EXPORT_FILE
        assert exported.read_bytes() == policy.ir2vec_vocab.read_bytes()

    tf = export.import_tensorflow()
    interpreter = export._tflite_interpreter(
        tf, (tmp_path / "tflite" / export.TFLITE_FILE).read_bytes())
    inputs = {d["name"]: d for d in interpreter.get_input_details()}
    for name in vocab_file.EMBEDDING_FEATURES:
        d = inputs[export.tflite_input_name(name)]
        assert d["dtype"] == np.float32 and d["shape"].tolist() == [DIM]
    fn = tf.saved_model.load(str(tmp_path / "sm")).signatures[export.SIGNATURE_KEY]
    _, kwargs = fn.structured_input_signature
    for name in vocab_file.EMBEDDING_FEATURES:
        assert kwargs[name].dtype == tf.float32 and kwargs[name].shape.as_list() == [DIM]


def test_mlgo_cc_answers_clang_with_the_policy_and_its_vocabulary(run, tmp_path, monkeypatch):
    from tests.test_cc import MINIC, log_records, mlgo_cc
    from tests.workers_support import processes_mentioning

    _, _, out = run
    runtime = tmp_path / "runtime"  # policy servers started here die with the test
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(runtime))
    for f in MINIC.iterdir():
        shutil.copy(f, tmp_path / f.name)
    log = tmp_path / "log.jsonl"
    try:
        res = mlgo_cc("--mlgo-policy", str(out / "best"), "-Oz", "-c", "table.c", "-o",
                      "t.o", cwd=tmp_path, log=log)
    finally:
        for pid in processes_mentioning(runtime):
            os.kill(pid, signal.SIGKILL)
    assert res.returncode == 0, res.stderr
    (rec,) = log_records(log)
    assert rec["decisions"] > 0 and (tmp_path / "t.o").stat().st_size > 0


def embedding_probe(policy_dir: Path, name: str, out: Path) -> Path:
    """A policy that inlines a call site exactly when the first dimension of its embedding
    `name` (callee_embedding or caller_embedding) is not zero: |x| = relu(x) + relu(-x), a
    logit of |x| - 1e-6. Were clang to send zeros, or no embeddings, it would inline nothing."""
    from pymlgo.policy.inlining import InliningPolicy
    from pymlgo.policy.mlp import MLPParams
    from pymlgo.policy.store import save_policy
    from pymlgo.policy.vocab import EmbeddingInput

    trained = load_policy_dir(policy_dir)
    vocab = replace(trained.vocab, embeddings=tuple(
        EmbeddingInput(e.name, np.zeros(e.dim), np.ones(e.dim))  # the raw values, clipped
        for e in trained.vocab.embeddings))
    first = np.zeros((vocab.input_dim, 2), dtype=np.float32)
    at = vocab.input_dim - sum(e.dim for e in vocab.embeddings)  # embeddings come last
    for e in vocab.embeddings:
        if e.name == name:
            first[at] = (1.0, -1.0)
        at += e.dim
    assert np.abs(first).sum() == 2
    params = MLPParams((first, np.ones((2, 1))), (np.zeros(2), np.array([-1e-6])))
    save_policy(InliningPolicy(vocab=vocab, params=params, hidden=(2,), name=f"probe-{name}",
                               ir2vec_vocab=trained.ir2vec_vocab), out)
    return out


def test_the_native_launcher_gives_clang_the_policys_own_vocabulary(run, tmp_path,
                                                                     monkeypatch):
    """`mlgo cc` through the native launcher (a running policy server answering) passes
    clang both IR2Vec flags with the policy's ir2vec.json: the same object and decisions as
    the Python path, and every decision's callee and caller embeddings are non-zero."""
    from pymlgo.deploy.launcher import launcher_path
    from tests.test_cc import MINIC, log_records, mlgo_cc
    from tests.workers_support import processes_mentioning

    _, vocab, out = run
    probes = [embedding_probe(out / "best", name, tmp_path / name)
              for name in vocab_file.EMBEDDING_FEATURES]
    assert all((p / IR2VEC_FILE).read_bytes() == vocab.read_bytes() for p in probes)
    runtime = tmp_path / "runtime"  # policy servers started here die with the test
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(runtime))
    for var in ("MLGO_POLICY", "MLGO_GUARD", "MLGO_CLANG", "MLGO_CC_SERVER"):
        monkeypatch.delenv(var, raising=False)
    src = tmp_path / "src"
    shutil.copytree(MINIC, src)
    log = tmp_path / "log.jsonl"
    launcher = launcher_path("cc")
    try:
        for policy in (out / "best", *probes):
            # the Python path's compile starts the policy's server, the launcher's uses it
            python = mlgo_cc("--mlgo-policy", str(policy), "-Oz", "-c", "table.c", "-o",
                             "p.o", cwd=src, log=log)
            assert python.returncode == 0, python.stderr
            native = subprocess.run(
                [str(launcher), "--mlgo-policy", str(policy), "-Oz", "-c", "table.c", "-o",
                 "l.o"], cwd=src, env={**os.environ, "MLGO_CC_LOG": str(log)},
                capture_output=True, text=True, timeout=600, check=False)
            assert native.returncode == 0, native.stderr
            assert (src / "l.o").read_bytes() == (src / "p.o").read_bytes()
    finally:
        for pid in processes_mentioning(runtime):
            os.kill(pid, signal.SIGKILL)
    recs = log_records(log)
    assert [r["served_by"] for r in recs] == ["server", "launcher"] * 3
    for a, b in zip(recs[::2], recs[1::2], strict=True):  # the same decisions both ways
        assert (a["sessions"], a["decisions"], a["inlined"]) == (
            b["sessions"], b["decisions"], b["inlined"])
    for probed in recs[3::2]:  # the launcher's compiles with the probes
        assert probed["decisions"] > 0 and probed["inlined"] == probed["decisions"], probed


def test_a_thinlto_link_gives_the_backends_the_policys_own_vocabulary(run, tmp_path,
                                                                       monkeypatch):
    """`mlgo cc` on a ThinLTO link: lld's backends ask the policy with both IR2Vec flags, so
    the probes see non-zero embeddings at every cross-module call site."""
    from tests.test_cc import log_records, mlgo_cc
    from tests.test_cc_lto import objects, run_program
    from tests.workers_support import processes_mentioning

    _, _, out = run
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(runtime))
    d = objects(tmp_path, "-flto=thin")
    log = tmp_path / "log.jsonl"
    try:
        for name in vocab_file.EMBEDDING_FEATURES:
            probe = embedding_probe(out / "best", name, tmp_path / name)
            res = mlgo_cc("--mlgo-policy", str(probe), "-Oz", "-flto=thin", "main.o", "lib.o",
                          "-o", name, cwd=d, log=log)
            assert res.returncode == 0, res.stderr
            run_program(d / name)
    finally:
        for pid in processes_mentioning(runtime):
            os.kill(pid, signal.SIGKILL)
    for rec in log_records(log):
        assert rec["lto"]["served"] and rec["sessions"] == 2, rec
        assert rec["decisions"] == rec["inlined"] == 2, rec
