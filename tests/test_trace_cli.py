"""`mlgo trace` and `mlgo vocab` end to end, on a real corpus and the real compiler."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.command import format_cmd
from pymlgo.evaluate.baseline import BaselineCache
from pymlgo.evaluate.trace import load_traces, read_sizes, trace_columns, trace_corpus
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.store import save_policy
from pymlgo.policy.vocab import build_vocab, load_vocab
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.policies import builtin_policy
from tests.test_trace_corpus import InProcessExecutor
from tests.test_trace_resume import journaled, tree

REPO = Path(__file__).resolve().parents[1]


def run_cli(*argv: str) -> int:
    """Parse with only these subcommands registered, as `mlgo` would, and run."""
    from pymlgo.cli import trace, vocab

    parser = argparse.ArgumentParser(prog="mlgo")
    sub = parser.add_subparsers()
    trace.register(sub)
    vocab.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def write_corpus(root: Path, jobs: list[CompileJob]) -> Path:
    """A corpus in LLVM's mlgo-utils layout: description, and .bc + .cmd per module."""
    for job in jobs:
        (root / job.module).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{job.module}.bc").write_bytes(job.bitcode)
        (root / f"{job.module}.cmd").write_bytes(format_cmd(job.cmd))
    (root / "corpus_description.json").write_text(
        json.dumps({"modules": [j.module for j in jobs], "has_thinlto": False})
    )
    return root


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache"))


def test_trace_command_writes_a_complete_trace(
    minic_jobs, tmp_path, isolated_cache, capsys
):
    corpus = write_corpus(tmp_path / "corpus", minic_jobs)
    out = tmp_path / "traces"
    rc = run_cli(
        "trace",
        "--corpus",
        str(corpus),
        "--policy",
        "default",
        "--output_dir",
        str(out),
        "--workers",
        "2",
    )
    assert rc == 0
    assert f"traced {len(minic_jobs)} of {len(minic_jobs)} module(s)" in capsys.readouterr().out
    assert sorted(m for m, _, _ in load_traces(out)) == sorted(j.module for j in minic_jobs)
    assert all(r.reward == 0.0 for r in read_sizes(out).values())
    info = json.loads((out / "trace.json").read_text())
    assert info["policy_spec"] == "default" and info["traced"] == len(minic_jobs)
    # a second run does not clobber the first one by accident
    assert run_cli("trace", "--corpus", str(corpus), "--output_dir", str(out)) == 2
    assert "not empty" in capsys.readouterr().err


def test_trace_command_runs_a_saved_mlp_policy_on_the_workers(
    trace_dir, minic_jobs, tmp_path, isolated_cache
):
    cols = trace_columns(trace_dir)
    vocab = build_vocab(cols, features=[n for n in cols if n != "inlining_default"])
    policy = InliningPolicy(
        vocab, init_mlp(vocab.input_dim, (40, 40, 20), np.random.default_rng(3))
    )
    save_policy(policy, tmp_path / "policy")
    corpus = write_corpus(tmp_path / "corpus", minic_jobs)
    out = tmp_path / "traces"
    assert (
        run_cli(
            "trace",
            "--corpus",
            str(corpus),
            "--policy",
            str(tmp_path / "policy"),
            "--output_dir",
            str(out),
            "--workers",
            "2",
        )
        == 0
    )
    # the workers' decisions are the policy's greedy decisions on the recorded features
    decided = 0
    for _, traj, _ in load_traces(out):
        p = policy.probabilities(vocab.matrix(traj.features))
        clear = np.abs(p - 0.5) > 1e-6
        assert np.array_equal(traj.advice[clear, 0], (p[clear] >= 0.5).astype(np.int64))
        decided += len(traj)
    assert decided > 10


def test_trace_command_rejects_a_bad_policy_before_compiling(tmp_path, capsys):
    rc = run_cli(
        "trace",
        "--corpus",
        str(tmp_path),
        "--policy",
        "sometimes",
        "--output_dir",
        str(tmp_path / "out"),
    )
    assert rc == 2 and "unknown inlining policy 'sometimes'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def trace_dir(compiler, minic_jobs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vocab")
    trace_corpus(
        InProcessExecutor(),
        compiler,
        minic_jobs,
        builtin_policy("default"),
        root / "trace",
        cache=BaselineCache(root / "cache"),
    )
    return root / "trace"


