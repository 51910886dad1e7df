"""`combine`: sub-corpora of a directory become one corpus, or none if they disagree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pymlgo.cli.corpus import main as corpus_main
from pymlgo.corpus.combine import combine_corpora
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, load_corpus
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.elf import read_sections


def real_module(compiler: Compiler, root: Path, name: str, body: str) -> None:
    """One module compiled by the bundled clang, stored as extract writes it."""
    src = root / f"{name}.c"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(body)
    obj = root / f"{name}.o"
    subprocess.run([*compiler.cc_argv, "-c", "-target", "x86_64-linux-gnu", "-mcpu=baseline",
                    "-Oz", "-Xclang", "-fembed-bitcode=all", str(src), "-o", str(obj)],
                   check=True)
    sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
    (root / f"{name}.bc").write_bytes(sec[".llvmbc"] or b"")
    (root / f"{name}.cmd").write_bytes(sec[".llvmcmd"] or b"")
    src.unlink()
    obj.unlink()


def sub_corpus(compiler: Compiler, root: Path, names: list[str], **extra: object) -> Path:
    for i, name in enumerate(names):
        real_module(compiler, root, name, f"int f{i}(int x) {{ return x + {i}; }}\n")
    (root / DESCRIPTION_FILE).write_text(
        json.dumps({**extra, "has_thinlto": False, "modules": names}, indent=2))
    return root


def test_combine_merges_sub_corpora_with_names_prefixed_by_subdir(tmp_path: Path,
                                                                  compiler: Compiler) -> None:
    sub_corpus(compiler, tmp_path / "zlib", ["deflate", "lib/inflate"])
    sub_corpus(compiler, tmp_path / "sqlite", ["sqlite3"])

    names = combine_corpora(tmp_path)

    assert names == ["sqlite/sqlite3", "zlib/deflate", "zlib/lib/inflate"]
    assert (tmp_path / DESCRIPTION_FILE).read_text() == json.dumps(
        {"has_thinlto": False, "modules": names}, indent=2)
    corpus = load_corpus(tmp_path)
    assert corpus.packages == ("sqlite", "zlib")
    assert corpus.module("zlib/lib/inflate").bc_path == tmp_path / "zlib/lib/inflate.bc"


def test_combine_keeps_a_shared_command_override(tmp_path: Path, compiler: Compiler) -> None:
    override = ["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj"]
    sub_corpus(compiler, tmp_path / "a", ["m"], global_command_override=override)
    sub_corpus(compiler, tmp_path / "b", ["m"], global_command_override=override)

    combine_corpora(tmp_path)

    desc = json.loads((tmp_path / DESCRIPTION_FILE).read_text())
    assert desc == {"global_command_override": override, "has_thinlto": False,
                    "modules": ["a/m", "b/m"]}


def test_combine_refuses_thinlto_mixed_with_plain(tmp_path: Path, compiler: Compiler) -> None:
    sub_corpus(compiler, tmp_path / "plain", ["m"])
    thin = sub_corpus(compiler, tmp_path / "thin", ["m"])
    (thin / DESCRIPTION_FILE).write_text(json.dumps({"has_thinlto": True, "modules": ["m"]}))

    with pytest.raises(CorpusError, match=r"differ .*has_thinlto: plain/ has False, thin/ "
                                          r"has True"):
        combine_corpora(tmp_path)
    assert not (tmp_path / DESCRIPTION_FILE).exists()


def test_combine_refuses_different_command_overrides(tmp_path: Path,
                                                     compiler: Compiler) -> None:
    sub_corpus(compiler, tmp_path / "a", ["m"], global_command_override=["-O2"])
    sub_corpus(compiler, tmp_path / "b", ["m"], global_command_override=["-O3"])

    with pytest.raises(CorpusError, match="global_command_override"):
        combine_corpora(tmp_path)
    assert not (tmp_path / DESCRIPTION_FILE).exists()


def test_combine_refuses_an_override_in_only_one_sub_corpus(tmp_path: Path,
                                                            compiler: Compiler) -> None:
    sub_corpus(compiler, tmp_path / "a", ["m"])
    sub_corpus(compiler, tmp_path / "b", ["m"], global_command_override=["-O2"])

    with pytest.raises(CorpusError, match=r"a/ has '\(absent\)'"):
        combine_corpora(tmp_path)


def test_combine_of_a_directory_without_sub_corpora_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no sub-corpora"):
        combine_corpora(tmp_path)


def test_cli_combine_reports_incompatibility_and_exits_1(tmp_path: Path, compiler: Compiler,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    sub_corpus(compiler, tmp_path / "a", ["m"], global_command_override=["-O2"])
    sub_corpus(compiler, tmp_path / "b", ["m"])

    assert corpus_main(["combine", "--root_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mlgo corpus combine: error: cannot combine sub-corpora")

    (tmp_path / "b" / DESCRIPTION_FILE).write_text(json.dumps(
        {"global_command_override": ["-O2"], "has_thinlto": False, "modules": ["m"]}))
    assert corpus_main(["combine", "--root_dir", str(tmp_path)]) == 0
    assert load_corpus(tmp_path).names == ("a/m", "b/m")
