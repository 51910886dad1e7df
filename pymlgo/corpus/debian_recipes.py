"""Build recipes of the Debian source packages on the training allowlist.

One `Recipe` per package: the argv steps of its build on a fresh copy of the source tree.
C packages build their library (static, -Oz); C++ packages build as much real code as
builds offline: library, tools, and tests (their googletest/benchmark come from the cached
source trees of those allowlisted packages, never from the network or another package).
Steps in `extra` are best effort: a failing tool or test build keeps what compiled.

Only packages on the allowlist may have a recipe: the others are never-seen test code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Bump when the build flags or the layout change for every package: it is in the cache key.
# 4: every compile recorded at -Oz (appended, over a configure's own -O2/-Os) and, with zig's
# driver, -Xclang -Oz: minsize bitcode, as clang -Oz writes it
DEBIAN_FORMAT = 4
OPT_LEVEL = "-Oz"
BUILD_DIR = "_mlgo_build"  # out-of-tree build dir of the CMake recipes, inside the copy
DEPS_DIR = "_deps"  # helper builds of dependencies inside the copy; never in the corpus

Steps = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Recipe:
    """How to build one source package.

    `steps` run in order (each an argv, no shell) in `subdir` of a fresh copy of the
    package's source tree, as one captured build; any failing step fails the package.
    `extra` steps run after them and may fail (tools, tests): what they compiled is kept.
    Placeholders: `{jobs}` (parallel jobs), `{src}` (the copy's absolute path),
    `{dep_<pkg>}` (the cached source tree of a package in `deps`, `headers` or `helpers`;
    `-` and `.` become `_`). `headers`: source packages off the allowlist whose headers
    (never code) the build includes; `helpers`: source packages off the allowlist that the
    recipe builds in `_deps/` only for the package to build against (their objects are
    never modules); say so in `note`.
    Objects under `_deps/` (helper builds of dependencies) and those matching `exclude`
    are not corpus modules. `unity`: also build big unity modules from the package's own
    compiles (see `debian_unity`). `cross`: why the package cannot be built for another
    target than the host (empty: it can, see `cross_build`); such a build is reported as
    failed with that reason.
    """

    package: str
    language: str  # "c" or "c++": what the package is mostly written in
    steps: Steps
    subdir: str = ""
    deps: tuple[str, ...] = ()
    note: str = ""
    env: tuple[tuple[str, str], ...] = ()
    extra: Steps = ()
    exclude: str = ""
    unity: bool = True
    headers: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()
    cross: str = ""  # why the recipe cannot build for another target than the host

    def key(self) -> str:
        """Cache key of the recipe: any change rebuilds the package."""
        fields = asdict(self)
        # Added after packages were cached: left out while empty, so their keys stand.
        for late in ("headers", "helpers"):
            if not fields[late]:
                del fields[late]
        del fields["cross"]  # says only whether a cross build is tried; it changes no build
        blob = json.dumps([DEBIAN_FORMAT, fields], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def tools(self) -> tuple[str, ...]:
        """The build programs the steps run (first word of each step), for a clear error
        before the build when one is missing."""
        firsts = [s[0] for s in (*self.steps, *self.extra) if s and not s[0].startswith(".")]
        return tuple(dict.fromkeys(t for t in firsts if "{" not in t and "/" not in t))


# Where each build program comes from on Debian/Ubuntu: the message for a missing one.
TOOL_PACKAGES = {
    "cmake": "cmake", "make": "make", "meson": "meson", "ninja": "ninja-build",
    "autoreconf": "autoconf automake libtool autopoint gettext", "perl": "perl",
    "python3": "python3", "pkg-config": "pkg-config", "sh": "dash", "sed": "sed",
    "ln": "coreutils", "cp": "coreutils", "mkdir": "coreutils", "rm": "coreutils",
    "libtoolize": "libtool", "autopoint": "autopoint", "bison": "bison", "flex": "flex",
    "m4": "m4", "gperf": "gperf",
}

# Host libraries must not leak into the build: the bundled clang targets a fixed triple and
# would not find their headers anyway, so a CMake `find_*` that "finds" /usr/include/zlib.h
# only turns a feature on that then fails to compile. Dependencies come from `deps` instead.
_HOST_DIRS = ";".join((
    "/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/local/include", "/usr/lib",
    "/usr/lib/x86_64-linux-gnu", "/lib", "/lib/x86_64-linux-gnu", "/usr/local/lib",
    "/usr/lib64", "/lib64", "/usr/share",
))


def cmake_configure(*options: str, source: str = ".", build: str = BUILD_DIR
                    ) -> tuple[str, ...]:
    """Configure out of tree as a static MinSizeRel (-Oz) build that ignores host libraries."""
    return (
        "cmake", "-S", source, "-B", build, "-G", "Unix Makefiles",
        "-DCMAKE_BUILD_TYPE=MinSizeRel",
        f"-DCMAKE_C_FLAGS_MINSIZEREL={OPT_LEVEL} -DNDEBUG",
        f"-DCMAKE_CXX_FLAGS_MINSIZEREL={OPT_LEVEL} -DNDEBUG",
        "-DBUILD_SHARED_LIBS=OFF", "-DBUILD_TESTING=OFF",
        f"-DCMAKE_SYSTEM_IGNORE_PATH={_HOST_DIRS}",
        "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
        *options,
    )


def cmake_build(*targets: str, build: str = BUILD_DIR, keep_going: bool = False
                ) -> tuple[str, ...]:
    return ("cmake", "--build", build, "-j", "{jobs}",
            *(("--target", *targets) if targets else ()), *(("--", "-k") if keep_going else ()))


def cmake(*options: str, targets: Sequence[str] = ()) -> Steps:
    """Configure, then build `targets` (default: all)."""
    return (cmake_configure(*options), cmake_build(*targets))


def _between(steps: Steps, step: tuple[str, ...]) -> Steps:
    """`step` inserted between CMake's configure and build steps."""
    configure, build = steps
    return (configure, step, build)


def autotools(*configure: str, make: Sequence[str] = (), autoreconf: bool = False) -> Steps:
    """`./configure` for a static library, then `make`. `autoreconf`: regenerate the build
    files first, as Debian's own build does; needed where Debian's patches touch
    configure.ac/Makefile.am (make would rerun the tarball's exact automake version) or the
    tarball mixes libtool versions."""
    return (
        *((("autoreconf", "-fi"),) if autoreconf else ()),
        ("./configure", "--disable-shared", "--enable-static", *configure),
        ("make", "-j{jobs}", *make),
    )


def shell(script: str) -> tuple[str, ...]:
    """A step that needs a shell (loops, redirections); keep these rare and short."""
    return ("sh", "-c", script)


def link_dep(dep: str, where: str) -> tuple[str, ...]:
    """Put a dependency's cached source tree where the package expects its bundled copy."""
    return shell(f"rm -rf {where} && ln -s {{dep_{dep}}} {where}")


def compile_each(sources: Sequence[str], flags: str, *, out_dir: str = "",
                 fatal: bool = False) -> tuple[str, ...]:
    """A step compiling each C++ source on its own with $CXX at -Oz (never linked), for
    sources no target of the package's build compiles offline. The object of `dir/x.cc` is
    `out_dir/dir/x.o`. `fatal`: a source that does not compile fails the step; otherwise it
    is named ("not compiled: ...") and left out. `flags` may use recipe placeholders."""
    fail = "exit 1" if fatal else 'echo "not compiled: $src"'
    prefix = f"{out_dir}/" if out_dir else ""
    calls = "; ".join(f"c {src} {prefix}{src.rsplit('.', 1)[0]}.o" for src in sources)
    return shell(_brace(
        'c() { src=$1; obj=$2; mkdir -p "$(dirname "$obj")"; set -- $CXX ') + OPT_LEVEL
        + " -DNDEBUG " + flags + _brace(f' -c "$src" -o "$obj"; echo "$@"; "$@" || {fail}; }}; ')
        + calls)


# A dependency configured (not compiled) with CMake in _deps/, for generated headers.
def dep_cmake_configure(dep: str, *options: str) -> tuple[str, ...]:
    return cmake_configure(*options, source=f"{{dep_{dep}}}", build=f"{DEPS_DIR}/{dep}")


# Debian points these packages at the system googletest/benchmark and comments out their
# bundled copies; the copies come back as links to those packages' source trees.
# Only googletest: benchmark's CMake fails as a subproject of these (no version set).
_UNCOMMENT_THIRD_PARTY = ("sed", "-i", r's|^\(\s*\)#\s*add_subdirectory("third_party/googletest|'
                          r'\1add_subdirectory("third_party/googletest|', "CMakeLists.txt")
# googletest/benchmark compiled inside another package's build are those packages' code: not
# that package's modules (a split by package would see them on both sides).
_NOT_THEIR_GTEST = (r"/third_party/(googletest|benchmark)/|/googletest-build/"
                    r"|/CMakeFiles/(gtest|gmock|gtest_main|gmock_main)\.dir/")

# USE_MATCHCOMPILER is a string compared with "Off" ("OFF" turns it on); Debian turns it
# on. No precompiled header: each module is its own source's compile.
_CPPCHECK_OPTS = ("-DHAVE_RULES=OFF", "-DUSE_MATCHCOMPILER=On", "-DBUILD_GUI=OFF",
                  "-DENABLE_OSS_FUZZ=OFF", "-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON")

# The three Unicode data files re2's table generators read (only the fields they read),
# written to the directory in ARGV[0] from perl's own copy of the Unicode database:
# UnicodeData.txt (general category; unassigned code points are not listed),
# Scripts.txt (long script names; "Unknown" is not listed), CaseFolding.txt (the simple
# C+S foldings). Checked once against the Unicode 14 CaseFolding.txt (cmark) and
# UnicodeData.txt (libunistring): re2's generated tables came out identical.
UCD_TABLES_PERL = r"""
use strict; use Unicode::UCD qw(prop_invmap prop_value_aliases casefold);
my $dir = shift;
sub code { my ($lo, $hi) = @_; $lo == $hi ? sprintf("%04X", $lo) : sprintf("%04X..%04X", $lo, $hi) }
sub ranges { my ($prop, $file, $fmt, $skip, $alias) = @_;
  my ($r, $m) = prop_invmap($prop);
  open(my $fh, ">", "$dir/$file") or die "$dir/$file: $!";
  for my $i (0 .. $#$r - 1) {
    my $v = (prop_value_aliases($prop, $m->[$i]))[$alias];
    printf $fh $fmt, code($r->[$i], $r->[$i + 1] - 1), $v unless $v eq $skip;
  }
  close($fh) or die;
}
ranges("General_Category", "UnicodeData.txt", "%s;;%s;;;;;;;;;;;;\n", "Cn", 0);
ranges("Script", "Scripts.txt", "%s; %s\n", "Unknown", 1);
open(my $cf, ">", "$dir/CaseFolding.txt") or die;
for my $c (0 .. 0x10FFFF) { my $f = casefold($c);
  printf $cf "%04X; C; %s;\n", $c, $f->{simple} if $f && $f->{simple} ne "" }
close($cf) or die;
"""


def _brace(text: str) -> str:
    """`text` as a literal in a recipe argument (they are str.format templates)."""
    return text.replace("{", "{{").replace("}", "}}")


_OGG_DEP = dep_cmake_configure("libogg")  # generates ogg/config_types.h
_OGG_OPTS = ("-DOGG_INCLUDE_DIR={dep_libogg}/include", "-DOGG_LIBRARY={src}/_deps/libogg/libogg.a",
             "-DCMAKE_C_FLAGS=-I{src}/_deps/libogg/include")
_BENCHMARK_OPTS = ("-DGIT_VERSION=0.0.0", "-DBENCHMARK_ENABLE_WERROR=OFF")
_ZLIB_OPTS = ("-DZLIB_INCLUDE_DIR={dep_zlib}", "-DZLIB_LIBRARY={dep_zlib}/libz.a")
# zlib compiled from its source package in _deps/, for programs that link it.
_ZLIB_BUILT = shell(f"mkdir -p {DEPS_DIR} && cp -r {{dep_zlib}} {DEPS_DIR}/zlib && "
                    f"cd {DEPS_DIR}/zlib && ./configure --static && make -j{{jobs}} libz.a")

# woff2 1.0.2's src/: the font-table code (a failure fails the package), then the
# woff2_compress/decompress/info tools and the two fuzz targets. Not the encoder and
# decoder: they include brotli's headers, and brotli (off the allowlist) is a package whose
# sources this network's mirror lacks in every listed version.
_WOFF2_CORE = tuple(f"src/{name}.cc" for name in (
    "font", "glyph", "normalize", "table_tags", "transform", "variable_length",
    "woff2_common", "woff2_out"))
_WOFF2_MORE = tuple(f"src/{name}.cc" for name in (
    "woff2_compress", "woff2_decompress", "woff2_info", "convert_woff2ttf_fuzzer",
    "convert_woff2ttf_fuzzer_new_entry"))
_WOFF2_NEED_BROTLI = ("src/woff2_enc.cc", "src/woff2_dec.cc")
_WOFF2_FLAGS = "-std=c++11 -Iinclude"

_TINYOBJ_OPTS = ("-DTINYOBJLOADER_BUILD_TEST_LOADER=ON", "-DTINYOBJLOADER_BUILD_OBJ_STICHER=ON")
# Two examples without a CMake target in the top-level build (their own CMakeLists want an
# installed tinyobjloader). (voxelize is left out: its code is mostly a bundled copy of
# another project's voxelizer.h.)
_TINYOBJ_EXAMPLES = compile_each(
    ("examples/callback_api/main.cc", "examples/skin_weight/main.cc"), "-std=c++11 -I.",
    out_dir=BUILD_DIR)

# snappy's benchmark (Debian's patch comments out the bundled benchmark it would link) and
# its two fuzz targets (they need a fuzzing build): compiled, against benchmark's and
# googletest's headers from their source packages and the build's generated headers.
_SNAPPY_MORE = compile_each(
    ("snappy_benchmark.cc", "snappy_compress_fuzzer.cc", "snappy_uncompress_fuzzer.cc"),
    f"-std=c++11 -I. -I{BUILD_DIR} -isystem {{dep_benchmark}}/include "
    "-isystem {dep_googletest}/googletest/include -isystem {dep_googletest}/googlemock/include",
    out_dir=f"{BUILD_DIR}/mlgo-more")

# spdlog's benchmarks (its bench/ CMake would download benchmark): compiled on their own as
# the compiled library's users, against fmt's and benchmark's source packages.
_SPDLOG_BENCH = compile_each(
    ("bench/bench.cpp", "bench/async_bench.cpp", "bench/latency.cpp",
     "bench/formatter-bench.cpp"),
    "-std=c++11 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -Iinclude -I{dep_fmtlib}/include "
    "-isystem {dep_benchmark}/include", out_dir=f"{BUILD_DIR}/mlgo-more")
_FLAC_OPTS = ("-DBUILD_CXXLIBS=ON", "-DBUILD_PROGRAMS=OFF", "-DBUILD_EXAMPLES=OFF",
              "-DBUILD_DOCS=OFF", "-DWITH_OGG=OFF", "-DINSTALL_MANPAGES=OFF")

# flatbuffers' fuzz targets (their CMake project wants a libFuzzer build) with the two
# mains that replay an input, and its benchmarks (their CMake downloads googletest and
# benchmark): compiled on their own, benchmark's headers from its source package.
_FLATBUFFERS_MORE = compile_each(
    tuple(f"tests/fuzzer/{name}" for name in (
        "flatbuffers_annotator_fuzzer.cc", "flatbuffers_monster_fuzzer.cc",
        "flatbuffers_parser_fuzzer.cc", "flatbuffers_scalar_fuzzer.cc",
        "flatbuffers_verifier_fuzzer.cc", "flexbuffers_verifier_fuzzer.cc",
        "monster_debug.cpp", "scalar_debug.cpp"))
    + tuple(f"benchmarks/cpp/{name}" for name in (
        "benchmark_main.cpp", "flatbuffers/fb_bench.cpp", "raw/raw_bench.cpp")),
    "-std=c++17 -Iinclude -Isrc -Itests -Itests/fuzzer -Ibenchmarks/cpp "
    "-isystem {dep_benchmark}/include", out_dir=f"{BUILD_DIR}/mlgo-more")

# OpenEXR builds against an installed Imath (its CMake would otherwise clone it from GitHub):
# Imath's source package, off the allowlist, is built and installed in _deps/.
_IMATH_BUILT = (
    cmake_configure("-DPYTHON=OFF", "-DDOCS=OFF", source="{dep_imath}",
                    build=f"{DEPS_DIR}/imath"),
    cmake_build(build=f"{DEPS_DIR}/imath"),
    ("cmake", "--install", f"{DEPS_DIR}/imath", "--prefix", f"{{src}}/{DEPS_DIR}/prefix"),
)
_OPENEXR_OPTS = (
    f"-DImath_DIR={{src}}/{DEPS_DIR}/prefix/lib/cmake/Imath",
    f"-DZLIB_INCLUDE_DIR={{src}}/{DEPS_DIR}/zlib",
    f"-DZLIB_LIBRARY={{src}}/{DEPS_DIR}/zlib/libz.a",
    "-DOPENEXR_FORCE_INTERNAL_IMATH=OFF", "-DOPENEXR_FORCE_INTERNAL_ZLIB=OFF",
    "-DOPENEXR_INSTALL_PKG_CONFIG=OFF", "-DDOCS=OFF",
)

_TAGLIB_OPTS = ("-DWITH_ZLIB=OFF", "-DBUILD_EXAMPLES=ON", "-DBUILD_BINDINGS=ON",
                "-DCMAKE_CXX_FLAGS=-I{src}/3rdparty")
# taglib's tests need CppUnit (Debian build-depends on libcppunit-dev): its source package,
# off the allowlist, compiled in _deps/ as a static library. Regenerated first: Debian's
# patches leave make wanting to rerun the tarball's automake version.
_CPPUNIT_BUILT = shell(
    f"mkdir -p {DEPS_DIR} && cp -r {{dep_cppunit}} {DEPS_DIR}/cppunit && cd {DEPS_DIR}/cppunit "
    "&& autoreconf -fi >/dev/null 2>&1 && ./configure --disable-shared --enable-static "
    "--disable-doxygen --disable-html-docs --disable-latex-docs >/dev/null "
    "&& make -j{jobs} -C src/cppunit libcppunit.la")
# taglib's FindCppUnit asks cppunit-config for the version unless it is given.
_TAGLIB_TEST_OPTS = (
    "-DBUILD_TESTING=ON", f"-DCPPUNIT_INCLUDE_DIR={{src}}/{DEPS_DIR}/cppunit/include",
    f"-DCPPUNIT_LIBRARIES={{src}}/{DEPS_DIR}/cppunit/src/cppunit/.libs/libcppunit.a",
    "-DCPPUNIT_INSTALLED_VERSION=1.15.1")

# abseil's CMake defines no benchmark targets (only its Bazel build does): each benchmark
# source is compiled on its own, as the tests are, against benchmark's and googletest's
# headers. Compiled only, never linked; one that does not compile is left out.
_ABSL_BENCHMARKS = shell(_brace(
    "for f in $(find absl -name '*benchmark*.cc' | sort); do "
    "o=" + BUILD_DIR + "/benchmarks/${f%.cc}.o; mkdir -p ${o%/*}; "
    "$CXX -std=c++17 " + OPT_LEVEL + " -DNDEBUG -DNOMINMAX -w -I. ") +
    "-isystem {dep_benchmark}/include -isystem {dep_googletest}/googletest/include "
    "-isystem {dep_googletest}/googlemock/include -c $f -o $o || echo \"not compiled: $f\"; "
    "done")

# harfbuzz 6's CMake compiles the amalgamation src/harfbuzz.cc (every source #included in
# one file); its meson build, which Debian uses, compiles each source on its own. The
# sources come from the same list in src/Makefile.sources that the CMake reads for the others.
_HB_PER_SOURCE = ("sed", "-i", _brace(
    r"s|^set (project_sources ${PROJECT_SOURCE_DIR}/src/harfbuzz.cc) # use amalgam source$|"
    r"extract_make_variable(HB_BASE_sources ${SRCSOURCES})\n"
    r"add_prefix_to_list(HB_BASE_sources \"${PROJECT_SOURCE_DIR}/src/\")\n"
    r"set (project_sources ${HB_BASE_sources})|"), "CMakeLists.txt")
# The test programs of src/meson.build (Debian's build compiles and runs them), as CMake
# targets outside `all`, built by the best-effort `mlgo-hb-tests`; the unit tests with
# -DMAIN -UNDEBUG as meson compiles them. Their second sources (hb-static.cc, ...) are the
# library's own. Then the fuzz targets of test/fuzzing/meson.build (no experimental API, so
# no repacker fuzzer), each with the main.cc that feeds it files, as meson builds them.
_HB_TEST_PROGRAMS = shell(_brace("""cat >> CMakeLists.txt <<'MLGO'
add_custom_target(mlgo-hb-tests)
foreach (source main test test-buffer-serialize test-ot-meta test-ot-name test-ot-glyphname
    test-gpos-size-params test-gsub-would-substitute test-use-table
    test-algs test-array test-iter test-machinery test-map test-multimap test-number hb-ot-tag
    test-priority-queue test-repacker graph/test-classdef-graph test-set test-serialize
    test-unicode-ranges test-vector test-bimap)
  get_filename_component(name ${source} NAME)
  add_executable(mlgo-${name} EXCLUDE_FROM_ALL src/${source}.cc)
  target_link_libraries(mlgo-${name} harfbuzz)
  add_dependencies(mlgo-hb-tests mlgo-${name})
  if (NOT name MATCHES "^(main|test|test-buffer-serialize|test-ot-.*|test-g.*|test-use-table)$")
    target_compile_definitions(mlgo-${name} PRIVATE MAIN)
    target_compile_options(mlgo-${name} PRIVATE -UNDEBUG)
  endif ()
endforeach ()
foreach (name hb-shape-fuzzer hb-subset-fuzzer hb-set-fuzzer hb-draw-fuzzer)
  add_executable(mlgo-${name} EXCLUDE_FROM_ALL test/fuzzing/${name}.cc test/fuzzing/main.cc)
  target_link_libraries(mlgo-${name} harfbuzz harfbuzz-subset)
  add_dependencies(mlgo-hb-tests mlgo-${name})
endforeach ()
MLGO"""))


# OpenSSL's Configure takes the platform by name, not from $CC: these recipes name x86-64's.
_OPENSSL_X86 = ("OpenSSL is configured for linux-x86_64 by name (its Configure does not read "
                "the target from the compiler)")

RECIPES: dict[str, Recipe] = {r.package: r for r in (
    # ---- C: libraries --------------------------------------------------------------------
    Recipe("zlib", "c", (("./configure", "--static"), ("make", "-j{jobs}", "libz.a"))),
    Recipe("libpng1.6", "c", cmake(
        "-DPNG_SHARED=OFF", "-DPNG_STATIC=ON", "-DPNG_TESTS=OFF", "-DPNG_EXECUTABLES=OFF",
        *_ZLIB_OPTS, targets=("png_static",)), deps=("zlib",),
        note="zlib headers from the zlib source package (nothing is linked)"),
    Recipe("expat", "c", _between(cmake(
        "-DEXPAT_BUILD_TOOLS=OFF", "-DEXPAT_BUILD_EXAMPLES=OFF", "-DEXPAT_BUILD_TESTS=OFF",
        "-DEXPAT_BUILD_DOCS=OFF", "-DEXPAT_SHARED_LIBS=OFF", "-DEXPAT_BUILD_FUZZERS=OFF",
        targets=("expat",)),
        # Debian's security patches test `#if XML_DTD == 1`, as autotools' config.h defines
        # it; CMake's template defines it empty.
        ("sed", "-i", "s/^#define XML_DTD$/#define XML_DTD 1/", f"{BUILD_DIR}/expat_config.h"),
    ), subdir="expat", note="XML_DTD defined to 1 as in Debian's autotools build"),
    Recipe("pcre2", "c", cmake(
        "-DPCRE2_BUILD_PCRE2GREP=OFF", "-DPCRE2_BUILD_TESTS=OFF", "-DBUILD_STATIC_LIBS=ON",
        "-DPCRE2_BUILD_PCRE2_8=ON", "-DPCRE2_BUILD_PCRE2_16=OFF",
        "-DPCRE2_BUILD_PCRE2_32=OFF"),
        note="8-bit library and POSIX wrapper; the 16/32-bit builds recompile the same "
        "sources"),
    Recipe("pcre3", "c", autotools("--enable-cpp", make=("libpcre.la", "libpcreposix.la"),
                                   autoreconf=True),
           # the C++ wrapper, then its unit tests (built, not run)
           extra=(("make", "-j{jobs}", "libpcrecpp.la"),
                  ("make", "-j{jobs}", "pcrecpp_unittest", "pcre_scanner_unittest",
                   "pcre_stringpiece_unittest")),
           note="8-bit library, POSIX and C++ wrappers (as Debian's libpcrecpp), then the "
           "C++ wrapper's tests"),
    Recipe("libyaml", "c", cmake("-DINSTALL_CMAKE_DIR=lib/cmake", targets=("yaml",))),
    Recipe("cjson", "c", cmake(
        "-DENABLE_CJSON_TEST=OFF", "-DENABLE_CJSON_UTILS=ON", "-DBUILD_SHARED_AND_STATIC_LIBS=OFF",
        "-DENABLE_CUSTOM_COMPILER_FLAGS=OFF", "-DENABLE_TARGET_EXPORT=OFF",
        targets=("cjson", "cjson_utils"))),
    Recipe("jansson", "c", cmake(
        "-DJANSSON_BUILD_DOCS=OFF", "-DJANSSON_WITHOUT_TESTS=ON", "-DJANSSON_EXAMPLES=OFF",
        targets=("jansson",))),
    Recipe("giflib", "c", (("make", "-j{jobs}", f"OFLAGS={OPT_LEVEL}", "libgif.a"),)),
    Recipe("libwebp", "c", cmake(
        "-DWEBP_BUILD_ANIM_UTILS=OFF", "-DWEBP_BUILD_CWEBP=OFF", "-DWEBP_BUILD_DWEBP=OFF",
        "-DWEBP_BUILD_GIF2WEBP=OFF", "-DWEBP_BUILD_IMG2WEBP=OFF", "-DWEBP_BUILD_VWEBP=OFF",
        "-DWEBP_BUILD_WEBPINFO=OFF", "-DWEBP_BUILD_WEBPMUX=OFF", "-DWEBP_BUILD_EXTRAS=OFF",
        "-DWEBP_BUILD_LIBWEBPMUX=ON",
        targets=("webp", "webpdemux", "libwebpmux"))),
    Recipe("libjpeg-turbo", "c", cmake(
        "-DENABLE_SHARED=OFF", "-DENABLE_STATIC=ON", "-DWITH_SIMD=OFF", "-DWITH_TURBOJPEG=OFF",
        targets=("jpeg-static",)),
        note="no SIMD (its kernels are NASM assembly); libturbojpeg recompiles the same sources"),
    Recipe("libxml2", "c", cmake(
        "-DLIBXML2_WITH_PYTHON=OFF", "-DLIBXML2_WITH_ZLIB=OFF", "-DLIBXML2_WITH_LZMA=OFF",
        "-DLIBXML2_WITH_ICU=OFF", "-DLIBXML2_WITH_TESTS=OFF", "-DLIBXML2_WITH_PROGRAMS=OFF",
        targets=("LibXml2",)), note="without zlib/lzma/ICU/Python"),
    Recipe("libxslt", "c", (
        # libxslt needs a configured and built libxml2: made in _deps/, not in the corpus.
        shell("cp -r {dep_libxml2} _deps_libxml2 && mkdir -p _deps && mv _deps_libxml2 "
              "_deps/libxml2"),
        shell("cd _deps/libxml2 && ./configure --disable-shared --without-python "
              "--without-zlib --without-lzma --without-icu --without-threads && "
              "make -j{jobs} libxml2.la"),
        # autoreconf: the tarball's ltmain.sh and aclocal.m4 come from different libtools.
        *autotools("--without-python", "--without-crypto", "--without-debugger",
                   "--with-libxml-src={src}/_deps/libxml2", make=("-C", "libxslt"),
                   autoreconf=True),
        ("make", "-j{jobs}", "-C", "libexslt"),
    ), deps=("libxml2",), note="libxslt + libexslt, against libxml2 built from its source"),
    Recipe("openssl", "c", (
        ("./Configure", "linux-x86_64", "no-asm", "no-shared", "no-module", "no-tests"),
        ("make", "-j{jobs}", "build_libs"),
    ), env=(("CFLAGS", OPT_LEVEL),), note="libcrypto + libssl, no assembly",
        cross=_OPENSSL_X86),
    Recipe("curl", "c", autotools(
        "--without-ssl", "--without-zlib", "--without-brotli", "--without-zstd",
        "--without-libpsl", "--without-libidn2", "--without-nghttp2", "--without-libssh2",
        "--disable-ldap", "--without-librtmp", "--disable-manual", make=("-C", "lib")),
        note="libcurl without TLS and compression"),
    Recipe("xz-utils", "c", autotools(
        "--disable-xz", "--disable-xzdec", "--disable-lzmadec", "--disable-lzmainfo",
        "--disable-scripts", "--disable-doc", "--disable-nls", make=("-C", "src/liblzma"))),
    Recipe("libsodium", "c", autotools("--disable-asm", make=("-C", "src/libsodium"),
                                       autoreconf=True)),
    Recipe("jq", "c", autotools("--disable-docs", "--disable-maintainer-mode",
                                "--with-oniguruma=no", "--disable-valgrind",
                                # libm still exports pow10, glibc >= 2.27 no longer declares it
                                "ac_cv_lib_m_pow10=no", autoreconf=True),
           env=(("CFLAGS", f"{OPT_LEVEL} -Wno-error=implicit-function-declaration"),),
           note="libjq and jq without regex support (oniguruma)"),
    Recipe("libonig", "c", cmake(targets=("onig",))),
    Recipe("libuv1", "c", cmake("-DLIBUV_BUILD_TESTS=OFF", "-DLIBUV_BUILD_BENCH=OFF",
                                targets=("uv_a",))),
    Recipe("libevent", "c", cmake(
        "-DEVENT__DISABLE_OPENSSL=ON", "-DEVENT__DISABLE_TESTS=ON", "-DEVENT__DISABLE_SAMPLES=ON",
        "-DEVENT__DISABLE_BENCHMARK=ON", "-DEVENT__DISABLE_REGRESS=ON",
        "-DEVENT__LIBRARY_TYPE=STATIC", "-DEVENT__DISABLE_MBEDTLS=ON")),
    Recipe("nghttp2", "c", cmake("-DENABLE_LIB_ONLY=ON", "-DENABLE_STATIC_LIB=ON",
                                 "-DENABLE_SHARED_LIB=OFF", "-DENABLE_DOC=OFF")),
    Recipe("c-ares", "c", autotools("--disable-tests", make=("-C", "src/lib"))),
    Recipe("tiff", "c", cmake(
        "-Dtiff-tools=OFF", "-Dtiff-tests=OFF", "-Dtiff-contrib=OFF", "-Dtiff-docs=OFF",
        "-Dzlib=OFF", "-Djpeg=OFF", "-Dlzma=OFF", "-Dzstd=OFF", "-Dwebp=OFF", "-Djbig=OFF",
        "-Dlerc=OFF", "-Dlibdeflate=OFF", "-Dpixarlog=OFF", "-Dold-jpeg=OFF"),
        note="libtiff (+ the small libtiffxx) without codecs from other libraries"),
    Recipe("freetype", "c", cmake(
        "-DFT_DISABLE_ZLIB=ON", "-DFT_DISABLE_BZIP2=ON", "-DFT_DISABLE_PNG=ON",
        "-DFT_DISABLE_HARFBUZZ=ON", "-DFT_DISABLE_BROTLI=ON", targets=("freetype",))),
    Recipe("libarchive", "c", cmake(
        *(f"-DENABLE_{f}=OFF" for f in (
            "OPENSSL", "LIBXML2", "EXPAT", "LZMA", "ZSTD", "BZip2", "LIBB2", "LZ4", "ZLIB",
            "ACL", "XATTR", "ICONV", "TEST", "TAR", "CPIO", "CAT", "CNG", "MBEDTLS", "NETTLE",
            "LZO", "PCREPOSIX", "LibGCC", "WERROR")),
        targets=("archive_static",)), note="no compression or crypto libraries"),
    Recipe("lmdb", "c", (("make", "-j{jobs}", f"OPT={OPT_LEVEL}", "CC=cc", "liblmdb.a"),),
           subdir="libraries/liblmdb"),
    Recipe("libgit2", "c", cmake(
        "-DBUILD_TESTS=OFF", "-DBUILD_CLI=OFF", "-DUSE_HTTPS=OFF", "-DUSE_SSH=OFF",
        "-DUSE_NTLMCLIENT=OFF", "-DUSE_ICONV=OFF", "-DUSE_GSSAPI=OFF", "-DREGEX_BACKEND=regcomp",
        # Debian removed the bundled http-parser (deps/*): its header from the http-parser
        # source package; a static library links nothing, so no libhttp_parser is built.
        "-DUSE_HTTP_PARSER=system", "-DHTTP_PARSER_INCLUDE_DIR={dep_http_parser}",
        f"-DHTTP_PARSER_LIBRARY={{src}}/{DEPS_DIR}/libhttp_parser.a",
        *_ZLIB_OPTS, targets=("libgit2package",)), deps=("zlib",), headers=("http-parser",),
        note="zlib headers from zlib's source package, http_parser.h from http-parser's (off "
        "the allowlist; header only)"),
    Recipe("cmark", "c", cmake("-DCMARK_TESTS=OFF", "-DCMARK_SHARED=OFF",
                               targets=("cmark_static",))),
    Recipe("pixman", "c", autotools("--disable-gtk", "--disable-libpng", "--disable-openmp",
                                    make=("-C", "pixman"))),
    Recipe("libffi", "c", autotools("--disable-docs", "--disable-multi-os-directory",
                                    # its static trampolines call an undeclared function
                                    "--disable-exec-static-tramp")),
    Recipe("flac", "c", cmake(*_FLAC_OPTS, targets=("FLAC", "FLAC++")),
           # libFLAC++'s examples and tests (with the C test helpers they link)
           extra=(cmake_configure(*_FLAC_OPTS, "-DBUILD_EXAMPLES=ON", "-DBUILD_TESTING=ON"),
                  cmake_build("decode_file_cxx", "encode_file_cxx", "test_libFLAC++",
                              keep_going=True)),
           note="libFLAC and libFLAC++, without Ogg, then libFLAC++'s examples and tests"),
    # Debian builds opus with autotools: the 1.3.1 tarball's CMakeLists.txt includes an
    # opus_buildtype.cmake that the tarball lacks.
    Recipe("opus", "c", autotools("--enable-custom-modes", "--disable-doc",
                                  "--disable-extra-programs", make=("libopus.la",)),
           note="libopus with custom modes, as Debian configures it"),
    Recipe("libogg", "c", cmake(targets=("ogg",))),
    Recipe("libvorbis", "c", (_OGG_DEP, *cmake(*_OGG_OPTS, targets=("vorbis", "vorbisenc",
                                                                      "vorbisfile"))),
           deps=("libogg",), note="libogg headers from the libogg source package"),
    Recipe("speex", "c", autotools("--disable-binaries", "--without-ogg",
                                   make=("-C", "libspeex"))),
    Recipe("libsndfile", "c", cmake(
        "-DENABLE_EXTERNAL_LIBS=OFF", "-DENABLE_MPEG=OFF", "-DBUILD_PROGRAMS=OFF",
        "-DBUILD_EXAMPLES=OFF", "-DENABLE_CPACK=OFF", "-DBUILD_REGTEST=OFF",
        targets=("sndfile",)), note="without FLAC/Vorbis/Opus/MPEG codecs"),
    Recipe("lzo2", "c", autotools(make=("src/liblzo2.la",))),
    Recipe("libssh2", "c", (
        # libssh2 needs a crypto backend: OpenSSL's headers, generated by its Configure.
        shell("cp -r {dep_openssl} _deps_openssl && mkdir -p _deps && mv _deps_openssl "
              "_deps/openssl && cd _deps/openssl && ./Configure linux-x86_64 no-asm "
              "no-shared no-module no-tests >/dev/null && make build_generated >/dev/null"),
        *cmake("-DCRYPTO_BACKEND=OpenSSL", "-DOPENSSL_INCLUDE_DIR={src}/_deps/openssl/include",
               "-DOPENSSL_CRYPTO_LIBRARY={src}/_deps/openssl/libcrypto.a",
               "-DOPENSSL_SSL_LIBRARY={src}/_deps/openssl/libssl.a",
               "-DENABLE_ZLIB_COMPRESSION=OFF",
               "-DBUILD_EXAMPLES=OFF", targets=("libssh2",)),
    ), deps=("openssl",), note="OpenSSL backend, headers from the openssl source package",
        cross=_OPENSSL_X86),
    Recipe("libzip", "c", cmake(
        "-DENABLE_COMMONCRYPTO=OFF", "-DENABLE_GNUTLS=OFF", "-DENABLE_MBEDTLS=OFF",
        "-DENABLE_OPENSSL=OFF", "-DENABLE_WINDOWS_CRYPTO=OFF", "-DENABLE_BZIP2=OFF",
        "-DENABLE_LZMA=OFF", "-DENABLE_ZSTD=OFF", "-DBUILD_TOOLS=OFF", "-DBUILD_REGRESS=OFF",
        "-DBUILD_EXAMPLES=OFF", "-DBUILD_DOC=OFF", *_ZLIB_OPTS, targets=("zip",)),
        deps=("zlib",)),
    # Static only, the library target is json-c itself (json-c-static exists beside a
    # shared build only).
    Recipe("json-c", "c", cmake("-DDISABLE_WERROR=ON", "-DBUILD_STATIC_LIBS=ON",
                                "-DDISABLE_EXTRA_LIBS=ON", targets=("json-c",))),
    Recipe("libconfig", "c", autotools("--enable-examples", "--disable-tests",
                                       make=("-C", "lib")),
           extra=(("make", "-j{jobs}", "-C", "examples/c++"),),
           note="libconfig and libconfig++, then the C++ examples"),
    Recipe("libtasn1-6", "c", autotools("--disable-doc", "--disable-valgrind-tests",
                                        make=("-C", "lib"))),
    Recipe("nettle", "c", autotools("--disable-assembler", "--disable-openssl",
                                    "--disable-documentation", make=("libnettle.a",)),
           note="libnettle only (libhogweed needs gmp's generated headers)"),
    # Debian's tarball has no doc/ (+dfsg) and its patch takes doc/Makefile out of
    # configure.ac, not out of configure: regenerated, as Debian's build does.
    Recipe("gmp", "c", autotools("--disable-assembly", "--enable-cxx", autoreconf=True),
           # The C++ wrapper's tests (built, not run: `TESTS=` empty) and the test library
           # they link; gmp's C tests are left out.
           extra=(("make", "-j{jobs}", "-C", "tests", "libtests.la"),
                  ("make", "-j{jobs}", "-C", "tests/cxx", "check", "TESTS=")),
           note="generic C (no assembly) and the C++ wrapper (as Debian's libgmpxx), then "
           "the C++ wrapper's tests"),
    Recipe("mpfr4", "c", (
        # mpfr's configure links against gmp: build it from its source in _deps/.
        shell("cp -r {dep_gmp} _deps_gmp && mkdir -p _deps && mv _deps_gmp _deps/gmp && "
              "cd _deps/gmp && autoreconf -fi >/dev/null 2>&1 && "
              "./configure --disable-shared --disable-assembly >/dev/null && "
              "make -j{jobs} >/dev/null"),
        # No binary128: clang has __float128 but no _Float128, which configure then
        # #defines to __float128, clashing with glibc's own typedef of it (Debian's GCC has
        # both). Two conversion files fewer.
        *autotools("--with-gmp-include={src}/_deps/gmp", "--with-gmp-lib={src}/_deps/gmp/.libs",
                   "--disable-float128", make=("-C", "src")),
    ), deps=("gmp",), note="against gmp built from its source package; no binary128"),
    Recipe("libunistring", "c", autotools(make=("-C", "lib"))),
    Recipe("libidn2", "c", (
        *autotools("--disable-doc", "--disable-nls", "--disable-valgrind-tests",
                   "--with-included-libunistring", make=("-C", "unistring")),
        ("make", "-j{jobs}", "-C", "gl"), ("make", "-j{jobs}", "-C", "lib")),
        # The bundled libunistring parts and gnulib are other projects' code, copied into
        # many packages: not libidn2's modules.
        exclude=r"/(unistring|gl)/",
        note="libidn2, with its bundled copy of libunistring's parts (not in its modules)"),

    # ---- C++: libraries, tools, tests -----------------------------------------------------
    Recipe("fmtlib", "c++", (
        # Debian's tests take googletest from /usr/src/googletest: its source package instead.
        ("sed", "-i", "s|/usr/src/googletest/|{dep_googletest}/|", "test/CMakeLists.txt"),
        *cmake("-DFMT_DOC=OFF", "-DFMT_FUZZ=OFF", "-DFMT_INSTALL=OFF", "-DFMT_TEST=OFF",
               targets=("fmt",))), deps=("googletest",),
           extra=(cmake_configure("-DFMT_DOC=OFF", "-DFMT_TEST=ON", "-DBUILD_TESTING=ON",
                                  "-DFMT_PEDANTIC=OFF", "-DFMT_WERROR=OFF"),
                  cmake_build(keep_going=True)),
           exclude=_NOT_THEIR_GTEST,
           note="library, then its tests"),
    Recipe("googletest", "c++", cmake("-DBUILD_GMOCK=ON", "-DINSTALL_GTEST=OFF",
                                      targets=("gtest", "gmock")),
           extra=(cmake_configure("-DBUILD_GMOCK=ON", "-DINSTALL_GTEST=OFF",
                                  "-Dgtest_build_tests=ON", "-Dgmock_build_tests=ON",
                                  "-Dgtest_build_samples=ON"),
                  cmake_build(keep_going=True)),
           note="gtest, gmock, then their own tests and samples"),
    Recipe("snappy", "c++", (
        link_dep("googletest", "third_party/googletest"),
        link_dep("benchmark", "third_party/benchmark"),
        _UNCOMMENT_THIRD_PARTY,
        *cmake("-DSNAPPY_INSTALL=OFF", "-DSNAPPY_BUILD_TESTS=OFF",
               "-DSNAPPY_BUILD_BENCHMARKS=OFF", targets=("snappy",))),
        extra=(cmake_configure("-DSNAPPY_BUILD_TESTS=ON", "-DSNAPPY_BUILD_BENCHMARKS=OFF",
                               "-DBUILD_TESTING=ON", "-DBENCHMARK_ENABLE_TESTING=OFF",
                               "-DBENCHMARK_ENABLE_WERROR=OFF", "-DSNAPPY_INSTALL=OFF"),
               cmake_build(keep_going=True), _SNAPPY_MORE),
        deps=("googletest", "benchmark"), exclude=_NOT_THEIR_GTEST,
        note="library and tests (googletest from its source package), then the benchmark "
        "and fuzz targets compiled on their own"),
    Recipe("leveldb", "c++", (
        link_dep("googletest", "third_party/googletest"),
        link_dep("benchmark", "third_party/benchmark"),
        _UNCOMMENT_THIRD_PARTY,
        *cmake("-DLEVELDB_BUILD_TESTS=OFF", "-DLEVELDB_BUILD_BENCHMARKS=OFF",
               "-DLEVELDB_INSTALL=OFF", targets=("leveldb",))),
        extra=(cmake_configure("-DLEVELDB_BUILD_TESTS=ON", "-DLEVELDB_BUILD_BENCHMARKS=OFF",
                               "-DBUILD_TESTING=ON", "-DBENCHMARK_ENABLE_TESTING=OFF",
                               "-DBENCHMARK_ENABLE_WERROR=OFF", "-DLEVELDB_INSTALL=OFF"),
               cmake_build(keep_going=True)),
        deps=("googletest", "benchmark"), exclude=_NOT_THEIR_GTEST,
        note="without snappy/crc32c/tcmalloc; with tests"),
    Recipe("protobuf", "c++", (
        link_dep("googletest", "third_party/googletest"),
        *cmake("-Dprotobuf_BUILD_TESTS=OFF", "-Dprotobuf_BUILD_PROTOC_BINARIES=ON",
               "-Dprotobuf_WITH_ZLIB=OFF", "-Dprotobuf_BUILD_SHARED_LIBS=OFF",
               "-Dprotobuf_BUILD_LIBPROTOC=ON",
               targets=("libprotobuf", "libprotobuf-lite", "libprotoc", "protoc"))),
        extra=(cmake_configure("-Dprotobuf_BUILD_TESTS=ON", "-Dprotobuf_WITH_ZLIB=OFF",
                               "-Dprotobuf_BUILD_SHARED_LIBS=OFF", "-DBUILD_TESTING=ON",
                               "-Dprotobuf_USE_EXTERNAL_GTEST=OFF"),
               cmake_build(keep_going=True)),
        deps=("googletest",), exclude=_NOT_THEIR_GTEST,
        note="libprotobuf(-lite), libprotoc, protoc, then tests"),
    Recipe("re2", "c++", (
        # Debian's tarball lacks the generated tables (+dfsg); its build makes them from
        # Debian's unicode-data. Here the Unicode data comes from perl's Unicode::UCD (perl
        # 5.36: Unicode 14, the version re2 20220601 generated its own tables from).
        ("mkdir", "-p", f"{DEPS_DIR}/unicode"),
        ("perl", "-e", _brace(UCD_TABLES_PERL), f"{DEPS_DIR}/unicode"),
        ("sed", "-i", "-e", f"s|^_UNICODE_DIR = .*|_UNICODE_DIR = \"{{src}}/{DEPS_DIR}/unicode\"|",
         # urllib is only for tables fetched from unicode.org; not python3-six for it
         "-e", "s|^from six.moves import urllib$|import urllib.request|", "re2/unicode.py"),
        shell("perl re2/make_perl_groups.pl > re2/perl_groups.cc && "
              "python3 re2/make_unicode_casefold.py > re2/unicode_casefold.cc && "
              "python3 re2/make_unicode_groups.py > re2/unicode_groups.cc"),
        *cmake("-DRE2_BUILD_TESTING=OFF", targets=("re2",))),
           # This version's tests bring their own small test framework (util/test.cc).
           extra=(cmake_configure("-DRE2_BUILD_TESTING=ON", "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True)),
           note="library (tables generated as Debian does, Unicode 14 data from perl), "
           "then its tests and benchmark"),
    Recipe("abseil", "c++", cmake("-DABSL_PROPAGATE_CXX_STD=ON", "-DCMAKE_CXX_STANDARD=17"),
           extra=(cmake_configure("-DABSL_PROPAGATE_CXX_STD=ON", "-DCMAKE_CXX_STANDARD=17",
                                  "-DBUILD_TESTING=ON", "-DABSL_BUILD_TESTING=ON",
                                  "-DABSL_USE_EXTERNAL_GOOGLETEST=OFF",
                                  "-DABSL_USE_GOOGLETEST_HEAD=OFF",
                                  "-DABSL_LOCAL_GOOGLETEST_DIR={dep_googletest}"),
                  cmake_build(keep_going=True), _ABSL_BENCHMARKS),
           deps=("googletest", "benchmark"), exclude=_NOT_THEIR_GTEST,
           note="all libraries, then tests and benchmarks (googletest and benchmark headers "
           "from their source packages)"),
    Recipe("double-conversion", "c++", cmake(),
           extra=(cmake_configure("-DBUILD_TESTING=ON"), cmake_build(keep_going=True))),
    Recipe("gflags", "c++", cmake("-DBUILD_STATIC_LIBS=ON", "-DBUILD_gflags_nothreads_LIB=OFF"),
           extra=(cmake_configure("-DBUILD_STATIC_LIBS=ON", "-DBUILD_TESTING=ON",
                                  "-DBUILD_gflags_nothreads_LIB=OFF"),
                  cmake_build(keep_going=True))),
    Recipe("google-glog", "c++", cmake("-DWITH_GFLAGS=OFF", "-DWITH_GTEST=OFF",
                                       "-DWITH_UNWIND=OFF", "-DWITH_PKGCONFIG=OFF"),
           extra=(cmake_configure("-DWITH_GFLAGS=OFF", "-DWITH_GTEST=OFF", "-DWITH_UNWIND=OFF",
                                  "-DBUILD_TESTING=ON"), cmake_build(keep_going=True))),
    # Debian patched out the version from git tags and passes GIT_VERSION itself; "0.0.0"
    # makes benchmark take the version of its project() line. The gtest tests build against
    # googletest's source package, where benchmark would download it.
    Recipe("benchmark", "c++", (
        # -pedantic-errors is not under BENCHMARK_ENABLE_WERROR; clang 22 counts its
        # __COUNTER__ as an extension (Debian's GCC does not).
        ("sed", "-i", "/add_cxx_compiler_flag(-pedantic-errors)/d", "CMakeLists.txt"),
        *cmake(*_BENCHMARK_OPTS, "-DBENCHMARK_ENABLE_TESTING=OFF")),
           extra=(cmake_configure(*_BENCHMARK_OPTS, "-DBENCHMARK_ENABLE_TESTING=ON",
                                  "-DBENCHMARK_ENABLE_GTEST_TESTS=ON",
                                  "-DBENCHMARK_USE_BUNDLED_GTEST=ON",
                                  "-DGOOGLETEST_PATH={dep_googletest}", "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True)),
           deps=("googletest",), exclude=_NOT_THEIR_GTEST,
           note="library, then its tests (googletest from its source package)"),
    Recipe("flatbuffers", "c++", cmake("-DFLATBUFFERS_BUILD_TESTS=OFF",
                                       "-DFLATBUFFERS_LIBCXX_WITH_CLANG=OFF",
                                       "-DFLATBUFFERS_STRICT_MODE=OFF"),
           extra=(cmake_configure("-DFLATBUFFERS_BUILD_TESTS=ON",
                                  "-DFLATBUFFERS_LIBCXX_WITH_CLANG=OFF"),
                  cmake_build(keep_going=True), _FLATBUFFERS_MORE),
           deps=("benchmark",),
           note="flatbuffers, flatc, flathash, then tests and samples, and the fuzz targets "
           "and benchmarks compiled on their own"),
    Recipe("capnproto", "c++", cmake("-DWITH_OPENSSL=OFF", "-DWITH_ZLIB=OFF"),
           extra=(cmake_configure("-DWITH_OPENSSL=OFF", "-DWITH_ZLIB=OFF", "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True)),
           note="kj, capnp, capnp-rpc, capnp-json, the capnp tool and plugins, then tests"),
    Recipe("spdlog", "c++", (
        # Debian's spdlog uses an external fmt: fmt from its source package, in _deps/.
        dep_cmake_configure("fmtlib", "-DFMT_DOC=OFF", "-DFMT_TEST=OFF", "-DFMT_INSTALL=ON"),
        cmake_build("fmt", build=f"{DEPS_DIR}/fmtlib"),
        *cmake("-DSPDLOG_FMT_EXTERNAL=ON", "-Dfmt_DIR={src}/_deps/fmtlib",
               "-DSPDLOG_BUILD_EXAMPLE=ON", "-DSPDLOG_BUILD_TESTS=OFF")),
        extra=(
            # Debian's patch includes <catch2/catch.hpp> from its catch2 package; the
            # tests include the tarball's own copy, tests/catch.hpp, as upstream does.
            ("sed", "-i", "s|^#include <catch2/catch.hpp>$|#include \"catch.hpp\"|",
             "tests/includes.h", "tests/main.cpp"),
            cmake_configure("-DSPDLOG_FMT_EXTERNAL=ON", "-Dfmt_DIR={src}/_deps/fmtlib",
                            "-DSPDLOG_BUILD_EXAMPLE=ON", "-DSPDLOG_BUILD_TESTS=ON",
                            "-DBUILD_TESTING=ON"), cmake_build(keep_going=True),
            _SPDLOG_BENCH),
        # main.cpp is Catch2's own implementation (CATCH_CONFIG_MAIN): not spdlog's code.
        exclude=r"/spdlog-utests\.dir/main\.cpp",
        deps=("fmtlib", "benchmark"), note="compiled library and example, then tests "
        "(Catch2: the tarball's copy) and benchmarks (benchmark's headers from its source "
        "package)"),
    Recipe("zeromq3", "c++", cmake(
        "-DWITH_LIBSODIUM=OFF", "-DENABLE_CURVE=OFF", "-DWITH_DOCS=OFF", "-DWITH_DOC=OFF",
        "-DBUILD_SHARED=OFF", "-DBUILD_STATIC=ON", "-DBUILD_TESTS=OFF", "-DWITH_TLS=OFF",
        "-DWITH_LIBBSD=OFF", "-DENABLE_PRECOMPILED=OFF", "-DENABLE_DRAFTS=OFF"),
        extra=(cmake_configure(
            "-DWITH_LIBSODIUM=OFF", "-DENABLE_CURVE=OFF", "-DWITH_DOCS=OFF", "-DWITH_DOC=OFF",
            "-DBUILD_SHARED=OFF", "-DBUILD_STATIC=ON", "-DBUILD_TESTS=ON", "-DWITH_TLS=OFF",
            "-DWITH_LIBBSD=OFF", "-DENABLE_PRECOMPILED=OFF", "-DENABLE_DRAFTS=OFF",
            # BUILD_TESTS only seeds the cached ZMQ_BUILD_TESTS, which the first
            # configure already set to OFF
            "-DZMQ_BUILD_TESTS=ON", "-DBUILD_TESTING=ON"), cmake_build(keep_going=True)),
        # The Unity test framework (C) is bundled from another project.
        exclude=r"/external/unity/",
        note="libzmq and its tools, then tests and unit tests; no CURVE/TLS"),
    Recipe("ninja-build", "c++", cmake("-DBUILD_TESTING=ON"),
           note="ninja, its library, and its own tests (no gtest needed)"),
    Recipe("taglib", "c++", (
        # Debian includes <utf8/checked.h> from its utfcpp package; the tarball's own copy
        # of utfcpp (3rdparty/utf8-cpp) serves under that name.
        ("ln", "-s", "utf8-cpp", "3rdparty/utf8"),
        *cmake(*_TAGLIB_OPTS)),
           extra=(_CPPUNIT_BUILT, cmake_configure(*_TAGLIB_OPTS, *_TAGLIB_TEST_OPTS),
                  cmake_build(keep_going=True)),
           helpers=("cppunit",),
           note="libtag, the C bindings and examples (utfcpp: the tarball's copy), then its "
           "tests against CppUnit (off the allowlist) built in _deps/, not in the corpus"),
    Recipe("harfbuzz", "c++", (_HB_PER_SOURCE, _HB_TEST_PROGRAMS, *cmake(
        "-DHB_BUILD_SUBSET=ON", "-DHB_HAVE_FREETYPE=OFF", "-DHB_HAVE_GLIB=OFF",
        "-DHB_HAVE_ICU=OFF", "-DHB_BUILD_TESTS=OFF")),
           extra=(cmake_build("mlgo-hb-tests", keep_going=True),),
           note="harfbuzz (each source compiled on its own, as Debian's meson build does, "
           "not the amalgamation), harfbuzz-subset, then the test programs meson builds"),
    Recipe("graphite2", "c++", cmake("-DGRAPHITE2_COMPARE_RENDERER=OFF"),
           extra=(cmake_configure("-DGRAPHITE2_COMPARE_RENDERER=OFF", "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True))),
    # Each source compiled on its own: nothing is linked (the encoder and decoder, which
    # need brotli, are left out).
    Recipe("woff2", "c++", (compile_each(_WOFF2_CORE, _WOFF2_FLAGS, fatal=True),),
           extra=(compile_each(_WOFF2_MORE, _WOFF2_FLAGS),),
           note="the font code, then the three tools and the fuzz targets; no encoder/decoder "
           "(they need brotli, not on the allowlist and not on this mirror)"),
    Recipe("openexr", "c++", (
        _ZLIB_BUILT, *_IMATH_BUILT,
        *cmake(*_OPENEXR_OPTS, "-DOPENEXR_BUILD_TOOLS=OFF", "-DOPENEXR_INSTALL_EXAMPLES=OFF")),
           extra=(cmake_configure(*_OPENEXR_OPTS, "-DOPENEXR_BUILD_TOOLS=ON",
                                  "-DOPENEXR_INSTALL_EXAMPLES=ON", "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True)),
           deps=("zlib",), helpers=("imath",),
           note="libraries, then tools, examples and tests; Imath (off the allowlist) and "
           "zlib built in _deps/, not in the corpus"),
    Recipe("libebml", "c++", cmake("-DDISABLE_PKGCONFIG=ON", "-DDISABLE_CMAKE_CONFIG=OFF")),
    Recipe("libmatroska", "c++", (
        dep_cmake_configure("libebml", "-DDISABLE_PKGCONFIG=ON"),
        cmake_build("ebml", build=f"{DEPS_DIR}/libebml"),
        # EBMLConfig.cmake works from an install tree only.
        ("cmake", "--install", f"{DEPS_DIR}/libebml", "--prefix", "{src}/_deps/prefix"),
        *cmake("-DEBML_DIR={src}/_deps/prefix/lib/cmake/EBML", "-DDISABLE_PKGCONFIG=ON")),
        deps=("libebml",), note="against libebml built from its source package"),
    Recipe("tinyobjloader", "c++", cmake(*_TINYOBJ_OPTS),
           extra=(cmake_configure(*_TINYOBJ_OPTS, "-DBUILD_TESTING=ON"),
                  cmake_build(keep_going=True), _TINYOBJ_EXAMPLES),
           note="library (float and double), loader example and obj_sticher, then its tester "
           "(against both libraries) and the callback_api and skin_weight examples"),
    Recipe("cppcheck", "c++", (
        # cppcheck 2.10's SmallVector allocator cannot be rebound to its own type, which
        # the bundled clang's libc++ asserts (newer cppchecks add this same member).
        ("sed", "-i", "/^struct TaggedAllocator : std::allocator<T>$/{{n;s/^{{$/{{ template<"
         "class U> struct rebind {{ using other = TaggedAllocator<U, N>; }};/}}",
         "lib/smallvector.h"),
        *cmake(*_CPPCHECK_OPTS)),
           extra=(cmake_configure(*_CPPCHECK_OPTS, "-DBUILD_TESTS=ON", "-DREGISTER_TESTS=OFF"),
                  cmake_build(keep_going=True)),
           note="lib (match-compiled, as Debian builds it), cli, bundled tinyxml2/simplecpp, "
           "then testrunner"),
    Recipe("ccache", "c++", cmake("-DZSTD_FROM_INTERNET=OFF", "-DHIREDIS_FROM_INTERNET=OFF",
                                  "-DREDIS_STORAGE_BACKEND=OFF", "-DENABLE_TESTING=OFF",
                                  "-DENABLE_DOCUMENTATION=OFF"),
           note="needs zstd (not allowlisted)"),
)}

# Cheap and useful first, the big ones last; C++ interleaved so a partial run is balanced.
DEFAULT_ORDER = (
    "zlib", "libpng1.6", "expat", "pcre2", "libyaml", "cjson", "jansson", "giflib", "libwebp",
    "libjpeg-turbo", "snappy", "leveldb", "fmtlib", "libxml2", "googletest", "openssl",
    "protobuf",
    # added with the broad corpus
    "double-conversion", "gflags", "google-glog", "re2", "lmdb", "cmark", "libogg", "libvorbis",
    "opus", "flac", "speex", "tinyobjloader", "spdlog", "libebml", "libmatroska", "graphite2",
    "woff2", "lzo2", "c-ares", "pcre3", "libonig", "libuv1", "json-c", "libconfig", "benchmark",
    "ninja-build", "taglib", "flatbuffers", "harfbuzz", "xz-utils", "libzip", "libsndfile",
    "libffi", "pixman", "freetype", "tiff", "libtasn1-6", "libidn2", "jq", "libsodium",
    "nghttp2", "libevent", "zeromq3", "capnproto", "libxslt", "curl", "libarchive", "libssh2",
    "cppcheck", "nettle", "libunistring", "gmp", "mpfr4", "abseil", "libgit2", "openexr",
    "ccache",
)
