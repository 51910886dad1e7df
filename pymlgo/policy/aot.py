"""An exported SavedModel compiled the way LLVM's release build compiles it, and run.

LLVM configured with `-DTENSORFLOW_AOT_PATH=<tensorflow pip dir>` and
`-DLLVM_INLINER_MODEL_PATH=DIR`:
- runs `<tf>/../../../../bin/saved_model_cli aot_compile_cpu --multithreading false --dir DIR
  --tag_set serve --signature_def_key action --output_prefix <build>/InlinerSizeModel
  --cpp_class llvm::InlinerSizeModel --target_triple <host triple>`
  (`llvm/cmake/modules/TensorFlowCompile.cmake`, called from `llvm/lib/Analysis/CMakeLists.txt`);
- compiles `<tf>/xla_aot_runtime_src` (the `tf_xla_runtime` library) with `<tf>/include` on the
  include path and links it and the generated object into clang;
- `ReleaseModeModelRunner` finds each feature's buffer with `LookupArgIndex("feed_" + name)`
  (a feature the model lacks gets a scratch buffer), the decision with
  `LookupResultIndex("fetch_inlining_decision")`, and reads it as int64. A model with a
  `feed_model_selector` input is an error unless the user names a sub-model.

Here a small C++ harness (`aot_harness.cc`) takes clang's place, so that a test can feed the
compiled model real feature rows and compare it with the numpy policy.

Two things LLVM's build does not do, which TensorFlow 2.21 needs:
- `aot_compile_cpu` writes `<prefix>_constants.o` (the weights, which the header references)
  and `<prefix>_metadata.o` (unreferenced) beside `<prefix>.o`; LLVM's CMake declares only
  `<prefix>.o`, and a link without `_constants.o` fails. All are linked here.
- the runtime references Abseil, which the pip package ships only inside
  `libtensorflow_framework.so.2` (llvm-project issue #193353); it is linked against that.

The runtime's objects are cached per TensorFlow runtime source and compiler. Its Eigen kernel
libraries (dot, convolution and sort; a minute or more each) are compiled only when the link
needs them: a static archive, as LLVM builds, would not contribute them otherwise either.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# What llvm/lib/Analysis/CMakeLists.txt passes to tf_find_and_compile for the inliner.
LLVM_TAG_SET = "serve"
LLVM_SIGNATURE_KEY = "action"
LLVM_FNAME = "InlinerSizeModel"
LLVM_CPP_CLASS = "llvm::InlinerSizeModel"
FEED_PREFIX, FETCH_PREFIX = "feed_", "fetch_"  # ReleaseModeModelRunner's defaults
DECISION_RESULT = FETCH_PREFIX + "inlining_decision"
DEFAULT_TRIPLE = "x86_64-pc-linux"
HARNESS_SOURCE = Path(__file__).with_name("aot_harness.cc")
# The runtime's own CMakeLists.txt adds these; -std=c++17 is LLVM's language level.
RUNTIME_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-ftemplate-backtrace-limit=0",
                 "-Wno-ignored-attributes", "-Wno-deprecated-copy", "-Wno-cast-qual",
                 "-Wno-sign-compare")
_KERNEL_LIBRARY = re.compile(r"xla/backends/cpu/runtime/(dot|convolution|sort)_lib[^/]*\.cc$")


class AotError(RuntimeError):
    """The AOT toolchain is missing or one of its steps failed (the message says which)."""


def tensorflow_dir() -> Path:
    """The installed `tensorflow` package directory (LLVM's TENSORFLOW_AOT_PATH), found
    without importing TensorFlow."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        raise AotError("TensorFlow is not installed: pip install 'pymlgo[export]'")
    return Path(spec.origin).parent


def saved_model_cli(tf_dir: Path) -> Path:
    """`saved_model_cli` where LLVM's CMake looks for it, else on PATH."""
    llvm_path = (tf_dir / ".." / ".." / ".." / ".." / "bin" / "saved_model_cli").resolve()
    if llvm_path.is_file():
        return llvm_path
    found = shutil.which("saved_model_cli")
    if found is None:
        raise AotError(f"no saved_model_cli at {llvm_path} or on PATH")
    return Path(found)


def llvm_aot_command(cli: Path, saved_model: Path, prefix: Path, *,
                     triple: str = DEFAULT_TRIPLE) -> list[str]:
    """The command LLVM's `tf_compile` runs for the inliner model (same flags, same order)."""
    return [str(cli), "aot_compile_cpu", "--multithreading", "false",
            "--dir", str(saved_model), "--tag_set", LLVM_TAG_SET,
            "--signature_def_key", LLVM_SIGNATURE_KEY, "--output_prefix", str(prefix),
            "--cpp_class", LLVM_CPP_CLASS, "--target_triple", triple]


@dataclass(frozen=True)
class AotModel:
    header: Path
    objects: tuple[Path, ...]  # <prefix>.o first, then what else aot_compile_cpu wrote
    command: tuple[str, ...]
    seconds: float  # wall time of aot_compile_cpu
    cpu_seconds: float  # its user + system time (wall time on a shared machine says little)


def aot_compile(saved_model: Path, out_dir: Path, *, triple: str = DEFAULT_TRIPLE,
                tf_dir: Path | None = None) -> AotModel:
    """Run `saved_model_cli aot_compile_cpu` on `saved_model` as LLVM's build does."""
    tf_dir = tf_dir or tensorflow_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = out_dir / LLVM_FNAME
    cmd = llvm_aot_command(saved_model_cli(tf_dir), Path(saved_model), prefix, triple=triple)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    start, cpu = time.perf_counter(), _children_cpu()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    header = prefix.with_suffix(".h")
    main_obj = prefix.with_suffix(".o")
    if res.returncode != 0 or not header.is_file() or not main_obj.is_file():
        raise AotError(f"aot_compile_cpu failed (exit {res.returncode}):\n"
                       + _tail(res.stderr))
    extra = sorted(p for p in out_dir.glob(f"{LLVM_FNAME}_*.o"))
    return AotModel(header, (main_obj, *extra), tuple(cmd), seconds, cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def find_cxx() -> str:
    """The host C++ compiler: $CXX, else g++, else c++. TensorFlow's libraries are built
    against libstdc++, so a libc++ toolchain (zig's) cannot link the runtime."""
    for cand in (os.environ.get("CXX"), "g++", "c++"):
        if cand and shutil.which(cand.split()[0]):
            return cand
    raise AotError("no C++ compiler ($CXX, g++ or c++) to build the XLA AOT runtime")


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _makefile_cxxflags(model: AotModel) -> list[str]:
    """CXXFLAGS from `<prefix>_makefile.inc`: what tfcompile says its users compile with."""
    inc = model.header.with_name(f"{LLVM_FNAME}_makefile.inc")
    if not inc.is_file():
        return []
    for line in inc.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "CXXFLAGS":
            return value.split()
    return []


@dataclass(frozen=True)
class Runtime:
    """`xla_aot_runtime_src` compiled: core objects, and the kernel libraries' sources."""
    tf_dir: Path
    cxx: str
    cache: Path
    sources: tuple[str, ...]  # relative to xla_aot_runtime_src
    core: tuple[str, ...]
    kernels: tuple[str, ...]

    @property
    def framework_library(self) -> Path:
        return self.tf_dir / "libtensorflow_framework.so.2"

    def objects(self, names: Sequence[str], jobs: int = 1) -> list[Path]:
        """Object files of `names`, compiled once into the cache."""
        src_root = self.tf_dir / "xla_aot_runtime_src"

        def one(name: str) -> Path:
            obj = self.cache / (name.replace("/", "__") + ".o")
            if obj.is_file():
                return obj
            fd, tmp = tempfile.mkstemp(suffix=".o", dir=self.cache)
            os.close(fd)
            cmd = [*self.cxx.split(), *RUNTIME_FLAGS, f"-I{self.tf_dir / 'include'}",
                   "-c", str(src_root / name), "-o", tmp]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                os.unlink(tmp)
                raise AotError(f"compiling the XLA AOT runtime's {name} failed:\n"
                               + _tail(res.stderr))
            os.replace(tmp, obj)
            return obj

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return list(pool.map(one, names))


def runtime(cache_root: Path, *, tf_dir: Path | None = None, cxx: str | None = None) -> Runtime:
    """The runtime of this TensorFlow for this compiler; its cache directory is keyed by the
    runtime's sources, the compiler's version and the flags."""
    tf_dir = tf_dir or tensorflow_dir()
    cxx = cxx or find_cxx()
    src_root = tf_dir / "xla_aot_runtime_src"
    if not src_root.is_dir():
        raise AotError(f"{src_root} is missing: this TensorFlow has no XLA AOT runtime")
    sources = tuple(sorted(p.relative_to(src_root).as_posix() for p in src_root.rglob("*.cc")))
    key = hashlib.sha256()
    for name in sources:
        key.update(name.encode() + b"\0" + (src_root / name).read_bytes())
    version = subprocess.run([*cxx.split(), "--version"], capture_output=True, text=True,
                             check=False).stdout
    key.update(version.encode() + "\0".join(RUNTIME_FLAGS).encode())
    cache = cache_root / "tf-xla-runtime" / key.hexdigest()[:16]
    cache.mkdir(parents=True, exist_ok=True)
    kernels = tuple(n for n in sources if _KERNEL_LIBRARY.search(n))
    core = tuple(n for n in sources if n not in kernels)
    return Runtime(tf_dir, cxx, cache, sources, core, kernels)


@dataclass(frozen=True)
class Harness:
    executable: Path
    runtime_sources: tuple[str, ...]  # the runtime sources linked in
    seconds: float  # compiling the harness and runtime objects not cached yet, and linking
    cpu_seconds: float


def build_harness(model: AotModel, rt: Runtime, out_dir: Path, *, jobs: int = 1) -> Harness:
    """Compile the harness against `model`'s header and link it with the model's objects and
    the runtime (its kernel libraries only if the link needs them)."""
    start, cpu = time.perf_counter(), _children_cpu()
    flags = [*rt.cxx.split(), "-std=c++17", "-O2", f"-I{rt.tf_dir / 'include'}",
             f"-I{model.header.parent}", *_makefile_cxxflags(model)]
    harness_obj = out_dir / "aot_harness.o"
    res = subprocess.run(
        [*flags, "-w", f'-DMODEL_HEADER="{model.header.name}"',
         f"-DMODEL_CLASS={LLVM_CPP_CLASS}", "-c", str(HARNESS_SOURCE), "-o", str(harness_obj)],
        capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise AotError("compiling the harness against the generated header failed:\n"
                       + _tail(res.stderr))
    exe = out_dir / "aot_harness"
    linked = rt.core
    res = _link(rt, [harness_obj, *model.objects, *rt.objects(linked, jobs)], exe)
    if res.returncode != 0 and "undefined reference" in res.stderr and rt.kernels:
        linked = rt.sources
        res = _link(rt, [harness_obj, *model.objects, *rt.objects(linked, jobs)], exe)
    if res.returncode != 0:
        raise AotError("linking the harness failed:\n" + _tail(res.stderr))
    return Harness(exe, linked, time.perf_counter() - start, _children_cpu() - cpu)


def _link(rt: Runtime, objects: Sequence[Path], exe: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*rt.cxx.split(), "-o", str(exe), *map(str, objects), str(rt.framework_library),
         f"-Wl,-rpath,{rt.tf_dir}", "-lpthread"],
        capture_output=True, text=True, check=False)


@dataclass(frozen=True)
class AotRun:
    args: dict[str, int]  # argument name -> buffer bytes, as the compiled class reports
    results: dict[str, int]
    has_model_selector: bool
    decisions: np.ndarray  # int64, one per row
    logits: np.ndarray | None  # float32, when the model has a `fetch_logit` result


def run_harness(exe: Path, columns: Mapping[str, np.ndarray],
                names: Sequence[str]) -> AotRun:
    """Feed `columns[name]` for `names` (int64, one value per call site) to the compiled
    model, one call site per Run(), and read back its interface and answers."""
    cols = [np.asarray(columns[n]).reshape(-1).astype(np.int64) for n in names]
    n_rows = len(cols[0]) if cols else 0
    lines = [" ".join(names)]
    lines += [" ".join(str(int(c[i])) for c in cols) for i in range(n_rows)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, env=env, check=False)
    if res.returncode != 0:
        raise AotError(f"the harness failed (exit {res.returncode}):\n" + _tail(res.stderr))
    head, sep, body = res.stdout.partition("rows\n")
    if not sep:
        raise AotError("the harness printed no rows marker:\n" + _tail(res.stdout))
    args: dict[str, int] = {}
    results: dict[str, int] = {}
    selector = -1
    for line in head.splitlines():
        kind, *rest = line.split()
        if kind == "arg":
            args[rest[0]] = int(rest[1])
        elif kind == "result":
            results[rest[0]] = int(rest[1])
        elif kind == "selector":
            selector = int(rest[0])
    rows = [line.split() for line in body.splitlines()]
    if len(rows) != n_rows:
        raise AotError(f"the harness answered {len(rows)} of {n_rows} rows")
    decisions = np.array([int(r[0]) for r in rows], dtype=np.int64)
    logits = (np.array([float(r[1]) for r in rows], dtype=np.float32)
              if rows and len(rows[0]) > 1 else None)
    return AotRun(args, results, selector >= 0, decisions, logits)


_ACCESSOR = re.compile(r"^\s*(?:const\s+)?([\w:]+)\* (arg|result)_(\w+)_data\(\)", re.M)


def header_types(header: Path) -> dict[str, str]:
    """C++ element type of each named argument and result, from the generated header's typed
    accessors (`int64_t* arg_feed_x_data()`): what the compiled code reads and writes."""
    return {name: ctype for ctype, _, name in _ACCESSOR.findall(header.read_text())}


@dataclass(frozen=True)
class AotComparison:
    """The AOT-compiled export of a policy against the policy itself on the same rows."""
    call_sites: int
    inlined: int  # decisions to inline by the numpy policy
    decisions_equal: int  # AOT model (as exported) == numpy, per call site
    logit_model_decisions_equal: int  # the diagnostic export with a logit output == numpy
    max_abs_logit_diff: float  # |AOT logit - numpy logit|, over every call site
    min_abs_logit: float  # the numpy logit nearest 0: how much room a decision had
    max_abs_logit_where_different: float  # largest |numpy logit| where the decisions differ
    run: AotRun  # the exported model's run (its interface included)
    types: dict[str, str]  # the exported model's argument/result C++ types
    model: AotModel  # the exported model, compiled
    harness: Harness


def compare_with_policy(policy: object, columns: Mapping[str, np.ndarray], work_dir: Path,
                        rt: Runtime, *, triple: str = DEFAULT_TRIPLE,
                        jobs: int = 1) -> AotComparison:
    """Export `policy` (`mlgo export`'s SavedModel, and a diagnostic one with a logit output),
    AOT-compile both as LLVM does, run them on every row of `columns` (a trace's features)
    and compare with the numpy policy: the per-call-site path `mlgo cc` uses for decisions,
    the batch forward pass for logits."""
    from pymlgo.policy.export import (
        _require_mlp,
        export_policy,
        import_tensorflow,
        write_saved_model,
    )

    mlp = _require_mlp(policy)
    names = list(mlp.vocab.features)
    n = len(np.asarray(columns[names[0]]).reshape(-1))
    decide = mlp.for_module("aot-check")
    native = np.array([decide({k: np.asarray(columns[k]).reshape(-1)[i : i + 1]
                               for k in names}) for i in range(n)], dtype=np.int64)
    native_logits = mlp.logits(mlp.vocab.matrix(columns))

    export_policy(mlp, "savedmodel", work_dir / "savedmodel", overwrite=True)
    model = aot_compile(work_dir / "savedmodel", work_dir / "aot", triple=triple,
                        tf_dir=rt.tf_dir)
    harness = build_harness(model, rt, work_dir / "aot", jobs=jobs)
    run = run_harness(harness.executable, columns, names)

    diag = work_dir / "savedmodel-logit"
    shutil.rmtree(diag, ignore_errors=True)
    write_saved_model(import_tensorflow(), mlp, diag, with_logit=True)
    diag_model = aot_compile(diag, work_dir / "aot-logit", triple=triple, tf_dir=rt.tf_dir)
    diag_run = run_harness(build_harness(diag_model, rt, work_dir / "aot-logit",
                                         jobs=jobs).executable, columns, names)
    assert diag_run.logits is not None, "the diagnostic export has a logit output"
    return AotComparison(
        call_sites=n,
        inlined=int(native.sum()),
        decisions_equal=int((run.decisions == native).sum()),
        logit_model_decisions_equal=int((diag_run.decisions == native).sum()),
        max_abs_logit_diff=float(np.max(np.abs(
            diag_run.logits.astype(np.float64) - native_logits.astype(np.float64)))),
        min_abs_logit=float(np.min(np.abs(native_logits))),
        max_abs_logit_where_different=float(np.max(
            np.abs(native_logits)[run.decisions != native], initial=0.0)),
        run=run,
        types=header_types(model.header),
        model=model,
        harness=harness,
    )
