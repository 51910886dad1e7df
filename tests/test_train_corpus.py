"""The tiny real corpus the training tests use: generated C, compiled by the bundled clang.

`build_tiny_corpus` writes a few C files whose static helpers are called from several
places (so inlining decisions change the .text size both ways), compiles them at -Oz with
embedded bitcode, and lays them out in LLVM's corpus format, two packages of modules.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from pymlgo.corpus.command import format_cmd, parse_cmd
from pymlgo.corpus.format import load_corpus, write_corpus_description
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.toolchain.elf import read_sections

TARGET_FLAGS = ("-target", "x86_64-linux-gnu", "-mcpu=baseline")
TINY_MODULES = ("alpha/m0", "alpha/m1", "alpha/m2", "beta/m3", "beta/m4", "beta/m5")


def c_module(seed: int, n_funcs: int = 14) -> str:
    """A C file of small helpers of four shapes calling earlier ones, and three exported
    entry points (so nothing is dead code)."""
    rng = random.Random(seed)
    out = ["#include <stddef.h>", "#include <stdint.h>", ""]
    funcs: list[str] = []
    for i in range(n_funcs):
        kind = rng.choice(["leaf", "leaf", "loop", "switch", "mid"])
        body: list[str] = []
        if kind == "leaf":
            body.append(f"  uint32_t r = x * {rng.randint(1, 9)}u + (x >> {rng.randint(1, 7)});")
        elif kind == "loop":
            body.append("  uint32_t r = 0;")
            body.append(f"  for (size_t i = 0; i < n; i++) r = r * {rng.randint(3, 99)}u + p[i]"
                        f" + (r >> {rng.randint(1, 7)});")
        elif kind == "switch":
            body.append("  uint32_t r;\n  switch (x & 7) {")
            for c in range(rng.randint(3, 7)):
                body.append(f"  case {c}: r = x * {rng.randint(2, 50)}u ^ "
                            f"{rng.randint(0, 999)}u; break;")
            body.append("  default: r = x; }")
        else:
            body.append("  uint32_t r = x;")
            for _ in range(rng.randint(2, 6)):
                body.append(f"  if (r & {1 << rng.randint(0, 9)}u) r = (r << {rng.randint(1, 5)})"
                            f" ^ p[r % (n + 1)]; else r += {rng.randint(1, 77)}u;")
        for callee in [f for f in funcs if rng.random() < 0.35][:4]:
            for _ in range(rng.randint(1, 3)):
                body.append(f"  r ^= {callee}(p, n, r + {rng.randint(0, 9)}u);")
        static = "static " if rng.random() < 0.8 else ""
        out.append(f"{static}uint32_t f{i}(const uint32_t *p, size_t n, uint32_t x) {{")
        out += body
        out.append("  return r;\n}\n")
        funcs.append(f"f{i}")
    for e in range(3):
        out.append(f"uint32_t entry{seed}_{e}(const uint32_t *p, size_t n, uint32_t x) {{")
        out.append("  uint32_t r = x;")
        out += [f"  r += {f}(p, n, r);" for f in rng.sample(funcs, min(5, len(funcs)))]
        out.append("  return r;\n}\n")
    return "\n".join(out)


def build_tiny_corpus(root: Path, compiler: Compiler | None = None,
                      modules: tuple[str, ...] = TINY_MODULES) -> Path:
    """Compile one generated C file per module name into a corpus at `root`."""
    compiler = compiler or find_compiler(None)
    build = root.parent / f"{root.name}-build"
    build.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(modules):
        src, obj = build / f"{i}.c", build / f"{i}.o"
        src.write_text(c_module(seed=i))
        subprocess.run([*compiler.cc_argv, "-c", *TARGET_FLAGS, "-Oz", "-Xclang",
                        "-fembed-bitcode=all", str(src), "-o", str(obj)], check=True)
        sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.with_suffix(".bc").write_bytes(sec[".llvmbc"])
        dest.with_suffix(".cmd").write_bytes(format_cmd(parse_cmd(sec[".llvmcmd"])))
    write_corpus_description(root, modules)
    return root


def test_tiny_corpus_is_a_real_corpus_with_two_packages(tmp_path, compiler):
    corpus = load_corpus(build_tiny_corpus(tmp_path / "tiny", compiler))
    assert corpus.names == TINY_MODULES
    assert corpus.packages == ("alpha", "beta")
    assert all(m.cmd[0] == "-cc1" and m.read_bitcode()[:2] == b"BC" for m in corpus)
