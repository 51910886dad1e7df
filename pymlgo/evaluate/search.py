"""Per-module search for decision sequences better than a policy's, for any problem whose
decisions are a choice among a few answers (`Problem.search_moves`).

Start from a policy's decisions on each module, change decisions one at a time, keep what
improves the problem's reward (`Problem.reward`: for inlining fewer bytes, for the eviction
advisor a lower weighted spill/reload/copy cost). The result is never worse than the start:
a move is accepted only when its compile's reward is strictly higher than the best so far.
The best trajectories are what an imitation-learning trainer clones, so `search` returns
them as `Trajectory` objects.

What a move is (`Problem.search_answers`, `Problem.decision_weights`)
    One decision takes another answer: the problem lists a decision's other answers, most
    promising first, and the search tries `answers` of them at most (a call site has one:
    inline or not; an eviction has the other evictable registers, evicting nothing first,
    then the lightest interference). Where the problem weighs decisions (regalloc: the cost
    of the function each one was made in; the allocator works one function at a time), the
    heaviest are tried first and those at weight 0 never (a function that costs nothing
    cannot get cheaper).

How a decision sequence is compiled (replay by index)
    A candidate is a table of advice, one byte per decision (0/1 for a call site, a
    register column for an eviction): the compile's i-th decision gets the table's i-th
    entry; decisions past the table's end get the starting policy's answer. The rest of
    this paragraph is about the inliner; the allocator's decisions likewise depend on the
    ones before them in a function. LLVM asks about call sites in the order its inliner meets
    them, and inlining a call site puts the callee's own call sites on the work list, so
    flipping decision i can change which call sites come after it: the table's later
    entries then answer other call sites than the ones they were recorded for. That is
    accepted as part of the move (the compile is measured, whatever it did); and since the
    compile is deterministic, the recorded advice of an accepted compile, replayed, gives
    that compile again, byte for byte. A candidate flips entry i of the best compile's
    recorded advice and keeps the rest of it (see `_flipped`).

The search: greedy passes, a batch of flips per round, the best of the batch accepted
    One round compiles up to `batch` flips of every module still searching, all modules'
    candidates in one executor batch (a `ReplayPolicy` holds every candidate's table). Per
    module the candidate with the highest reward that beats the best is accepted (ties: the
    earlier one in the flip order). Other flips of the round that also beat the best are
    tried again first on top of the new best: they often touch other functions and add up.
    The flip order: least certain first when the policy gives probabilities (|logit| of the
    MLP on the recorded features), otherwise a shuffle seeded by (seed, module, pass); the
    problem's decision weights, where it has them, come first (see above). After an
    accepted flip the order is recomputed on the new best's decisions (positions already
    tried in this pass are not tried again); once every position has been tried, a pass
    that accepted something starts another, one that did not ends the module's search
    (no single flip improves it) before its budget is spent.
    Why batches rather than one flip at a time: a batch keeps every worker busy even when
    few modules are left, and greedy first-improvement would need a round trip per compile.
    Why not flip several decisions at once: single flips are what the budget affords on
    modules with hundreds of decisions, and accepted flips already accumulate.

Moves: single flips, or also whole callees (`moves="callee"`)
    Single flips cannot find what needs several decisions at once: a static function called
    from three places is deleted (its code and its unwind entry) only when all three calls
    are inlined, and each alone makes the object larger. With `moves="callee"` the queue
    also holds one move per callee that has two or more call sites in the best compile: set
    every one of its decisions to inline (or, if all already inline, to not inline). The
    protocol names no functions, so a callee is recognized by the features that describe
    it and do not change while its callers are processed (its blocks, conditionally
    executed blocks, loops, and whether it is available externally); two callees that look
    the same form one group, and the compile decides whether that move is good. Group
    moves and single flips alternate in the queue (groups with more call sites first).

Budget and determinism
    `budget` counts every policy compile of a module, the starting one included (the -Oz
    baseline is cached and not counted). Candidates depend only on the module's own
    results and the seed, and each round's results are sorted before they are used, so
    the outcome does not depend on the number of workers or the order compiles finish.

Output directory (optional, resumable)
    `<module>.log` per searched module: the best trajectory as an LLVM training log, as
    `mlgo trace` writes it (the compiler's features plus the decision as the problem's
    `trace_advice`, e.g. `inlining_decision`; each observation followed by the problem's
    reward of the best, for inlining 1 - best/-Oz bytes). `search.json`: the settings and,
    per module, baseline/start/best bytes (and the problem's measures beyond bytes, e.g.
    baseline_cost/start_cost/best_cost), compiles and decisions, plus totals. It is
    rewritten after every finished module, so an interrupted run resumes where it stopped:
    modules already searched with the same settings and the same input are skipped. A
    directory searched with other settings is refused (another size metric above all: bytes
    of two metrics cannot be compared); `restart` discards it.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.evaluate.baseline import baseline_results
from pymlgo.evaluate.trace import (
    TraceRow,
    edits_json,
    measured_extra,
    module_log_path,
    read_trace_log,
    trajectory_log_bytes,
)
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob, Decide, ModuleResult, Policy, Problem, Trajectory
from pymlgo.problems.inlining.policies import for_language, module_seed
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic
from pymlgo.toolchain.size import check_metric
from pymlgo.workers.protocol import Executor, WorkSpec

SEARCH_FORMAT = "pymlgo-search"
SEARCH_VERSION = 1
SUMMARY_FILE = "search.json"
DEFAULT_BATCH = 8
DEFAULT_ANSWERS = 3  # other answers tried per decision, where a problem has more than one


class SearchDirError(ValueError):
    """An output directory that cannot be resumed by this run; the message says why."""


# --- compiling a decision sequence ---------------------------------------------------------


@dataclass(frozen=True)
class ReplayPolicy:
    """Answers each job's decisions from its own advice table, then as `start` would.

    `tables` maps a job name (one per candidate: several candidates of one module travel
    in the same batch) to (module, advice bytes). Picklable and torch-free as long as
    `start` is, so workers and Ray can run it.
    """

    start: Policy
    tables: Mapping[str, tuple[str, bytes]]
    name: str = "search-replay"

    @property
    def required_features(self) -> tuple[str, ...]:
        return self.start.required_features

    @property
    def advisor(self) -> str | None:
        """The start policy's register-allocation advisor, if it answers one."""
        return getattr(self.start, "advisor", None)

    @property
    def ir2vec_vocab(self) -> Path | None:
        """The start policy's IR2Vec vocabulary: the replayed compiles must embed as it did."""
        return getattr(self.start, "ir2vec_vocab", None)

    def for_language(self, language: str | None) -> ReplayPolicy:
        """Replayed over the start policy as it decides this language (clang's decisions
        where it leaves the language to clang), as the start compile was."""
        return dataclasses.replace(self, start=for_language(self.start, language))

    def for_module(self, module: str) -> Decide:
        real_module, table = self.tables[module]
        fallback = self.start.for_module(real_module)  # seeded by the module's own name
        position = 0

        def decide(features: Mapping[str, np.ndarray]) -> int | float | np.ndarray:
            nonlocal position
            # Asked at every decision, not only past the table: a stochastic start policy
            # then draws the same stream as in the start compile.
            answer = fallback(features)
            i, position = position, position + 1
            return table[i] if i < len(table) else answer

        return decide


