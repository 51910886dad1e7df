"""IR2Vec vocabularies: the names clang looks up, the file clang reads, and a vocabulary
learned from real modules that the real bundled clang accepts and embeds with."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pymlgo.corpus.format import Module
from pymlgo.ir2vec import vocab_file
from pymlgo.ir2vec.entities import REQUIRED, SECTION_WEIGHTS, SECTIONS, all_entities
from pymlgo.ir2vec.ir_text import Instruction, parse_module
from pymlgo.ir2vec.learn import corpus_triplets, learn_vocab
from pymlgo.ir2vec.module_ir import module_ir
from pymlgo.ir2vec.transe import TransEConfig
from pymlgo.problems.base import CompileJob, CompileSettings
from pymlgo.problems.compile import compile_module
from pymlgo.problems.inlining.compile import OPT_LEVEL, channel_flags
from pymlgo.protocol.channel import ChannelSession


def _modules(jobs: list[CompileJob], directory: Path) -> list[Module]:
    out = []
    for job in jobs:
        bc = directory / (job.module.replace("/", "_") + ".bc")
        bc.write_bytes(job.bitcode)
        out.append(Module(job.module, bc, job.cmd))
    return out


class _Corpus:
    def __init__(self, modules: list[Module]) -> None:
        self.modules = tuple(modules)


@pytest.fixture(scope="module")
def minic_modules(minic_jobs, tmp_path_factory) -> list[Module]:
    return _modules(minic_jobs, tmp_path_factory.mktemp("minic-bc"))


@pytest.fixture(scope="module")
def minic_counts(compiler, minic_modules) -> Counter:
    data = corpus_triplets(compiler, _Corpus(minic_modules), ["raw", "optimized"])
    assert data.unknown_lines == 0 and not data.failed
    return data.counts


def _serve(compiler, job: CompileJob, extra: list[str]) -> tuple[object, ChannelSession | None]:
    sessions: list[ChannelSession | None] = []

    def measure(c):
        sessions.append(c.session)
        return c.result()

    res = compile_module(compiler, job, CompileSettings(record=True), opt_level=OPT_LEVEL,
                         flags=lambda tmp, base: [*channel_flags(base), *extra],
                         measure=measure, advise=lambda ctx, obs, header: 0)
    return res, (sessions[0] if sessions else None)


# --- the vocabulary file ---------------------------------------------------------------


def _vocab(dim: int, drop: tuple[str, ...] = ()) -> vocab_file.IR2VecVocab:
    return vocab_file.IR2VecVocab({s: {n: (0.5,) * dim for n in REQUIRED[s] if n not in drop}
                                   for s in SECTIONS})


def test_a_complete_vocabulary_lacks_nothing_and_one_without_an_entity_warns():
    assert _vocab(3).missing_entities() == []
    partial = _vocab(3, drop=("Br", "ICMP_slt"))
    with pytest.warns(vocab_file.MissingEntityWarning, match="Opcodes.Br"):
        missing = vocab_file.warn_missing(partial, "v.json")
    assert missing == ["Opcodes.Br", "Arguments.ICMP_slt"]


def test_what_clang_refuses_is_refused_on_load(tmp_path):
    good = _vocab(2).to_json()
    cases = {
        "no_types": {k: v for k, v in good.items() if k != "Types"},
        "ragged": {**good, "Opcodes": {**good["Opcodes"], "Ret": [1.0]}},
        "strings": {**good, "Types": {"VoidTy": ["a"]}},
    }
    for name, doc in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(vocab_file.VocabFileError, match=str(path)):
            vocab_file.load(path)
    with pytest.raises(vocab_file.VocabFileError, match="cannot read"):
        vocab_file.load(tmp_path / "absent.json")


def test_the_file_round_trips_byte_for_byte(tmp_path):
    v = _vocab(4)
    vocab_file.save(v, tmp_path / "a.json")
    again = vocab_file.load(tmp_path / "a.json")
    assert vocab_file.dumps(again) == (tmp_path / "a.json").read_text()
    assert again.dim == 4


# --- reading text IR --------------------------------------------------------------------

_IR = """
%struct.S = type { i32, ptr }
declare i32 @g(i32, ptr)
define i32 @f(i32 %a, ptr %p) {
entry:
  %c = icmp slt i32 %a, 10
  br i1 %c, label %then, label %done
then:                                             ; preds = %entry
  %v = call i32 @g(i32 noundef 3, ptr noundef %p)
  store i32 %v, ptr %p, align 4, !tbaa !1
  switch i32 %v, label %done [
    i32 0, label %done
    i32 7, label %then
  ]
done:
  %r = phi i32 [ %a, %entry ], [ 0, %then ]
  #dbg_value(i32 %r, !2, !DIExpression(), !3)
  ret i32 %r
}
"""


def test_instructions_read_as_clang_names_them():
    body = parse_module(_IR).functions["f"]
    assert body == [
        Instruction("ICmp", "IntegerTy", ("Variable", "Constant"), "ICMP_slt"),
        Instruction("Br", "VoidTy", ("Variable", "Variable", "Variable")),
        Instruction("Call", "IntegerTy", ("Constant", "Pointer", "Function")),
        Instruction("Store", "VoidTy", ("Variable", "Pointer")),
        Instruction("Switch", "VoidTy", ("Variable", "Variable", "Constant", "Variable",
                                         "Constant", "Variable")),
        Instruction("PHI", "IntegerTy", ("Variable", "Constant")),
        Instruction("Ret", "VoidTy", ("Variable",)),
    ]


def _function_vector(body: list[Instruction], index: dict[str, int]) -> np.ndarray:
    weight = {n: SECTION_WEIGHTS[s] for s in SECTIONS for n in REQUIRED[s]}
    e = np.zeros(len(index))
    for inst in body:
        for name in (inst.opcode, inst.type, *inst.operands,
                     *((inst.predicate,) if inst.predicate else ())):
            e[index[name]] += weight[name]
    return e


def test_clang_embeds_a_function_as_the_reader_reads_it(compiler, minic_modules, tmp_path):
    # A one-hot vocabulary makes clang's embedding a weighted count of each entity; the
    # optimized IR compiled again reaches the inliner mostly unchanged, so most callees'
    # counts equal those of a function as this reader sees it.
    names = all_entities()
    index = {n: i for i, n in enumerate(names)}
    onehot = {s: {n: [1.0 if i == index[n] else 0.0 for i in range(len(names))]
                  for n in REQUIRED[s]} for s in SECTIONS}
    path = tmp_path / "onehot.json"
    path.write_text(json.dumps(onehot))
    equal = total = 0
    for module in minic_modules:
        ll = module_ir(compiler, module, "optimized")
        mine = [_function_vector(b, index) for b in parse_module(ll).functions.values() if b]
        res, session = _serve(compiler, CompileJob(module.name, ll.encode(), module.cmd),
                              vocab_file.clang_flags(path))
        assert res.ok, res.error
        if session is None or session.header is None:
            continue
        at = [f.name for f in session.header.features].index("callee_embedding")
        for d in session.decisions:
            total += 1
            equal += any(np.allclose(d.features[at], m, atol=1e-4) for m in mine)
    assert total > 0 and equal / total > 0.7, (equal, total)


# --- learning ---------------------------------------------------------------------------


def test_the_learned_vocabulary_is_deterministic_for_a_seed(minic_counts):
    config = TransEConfig(dim=8, steps=200, seed=3)
    a, b = learn_vocab(minic_counts, config), learn_vocab(minic_counts, config)
    other = learn_vocab(minic_counts, TransEConfig(dim=8, steps=200, seed=4))
    assert vocab_file.dumps(a.vocab) == vocab_file.dumps(b.vocab)
    assert vocab_file.dumps(a.vocab) != vocab_file.dumps(other.vocab)
    assert a.vocab.missing_entities() == [] and a.vocab.dim == 8
    assert a.training.losses[-1] < a.training.losses[0]


def test_clang_accepts_the_learned_vocabulary_and_sends_embeddings_of_its_dimension(
        compiler, minic_jobs, minic_counts, tmp_path):
    path = tmp_path / "v.json"
    vocab_file.save(learn_vocab(minic_counts, TransEConfig(dim=12, steps=50)).vocab, path)
    job = max(minic_jobs, key=lambda j: len(j.bitcode))
    res, session = _serve(compiler, job, vocab_file.clang_flags(path))
    assert res.ok, res.error
    assert session is not None and session.header is not None and session.decisions
    specs = {f.name: f for f in session.header.features}
    for name in vocab_file.EMBEDDING_FEATURES:
        assert (specs[name].type, specs[name].shape) == ("float", (12,))
    at = [f.name for f in session.header.features].index("caller_embedding")
    assert any(np.abs(d.features[at]).sum() > 0 for d in session.decisions)


def test_the_inliner_flag_alone_fails_the_compile_with_clangs_reason(compiler, minic_jobs,
                                                                     tmp_path):
    path = tmp_path / "v.json"
    vocab_file.save(_vocab(2), path)
    res, _ = _serve(compiler, minic_jobs[0], vocab_file.clang_flags(path)[:2])
    assert not res.ok and "IR2Vec vocabulary file path not specified" in res.error


def test_mlgo_ir2vec_check_warns_about_missing_entities(tmp_path):
    path = tmp_path / "v.json"
    vocab_file.save(_vocab(2, drop=("Freeze",)), path)
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "ir2vec", "check",
                          str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "dimension 2" in res.stdout and "Opcodes.Freeze" in res.stderr


def test_a_traced_compile_with_a_vocabulary_records_embeddings_and_decides_as_before(
        compiler, minic_jobs, minic_counts, tmp_path):
    from pymlgo.problems.inlining.policies import builtin_policy
    from pymlgo.problems.inlining.problem import INLINING, InliningOptions

    path = tmp_path / "v.json"
    vocab_file.save(learn_vocab(minic_counts, TransEConfig(dim=6, steps=50)).vocab, path)
    job = max(minic_jobs, key=lambda j: len(j.bitcode))
    policy = builtin_policy("default")
    plain = INLINING.compile(compiler, job, policy, CompileSettings(record=True))
    with_vocab = INLINING.compile(
        compiler, job, policy,
        CompileSettings(record=True, options=InliningOptions(ir2vec_vocab=path)))
    assert plain.ok and with_vocab.ok, (plain.error, with_vocab.error)
    assert with_vocab.size == plain.size and with_vocab.decisions == plain.decisions
    traj = with_vocab.trajectory
    assert traj is not None and "callee_embedding" not in plain.trajectory.features
    assert traj.features["callee_embedding"].shape == (len(traj), 6)
    assert traj.features["caller_embedding"].dtype == np.float32


# --- a policy and its vocabulary --------------------------------------------------------


def test_a_saved_policy_carries_its_vocabulary_and_compiles_with_it(compiler, minic_jobs,
                                                                   minic_counts, tmp_path):
    import dataclasses

    from pymlgo.policy.store import IR2VEC_FILE, PolicyLoadError, load_policy_dir, save_policy
    from pymlgo.problems.inlining.compile import compile_with_policy
    from tests.test_policy_inlining import make_policy

    path = tmp_path / "v.json"
    vocab_file.save(learn_vocab(minic_counts, TransEConfig(dim=5, steps=50)).vocab, path)
    policy = dataclasses.replace(make_policy(), ir2vec_vocab=path)
    save_policy(policy, tmp_path / "p")
    path.write_text("{}")  # the policy's copy is what counts from now on
    loaded = load_policy_dir(tmp_path / "p")
    assert loaded.ir2vec_vocab == (tmp_path / "p" / IR2VEC_FILE).absolute()
    doc = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert doc["files"][IR2VEC_FILE]["sha256"] == vocab_file.file_sha256(loaded.ir2vec_vocab)

    job = max(minic_jobs, key=lambda j: len(j.bitcode))
    res = compile_with_policy(compiler, job, loaded, CompileSettings(record=True))
    assert res.ok, res.error
    assert res.trajectory is not None
    assert res.trajectory.features["callee_embedding"].shape[1:] == (5,)

    (tmp_path / "p" / IR2VEC_FILE).write_text(vocab_file.dumps(_vocab(5)))
    with pytest.raises(PolicyLoadError, match="checksum mismatch"):
        load_policy_dir(tmp_path / "p")


def test_mlgo_trace_with_a_vocabulary_logs_embeddings_that_mlgo_vocab_leaves_out(
        compiler, minic_jobs, minic_counts, tmp_path, monkeypatch, capsys):
    from pymlgo.evaluate.trace import load_traces
    from tests.test_trace_cli import run_cli, write_corpus

    monkeypatch.setenv("MLGO_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "v.json"
    vocab_file.save(learn_vocab(minic_counts, TransEConfig(dim=7, steps=50)).vocab, path)
    corpus = write_corpus(tmp_path / "corpus", minic_jobs)
    out = tmp_path / "traces"
    assert run_cli("trace", "--corpus", str(corpus), "--output_dir", str(out),
                   "--workers", "1", "--ir2vec", str(path)) == 0
    logged = [traj for _, traj, _ in load_traces(out) if len(traj)]
    assert logged and all(t.features["caller_embedding"].shape == (len(t), 7) for t in logged)
    info = json.loads((out / "trace.json").read_text())
    assert info["ir2vec_sha256"] == vocab_file.file_sha256(path)
    # the traced objects stood for the -Oz baselines: embeddings do not change the object
    from pymlgo.evaluate.trace import read_sizes
    from pymlgo.problems.inlining.compile import compile_baseline

    rows = read_sizes(out)
    assert all(rows[j.module].baseline_bytes == compile_baseline(compiler, j).size
               for j in minic_jobs)
    assert run_cli("vocab", "--traces", str(out), "--output_dir", str(tmp_path / "q")) == 0
    quantile = json.loads((tmp_path / "q" / "vocab.json").read_text())
    names = {f["name"] for f in quantile["features"]}
    assert names and not names & set(vocab_file.EMBEDDING_FEATURES)


def test_mlgo_cc_compiles_a_policy_with_the_vocabulary_it_carries(tmp_path):
    import dataclasses

    from pymlgo.deploy.cc import IR2VEC_FILE, policy_ir2vec_args
    from pymlgo.policy import store
    from tests.test_policy_inlining import make_policy

    assert IR2VEC_FILE == store.IR2VEC_FILE
    path = tmp_path / "v.json"
    vocab_file.save(_vocab(3), path)
    store.save_policy(dataclasses.replace(make_policy(), ir2vec_vocab=path), tmp_path / "p")
    store.save_policy(make_policy(), tmp_path / "plain")
    carried = (tmp_path / "p" / IR2VEC_FILE).absolute()
    assert policy_ir2vec_args(str(tmp_path / "p")) == vocab_file.clang_flags(carried)
    assert policy_ir2vec_args(str(tmp_path / "plain")) == []
    assert policy_ir2vec_args("default") == []
