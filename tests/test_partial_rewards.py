"""Partial rewards for PPO: each inlining decision is credited with its caller's
IR2Native-estimated size change vs -Oz, and an episode's shaped rewards sum to its final
reward. The compile-side tests and the training run use the real compiler on demo modules.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.ir2native.dataset import build_dataset
from pymlgo.ir2native.estimates import decision_callers, from_extra
from pymlgo.ir2native.model import IR2NativeModel
from pymlgo.ir2native.train import fit
from pymlgo.problems.base import CompileSettings
from pymlgo.problems.inlining.compile import compile_baseline, compile_with_policy
from pymlgo.problems.inlining.policies import HeuristicPolicy, RandomPolicy
from pymlgo.train import trainer
from pymlgo.train.config import ConfigError, make_config, to_dict
from pymlgo.train.env import Episode, TrainEnv
from pymlgo.train.shaping import IR2NativeShaper, caller_rewards, returns_to_go, shaped_rewards
from pymlgo.workers import WorkSpec, make_executor
from tests.test_train_algorithms import copy_demo_subset

MODULES = ("zstd/lib/compress/hist", "zstd/lib/common/entropy_common",
           "brotli/c/enc/histogram", "zstd/lib/compress/zstd_compress_sequences")


# --- the arithmetic ---------------------------------------------------------------------


def test_decisions_share_their_callers_estimated_change_and_sum_to_the_final_reward():
    callers = ["f", "g", "f", "h"]
    est = {"f": 130.0, "g": 90.0, "h": 50.0}
    est_oz = {"f": 100.0, "g": 100.0, "h": 50.0}
    r = shaped_rewards(callers, est, est_oz, baseline_bytes=1000, final_reward=-0.05,
                       decisions=4)
    # f grew by 30 estimated bytes over its 2 decisions, g shrank by 10, h is unchanged
    assert r[0] == pytest.approx(-0.015) and r[2] == pytest.approx(-0.015)
    assert r[1] == pytest.approx(0.01)
    # the last decision also carries what the estimates do not explain
    assert r[3] == pytest.approx(0.0 + (-0.05 - (-0.015 - 0.015 + 0.01)))
    assert r.sum() == pytest.approx(-0.05)


def test_a_function_missing_from_a_compile_counts_as_zero_bytes():
    r = shaped_rewards(["f"], {}, {"f": 40.0}, 400, 0.1, 1)  # f was deleted: 40 bytes saved
    assert r.sum() == pytest.approx(0.1)
    assert caller_rewards(["f"], {}, {"f": 40.0}, 400)[0] == pytest.approx(0.1)


def test_without_callers_the_whole_reward_arrives_on_the_last_decision():
    r = shaped_rewards(None, {}, {}, 1000, 0.02, 3)
    assert r.tolist() == [0.0, 0.0, pytest.approx(0.02)]
    assert shaped_rewards(["f", "g"], {}, {}, 1000, 0.02, 3).tolist()[:2] == [0.0, 0.0]
    assert len(shaped_rewards(None, {}, {}, 1000, 0.0, 0)) == 0


def test_undiscounted_returns_are_what_is_left_to_gain_from_each_decision_on():
    assert returns_to_go(np.array([1.0, -2.0, 0.5])).tolist() == [-0.5, -1.5, 0.5]
    assert returns_to_go(np.array([1.0, 1.0]), gamma=0.5).tolist() == [1.5, 1.0]


def test_decision_callers_skip_remarks_that_answer_no_decision():
    text = """--- !Passed
Pass:            inline-ml
Name:            InliningSuccess
Function:        outer
Args:
  - Callee:          leaf
  - callee_users:    '2'
...
--- !Missed
Pass:            inline-ml
Name:            ForceStop
Function:        outer
...
--- !Missed
Pass:            inline-ml
Name:            IniningNotAttempted
Function:        main
Args:
  - Callee:          outer
  - callee_users:    '1'