def advice_bytes(traj: Trajectory) -> bytes:
    """A recorded trajectory's decisions as a replay table, one byte each (an inlining
    decision is 0 or 1, an eviction a register column below 33)."""
    values = [int(np.asarray(a).reshape(-1)[0]) for a in traj.advice]
    if any(not 0 <= v < 256 for v in values):
        raise ValueError("a recorded decision is not a small non-negative integer: not "
                         "searchable by replay")
    return bytes(values)


@dataclass(frozen=True)
class Move:
    """One candidate's change to the best compile's recorded answers."""

    positions: tuple[int, ...]  # one decision; or a callee's call sites, set together
    answer: int = 0  # one decision: which of the problem's other answers (0: its first)


MOVES = ("single", "callee")
# The features that describe a callee and stay put while its callers are processed (its
# users do not: they drop as its call sites are inlined).
CALLEE_SIGNATURE = ("callee_basic_block_count", "callee_conditionally_executed_blocks",
                    "num_loops", "is_callee_avail_external")
Answers = Callable[[int, int], tuple[int, ...]]  # (position, its answer) -> other answers


def _flipped(advice: bytes, move: Move, answers: Answers) -> bytes | None:
    """The candidate that applies `move` and keeps every other recorded answer (None if the
    decision has no such answer): one position takes its `move.answer`-th other answer; a
    group is set to inline, or to not inline if it all inlines already."""
    table = bytearray(advice)
    if len(move.positions) == 1:
        position = move.positions[0]
        others = answers(position, table[position])
        if move.answer >= len(others):
            return None
        table[position] = others[move.answer]
    else:
        target = 0 if all(table[p] for p in move.positions) else 1
        for p in move.positions:
            table[p] = target
    return bytes(table)


