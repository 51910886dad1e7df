"""Where a compiler sends its own inlining decision, checked by a probe compile.

With `-inliner-interactive-include-default`, clang sends the decision its -Oz heuristic
would take as one more feature, `inlining_default`; the `default` policy answers with it,
traces and behaviour cloning keep it as the label. LLVM 17 to 20 write that decision into
the wrong tensor: `MLInlineAdvisor::getAdviceImpl` indexes it with
`InlineCostFeatureIndex::NumberOfFeatures` (the count of inline-cost features, i.e. the
position of the first other feature, `callee_basic_block_count`) instead of
`FeatureIndex::NumberOfFeatures` (the appended slot). So `inlining_default` arrives as 0 at
every call site and `callee_basic_block_count` carries the decision (fixed in LLVM 21 by
llvm-project PR #141453). Nothing in the header tells the two apart, and a "never" there
looks like a legitimate answer: `--policy default` silently means `never`.

So pymlgo does not trust the header: once per compiler (cached by its identity), it
compiles a small C module three ways — plain -Oz, answering with `inlining_default`, and
answering with `callee_basic_block_count` — and takes the feature whose answers give plain
-Oz's object. Where only the displaced one does, `default` reads it there; recording
trajectories is refused (their `callee_basic_block_count` would be the decision, not the
callee's block count). Where neither does, anything that needs clang's decision is refused.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pymlgo.corpus.command import parse_cmd
from pymlgo.problems.base import CompileJob, CompileSettings, Decide, ModuleResult
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE
from pymlgo.protocol.features import FeatureMismatchError
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.elf import read_sections
from pymlgo.toolchain.files import write_atomic

# Where LLVM 17-20 put the decision: the first feature after the inline-cost ones.
DISPLACED_FEATURE = "callee_basic_block_count"
FIXED_IN_LLVM = 21
# Bump when the probe or its verdict changes: older cached verdicts are then ignored.
PROBE_VERSION = 1
PROBE_TARGET = "x86_64-linux-gnu"

# Written for this check: at -Oz clang inlines the one-line helpers and the single-use static
# function and keeps the larger helper that several callers share out of line, so the
# decisions hold both answers and `never` gives another object than -Oz.
PROBE_SOURCE = r"""
typedef unsigned long size_t;

static unsigned rotate(unsigned x, unsigned n) { return (x << n) | (x >> (32u - n)); }

static unsigned mix(unsigned h, unsigned char c) { return rotate(h ^ c, 5u) * 0x9e3779b1u; }

static size_t put_run(unsigned char *out, size_t at, unsigned char byte, size_t count) {
    while (count > 0) {
        size_t n = count > 255u ? 255u : count;
        out[at++] = (unsigned char)n;
        out[at++] = byte;
        count -= n;
        if (at > 4096u) {
            break;
        }
    }
    return at;
}

static size_t flush_tail(unsigned char *out, size_t at, const unsigned char *in, size_t n) {
    for (size_t i = 0; i < n; i++) {
        at = put_run(out, at, in[i], 1u);
    }
    return at;
}

unsigned probe_checksum(const unsigned char *data, size_t n) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h = mix(h, data[i]);
    }
    return rotate(h, 13u);
}

size_t probe_encode(unsigned char *out, const unsigned char *in, size_t n) {
    size_t at = 0, i = 0;
    while (i + 1u < n) {
        size_t run = 1;
        while (i + run < n && in[i + run] == in[i]) {
            run++;
        }
        at = put_run(out, at, in[i], run);
        i += run;
    }
    return flush_tail(out, at, in + i, n - i);
}

