"""`mlgo cc`'s native launcher (pymlgo/deploy/launcher.c, built with the bundled zig): it
decides as the Python path does, finds the Python path's policy server, gives the same
objects, hands everything it cannot do to the Python path, and leaves no FIFO, socket or
process behind. Real compiles with the bundled clang."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pymlgo.deploy import cc, cc_server
from pymlgo.deploy.cc import pretrained_dir
from pymlgo.deploy.launcher import build_config, launcher_path
from tests.shipped_network import every_language_spec
from tests.test_cc import LZ4_OBJECTS, MINIC, log_records, lz4_project, make
from tests.test_cc import mlgo_cc as mlgo_cc_default
from tests.test_cc import mlgo_command as cc_python
from tests.workers_support import processes_mentioning, wait_until

# the shipped model deciding C as well (the shipped one leaves C, these sources' language, to
# clang); the default policy of every command here ($MLGO_POLICY)
POLICY = every_language_spec()


def mlgo_cc(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`mlgo cc --mlgo-policy POLICY ARGS` (or the policy ARGS name)."""
    policy = () if "--mlgo-policy" in args else ("--mlgo-policy", POLICY)
    return mlgo_cc_default(*policy, *args, **kw)


@pytest.fixture(scope="module")
def launcher() -> Path:
    return launcher_path("cc")


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A runtime dir and a TMPDIR of this test's own (the FIFOs go there: counted after),
    its servers killed at the end."""
    runtime, tmpdir = tmp_path / "run", tmp_path / "tmp"
    tmpdir.mkdir()
    for var in ("MLGO_CC_LOG", "MLGO_GUARD", "MLGO_CLANG", cc_server.SERVER_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MLGO_POLICY", POLICY)
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setenv(cc_server.IDLE_ENV, "60")
    yield {"runtime": runtime, "tmpdir": tmpdir}
    for pid in processes_mentioning(runtime):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    code = tmp_path / "src"
    code.mkdir()
    for f in MINIC.iterdir():
        shutil.copy(f, code / f.name)
    return code


def run(launcher: Path, *args: str, cwd: Path, log: Path | None = None,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(extra_env or {})}
    if log is not None:
        full["MLGO_CC_LOG"] = str(log)
    return subprocess.run([str(launcher), *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600, check=False)


def explain(launcher: Path, *args: str, **extra_env: str) -> str:
    out = subprocess.run([str(launcher), "--mlgo-launcher-explain", *args],
                         env={**os.environ, **extra_env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def start_server(src: Path, policy: str = POLICY) -> None:
    """The first compile of a build: the Python path starts the policy server."""
    res = mlgo_cc("--mlgo-policy", policy, "-Oz", "-c", "sort.c", "-o", "first.o", cwd=src)
    assert res.returncode == 0, res.stderr


def leftovers(env: dict[str, Path]) -> tuple[list[str], list[int]]:
    """FIFO directories in the test's TMPDIR, and processes that name one."""
    return ([p.name for p in env["tmpdir"].iterdir()], processes_mentioning(env["tmpdir"]))


def server_sockets(runtime: Path) -> int:
    """Open sockets of the (one) policy server: its listener and one per connection."""
    (pid,) = processes_mentioning(runtime / "cc")
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))


# --- deciding ----------------------------------------------------------------------------