def callee_groups(traj: Trajectory) -> list[tuple[int, ...]]:
    """Positions of the call sites of each (apparent) callee with two or more of them,
    largest group first, then by first position."""
    n = len(traj)
    if not n or any(f not in traj.features for f in CALLEE_SIGNATURE):
        return []
    columns = [np.asarray(traj.features[f]).reshape(n, -1)[:, 0].tolist()
               for f in CALLEE_SIGNATURE]
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, key in enumerate(zip(*columns, strict=True)):
        groups.setdefault(key, []).append(i)
    moves = [tuple(g) for g in groups.values() if len(g) >= 2]
    return sorted(moves, key=lambda g: (-len(g), g[0]))


# --- which decision to flip next -----------------------------------------------------------


def flip_order(policy: Policy, traj: Trajectory, seed: int,
               weights: np.ndarray | None = None) -> list[int]:
    """Decision positions: with the problem's `weights` (`Problem.decision_weights`), those
    above 0, heaviest first (equal ones in a shuffle seeded by `seed`); else least certain
    first if `policy` has logits (the MLP), else a shuffle seeded by `seed`."""
    n = len(traj)
    if weights is not None:
        order = [i for i in range(n) if weights[i] > 0]
        random.Random(seed).shuffle(order)
        return sorted(order, key=lambda i: -weights[i])  # stable: the shuffle breaks ties
    logits = getattr(policy, "decision_logits", None)
    if callable(logits) and n:
        certainty = np.abs(np.asarray(logits(traj.features, n), dtype=np.float64).reshape(n))
        return [int(i) for i in np.argsort(certainty, kind="stable")]
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


