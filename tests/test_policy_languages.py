"""`InliningPolicy.languages`: a learned policy that decides the modules of some source
languages only, and leaves the others to clang's own decisions (plain -Oz's bytes), in
`mlgo eval` and in `mlgo cc`, through the Python path and the native launcher alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import main
from pymlgo.deploy import cc_server
from pymlgo.deploy.cc import policy_languages
from pymlgo.deploy.launcher import launcher_path
from pymlgo.policy.export import ExportError, export_policy
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import MLPParams
from pymlgo.policy.store import PolicyLoadError, load_policy_dir, save_policy
from pymlgo.policy.vocab import build_vocab
from pymlgo.problems.inlining.policies import HeuristicPolicy
from pymlgo.toolchain.compiler import bundled_zig
from pymlgo.toolchain.language import cc1_language, source_language
from pymlgo.train.config import ConfigError, make_config
from tests.test_cc import log_records, mlgo_cc
from tests.test_policy_vocab import skewed_columns
from tests.workers_support import processes_mentioning

# One static helper with a loop, called three times: clang keeps it out of line at -Oz,
# inlining every call grows the object. The same code as C and as C++.
HELPER = """static int mix(int a, int b) {
  int r = a;
  for (int i = 0; i < b; i++) { r = r * 31 + i; r ^= r >> 3; r += a & i; }
  return r;
}
int f1(int x) { return mix(x, 3) + 1; }
int f2(int x) { return mix(x, 5) * 2; }
int f3(int x) { return mix(x, 7) - 3; }
"""
MAKEFILE = ("all: hot_c.o hot_cpp.o\n"
            "hot_c.o: hot_c.c\n\t$(CC) -Oz -c hot_c.c -o hot_c.o\n"
            "hot_cpp.o: hot_cpp.cpp\n\t$(CXX) -Oz -c hot_cpp.cpp -o hot_cpp.o\n")


def always(languages: tuple[str, ...] = ("c++",)) -> InliningPolicy:
    """A network that inlines every call site, deciding only `languages`."""
    vocab = build_vocab(skewed_columns())
    params = MLPParams((np.zeros((vocab.input_dim, 2), np.float32),
                        np.zeros((2, 1), np.float32)),
                       (np.zeros(2, np.float32), np.array([5.0], np.float32)))
    return InliningPolicy(vocab, params, hidden=(2,), languages=languages)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "hot_c.c").write_text(HELPER)
    (root / "hot_cpp.cpp").write_text(HELPER)
    (root / "Makefile").write_text(MAKEFILE)
    return root


@pytest.fixture()
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A runtime dir of this test's own: the policy servers it starts die with it."""
    monkeypatch.delenv("MLGO_POLICY", raising=False)
    monkeypatch.delenv(cc_server.SERVER_ENV, raising=False)
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(tmp_path / "run"))
    yield tmp_path / "run"
    for pid in processes_mentioning(tmp_path / "run"):
        os.kill(pid, signal.SIGKILL)


def test_a_source_language_is_read_from_x_then_from_the_suffix():
    assert source_language("a.c") == "c" and source_language("dir/a.cpp") == "c++"
    assert source_language("a.C") == "c++" and source_language("a.ii") == "c++"
    assert source_language("a.c", "c++") == "c++" and source_language("a.cc", "c") == "c"
    assert source_language("a.s") is None and source_language("a.c", "assembler") is None
    assert source_language("a.cpp", "none") == "c++"
    assert cc1_language(["-cc1", "-main-file-name", "x.cc", "-Oz"]) == "c++"
    assert cc1_language(["-cc1", "-main-file-name", "x.c", "-std=gnu++17"]) == "c"
    assert cc1_language(["-cc1", "-std=c++17"]) == "c++" and cc1_language(["-cc1"]) == "c"


def test_outside_its_languages_the_policy_is_clangs_own():
    policy = always()
    assert policy.for_language("c++") is policy
    assert isinstance(policy.for_language("c"), HeuristicPolicy)
    assert isinstance(policy.for_language(None), HeuristicPolicy)
    unrestricted = always(())
    assert unrestricted.for_language("c") is unrestricted


