"""What `mlgo train` takes from outside its run: a trace (`mlgo trace --policy default`), a
vocab (`mlgo vocab`) and a saved-policy warm start (a directory or pretrained:NAME).

Real clang on three demo-corpus modules; every command runs in-process through `mlgo`'s
own entry point.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from pymlgo.cli.main import main
from pymlgo.policy.store import pretrained_root
from tests.test_train_algorithms import copy_demo_subset

MODULES = ("brotli/c/enc/entropy_encode", "brotli/c/enc/histogram", "zstd/lib/compress/hist")
BC_CONFIG = """
algo = "bc"
seed = 3
warmstart = ""
[split]
validation = 0.34
heldout = 0.0
[policy]
hidden = [8]
[bc]
batch_size = 32
"""


@dataclass(frozen=True)
class Pipeline:
    root: Path
    corpus: Path
    config: Path  # BC_CONFIG
    trace: Path  # `mlgo trace --policy default` of the corpus
    vocab: Path  # `mlgo vocab` of that trace
    recorded: Path  # a bc run that recorded clang's decisions itself


def mlgo(*argv: str) -> tuple[int, str]:
    """Exit code and stderr of `mlgo ARGV`, run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def train(p: Pipeline, out: Path, *extra: str, config: Path | None = None) -> tuple[int, str]:
    return mlgo("train", "--corpus", str(p.corpus), "--config", str(config or p.config),
                "--output_dir", str(out), "--iterations", "1", "--workers", "2",
                "--no-tensorboard", *extra)