def test_vocab_command_writes_a_deterministic_vocab_of_model_inputs(trace_dir, tmp_path, capsys):
    assert run_cli("vocab", "--traces", str(trace_dir), "--output_dir", str(tmp_path / "a")) == 0
    assert "38 features" in capsys.readouterr().out
    vocab = load_vocab(tmp_path / "a" / "vocab.json")
    assert len(vocab.features) == 38 and "inlining_default" not in vocab.features
    assert vocab.input_dim == 76 and vocab.with_square
    assert all(b.size <= 1000 for b in vocab.boundaries)
    assert run_cli("vocab", "--traces", str(trace_dir), "--output_dir", str(tmp_path / "b")) == 0
    assert (tmp_path / "a" / "vocab.json").read_bytes() == (
        tmp_path / "b" / "vocab.json"
    ).read_bytes()


def test_vocab_command_normalizes_the_traced_values_into_unit_interval(trace_dir, tmp_path):
    run_cli(
        "vocab",
        "--traces",
        str(trace_dir),
        "--output_dir",
        str(tmp_path),
        "--quantiles",
        "10",
        "--include-default",
        "--no-square",
    )
    vocab = load_vocab(tmp_path / "vocab.json")
    assert vocab.features[-1] == "inlining_default" and vocab.input_dim == 39
    assert all(b.size <= 10 for b in vocab.boundaries)
    for _, traj, _ in load_traces(trace_dir):
        v = vocab.normalize(vocab.matrix(traj.features))
        assert ((v >= 0) & (v <= 1)).all()


def test_vocab_command_on_a_directory_without_logs_fails_clearly(tmp_path, capsys):
    assert run_cli("vocab", "--traces", str(tmp_path), "--output_dir", str(tmp_path / "v")) == 2
    assert "no trace logs" in capsys.readouterr().err
    assert not np.any([p.name == "vocab.json" for p in tmp_path.rglob("*")])


@contextlib.contextmanager
def children_take_sigint():
    """Processes started inside take SIGINT's default action, as a command typed in a
    terminal does, even if this one was started with SIGINT ignored: a script's background
    job (`cmd &`, `nohup cmd &`) is, and its children inherit that. A Python started so
    rightly ignores Ctrl-C, and so does mlgo: a run of the suite launched that way must not
    make the Ctrl-C test fail (the caught handler set here is reset to the default by exec).
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGINT"])
def test_a_trace_command_stopped_midway_resumes_and_ends_as_an_uninterrupted_run(
    demo_corpus_dir, tmp_path, monkeypatch, stop
):
    from pymlgo.corpus.format import load_corpus
    from pymlgo.evaluate.eval import corpus_jobs

    jobs = sorted(corpus_jobs(load_corpus(demo_corpus_dir)), key=lambda j: len(j.bitcode))
    corpus = write_corpus(tmp_path / "corpus", [j.loaded() for j in jobs[:16]])
    env = {**os.environ, "MLGO_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "stopped"
    partial = out.with_name("stopped.partial")
    argv = [sys.executable, "-m", "pymlgo.cli.main", "trace", "--corpus", str(corpus),
            "--output_dir", str(out), "--workers", "1"]
    # own session: the signal reaches its workers too, as Ctrl-C in a terminal does (each
    # compiler runs in a session of its own, which a Ctrl-C never reaches)
    with children_take_sigint():
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while len(journaled(partial)) < 3 and proc.poll() is None:
            assert time.monotonic() < deadline, "no module traced within 10 minutes"
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be stopped"
        os.killpg(proc.pid, getattr(signal, stop))
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if stop == "SIGINT":
        assert proc.returncode == 130 and f"kept in {partial}: the same command resumes" in err
    assert not out.exists()
    kept = len(journaled(partial))

    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"({kept} traced by a stopped run before)" in done.stdout
    assert not partial.exists()

    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache-uninterrupted"))
    reference = tmp_path / "uninterrupted"
    assert run_cli("trace", "--corpus", str(corpus), "--output_dir", str(reference),
                   "--workers", "1") == 0
    assert tree(out) == tree(reference)


def test_trace_command_refuses_a_stopped_trace_of_another_policy_and_says_how_to_start_over(
    minic_jobs, compiler, tmp_path, isolated_cache, capsys
):
    from tests.test_trace_resume import CountingExecutor, Stopped

    corpus = write_corpus(tmp_path / "corpus", minic_jobs)
    out = tmp_path / "traces"
    with pytest.raises(Stopped):
        trace_corpus(CountingExecutor(stop_after=1), compiler, minic_jobs,
                     builtin_policy("never"), out)
    rc = run_cli("trace", "--corpus", str(corpus), "--policy", "always", "--output_dir",
                 str(out), "--workers", "1")
    err = capsys.readouterr().err
    assert rc == 2 and '"never" there, "always" here' in err
    assert f"rm -r {tmp_path / 'traces.partial'}" in err
    assert not out.exists() and len(journaled(tmp_path / "traces.partial")) == 1
