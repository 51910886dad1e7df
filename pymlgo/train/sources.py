"""What a run takes from outside its output directory: a saved-policy warm start, a vocab
directory (`mlgo vocab`), a trace of clang's heuristic (`mlgo trace --policy default`) and
an IR2Vec vocabulary file (`policy.ir2vec_vocab`).

Each is loaded and checked against the configuration before anything is compiled or
written, so a wrong path or a mismatch fails at once with a message that says what to do.
Checks that need the compiler's answers (its feature list, the -Oz sizes) follow in
`check_features` and `TraceSource.episodes`, during the setup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.corpus.format import Corpus
from pymlgo.evaluate.trace import (
    TRACE_FILE,
    TRACE_FORMAT,
    TraceRow,
    edits_json,
    load_traces,
    read_sizes,
)
from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.store import PolicyLoadError, load_policy
from pymlgo.policy.vocab import Vocab, load_vocab
from pymlgo.problems import registry
from pymlgo.problems.inlining.policies import DEFAULT_FEATURE
from pymlgo.train.config import TrainConfig
from pymlgo.train.env import Episode

VOCAB_FILE = "vocab.json"  # what `mlgo vocab` writes into its output directory


class SourceError(ValueError):
    """A warm start, vocab or trace cannot be used for this run; the message says why."""


@dataclass(frozen=True, eq=False)
class TraceSource:
    """A trace of clang's heuristic on this corpus, as `mlgo trace` wrote it."""

    directory: Path
    info: Mapping[str, Any]  # trace.json
    rows: Mapping[str, TraceRow]  # sizes.csv, by module

    def episodes(self, names: Sequence[str], baselines: Mapping[str, int]) -> list[Episode]:
        """The traced modules among `names` as recorded episodes (sorted by module, as a
        recording would give them); every -Oz size must equal the trace's."""
        for name in names:
            row = self.rows[name]
            if row.baseline_bytes is not None and row.baseline_bytes != baselines[name]:
                raise SourceError(
                    f"{self.directory} was traced from other bitcode, flags or compiler: "
                    f"{name} is {row.baseline_bytes} bytes at -Oz there, {baselines[name]} "
                    f"here; trace this corpus again (`mlgo trace --policy default`)"
                )
        wanted = set(names)
        logged: dict[str, Episode] = {}
        for module, traj, _ in load_traces(self.directory):
            if module not in wanted or self.rows[module].error:
                continue
            actions = np.asarray(traj.advice).reshape(-1).astype(np.int64)
            logged[module] = Episode(module=module, member=0, baseline=baselines[module],
                                     size=self.rows[module].policy_bytes,
                                     decisions=len(actions), features=traj.features,
                                     actions=actions)
        # a module whose trace has no log made no decisions (or failed: no episode then)
        return [logged.get(n) or Episode(module=n, member=0, baseline=baselines[n],
                                         size=self.rows[n].policy_bytes, decisions=0,
                                         features={}, actions=np.zeros(0, dtype=np.int64))
                for n in sorted(names) if not self.rows[n].error]


@dataclass(frozen=True, eq=False)
class Sources:
    warm: Any  # the saved policy to start from (the problem's policy type), or None
    vocab: Vocab | None  # the normalization of a new network
    traces: TraceSource | None  # clang's decisions, instead of recording them
    # the IR2Vec vocabulary file the run compiles with (policy.ir2vec_vocab, or the warm
    # start's own); None: no embeddings
    ir2vec: Path | None = None


def load_sources(config: TrainConfig, corpus: Corpus, compiler_version: str) -> Sources:
    """Load the configured warm start, vocab and traces; SourceError if one cannot be used."""
    warm = _warm_start(config)
    ir2vec = _ir2vec(config, warm)
    traces = load_trace_source(config, corpus, compiler_version)
    if traces is not None and ir2vec is not None:
        _check_trace_ir2vec(traces, ir2vec)
    return Sources(warm, _vocab(config), traces, ir2vec)


def _ir2vec(config: TrainConfig, warm: InliningPolicy | None) -> Path | None:
    """The IR2Vec vocabulary file of the run, checked as clang would read it."""
    if warm is not None:
        return warm.ir2vec_vocab if warm.vocab.embeddings else None
    if config.policy.ir2vec_vocab is None:
        return None
    from pymlgo.ir2vec.vocab_file import VocabFileError, load, warn_missing

    path = Path(config.policy.ir2vec_vocab)
    try:
        warn_missing(load(path), str(path))
    except VocabFileError as exc:
        raise SourceError(f"policy.ir2vec_vocab: {exc}") from exc
    return path.absolute()


