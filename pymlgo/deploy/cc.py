"""`mlgo cc` / `mlgo c++`: a drop-in C/C++ compiler whose inliner asks a policy.

`CC="mlgo cc" CXX="mlgo c++" make` builds a project with the bundled clang (zig's driver,
with its own libc headers) or with `--clang PATH` / `$MLGO_CLANG`. A command that compiles
sources while optimizing for size (the last `-O` flag is `-Oz` or `-Os`) gets the inliner's
channel flags, and this process answers every inlining decision with the policy
(`--mlgo-policy P`, `$MLGO_POLICY`, default `pretrained:inlining-oz`). Every other command
(links, `-O2`, `-E`, `--version`, ...) is exec'ed unchanged, so it costs one Python start;
the native launcher (`launcher.c`, `mlgo cc --mlgo-launcher`) makes the same decisions
without one, and hands this module whatever it cannot do itself.

Facts this relies on (see DESIGN.md):
- `zig cc` caches objects keyed on its arguments; a hit runs no clang, so the channel is
  never opened. The host therefore races the FIFO open against the compiler's exit
  (`serve_channel(compiler_alive=...)`). The FIFOs live in a fresh directory, so the
  channel path in the arguments is new every time and a cached object compiled under
  another policy is never reused.
- `zig cc -Oz` hands `-Os` to cc1 (zig's ReleaseSmall). With the bundled driver and `-Oz`,
  `-Xclang -Oz` is appended so cc1 really runs at -Oz, the level the policies are trained
  at (cc1 takes the last `-O`). Nothing else about the user's flags changes (no target or
  CPU is added).
- One driver command may run cc1 several times (several sources): each run opens the same
  channel again, so sessions are served until the compiler exits.

The compiler is started before anything else happens. The policy answers from
`cc_server`'s background process, which a build starts once; without one (MLGO_CC_SERVER=0,
or none can be had), this process imports numpy and loads the policy while clang runs its
front end. clang's own decision (`inlining_default`) is asked for only if the policy reads
it: it costs clang another inline-cost analysis per call site.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pymlgo.deploy import cc_server, guard, lto
from pymlgo.deploy.answer import ServeStats, serve_sessions
from pymlgo.problems.inlining.builtin_specs import DEFAULT_FEATURE, builtin
from pymlgo.toolchain.language import source_language
from pymlgo.toolchain.lld import LinkCommandError, lld_command
from pymlgo.toolchain.opt_level import level_of

POLICY_ENV, LOG_ENV, TIMEOUT_ENV = "MLGO_POLICY", "MLGO_CC_LOG", "MLGO_CC_TIMEOUT"
DEFAULT_POLICY = "pretrained:inlining-oz"
SIZE_LEVELS = ("-Oz", "-Os")
# Kept equal to `problems.inlining.compile.channel_flags` (a test checks it); spelled out
# here so building the command needs no numpy import before the compiler starts.
SIZE_INCREASE_THRESHOLD = 10
DEFAULT_TIMEOUT_S = 24 * 3600.0  # per session; a dead compiler is noticed at once anyway
# = toolchain.size.SIZE_METRICS (a test checks it): no ELF reader imported to parse flags
GUARD_METRICS = ("allocated", "text", "llvm-size")

SOURCE_SUFFIXES = frozenset(
    {".c", ".i", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CC", ".CPP", ".ii",
     ".m", ".mm", ".M", ".mi", ".mii", ".bc", ".ll"}
)
# Options after which no code is generated, so the inliner never runs.
_NO_CODEGEN = frozenset(
    {"-E", "-M", "-MM", "-fsyntax-only", "-###", "--version", "-dumpversion",
     "-dumpmachine", "--help", "-help", "-print-search-dirs", "-print-libgcc-file-name"}
)
# Options whose value is the next argument (so the value is not a flag or an input).
_TAKES_VALUE = frozenset(
    {"-o", "-x", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote",
     "-idirafter", "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-isysroot",
     "--sysroot", "-target", "--target", "-MF", "-MT", "-MQ", "-L", "-l", "-T", "-u", "-e",
     "-z", "-Xclang", "-mllvm", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-arch",
     "-F", "-framework", "-dependency-file", "-MJ", "-ivfsoverlay", "-resource-dir",
     "-gcc-toolchain", "--gcc-toolchain", "-Xarch_device", "-Xarch_host",
     "-Xopenmp-target", "-working-directory", "-ccc-install-dir"}
)


class CCError(RuntimeError):
    """`mlgo cc` cannot do what was asked; the message says why."""


@dataclass(frozen=True)
class Invocation:
    """What `mlgo cc` makes of its arguments."""

    tool: str  # "cc" or "c++"
    compiler_args: tuple[str, ...]  # the user's compiler arguments, untouched
    policy: str
    clang: str | None  # --clang / $MLGO_CLANG, None: the bundled zig
    opt_level: str | None  # the last -O flag, e.g. "-Oz"; None if none
    sources: tuple[str, ...]
    codegen: bool  # False when an option stops before code generation (-E, -M, ...)
    env: dict[str, str] = field(default_factory=dict, compare=False)
    source_at: tuple[int, ...] = ()  # where the sources are in compiler_args
    guard: bool = False  # --mlgo-guard / $MLGO_GUARD: keep the smaller of policy and plain
    guard_metric: str = "allocated"  # --mlgo-guard-metric / $MLGO_GUARD_METRIC
    inputs: tuple[str, ...] = ()  # file operands that are not sources (objects, archives)
    # each source's language ("c", "c++"; None: another), as the driver compiles it
    languages: tuple[str | None, ...] = ()

    @property
    def uses_policy(self) -> bool:
        return self.opt_level in SIZE_LEVELS and bool(self.sources) and self.codegen


def parse_args(tool: str, argv: Sequence[str], env: dict[str, str]) -> Invocation:
    """Split mlgo's own options (`--mlgo-policy`, `--clang`, `--mlgo-guard`,
    `--mlgo-guard-metric`) from the compiler's."""
    policy = env.get(POLICY_ENV) or DEFAULT_POLICY
    clang = env.get("MLGO_CLANG") or None
    try:
        guarded = guard.enabled(env.get(guard.GUARD_ENV))
    except ValueError as exc:
        raise CCError(str(exc)) from None
    metric = env.get(guard.METRIC_ENV) or "allocated"
    args: list[str] = []
    level: str | None = None
    sources: list[str] = []
    source_at: list[int] = []
    inputs: list[str] = []
    codegen = True
    language_given = False
    x_lang: str | None = None  # the -x in force
    languages: list[str | None] = []
    it = iter(argv)
    for arg in it:
        if arg == "--mlgo-guard":
            guarded = True
            continue
        if arg in ("--mlgo-policy", "--clang", "--mlgo-guard-metric"):
            value = next(it, None)
            if value is None:
                raise CCError(f"{arg} needs a value")
            arg = f"{arg}={value}"
        if arg.startswith("--mlgo-policy="):
            policy = arg.split("=", 1)[1]
            continue
        if arg.startswith("--clang="):
            clang = arg.split("=", 1)[1]
            continue
        if arg.startswith("--mlgo-guard-metric="):
            metric = arg.split("=", 1)[1]
            continue
        args.append(arg)
        if arg in _TAKES_VALUE:
            value = next(it, None)
            if value is not None:
                args.append(value)
                if arg == "-x":
                    language_given, x_lang = value != "none", value
            continue
        if arg.startswith("-x") and len(arg) > 2:
            language_given, x_lang = arg[2:] != "none", arg[2:]
        if arg in _NO_CODEGEN:
            codegen = False
        elif (lvl := level_of(arg)) is not None:
            level = lvl
        elif _is_source(arg, language_given):
            sources.append(arg)
            source_at.append(len(args) - 1)
            languages.append(source_language(arg, x_lang))
        elif not arg.startswith("-"):
            inputs.append(arg)
    if guarded and metric not in GUARD_METRICS:
        raise CCError(f"unknown size metric {metric!r} for the guard: expected one of "
                      f"{', '.join(GUARD_METRICS)}")
    return Invocation(tool, tuple(args), policy, clang, level, tuple(sources), codegen, env,
                      tuple(source_at), guarded, metric, tuple(inputs), tuple(languages))


