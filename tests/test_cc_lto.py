"""`mlgo cc` on the link step of an LTO build: a ThinLTO link's backends ask the policy
through lld (`default` gives the stock link to the byte, the cross-module decisions arrive on
the channel), and every link whose link-time inliner is the stock one says so on stderr and
in the log. Real programs, real bitcode, the bundled zig and its lld."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pymlgo.deploy import lto
from pymlgo.deploy.launcher import command as launcher_command
from pymlgo.toolchain.compiler import bundled_zig
from tests.shipped_network import every_language_spec
from tests.test_cc import MINIC, log_records
from tests.test_cc import mlgo_cc as mlgo_cc_default

# main() calls two functions defined only in the other file: every inlining decision about
# them is a link-time one (the compile of main.c has no call site it could inline).
MAIN_C = """\
#include <stdio.h>
int scale(int x);
int clamp(int x);
int main(int argc, char **argv) {
  int s = 0;
  for (int i = 0; i < argc * 10; i++) s += scale(i) + clamp(i);
  printf("%d\\n", s);
  return s == 235 ? 0 : 1;
}
"""
LIB_C = """\
int scale(int x) { return x * 3 + 1; }
int clamp(int x) { if (x > 100) return x - 7; return x * 2; }
"""
WARNING = "the link-time inliner of this LTO link"
# the shipped model deciding C as well: minic is C, and a link's modules do not say their
# language, so the shipped one (C++ only) leaves every LTO link to the stock inliner
POLICY = every_language_spec()


def mlgo_cc(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`mlgo cc --mlgo-policy POLICY ARGS` (or the policy ARGS name)."""
    policy = () if "--mlgo-policy" in args else ("--mlgo-policy", POLICY)
    return mlgo_cc_default(*policy, *args, **kw)


def zig(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bundled_zig()), *args], cwd=cwd, check=True, timeout=600,
                          capture_output=True, text=True)


def objects(tmp_path: Path, lto_flag: str) -> Path:
    """main.o and lib.o of the two-file program, compiled to bitcode with `lto_flag`."""
    d = tmp_path / lto_flag.lstrip("-").replace("=", "-")
    d.mkdir()
    (d / "main.c").write_text(MAIN_C)
    (d / "lib.c").write_text(LIB_C)
    for name in ("main", "lib"):
        zig("cc", "-Oz", "-Xclang", "-Oz", lto_flag, "-c", f"{name}.c", "-o", f"{name}.o",
            cwd=d)
    return d


def run_program(path: Path) -> None:
    assert subprocess.run([str(path)], capture_output=True, timeout=60).returncode == 0


# --- which links are LTO links ---------------------------------------------------------------


def test_bitcode_inputs_name_the_lto_kind_of_a_link(tmp_path):
    thin, full = objects(tmp_path, "-flto=thin"), objects(tmp_path, "-flto")
    assert lto.lto_link([str(thin / "main.o"), str(thin / "lib.o")], []) == lto.LTOLink(2, 0)
    assert lto.lto_link([str(full / "main.o")], []) == lto.LTOLink(0, 1)
    mixed = lto.lto_link([str(thin / "main.o"), str(full / "lib.o")], [])
    assert mixed is not None and mixed.mode == "mixed"
    native = tmp_path / "native.o"
    zig("cc", "-Oz", "-c", str(thin / "lib.c"), "-o", str(native), cwd=tmp_path)
    assert lto.lto_link([str(native), str(tmp_path / "missing.o")], []) is None


def test_bitcode_in_archives_and_libraries_counts(tmp_path):
    thin = objects(tmp_path, "-flto=thin")
    zig("ar", "rcs", "liblib.a", "lib.o", "main.o", cwd=thin)
    zig("ar", "rcs", "--thin", "libthin.a", "lib.o", cwd=thin)
    assert lto.lto_link([str(thin / "liblib.a")], []) == lto.LTOLink(2, 0)
    assert lto.lto_link([str(thin / "libthin.a")], []) == lto.LTOLink(1, 0)
    assert lto.lto_link([], ["-L", str(thin), "-llib"]) == lto.LTOLink(2, 0)
    assert lto.lto_link([], [f"-L{thin}", "-lnothere"]) is None


# --- ThinLTO: the link-time inliner served -------------------------------------------------


def test_a_thinlto_link_is_served_and_default_is_the_stock_link_to_the_byte(tmp_path):
    d = objects(tmp_path, "-flto=thin")
    log = tmp_path / "log.jsonl"
    zig("cc", "-Oz", "-flto=thin", "main.o", "lib.o", "-o", "stock", cwd=d)
    for policy in ("default", "never"):
        res = mlgo_cc("--mlgo-policy", policy, "-Oz", "-flto=thin", "main.o", "lib.o",
                      "-o", policy, cwd=d, log=log)
        assert res.returncode == 0 and WARNING not in res.stderr, res.stderr
        run_program(d / policy)
    default, never = log_records(log)
    # one session per backend module; main's two calls into lib.c are decided at link time
    assert default["sessions"] == 2 and default["decisions"] == 2 and default["inlined"] == 2
    assert never["decisions"] == 2 and never["inlined"] == 0
    assert default["lto"] == {"mode": "thin", "thin_modules": 2, "full_modules": 0,
                              "served": True, "thinlto_jobs": 1}
    assert default["output_bytes"]["allocated"] > 0
    assert (d / "default").read_bytes() == (d / "stock").read_bytes()
    assert (d / "never").read_bytes() != (d / "stock").read_bytes()


