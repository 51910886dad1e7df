"""Training configuration: typed dataclasses, TOML with unknown keys rejected, CLI on top."""

from __future__ import annotations

import pytest

from pymlgo.cli.main import build_parser
from pymlgo.cli.train import config_from_args
from pymlgo.train.config import (
    DEFAULT_ITERATIONS,
    ConfigError,
    TrainConfig,
    load_config,
    make_config,
    to_dict,
)


def write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_toml_sets_nested_tables_and_keeps_defaults_elsewhere(tmp_path):
    cfg = load_config(write(tmp_path, """
        algo = "ppo"
        seed = 7
        [split]
        by = "package"
        [ppo]
        clip = 0.1
        baseline = "moving_average"
        [policy]
        hidden = [16, 8]
    """))
    assert (cfg.algo, cfg.seed, cfg.split.by) == ("ppo", 7, "package")
    assert cfg.ppo.clip == 0.1 and cfg.ppo.baseline == "moving_average"
    assert cfg.policy.hidden == (16, 8)
    assert cfg.es == TrainConfig().es


@pytest.mark.parametrize("text, message", [
    ('algo = "es"\nlearning_rate = 0.1', "unknown key.*learning_rate"),
    ('[es]\npopulaton = 4', r"unknown key.*es\.populaton.*population"),
    ('[esx]\npopulation = 4', "unknown key.*esx"),
    ('[es]\npopulation = "many"', "es.population must be an integer"),
    ('[es]\nrank_fitness = 1', "must be true or false"),
    ('algo = "sgd"', "algo must be one of"),
    ('[split]\nby = "file"', "split.by must be one of"),
    ('[policy]\nhidden = 40', "policy.hidden must be a list"),
    ('eval_every = 0', "eval_every must be >= 1"),
    ('sample_by = "file"', "sample_by must be one of"),
])
def test_a_bad_toml_value_or_unknown_key_is_an_error_naming_it(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("key, value, message", [
    ("sample_by", "file", "sample_by must be 'module', 'package' or 'baseline', not 'file'"),
    ("partial_rewards", "all", "partial_rewards must be 'none' or 'ir2native', not 'all'"),
    ("reward_weighting", "size", "reward_weighting must be 'default', 'module', 'bytes' or "
     "'cost', not 'size'"),
    ("out_of_range", "wrap", "out_of_range must be 'clip' or 'log', not 'wrap'"),
    ("select_by", "median", "select_by must be 'total' or 'package', not 'median'"),
])
def test_a_config_built_in_code_refuses_a_choice_its_type_does_not_list(key, value, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**{key: value})


def test_integers_are_accepted_where_floats_are_expected():
    cfg = make_config(es={"sigma": 1})
    assert cfg.es.sigma == 1.0 and isinstance(cfg.es.sigma, float)


def test_without_iterations_or_budget_the_default_iteration_count_applies():
    assert make_config().max_iterations == DEFAULT_ITERATIONS
    assert make_config(time_budget_minutes=2).max_iterations is None
    assert make_config(iterations=3, time_budget_minutes=2).max_iterations == 3


def test_identity_ignores_the_budget_so_a_resumed_run_may_extend_it():
    a = make_config(iterations=3)
    b = make_config(iterations=10, time_budget_minutes=5)
    assert a.identity() == b.identity()
    assert a.identity() != make_config(iterations=3, seed=1).identity()


def test_config_round_trips_through_a_plain_dict():
    cfg = make_config(algo="dqn", policy={"hidden": [8]}, dqn={"epsilon_start": 0.5})
    assert make_config(**to_dict(cfg)) == cfg
    assert make_config(**cfg.provenance()).identity() == cfg.identity()


def parse_train(*argv: str):
    return build_parser().parse_args(["train", "--output_dir", "out", *argv])


def test_command_line_flags_override_the_config_file(tmp_path):
    path = write(tmp_path, 'algo = "es"\nseed = 1\niterations = 5\n[es]\npopulation = 3')
    cfg = config_from_args(parse_train("--config", str(path), "--seed", "9",
                                       "--warmstart", "none"))
    assert (cfg.algo, cfg.seed, cfg.iterations, cfg.es.population) == ("es", 9, 5, 3)
    assert cfg.warmstart == ""


def test_an_inlining_trace_serves_the_setup_of_any_algorithm_and_warm_start():
    # its setup always needs clang's decisions (which modules have any; the vocab or the
    # warm start's feature check), so a trace saves recording them whatever is trained
    assert make_config(algo="es", warmstart="pretrained:inlining-oz", traces="t").traces == "t"
    assert make_config(algo="ppo", warmstart="", traces="t").traces == "t"


def test_no_warm_start_is_spelled_none_in_a_file_as_on_the_command_line(tmp_path):
    path = write(tmp_path, 'algo = "es"\nproblem = "regalloc-evict"\nwarmstart = "none"')
    assert load_config(path).warmstart == ""
    assert config_from_args(parse_train("--config", str(path))).warmstart == ""
    assert make_config(algo="es", warmstart="none").warmstart == ""


def test_algo_must_come_from_the_flag_or_the_file(tmp_path):
    with pytest.raises(ConfigError, match="--algo"):
        config_from_args(parse_train())
    assert config_from_args(parse_train("--algo", "bc", "--time-budget", "2")).algo == "bc"


def test_unknown_key_in_the_config_file_fails_mlgo_train(tmp_path, capsys):
    from pymlgo.cli.main import main

    path = write(tmp_path, 'algo = "es"\n[es]\nsgima = 0.1')
    assert main(["train", "--config", str(path), "--output_dir", str(tmp_path / "o")]) == 2
    assert "sgima" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_vocab_traces_and_compile_flags_come_from_the_file_and_flags_replace_them(tmp_path):
    path = write(tmp_path, """
        algo = "bc"
        vocab = "v"
        traces = "t"
        [compile]
        add_flags = ["-mllvm", "-inline-threshold=0"]
        delete_flags = ["-fno-unroll-loops"]
        replace_flags = [["x86-64", "haswell"]]
    """)
    cfg = config_from_args(parse_train("--config", str(path)))
    assert (cfg.vocab, cfg.traces) == ("v", "t")
    assert cfg.compile.flag_edits().add == ("-mllvm", "-inline-threshold=0")
    assert cfg.compile.flag_edits().replace == (("x86-64", "haswell"),)
    cfg = config_from_args(parse_train(
        "--config", str(path), "--traces", "t2", "--add-flag", "-mllvm -x=1",
        "--replace-flag=-mframe-pointer=none=-mframe-pointer=all",
        "--command-override", "-O2 -c"))
    assert cfg.traces == "t2"
    assert cfg.compile.add_flags == ("-mllvm", "-x=1")  # the flag replaces the file's list
    assert cfg.compile.delete_flags == ("-fno-unroll-loops",)  # not given: the file's
    assert cfg.compile.replace_flags == (("-mframe-pointer=none", "-mframe-pointer=all"),)
    assert cfg.compile.command_override == ("-O2", "-c")


@pytest.mark.parametrize("text", ["a=b=c", "=x", "x=", "nothing"])
def test_an_ambiguous_or_empty_flag_replacement_is_an_error(text):
    from pymlgo.cli.common import parse_replacement

    with pytest.raises(ValueError, match="OLD=NEW"):
        parse_replacement(text)


def test_config_keys_that_would_do_nothing_are_errors():
    with pytest.raises(ConfigError, match="quantiles does not apply with a vocab"):
        make_config(vocab="v", policy={"quantiles": 10})
    with pytest.raises(ConfigError, match="not both"):
        make_config(vocab="v", warmstart="pretrained:inlining-oz")
    with pytest.raises(ConfigError, match="traces are only used by behaviour cloning"):
        make_config(algo="es", problem="regalloc-evict", warmstart="", traces="t")
    with pytest.raises(ConfigError, match=r"\[old, new\] pairs"):
        make_config(compile={"replace_flags": [["a", "b", "c"]]})


def test_unused_new_keys_leave_the_saved_config_as_it_was():
    # policies published before vocab/traces/[compile] existed keep their provenance
    assert not {"vocab", "traces", "compile"} & set(to_dict(make_config()))
    # [policy] keys left out are saved as the defaults they stand for, as they always were
    assert make_config().provenance()["policy"] == {"hidden": [40, 40, 20],
                                                    "quantiles": 1000, "features": None}
    # ... unless the warm start or the vocab provides them
    assert make_config(warmstart="pretrained:x").provenance()["policy"]["hidden"] is None
    assert make_config(vocab="v").provenance()["policy"]["quantiles"] is None
    assert to_dict(make_config(vocab="v"))["vocab"] == "v"


def test_held_out_packages_can_be_named_and_validation_drawn_as_whole_packages():
    from pymlgo.train.config import ConfigError, make_config, to_dict

    cfg = make_config(algo="es", split={"by": "package", "heldout_packages": ["zlib", "re2"],
                                        "validation_by": "package"})
    assert cfg.split.heldout_packages == ("zlib", "re2")
    assert to_dict(cfg)["split"]["heldout_packages"] == ["zlib", "re2"]
    # at their defaults the keys stay out of a saved policy's provenance
    assert "heldout_packages" not in to_dict(make_config(algo="es"))["split"]
    with pytest.raises(ConfigError, match='split.by = "package"'):
        make_config(algo="es", split={"heldout_packages": ["zlib"]})


def test_validation_can_be_weighed_by_the_baseline_of_whole_packages_only():
    from pymlgo.train.config import ConfigError, make_config, to_dict

    cfg = make_config(algo="es", split={"by": "package", "validation_by": "package",
                                        "validation_weight": "baseline"})
    assert to_dict(cfg)["split"]["validation_weight"] == "baseline"
    # at its default the key stays out of a saved policy's provenance
    assert "validation_weight" not in to_dict(make_config(algo="es"))["split"]
    with pytest.raises(ConfigError, match='validation_by = "package"'):
        make_config(algo="es", split={"by": "package", "validation_weight": "baseline"})
    with pytest.raises(ConfigError, match="validation_weight"):
        make_config(algo="es", split={"by": "package", "validation_by": "package",
                                      "validation_weight": "cost"})


def test_select_by_and_split_seed_stay_out_of_a_saved_policys_provenance_at_default():
    from pymlgo.train.config import to_dict

    assert "select_by" not in to_dict(make_config(algo="es"))
    assert "seed" not in to_dict(make_config(algo="es"))["split"]
    assert to_dict(make_config(algo="es", select_by="package"))["select_by"] == "package"
    assert to_dict(make_config(algo="es", split={"seed": 3}))["split"]["seed"] == 3


def test_a_split_seed_is_part_of_what_a_run_is_set_up_for():
    assert (make_config(algo="es", split={"seed": 3}).setup_identity()
            != make_config(algo="es").setup_identity())


def test_a_split_seed_is_read_from_toml(tmp_path):
    assert load_config(write(tmp_path, "[split]\nseed = 3")).split.seed == 3
    with pytest.raises(ConfigError, match="seed"):
        load_config(write(tmp_path, '[split]\nseed = "three"'))


def test_an_ir2vec_vocabulary_counts_by_its_content_not_its_path(tmp_path):
    from pymlgo.ir2vec.vocab_file import file_sha256

    a = tmp_path / "a.json"
    a.write_text('{"Opcodes": {}}')
    b = tmp_path / "elsewhere.json"
    b.write_bytes(a.read_bytes())
    with_a = make_config(algo="es", policy={"ir2vec_vocab": str(a)})
    with_b = make_config(algo="es", policy={"ir2vec_vocab": str(b)})
    assert with_a.identity() == with_b.identity()
    assert with_a.provenance()["policy"]["ir2vec_vocab"] == f"sha256:{file_sha256(a)}"
    b.write_text("{}")
    assert with_a.setup_identity() != with_b.setup_identity()
    # a run without one keeps the provenance it always had
    assert "ir2vec_vocab" not in make_config(algo="es").provenance()["policy"]
    with pytest.raises(ConfigError, match="cannot read"):
        make_config(algo="es", policy={"ir2vec_vocab": str(tmp_path / "gone")}).identity()


def test_embeddings_are_asked_for_with_ir2vec_vocab_not_as_features_or_with_a_warm_start():
    with pytest.raises(ConfigError, match="policy.ir2vec_vocab"):
        make_config(algo="es", policy={"features": ["cost_estimate", "callee_embedding"]})
    with pytest.raises(ConfigError, match="brings its own IR2Vec"):
        make_config(algo="es", warmstart="runs/x/best", policy={"ir2vec_vocab": "v.json"})


def test_the_ir2vec_flag_sets_the_policy_key_beside_the_tomls_own(tmp_path):
    path = write(tmp_path, 'algo = "bc"\n[policy]\nhidden = [8]\n')
    cfg = config_from_args(parse_train("--config", str(path), "--ir2vec", "v.json"))
    assert cfg.policy.ir2vec_vocab == "v.json" and cfg.policy.hidden == (8,)


def test_reading_clangs_own_decision_is_one_policy_key_saved_only_when_set():
    from pymlgo.train.config import ConfigError, make_config, to_dict

    assert "reads_default" not in to_dict(make_config())["policy"]
    assert to_dict(make_config(policy={"reads_default": True}))["policy"]["reads_default"]
    with pytest.raises(ConfigError, match="list 'inlining_default' there"):
        make_config(policy={"reads_default": True, "features": ["callee_users"]})


def test_il_search_moves_are_saved_only_when_not_single_flips():
    from pymlgo.train.config import make_config, to_dict

    assert "il" not in to_dict(make_config(algo="il"))
    assert "moves" not in to_dict(make_config(algo="il", il={"budget": 8}))["il"]
    assert to_dict(make_config(algo="il", il={"moves": "callee"}))["il"]["moves"] == "callee"


def test_il_answers_are_saved_only_when_set_and_refused_where_a_decision_has_one_other():
    from pymlgo.train.config import make_config, to_dict

    assert "answers" not in to_dict(make_config(algo="il", il={"budget": 8}))["il"]
    evict = make_config(algo="il", problem="regalloc-evict", warmstart="", il={"answers": 5})
    assert to_dict(evict)["il"]["answers"] == 5
    with pytest.raises(ConfigError, match="il.answers .*does nothing for inlining"):
        make_config(algo="il", il={"answers": 5})
    with pytest.raises(ConfigError, match="il.answers must be >= 1"):
        make_config(algo="il", problem="regalloc-evict", warmstart="", il={"answers": 0})


def test_a_difference_input_is_one_policy_key_checked_at_once_and_saved_only_when_set():
    cfg = make_config(algo="es", policy={"differences": ["threshold-cost_estimate"]})
    assert cfg.policy.differences == ("threshold-cost_estimate",)
    assert cfg.provenance()["policy"]["differences"] == ["threshold-cost_estimate"]
    assert "differences" not in make_config(algo="es").provenance()["policy"]
    with pytest.raises(ConfigError, match="MINUEND-SUBTRAHEND"):
        make_config(algo="es", policy={"differences": ["threshold+cost_estimate"]})
    with pytest.raises(ConfigError, match="cost_estimate in policy.features"):
        make_config(algo="es", policy={"differences": ["threshold-cost_estimate"],
                                       "features": ["threshold", "callee_users"]})


def test_a_bc_teacher_is_an_inlining_rule_and_only_where_bc_runs():
    assert make_config(algo="bc", bc={"teacher": "shift:2:30:3"}).bc.teacher == "shift:2:30:3"
    assert "teacher" not in make_config(algo="bc").provenance()["bc"]
    with pytest.raises(ConfigError, match="built-in policy"):
        make_config(algo="bc", bc={"teacher": "pretrained:inlining-oz"})
    with pytest.raises(ConfigError, match="only used for behaviour cloning"):
        make_config(algo="es", warmstart="", bc={"teacher": "shift:2"})
    with pytest.raises(ConfigError, match="inlining' only"):
        make_config(algo="bc", problem="regalloc-evict", warmstart="",
                    bc={"teacher": "shift:2"})
    with pytest.raises(ConfigError, match="inlining' only"):
        make_config(algo="bc", problem="regalloc-evict", warmstart="",
                    policy={"differences": ["threshold-cost_estimate"]})