def _check_trace_ir2vec(traces: TraceSource, ir2vec: Path) -> None:
    from pymlgo.ir2vec.vocab_file import file_sha256

    traced = traces.info.get("ir2vec_sha256")
    if traced != file_sha256(ir2vec):
        made = ("without an IR2Vec vocabulary" if traced is None
                else "with another IR2Vec vocabulary")
        raise SourceError(f"{traces.directory} was traced {made}: the policy reads the "
                          f"embeddings of {ir2vec}; trace again with `mlgo trace --policy "
                          f"default --ir2vec {ir2vec}`")


def _warm_start(config: TrainConfig) -> InliningPolicy | None:
    spec = config.policy_warmstart
    if spec is None:
        return None
    try:
        policy = load_policy(spec)
    except PolicyLoadError as exc:
        raise SourceError(f"warm start: {exc}") from exc
    if not isinstance(policy, InliningPolicy):
        raise SourceError(
            f"warm start {spec!r} is not a saved MLP policy (give a policy directory or "
            f"pretrained:NAME; to start from clang's heuristic use warmstart = 'bc')")
    conflicts = []
    if config.policy.hidden is not None and tuple(config.policy.hidden) != policy.hidden:
        conflicts.append(f"hidden = {list(config.policy.hidden)} (it has "
                         f"{list(policy.hidden)})")
    if (config.policy.features is not None
            and set(config.policy.features) != set(policy.vocab.features)):
        conflicts.append(f"features = {list(config.policy.features)} (it reads "
                         f"{list(policy.vocab.features)})")
    if config.policy.reads_default and DEFAULT_FEATURE not in policy.vocab.features:
        conflicts.append(f"reads_default = true (it does not read {DEFAULT_FEATURE})")
    has = [d.name for d in policy.vocab.differences]
    if config.policy.differences is not None and list(config.policy.differences) != has:
        conflicts.append(f"differences = {list(config.policy.differences)} (it has {has})")
    if conflicts:
        raise SourceError(
            f"[policy] {'; '.join(conflicts)} conflicts with the warm-start policy {spec}: "
            f"leave the key out to train the warm start's network as it is")
    return policy.greedy()


def _vocab(config: TrainConfig) -> Vocab | None:
    if not config.vocab:
        return None
    directory = Path(config.vocab)
    path = directory / VOCAB_FILE
    if not path.is_file():
        raise SourceError(f"{directory}: not a vocab directory (no {VOCAB_FILE}); make one "
                          f"with `mlgo vocab --traces TRACE_DIR --output_dir {directory}`")
    try:
        vocab = load_vocab(path)
    except (OSError, ValueError) as exc:
        raise SourceError(f"vocab: {exc}") from exc
    if config.policy.features is not None and set(config.policy.features) != set(
            vocab.features):
        raise SourceError(
            f"{path}: its features differ from [policy] features "
            f"({_difference(vocab.features, config.policy.features)}); leave that key out to "
            f"use the vocab's features")
    has = [d.name for d in vocab.differences]
    if config.policy.differences is not None and list(config.policy.differences) != has:
        raise SourceError(f"{path}: its differences ({has}) are not [policy] differences "
                          f"({list(config.policy.differences)}); make the vocab with `mlgo "
                          f"vocab --difference ...`, or leave that key out to use the vocab's")
    return vocab


