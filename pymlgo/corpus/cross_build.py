"""The environment that makes a source package's own build system build for another target.

`capture` already puts the target's compiler, `ar`, `ranlib` and `ld` (zig's) in front of
the build; what is left is telling each build system that it cross-compiles, so it neither
runs the programs it links nor takes the host's tools:

- autoconf `configure` scripts read $CONFIG_SITE before they look at the compiler: the site
  file sets the host (what `--host=TRIPLE` would) and `cross_compiling=yes`, for every
  configure the build runs (the package's and those of dependencies built beside it), where
  a `--host` argument would have to be added to each command line, some inside shell steps.
- CMake (>= 3.21) takes $CMAKE_TOOLCHAIN_FILE for every new build tree: the file sets
  CMAKE_SYSTEM_NAME/PROCESSOR (so try_compile links for the target and try_run refuses to
  run) and zig's archiver, which CMake would otherwise look up by itself (llvm-ar, ar).
- zlib-style hand-written configure scripts read $CHOST.
- Programs a build compiles and runs while building (table generators) need a compiler for
  this machine: $CC_FOR_BUILD (autoconf's convention; also BUILD_CC and HOSTCC) is zig's
  `cc` for the host, whose compiles are not recorded. A build that runs a program it
  compiled with $CC fails, and the package is reported as failing for that target.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pymlgo.corpus.targets import Target, TargetError
from pymlgo.toolchain.compiler import bundled_zig

# Bump when what this module gives a build changes: it is in a cross build's cache key.
CROSS_FORMAT = 1
CROSS_DIR = "_mlgo_cross"  # in the build's scratch copy: the files below
_CMAKE_SYSTEM = {"linux": "Linux"}


def cross_build_env(target: Target, directory: Path) -> dict[str, str]:
    """Write the site file, the CMake toolchain file and the build-machine compilers into
    `directory`; return the environment variables that point a build at them."""
    system = _CMAKE_SYSTEM.get(target.os)
    if system is None or target.freestanding:
        raise TargetError(f"target {target.name} ({target.triple}) has no operating system "
                          "these builds know (Linux): its packages cannot be configured")
    directory.mkdir(parents=True, exist_ok=True)
    site = directory / "config.site"
    site.write_text(
        f"# pymlgo: every configure of this build cross-compiles for {target.triple}\n"
        f"host_alias={shlex.quote(target.triple)}\n"
        f"ac_tool_prefix={shlex.quote(target.triple + '-')}\n"
        "cross_compiling=yes\n", encoding="utf-8")
    toolchain = directory / "toolchain.cmake"
    toolchain.write_text(
        f"# pymlgo: a build for {target.triple}; compilers come from $CC/$CXX\n"
        f"set(CMAKE_SYSTEM_NAME {system})\n"
        f"set(CMAKE_SYSTEM_PROCESSOR {target.cmake_processor})\n"
        # zig's archiver (the capture's `ar`), never one CMake finds on the host
        'if(DEFINED ENV{AR})\n  set(CMAKE_AR "$ENV{AR}" CACHE FILEPATH "" FORCE)\nendif()\n'
        'if(DEFINED ENV{RANLIB})\n'
        '  set(CMAKE_RANLIB "$ENV{RANLIB}" CACHE FILEPATH "" FORCE)\nendif()\n',
        encoding="utf-8")
    zig = str(bundled_zig())
    build_cc = {}
    for name, driver in (("cc-for-build", "cc"), ("c++-for-build", "c++")):
        script = directory / name
        script.write_text(f'#!/bin/sh\nexec {shlex.quote(zig)} {driver} "$@"\n',
                          encoding="utf-8")
        script.chmod(0o755)
        build_cc[driver] = str(script)
    return {
        "CONFIG_SITE": str(site),
        "CMAKE_TOOLCHAIN_FILE": str(toolchain),
        "CHOST": target.triple,
        "CC_FOR_BUILD": build_cc["cc"], "BUILD_CC": build_cc["cc"], "HOSTCC": build_cc["cc"],
        "CXX_FOR_BUILD": build_cc["c++"], "BUILD_CXX": build_cc["c++"],
    }