...
"""
    assert decision_callers(text.splitlines()) == ["outer", "main"]


# --- configuration ----------------------------------------------------------------------


def test_partial_rewards_is_a_checked_ppo_option_left_out_of_provenance_when_off():
    with pytest.raises(ConfigError, match="partial_rewards"):
        make_config(algo="ppo", partial_rewards="ir2nativ")
    with pytest.raises(ConfigError, match="needs algo = 'ppo'"):
        make_config(algo="es", partial_rewards="ir2native")
    with pytest.raises(ConfigError, match="baseline"):
        make_config(algo="ppo", partial_rewards="ir2native", ppo={"baseline": "moving_average"})
    with pytest.raises(ConfigError, match="only used with"):
        make_config(algo="ppo", ir2native_model="m.json")
    # off: the saved config (policy provenance) is what it was before the option existed
    assert "partial_rewards" not in to_dict(make_config(algo="ppo"))
    on = make_config(algo="ppo", partial_rewards="ir2native", ir2native_model="m.json")
    assert make_config(**to_dict(on)) == on


def test_the_command_line_sets_partial_rewards():
    from pymlgo.cli.main import build_parser
    from pymlgo.cli.train import config_from_args

    args = build_parser().parse_args(["train", "--output_dir", "o", "--algo", "ppo",
                                      "--partial-rewards", "ir2native",
                                      "--ir2native-model", "m.json"])
    cfg = config_from_args(args)
    assert (cfg.partial_rewards, cfg.ir2native_model) == ("ir2native", "m.json")


# --- the real compiler ------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(demo_corpus_dir, tmp_path_factory):
    return load_corpus(copy_demo_subset(demo_corpus_dir, tmp_path_factory.mktemp("pr") / "c",
                                        MODULES))


@pytest.fixture(scope="module")
def model(corpus, compiler) -> IR2NativeModel:
    return fit(build_dataset(compiler, corpus_jobs(corpus, corpus.names)))


def test_a_compile_with_an_estimator_names_every_decisions_caller(corpus, compiler, model):
    job = corpus_jobs(corpus, ["zstd/lib/compress/hist"])[0]
    plain = compile_with_policy(compiler, job, HeuristicPolicy())
    res = compile_with_policy(compiler, job, HeuristicPolicy(), CompileSettings(record=True),
                              estimator=model)
    assert res.ok and res.size == plain.size  # the extra flags do not change the code
    assert res.trajectory is not None and len(res.trajectory) == res.decisions == 12
    est = from_extra(res.extra)
    assert set(res.trajectory.contexts) <= set(est)  # every caller is a function we estimate
    assert "HIST_count_parallel_wksp" in res.trajectory.contexts
    # clang's own decisions through the channel leave the same IR as plain -Oz: every
    # function's estimate is the same, so nothing is credited and the reward is 0
    oz = compile_baseline(compiler, job, estimator=model)
    assert oz.size == plain.size and from_extra(oz.extra) == est
    ep = Episode(job.module, 0, oz.size, res.size, res.decisions,
                 actions=np.zeros(res.decisions, dtype=np.int64),
                 callers=tuple(res.trajectory.contexts), estimates=est)
    assert IR2NativeShaper({job.module: est})(ep).tolist() == [0.0] * 12


def test_a_ppo_iteration_with_partial_rewards_credits_decisions_differently(
        corpus, tmp_path):
    config = make_config(algo="ppo", seed=0, warmstart="", iterations=1,
                         partial_rewards="ir2native",
                         split={"validation": 0.0, "heldout": 0.0},
                         policy={"hidden": [8]},
                         ppo={"modules_per_iteration": 4, "samples_per_module": 2})
    out = tmp_path / "run"
    result = trainer.train(config, corpus, out, options=trainer.RunOptions(
        workers=2, progress=False, tensorboard=False))
    assert result.iterations == 1 and (out / "best").is_dir()
    assert (out / trainer.IR2NATIVE_FILE).is_file()  # fitted on the training split
    row = [json.loads(ln) for ln in (out / "scalars.jsonl").read_text().splitlines()][-1]
    assert row["shaping/mapped_episodes"] == 1.0
    assert row["shaping/reward_std"] > 0  # decisions of an episode got different rewards
    assert row["ppo/decisions"] > 0


def test_per_decision_rewards_of_a_sampled_episode_differ(corpus, compiler, model):
    jobs = {j.module: j for j in corpus_jobs(corpus, corpus.names)}
    with make_executor(None, 2) as ex:
        baselines = {r.module: r.size for r in ex.run(WorkSpec(), list(jobs.values()))}
        env = TrainEnv(ex, WorkSpec(), jobs, baselines)
        shaper = trainer.partial_reward_shaper(env, model, lambda _: None)
        (ep,) = env.run([RandomPolicy(p=0.5, seed=7)],
                        ["zstd/lib/compress/zstd_compress_sequences"], record=True)
    r = shaper(ep)
    assert shaper.mapped(ep) and len(r) == ep.decisions > 1
    assert r.sum() == pytest.approx(ep.reward)
    assert len(set(np.round(r, 12))) > 1


def test_a_missing_model_file_is_a_clear_error(corpus, tmp_path):
    config = make_config(algo="ppo", warmstart="", iterations=1, partial_rewards="ir2native",
                         ir2native_model=str(tmp_path / "nope.json"),
                         split={"validation": 0.0, "heldout": 0.0}, policy={"hidden": [8]},
                         ppo={"modules_per_iteration": 2, "samples_per_module": 2})
    with pytest.raises(trainer.TrainError, match="cannot read IR2Native model.*ir2native train"):
        trainer.train(config, corpus, tmp_path / "run", options=trainer.RunOptions(
            workers=1, progress=False, tensorboard=False))
    assert not (tmp_path / "run").exists()
