"""`mlgo cc --mlgo-guard`: every policy compile is weighed against the plain compile of the
same command, and the user gets the smaller object, never one larger than plain -Oz. Real
compiles with the bundled clang on real C (lz4's lz4frame.c, which `shift:2:30:3:0` shrinks,
its xxhash.c, and the minic sources)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pymlgo.deploy import cc, guard
from pymlgo.toolchain.size import SIZE_METRICS, object_size
from tests.shipped_network import every_language_spec
from tests.test_cc import (
    MINIC,
    log_records,
    lz4_project,
    mlgo_cc,
    private_runtime,  # noqa: F401 (autouse: servers die with the test)
)


@pytest.fixture(scope="module")
def lz4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lz4_project(tmp_path_factory.mktemp("lz4") / "src")


@pytest.fixture()
def src(tmp_path: Path, lz4: Path) -> Path:
    code = tmp_path / "src"
    code.mkdir()
    for f in [*MINIC.iterdir(), lz4 / "xxhash.c", lz4 / "lz4frame.c", *lz4.glob("*.h")]:
        shutil.copy(f, code / f.name)
    return code


def plain_oz(src: Path, *args: str, out: str) -> bytes:
    """The object of plain clang at -Oz for the same command (what the guard weighs)."""
    inv = cc.parse_args("cc", ["-Oz", *args, "-o", out], {})
    subprocess.run(cc.reference_command(inv, cc.driver_argv(inv)), cwd=src, check=True)
    return (src / out).read_bytes()


def allocated(data: bytes) -> int:
    return object_size(data).allocated


def test_a_policy_that_grows_code_gets_the_plain_object(src):
    log = src / "log.jsonl"
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", "always", "-Oz", "-c", "xxhash.c",
                  "-o", "g.o", cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    unguarded = mlgo_cc("--mlgo-policy", "always", "-Oz", "-c", "xxhash.c", "-o", "u.o",
                        cwd=src)
    assert unguarded.returncode == 0, unguarded.stderr
    oz = plain_oz(src, "-c", "xxhash.c", out="oz.o")
    assert allocated((src / "u.o").read_bytes()) > allocated(oz)  # the policy did grow it
    assert (src / "g.o").read_bytes() == oz
    (rec,) = log_records(log)
    assert rec["served"] and rec["decisions"] > 0
    assert rec["guard"] == {"applied": True, "metric": "allocated", "objects": [
        {"object": "g.o", "kept": "plain", "policy_bytes": allocated((src / "u.o").read_bytes()),
         "plain_bytes": allocated(oz)}]}
    assert rec["object_bytes"]["allocated"] == allocated(oz)  # the log measures what is kept


def test_a_policy_that_shrinks_code_keeps_its_object(src):
    # a rule, not the shipped model: which modules a retrained model shrinks changes
    shrinks = ("--mlgo-policy", "shift:2:30:3:0")
    log = src / "log.jsonl"
    res = mlgo_cc("--mlgo-guard", *shrinks, "-Oz", "-c", "lz4frame.c", "-o", "g.o", cwd=src,
                  log=log)
    assert res.returncode == 0, res.stderr
    assert mlgo_cc(*shrinks, "-Oz", "-c", "lz4frame.c", "-o", "u.o", cwd=src).returncode == 0
    oz = plain_oz(src, "-c", "lz4frame.c", out="oz.o")
    assert (src / "g.o").read_bytes() == (src / "u.o").read_bytes()
    assert allocated((src / "g.o").read_bytes()) < allocated(oz)
    (obj,) = log_records(log)[0]["guard"]["objects"]
    assert obj["kept"] == "policy" and obj["policy_bytes"] < obj["plain_bytes"]


@pytest.mark.parametrize("policy", ["always", "never", "default", "pretrained:inlining-oz",
                                    every_language_spec()])
def test_the_guard_never_yields_more_bytes_than_plain_oz_and_is_deterministic(src, policy):
    # MLGO_GUARD=1 is the same as --mlgo-guard; no -o: the object is the source's stem.
    objects = []
    for _ in range(2):
        res = mlgo_cc("--mlgo-policy", policy, "-Oz", "-c", "table.c",
                      cwd=src, env={"MLGO_GUARD": "1"})
        assert res.returncode == 0, res.stderr
        objects.append((src / "table.o").read_bytes())
    assert objects[0] == objects[1]
    oz = plain_oz(src, "-c", "table.c", out="oz.o")
    assert allocated(objects[0]) <= allocated(oz)
    if allocated(objects[0]) == allocated(oz):
        assert objects[0] == oz  # a tie keeps plain -Oz: the outcome depends on bytes only


def test_the_dependency_file_is_written_once_and_names_the_kept_object(src):
    before = set(p.name for p in src.iterdir())
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", "always", "-Oz", "-MD", "-MF", "g.d",
                  "-MP", "-c", "xxhash.c", "-o", "g.o", cwd=src)
    assert res.returncode == 0, res.stderr
    assert set(p.name for p in src.iterdir()) - before == {"g.o", "g.d"}  # nothing else
    dep = (src / "g.d").read_text()
    assert dep.startswith("g.o: xxhash.c") and "xxhash.h" in dep
    # the same file plain clang writes for the same command
    inv = cc.parse_args("cc", ["-Oz", "-MD", "-MF", "ref.d", "-MP", "-c", "xxhash.c",
                               "-o", "g.o"], {})
    subprocess.run(cc.reference_command(inv, cc.driver_argv(inv)), cwd=src, check=True)
    assert dep == (src / "ref.d").read_text()


def test_one_command_with_several_sources_is_guarded_as_the_driver_writes_it(src):
    # zig's driver merges the objects of `-c a.c b.c` into one, named after the first.
    log = src / "log.jsonl"
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", "always", "-Oz", "-c", "b64.c", "table.c",
                  cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    assert log_records(log)[0]["sessions"] == 2
    ref = src / "ref"
    ref.mkdir()
    inv = cc.parse_args("cc", ["-Oz", "-c", "../b64.c", "../table.c"], {})
    subprocess.run(cc.reference_command(inv, cc.driver_argv(inv)), cwd=ref, check=True)
    assert (src / "b64.o").read_bytes() == (ref / "b64.o").read_bytes()
    (obj,) = log_records(log)[0]["guard"]["objects"]
    assert obj["object"] == "b64.o" and obj["kept"] == "plain"


def test_a_failing_policy_compile_shows_the_compilers_error_once(src):
    (src / "broken.c").write_text("int f(void) { return missing_name; }\n")
    log = src / "log.jsonl"
    # a learned policy that decides C (the shipped one leaves C to clang: nothing to guard)
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", every_language_spec(), "-Oz", "-c",
                  "broken.c", "-o", "b.o", cwd=src, log=log)
    assert res.returncode != 0
    assert res.stderr.count("missing_name") >= 1
    assert res.stderr.count("error:") == 1  # the plain compile's copy is not shown
    assert not (src / "b.o").exists()
    assert log_records(log)[0]["guard"] == {"applied": False,
                                            "reason": "the policy compile failed"}


def test_a_failing_plain_compile_keeps_the_policy_object_and_says_so(src, tmp_path):
    # The policy's object exists; the plain compile (a real compiler run) fails.
    res = mlgo_cc("--mlgo-policy", "always", "-Oz", "-c", "table.c", "-o", "t.o", cwd=src)
    assert res.returncode == 0, res.stderr
    kept = (src / "t.o").read_bytes()
    (src / "broken.c").write_text("int f(void) { return missing_name; }\n")
    inv = cc.parse_args("cc", ["--mlgo-guard", "-Oz", "-c", "table.c", "-o", "t.o"], {})
    plan = guard.Plan(("t.o",), (tuple(cc.reference_command(cc.parse_args(
        "cc", ["-Oz", "-c", str(src / "broken.c"), "-o", str(tmp_path / "p.o")], {}),
        cc.driver_argv(inv))),), (tmp_path / "p.o",))
    plain = guard.PlainCompiles(plan.commands, dict(os.environ))
    outcome = cc._guard_outcome(inv, plan, plain, 0)
    assert outcome is not None and outcome["applied"] is False and outcome["kept"] == "policy"
    assert "exit code 1" in str(outcome["reason"]) and "missing_name" in str(
        outcome["plain_output"])
    assert (src / "t.o").read_bytes() == kept


def test_commands_the_guard_cannot_weigh_are_compiled_without_it_and_logged(src):
    log = src / "log.jsonl"
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", "always", "-Oz", "-o", "prog", "main.c",
                  "b64.c", "sort.c", "table.c", cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    res = mlgo_cc("--mlgo-guard", "--mlgo-policy", "always", "-Oz", "-save-temps=obj", "-c",
                  "sort.c", "-o", "s.o", cwd=src, log=log)
    assert res.returncode == 0, res.stderr
    first, second = (r["guard"] for r in log_records(log))
    assert not first["applied"] and "-c" in first["reason"]
    assert not second["applied"] and "-save-temps" in second["reason"]


def test_the_plain_compile_drops_outputs_and_dependency_options_only():
    args = ["-Oz", "-MD", "-MF", "a.d", "-MTx", "-Wp,-MMD,b.d", "-I", "inc", "-c", "a.c",
            "b.c", "-o", "out.o", "-DX"]
    merged = guard.plan(["zig", "cc"], args, ["-Xclang", "-Oz"], [9, 10], True, Path("/s"))
    assert isinstance(merged, guard.Plan) and merged.outputs == ("out.o",)
    assert merged.commands == (("zig", "cc", "-Oz", "-I", "inc", "-c", "a.c", "b.c", "-DX",
                                "-Xclang", "-Oz", "-o", "/s/0.o"),)
    split = guard.plan(["clang"], ["-Os", "-c", "d/a.c", "b.c"], [], [2, 3], False, Path("/s"))
    assert isinstance(split, guard.Plan) and split.outputs == ("a.o", "b.o")
    assert split.commands == (("clang", "-Os", "-c", "d/a.c", "-o", "/s/0.o"),
                              ("clang", "-Os", "-c", "b.c", "-o", "/s/1.o"))
    assert "stdin" in str(guard.plan(["clang"], ["-x", "c", "-c", "-"], [], [3], False,
                                     Path("/s")))
    assert guard.plain_env({"DEPENDENCIES_OUTPUT": "x.d", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_guard_settings_are_parsed_and_bad_ones_named():
    assert cc.GUARD_METRICS == SIZE_METRICS
    inv = cc.parse_args("cc", ["--mlgo-guard", "--mlgo-guard-metric", "text", "-Oz", "-c",
                               "a.c"], {})
    assert inv.guard and inv.guard_metric == "text" and inv.compiler_args == ("-Oz", "-c", "a.c")
    assert cc.parse_args("cc", ["-c", "a.c"], {"MLGO_GUARD": "yes"}).guard
    assert not cc.parse_args("cc", ["-c", "a.c"], {"MLGO_GUARD": "0"}).guard
    with pytest.raises(cc.CCError, match="MLGO_GUARD"):
        cc.parse_args("cc", ["-c", "a.c"], {"MLGO_GUARD": "perhaps"})
    with pytest.raises(cc.CCError, match="unknown size metric"):
        cc.parse_args("cc", ["--mlgo-guard-metric=bytes", "-c", "a.c"], {"MLGO_GUARD": "1"})
