"""Every config field exercised off its default, generated from the config classes.

For every field of every registered algorithm's config, of `AnakinConfig` and of the
`EnvConfig` fields a JAX environment reads, a short Anakin run with the field off its value
must end in a different state or different metrics than the run without the change, and
stay finite (`tests/support/off_default.py` derives the values from each field's annotation and
the config's own checks, and finds the setting where a field is meant to matter). No list
of fields is kept here: a new field is covered by these tests as soon as it exists, and
fails them if nothing it changes shows. The only list is `EXEMPT`: fields that cannot change
a short Anakin run, each with the reason and the test that covers it.

The `costly` checks (`-m "not slow or costly"`) run, per algorithm, the fields that are
traced values of one compiled program (every numeric hyperparameter a population can sweep:
rates, coefficients, discounts) as members of that program, and the architecture and
environment fields; the rest of the slow tier runs each algorithm's every field, including those that set shapes or branches
(one program each) and those that matter only with another field changed.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from anakin import AnakinConfig
from podracer.agents import algorithms
from podracer.config import Config, ConfigError, EnvConfig, LogConfig
from sebulba import SebulbaConfig
from sebulba import train as sebulba_train
from tests.support.off_default import (
    differs,
    env_for,
    numeric_fields,
    off_default_values,
    run,
    run_config,
    short_run_base,
    valid_replacement,
)
from tests.support.off_default_step import Measure, coverage, traceable_fields

# field -> why no short Anakin run can show it, and which test covers it.
EXEMPT = {
    "EnvConfig.id": "which environment runs: every test that names one covers it",
    "EnvConfig.backend": "chooses Sebulba's host environments (an Anakin run refuses a host backend): "
    "tests/envs/test_host.py",
    "EnvConfig.episodic_life": "EnvPool's Atari games only: tests/envs/test_host.py",
    "EnvConfig.reward_clip": "EnvPool's Atari games only: tests/envs/test_host.py",
    "EnvConfig.repeat_action_probability": "EnvPool's Atari games only: tests/envs/test_host.py",
    "EnvConfig.noop_max": "EnvPool's Atari games only: tests/envs/test_host.py",
    "EnvConfig.frame_skip": "EnvPool's Atari games only: tests/envs/test_host.py",
    "EnvConfig.frame_stack": "EnvPool's Atari games only: tests/envs/test_host.py",
    "DQNConfig.torso_options": "options of a registered torso, `name=value` entries named by that torso's own "
    "options class; the built-in registered torsos suit other observations than the probe environments': "
    "tests/core/test_extension_points.py::test_a_registered_torso_takes_its_options_from_the_config",
    "MuZeroConfig.learning_starts": "not shown by the cheapest step: MuZero learns once env steps reach "
    "max(learning_starts, a whole sequence of every environment), 17 env steps in the probe setting, above "
    "every value tried (1, 2, 4), which therefore leave the step as it is. A value above the threshold "
    "holds learning back: tests/agents/muzero/test_learning.py::test_replayed_sequences_end_where_the_environments_restarted "
    "(no gradient step at learning_starts 1e9); the schedule's threshold: "
    "tests/runner/test_runner.py::test_a_row_spanning_learning_starts_is_not_diluted",
    "EnvConfig.params": "names an environment's own parameters, no value fits every environment: "
    "tests/integration/test_properties.py::test_env_params_of_every_jax_environment",
}

ALGORITHMS = list(algorithms())
# The algorithms whose traced-field program takes longest to compile (a search, twin critics
# and a replay buffer): their traced fields run as members of one program only in the slow
# every-field check, which asserts the same finiteness and compares the same results.
COSTLY = ("muzero", "sac", "td3")


def uncovered(section: str, fields: list[str], covered: dict[str, str]) -> list[str]:
    return [f"{section}.{name}" for name in fields if name not in covered and f"{section}.{name}" not in EXEMPT]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in COSTLY])
@pytest.mark.costly
def test_traced_hyperparameters_off_default_change_the_run(name):
    """Each numeric field an algorithm reads as a traced value, at each off-default value
    its config accepts, runs as a member of one program beside the base config: every
    member stays finite, and the fields that matter in the base setting change its run
    (those that need another setting, e.g. a V-trace lambda under GAE, are the slow
    test's). Catches a rate or coefficient that is read and then dropped."""
    algorithm = algorithms()[name]
    base = short_run_base(algorithm.default_probe_config())
    env_id = env_for(algorithm)
    traced = traceable_fields(base, env_id, numeric_fields(base))
    assert traced, f"{name}: no traced hyperparameter"
    changes = [{field: value} for field in traced for value in off_default_values(base, field)]
    outcomes = run(run_config(base, env_id), changes)
    assert outcomes[0].finite()
    bad = [change for change, outcome in zip(changes, outcomes[1:]) if not outcome.finite()]
    assert not bad, f"{name}: non-finite runs with {bad}"
    moved = {
        field for change, outcome in zip(changes, outcomes[1:]) if differs(outcomes[0], outcome) for field in change
    }
    assert moved, f"{name}: no traced hyperparameter changes the run"
    for field in ("learning_rate", "gamma"):  # every algorithm's step size and discount, when it has them
        if field in traced:
            assert field in moved, f"{name}: agent.{field} off its value changes nothing"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_agent_field_off_default_changes_the_step(name):
    """Every field of the algorithm's config: some off-default value changes its cheapest
    step (init, rollout, update; `off_default_step.step`), in the base setting or in one with
    another field changed (found by `coverage`). The traced numeric fields run as members of
    one compiled program, whose results are compared and must stay finite; any other field
    must change the step's traced program. A field that leaves the program identical is
    ignored."""
    algorithm = algorithms()[name]
    section = algorithm.config.__name__
    fields = [f.name for f in dataclasses.fields(algorithm.config) if f"{section}.{f.name}" not in EXEMPT]
    measure = Measure(values=False)
    covered = coverage(algorithm, measure, fields)
    missing = uncovered(section, fields, covered)
    assert not missing, f"{name}: no off-default value of {missing} changes the step; covered: {covered}"
    assert not measure.invalid, f"{name}: non-finite steps with {measure.invalid}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("section", [pytest.param(AnakinConfig, marks=pytest.mark.slow), EnvConfig])
@pytest.mark.costly
def test_architecture_and_environment_fields_off_default_change_the_run(section):
    """Each field of Anakin's and the environment's config, off its value, changes the
    short run of a PPO agent (or is in `EXEMPT`, with the test that covers it)."""
    algorithm = algorithms()["ppo"]
    agent = short_run_base(algorithm.default_probe_config())
    env_id = "CartPole-v1"  # vector observations, which env.observe selects from
    config = run_config(agent, env_id)
    base = config.arch if section is AnakinConfig else config.env
    reference = run(config)[0]
    covered: dict[str, str] = {}
    for field in dataclasses.fields(section):
        if f"{section.__name__}.{field.name}" in EXEMPT:
            continue
        for value in off_default_values(base, field.name):
            changed = valid_replacement(base, **{field.name: value})
            variant = dataclasses.replace(config, **{"arch" if section is AnakinConfig else "env": changed})
            try:
                outcome = run(variant)[0]
            except Exception as error:  # noqa: BLE001 - a value the runner refuses: try the next
                if "ConfigError" not in type(error).__name__:
                    raise
                continue
            assert outcome.finite(), f"{section.__name__}.{field.name}={value!r}: non-finite run"
            if differs(reference, outcome):
                covered[field.name] = repr(value)
                break
    missing = uncovered(section.__name__, [f.name for f in dataclasses.fields(section)], covered)
    assert not missing, f"no off-default value of {missing} changes a short run; covered: {covered}"


def test_exemptions_name_existing_fields():
    """An exemption outlives nothing: each names a field that exists."""
    sections = {cls.__name__: cls for cls in (AnakinConfig, EnvConfig, *(a.config for a in algorithms().values()))}
    for key in EXEMPT:
        section, _, field = key.partition(".")
        assert field in {f.name for f in dataclasses.fields(sections[section])}, key


# Sebulba fields that set how fast a run goes, never what it learns: off their value, a run
# stays valid and learns exactly what the default run learns. Every other field must change it.
THROUGHPUT_ONLY = {
    "actor_devices": "where the policy's inference runs: the same parameters act the same on any device",
    "queue_size": "trajectories waiting per actor thread: with max_policy_lag 0 the actors wait for each update",
    "env_threads": "EnvPool's worker threads per actor thread (a host backend without them ignores it)",
    "layout": "'auto' chooses the thread fields for this host; num_envs, the batch, stays the user's",
}


def _sebulba_run(arch: SebulbaConfig) -> tuple[list[np.ndarray], list[int]]:
    """Final learner parameters and metrics rows' env steps of a tiny Sebulba PPO run."""
    agent = short_run_base(algorithms()["ppo"].default_probe_config())
    steps = 12 * 8 * 4
    config = Config(
        env=EnvConfig("CartPole-v1"),
        agent=dataclasses.replace(agent, num_minibatches=1),
        arch=arch,
        total_env_steps=steps,
        log=LogConfig(console=False, tensorboard=False),
    )
    result = sebulba_train(config)
    params = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(result.state.params))]
    assert all(np.isfinite(x).all() for x in params)
    assert result.metrics[-1]["env_steps"] == steps  # counters exact
    return params, [row["env_steps"] for row in result.metrics]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sebulba_fields_off_default_change_the_run_or_only_its_speed():
    """Each field of `SebulbaConfig` at its first off-default value a tiny run accepts: a
    field in `THROUGHPUT_ONLY` leaves what is learned identical (parameters bit for bit, the
    same metrics rows); every other field changes the parameters or the rows."""
    base = SebulbaConfig(num_envs=12, rollout_length=8, updates_per_log=2)
    reference = _sebulba_run(base)
    changed, unchanged = [], []
    for field in dataclasses.fields(SebulbaConfig):
        for value in off_default_values(base, field.name):
            try:
                outcome = _sebulba_run(dataclasses.replace(base, **{field.name: value}))
            except ConfigError:
                continue  # e.g. a device the batch does not split over: the next value
            same = outcome[1] == reference[1] and all(
                np.array_equal(a, b) for a, b in zip(outcome[0], reference[0], strict=True)
            )
            (unchanged if same else changed).append(f"{field.name}={value!r}")
            break
        else:
            raise AssertionError(f"arch.{field.name}: no off-default value runs")
    names = {entry.partition("=")[0] for entry in changed}
    assert not names & set(THROUGHPUT_ONLY), f"throughput-only fields changed the run: {changed}"
    assert all(entry.partition("=")[0] in THROUGHPUT_ONLY for entry in unchanged), (
        f"off their value, these change nothing: {unchanged}"
    )