# --- one module's search -------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleSearch:
    """Where one module's search ended: sizes in the run's metric, the problem's measures
    beyond bytes (`Problem.measures`, by key; none for inlining), and the best compile.
    The best is the start or better by the problem's reward: for inlining the fewest bytes,
    for regalloc the lowest cost (whatever its bytes)."""

    module: str
    baseline_bytes: int | None  # the problem's baseline (plain -Oz; the stock advisor)
    start_bytes: int | None  # the starting policy
    best_bytes: int | None  # the best compile
    compiles: int  # policy compiles used, the starting one included
    decisions: int  # decisions of the best compile
    accepted: int = 0  # flips accepted on the way
    error: str | None = None
    trajectory: Trajectory | None = field(default=None, repr=False, compare=False)
    baseline_extra: Mapping[str, float] = field(default_factory=dict)
    start_extra: Mapping[str, float] = field(default_factory=dict)
    best_extra: Mapping[str, float] = field(default_factory=dict)

    def reward_of(self, problem: Problem) -> float | None:
        """The problem's reward of the best compile, as a trace log's outcome (None if
        unknown)."""
        return TraceRow(self.module, self.baseline_bytes, self.best_bytes, self.decisions,
                        self.error, self.baseline_extra, self.best_extra).reward_of(problem)

    def to_json(self, problem: Problem) -> dict[str, Any]:
        measures = {f"{side}_{m.field}": extra.get(m.key)
                    for m in problem.measures
                    for side, extra in (("baseline", self.baseline_extra),
                                        ("start", self.start_extra),
                                        ("best", self.best_extra))}
        return {"baseline_bytes": self.baseline_bytes, "start_bytes": self.start_bytes,
                "best_bytes": self.best_bytes, "compiles": self.compiles,
                "decisions": self.decisions, "accepted": self.accepted, "error": self.error,
                **measures}

    @classmethod
    def from_json(cls, module: str, record: Mapping[str, Any], problem: Problem,
                  trajectory: Trajectory | None = None) -> ModuleSearch:
        def extra(side: str) -> dict[str, float]:
            return {m.key: float(record[f"{side}_{m.field}"]) for m in problem.measures
                    if record.get(f"{side}_{m.field}") is not None}

        return cls(module, record["baseline_bytes"], record["start_bytes"],
                   record["best_bytes"], record["compiles"], record["decisions"],
                   record.get("accepted", 0), record.get("error"), trajectory,
                   extra("baseline"), extra("start"), extra("best"))