def test_the_compile_of_main_decides_nothing_the_link_decides_its_cross_module_calls(tmp_path):
    d = objects(tmp_path, "-flto=thin")
    log = tmp_path / "log.jsonl"
    res = mlgo_cc("--mlgo-policy", "default", "-Oz", "-flto=thin", "-c", "main.c", "-o",
                  "main.o", cwd=d, log=log)
    assert res.returncode == 0, res.stderr
    assert log_records(log)[0]["decisions"] == 0


def test_make_builds_minic_with_thinlto_and_the_pretrained_policy_at_link_time(tmp_path):
    src = tmp_path / "minic"
    shutil.copytree(MINIC, src)
    log = tmp_path / "log.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "MLGO_POLICY"}
    env["MLGO_CC_LOG"] = str(log)
    mlgo = " ".join(json.dumps(a) for a in mlgo_cc_argv())
    res = subprocess.run(["make", "-s", f"CC={mlgo}", "CFLAGS=-Oz -flto=thin"], cwd=src,
                         env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert res.returncode == 0 and WARNING not in res.stderr, res.stderr
    run_program(src / "minic")
    link = log_records(log)[-1]
    assert link["lto"]["served"] and link["lto"]["thin_modules"] == 4
    assert link["sessions"] == 4 and link["decisions"] > 0


def mlgo_cc_argv() -> list[str]:
    from tests.test_cc import mlgo_command

    return [*mlgo_command(), "cc", "--mlgo-policy", POLICY]


# --- never silence: the links whose link-time inliner is the stock one -------------------------


def test_a_full_lto_link_warns_that_its_inliner_is_the_stock_one(tmp_path):
    d = objects(tmp_path, "-flto")
    log = tmp_path / "log.jsonl"
    zig("cc", "-Oz", "-flto", "main.o", "lib.o", "-o", "stock", cwd=d)
    res = mlgo_cc("-Oz", "-flto", "main.o", "lib.o", "-o", "prog", cwd=d, log=log)
    assert res.returncode == 0
    assert WARNING in res.stderr and "full LTO" in res.stderr
    (rec,) = log_records(log)
    assert rec["served"] is False and rec["lto"]["served"] is False
    assert rec["lto"]["mode"] == "full" and "full LTO" in rec["lto"]["reason"]
    assert (d / "prog").read_bytes() == (d / "stock").read_bytes()


def test_a_thinlto_link_without_a_size_level_warns_and_one_at_o2_is_silent(tmp_path):
    d = objects(tmp_path, "-flto=thin")
    res = mlgo_cc("-flto=thin", "main.o", "lib.o", "-o", "nolevel", cwd=d)
    assert res.returncode == 0 and WARNING in res.stderr and "-Oz" in res.stderr
    res = mlgo_cc("-O2", "-flto=thin", "main.o", "lib.o", "-o", "o2", cwd=d)
    assert res.returncode == 0 and res.stderr == ""


def test_compiling_and_linking_in_one_command_warns_about_the_link(tmp_path):
    d = objects(tmp_path, "-flto=thin")
    log = tmp_path / "log.jsonl"
    res = mlgo_cc("-Oz", "-flto=thin", "main.c", "lib.c", "-o", "prog", cwd=d, log=log)
    assert res.returncode == 0 and WARNING in res.stderr and "-c" in res.stderr
    (rec,) = log_records(log)
    assert rec["served"] is True and rec["lto"]["served"] is False
    run_program(d / "prog")


def test_the_native_launcher_hands_lto_links_to_the_python_path(tmp_path):
    cmd, why_not = launcher_command("cc")
    if why_not is not None:
        pytest.skip(why_not)
    d = objects(tmp_path, "-flto=thin")

    env = {**os.environ, "MLGO_POLICY": POLICY}

    def explain(*args: str) -> str:
        return subprocess.run([*cmd, "--mlgo-launcher-explain", *args], cwd=d, check=True,
                              capture_output=True, text=True, env=env).stdout.strip()

    assert explain("-Oz", "main.o", "lib.o", "-o", "prog") == "python"
    assert explain("-Oz", "-flto=thin", "main.c", "-o", "prog") == "python"
    assert explain("-Oz", "-flto=thin", "-c", "main.c").startswith("policy")
    res = subprocess.run([*cmd, "-Oz", "main.o", "lib.o", "-o", "prog"], cwd=d, check=False,
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0 and WARNING not in res.stderr, res.stderr
    run_program(d / "prog")


def test_a_policy_that_decides_some_languages_leaves_lto_links_to_the_stock_inliner(tmp_path):
    # the shipped model decides C++ only, and the modules of a link do not say their language
    d = objects(tmp_path, "-flto=thin")
    log = tmp_path / "log.jsonl"
    zig("cc", "-Oz", "-flto=thin", "main.o", "lib.o", "-o", "stock", cwd=d)
    res = mlgo_cc("--mlgo-policy", "pretrained:inlining-oz", "-Oz", "-flto=thin", "main.o",
                  "lib.o", "-o", "prog", cwd=d, log=log)
    assert res.returncode == 0 and WARNING in res.stderr and "c++ only" in res.stderr
    (rec,) = log_records(log)
    assert rec["lto"]["served"] is False and "language" in rec["lto"]["reason"]
    assert (d / "prog").read_bytes() == (d / "stock").read_bytes()