COMMANDS = [
    ["-Oz", "-c", "a.c"], ["-Os", "-c", "x.cpp", "-o", "x.o"], ["-O2", "-c", "a.c"],
    ["-Oz", "-O2", "-c", "a.c"], ["-O2", "-Oz", "-c", "a.c"], ["-Oz", "-o", "prog", "a.o"],
    ["-Oz", "-E", "a.c"], ["-Oz", "-o", "out.c", "-MF", "-Os", "-c", "in.c"],
    ["-Oz", "-x", "c", "-c", "-"], ["-Oz", "-c", "-"], ["-Oz", "-xc", "-c", "file.txt"],
    ["-Oz", "-c", ".c"], ["-Oz", "-c", "dir.c/file"], ["-Oz", "-c", "a.C", "b.ll"],
    ["-Oz", "-fsyntax-only", "a.c"], ["-Oz", "-I", "x.c", "-c", "a.h"], ["-O", "-c", "a.c"],
    ["-Oz", "--version"], ["-Oz", "-S", "a.c"], ["-Oz", "-x", "none", "-c", "a.txt"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_the_launcher_decides_as_the_python_path(launcher, env, args):
    inv = cc.parse_args("cc", args, {})
    assert explain(launcher, *args) == (f"policy {POLICY}" if inv.uses_policy else "exec")
    assert explain(launcher, "--mlgo-policy", "always", *args) == (
        "policy always" if inv.uses_policy else "exec")


def test_what_the_launcher_does_not_do_itself_goes_to_the_python_path(launcher, env):
    compile_ = ["-Oz", "-c", "a.c"]
    for args, extra in ((["--mlgo-guard", *compile_], {}), (["--clang", "/x", *compile_], {}),
                        (["--mlgo-launcher"], {}), (["--help"], {}), ([], {}),
                        (compile_, {"MLGO_GUARD": "1"}), (compile_, {"MLGO_CLANG": "/x"}),
                        (compile_, {"MLGO_CC_SERVER": "0"}),
                        (compile_, {"MLGO_CC_SERVER": "maybe"}),
                        (compile_, {"MLGO_GUARD": "perhaps"}),
                        (["-O2", "-c", "a.c"], {"MLGO_CC_LOG": "/x.jsonl"})):
        assert explain(launcher, *args, **extra) == "python", (args, extra)
    assert explain(launcher, *compile_, MLGO_GUARD="off", MLGO_CC_SERVER=" Yes ") == (
        f"policy {POLICY}")
    assert explain(launcher, *compile_, MLGO_POLICY="never") == "policy never"


def test_the_launcher_has_the_python_paths_places_built_in():
    config = build_config()
    assert Path(config["MLGO_PRETRAINED_ROOT"]) == pretrained_dir("inlining-oz").parent
    assert [config[k] for k in ("MLGO_KEY_VERSION", "MLGO_KEY_PYTHON", "MLGO_KEY_SERVER")] == (
        cc_server.key_prefix())
    env = cc.compiler_env(cc.parse_args("cc", [], {}), [config["MLGO_ZIG"], "cc"])
    assert (config["MLGO_ENV_CC"], config["MLGO_ENV_CXX"]) == (env["CC"], env["CXX"])


def test_mlgo_cc_prints_the_launcher_and_cxx_is_the_same_binary(launcher, env, src):
    # (the launcher has this Python built in: the fallback runs the same interpreter)
    this_python = [sys.executable, "-m", "pymlgo.cli.main"]
    res = subprocess.run([*this_python, "cc", "--mlgo-launcher"], capture_output=True,
                         text=True, check=True)
    assert shlex.split(res.stdout) == [str(launcher)] and not res.stderr
    cxx = subprocess.run([*this_python, "c++", "--mlgo-launcher"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert Path(cxx).name == "mlgo-c++" and Path(cxx).resolve() == launcher.resolve()
    (src / "hello.cc").write_text("#include <string>\nstd::string f(int n) { return "
                                  "std::to_string(n); }\n")
    assert explain(Path(cxx), "-Oz", "-c", "hello.cc") == f"policy {POLICY}"


# --- compiling ------------------------------------------------------------------------------


def test_the_launcher_uses_the_python_paths_server_and_gives_its_bytes(launcher, env, src,
                                                                      tmp_path):
    log = tmp_path / "log.jsonl"
    start_server(src)
    sockets = server_sockets(env["runtime"])
    for source in ("table.c", "b64.c"):
        res = run(launcher, "-Oz", "-c", source, "-o", f"l-{source}.o", cwd=src, log=log)
        assert res.returncode == 0, res.stderr
        res = mlgo_cc("-Oz", "-c", source, "-o", f"p-{source}.o", cwd=src, log=log)
        assert res.returncode == 0, res.stderr
        assert (src / f"l-{source}.o").read_bytes() == (src / f"p-{source}.o").read_bytes()
    recs = log_records(log)
    assert [r["served_by"] for r in recs] == ["launcher", "server"] * 2
    for a, b in zip(recs[::2], recs[1::2], strict=True):  # the same decisions both ways
        assert (a["sessions"], a["decisions"], a["inlined"], a["object_bytes"]) == (
            b["sessions"], b["decisions"], b["inlined"], b["object_bytes"])
    assert leftovers(env) == ([], [])
    assert server_sockets(env["runtime"]) == sockets  # every connection closed
    assert len(processes_mentioning(env["runtime"] / "cc")) == 1


@pytest.mark.parametrize("spec", ["always", "random:0.5:1", "shift:2:30:3", "relative-policy-dir"])
def test_the_launcher_finds_the_server_of_any_policy_spec(launcher, env, src, tmp_path, spec):
    if spec == "relative-policy-dir":
        shutil.copytree(POLICY, src / spec)
    start_server(src, spec)
    log = tmp_path / "log.jsonl"
    res = run(launcher, "--mlgo-policy", spec, "-Oz", "-c", "table.c", cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    assert log_records(log)[0]["served_by"] == "launcher"


def test_a_make_build_gives_the_same_bytes_through_launcher_and_python_path(launcher, env,
                                                                           tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    built = {}
    # (make's environment has no $MLGO_POLICY: the commands name the policy)
    for way, command in (("launcher", shlex.join([str(launcher), "--mlgo-policy", POLICY])),
                         ("python", shlex.join([*cc_python(), "cc", "--mlgo-policy", POLICY]))):
        project = lz4_project(tmp_path / way)
        log = tmp_path / f"{way}.jsonl"
        make(project, command, "-Oz", log)
        built[way] = {o: (project / o).read_bytes() for o in (*LZ4_OBJECTS, "lz4rt")}
        assert subprocess.run([str(project / "lz4rt")], capture_output=True,
                              timeout=120).returncode == 0
        by = [r["served_by"] for r in log_records(log) if r["served"]]
        if way == "launcher":  # the first compile starts the server, the others use it
            assert by[0] == "server" and set(by[1:]) == {"launcher"}, by
        else:
            assert set(by) == {"server"}
    assert built["launcher"] == built["python"]
    assert leftovers(env) == ([], [])


def test_commands_without_a_policy_are_execed_unchanged(launcher, env, src):
    res = run(launcher, "-O2", "-c", "sort.c", "-o", "l.o", cwd=src)
    assert res.returncode == 0, res.stderr
    subprocess.run([*cc_python(), "cc", "-O2", "-c", "sort.c", "-o", "p.o"], cwd=src,
                   check=True)
    assert (src / "l.o").read_bytes() == (src / "p.o").read_bytes()
    bad = run(launcher, "-O2", "-c", "missing.c", cwd=src)
    assert bad.returncode != 0 and "missing.c" in bad.stderr
    assert not processes_mentioning(env["runtime"] / "cc")  # no server was needed


# --- falling back ----------------------------------------------------------------------------


def test_without_a_server_the_python_path_starts_one(launcher, env, src, tmp_path):
    log = tmp_path / "log.jsonl"
    for out in ("a.o", "b.o"):
        res = run(launcher, "-Oz", "-c", "table.c", "-o", out, cwd=src, log=log)
        assert res.returncode == 0, res.stderr
    assert [r["served_by"] for r in log_records(log)] == ["server", "launcher"]
    assert (src / "a.o").read_bytes() == (src / "b.o").read_bytes()


def test_a_server_that_cannot_start_leaves_the_python_paths_answer(launcher, env, src,
                                                                  tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "policy.json").write_text("{not json")
    res = run(launcher, "--mlgo-policy", str(broken), "-Oz", "-c", "table.c", "-o", "x.o",
              cwd=src)
    assert res.returncode == 1 and "mlgo cc:" in res.stderr and "broken" in res.stderr
    assert not (src / "x.o").exists()
    log = tmp_path / "log.jsonl"
    res = run(launcher, "-Oz", "-c", "table.c", cwd=src, log=log,
              extra_env={cc_server.SERVER_ENV: "0"})
    assert res.returncode == 0 and log_records(log)[0]["served_by"] == "process"
    assert leftovers(env) == ([], [])


def test_a_server_that_goes_away_mid_compile_has_the_compile_redone(launcher, env, src,
                                                                   tmp_path):
    # A "server" that takes the compile, then hangs up and stops listening: the launcher
    # hands the command to the Python path, which starts a real server and compiles again.
    key = cc_server.policy_key(POLICY, Path(POLICY))
    path = cc_server.socket_path(key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    taken: list[bytes] = []

    def hang_up() -> None:
        conn, _ = listener.accept()
        with conn:
            lines = cc_server._Lines(conn)
            assert lines.next(10) == {"flags": True}
            conn.sendall(b'{"include_default": false, "ir2vec_vocab": null}\n')
            taken.append(json.dumps(lines.next(10)).encode())
            conn.sendall(b'{"accepted": true}\n')
            listener.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    log = tmp_path / "log.jsonl"
    res = run(launcher, "-Oz", "-c", "table.c", "-o", "l.o", cwd=src, log=log)
    thread.join(10)
    assert res.returncode == 0, res.stderr
    assert taken and json.loads(taken[0])["module"] == "table.c"
    assert [r["served_by"] for r in log_records(log)] == ["server"]
    res = mlgo_cc("-Oz", "-c", "table.c", "-o", "p.o", cwd=src, env={"MLGO_CC_SERVER": "0"})
    assert res.returncode == 0, res.stderr
    assert (src / "l.o").read_bytes() == (src / "p.o").read_bytes()
    assert leftovers(env) == ([], [])


# --- killing ---------------------------------------------------------------------------------


def slow_compile(launcher: Path, src: Path, env: dict[str, Path]) -> subprocess.Popen[bytes]:
    """A launcher compiling a source big enough to be caught in the act (a few seconds
    of -Oz: lz4.c of the demo corpus's lz4), once its clang is running."""
    lz4 = lz4_project(src / "lz4")
    proc = subprocess.Popen([str(launcher), "-Oz", f"-DRUN={time.time_ns()}", "-c", "lz4.c",
                             "-o", "lz4.o"], cwd=lz4, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    wait_until(lambda: clangs(env) or proc.poll() is not None, 120,
               "the launcher's clang to start")
    assert proc.poll() is None, proc.communicate()
    return proc


def clangs(env: dict[str, Path]) -> list[int]:
    """The clang processes zig's driver started for the launcher's compile (they name the
    channel, in the test's TMPDIR; clang runs cc1 in the same process)."""
    found = []
    for pid in processes_mentioning(env["tmpdir"]):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == b"clang":
            found.append(pid)
    return found


def test_a_killed_clang_ends_the_compile_with_nothing_left_behind(launcher, env, src):
    start_server(src)
    sockets = server_sockets(env["runtime"])
    proc = slow_compile(launcher, src, env)
    (clang,) = clangs(env)
    os.kill(clang, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    wait_until(lambda: leftovers(env) == ([], []), 10, "the FIFOs and processes to go")
    wait_until(lambda: server_sockets(env["runtime"]) == sockets, 10,
               "the server to close the connection")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_launcher_takes_its_compiler_and_fifos_with_it(launcher, env, src, sig):
    # SIGTERM (make stopping a job): the launcher kills its compiler and cleans up;
    # SIGKILL: the server sees the client gone, kills the compiler, removes the FIFOs.
    start_server(src)
    sockets = server_sockets(env["runtime"])
    proc = slow_compile(launcher, src, env)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode in (128 + sig, -sig)
    wait_until(lambda: leftovers(env) == ([], []), 20, "the FIFOs and processes to go")
    wait_until(lambda: server_sockets(env["runtime"]) == sockets, 10,
               "the server to close the connection")
    assert len(processes_mentioning(env["runtime"] / "cc")) == 1  # the server lives on
