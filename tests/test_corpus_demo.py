"""The demo corpus: zstd, brotli and lz4 from PyPI sdists, built once, then cached."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pymlgo.corpus import demo
from pymlgo.corpus.command import recompile_args
from pymlgo.corpus.demo import (
    INFO_FILE,
    DemoError,
    cache_root,
    ensure_demo_corpus,
    split_amalgamation,
)
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, load_corpus
from pymlgo.corpus.split import split_by_package
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import text_size

# Tests of the built corpus: the first one builds it (download + about 60 compiles, a minute
# or more on 2 cores) unless the cache has it. `slow` only labels them; they run by default.
slow = pytest.mark.slow


@slow
def test_the_demo_corpus_has_at_least_40_modules_all_loadable(demo_corpus_dir: Path) -> None:
    corpus = load_corpus(demo_corpus_dir)

    assert len(corpus) >= 40
    assert corpus.packages == ("brotli", "lz4", "zstd")
    info = json.loads((demo_corpus_dir / INFO_FILE).read_text())
    assert {p: v["modules"] for p, v in info["packages"].items()} == {
        p: sum(1 for m in corpus.modules if m.package == p) for p in corpus.packages}
    assert "zstd/lib/compress/zstd_compress" in corpus.names
    assert "brotli/c/enc/encode" in corpus.names
    assert "lz4/lz4libs/lz4" in corpus.names


@slow
def test_demo_modules_are_built_for_the_fixed_target_at_oz(demo_corpus_dir: Path) -> None:
    for m in load_corpus(demo_corpus_dir).modules:
        assert m.cmd[0] == "-cc1"
        assert m.cmd[m.cmd.index("-target-cpu") + 1] == "x86-64"
        assert "-Os" in m.cmd  # zig's driver turns -Oz into cc1 -Os; recompiles force -Oz
        assert m.read_bitcode()[:4] == b"BC\xc0\xde"


@slow
def test_one_module_per_package_recompiles_at_oz(demo_corpus_dir: Path, compiler: Compiler,
                                                 tmp_path: Path) -> None:
    corpus = load_corpus(demo_corpus_dir)
    for name in ("zstd/lib/common/entropy_common", "brotli/c/dec/huffman", "lz4/lz4libs/xxhash"):
        m = corpus.module(name)
        obj = tmp_path / "out.o"
        res = subprocess.run([*compiler.clang_argv, *recompile_args(
            m.cmd, input_bc=str(m.bc_path), output_obj=str(obj))], capture_output=True)
        assert res.returncode == 0, res.stderr
        assert text_size(obj) > 0


@slow
def test_a_second_call_returns_the_cache_at_once(demo_corpus_dir: Path) -> None:
    started = time.monotonic()
    again = ensure_demo_corpus(progress=False)
    assert time.monotonic() - started < 2.0
    assert again == demo_corpus_dir
    assert again.parent == cache_root()


@slow
def test_out_dir_gets_a_copy_that_is_reused(demo_corpus_dir: Path, tmp_path: Path) -> None:
    out = ensure_demo_corpus(tmp_path / "demo", progress=False)

    assert out == tmp_path / "demo"
    assert (out / DESCRIPTION_FILE).read_bytes() == (demo_corpus_dir / DESCRIPTION_FILE
                                                     ).read_bytes()
    assert len(load_corpus(out)) == len(load_corpus(demo_corpus_dir))
    marker = out / "lz4/lz4libs/lz4.bc"
    before = marker.stat().st_mtime_ns
    assert ensure_demo_corpus(out, progress=False) == out
    assert marker.stat().st_mtime_ns == before  # not copied again


@slow
def test_an_outdated_demo_copy_is_replaced(demo_corpus_dir: Path, tmp_path: Path) -> None:
    out = ensure_demo_corpus(tmp_path / "demo", progress=False)
    (out / INFO_FILE).write_text('{"format": 0}')
    (out / "stale.bc").write_bytes(b"old")

    assert ensure_demo_corpus(out, progress=False) == out
    assert (out / INFO_FILE).read_bytes() == (demo_corpus_dir / INFO_FILE).read_bytes()
    assert not (out / "stale.bc").exists()


@slow
def test_out_dir_holding_something_else_is_not_overwritten(demo_corpus_dir: Path,
                                                           tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")

    with pytest.raises(CorpusError, match="not empty"):
        ensure_demo_corpus(tmp_path / "mine", progress=False)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


@slow
def test_the_demo_splits_by_package(demo_corpus_dir: Path) -> None:
    corpus = load_corpus(demo_corpus_dir)
    split = split_by_package(corpus, seed=0, heldout_packages=["lz4"])

    assert {n.split("/")[0] for n in split.heldout} == {"lz4"}
    assert not {n.split("/")[0] for n in split.train} & {"lz4"}


@slow
def test_cli_demo_prints_the_corpus_dir(demo_corpus_dir: Path, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "corpus", "demo",
                          "--no_progress", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(tmp_path / "d")
    assert len(load_corpus(tmp_path / "d")) == len(load_corpus(demo_corpus_dir))


@slow
def test_a_failed_build_leaves_no_half_written_cache(demo_corpus_dir: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Reuse the downloaded sdists (no network), then make the build itself fail.
    shutil.copytree(cache_root() / "sdists", tmp_path / "cache" / "sdists")
    monkeypatch.setenv(demo.CACHE_ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.setattr(demo, "write_build_files", lambda build_dir, units: ["false"])

    with pytest.raises(DemoError, match="building the demo corpus failed"):
        ensure_demo_corpus(progress=False)

    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".demo.lock", "sdists"]


# --- downloading without PyPI ------------------------------------------------------------------


@pytest.fixture
def pip_index(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Point every pip at a given index URL, with no config files or cache of the user's."""
    def use(url: str) -> None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_INDEX_URL", url)
        monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
        monkeypatch.setenv("PIP_RETRIES", "0")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.delenv(var, raising=False)
    return use


