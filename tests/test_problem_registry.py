"""The problem registry, and the rule that nothing above `problems/` branches on a problem's
name: it works through the `Problem` the registry gives it."""

from __future__ import annotations

import argparse
import ast
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from pymlgo.cli.main import build_parser
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.policy.store import PolicyLoadError, load_policy
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob, CompileSettings, Decide
from pymlgo.problems.regalloc.advice import valid_priority
from pymlgo.problems.registry import UnknownProblemError
from pymlgo.workers.protocol import WorkSpec

PACKAGE = Path(__file__).resolve().parent.parent / "pymlgo"
PROBLEMS_DIR = PACKAGE / "problems"
# Every name a problem has or is planned to have, registered or not yet.
PROBLEM_NAMES = frozenset({"inlining", "regalloc", "regalloc-evict", "regalloc-priority",
                           *registry.names()})
# The registered Problem objects by the names their modules bind them to: comparing with one
# (`problem is INLINING`) is a branch on the problem as much as comparing its name.
PROBLEM_OBJECTS = frozenset({"INLINING", "REGALLOC_EVICT", "REGALLOC_PRIORITY"})


def _mentions(node: ast.AST, aliases: set[str]) -> bool:
    """`node` is a problem name: the string itself, a constant bound to it, the `name` of a
    registered problem object (`INLINING.name`), or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in PROBLEM_NAMES
    if isinstance(node, ast.Name):
        return node.id in aliases
    if isinstance(node, ast.Attribute):
        return node.attr in aliases or (node.attr == "name" and _mentions(node.value, aliases))
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_mentions(e, aliases) for e in node.elts)
    return False


def name_branches(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for every place `source` compares or dispatches on a problem's name:
    comparisons (==, !=, in, is), match cases, dict tables keyed by a name, and argparse
    `choices=` lists written out by hand."""
    tree = ast.parse(source)
    aliases = set(PROBLEM_OBJECTS) | {
        t.id if isinstance(t, ast.Name) else t.attr
        for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None and _mentions(node.value, set())
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, (ast.Name, ast.Attribute))
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                _mentions(n, aliases) for n in (node.left, *node.comparators)):
            yield node.lineno, "comparison"
        elif isinstance(node, ast.match_case) and any(
                isinstance(p, ast.MatchValue) and _mentions(p.value, aliases)
                for p in ast.walk(node.pattern)):
            yield node.pattern.lineno, "match case"
        elif isinstance(node, ast.Dict) and any(
                k is not None and _mentions(k, aliases) for k in node.keys):
            yield node.lineno, "table keyed by name"
        elif isinstance(node, ast.keyword) and node.arg == "choices" and _mentions(
                node.value, aliases):
            yield node.value.lineno, "hand-written choices"


def test_no_module_above_problems_branches_on_a_problem_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PROBLEMS_DIR in path.parents:
            continue
        for line, what in name_branches(path.read_text()):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not found, "branch on a problem name outside pymlgo/problems/ (use the Problem " \
        "from problems.registry):\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'if spec.problem == "regalloc":\n    pass\n',
    'x = args.problem in ("inlining", "regalloc-evict")\n',
    'PROBLEM = "inlining"\nok = tag != PROBLEM\n',
    'match name:\n    case "regalloc-priority":\n        pass\n',
    'RUNNERS = {"inlining": run}\n',
    'p.add_argument("--problem", choices=["inlining", "regalloc"])\n',
    'from pymlgo.problems.inlining.problem import INLINING\nif problem is INLINING:\n    pass\n',
    'if spec.problem == registry.REGALLOC_EVICT:\n    pass\n',
    'if info.get("problem") != INLINING.name:\n    pass\n',
    'p.add_argument("--problem", default=INLINING.name, choices=[INLINING.name])\n',
    'ok = tag in (REGALLOC_PRIORITY.name, "x")\n',
])
def test_the_scan_finds_every_kind_of_branch_on_a_name(source):
    assert list(name_branches(source))


@pytest.mark.parametrize("source", [
    'help = "inlining, or regalloc: the allocator"\n',  # prose is not a branch
    'p.add_argument("--problem", choices=registry.names())\n',
    'if spec.problem is problem:\n    pass\n',
    'if info.get("problem") != problem.name:\n    pass\n',  # the problem at hand
    'summary = {"problem": INLINING.name}\n',  # recording a name is not branching on it
])
def test_the_scan_leaves_prose_and_registry_lookups_alone(source):
    assert not list(name_branches(source))


