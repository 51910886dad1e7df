"""Property tests: the corpus loader on random descriptions, names, commands and files.

Whatever is on disk, `load_corpus` returns a corpus whose every module is a file inside the
corpus directory with a command that passes the flag allowlist — or raises `CorpusError`.
No other exception, no silently dropped or invented module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pymlgo.corpus.allowlist import unsafe_flags
from pymlgo.corpus.command import format_cmd
from pymlgo.corpus.format import DESCRIPTION_FILE, CorpusError, check_module_name, load_corpus
from tests.fuzz_watchdog import hang_guard

FAST = settings(max_examples=300, deadline=3000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
GUARD_S = 15.0  # per example (hang_guard): a loaded CI machine stays far below it
# A driver-style global_command_override runs the real `clang -###` (up to its own 60 s
# timeout). That first exec of the 185 MB zig binary can take seconds when the kernel has
# dropped it from the page cache (12.3 s seen once here), so examples that may reach the
# compiler are judged by the hang guard alone, with room above that timeout.
COMPILER_GUARD_S = 90.0

CC1 = ("-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj", "-Oz")

path_parts = st.sampled_from(["a", "b", "lib", "..", ".", "", "x.o", "/", "\\", "\0", "C:",
                              "~", "a" * 300, " ", "é", "\n"])
module_names = st.one_of(
    st.lists(path_parts, min_size=1, max_size=4).map("/".join),
    st.text(max_size=20),
    st.sampled_from(["lib/a.o", "lib/b.o", "c.o"]),
)
cmd_args = st.one_of(
    st.sampled_from(["-cc1", "-Oz", "-emit-obj", "-triple", "x86_64-unknown-linux-gnu",
                     "-load", "/tmp/evil.so", "-mllvm", "-load=/x.so", "-fplugin=/x.so",
                     "@/tmp/rsp", "-o", "/tmp/out.o", "-D", "X=1", "-fno-math-errno",
                     "-target-feature", "+sse4.2", "-opt-record-file", "-x", "ir", "bare"]),
    st.text(max_size=10),
)
cmd_bytes = st.one_of(
    st.lists(cmd_args, max_size=8).map(lambda a: format_cmd(("-cc1", *a))),
    st.lists(cmd_args, max_size=8).map(format_cmd),
    st.binary(max_size=64),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8,
)


safe_args = st.lists(st.sampled_from(["-DX=1", "-fno-math-errno", "-Wall", "-mrelax-all",
                                      "-vectorize-slp", "-O2"]), max_size=3)


@st.composite
def near_valid(draw: st.DrawFn) -> dict:
    """A valid corpus, then at most one thing made wrong: both verdicts are common."""
    names = draw(st.lists(st.sampled_from(["lib/a.o", "lib/b.o", "c.o", "d/e/f.o"]),
                          min_size=1, max_size=4, unique=True))
    files = {n: (True, format_cmd((*CC1, *draw(safe_args))), False) for n in names}
    desc: dict[str, object] = {"modules": names}
    fault = draw(st.sampled_from(["none", "none", "no_bc", "bad_cmd", "no_cmd", "dupe",
                                  "thinlto", "override"]))
    victim = names[0]
    if fault == "no_bc":
        files[victim] = (False, files[victim][1], False)
    elif fault == "bad_cmd":
        files[victim] = (True, draw(cmd_bytes), False)
    elif fault == "no_cmd":
        files[victim] = (True, None, False)
    elif fault == "dupe":
        desc["modules"] = [*names, victim]
    elif fault == "thinlto":
        desc["has_thinlto"] = True
        files = {n: (b, c, draw(st.booleans())) for n, (b, c, _) in files.items()}
    elif fault == "override":
        desc["global_command_override"] = ["-cc1", *draw(st.lists(cmd_args, max_size=4))]
    event(f"fault: {fault}")
    return {"desc": desc, "files": files, "raw_desc": None, "extra_keys": {}}


@st.composite
def random_corpora(draw: st.DrawFn) -> dict:
    names = draw(st.lists(module_names, max_size=4))
    desc: dict[str, object] = {"modules": names}
    if draw(st.booleans()):
        desc["has_thinlto"] = draw(st.booleans() | json_values)
    if draw(st.integers(0, 3)) == 0:
        # cc1-form overrides only: a driver-form one would start clang for each example.
        desc["global_command_override"] = draw(
            st.lists(cmd_args, max_size=5).map(lambda a: ["-cc1", *a]) | json_values
        )
    files = {}
    for name in names:
        files[name] = (draw(st.booleans()), draw(st.none() | cmd_bytes),
                       draw(st.booleans()))  # .bc present, .cmd bytes, .thinlto.bc present
    return {"desc": desc, "files": files,
            "raw_desc": draw(st.none() | st.binary(max_size=40)),
            "extra_keys": draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2))}


corpora = st.one_of(random_corpora(), near_valid())


def write(root: Path, spec: dict) -> None:
    for name, (has_bc, cmd, has_index) in spec["files"].items():
        try:
            check_module_name(name)
        except CorpusError:
            continue  # not a path we may create; the loader must refuse the name itself
        try:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if has_bc:
                path.with_name(path.name + ".bc").write_bytes(b"BC\xc0\xde")
            if cmd is not None:
                path.with_name(path.name + ".cmd").write_bytes(cmd)
            if has_index:
                path.with_name(path.name + ".thinlto.bc").write_bytes(b"BC\xc0\xde")
        except OSError:
            continue  # e.g. a name too long, or a file where a directory should be
    desc_path = root / DESCRIPTION_FILE
    if spec["raw_desc"] is not None:
        desc_path.write_bytes(spec["raw_desc"])
    else:
        desc_path.write_text(json.dumps({**spec["extra_keys"], **spec["desc"]}))


@settings(FAST, deadline=None)
@given(corpora)
@hang_guard(COMPILER_GUARD_S)
def test_any_corpus_on_disk_loads_validly_or_raises_corpus_error(spec: dict) -> None:
    with TemporaryDirectory(prefix="mlgo-fuzz-") as tmp:
        root = Path(tmp)
        write(root, spec)
        try:
            corpus = load_corpus(root)
        except CorpusError as exc:
            assert str(exc)
            event("CorpusError")
            return
        event("loaded")
        real_root = root.resolve()
        desc = spec["desc"]
        # Every listed module, in order: none dropped, none invented.
        assert list(corpus.names) == desc["modules"]
        event(f"loaded {len(corpus)} module(s)")
        assert len(set(corpus.names)) == len(corpus.names)
        for m in corpus.modules:
            assert m.bc_path.resolve().is_relative_to(real_root)
            assert m.bc_path.is_file()
            assert m.cmd[0] == "-cc1"
            recorded = desc.get("global_command_override") is None
            # The loader appends its own -fthinlto-index / -mllvm pair for ThinLTO corpora.
            cmd = m.cmd[:-3] if corpus.has_thinlto else m.cmd
            assert unsafe_flags(cmd, recorded=recorded) == []


@settings(FAST, max_examples=200)
@given(st.binary(max_size=200))
@hang_guard(GUARD_S)
def test_a_cmd_file_of_random_bytes_loads_only_if_it_is_an_allowed_cc1_command(
    raw: bytes,
) -> None:
    with TemporaryDirectory(prefix="mlgo-fuzz-") as tmp:
        root = Path(tmp)
        (root / "m.o.bc").write_bytes(b"BC\xc0\xde")
        (root / "m.o.cmd").write_bytes(raw)
        (root / DESCRIPTION_FILE).write_text(json.dumps({"modules": ["m.o"]}))
        try:
            corpus = load_corpus(root)
        except CorpusError:
            return
        cmd = corpus.module("m.o").cmd
        assert cmd[0] == "-cc1" and unsafe_flags(cmd) == []
        assert format_cmd(cmd) == b"".join(f + b"\0" for f in raw.split(b"\0") if f)


@hang_guard(GUARD_S)  # the loader must never open the FIFO: that open would block
def test_unreadable_and_odd_files_end_in_corpus_error(tmp_path: Path) -> None:
    """A description that is a directory, a FIFO in place of .bc, a name too long."""
    (tmp_path / DESCRIPTION_FILE).mkdir()
    with pytest.raises(CorpusError) as refused:
        load_corpus(tmp_path)
    assert "no corpus_description.json" in str(refused.value)
    os.rmdir(tmp_path / DESCRIPTION_FILE)
    (tmp_path / DESCRIPTION_FILE).write_text(json.dumps({"modules": ["m.o", "a" * 400]}))
    os.mkfifo(tmp_path / "m.o.bc")
    (tmp_path / "m.o.cmd").write_bytes(format_cmd(CC1))
    with pytest.raises(CorpusError) as refused:  # not loaded: its .bc is a FIFO
        load_corpus(tmp_path)
    assert "m.o: missing m.o.bc" in str(refused.value)
    assert "File name too long" in str(refused.value)
