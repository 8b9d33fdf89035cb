"""Populations under Anakin: swept hyperparameters and seeds as one axis of one program."""

import dataclasses
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import anakin
from anakin import AnakinConfig
from experiments import train as train_lib
from experiments.sweep import program_settings, split_population_args
from podracer.agents import PPOConfig
from podracer.config import Config, ConfigError, EnvConfig, PopulationConfig
from podracer.logging import read_jsonl
from podracer.population import make_population
from tests.experiments.test_train import StopAfter
from tests.support.helpers import assert_trees_equal, comparable, read_rows, subprocess_env

BASE = Config(env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2), total_env_steps=8 * 16 * 4,
              arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=2, num_seeds=2),
              log=dataclasses.replace(Config(agent=None, arch=None).log, console=False, tensorboard=False))
SWEEP = ("agent.learning_rate=1e-3,3e-3", "agent.entropy_coef=0.0,0.02")


def swept(config: Config, *sweep: str, samples: int = 0) -> Config:
    return dataclasses.replace(config, population=PopulationConfig(sweep=sweep, samples=samples))


def test_members_are_settings_times_seeds_setting_major():
    population = make_population(swept(BASE, *SWEEP))
    assert population.size == 8 and population.fields == ("learning_rate", "entropy_coef")
    assert [population.hypers(m) for m in (0, 1, 2, 7)] == [
        {"learning_rate": 1e-3, "entropy_coef": 0.0}, {"learning_rate": 1e-3, "entropy_coef": 0.0},
        {"learning_rate": 1e-3, "entropy_coef": 0.02}, {"learning_rate": 3e-3, "entropy_coef": 0.02}]
    assert [population.seed_of(m) for m in range(4)] == [0, 1, 0, 1]


def test_random_draws_come_from_the_run_seed_and_stay_in_range():
    config = swept(BASE, "agent.learning_rate=loguniform:1e-5:1e-2", "agent.gamma=0.9,0.99", samples=16)
    a, b = make_population(config), make_population(config)
    other = make_population(dataclasses.replace(config, seed=1))
    assert a.settings == b.settings != other.settings and len(a.settings) == 32
    rates = np.array([s[0] for s in a.settings])
    assert rates.min() >= 1e-5 and rates.max() <= 1e-2
    assert np.log10(rates).std() > 0.5  # spread over the decades, not clustered at one end


@pytest.mark.parametrize("sweep, message", [
    (("agent.learning_rat=1e-3,1e-4",), "'agent.learning_rat' is not a field.*did you mean agent.learning_rate"),
    (("env.id=CartPole-v1",), "not a field of the agent's config"),
    (("agent.learning_rate=-1e-3,1e-3",), "agent.learning_rate must be > 0, got -0.001"),
    (("agent.learning_rate=1e-3,abc",), "'abc' is not a number"),
    (("agent.hidden_sizes=32,64",), "agent.hidden_sizes is a tuple field"),
    (("agent.anneal_lr=0,1",), "agent.anneal_lr is a bool field"),
    (("agent.learning_rate=1e-3", "agent.learning_rate=1e-4"), "swept twice"),
    (("agent.learning_rate=loguniform:1e-5:1e-2",), "population.samples must be >= 1"),
    (("agent.learning_rate=loguniform:0:1e-2",), "LOW > 0"),
])
def test_bad_sweeps_are_errors_naming_the_field(sweep, message):
    with pytest.raises(ConfigError, match=message):
        make_population(swept(BASE, *sweep))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("field", ["num_epochs", "num_minibatches"])
def test_a_field_that_sets_shapes_or_control_flow_is_named_before_compiling(field):
    config = swept(BASE, "agent.learning_rate=1e-3,3e-3", f"agent.{field}=1,2")
    with pytest.raises(ConfigError, match=f"agent.{field} changes shapes or control flow: run settings separately"):
        anakin.runner.setup(config)


def test_sebulba_refuses_a_sweep_before_compiling():
    from experiments.presets import PRESETS
    from sebulba.runner import setup

    config = swept(PRESETS["ppo-cartpole-sebulba"](), "agent.learning_rate=1e-3,3e-3")
    with pytest.raises(ConfigError, match="population.sweep needs an Anakin preset"):
        setup(config)


def test_command_line_sweep_options_are_taken_out_of_the_overrides():
    rest, sweeps, samples, each = split_population_args(
        ["--sweep", "agent.learning-rate=1e-4,3e-4", "--seed", "3", "--sweep=agent.ent-coef=0,0.1",
         "--sweep-samples", "4", "--sweep-each", "agent.num-epochs=1,2"])
    assert rest == ["--seed", "3"] and samples == 4 and each == ["agent.num_epochs=1,2"]
    assert sweeps == ["agent.learning_rate=1e-4,3e-4", "agent.ent_coef=0,0.1"]
    with pytest.raises(ConfigError, match="--sweep takes one value"):
        split_population_args(["--sweep", "--seed", "3"])