def load_trace_source(config: TrainConfig, corpus: Corpus,
                      compiler_version: str) -> TraceSource | None:
    """`config.traces`, checked: a trace of this corpus, problem, compiler and flags, made
    with the problem's traced policy (`Problem.trace_policy`: inlining's `default`)."""
    if not config.traces:
        return None
    directory = Path(config.traces)
    problem = registry.problem(config.problem)
    # the command that makes the trace this run wants
    remake = ("mlgo trace" + ("" if problem is registry.DEFAULT else f" --problem {problem.name}")
              + f" --policy {problem.trace_policy}")
    try:
        info = json.loads((directory / TRACE_FILE).read_text())
        rows = read_sizes(directory)
    except FileNotFoundError as exc:
        raise SourceError(f"{directory}: not a trace directory (no {Path(str(exc.filename)).name});"
                          f" make one with `{remake} --output_dir {directory}`") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise SourceError(f"{directory}: unreadable trace ({exc})") from exc
    if not isinstance(info, dict) or info.get("format") != TRACE_FORMAT:
        raise SourceError(f"{directory / TRACE_FILE}: not a {TRACE_FORMAT} file")
    if info.get("problem") != problem.name:
        raise SourceError(
            f"{directory} is a trace of problem {info.get('problem')!r}, not of "
            f"{problem.name!r}, which this run trains")
    if info.get("policy") != problem.trace_policy:
        raise SourceError(
            f"{directory} is a trace of policy {info.get('policy')!r}; behaviour cloning "
            f"learns {problem.trace_policy!r}'s decisions: trace with `{remake}`")
    if set(rows) != set(corpus.names) and not _traced_subset(info, rows, corpus):
        common = len(set(rows) & set(corpus.names))
        raise SourceError(
            f"{directory} traces another corpus: {len(rows)} modules, {common} of them in "
            f"{corpus.root} ({len(corpus)} modules); trace this corpus with `{remake}`")
    version = (info.get("compiler") or {}).get("version")
    if version != compiler_version:
        raise SourceError(f"{directory} was traced with clang {version}, this run uses clang "
                          f"{compiler_version}: trace again with this compiler")
    # traces made before flags were recorded hold neither key: made without edits
    traced = {"edits": info.get("edits"), "command_override": info.get("command_override")}
    wanted = {"edits": edits_json(config.compile.flag_edits()),
              "command_override": (list(config.compile.command_override)
                                   if config.compile.command_override is not None else None)}
    if traced != wanted:
        raise SourceError(f"{directory} was traced with other compile flags ({traced}) than "
                          f"this run's ({wanted}): trace again with the same flags")
    return TraceSource(directory, info, rows)


def _traced_subset(info: Mapping[str, Any], rows: Mapping[str, TraceRow],
                   corpus: Corpus) -> bool:
    """A trace of this corpus's own directory that holds every module a run sees: a run on
    some of its packages (one fold of a k-fold split) may read its modules from the trace of
    the whole; each module's -Oz bytes are still checked against the run's (`episodes`)."""
    recorded = info.get("corpus")
    if not isinstance(recorded, str) or not set(corpus.names) <= set(rows):
        return False
    try:
        return Path(recorded).resolve() == Path(corpus.root).resolve()
    except OSError:
        return False


def check_features(sources: Sources, config: TrainConfig, compiler_features: Sequence[str],
                   vocab: Vocab | None) -> None:
    """The policy's inputs must be features the compiler sends; a vocab must cover exactly
    the features the policy reads (explicit [policy] features, else all but clang's own
    decision)."""
    sent = set(compiler_features)
    if sources.warm is not None:
        unknown = [f for f in sources.warm.vocab.raw_features if f not in sent]
        if unknown:
            raise SourceError(f"the warm-start policy {config.warmstart} reads features this "
                              f"compiler does not send: {', '.join(unknown)}")
    if vocab is None:
        return
    unknown = [f for f in vocab.raw_features if f not in sent]
    if unknown:
        raise SourceError(f"{config.vocab} has features this compiler does not send: "
                          f"{', '.join(unknown)} (a vocab from another LLVM?)")
    needed = policy_inputs(config, compiler_features)
    if set(vocab.features) != set(needed):
        raise SourceError(
            f"{config.vocab}: its features differ from those the policy reads "
            f"({_difference(vocab.features, needed)}); make the vocab with "
            f"--include-default exactly when policy.reads_default is set, or set [policy] "
            f"features to the vocab's")


def policy_inputs(config: TrainConfig, compiler_features: Sequence[str]) -> tuple[str, ...]:
    """The quantile inputs of a new network, in clang's order: [policy] features if set;
    else every feature clang sends but its own decision (the label, as in MLGO, unless
    policy.reads_default makes it the last input) and the IR2Vec embeddings (float[dim],
    normalized apart)."""
    if config.policy.features is not None:
        return config.policy.features
    own = tuple(f for f in compiler_features
                if f != DEFAULT_FEATURE and f not in EMBEDDING_FEATURES)
    return (*own, DEFAULT_FEATURE) if config.policy.reads_default else own


def _difference(have: Sequence[str], want: Sequence[str]) -> str:
    extra = [f for f in have if f not in set(want)]
    missing = [f for f in want if f not in set(have)]
    return "; ".join(([f"extra: {', '.join(extra)}"] if extra else [])
                     + ([f"missing: {', '.join(missing)}"] if missing else []))