@pytest.fixture(scope="module")
def pipeline(demo_corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    root = tmp_path_factory.mktemp("sources")
    corpus = copy_demo_subset(demo_corpus_dir, root / "corpus", MODULES)
    config = root / "bc.toml"
    config.write_text(BC_CONFIG)
    code, err = mlgo("trace", "--corpus", str(corpus), "--output_dir", str(root / "trace"),
                     "--workers", "2")
    assert code == 0, err
    code, err = mlgo("vocab", "--traces", str(root / "trace"), "--output_dir", str(root / "v"))
    assert code == 0, err
    p = Pipeline(root, corpus, config, root / "trace", root / "v", root / "recorded")
    code, err = train(p, p.recorded)
    assert code == 0, err
    return p


def test_bc_from_an_mlgo_trace_learns_exactly_what_it_learns_from_its_own_recording(
    pipeline, tmp_path
):
    code, err = train(pipeline, tmp_path / "run", "--traces", str(pipeline.trace))
    assert code == 0, err
    assert f"from {pipeline.trace}" in err and "recording" not in err
    # policy.json too: where a trace was kept is no part of the policy it trained
    for name in ("weights.npz", "vocab.json", "policy.json"):
        assert ((tmp_path / "run" / "final" / name).read_bytes()
                == (pipeline.recorded / "final" / name).read_bytes())


def test_vocab_and_traces_set_in_the_config_file_are_used(pipeline, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f'vocab = "{pipeline.vocab}"\ntraces = "{pipeline.trace}"\n'
                      + BC_CONFIG)
    code, err = train(pipeline, tmp_path / "run", config=config)
    assert code == 0, err
    assert f"from {pipeline.trace}" in err
    # the whole trace's quantiles, not the training modules' recomputed ones
    assert ((tmp_path / "run" / "final" / "vocab.json").read_bytes()
            == (pipeline.vocab / "vocab.json").read_bytes())
    saved = json.loads((tmp_path / "run" / "final" / "policy.json").read_text())
    assert saved["hyperparameters"]["config"]["vocab"] == str(pipeline.vocab)


def refused(pipeline: Pipeline, out: Path, *extra: str,
            config: Path | None = None) -> str:
    """The one-line error of a refused run (progress lines may come before it)."""
    code, err = train(pipeline, out, *extra, config=config)
    assert code == 2
    errors = [ln for ln in err.splitlines() if ln.startswith("mlgo train: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    assert not out.exists()  # nothing half-written
    return errors[0]


def test_a_trace_of_another_policy_is_refused(pipeline, tmp_path):
    never = tmp_path / "never"
    assert mlgo("trace", "--corpus", str(pipeline.corpus), "--policy", "never",
                "--output_dir", str(never), "--workers", "2")[0] == 0
    message = refused(pipeline, tmp_path / "run", "--traces", str(never))
    assert "policy 'never'" in message and "mlgo trace --policy default" in message


def test_a_trace_of_another_problem_is_refused(pipeline, tmp_path):
    other = tmp_path / "trace"
    shutil.copytree(pipeline.trace, other)
    info = json.loads((other / "trace.json").read_text())
    (other / "trace.json").write_text(json.dumps({**info, "problem": "regalloc-evict"}))
    message = refused(pipeline, tmp_path / "run", "--traces", str(other))
    assert "trace of problem 'regalloc-evict', not of 'inlining'" in message


def test_a_trace_of_another_corpus_is_refused(pipeline, demo_corpus_dir, tmp_path):
    smaller = copy_demo_subset(demo_corpus_dir, tmp_path / "corpus", MODULES[:2])
    code, err = mlgo("train", "--corpus", str(smaller), "--config", str(pipeline.config),
                     "--output_dir", str(tmp_path / "run"), "--traces", str(pipeline.trace))
    assert code == 2 and "traces another corpus" in err
    assert not (tmp_path / "run").exists()


def test_a_trace_made_without_this_runs_compile_flags_is_refused(pipeline, tmp_path):
    message = refused(pipeline, tmp_path / "run", "--traces", str(pipeline.trace),
                      "--add-flag=-ffunction-sections")
    assert "other compile flags" in message


def test_a_trace_made_with_the_runs_compile_flags_is_accepted(pipeline, tmp_path):
    flag = "--add-flag=-ffunction-sections"
    trace = tmp_path / "trace"
    assert mlgo("trace", "--corpus", str(pipeline.corpus), "--output_dir", str(trace),
                "--workers", "2", flag)[0] == 0
    info = json.loads((trace / "trace.json").read_text())
    assert info["edits"] == {"delete": [], "replace": [], "add": ["-ffunction-sections"]}
    code, err = train(pipeline, tmp_path / "run", "--traces", str(trace), flag,
                      "--iterations", "0")
    assert code == 0, err
    saved = json.loads((tmp_path / "run" / "final" / "policy.json").read_text())
    assert saved["hyperparameters"]["config"]["compile"]["add_flags"] == ["-ffunction-sections"]


def test_a_vocab_with_other_features_than_the_policy_reads_is_refused(pipeline, tmp_path):
    with_default = tmp_path / "v"
    assert mlgo("vocab", "--traces", str(pipeline.trace), "--output_dir", str(with_default),
                "--include-default")[0] == 0
    message = refused(pipeline, tmp_path / "run", "--vocab", str(with_default))
    assert "extra: inlining_default" in message
    message = refused(pipeline, tmp_path / "run", "--vocab", str(tmp_path / "nothing"))
    assert "not a vocab directory" in message and "mlgo vocab" in message


def test_a_saved_policy_directory_is_the_warm_start_as_it_is(pipeline, tmp_path):
    warm = pipeline.recorded / "final"
    # [policy] hidden = [8] agrees with the warm start's network, so it is accepted
    code, err = train(pipeline, tmp_path / "run", "--warmstart", str(warm),
                      "--iterations", "0")
    assert code == 0, err
    assert ((tmp_path / "run" / "final" / "weights.npz").read_bytes()
            == (warm / "weights.npz").read_bytes())


def test_a_pretrained_policy_is_a_warm_start_by_name(pipeline, tmp_path):
    config = tmp_path / "bc.toml"
    config.write_text(BC_CONFIG.replace("hidden = [8]", ""))
    code, err = train(pipeline, tmp_path / "run", "--warmstart", "pretrained:inlining-oz",
                      "--iterations", "0", config=config)
    assert code == 0, err
    shipped = pretrained_root() / "inlining-oz"
    for name in ("weights.npz", "vocab.json"):
        assert (tmp_path / "run" / "final" / name).read_bytes() == (shipped / name).read_bytes()


@pytest.mark.parametrize("policy_table, expected", [
    ("hidden = [8]", "hidden = [8] (it has [40, 40, 20]) conflicts with the warm-start"),
    ('features = ["callee_users"]', "features = ['callee_users'] (it reads"),
    ("quantiles = 10", "policy.quantiles does not apply with a saved-policy warm start"),
])
def test_policy_keys_that_disagree_with_the_warm_start_are_an_error(
    pipeline, tmp_path, policy_table, expected
):
    config = tmp_path / "bc.toml"
    config.write_text(BC_CONFIG.replace("hidden = [8]", policy_table))
    message = refused(pipeline, tmp_path / "run", "--warmstart", "pretrained:inlining-oz",
                      config=config)
    assert expected in message


def test_es_from_a_saved_policy_reads_clangs_decisions_from_a_trace_instead_of_recording(
    pipeline, tmp_path
):
    config = tmp_path / "es.toml"
    config.write_text(BC_CONFIG.replace('algo = "bc"', 'algo = "es"')
                      + "[es]\npopulation = 1\nmodules_per_iteration = 1\n")
    code, err = train(pipeline, tmp_path / "run", "--warmstart", str(pipeline.recorded / "final"),
                      "--traces", str(pipeline.trace), config=config)
    assert code == 0, err
    assert f"from {pipeline.trace}" in err and "recording" not in err
    assert (tmp_path / "run" / "final" / "weights.npz").is_file()


def test_a_warm_start_must_be_a_saved_policy(pipeline, tmp_path):
    message = refused(pipeline, tmp_path / "run", "--warmstart", "default")
    assert "not a saved MLP policy" in message and "warmstart = 'bc'" in message
    message = refused(pipeline, tmp_path / "run", "--warmstart", "pretrained:nope")
    assert "no pretrained policy 'nope'" in message


def test_a_run_on_some_packages_of_the_traced_corpus_reads_them_from_its_trace(pipeline):
    """One fold of a k-fold split trains on a subset of a corpus traced once as a whole."""
    from dataclasses import replace

    from pymlgo.corpus.format import load_corpus
    from pymlgo.toolchain.compiler import find_compiler
    from pymlgo.train.config import make_config
    from pymlgo.train.sources import load_sources

    whole = load_corpus(pipeline.corpus)
    fold = replace(whole, modules=whole.modules[:2])
    config = make_config(algo="bc", warmstart="", traces=str(pipeline.trace))
    sources = load_sources(config, fold, find_compiler(None).version)
    assert sources.traces is not None
    assert set(sources.traces.rows) == set(whole.names) > set(fold.names)


def test_a_policy_that_reads_clangs_decision_is_trained_served_and_not_exported(
    pipeline, tmp_path
):
    # [policy] reads_default: clang's own decision becomes an input, so behaviour cloning
    # can answer exactly as clang does, and the compile path must send that decision
    config = tmp_path / "bc.toml"
    config.write_text(BC_CONFIG.replace("hidden = [8]", "hidden = [8]\nreads_default = true")
                      .replace("validation = 0.34", "validation = 0.0")  # all three cloned
                      .replace("batch_size = 32", "batch_size = 32\nlearning_rate = 0.03\n"
                                                   "epochs_per_iteration = 300"))
    with_default = tmp_path / "v"
    assert mlgo("vocab", "--traces", str(pipeline.trace), "--output_dir", str(with_default),
                "--include-default")[0] == 0
    code, err = train(pipeline, tmp_path / "run", "--traces", str(pipeline.trace),
                      "--vocab", str(with_default), config=config)
    assert code == 0, err
    final = tmp_path / "run" / "final"
    saved = json.loads((final / "policy.json").read_text())
    assert saved["features"][-1]["name"] == "inlining_default"
    assert saved["hyperparameters"]["config"]["policy"]["reads_default"] is True
    # without the key, the vocab that holds clang's decision is refused, as before
    assert "extra: inlining_default" in refused(pipeline, tmp_path / "other", "--vocab",
                                                str(with_default))
    report = tmp_path / "eval.json"
    code, err = mlgo("eval", "--corpus", str(pipeline.corpus), "--policy", str(final),
                     "--json", str(report), "--workers", "2")
    assert code == 0, err
    totals = json.loads(report.read_text())
    # it answers as clang on every call site it was cloned on: every object equals -Oz's
    rows = totals["modules"]
    assert rows and all(r["policy_bytes"] == r["baseline_bytes"] for r in rows)
    code, err = mlgo("export", "--policy", str(final), "--format", "savedmodel",
                     "--output_dir", str(tmp_path / "x"))
    assert code != 0 and "mlgo cc" in err and not (tmp_path / "x").exists()