def _is_source(arg: str, language_given: bool) -> bool:
    if arg == "-":  # stdin: a source only with an explicit -x LANG
        return language_given
    return not arg.startswith("-") and (Path(arg).suffix in SOURCE_SUFFIXES or language_given)


def driver_argv(inv: Invocation) -> list[str]:
    """The compiler driver prefix: bundled `zig cc` / `zig c++`, or the chosen clang."""
    if inv.clang is None:
        from pymlgo.toolchain.compiler import bundled_zig  # no version query: zig is pinned

        return [str(bundled_zig()), inv.tool]
    from pymlgo.toolchain.compiler import find_compiler

    compiler = find_compiler(inv.clang)
    return list(compiler.cc_argv if inv.tool == "cc" else compiler.cxx_argv)


def compiler_env(inv: Invocation, driver: Sequence[str]) -> dict[str, str]:
    """The compiler's environment. For a native target, zig's driver finds the system libc
    by running `$CC -E -Wp,-v ...` and `$CC -print-file-name=...`: under make that is
    `mlgo cc` again, three Python starts per compile. Point it at zig's own driver, which
    answers those exactly as `mlgo cc` would (they pass through unchanged)."""
    env = dict(inv.env)
    if inv.clang is None:
        env["CC"] = shlex.join([driver[0], "cc"])
        env["CXX"] = shlex.join([driver[0], "c++"])
    return env