class _Searcher:
    """The state of one module's search between rounds."""

    def __init__(self, job: CompileJob, problem: Problem, policy: Policy,
                 baseline: ModuleResult, budget: int, seed: int, batch: int, moves: str,
                 answers: int) -> None:
        self.job, self.problem, self.policy, self.baseline = job, problem, policy, baseline
        self.budget, self.seed, self.batch, self.moves = budget, seed, batch, moves
        self.answers = answers
        self.used = 0
        self.accepted = 0
        self.start: ModuleResult | None = None
        self.best: ModuleResult | None = None
        self.best_score = 0.0
        self.advice = b""
        self.queue: list[Move] = []  # moves to try next, in order
        self.tried: set[Move] = set()  # moves tried in this pass
        self.accepted_in_pass = False
        self.passes = 0
        self.error: str | None = None
        self.done = False

    @property
    def module(self) -> str:
        return self.job.module

    def score(self, res: ModuleResult) -> float | None:
        """The problem's reward of a compile (higher is better); None if it has none."""
        if not res.ok or res.size is None:
            return None
        try:
            return self.problem.reward(self.baseline, res)
        except (KeyError, ValueError, ZeroDivisionError):
            return None

    def beats_best(self, res: ModuleResult) -> bool:
        score = self.score(res)
        return self.best is None or (score is not None and score > self.best_score)

    def _answers(self, position: int, chosen: int) -> tuple[int, ...]:
        """The problem's other answers at `position` of the best compile, `answers` at
        most."""
        assert self.best is not None and self.best.trajectory is not None
        row = {k: v[position] for k, v in self.best.trajectory.features.items()}
        return self.problem.search_answers(row, chosen)[:self.answers]

    def propose(self) -> list[tuple[Move, bytes]]:
        """This round's candidates as (move, table); the empty move is the start compile."""
        if self.done:
            return []
        if self.best is None:
            return [(Move(()), b"")]
        room = min(self.batch, self.budget - self.used)
        picked: list[tuple[Move, bytes]] = []
        while len(picked) < room:
            if not self.queue:
                # A new pass only starts with a fresh round: within one round it could
                # pick a move this round already holds.
                if picked or not self.accepted_in_pass:
                    break
                self._new_pass()
                continue
            move = self.queue.pop(0)
            if max(move.positions) >= len(self.advice) or move in self.tried:
                continue
            table = _flipped(self.advice, move, self._answers)
            if table is not None:  # the decision has that many other answers
                picked.append((move, table))
        if not picked:  # budget spent, or no single move improved the last pass
            self.done = True
        self.tried.update(m for m, _ in picked)
        return picked

    def absorb(self, results: Sequence[tuple[Move, ModuleResult]]) -> None:
        """This round's results, in proposal order."""
        self.used += len(results)
        if self.best is None:
            (_, res), = results
            score = self.score(res)
            asked = res.trajectory is not None or self.problem.always_asks or res.decisions
            if score is None or (res.trajectory is None and asked):
                why = res.error or ("no measure" if score is None else
                                    "no trajectory recorded (the compiler sent no header)")
                self.error = f"start: {why}"
                self.done = True
                return
            self.start = self.best = res
            self.best_score = score
            if res.trajectory is None:  # the advisor never asked (no virtual registers)
                self.done = True
                return
            self.advice = advice_bytes(res.trajectory)
            self._reorder(carried=[])
        else:
            better = [(-score, rank, move, res)
                      for rank, (move, res) in enumerate(results)
                      if res.trajectory is not None and (score := self.score(res)) is not None
                      and score > self.best_score]
            if better:
                better.sort(key=lambda b: (b[0], b[1]))
                neg_score, _, _, res = better[0]
                assert res.trajectory is not None
                self.best, self.best_score = res, -neg_score
                self.advice = advice_bytes(res.trajectory)
                self.accepted += 1
                self.accepted_in_pass = True
                # the round's other improvements, retried first on top of the new best
                carried = [b[2] for b in better[1:]]
                self.tried.difference_update(carried)
                self._reorder(carried)
        if self.used >= self.budget:
            self.done = True

    def _order_seed(self) -> int:
        return module_seed(self.seed, f"{self.module}\0pass {self.passes}")

    def _reorder(self, carried: list[Move]) -> None:
        assert self.best is not None and self.best.trajectory is not None
        traj = self.best.trajectory
        positions = flip_order(self.policy, traj, self._order_seed(),
                               self.problem.decision_weights(self.best))
        singles = [Move((p,), k) for p in positions for k in range(self.answers)]
        order = singles
        if self.moves == "callee":
            groups = [Move(g) for g in callee_groups(traj)]
            order = [m for pair in zip_longest(groups, singles) for m in pair if m is not None]
        rest = [m for m in order if m not in self.tried and m not in carried]
        self.queue = [m for m in carried if max(m.positions) < len(self.advice)] + rest

    def _new_pass(self) -> None:
        self.passes += 1
        self.tried.clear()
        self.accepted_in_pass = False
        self._reorder(carried=[])

    def outcome(self) -> ModuleSearch:
        measured = partial(measured_extra, self.problem)
        if self.error is not None or self.best is None or self.start is None:
            return ModuleSearch(self.module, self.baseline.size, None, None, self.used, 0,
                                error=self.error or "not searched",
                                baseline_extra=measured(self.baseline))
        return ModuleSearch(self.module, self.baseline.size, self.start.size, self.best.size,
                            self.used, self.best.decisions, self.accepted,
                            trajectory=self.best.trajectory,
                            baseline_extra=measured(self.baseline),
                            start_extra=measured(self.start), best_extra=measured(self.best))

# --- the corpus: rounds over every module still searching ----------------------------------