def test_sweep_each_gives_one_validated_config_per_combination():
    settings = program_settings(BASE, ["agent.num_epochs=1,2", "agent.hidden_sizes=16;32,32"])
    assert [name for name, _ in settings] == ["num_epochs=1-hidden_sizes=16", "num_epochs=1-hidden_sizes=32x32",
                                              "num_epochs=2-hidden_sizes=16", "num_epochs=2-hidden_sizes=32x32"]
    assert [(c.agent.num_epochs, c.agent.hidden_sizes) for _, c in settings] == [
        (1, (16,)), (1, (32, 32)), (2, (16,)), (2, (32, 32))]
    assert program_settings(BASE, ["arch.num_envs=4,8"])[1][1].arch.num_envs == 8
    with pytest.raises(ConfigError, match="agent.num_epochs"):
        program_settings(BASE, ["agent.num_epochs=0,1"])
    with pytest.raises(ConfigError, match="unknown field 'agent.num_epoch'.*agent.num_epochs"):
        program_settings(BASE, ["agent.num_epoch=1,2"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sweep_each_trains_one_program_per_setting_into_sub_directories(tmp_path):
    from experiments.sweep import train_each

    config = swept(dataclasses.replace(BASE, run_dir=str(tmp_path / "runs"), total_env_steps=8 * 16 * 2),
                   "agent.learning_rate=1e-3,3e-3")
    results = train_each(config, ["agent.num_epochs=1,2"], "test")
    assert [os.path.basename(r.run_dir) for r in results] == ["num_epochs=1", "num_epochs=2"]
    for result in results:
        assert len(read_rows(result.run_dir)[-1]["members"]) == 4  # 2 learning rates x 2 seeds


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_member_equals_the_run_of_its_setting_alone():
    """Member (setting i, seed s) of a sweep ends with the parameters, environments and
    keys of seed s of the run of setting i alone (same run seed), up to float rounding:
    the swept values are traced, the rest of the program is the same."""
    population = anakin.train(swept(BASE, *SWEEP))
    for member, (lr, ent) in ((0, (1e-3, 0.0)), (5, (3e-3, 0.0)), (7, (3e-3, 0.02))):
        alone = anakin.train(dataclasses.replace(BASE, agent=PPOConfig(num_minibatches=2, learning_rate=lr,
                                                                        entropy_coef=ent)))
        seed = member % 2
        pick = lambda tree, i: jax.tree.map(lambda x: np.asarray(x)[i], tree)  # noqa: E731
        for a, b in zip(jax.tree.leaves(pick((alone.state.agent, alone.state.envs), seed)),
                        jax.tree.leaves(pick((population.state.agent, population.state.envs), member))):
            if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
                a, b = jax.random.key_data(a), jax.random.key_data(b)
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-4, atol=1e-5)
    members = population.metrics[-1]["members"]
    assert [m["member"] for m in members] == list(range(8))
    assert members[5] == {"member": 5, "setting": 2, "seed": 1, "hypers": {"entropy_coef": 0.0, "learning_rate": 0.003},
                          "episode_return": members[5]["episode_return"]}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sweep_stopped_and_resumed_is_exact(tmp_path):
    config = swept(dataclasses.replace(BASE, total_env_steps=8 * 16 * 6), *SWEEP)
    full = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "full")))
    run_dir = tmp_path / "stopped"
    first = train_lib.train(dataclasses.replace(config, run_dir=str(run_dir)), should_stop=StopAfter(1))
    assert first.stopped
    last = train_lib.resume(str(run_dir))
    assert not last.stopped
    assert_trees_equal(last.state, full.state)  # agents, environments, keys and hyperparameters
    assert comparable(read_rows(run_dir)) == comparable(read_rows(tmp_path / "full"))


