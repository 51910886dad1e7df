"""`mlgo cc`'s policy server: one process per policy answers every compile of a build.
Real compiles with the bundled clang; the objects must be those of a compile that loads
the policy itself, whatever happens to the server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pymlgo.deploy import cc_server
from pymlgo.deploy.answer import ServeStats
from tests.shipped_network import every_language_spec
from tests.test_cc import MINIC, log_records
from tests.test_cc import mlgo_cc as mlgo_cc_default
from tests.workers_support import is_running, processes_mentioning, wait_until

# the shipped model deciding C as well (the shipped one leaves C, minic's language, to clang)
POLICY = every_language_spec()


def mlgo_cc(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`mlgo cc --mlgo-policy POLICY ARGS` (or the policy ARGS name)."""
    policy = () if "--mlgo-policy" in args else ("--mlgo-policy", POLICY)
    return mlgo_cc_default(*policy, *args, **kw)


@pytest.fixture()
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The minic sources, and a runtime dir of this test's own (its servers die with it)."""
    runtime = tmp_path / "run"
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv(cc_server.SERVER_ENV, raising=False)
    monkeypatch.setenv(cc_server.IDLE_ENV, "30")
    code = tmp_path / "src"
    code.mkdir()
    for f in MINIC.iterdir():
        (code / f.name).write_bytes(f.read_bytes())
    yield code
    for pid in processes_mentioning(runtime):
        os.kill(pid, signal.SIGKILL)


def servers(runtime: Path) -> list[int]:
    return processes_mentioning(runtime / "cc")


def compile_both_ways(src: Path, source: str, log: Path) -> tuple[bytes, bytes]:
    """(object served by the server, object of a compile that loads the policy itself)."""
    res = mlgo_cc("-Oz", "-c", source, "-o", "server.o", cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    res = mlgo_cc("-Oz", "-c", source, "-o", "here.o", cwd=src, log=log,
                  env={cc_server.SERVER_ENV: "0"})
    assert res.returncode == 0, res.stderr
    return (src / "server.o").read_bytes(), (src / "here.o").read_bytes()


def test_compiles_share_one_server_and_get_the_bytes_of_a_compile_without_it(src, tmp_path):
    log = tmp_path / "log.jsonl"
    for source in ("table.c", "sort.c", "b64.c"):
        by_server, here = compile_both_ways(src, source, log)
        assert by_server == here
    records = log_records(log)
    assert [r["served_by"] for r in records] == ["server", "process"] * 3
    for a, b in zip(records[::2], records[1::2], strict=True):  # same answers both ways
        assert (a["sessions"], a["decisions"], a["inlined"]) == (
            b["sessions"], b["decisions"], b["inlined"])
    assert sum(r["decisions"] for r in records) > 0
    assert len(servers(tmp_path / "run")) == 1


def test_an_idle_server_exits_and_removes_its_socket(src, tmp_path, monkeypatch):
    monkeypatch.setenv(cc_server.IDLE_ENV, "1")
    assert mlgo_cc("-Oz", "-c", "table.c", cwd=src).returncode == 0
    assert len(servers(tmp_path / "run")) == 1
    wait_until(lambda: not servers(tmp_path / "run"), 30, "the idle server to exit")
    assert not list((tmp_path / "run" / "cc").glob("*.sock"))


def test_a_killed_servers_stale_socket_is_replaced(src, tmp_path):
    log = tmp_path / "log.jsonl"
    assert mlgo_cc("-Oz", "-c", "table.c", cwd=src, log=log).returncode == 0
    (first,) = servers(tmp_path / "run")
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not is_running(first), 10, "the server to die")
    assert list((tmp_path / "run" / "cc").glob("*.sock"))  # left behind
    assert mlgo_cc("-Oz", "-c", "sort.c", cwd=src, log=log).returncode == 0
    assert [r["served_by"] for r in log_records(log)] == ["server", "server"]
    assert servers(tmp_path / "run") not in ([], [first])


