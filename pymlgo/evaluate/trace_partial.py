"""A trace's partial directory: what makes a stopped `trace_corpus` run resumable.

`OUTPUT_DIR.partial/` (next to the output) holds
- `identity.json`: what decides the logs' bytes (policy, compiler, size metric, flag edits,
  problem options). A run of another identity refuses the directory.
- `journal.jsonl`: one line per finished module, appended and flushed as its result
  arrives: its `sizes.csv` row and a digest of its inputs (command and bitcode), so a
  module whose bitcode changed since is compiled again.
- `trace/`: the logs written so far, each atomically; it becomes OUTPUT_DIR once complete.
- `lock`: held (flock) by the run working in the directory, so two runs never share it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pickle
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from pymlgo.problems.base import Policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic
from pymlgo.workers.protocol import WorkSpec

PARTIAL_SUFFIX = ".partial"
PARTIAL_VERSION = 1
IDENTITY_FILE, JOURNAL_FILE, LOCK_FILE, CONTENT_DIR = (
    "identity.json", "journal.jsonl", "lock", "trace")


class PartialTraceError(ValueError):
    """A partial directory that this run cannot resume (another identity, or in use)."""


def partial_dir(output_dir: Path) -> Path:
    return output_dir.with_name(output_dir.name + PARTIAL_SUFFIX)


def policy_digest(policy: Policy) -> str:
    """A digest of what decides `policy`'s answers (not its display name).

    A saved network by its weights' and vocab's canonical bytes, sampling and seed, and its
    IR2Vec vocabulary's bytes; any other policy by its pickle (workers receive it pickled,
    so it pickles; built-ins are small frozen dataclasses whose pickle is their fields)."""
    from pymlgo.policy.inlining import InliningPolicy

    h = hashlib.sha256()
    if isinstance(policy, InliningPolicy):
        from pymlgo.policy.store import weights_bytes
        from pymlgo.policy.vocab import dumps_vocab

        h.update(weights_bytes(policy.params))
        h.update(dumps_vocab(policy.vocab).encode())
        h.update(json.dumps([list(policy.hidden), policy.version, policy.sample,
                             policy.seed]).encode())
        if policy.ir2vec_vocab is not None:
            h.update(Path(policy.ir2vec_vocab).read_bytes())
        return h.hexdigest()
    # The display name is left out: `./p` and `p` are the same policy.
    if dataclasses.is_dataclass(policy) and any(
            f.name == "name" for f in dataclasses.fields(policy)):
        policy = dataclasses.replace(policy, name="")  # type: ignore[type-var]
    h.update(f"{type(policy).__module__}.{type(policy).__qualname__}\0".encode())
    try:
        h.update(pickle.dumps(policy, protocol=4))
    except (pickle.PicklingError, TypeError, AttributeError):
        # Only an in-process executor can run it; its repr is the best identity there is
        # (one holding an object address never matches: such a run starts over).
        h.update(repr(policy).encode())
    return h.hexdigest()


def _options_identity(options: Any) -> Any:
    """The problem options as they bear on the logs: an IR2Vec vocabulary by its bytes."""
    if options is None:
        return None
    from pymlgo.ir2vec.vocab_file import file_sha256
    from pymlgo.problems.inlining.problem import InliningOptions

    if isinstance(options, InliningOptions):
        vocab = options.ir2vec_vocab
        estimator = options.estimator  # its estimates never reach a log, but the contexts do
        return {
            "ir2vec_sha256": None if vocab is None else file_sha256(vocab),
            "estimator_sha256": None if estimator is None else hashlib.sha256(
                pickle.dumps(estimator, protocol=4)).hexdigest(),
        }
    return {"sha256": hashlib.sha256(pickle.dumps(options, protocol=4)).hexdigest()}


def trace_identity(compiler: Compiler, policy: Policy, spec: WorkSpec,
                   edits: Any) -> dict[str, Any]:
    """Everything that decides a trace's bytes besides the modules themselves (which the
    journal keys by their inputs) and the caller's metadata (written by the finishing run).
    Timeout and memory limit only decide which modules fail, and failed modules are
    compiled again on a resume, so they are not part of it."""
    return {
        "version": PARTIAL_VERSION,
        "problem": spec.problem.name,
        "policy": policy.name,
        "policy_sha256": policy_digest(policy),
        "compiler": compiler.identity,
        "size_metric": spec.size_metric,
        "edits": edits,
        "options": _options_identity(spec.options),
    }


def _differences(was: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two identities, in words (the policy by its name)."""
    def show(v: Any) -> str:
        text = json.dumps(v, sort_keys=True)
        return text if len(text) <= 80 else text[:77] + "..."

    out = []
    for key in dict.fromkeys([*was, *now]):
        if key == "policy" or was.get(key) == now.get(key):
            continue
        if key == "policy_sha256":
            key = "policy"
            if was.get(key) == now.get(key):
                out.append(f"policy: {show(now.get(key))} with other weights or parameters")
                continue
        out.append(f"{key}: {show(was.get(key))} there, {show(now.get(key))} here")
    return out