def _problem_choices(command: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if a.dest == "problem")
    return list(action.choices)


@pytest.mark.parametrize("command", ["eval", "train"])
def test_the_cli_offers_every_registered_name(command):
    assert _problem_choices(command) == registry.names()


def test_regalloc_is_an_alias_of_regalloc_evict():
    assert registry.problem("regalloc") is registry.problem("regalloc-evict")
    assert registry.problem("regalloc-evict").name == "regalloc-evict"
    assert WorkSpec(problem="regalloc").problem.name == "regalloc-evict"
    assert WorkSpec().problem is registry.DEFAULT


def test_names_are_unique_across_problems():
    every = [n for p in registry.PROBLEMS for n in (p.name, *p.aliases)]
    assert len(every) == len(set(every)) == len(registry.names())


def test_an_unknown_problem_is_refused_with_the_known_names():
    with pytest.raises(UnknownProblemError, match="'vectorize'.*inlining"):
        registry.problem("vectorize")
    with pytest.raises(ValueError, match="unknown problem"):
        WorkSpec(problem="vectorize")


@pytest.mark.parametrize("problem", registry.PROBLEMS, ids=lambda p: p.name)
def test_a_problem_travels_to_workers_by_name(problem):
    blob = pickle.dumps(WorkSpec(problem=problem))
    assert pickle.loads(blob).problem is problem
    assert len(pickle.dumps(problem)) < 200  # its name, not its state


@dataclass(frozen=True)
class WeightPriority:
    """Reads every feature LLVM's priority advisor sends; answers the live range's weight."""

    advisor: str = "priority"
    name: str = "weight"
    required_features: tuple[str, ...] = ("li_size", "stage", "weight")

    def for_module(self, module: str) -> Decide:
        return lambda features: float(features["weight"].reshape(-1)[0])


@pytest.fixture(scope="module")
def small_job(demo_corpus_dir: Path) -> CompileJob:
    (job,) = corpus_jobs(load_corpus(demo_corpus_dir), ["zstd/lib/compress/hist"])
    return job


def test_regalloc_priority_names_its_own_policies():
    priority = registry.problem("regalloc-priority")
    assert getattr(load_policy("size", problem=priority), "advisor", None) == "priority"
    assert getattr(load_policy("random:3", problem=priority), "advisor", None) == "priority"
    assert load_policy("stage-size", problem=priority).name == "priority:stage-size"
    with pytest.raises(PolicyLoadError, match="evict advisor"):
        load_policy("no-evict", problem=priority)
    with pytest.raises(PolicyLoadError, match="priority advisor"):
        load_policy("priority:size", problem="regalloc")


def test_regalloc_priority_compiles_with_float_priorities_and_a_cost_reward(compiler,
                                                                           small_job):
    priority = registry.problem("regalloc-priority")
    res = priority.compile(compiler, small_job, WeightPriority(), CompileSettings(record=True))
    assert res.ok, res.error
    traj = res.trajectory
    assert res.decisions == len(traj) > 0
    assert traj.advice.dtype == np.float32
    assert traj.features["li_size"].dtype == traj.features["stage"].dtype == np.int64
    assert traj.features["weight"].dtype == np.float32
    # what was sent is the weight, made a valid priority (an infinite weight is clamped)
    weights = traj.features["weight"].reshape(-1)
    sent = np.array([valid_priority(w)[0] for w in weights], dtype=np.float32)
    assert np.array_equal(traj.advice.reshape(-1), sent)
    assert res.extra["invalid_advice"] == sum(valid_priority(w)[1] for w in weights)
    stock = priority.compile(compiler, small_job, None, CompileSettings())
    assert stock.ok and stock.decisions == 0 and stock.extra["weighted_cost"] >= 0
    assert np.isfinite(priority.reward(stock, res))
    assert priority.reward(stock, stock) == 0.0


def test_a_problem_refuses_a_policy_of_another_advisor(compiler, small_job):
    with pytest.raises(ValueError, match="priority advisor"):
        registry.problem("regalloc-evict").compile(compiler, small_job, WeightPriority(),
                                                   CompileSettings())