@pytest.mark.timeout(120)
@pytest.mark.costly
def test_the_command_line_sweep_errors_are_one_line_with_status_2():
    for args, message in ((["--sweep", "agent.learning-rat=1e-3,1e-4"], "did you mean agent.learning_rate"),
                          (["--sweep", "agent.num-epochs=1,2"], "agent.num_epochs changes shapes or control flow")):
        done = subprocess.run([sys.executable, "-m", "podracer", "train", "ppo-catch-anakin", *args,
                               "--total-env-steps", "2048"], capture_output=True, text=True, env=subprocess_env(),
                              timeout=100)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_pbt_bottom_members_copy_top_ones_within_the_sweep_range_reproducibly():
    from podracer.pbt import exploit_and_explore

    config = dataclasses.replace(swept(BASE, "agent.learning_rate=1e-4,1e-3,1e-2,1e-1", "agent.gamma=0.9,0.99"),
                                 population=PopulationConfig(sweep=("agent.learning_rate=1e-4,1e-3,1e-2,1e-1",
                                                                    "agent.gamma=0.9,0.99"), pbt_every=1))
    population = make_population(config)  # 8 settings x 2 seeds
    hypers = population.initial_arrays()
    scores = [float(m) for m in range(16)]
    scores[3] = None  # no episode ended: ranked last
    step = exploit_and_explore(population, config.population, scores, hypers, updates=7, seed=0)
    again = exploit_and_explore(population, config.population, scores, hypers, updates=7, seed=0)
    other = exploit_and_explore(population, config.population, scores, hypers, updates=8, seed=0)
    assert step.event == again.event != other.event
    copied = {c["member"] for c in step.event["copies"]}
    assert copied == {0, 1, 2, 3}  # the bottom quarter
    assert {c["from"] for c in step.event["copies"]} <= set(range(12, 16))  # from the top quarter
    np.testing.assert_array_equal(step.sources[4:], np.arange(4, 16))
    for member in copied:
        assert 1e-4 <= step.hypers["learning_rate"][member] <= 1e-1 + 1e-9
        assert 0.9 - 1e-6 <= step.hypers["gamma"][member] <= 0.99 + 1e-6
    untouched = [m for m in range(16) if m not in copied]
    np.testing.assert_array_equal(step.hypers["learning_rate"][untouched], hypers["learning_rate"][untouched])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pbt_run_stopped_and_resumed_is_exact_and_logs_its_lineage(tmp_path):
    config = dataclasses.replace(swept(dataclasses.replace(BASE, total_env_steps=8 * 16 * 8),
                                       "agent.learning_rate=loguniform:1e-4:1e-2", samples=4),
                                 population=PopulationConfig(sweep=("agent.learning_rate=loguniform:1e-4:1e-2",),
                                                             samples=4, pbt_every=2))
    full = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "full")))
    run_dir = tmp_path / "stopped"
    assert train_lib.train(dataclasses.replace(config, run_dir=str(run_dir)), should_stop=StopAfter(2)).stopped
    last = train_lib.resume(str(run_dir))
    assert_trees_equal(last.state, full.state)  # the same copies and hyperparameters after resuming
    assert comparable(read_rows(run_dir)) == comparable(read_rows(tmp_path / "full"))
    lineage = read_jsonl(str(run_dir / "lineage.jsonl"))
    assert lineage == read_jsonl(str(tmp_path / "full" / "lineage.jsonl"))
    assert [event["updates"] for event in lineage] == [2, 4, 6]
    assert all(len(event["copies"]) == 2 for event in lineage)  # a quarter of 8 members


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """A small sweep (2 settings x 2 seeds) trained to its end, with a checkpoint."""
    run_dir = tmp_path_factory.mktemp("population") / "sweep"
    config = swept(dataclasses.replace(BASE, run_dir=str(run_dir)), "agent.learning_rate=1e-3,3e-3")
    return str(run_dir), train_lib.train(config)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_members_are_addressable_by_evaluate_plot_and_warm_start(sweep_run, capsys, tmp_path):
    import json

    from tests.support.helpers import assert_one_line_error, run_main

    run_dir, result = sweep_run
    code, out = run_main(capsys, "evaluate", run_dir, "--member", 3, "--episodes", 2, "--json")
    assert code == 0, out.err
    evaluated = json.loads(out.out)
    assert evaluated["member"] == 3 and evaluated["hypers"] == {"learning_rate": 3e-3}
    assert_one_line_error(*run_main(capsys, "evaluate", run_dir, "--member", 4), "--member", "[0, 4)")
    code, out = run_main(capsys, "plot", run_dir, "--by", "setting", "--out", tmp_path / "settings.png")
    assert code == 0 and (tmp_path / "settings.png").stat().st_size > 0, out.err
    code, out = run_main(capsys, "plot", run_dir, "--lineage", "--out", tmp_path / "lineage.png")  # no PBT: flat
    assert code == 0 and (tmp_path / "lineage.png").stat().st_size > 0, out.err
    # Every member of a new run starts from member 3's parameters.
    from podracer.runner.warm_start import warm_params

    params = jax.tree.map(lambda x: x[:2] * 0, result.state.agent.params)
    warm = warm_params(params, run_dir, seed_axis=True, member=3)
    for new, old in zip(jax.tree.leaves(warm), jax.tree.leaves(result.state.agent.params)):
        if jax.numpy.issubdtype(new.dtype, jax.numpy.floating):
            np.testing.assert_array_equal(np.asarray(new)[1], np.asarray(old)[3])
    with pytest.raises(ConfigError, match="checkpoint.init_member must be in \\[0, 4\\)"):
        warm_params(params, run_dir, seed_axis=True, member=4)