@dataclass(frozen=True)
class SearchReport:
    """Every module's outcome (by name), with the settings it was searched with."""

    settings: Mapping[str, Any]
    modules: tuple[ModuleSearch, ...]
    problem: Problem = registry.DEFAULT

    @property
    def ok_modules(self) -> tuple[ModuleSearch, ...]:
        return tuple(m for m in self.modules if m.error is None)

    def trajectories(self) -> dict[str, Trajectory]:
        """Module -> best trajectory: what behaviour cloning learns from."""
        return {m.module: m.trajectory for m in self.ok_modules if m.trajectory is not None}

    def totals(self) -> dict[str, Any]:
        ok = self.ok_modules
        base = sum(m.baseline_bytes or 0 for m in ok)
        best = sum(m.best_bytes or 0 for m in ok)
        return {
            "modules": len(self.modules),
            "searched": len(ok),
            "failed": len(self.modules) - len(ok),
            "baseline_bytes": base,
            "start_bytes": sum(m.start_bytes or 0 for m in ok),
            "best_bytes": best,
            "saved_bytes": base - best,
            "change": best / base - 1.0 if base else 0.0,
            "compiles": sum(m.compiles for m in self.modules),
            "decisions": sum(m.decisions for m in ok),
            **self._measure_totals(ok),
        }

    def _measure_totals(self, ok: Sequence[ModuleSearch]) -> dict[str, float]:
        """Per measure beyond bytes: its baseline, start and best sums, and the best's
        change (for regalloc `best_cost` and `cost_change`: what the search is after)."""
        out: dict[str, float] = {}
        for m in self.problem.measures:
            base = sum(r.baseline_extra.get(m.key, 0.0) for r in ok)
            best = sum(r.best_extra.get(m.key, 0.0) for r in ok)
            out[f"baseline_{m.field}"] = base
            out[f"start_{m.field}"] = sum(r.start_extra.get(m.key, 0.0) for r in ok)
            out[f"best_{m.field}"] = best
            out[f"{m.field}_change"] = best / base - 1.0 if base else 0.0
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SEARCH_FORMAT,
            "version": SEARCH_VERSION,
            "settings": dict(self.settings),
            "modules": {m.module: m.to_json(self.problem) for m in self.modules},
            "total": self.totals(),
        }


Progress = Callable[[int, int], None]  # (budget units done, units in all)