def _same(was: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Equal identities; the policy's display name aside (`./p` and `p` are one policy)."""
    return ({k: v for k, v in was.items() if k != "policy"}
            == {k: v for k, v in now.items() if k != "policy"})


def _ends_a_line(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class PartialTrace:
    """An open partial directory, locked for this run (a context manager)."""

    def __init__(self, output_dir: Path, identity: Mapping[str, Any]) -> None:
        self.root = partial_dir(output_dir)
        self.content = self.root / CONTENT_DIR
        self.identity = dict(identity)
        self._lock: IO[bytes] | None = None
        self._journal: IO[str] | None = None

    def __enter__(self) -> PartialTrace:
        self.root.mkdir(parents=True, exist_ok=True)
        lock = open(self.root / LOCK_FILE, "ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise PartialTraceError(
                f"{self.root}: another run is tracing into it (its lock is held)") from None
        self._lock = lock
        try:
            self._check_identity()
            self.content.mkdir(exist_ok=True)
            self._journal = open(self.root / JOURNAL_FILE, "a", encoding="utf-8")
            if self._journal.tell() and not _ends_a_line(self.root / JOURNAL_FILE):
                self._journal.write("\n")  # a kill cut the last line: the next starts anew
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def _check_identity(self) -> None:
        path = self.root / IDENTITY_FILE
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            recorded = None
        except (OSError, ValueError) as exc:
            recorded = exc
        if recorded is not None and not isinstance(recorded, dict):
            raise PartialTraceError(
                f"{path}: unreadable ({recorded}); remove {self.root} to start over")
        if recorded is None:
            # A new partial directory (or one stopped before it said what it holds, so
            # nothing in it can be trusted).
            for stale in (self.root / JOURNAL_FILE, self.content):
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:
                    stale.unlink(missing_ok=True)
            write_atomic(path, (json.dumps(self.identity, indent=2, sort_keys=True)
                                + "\n").encode())
            return
        if not _same(recorded, self.identity):
            diff = "; ".join(_differences(recorded, self.identity))
            raise PartialTraceError(
                f"{self.root} holds a stopped trace of another run ({diff}); resume it with "
                f"the same settings, or remove it (rm -r {self.root}) to start over")

    def finished(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Module -> (input digest, its row as a dict), the last entry of each module; a
        line cut short by a kill is skipped."""
        done: dict[str, tuple[str, dict[str, Any]]] = {}
        try:
            with open(self.root / JOURNAL_FILE, encoding="utf-8") as f:
                for line in f:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        entry = json.loads(line)
                        done[str(entry["module"])] = (str(entry["input"]), dict(entry["row"]))
        except FileNotFoundError:
            pass
        return done

    def record(self, module: str, digest: str, row: Mapping[str, Any]) -> None:
        """Journal one finished module (after its log, if any, is in place)."""
        assert self._journal is not None, "record() outside `with`"
        line = json.dumps({"module": module, "input": digest, "row": dict(row)},
                          sort_keys=True)
        self._journal.write(line + "\n")
        self._journal.flush()

    def remove(self) -> None:
        """Drop the directory: its content was moved into place, or it holds nothing."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def empty(self) -> bool:
        return not (self.root / JOURNAL_FILE).is_file() or os.path.getsize(
            self.root / JOURNAL_FILE) == 0