def test_a_server_that_goes_away_mid_compile_has_the_compile_redone_here(src, tmp_path):
    # A "server" that takes the compile and hangs up at once: the compiler may already
    # be waiting on the channel, so the compile starts over and is served by mlgo cc.
    key = cc_server.policy_key(POLICY, Path(POLICY))
    path = cc_server.socket_path(key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    taken = []

    def hang_up() -> None:
        conn, _ = listener.accept()
        with conn:
            taken.append(conn.recv(4096))
            conn.sendall(b'{"accepted": true}\n')

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    log = tmp_path / "log.jsonl"
    try:
        by_server, here = compile_both_ways(src, "table.c", log)
    finally:
        listener.close()
        thread.join(10)
    assert taken and json.loads(taken[0])["module"] == "table.c"
    assert by_server == here
    assert [r["served_by"] for r in log_records(log)] == ["process", "process"]


def test_a_client_that_dies_gets_its_compiler_killed():
    # The server side of one connection, with a stand-in compiler: when the client hangs
    # up without saying that the compiler exited, the server kills the compiler's group
    # (a compiler whose channel host is gone spins forever).
    compiler = subprocess.Popen(["sleep", "600"], start_new_session=True)
    served = threading.Event()

    def serve(base, policy, module, timeout, alive):  # type: ignore[no-untyped-def]
        served.set()
        while alive():
            time.sleep(0.01)
        return ServeStats()

    server_end, client_end = socket.socketpair()
    handler = threading.Thread(target=cc_server._handle, args=(server_end, None, serve))
    handler.start()
    client_end.sendall(json.dumps({"base": "/nonexistent/channel", "module": "m.c",
                                   "pid": compiler.pid, "timeout": 60}).encode() + b"\n")
    assert served.wait(10)
    client_end.close()
    handler.join(10)
    assert compiler.wait(timeout=10) == -signal.SIGKILL


def test_a_client_that_says_its_compiler_exited_gets_the_counts_and_no_kill():
    compiler = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        def serve(base, policy, module, timeout, alive):  # type: ignore[no-untyped-def]
            while alive():
                time.sleep(0.01)
            return ServeStats(sessions=1, decisions=7, inlined=2)

        server_end, client_end = socket.socketpair()
        handler = threading.Thread(target=cc_server._handle, args=(server_end, None, serve))
        handler.start()
        lines = cc_server._Lines(client_end)
        client_end.sendall(json.dumps({"base": "/x/channel", "module": "m.c",
                                       "pid": compiler.pid, "timeout": 60}).encode() + b"\n")
        assert lines.next(10) == {"accepted": True}
        client_end.sendall(b'{"exited": true}\n')
        assert lines.next(10) == {"sessions": 1, "decisions": 7, "inlined": 2}
        handler.join(10)
        assert compiler.poll() is None  # nothing was killed
    finally:
        compiler.kill()
        compiler.wait()


def test_the_server_key_changes_with_the_policy_bytes(tmp_path):
    saved = tmp_path / "policy"
    saved.mkdir()
    (saved / "policy.json").write_text('{"v": 1}')
    first = cc_server.policy_key(str(saved), saved)
    (saved / "policy.json").write_text('{"v": 2}')  # retrained in place
    assert cc_server.policy_key(str(saved), saved) != first
    assert cc_server.policy_key("default", None) != cc_server.policy_key("never", None)
    with pytest.raises(cc_server.ServerUnavailable):
        cc_server.policy_key(str(tmp_path / "missing"), tmp_path / "missing")


def test_the_server_can_be_turned_off_and_bad_settings_are_named(src, tmp_path):
    log = tmp_path / "log.jsonl"
    res = mlgo_cc("-Oz", "-c", "table.c", cwd=src, log=log, env={cc_server.SERVER_ENV: "0"})
    assert res.returncode == 0 and log_records(log)[0]["served_by"] == "process"
    assert not servers(tmp_path / "run")
    for var, value in ((cc_server.SERVER_ENV, "maybe"), (cc_server.IDLE_ENV, "soon"),
                       (cc_server.IDLE_ENV, "0")):
        res = mlgo_cc("-Oz", "-c", "table.c", cwd=src, env={var: value})
        assert res.returncode == 1 and var in res.stderr, res.stderr


def test_a_policy_the_server_cannot_load_is_reported_by_the_compile(src, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "policy.json").write_text("{not json")
    res = mlgo_cc("--mlgo-policy", str(broken), "-Oz", "-c", "table.c", "-o", "x.o", cwd=src)
    assert res.returncode == 1 and "mlgo cc:" in res.stderr and "broken" in res.stderr
    assert not (src / "x.o").exists() and not servers(tmp_path / "run")


def test_a_saved_policy_named_by_a_relative_path_is_served(src, tmp_path):
    # The server runs in / (it outlives the build step): it gets the absolute path.
    shutil.copytree(POLICY, src / "mypolicy")
    log = tmp_path / "log.jsonl"
    res = mlgo_cc("--mlgo-policy", "mypolicy", "-Oz", "-c", "table.c", "-o", "mine.o",
                  cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    assert log_records(log)[0]["served_by"] == "server"
    res = mlgo_cc("-Oz", "-c", "table.c", "-o", "shipped.o", cwd=src,
                  env={cc_server.SERVER_ENV: "0"})
    assert res.returncode == 0, res.stderr
    assert (src / "mine.o").read_bytes() == (src / "shipped.o").read_bytes()


def test_the_deploy_modules_import_each_other_in_one_direction_only():
    # mlgo cc starts its server, the server answers as mlgo cc would: the shared part
    # (answer.py) sits below both, and no import, top-level or deferred, closes a cycle.
    import ast

    deploy = Path(cc_server.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in deploy.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
                names |= {f"{mod}.{a.name}" if mod == "pymlgo.deploy" else mod
                          for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        imports[path.stem] = {n.rsplit(".", 1)[1] for n in names
                              if n.startswith("pymlgo.deploy.")}
    assert "cc_server" in imports["cc"] and "answer" in imports["cc_server"]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in imports.get(start, ()))

    assert [m for m in imports if reaches(m, m, set())] == []


def test_a_client_may_ask_what_the_policy_needs_of_clang():
    # The native launcher asks before it starts the compiler (it reads no policy files):
    # whether the policy reads clang's own decision, and the IR2Vec vocabulary it carries
    # (test_train_ir2vec.py has the launcher compile with one).
    from dataclasses import replace

    from pymlgo.policy.store import load_policy
    from pymlgo.problems.inlining.policies import DEFAULT_FEATURE

    assert cc_server.DEFAULT_FEATURE == DEFAULT_FEATURE
    vocab = Path("/policies/p/ir2vec.json")
    shipped = load_policy("pretrained:inlining-oz")
    net = replace(shipped, window="", languages=())  # clang's features alone
    for policy, reads, ir2vec, languages in (
            (load_policy("default"), True, None, ""), (net, False, None, ""),
            (load_policy(POLICY), True, None, ""),  # its window: clang's decision outside
            (shipped, True, None, "c++"),  # C left to clang (the launcher compiles it plain)
            (replace(net, ir2vec_vocab=vocab), False, str(vocab), "")):
        server_end, client_end = socket.socketpair()
        handler = threading.Thread(target=cc_server._handle, args=(server_end, policy, None))
        handler.start()
        lines = cc_server._Lines(client_end)
        client_end.sendall(b'{"flags": true}\n')
        assert lines.next(10) == {"include_default": reads, "ir2vec_vocab": ir2vec,
                                  "languages": languages}
        client_end.close()  # no compile follows: the handler ends quietly
        handler.join(10)
        assert not handler.is_alive()
