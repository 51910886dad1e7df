"""`mlgo corpus`: make corpora (extract, make, combine, capture, demo) and inspect them."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from pymlgo.corpus.format import CorpusError, load_corpus
from pymlgo.toolchain.compiler import CompilerError

_FORMAT_NOTE = (
    "The output is the corpus layout of LLVM's mlgo-utils: corpus_description.json plus, per "
    "module, NAME.bc (bitcode before optimization) and NAME.cmd (the cc1 arguments, "
    "NUL-separated); ThinLTO adds NAME.thinlto.bc. The corpus is written to a temporary "
    "directory next to the output and renamed into place, so a failed run writes nothing."
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "corpus",
        help="build a corpus (capture a build, extract, make, combine, demo) or inspect one",
        description=(
            "A corpus is the training and evaluation data of MLGO: the modules of a real "
            "program, captured before optimization, with the exact command that compiles "
            "each. " + _FORMAT_NOTE
        ),
    )

    def no_action(_args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=no_action)
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    _add_capture(sub)
    _add_extract(sub)
    _add_make(sub)
    _add_combine(sub)
    _add_snapshot(sub)
    _add_demo(sub)
    _add_debian(sub)
    _add_info(sub)


def _add_common_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty output directory (only once the new corpus is "
                   "complete)")
    p.add_argument("--no_progress", action="store_true", help="no progress bar")


def _add_extract(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "extract",
        help="corpus from objects built with -Xclang -fembed-bitcode=all",
        description=(
            "Read the embedded .llvmbc (bitcode) and .llvmcmd (cc1 command) sections of every "
            "object named by a compile_commands.json, a linker parameters file, or found in a "
            "directory, and write a corpus. Flags are those of LLVM's mlgo-utils extract_ir; "
            "sections are read in Python, so no llvm-objcopy is needed. Objects without "
            "embedded bitcode (e.g. from assembly), missing objects and non-ELF files are "
            "reported, not fatal. Module names are object paths without the .o extension. "
            + _FORMAT_NOTE
        ),
    )
    p.add_argument("--input", default=None, metavar="F",
                   help="compile_commands.json, a linker parameters file, or a directory of "
                   "objects (omit with --thinlto_build=local)")
    p.add_argument("--input_type", choices=["json", "params", "directory"], default="json",
                   help="what --input is (default: json)")
    p.add_argument("--output_dir", required=True, metavar="D", help="corpus directory to write")
    p.add_argument("--num_workers", type=int, default=None, metavar="N",
                   help="parallel worker processes (default: all cores)")
    p.add_argument("--obj_base_dir", default=None, metavar="B",
                   help="directory object paths are relative to, and module names are made "
                   "relative to (default: each compile command's directory for json, the "
                   "current directory for params)")
    p.add_argument("--cmd_filter", default=None, metavar="REGEX",
                   help="keep only modules with a command argument matching REGEX (searched in "
                   "each argument separately, e.g. '^-O2|-O3')")
    p.add_argument("--thinlto_build", choices=["distributed", "local"], default=None,
                   help="distributed: also copy each module's -fthinlto-index file; local: "
                   "take the *.3.import.bc and *.thinlto.bc that lld's --save-temps=import "
                   "and --thinlto-emit-index-files left under --obj_base_dir")
    p.add_argument("--cmd_section_name", default=".llvmcmd", metavar="S",
                   help="section holding the command (default: .llvmcmd)")
    p.add_argument("--bitcode_section_name", default=".llvmbc", metavar="S",
                   help="section holding the bitcode (default: .llvmbc)")
    p.add_argument("--llvm_objcopy_path", default=None, metavar="P",
                   help="accepted for compatibility with mlgo-utils and ignored")
    _add_common_output(p)
    p.set_defaults(func=run_extract)


def _add_make(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "make",
        help="corpus from loose .bc files",
        description=(
            "Copy every .bc file under --input_dir into a corpus. Loose bitcode has no recorded "
            "command, so the corpus gets global_command_override = --default_args (clang driver "
            "flags such as '-O2', or cc1 arguments starting with -cc1), as LLVM's mlgo-utils "
            "make_corpus does. " + _FORMAT_NOTE
        ),
    )
    p.add_argument("--input_dir", required=True, metavar="D", help="directory with .bc files")
    p.add_argument("--output_dir", required=True, metavar="O", help="corpus directory to write")
    p.add_argument("--default_args", default="", metavar='"ARGS"',
                   help="flags every module is compiled with (shell-quoted string; default: "
                   "none, i.e. clang's defaults)")
    _add_common_output(p)
    p.set_defaults(func=run_make)


def _add_combine(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "combine",
        help="merge the sub-corpora of a directory into one corpus",
        description=(
            "Write ROOT/corpus_description.json listing the modules of every ROOT/*/ corpus, "
            "prefixed by its sub-directory name. The sub-corpora must agree on everything but "
            "their modules (has_thinlto, global_command_override); otherwise nothing is written."
        ),
    )
    p.add_argument("--root_dir", required=True, metavar="R", help="directory of sub-corpora")
    p.set_defaults(func=run_combine)


def _add_snapshot(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "snapshot",
        help="freeze several corpora into one (e.g. the demo corpus and the Debian corpus)",
        description=(
            "Link (or copy) every module of each SOURCE into one corpus at --output_dir, "
            "keeping module names (a module's package is the first part of its name), so a "
            "training run sees fixed data while its sources may still grow. A SOURCE is "
            "DIR, PREFIX=DIR (its modules under PREFIX/) or `demo`. A source that does not "
            "load is reported and left out; a module name given twice is an error. An "
            "existing snapshot is kept as it is. Example: mlgo corpus snapshot --output_dir "
            "corpora/broad demo ~/.cache/pymlgo/corpora/debian"
        ),
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="[PREFIX=]DIR or demo")
    p.add_argument("--output_dir", required=True, metavar="D", help="the snapshot to write")
    p.add_argument("--opt-level", default="-Oz", metavar="LEVEL", type=_opt_level,
                   help="the level a `demo` source is recorded at: z for inlining (the "
                   "default), 2 for register allocation")
    p.set_defaults(func=run_snapshot)


def _opt_level(text: str) -> str:
    """`z`, `Oz` or `-Oz` -> `-Oz` (argparse takes a bare `-Oz` for an option)."""
    level = "-O" + text.removeprefix("-").removeprefix("O")
    if level not in ("-O0", "-O1", "-O2", "-O3", "-Os", "-Oz"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of 0, 1, 2, 3, s, z")
    return level


def _add_capture(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "capture",
        help="run any C/C++ build and make a corpus of what it compiles",
        description=(
            "Run BUILD COMMAND (make, cmake --build, ninja, a script, ...) in the current "
            "directory with recording compiler wrappers as $CC/$CXX and first in PATH (as cc, "
            "gcc, clang, c++, g++, clang++). Every compile-only (-c) invocation is compiled by "
            "the bundled clang (or --clang) for a fixed target and baseline CPU, never the "
            "host's native one, with -Xclang -fembed-bitcode=all; links and other invocations "
            "run with the same target. With zig's driver, an -Oz compile also gets -Xclang "
            "-Oz (zig alone runs cc1 at -Os, whose bitcode is not what clang -Oz ships). "
            "--opt-level records every compile at one level whatever the build asks. "
            "The recorded commands are saved as "
            "compile_commands.json in the corpus, and the objects extracted. Start from a clean "
            "build tree: objects that are already built are not compiled, so not recorded."
        ),
        epilog="example: mlgo corpus capture --output_dir corpus -- make -j8",
    )
    p.add_argument("--output_dir", required=True, metavar="D", help="corpus directory to write")
    p.add_argument("--target", default="x86_64-linux-gnu", metavar="TRIPLE",
                   help="target triple for every compile (default: x86_64-linux-gnu)")
    p.add_argument("--cpu", default="baseline", metavar="CPU",
                   help="target CPU (default: baseline, the generic CPU of the target)")
    p.add_argument("--clang", default=None, metavar="PATH",
                   help="compile with this clang (>= 17) instead of the bundled zig clang; "
                   "default: $MLGO_CLANG, else the bundled one")
    p.add_argument("--exclude", default=None, metavar="REGEX",
                   help="skip objects whose path matches REGEX (default: CMake and autoconf "
                   "compiler probes)")
    p.add_argument("--num_workers", type=int, default=None, metavar="N",
                   help="extraction worker processes (default: all cores)")
    p.add_argument("--opt-level", default=None, metavar="LEVEL", type=_opt_level,
                   help="append -OLEVEL (0, 1, 2, 3, s or z; `--opt-level z` or "
                   "`--opt-level=-Oz`) to every compile, so the corpus is recorded at it even "
                   "where the build's configure picks its own (z for the inlining problem, 2 "
                   "for register allocation); default: the build's own levels")
    _add_common_output(p)
    p.add_argument("build", nargs=argparse.REMAINDER, metavar="-- BUILD COMMAND",
                   help="the build to run, after --")
    p.set_defaults(func=run_capture)


def _targets_help() -> str:
    """The named targets (corpus/targets.py), one clause each, for --help."""
    from pymlgo.corpus.targets import TARGETS

    return "; ".join(f"{t.name}: {t.describe()}" + (f" ({t.note})" if t.note else "")
                     for t in TARGETS.values())


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pymlgo.corpus.targets import TARGETS

    p = sub.add_parser(
        "demo",
        help="a real corpus with no setup: zstd, brotli and lz4 at -Oz",
        description=(
            "Download the pinned source distributions of zstandard, brotli and lz4 from PyPI "
            "(once; pip download), build their bundled C libraries (not the Python bindings) "
            "through `corpus capture` at -Oz, and cache the corpus in $MLGO_CACHE_DIR or "
            "~/.cache/pymlgo. Module names start with the package (zstd/, brotli/, lz4/). "
            "Later calls reuse the cache at once."
        ),
    )
    p.add_argument("out_dir", nargs="?", default=None, metavar="OUT_DIR",
                   help="copy the corpus here (default: print the cache directory)")
    p.add_argument("--target", default="x86_64", choices=list(TARGETS),
                   help="what to build for (default: x86_64): " + _targets_help()
                   + ". The bare-metal cortex-m4's demo corpus holds the "
                   "units that compile freestanding (lz4 in its LZ4_FREESTANDING mode, "
                   "brotli's context and transform tables, zstd's debug unit)")
    p.add_argument("--no_progress", action="store_true", help="no progress messages")
    p.set_defaults(func=run_demo)


def _add_debian(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pymlgo.corpus.debian import DEFAULT_ORDER
    from pymlgo.corpus.targets import TARGETS

    p = sub.add_parser(
        "debian",
        help="corpora from Debian source packages (apt-get source + a captured build)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "For each PKG: fetch the Debian source package with `apt-get source` (once, into "
            "$MLGO_CACHE_DIR/src or ~/.cache/pymlgo/src; needs a deb-src line in the APT "
            "sources; if the mirror lacks the newest version's files, older listed versions "
            "are tried), build it with a built-in recipe through `corpus capture` (bundled "
            "clang, x86_64-linux-gnu baseline or --target, static, -Oz), and write the "
            "sub-corpus OUTPUT_DIR/PKG/.\n\n"
            "Other targets: --target NAME cross-builds: configure scripts get the target as their "
            "host ($CONFIG_SITE), CMake a toolchain file ($CMAKE_TOOLCHAIN_FILE: "
            "CMAKE_SYSTEM_NAME/PROCESSOR), and every compile, link and archive runs zig's "
            "clang, linker and ar for the target (never the host's ld or ar); programs a "
            "build compiles to run while building get zig's cc for this machine "
            "($CC_FOR_BUILD). A package that does not build for the target (it runs a "
            "program it compiled for the target, or its recipe says why not) is reported "
            "and skipped. The bare-metal cortex-m4 has no C library, so it is refused here: "
            "cortex-m4-musl generates the same Cortex-M4 Thumb-2 code, and its linux-musl "
            "part only supplies the C library's headers (and the links configure checks "
            "make). An OUTPUT_DIR holds one target: one whose sub-corpora were built for "
            "another target is refused.\n\n"
            "C packages build their library; C++ packages also their tools and tests where "
            "they build offline (googletest/benchmark come from their own source packages). "
            "Unless --no_unity, each package also gets big UNITY modules, PKG/_unity/...: "
            "its sources with the same flags compiled together in batches of a few hundred "
            "KiB (batches that do not compile together are split).\n\n"
            "All sub-corpora are combined into OUTPUT_DIR, so module names start with their "
            "package (what train/held-out splits go by). Packages already built with the same "
            "recipe, compiler and target are skipped, so an interrupted run resumes where it "
            "stopped "
            "(a package cut off half-way is rebuilt from scratch). A package that fails to "
            "fetch or build is reported with its step and log (OUTPUT_DIR/_logs/PKG.log) and "
            "skipped; the exit code is 1 at the end. OUTPUT_DIR/debian_summary.json has the "
            "target, modules per package, the C/C++ split, failures, build time and disk "
            "use.\n\n"
            "Build tools needed (Debian packages): cmake make autoconf automake libtool "
            "autopoint gettext pkg-config perl python3 dpkg-dev; a missing one is named.\n\n"
            "Packages with a recipe (the training allowlist; --all builds them in this "
            "order): " + ", ".join(DEFAULT_ORDER) + "."
        ),
        epilog="examples:\n"
        "  nice -n 10 mlgo corpus debian zlib expat --output_dir corpora/debian\n"
        "  nice -n 10 mlgo corpus debian zlib lzo2 --target cortex-m4-musl \\\n"
        "      --output_dir corpora/debian-cm4\n"
        "  nohup nice -n 19 mlgo corpus debian --all --jobs 2 \\\n"
        "      --output_dir ~/.cache/pymlgo/corpora/debian > debian-build.log 2>&1 &",
    )
    p.add_argument("packages", nargs="*", metavar="PKG[=VERSION]",
                   help="Debian source package names, built in the order given; "
                   "PKG=VERSION fetches that Debian version instead of the newest (e.g. when "
                   "a mirror lacks the newest one's files; versions: apt-cache showsrc PKG)")
    p.add_argument("--all", action="store_true",
                   help="build every package with a recipe (after any PKG given)")
    p.add_argument("--output_dir", required=True, metavar="D", help="corpus directory")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="parallel compile jobs per build (default: 2)")
    p.add_argument("--target", default="x86_64", choices=list(TARGETS), metavar="NAME",
                   help="what to build for (default: x86_64): " + _targets_help())
    p.add_argument("--clang", default=None, metavar="PATH",
                   help="compile with this clang (>= 17) instead of the bundled zig clang")
    p.add_argument("--opt-level", default="-Oz", metavar="LEVEL", type=_opt_level,
                   help="record every compile at -OLEVEL (z, s, 0, 1, 2 or 3; default z, the "
                   "inlining problem's): `--opt-level 2` for register allocation, into its own "
                   "--output_dir (one corpus never mixes levels)")
    p.add_argument("--no_unity", action="store_true",
                   help="no unity modules (PKG/_unity/...); packages already built with "
                   "them are kept")
    p.add_argument("--no_progress", action="store_true",
                   help="no progress bar or messages")
    p.set_defaults(func=run_debian)


def _add_info(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "info",
        help="validate a corpus and count its modules per package",
        description="Load and validate a corpus (every module has its .bc and a -cc1 command; "
        "names stay inside the corpus) and print its modules per package.",
    )
    p.add_argument("corpus", metavar="DIR", help="corpus directory")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_info)


# --- handlers --------------------------------------------------------------------------------


def _guarded(name: str, body: Callable[[], int]) -> int:
    try:
        return body()
    except (CorpusError, CompilerError) as exc:
        print(f"mlgo corpus {name}: error: {exc}", file=sys.stderr)
        return 1


def run_extract(args: argparse.Namespace) -> int:
    from pymlgo.corpus import extract as ex

    def body() -> int:
        if args.thinlto_build == "local":
            if args.input is not None:
                raise CorpusError("--thinlto_build=local takes no --input (it walks "
                                  "--obj_base_dir)")
            objects = ex.objects_for_local_thinlto(args.obj_base_dir or ".")
        elif args.input is None:
            raise CorpusError("--input is required (unless --thinlto_build=local)")
        elif args.input_type == "json":
            objects = ex.objects_from_compile_commands(args.input, obj_base_dir=args.obj_base_dir)
        elif args.input_type == "params":
            objects = ex.objects_from_params(args.input, obj_base_dir=args.obj_base_dir)
        else:
            objects = ex.objects_from_directory(args.input)
        result = ex.extract_objects(
            objects, args.output_dir, num_workers=args.num_workers,
            obj_base_dir=args.obj_base_dir, cmd_filter=args.cmd_filter,
            thinlto_build=args.thinlto_build, cmd_section_name=args.cmd_section_name,
            bitcode_section_name=args.bitcode_section_name, overwrite=args.overwrite,
            progress=not args.no_progress,
        )
        print(result.summary(), file=sys.stderr)
        print(result.output_dir)
        return 0

    return _guarded("extract", body)


def run_make(args: argparse.Namespace) -> int:
    from pymlgo.corpus.make import make_corpus

    def body() -> int:
        try:
            default_args = shlex.split(args.default_args)
        except ValueError as exc:
            raise CorpusError(f"--default_args {args.default_args!r} is not a valid shell-quoted "
                              f"string: {exc}") from exc
        names = make_corpus(args.input_dir, args.output_dir, default_args=default_args,
                            overwrite=args.overwrite)
        print(f"{len(names)} module(s)", file=sys.stderr)
        print(Path(args.output_dir).absolute())
        return 0

    return _guarded("make", body)


def run_combine(args: argparse.Namespace) -> int:
    from pymlgo.corpus.combine import combine_corpora

    def body() -> int:
        names = combine_corpora(args.root_dir)
        print(f"combined {len(names)} module(s) into {Path(args.root_dir).absolute()}",
              file=sys.stderr)
        return 0

    return _guarded("combine", body)


def run_snapshot(args: argparse.Namespace) -> int:
    from pymlgo.cli.common import ALLOW_FLAGS_ENV
    from pymlgo.corpus.snapshot import snapshot_corpora

    def body() -> int:
        import os

        out = Path(args.output_dir)
        existed = (out / "corpus_description.json").is_file()
        snap = snapshot_corpora(args.sources, out, level=args.opt_level,
                                allow_flags=os.environ.get(ALLOW_FLAGS_ENV, "").split())
        for spec, why in snap.skipped.items():
            print(f"mlgo corpus snapshot: left out {spec}: {why}", file=sys.stderr)
        verb = "kept the existing snapshot of" if existed else "froze"
        print(f"{verb} {len(snap.corpus)} module(s) in {len(snap.corpus.packages)} "
              f"package(s) at {out.absolute()}", file=sys.stderr)
        return 0

    return _guarded("snapshot", body)


def _build_command(raw: Sequence[str]) -> list[str]:
    cmd = list(raw)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd


def run_capture(args: argparse.Namespace) -> int:
    from pymlgo.corpus.capture import DEFAULT_EXCLUDE, capture

    def body() -> int:
        command = _build_command(args.build)
        if not command:
            raise CorpusError("give the build command after --, e.g. "
                              "`mlgo corpus capture --output_dir corpus -- make -j8`")
        result = capture(
            command, args.output_dir, target=args.target, cpu=args.cpu, clang=args.clang,
            num_workers=args.num_workers,
            exclude=DEFAULT_EXCLUDE if args.exclude is None else args.exclude,
            overwrite=args.overwrite, progress=not args.no_progress, level=args.opt_level,
        )
        print(f"build: {result.compiles} compile(s) recorded in {result.build_seconds:.1f}s "
              f"with clang {result.compiler.version}", file=sys.stderr)
        print(result.extract.summary(), file=sys.stderr)
        print(result.extract.output_dir)
        return 0

    return _guarded("capture", body)


def run_demo(args: argparse.Namespace) -> int:
    from pymlgo.corpus.demo import ensure_demo_corpus

    def body() -> int:
        out = ensure_demo_corpus(None if args.out_dir is None else Path(args.out_dir),
                                 progress=not args.no_progress, target=args.target)
        print(out)
        return 0

    return _guarded("demo", body)


def run_debian(args: argparse.Namespace) -> int:
    from pymlgo.corpus.debian import (
        DEFAULT_ORDER,
        SUMMARY_FILE,
        DebianConfig,
        build_debian_corpora,
        parse_package_spec,
    )
    from pymlgo.corpus.targets import named_target

    def body() -> int:
        if args.jobs < 1:
            raise CorpusError("--jobs must be at least 1")
        specs = [parse_package_spec(p) for p in args.packages]
        packages = [pkg for pkg, _ in specs]
        if args.all:
            packages += [p for p in DEFAULT_ORDER if p not in packages]
        if not packages:
            raise CorpusError("name packages to build, or --all")
        out = Path(args.output_dir).expanduser()
        results = build_debian_corpora(
            packages,
            DebianConfig(output_dir=out, jobs=args.jobs, clang=args.clang,
                         progress=not args.no_progress, unity=not args.no_unity,
                         target=named_target(args.target), level=args.opt_level,
                         versions=tuple((pkg, v) for pkg, v in specs if v is not None)),
        )
        langs: Counter[str] = Counter()
        for r in results:
            langs.update(dict(r.languages))
            line = (f"  {r.package:18} {r.status:7} {r.modules:5} modules "
                    f"({r.unity_modules:3} unity) {r.seconds / 60:6.1f} min")
            if r.status == "failed":
                line += f"  at {r.step}: {r.log}"
            print(line, file=sys.stderr)
        total = sum(langs.values())
        if total:
            print(f"mlgo corpus debian: {total} modules, C++ {langs['c++'] / total:.1%}; "
                  f"summary: {out.absolute() / SUMMARY_FILE}", file=sys.stderr)
        failed = [r.package for r in results if r.status == "failed"]
        if failed:
            print(f"mlgo corpus debian: failed: {', '.join(failed)} (see "
                  f"{out.absolute()}/_logs/)", file=sys.stderr)
        print(out.absolute())
        return 1 if failed else 0

    return _guarded("debian", body)


def run_info(args: argparse.Namespace) -> int:
    def body() -> int:
        corpus = load_corpus(args.corpus)
        per_package = Counter(m.package for m in corpus.modules)
        info = {
            "root": str(corpus.root),
            "modules": len(corpus.modules),
            "packages": dict(sorted(per_package.items())),
            "has_thinlto": corpus.has_thinlto,
            "global_command_override": corpus.global_command_override is not None,
        }
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            print(f"{corpus.root}: {len(corpus.modules)} module(s), "
                  f"{len(per_package)} package(s)")
            for pkg, n in sorted(per_package.items()):
                print(f"  {pkg:30} {n}")
        return 0

    return _guarded("info", body)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m pymlgo.cli.corpus ACTION ...`: the corpus commands without the rest of mlgo."""
    parser = argparse.ArgumentParser(prog="mlgo")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(["corpus", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