def search(
    executor: Executor,
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    policy: Policy,
    *,
    budget: int,
    seed: int = 0,
    batch: int = DEFAULT_BATCH,
    spec: WorkSpec | None = None,
    output_dir: Path | None = None,
    restart: bool = False,
    settings: Mapping[str, Any] | None = None,
    on_progress: Progress | None = None,
    moves: str = "single",
    answers: int = DEFAULT_ANSWERS,
) -> SearchReport:
    """Search every module of `jobs` from `policy`'s decisions (see the module docstring).

    `spec` gives the compile settings (compiler, timeout, flag edits, size metric); its
    policy and recording are set here. `settings` adds entries to the recorded settings (e.g. the
    policy spec as the user wrote it). With `output_dir`, logs and `search.json` are
    written as modules finish, and modules already there with the same settings and input
    are taken from it (their trajectories read back from the logs). A module whose
    baseline or start compile fails gets `error` and is not searched. `spec.problem` says
    what is searched (its moves, its other answers at a decision, `answers` of them at most,
    and its reward decides what is better).
    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1 compile per module, got {budget}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if answers < 1:
        raise ValueError(f"answers must be >= 1 per decision, got {answers}")
    base = spec if spec is not None else WorkSpec()
    problem = base.problem
    if not problem.search_moves:
        raise ValueError(f"problem {problem.name!r} cannot be searched: its decisions are "
                         "not a choice among a few answers")
    if moves not in problem.search_moves:
        raise ValueError(f"moves must be one of {', '.join(problem.search_moves)} for "
                         f"problem {problem.name!r}, got {moves!r}")
    problem.check_trace_policy(policy)  # the start's decisions must be recorded
    names = [job.module for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate module names in the job list")
    metric = check_metric(base.size_metric)  # sizes, baselines and the summary all use it
    recorded = {
        **dict(settings or {}),
        "policy": policy.name, "budget": budget, "seed": seed, "batch": batch,
        "size_metric": metric, "compiler": compiler.describe(),
        "edits": edits_json(base.edits), "problem": base.problem.name,
        # only when not the default, so searches made before moves existed still resume
        **({"moves": moves} if moves != "single" else {}),
        **({"answers": answers} if answers != DEFAULT_ANSWERS else {}),
    }  # fmt: skip
    store = (_Store(Path(output_dir), recorded, restart, problem) if output_dir is not None
             else None)
    if store is not None:
        for name in names:
            module_log_path(store.root, name)  # refuse unusable names before compiling
    digests = {job.module: job.input_digest() for job in jobs} if store is not None else {}

    finished: dict[str, ModuleSearch] = {}
    todo: list[CompileJob] = []
    for job in jobs:
        reused = store.reuse(job.module, digests[job.module]) if store is not None else None
        if reused is not None:
            finished[job.module] = reused
        else:
            todo.append(job)

    total_units, done_units = budget * len(todo), 0

    def advance(units: int) -> None:
        nonlocal done_units
        done_units += units
        if on_progress is not None:
            on_progress(done_units, total_units)

    def finish(outcome: ModuleSearch, units_left: int) -> None:
        finished[outcome.module] = outcome
        if store is not None:
            store.save(outcome, digests[outcome.module])
        advance(units_left)  # budget a module did not need

    advance(0)
    searchers: list[_Searcher] = []
    baselines = {r.module: r for r in baseline_results(executor, todo, compiler, spec=base)}
    for job in todo:
        b = baselines.get(job.module)
        if b is None or not b.ok or b.size is None:
            why = (b.error if b is not None else None) or "no result"
            finish(ModuleSearch(job.module, None, None, None, 0, 0, error=f"baseline: {why}"),
                   budget)
        else:
            searchers.append(_Searcher(job, problem, policy, b, budget, seed, batch, moves,
                                       answers))

    round_no = 0
    while searchers:
        proposals = {s.module: s.propose() for s in searchers}
        for s in [s for s in searchers if s.done]:  # nothing left to try
            finish(s.outcome(), s.budget - s.used)
        searchers = [s for s in searchers if not s.done]
        if not searchers:
            break
        tables: dict[str, tuple[str, bytes]] = {}
        cand_jobs: list[CompileJob] = []
        slots: dict[str, tuple[str, int]] = {}
        for s in searchers:
            for k, (_, table) in enumerate(proposals[s.module]):
                name = f"{s.module}@{round_no}.{k}"  # unique per candidate: results map back
                tables[name] = (s.module, table)
                slots[name] = (s.module, k)
                cand_jobs.append(dataclasses.replace(s.job, module=name))
        round_spec = dataclasses.replace(base, policy=ReplayPolicy(policy, tables), record=True)
        got: dict[str, dict[int, ModuleResult]] = {s.module: {} for s in searchers}
        by_module = {s.module: s for s in searchers}
        for res in executor.run(round_spec, cand_jobs):
            module, k = slots[res.module]
            res = dataclasses.replace(res, module=module)
            if not by_module[module].beats_best(res):
                # only a compile that beats the best can need its trajectory: a round
                # holds one result per candidate of the whole corpus
                res = dataclasses.replace(res, trajectory=None)
            got[module][k] = res
            advance(1)
        for s in searchers:
            props = proposals[s.module]
            s.absorb([(p, got[s.module].get(k) or ModuleResult(s.module, None, error="no result"))
                      for k, (p, _) in enumerate(props)])
            if s.done:
                finish(s.outcome(), s.budget - s.used)
        searchers = [s for s in searchers if not s.done]
        round_no += 1

    report = SearchReport(recorded, tuple(finished[n] for n in sorted(finished)), problem)
    if store is not None:
        store.complete()
    return report


# --- the output directory ------------------------------------------------------------------


class _Store:
    """`search.json` and one log per module, updated as modules finish."""

    def __init__(self, root: Path, settings: Mapping[str, Any], restart: bool,
                 problem: Problem) -> None:
        self.root, self.problem = root, problem
        self.settings = json.loads(json.dumps(settings))  # as it reads back from the file
        self.records: dict[str, dict[str, Any]] = {}
        if root.exists() and not root.is_dir():
            raise SearchDirError(f"{root} exists and is not a directory")
        summary = root / SUMMARY_FILE
        if summary.is_file() and not restart:
            self.records = self._load(summary)
        elif root.is_dir() and any(root.iterdir()) and not summary.is_file():
            raise SearchDirError(f"{root} is not empty and holds no {SUMMARY_FILE}: not a "
                                 "search directory; choose another one")
        elif restart and summary.is_file():
            for module in self._old_modules(summary):
                module_log_path(root, module).unlink(missing_ok=True)
            summary.unlink()

    def _load(self, summary: Path) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(summary.read_text())
        except (OSError, ValueError) as exc:
            raise SearchDirError(f"{summary}: unreadable ({exc}); use restart") from exc
        if not isinstance(doc, dict) or doc.get("format") != SEARCH_FORMAT:
            raise SearchDirError(f"{summary}: not a {SEARCH_FORMAT} summary")
        old = doc.get("settings") or {}
        if old.get("size_metric") != self.settings["size_metric"]:
            raise SearchDirError(
                f"{self.root} was searched measuring sizes as {old.get('size_metric')!r}, "
                f"this run measures {self.settings['size_metric']!r}: bytes of two metrics "
                "cannot be compared or mixed in one summary; use another output directory "
                "(or restart to discard it)"
            )
        changed = sorted(k for k in set(old) | set(self.settings)
                         if old.get(k) != self.settings.get(k))
        if changed:
            diff = ", ".join(f"{k}: {old.get(k)!r} -> {self.settings.get(k)!r}"
                             for k in changed)
            raise SearchDirError(f"{self.root} was searched with other settings ({diff}); "
                                 "use another output directory (or restart to discard it)")
        modules = doc.get("modules")
        return dict(modules) if isinstance(modules, dict) else {}

    @staticmethod
    def _old_modules(summary: Path) -> Iterable[str]:
        try:
            modules = json.loads(summary.read_text()).get("modules") or {}
        except (OSError, ValueError, AttributeError):
            return []
        return [m for m in modules if isinstance(m, str)]

    def reuse(self, module: str, digest: str) -> ModuleSearch | None:
        """The module's finished search, if it is here for this input; else None."""
        rec = self.records.get(module)
        if not isinstance(rec, dict) or rec.get("error") or rec.get("input_sha256") != digest:
            return None
        log = module_log_path(self.root, module)
        if not log.is_file():
            # a module the compiler asked nothing about has no log (as in a trace)
            return (ModuleSearch.from_json(module, rec, self.problem)
                    if rec.get("decisions") == 0 and not self.problem.always_asks else None)
        _, traj, _ = read_trace_log(log)
        return ModuleSearch.from_json(module, rec, self.problem, traj)

    def save(self, outcome: ModuleSearch, digest: str) -> None:
        """Write the module's log (the best trajectory), then its record."""
        log = module_log_path(self.root, outcome.module)
        error = outcome.error
        if error is None and outcome.trajectory is not None:
            reward = outcome.reward_of(self.problem)
            if reward is None:
                error = (f"{self.problem.baseline_label} has no bytes but the best has "
                         f"{outcome.best_bytes}: no relative reward")
            else:
                write_atomic(log, trajectory_log_bytes(outcome.trajectory, reward,
                                                       self.problem.trace_advice))
        if error is not None or outcome.trajectory is None:
            log.unlink(missing_ok=True)  # an earlier attempt's
        self.records[outcome.module] = {**outcome.to_json(self.problem), "error": error,
                                        "input_sha256": digest}
        self._write(complete=False)

    def complete(self) -> None:
        self._write(complete=True)

    def _write(self, *, complete: bool) -> None:
        mods = [ModuleSearch.from_json(m, r, self.problem)
                for m, r in sorted(self.records.items())]
        doc = SearchReport(self.settings, tuple(mods), self.problem).to_json()
        for m, r in doc["modules"].items():
            r["input_sha256"] = self.records[m]["input_sha256"]
        doc["complete"] = complete
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        write_atomic(self.root / SUMMARY_FILE, text.encode())