def test_languages_are_saved_as_version_1_2_and_an_older_file_with_them_is_refused(tmp_path):
    save_policy(always(), tmp_path / "p")
    path = tmp_path / "p" / "policy.json"
    doc = json.loads(path.read_text())
    assert doc["languages"] == ["c++"] and doc["version"] == "inlining-1.2"
    assert load_policy_dir(tmp_path / "p").languages == ("c++",)
    assert policy_languages(str(tmp_path / "p")) == ("c++",)
    save_policy(always(()), tmp_path / "all")
    doc_all = json.loads((tmp_path / "all" / "policy.json").read_text())
    assert "languages" not in doc_all and doc_all["version"] == "inlining-1.0"
    assert policy_languages(str(tmp_path / "all")) == () == policy_languages("always")
    # a 1.1 reader would ignore the key and decide every language
    path.write_text(json.dumps(doc | {"version": "inlining-1.1"}))
    with pytest.raises(PolicyLoadError, match="need inlining-1.2"):
        load_policy_dir(tmp_path / "p")
    path.write_text(json.dumps(doc | {"languages": ["fortran"]}))
    with pytest.raises(PolicyLoadError, match="unknown language"):
        load_policy_dir(tmp_path / "p")


def test_export_refuses_a_policy_that_decides_some_languages_only(tmp_path):
    with pytest.raises(ExportError, match="mlgo cc --mlgo-policy"):
        export_policy(always(), "savedmodel", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("table, message", [
    ({"algo": "bc", "policy": {"languages": ["rust"]}}, "distinct languages"),
    ({"algo": "bc", "policy": {"languages": ["c", "c"]}}, "distinct languages"),
    ({"algo": "ppo", "policy": {"languages": ["c++"]}}, "probability of each decision"),
    ({"algo": "es", "problem": "regalloc-evict", "warmstart": "",
      "policy": {"languages": ["c++"]}}, "'inlining' only"),
])
def test_languages_the_training_cannot_honour_are_a_config_error(table, message):
    with pytest.raises(ConfigError, match=message):
        make_config(**table)


def captured_corpus(project: Path, out: Path) -> Path:
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "corpus", "capture",
                          "--output_dir", str(out), "--no_progress", "--", "make"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return out


def test_real_compiles_eval_gives_plain_oz_bytes_outside_the_languages(project, tmp_path,
                                                                       capsys):
    corpus = captured_corpus(project, tmp_path / "corpus")
    save_policy(always(), tmp_path / "cxx-only")
    bytes_of = {}
    for spec in (str(tmp_path / "cxx-only"), "always", "default"):
        out = tmp_path / f"{Path(spec).name}.json"
        assert main(["eval", "--corpus", str(corpus), "--policy", spec, "--workers", "2",
                     "--json", str(out)]) == 0
        bytes_of[Path(spec).name] = {m["name"]: m["policy_bytes"]
                                     for m in json.loads(out.read_text())["modules"]}
    # the C module's 0.00% is said to be clang's, not the policy's
    assert "decides c++ modules only: 1 of 2 (1 c) keep clang's own" in capsys.readouterr().err
    (c_module,) = [m for m in bytes_of["default"] if m.endswith("hot_c")]
    (cxx_module,) = [m for m in bytes_of["default"] if m.endswith("hot_cpp")]
    # inlining every call grows both: the test can tell the network from clang
    assert bytes_of["always"][c_module] > bytes_of["default"][c_module]
    assert bytes_of["always"][cxx_module] > bytes_of["default"][cxx_module]
    assert bytes_of["cxx-only"][c_module] == bytes_of["default"][c_module]
    assert bytes_of["cxx-only"][cxx_module] == bytes_of["always"][cxx_module]


def plain_oz(project: Path, tool: str, source: str, out: str) -> bytes:
    subprocess.run([str(bundled_zig()), tool, "-Oz", "-Xclang", "-Oz", "-c", source, "-o", out],
                   cwd=project, check=True, timeout=600)
    return (project / out).read_bytes()


def test_mlgo_cc_compiles_other_languages_plain_and_serves_its_own(project, tmp_path, runtime):
    save_policy(always(), tmp_path / "cxx-only")
    policy, log = str(tmp_path / "cxx-only"), tmp_path / "log.jsonl"
    res = mlgo_cc("--mlgo-policy", policy, "-Oz", "-c", "hot_c.c", "-o", "c.o", cwd=project,
                  log=log)
    assert res.returncode == 0, res.stderr
    assert (project / "c.o").read_bytes() == plain_oz(project, "cc", "hot_c.c", "ref_c.o")
    cxx = subprocess.run([*mlgo_cc_command(), "c++", "--mlgo-policy", policy, "-Oz", "-c",
                          "hot_cpp.cpp", "-o", "cpp.o"], cwd=project, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "MLGO_CC_LOG": str(log)})
    assert cxx.returncode == 0, cxx.stderr
    assert (project / "cpp.o").read_bytes() != plain_oz(project, "c++", "hot_cpp.cpp",
                                                         "ref_cpp.o")
    c_rec, cxx_rec = log_records(log)
    assert not c_rec["served"] and "leaves c to clang" in c_rec["reason"]
    assert cxx_rec["served"] and cxx_rec["inlined"] > 0