def channel_args(base: Path, *, include_default: bool = True) -> list[str]:
    default = ["-mllvm", "-inliner-interactive-include-default"] if include_default else []
    return [
        "-mllvm", "-enable-ml-inliner=release",
        "-mllvm", f"-inliner-interactive-channel-base={base}",
        *default,
        "-mllvm", f"-ml-advisor-size-increase-threshold={SIZE_INCREASE_THRESHOLD}",
    ]  # fmt: skip


def pretrained_dir(name: str) -> Path:
    """Where `pretrained:NAME` ships (equal to `policy.store.pretrained_root() / NAME`, which
    a test checks; spelled out here because importing pymlgo.policy imports numpy)."""
    return Path(__file__).resolve().parents[1] / "policy" / "pretrained" / name


def saved_policy_dir(spec: str) -> Path | None:
    """The directory of a saved or pretrained policy spec; None for a built-in one."""
    if builtin(spec) is not None:
        return None
    if spec.startswith("pretrained:"):
        return pretrained_dir(spec.removeprefix("pretrained:"))
    return Path(spec)


def policy_reads_default(spec: str) -> bool:
    """Whether policy `spec` reads clang's own decision, `inlining_default`. Sending it costs
    the compiler a third inline-cost analysis per call site (besides the cost estimate and
    the cost features), so it is asked for only when the policy reads it. Decided from the
    spec and a saved policy's policy.json, without numpy; when in doubt, it is asked for."""
    kind = builtin(spec)
    if kind is not None:
        return kind.reads_default
    path = saved_policy_dir(spec)
    assert path is not None  # a built-in was answered above
    try:
        doc = json.loads((path / "policy.json").read_text())
        # a window (policy.json 1.1) gives clang's decision outside it
        return bool(doc.get("window")) or any(f["name"] == DEFAULT_FEATURE
                                              for f in doc["features"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # loading the policy will say what is wrong with it


def policy_languages(spec: str) -> tuple[str, ...]:
    """The languages policy `spec` decides for (policy.json 1.2's `languages`); (): every
    one. Read from policy.json without numpy; a file that cannot be read gives (), and
    loading the policy says what is wrong with it."""
    path = saved_policy_dir(spec)
    if path is None:
        return ()
    try:
        languages = json.loads((path / "policy.json").read_text()).get("languages") or ()
        return tuple(str(x) for x in languages)
    except (OSError, ValueError, AttributeError, TypeError):
        return ()


def left_to_clang(inv: Invocation) -> str | None:
    """Why this compile gets clang's own decisions, plain -Oz's bytes, because the policy
    does not decide its language; None: the policy decides it. A command that compiles
    sources of several languages is left to clang unless the policy decides them all."""
    wanted = policy_languages(inv.policy)
    if not wanted:
        return None
    other = sorted({lang or "another language" for lang in inv.languages} - set(wanted))
    if not other:
        return None
    return (f"the policy decides {', '.join(wanted)} only, and leaves {', '.join(other)} to "
            f"clang's own decisions")


IR2VEC_FILE = "ir2vec.json"  # = policy.store.IR2VEC_FILE


def policy_ir2vec_args(spec: str) -> list[str]:
    """The IR2Vec flags of a saved policy that carries its vocabulary (policy.json lists
    ir2vec.json): clang then embeds with that very file. Both flags are needed (see
    `ir2vec.vocab_file.clang_flags`, kept equal by a test); read without numpy."""
    path = saved_policy_dir(spec)
    if path is None:
        return []
    try:
        files = json.loads((path / "policy.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # loading the policy will say what is wrong with it
    if not isinstance(files, dict) or IR2VEC_FILE not in files:
        return []
    vocab = (path / IR2VEC_FILE).absolute()
    return ["-mllvm", f"-ml-inliner-ir2vec-vocab-file={vocab}",
            "-mllvm", f"-ir2vec-vocab-path={vocab}"]


def level_args(inv: Invocation) -> list[str]:
    """What the bundled driver needs to run cc1 at the level asked for (zig cc alone runs
    cc1 at -Os for -Oz); nothing for another clang."""
    return ["-Xclang", "-Oz"] if inv.clang is None and inv.opt_level == "-Oz" else []


def policy_command(inv: Invocation, driver: Sequence[str], base: Path) -> list[str]:
    """The full compiler command when the policy answers the inliner."""
    channel = channel_args(base, include_default=policy_reads_default(inv.policy))
    return [*driver, *inv.compiler_args, *level_args(inv), *channel,
            *policy_ir2vec_args(inv.policy)]


def reference_command(inv: Invocation, driver: Sequence[str]) -> list[str]:
    """What `mlgo cc` with policy `default` must equal byte for byte: the same command
    at the same cc1 level, without the channel."""
    return [*driver, *inv.compiler_args, *level_args(inv)]


def _serve(base: Path, proc: subprocess.Popen[bytes], policy_spec: str, module: str,
           timeout: float) -> ServeStats:
    """Load the policy in this process and answer every channel session of `proc`."""
    # Imported only now: the compiler is already running its front end meanwhile.
    from pymlgo.policy.store import load_policy

    return serve_sessions(base, load_policy(policy_spec), module, timeout,
                          alive=lambda: proc.poll() is None)


def object_path(inv: Invocation) -> str | None:
    """The object a single-source `-c` compile writes (`-o X`, or the source's stem + .o in
    the working directory); None for links and multi-source commands."""
    args = inv.compiler_args
    if "-c" not in args or len(inv.sources) != 1:
        return None
    return guard.output_option(args) or Path(inv.sources[0]).with_suffix(".o").name


def _object_record(inv: Invocation) -> dict[str, object]:
    """The log's `object` and `object_bytes` (by group and by size metric, as
    `toolchain.size` counts them) of the object a compile wrote, when there is one."""
    path = object_path(inv)
    if path is None:
        return {}
    from pymlgo.toolchain.elf import NotELFError
    from pymlgo.toolchain.size import object_size

    try:
        sizes = object_size(path)
    except (OSError, NotELFError):  # -o /dev/null, a non-ELF target: nothing to measure
        return {"object": path}
    return {"object": path, "object_bytes": {**sizes.groups(), **sizes.metrics()}}


def _output_record(path: str) -> dict[str, object]:
    """The log's `output` and `output_bytes` of a linked program, measured as objects are."""
    from pymlgo.toolchain.elf import NotELFError
    from pymlgo.toolchain.size import object_size

    try:
        sizes = object_size(path)
    except (OSError, NotELFError):
        return {"output": path}
    return {"output": path, "output_bytes": {**sizes.groups(), **sizes.metrics()}}


def _log(inv: Invocation, stats: ServeStats | None, returncode: int, seconds: float,
         guarded: dict[str, object] | None = None, lto: dict[str, object] | None = None,
         output: str | None = None, reason: str | None = None) -> None:
    path = inv.env.get(LOG_ENV)
    if not path:
        return
    counted = stats is None or stats.counted
    rec = {"cwd": os.getcwd(), "args": list(inv.compiler_args), "policy": inv.policy,
           "opt_level": inv.opt_level, "served": stats is not None,
           "served_by": stats.served_by if stats else None,
           "sessions": (stats.sessions if stats else 0) if counted else None,
           "decisions": (stats.decisions if stats else 0) if counted else None,
           "inlined": (stats.inlined if stats else 0) if counted else None,
           "returncode": returncode, "seconds": round(seconds, 4)}
    if reason is not None:
        rec["reason"] = reason
    if guarded is not None:
        rec["guard"] = guarded
    if lto is not None:
        rec["lto"] = lto
    if returncode == 0:
        rec.update(_object_record(inv) if output is None else _output_record(output))
    # One short O_APPEND write per line: parallel make jobs do not interleave lines.
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _untrusted_default(inv: Invocation) -> str | None:
    """Why clang's own decision cannot be given to this policy on `--clang`'s compiler
    (LLVM 17-20 send it in another feature's place), or None. The bundled clang, and
    policies that do not read the decision, are never probed."""
    if inv.clang is None or not policy_reads_default(inv.policy):
        return None
    from pymlgo.problems.inlining.heuristic_check import check_heuristic
    from pymlgo.toolchain.compiler import find_compiler

    check = check_heuristic(find_compiler(inv.clang))
    if check.feature == DEFAULT_FEATURE:
        return None
    return (f"{inv.clang} does not send its own inlining decision as {DEFAULT_FEATURE} "
            "(LLVM 17-20 put it in another feature's place; fixed in LLVM 21, llvm-project "
            f"PR #141453), and policy {inv.policy} reads it")


def _run_unserved(inv: Invocation, command: list[str], env: dict[str, str],
                  started: float, lto_record: dict[str, object] | None = None,
                  reason: str | None = None) -> int:
    """Run `command` with no policy: exec'ed (no wrapper left behind), or run and logged
    (with `reason`, why a compile the policy could have answered was not)."""
    if inv.env.get(LOG_ENV):
        proc = subprocess.run(command, env=env, check=False)
        _log(inv, None, proc.returncode, time.monotonic() - started, lto=lto_record,
             output=None if lto_record is None else link_output(inv), reason=reason)
        return proc.returncode
    os.execve(command[0], command, env)


def link_output(inv: Invocation) -> str:
    return guard.output_option(inv.compiler_args) or "a.out"


def _warn(inv: Invocation, message: str) -> None:
    print(f"mlgo {inv.tool}: warning: {message}", file=sys.stderr)


def _lto_unserved(inv: Invocation, link: lto.LTOLink) -> tuple[str, bool] | None:
    """Why the link-time inliner of this LTO link is not served, and whether to warn (a link
    at a level no policy applies to, like -O2, is as silent as its compiles); None: serve."""
    if inv.opt_level not in SIZE_LEVELS:
        if inv.opt_level is not None:
            return f"the link is at {inv.opt_level}, not -Oz/-Os", False
        return ("the link command has no -Oz/-Os (give the link the compiles' -Oz to have "
                "the policy answer it)", True)
    if inv.clang is not None:
        return ("only the bundled toolchain's lld is served at link time, not --clang's "
                "linker", True)
    if not link.thin:
        return ("full LTO: LLVM builds the merged module's inliner with its default advisor "
                "whatever -enable-ml-inliner says, so no policy can answer it (use "
                "-flto=thin to have the link-time inliner served)", True)
    if _untrusted_default(inv) is not None:
        return "the compiler does not send its own decision where the policy reads it", True
    languages = policy_languages(inv.policy)
    if languages:
        return (f"the policy decides {', '.join(languages)} only, and a link's modules do "
                f"not say their language", True)
    return None


def _run_lto_link(inv: Invocation, link: lto.LTOLink, driver: list[str],
                  env: dict[str, str], started: float) -> int:
    """An LTO link: the ThinLTO backends' inliner answered by the policy through lld, one
    backend at a time; or, where that cannot be, the stock link and a warning saying so."""
    record = link.record()
    unserved = _lto_unserved(inv, link)
    if unserved is not None:
        reason, loud = unserved
        if loud:
            _warn(inv, f"the link-time inliner of this LTO link ({link.mode}) is the stock "
                       f"one, not {inv.policy}: {reason}")
        return _run_unserved(inv, [*driver, *inv.compiler_args], env, started,
                             {**record, "served": False, "reason": reason})
    timeout = float(inv.env.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    tmp = Path(tempfile.mkdtemp(prefix="mlgo-cc-"))
    try:
        output = link_output(inv)
        try:
            lld = lld_command(driver, inv.compiler_args, output, env, tmp)
        except (LinkCommandError, subprocess.TimeoutExpired) as exc:
            reason = f"the linker's command could not be had from zig's driver: {exc}"
            _warn(inv, f"the link-time inliner of this LTO link is the stock one: {reason}")
            return _run_unserved(inv, [*driver, *inv.compiler_args], env, started,
                                 {**record, "served": False, "reason": reason})
        if link.full:
            _warn(inv, f"{link.full} full-LTO module(s) in this link: their merged module's "
                       "inliner is the stock one (LLVM gives it no advisor choice); the "
                       f"{link.thin} ThinLTO module(s) are served")
        base = tmp / "channel"
        os.mkfifo(f"{base}.in", 0o600)
        os.mkfifo(f"{base}.out", 0o600)
        command = [*lld, *lto.channel_args(base, include_default=policy_reads_default(
            inv.policy), size_increase_threshold=SIZE_INCREASE_THRESHOLD),
                   *policy_ir2vec_args(inv.policy)]  # lld takes -mllvm as clang does
        stats, returncode = _run_served(inv, command, env, base, timeout, output)
        _log(inv, stats, returncode, time.monotonic() - started,
             lto={**record, "served": True, "thinlto_jobs": 1}, output=output)
        return returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_served(inv: Invocation, command: list[str], env: dict[str, str], base: Path,
                timeout: float, module: str) -> tuple[ServeStats, int]:
    """Run `command` with the policy answering every session of its channel at `base` (the
    policy server's, else this process's); its stats and exit code."""
    # Its own process group: zig's driver runs clang as a child, which must die with
    # it if the policy fails (it would otherwise wait forever to open the channel).
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        stats = None
        if _use_server(inv.env):
            try:
                stats = _serve_by_server(inv, base, proc, timeout, module)
            except cc_server.ServerLost:
                # It answered part of this compile, then went away: start over, here.
                _kill(proc)
                proc = subprocess.Popen(command, env=env, start_new_session=True)
        if stats is None:
            try:
                stats = _serve(base, proc, inv.policy, module, timeout)
            except Exception as exc:
                _kill(proc)
                raise CCError(f"the policy could not answer the compiler: {exc}") from exc
        return stats, proc.wait()
    finally:
        if proc.returncode is None:
            _kill(proc)


def run(inv: Invocation) -> int:
    """Compile as asked; returns the compiler's exit code."""
    started = time.monotonic()
    driver = driver_argv(inv)
    env = compiler_env(inv, driver)
    if not inv.uses_policy:
        link = _lto_link(inv)
        if link is not None:
            return _run_lto_link(inv, link, driver, env, started)
        return _run_unserved(inv, [*driver, *inv.compiler_args], env, started)
    left = left_to_clang(inv)
    if left is not None:
        # clang's own decisions are plain -Oz's bytes: no channel needed
        return _run_unserved(inv, reference_command(inv, driver), env, started, reason=left)
    untrusted = _untrusted_default(inv)
    if untrusted is not None:
        # The policy would read a decision this compiler does not send where it says: the
        # honest compile is the plain one (what `default` must equal anyway).
        print(f"mlgo {inv.tool}: warning: {untrusted}; compiling without the policy",
              file=sys.stderr)
        return _run_unserved(inv, reference_command(inv, driver), env, started)
    timeout = float(inv.env.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    # make and friends stop jobs with SIGTERM: unwind, so the compiler group is killed too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    lto_record = _compile_and_link_lto(inv)
    tmp = Path(tempfile.mkdtemp(prefix="mlgo-cc-"))
    plain: guard.PlainCompiles | None = None
    try:
        base = tmp / "channel"
        os.mkfifo(f"{base}.in", 0o600)
        os.mkfifo(f"{base}.out", 0o600)
        command = policy_command(inv, driver, base)
        plan = _guard_plan(inv, driver, tmp) if inv.guard else None
        if isinstance(plan, guard.Plan):
            plain = guard.PlainCompiles(plan.commands, guard.plain_env(env))
            if guard.parallel():
                plain.start()
        stats, returncode = _run_served(inv, command, env, base, timeout, inv.sources[0])
        guarded = _guard_outcome(inv, plan, plain, returncode)
        _log(inv, stats, returncode, time.monotonic() - started, guarded, lto_record)
        return returncode
    finally:
        if plain is not None:
            plain.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def _lto_link(inv: Invocation) -> lto.LTOLink | None:
    """The bitcode a link-only command gives the linker; None for anything else."""
    if not (inv.codegen and inv.inputs and lto.is_link(inv.compiler_args)):
        return None
    return lto.lto_link(inv.inputs, inv.compiler_args)


def _compile_and_link_lto(inv: Invocation) -> dict[str, object] | None:
    """A policy compile that also links with LTO: its compiles are served, its link-time
    inliner is not (the bitcode exists only inside the driver's run). Warned, and logged."""
    kind = lto.lto_flag(inv.compiler_args)
    if kind is None or not lto.is_link(inv.compiler_args):
        return None
    reason = ("compiled and linked in one command: compile with -c and link separately to "
              "have the link-time inliner served")
    _warn(inv, f"the link-time inliner of this LTO link ({kind}) is the stock one, not "
               f"{inv.policy}: {reason}")
    return {"mode": kind, "served": False, "reason": reason}


def _guard_plan(inv: Invocation, driver: Sequence[str], tmp: Path) -> guard.Plan | str:
    scratch = tmp / "plain"
    scratch.mkdir()
    # zig's driver merges the objects of a multi-source -c command into one (ld -r)
    return guard.plan(driver, inv.compiler_args, level_args(inv), inv.source_at,
                      merged=inv.clang is None, scratch=scratch)


def _guard_outcome(inv: Invocation, plan: guard.Plan | str | None,
                   plain: guard.PlainCompiles | None, returncode: int) -> dict[str, object] | None:
    """Finish the guard once the policy compile is done: keep the smaller objects; what
    happened, for the log."""
    if plan is None:
        return None
    if isinstance(plan, str) or plain is None:
        return {"applied": False, "reason": plan}
    if returncode != 0:  # the user sees the policy compile's own error; nothing to weigh
        plain.kill()
        return {"applied": False, "reason": "the policy compile failed"}
    failure = plain.wait()
    if failure is not None:
        code, output = failure
        return {"applied": False, "kept": "policy",
                "reason": f"the plain compile failed with exit code {code}",
                "plain_output": output}
    return {"applied": True, "metric": inv.guard_metric,
            "objects": guard.keep_smaller(plan, inv.guard_metric)}


def _use_server(env: dict[str, str]) -> bool:
    try:
        return cc_server.enabled(env)
    except ValueError as exc:
        raise CCError(str(exc)) from None


def _serve_by_server(inv: Invocation, base: Path, proc: subprocess.Popen[bytes],
                     timeout: float, module: str) -> ServeStats | None:
    """The policy server answers the compile; None if no server took it (nothing was
    touched: serve it here). CCError if the server reported an error."""
    try:
        sock = cc_server.connect(inv.policy, saved_policy_dir(inv.policy), inv.env)
        counts = cc_server.serve_remote(sock, base, module, proc, timeout)
    except cc_server.ServerUnavailable:
        return None
    except ValueError as exc:  # a bad MLGO_CC_SERVER_IDLE
        raise CCError(str(exc)) from None
    except cc_server.ServerRefused as exc:
        _kill(proc)
        raise CCError(f"the policy could not answer the compiler: {exc}") from None
    if counts is None:
        return ServeStats(served_by="server", counted=False)
    return ServeStats(**counts, served_by="server")


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the compiler and whatever it started (its process group), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


USAGE = """\
usage: mlgo cc|c++ [--mlgo-policy P] [--clang PATH] [--mlgo-guard] COMPILER-ARGS...

A drop-in C/C++ compiler: CC="mlgo cc" CXX="mlgo c++" make. Compiles with the bundled clang
(zig cc / zig c++) or --clang PATH ($MLGO_CLANG). When a command compiles sources at -Oz or
-Os (the last -O flag), clang's inliner asks POLICY for every decision through LLVM's
interactive channel; every other command runs unchanged.

  --mlgo-policy P  default, never, always, random:P[:SEED], shift:DOWN[:UP[:USERS[:MAX]]]
                   (clang's threshold moved), pretrained:NAME or a saved policy directory
                   ($MLGO_POLICY; default: pretrained:inlining-oz)
  --clang PATH     a clang >= 17 instead of the bundled one ($MLGO_CLANG)
  --mlgo-guard     ($MLGO_GUARD=1) also compile each policy compile plainly (no policy, same
                   flags) and keep the smaller object, so no object is ever larger than
                   plain -Oz/-Os; a tie keeps the plain one. Applies to -c compiles.
  --mlgo-launcher  print the command of the native launcher (built with the bundled zig on
                   first use): CC="$(mlgo cc --mlgo-launcher)" runs no Python per compile
                   while a policy server runs (see the README)
  --mlgo-guard-metric M  what "smaller" counts ($MLGO_GUARD_METRIC): allocated (default:
                   every allocated section with contents), text, llvm-size

The first compile that needs a policy starts a policy server for it (a background
process that loads the policy once and answers the compiles of the whole build; it exits
after MLGO_CC_SERVER_IDLE seconds without work, default 60). MLGO_CC_SERVER=0 makes every
compile load the policy itself instead (slower; the objects are the same).

Environment: MLGO_CC_LOG=FILE appends one JSON line per command (decisions served, by
whom, exit code, the guard's choice and both sizes); MLGO_CC_TIMEOUT=S bounds one channel
session (default: 86400); MLGO_RUNTIME_DIR holds the servers' sockets (default:
$XDG_RUNTIME_DIR/pymlgo).
With the bundled driver, -Oz adds -Xclang -Oz: zig cc alone runs cc1 at -Os.
"""


def _print_launcher(tool: str) -> int:
    """`--mlgo-launcher`: the command a build should use, the native launcher if it can be
    had (built on first use), else this Python path (saying why)."""
    from pymlgo.deploy.launcher import command

    cmd, why_not = command(tool)
    if why_not is not None:
        print(f"mlgo {tool}: no native launcher ({why_not}); use the Python path",
              file=sys.stderr)
    print(shlex.join(cmd))
    return 0


def _launcher_log(tool: str, record: str, argv: Sequence[str]) -> int:
    """The native launcher's MLGO_CC_LOG line for a compile it had served (it measures no
    objects itself); exits with the compile's exit code."""
    done = json.loads(record)
    inv = parse_args(tool, argv, dict(os.environ))
    counts = done.get("counts")
    stats = ServeStats(**{k: int(counts[k]) for k in ("sessions", "decisions", "inlined")},
                       served_by="launcher") if counts else ServeStats(served_by="launcher",
                                                                       counted=False)
    code = int(done["returncode"])
    _log(inv, stats, code, float(done["seconds"]))
    return code


def main(tool: str, argv: Sequence[str]) -> int:
    if tool not in ("cc", "c++"):
        raise ValueError(f"tool must be cc or c++, not {tool!r}")
    if not argv or list(argv) in (["--help"], ["-h"], ["--mlgo-help"]):
        print(USAGE, end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if list(argv) == ["--mlgo-launcher"]:
        return _print_launcher(tool)
    if argv[0] == "--mlgo-launcher-log" and len(argv) > 1:
        return _launcher_log(tool, argv[1], argv[2:])
    try:
        inv = parse_args(tool, argv, dict(os.environ))
        return run(inv)
    except CCError as exc:
        print(f"mlgo {tool}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a compiler wrapper must say what failed, not dump a trace
        from pymlgo.policy.store import PolicyLoadError
        from pymlgo.toolchain.compiler import CompilerError

        if isinstance(exc, PolicyLoadError | CompilerError | OSError):
            print(f"mlgo {tool}: {exc}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        return 130
