"""`snapshot`: several corpora frozen into one corpus for one run, their module names kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pymlgo.cli.corpus import main as corpus_main
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, load_corpus
from pymlgo.corpus.snapshot import SNAPSHOT_FILE, snapshot_corpora
from pymlgo.toolchain.compiler import find_compiler
from tests.test_corpus_combine import sub_corpus


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    compiler = find_compiler(None)
    root = tmp_path_factory.mktemp("sources")
    a = sub_corpus(compiler, root / "a", ["liba/x", "liba/y"])
    b = sub_corpus(compiler, root / "b", ["z"])
    return a, b


def test_a_snapshot_holds_every_module_of_its_sources_with_their_names(sources, tmp_path):
    a, b = sources
    snap = snapshot_corpora([str(a), f"libb={b}"], tmp_path / "snap")
    assert sorted(snap.corpus.names) == ["liba/x", "liba/y", "libb/z"]
    assert set(snap.corpus.packages) == {"liba", "libb"}
    again = load_corpus(tmp_path / "snap")
    for m in again.modules:
        src = (a / m.name) if m.name.startswith("liba/") else (b / "z")
        assert m.bc_path.read_bytes() == Path(f"{src}.bc").read_bytes()
    info = json.loads((tmp_path / "snap" / SNAPSHOT_FILE).read_text())
    assert info["sources"] == [str(a), f"libb={b}"] and info["modules"] == 3


def test_a_snapshot_keeps_its_data_when_a_source_changes_later(sources, tmp_path):
    a, _ = sources
    snap = snapshot_corpora([str(a)], tmp_path / "snap")
    before = {m.name: m.bc_path.read_bytes() for m in snap.corpus.modules}
    # a corpus build replaces files (write, then rename): the snapshot must not follow
    replaced = a / "liba" / "x.bc"
    tmp = replaced.with_suffix(".new")
    tmp.write_bytes(b"BC\xc0\xde" + b"\0" * 16)
    saved = replaced.read_bytes()
    os.replace(tmp, replaced)
    try:
        rerun = snapshot_corpora([str(a)], tmp_path / "snap")
        assert {m.name: m.bc_path.read_bytes() for m in rerun.corpus.modules} == before
    finally:
        replaced.write_bytes(saved)


def test_a_source_that_does_not_load_is_left_out_and_named(sources, tmp_path):
    a, _ = sources
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / DESCRIPTION_FILE).write_text("{not json")
    snap = snapshot_corpora([str(a), f"bad={broken}"], tmp_path / "snap")
    assert list(snap.skipped) == [f"bad={broken}"]
    assert len(snap.corpus) == 2


def test_a_module_name_in_two_sources_is_an_error_and_nothing_is_written(sources, tmp_path):
    a, _ = sources
    with pytest.raises(CorpusError, match="appears in two"):
        snapshot_corpora([str(a), str(a)], tmp_path / "snap")
    assert not (tmp_path / "snap").exists() and not (tmp_path / "snap.tmp").exists()


def test_mlgo_corpus_snapshot_freezes_the_sources(sources, tmp_path, capsys):
    a, b = sources
    assert corpus_main(["snapshot", "--output_dir", str(tmp_path / "s"), str(a),
                        f"libb={b}"]) == 0
    assert "froze 3 module(s) in 2 package(s)" in capsys.readouterr().err
    assert corpus_main(["snapshot", "--output_dir", str(tmp_path / "s"), str(a)]) == 0
    assert "kept the existing snapshot of 3 module(s)" in capsys.readouterr().err
    assert corpus_main(["snapshot", "--output_dir", str(tmp_path / "t"),
                        str(tmp_path / "nothing")]) == 1
    assert "no source corpus could be loaded" in capsys.readouterr().err


def test_the_demo_source_is_the_demo_corpus_recorded_at_the_snapshots_level(
        demo_corpus_dir, demo_o2_corpus_dir, tmp_path):
    from pymlgo.corpus.front_end_level import recorded_level

    for level, expected in (("-Oz", demo_corpus_dir), ("-O2", demo_o2_corpus_dir)):
        snap = snapshot_corpora(["demo"], tmp_path / level, level=level)
        assert {recorded_level(m.cmd) for m in snap.corpus.modules} == {level}
        assert sorted(snap.corpus.names) == sorted(load_corpus(expected).names)