def mlgo_cc_command() -> list[str]:
    from tests.test_cc import mlgo_command

    return mlgo_command()


def test_the_launcher_execs_other_languages_plain_and_serves_its_own(project, tmp_path,
                                                                    runtime):
    save_policy(always(), tmp_path / "cxx-only")
    policy, log = str(tmp_path / "cxx-only"), tmp_path / "log.jsonl"
    launcher = launcher_path("cc")

    def run(*args: str, logged: bool) -> None:
        env = {**os.environ, **({"MLGO_CC_LOG": str(log)} if logged else {})}
        res = subprocess.run([str(launcher), "--mlgo-policy", policy, "-Oz", *args],
                             cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr

    run("-c", "hot_cpp.cpp", "-o", "first.o", logged=True)  # the Python path starts a server
    run("-c", "hot_cpp.cpp", "-o", "l.o", logged=True)
    run("-c", "hot_c.c", "-o", "c-exec.o", logged=False)  # exec'ed plain by the launcher
    run("-c", "hot_c.c", "-o", "c-logged.o", logged=True)  # logged: by the Python path
    reference = plain_oz(project, "cc", "hot_c.c", "ref.o")
    assert (project / "c-exec.o").read_bytes() == reference
    assert (project / "c-logged.o").read_bytes() == reference
    first, served, c_rec = log_records(log)
    assert first["served_by"] == "server" and served["served_by"] == "launcher"
    assert (project / "l.o").read_bytes() == (project / "first.o").read_bytes()
    assert not c_rec["served"] and "leaves c to clang" in c_rec["reason"]


def test_a_validation_split_the_policy_leaves_to_clang_picks_the_trained_policy(
        demo_corpus_dir, tmp_path):
    # Every validation module is C and the policy decides C++ only: validation measures 0.00%
    # at every iteration, and best/ must be the trained network, not the untrained start
    # (a k-fold fold whose validation packages were all C evaluated iteration 0's).
    from tests.test_train_algorithms import train_bc_on_demo_subset

    rows = train_bc_on_demo_subset(demo_corpus_dir, tmp_path, tmp_path / "run",
                                   "seed = 3\neval_every = 2", "", policy='languages = ["c++"]')
    assert {r["size_change/validation"] for r in rows if "size_change/validation" in r} == {0.0}
    best = json.loads((tmp_path / "run" / "best" / "policy.json").read_text())
    assert best["hyperparameters"]["iteration"] == 2
    assert (tmp_path / "run" / "best" / "weights.npz").read_bytes() == (
        tmp_path / "run" / "final" / "weights.npz").read_bytes()