size_t probe_encode_pairs(unsigned char *out, const unsigned char *a, const unsigned char *b,
                          size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        at = put_run(out, at, a[i], (size_t)(b[i] & 7u) + 1u);
        at = put_run(out, at, b[i], (size_t)(a[i] & 3u) + 1u);
    }
    return at;
}
"""


class HeuristicUnavailableError(FeatureMismatchError):
    """This compiler does not send its own inlining decision where pymlgo can read it, so
    nothing that needs it (the `default` policy, traces, behaviour cloning) can run."""


@dataclass(frozen=True)
class HeuristicCheck:
    """The probe's verdict for one compiler.

    `feature`: the header feature that carries clang's decision (`inlining_default`, or
    `callee_basic_block_count` on LLVM 17-20), None if no feature reproduces plain -Oz.
    `detail`: what was measured, for error messages and the cache file.
    """

    compiler: str
    version: str
    feature: str | None
    detail: str

    @property
    def displaced(self) -> bool:
        return self.feature == DISPLACED_FEATURE


@dataclass(frozen=True)
class _AnswerWith:
    """A probe policy: answer with feature `source` (nonzero = inline). It also asks for
    `inlining_default`, so clang sends its decision during the compile."""

    source: str

    @property
    def name(self) -> str:
        return f"probe:{self.source}"

    @property
    def required_features(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((DEFAULT_FEATURE, self.source)))

    def for_module(self, module: str) -> Decide:
        source = self.source

        def decide(features: Mapping[str, np.ndarray]) -> int:
            return int(features[source].reshape(-1)[0] != 0)

        return decide


def _probe_job(compiler: Compiler, tmp: Path) -> CompileJob:
    """The probe source as a corpus module: compiled at -Oz with its bitcode embedded."""
    src, obj = tmp / "probe.c", tmp / "probe.o"
    src.write_text(PROBE_SOURCE, encoding="utf-8")
    # The plain clang driver, also inside zig: `zig cc` would run cc1 at -Os (other
    # function attributes than -Oz's) and add its own libc and CPU defaults.
    argv = [*compiler.clang_argv, "-c", f"--target={PROBE_TARGET}", "-Oz", "-ffreestanding",
            "-Xclang", "-fembed-bitcode=all", str(src), "-o", str(obj)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                         cwd=tmp)
    if res.returncode != 0:
        tail = " | ".join(res.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"the probe module did not compile: {tail}")
    sec = read_sections(obj, (".llvmbc", ".llvmcmd"))
    if not sec.get(".llvmbc") or not sec.get(".llvmcmd"):
        raise RuntimeError("the probe object has no embedded bitcode")
    return CompileJob("pymlgo-heuristic-probe", sec[".llvmbc"], parse_cmd(sec[".llvmcmd"]))


def _answers(result: ModuleResult, feature: str) -> list[int]:
    traj = result.trajectory
    if traj is None or feature not in traj.features:
        return []
    return [int(v) for v in np.asarray(traj.features[feature]).reshape(-1)]


def _same_object(a: ModuleResult, b: ModuleResult) -> bool:
    return a.error is None and b.error is None and a.sizes is not None and a.sizes == b.sizes


def probe(compiler: Compiler) -> HeuristicCheck:
    """Compile the probe module and find the feature that carries clang's decision (no
    cache; `check_heuristic` is the cached entry point)."""
    from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy

    head = {"compiler": str(compiler.path), "version": compiler.version}
    with run.private_tmpdir() as tmp:
        try:
            job = _probe_job(compiler, tmp)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            return HeuristicCheck(**head, feature=None, detail=str(exc))
    plain = compile_baseline(compiler, job)
    if plain.sizes is None:
        return HeuristicCheck(**head, feature=None,
                              detail=f"plain -Oz of the probe module failed: {plain.error}")
    notes = []
    for feature in (DEFAULT_FEATURE, DISPLACED_FEATURE):
        res = compile_with_policy(compiler, job, _AnswerWith(feature),
                                  CompileSettings(record=True), heuristic_feature=DEFAULT_FEATURE)
        answers = _answers(res, feature)
        sizes = "failed" if res.sizes is None else f"{res.sizes.allocated} B"
        notes.append(f"answering with {feature}: {sizes}, {len(answers)} decisions, "
                     f"values {sorted(set(answers))}")
        # Both answers must occur: then an answer that is not clang's decision would
        # give another object than plain -Oz (the probe module is built for that).
        if _same_object(plain, res) and {0, 1} <= set(answers) <= {0, 1}:
            detail = f"plain -Oz {plain.sizes.allocated} B; " + "; ".join(notes)
            return HeuristicCheck(**head, feature=feature, detail=detail)
    detail = f"plain -Oz {plain.sizes.allocated} B; " + "; ".join(notes)
    return HeuristicCheck(**head, feature=None, detail=detail)


def _cache_file(compiler: Compiler) -> Path:
    from pymlgo.corpus.demo import cache_root

    key = hashlib.sha256(f"{PROBE_VERSION}\0{compiler.identity}".encode()).hexdigest()[:24]
    return cache_root() / "heuristic-check" / f"{key}.json"


@functools.lru_cache(maxsize=16)
def _check_by_identity(compiler: Compiler, identity: str) -> HeuristicCheck:
    path = _cache_file(compiler)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("identity") == identity and doc.get("probe_version") == PROBE_VERSION:
            return HeuristicCheck(**doc["check"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no verdict yet (or an unreadable one): probe again
    check = probe(compiler)
    doc = {"identity": identity, "probe_version": PROBE_VERSION, "check": asdict(check)}
    with contextlib.suppress(OSError):  # a read-only cache only costs a probe per process
        write_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())
    return check


def check_heuristic(compiler: Compiler) -> HeuristicCheck:
    """The probe's verdict for `compiler`: memoized per process, cached on disk per compiler
    identity (path, version, size, mtime) in $MLGO_CACHE_DIR/heuristic-check/."""
    return _check_by_identity(compiler, compiler.identity)


def _name(compiler: Compiler) -> str:
    return f"clang {compiler.version} ({compiler.path})"


def heuristic_feature(compiler: Compiler, *, required: Sequence[str], record: bool) -> str:
    """The header feature to read clang's own decision from, for a compile whose policy
    reads `required` and that records its trajectory if `record`.

    Raises HeuristicUnavailableError when the compile cannot be done right on this
    compiler: clang's decision is found nowhere, or it displaces a feature that the policy
    reads or that the recorded trajectory would keep.
    """
    check = check_heuristic(compiler)
    if check.feature == DEFAULT_FEATURE:
        return DEFAULT_FEATURE
    bug = (f"LLVM 17-20 send it in place of {DISPLACED_FEATURE} and leave "
           f"{DEFAULT_FEATURE} 0; fixed in LLVM {FIXED_IN_LLVM}, llvm-project PR #141453")
    fix = (f"use clang >= {FIXED_IN_LLVM} or the bundled clang (drop --clang and unset "
           "$MLGO_CLANG)")
    if check.feature == DISPLACED_FEATURE:
        if record:
            raise HeuristicUnavailableError(
                f"{_name(compiler)} sends its own inlining decision in the wrong feature "
                f"({bug}), so a recorded trajectory (trace, search, training) would hold "
                f"that decision as {DISPLACED_FEATURE}; {fix}. `--policy default` and "
                "evaluating other policies work on this compiler")
        if DISPLACED_FEATURE in required:
            raise HeuristicUnavailableError(
                f"{_name(compiler)} sends its own inlining decision in place of "
                f"{DISPLACED_FEATURE} ({bug}); this policy reads both; {fix}")
        return DISPLACED_FEATURE
    raise HeuristicUnavailableError(
        f"{_name(compiler)}: its own inlining decision ({DEFAULT_FEATURE}) cannot be trusted "
        f"— answering with it does not reproduce plain -Oz on pymlgo's probe module "
        f"({check.detail}); {fix}")