def _pip_children() -> list[int]:
    """Our own child processes that run pip."""
    me, found = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"pip" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_pypi_that_never_answers_times_out_with_advice_and_leaves_nothing(
        tmp_path: Path, pip_index: Callable[[str], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A server that accepts connections and never replies: pip waits on its socket.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        pip_index(f"http://127.0.0.1:{server.getsockname()[1]}/simple")
        monkeypatch.setenv("PIP_TIMEOUT", "300")  # pip's own socket timeout would be longer
        started = time.monotonic()

        with pytest.raises(DemoError) as info:
            demo.download_sdists(tmp_path / "sdists", progress=False, timeout=3)

    assert time.monotonic() - started < 60
    message = str(info.value)
    assert "did not finish within 3s" in message
    assert "HTTPS_PROXY" in message and "--corpus DIR" in message
    assert "\n" not in message
    assert list((tmp_path / "sdists").iterdir()) == []
    assert _pip_children() == []


def test_an_unreachable_pypi_is_a_clear_error_that_says_what_to_do(
        tmp_path: Path, pip_index: Callable[[str], None]) -> None:
    with socket.socket() as probe:  # a port nobody listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pip_index(f"http://127.0.0.1:{port}/simple")

    with pytest.raises(DemoError) as info:
        demo.download_sdists(tmp_path / "sdists", progress=False, timeout=300)

    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("could not download ")
    assert "--corpus DIR" in first_line
    assert list((tmp_path / "sdists").iterdir()) == []


# --- restoring zstd's amalgamation -------------------------------------------------------------


def test_an_amalgamation_splits_back_into_its_files() -> None:
    text = "\n".join([
        "#define CONFIG 1",
        "/**** start inlining common/a.c ****/",
        "/**** start inlining a.h ****/",
        "int a(void);",
        "/**** ended inlining a.h ****/",
        "int a(void) { return 1; }",
        "/**** ended inlining common/a.c ****/",
        "/**** start inlining compress/b.c ****/",
        "/**** skipping file: ../common/a.h ****/",
        "/**** start inlining ../zstd.h ****/",
        "int z;",
        "/**** ended inlining ../zstd.h ****/",
        "int b(void) { return a(); }",
        "/**** ended inlining compress/b.c ****/",
        "",
    ])

    files = split_amalgamation(text)

    assert files == {
        "common/a.h": "int a(void);\n",
        "common/a.c": '#include "a.h"\nint a(void) { return 1; }\n',
        "zstd.h": "int z;\n",
        "compress/b.c": '#include "../common/a.h"\n#include "../zstd.h"\n'
                        "int b(void) { return a(); }\n",
        "": '#define CONFIG 1\n#include "common/a.c"\n#include "compress/b.c"\n',
    }


def test_a_broken_amalgamation_is_refused() -> None:
    with pytest.raises(DemoError, match="unexpected end"):
        split_amalgamation("/**** start inlining a.c ****/\n/**** ended inlining b.c ****/\n")
    with pytest.raises(DemoError, match="ends inside a.c"):
        split_amalgamation("/**** start inlining a.c ****/\nint x;\n")
