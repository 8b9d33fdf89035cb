"""The agent contract, checked for every registered algorithm (`podracer.agents.registry`).

Every test is parametrized over `algorithms()` and, where it applies, the action-space kinds
(`DiscreteSpec`, `BoxSpec`), each with its probe environment, so an algorithm added with
`register_algorithm` before collection is checked here with no new test code. The cheap
checks also run on discrete actions with and without legal-action masks; the costly ones
(4 devices against 1, Anakin against Sebulba, learning) take the discrete probe with masks
for an algorithm that declares masks (a superset of the plain path: the network sees the same
observation), the plain one otherwise. A case an algorithm does not declare (a `BoxSpec` it
does not support) is not generated (`SUPPORTED` and `SUPPORTED_KINDS`); that such a pairing
is refused is tested on its own (`test_pairing_is_checked_before_compiling`, over all cases).

An algorithm that can be recurrent (`Algorithm.recurrent`) is checked twice: as itself and as
`<name>-lstm`, its probe config with a recurrent core (the runners then carry core states).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import anakin
import sebulba
from anakin import AnakinConfig
from experiments.presets import PRESETS, all_presets
from podracer.agents import BUILTIN_ALGORITHMS, Algorithm, algorithms, make_agent
from podracer.config import Config, ConfigError, EnvConfig
from podracer.envs import make_jax_env
from podracer.types import BoxSpec, DiscreteSpec, MaskedObs
from sebulba import SebulbaConfig
from tests.support.contract_helpers import (
    anakin_vs_sebulba,
    learned_policy_ok,
    one_vs_four_devices,
    probe_batch,
    rejected_batch,
)
from tests.support.helpers import assert_one_line_error, run_main

SPACES = {"discrete": "ProbeActionReward", "masked": "ProbeMaskedAction", "box": "ProbeContinuousAction"}


def flavours() -> dict[str, Algorithm]:
    """Every registered algorithm, and `<name>-lstm` for each that can be recurrent: the same
    record with the recurrent variant of its probe config."""
    out = dict(algorithms())
    for name, algorithm in algorithms().items():
        if algorithm.recurrent is not None:
            probe = (lambda a: lambda: a.recurrent(a.default_probe_config()))(algorithm)
            out[f"{name}-lstm"] = dataclasses.replace(algorithm, probe_config=probe)
    return out


FLAVOURS = flavours()
NAMES = list(FLAVOURS)
CASES = [(name, space) for name in NAMES for space in SPACES]
KIND_CASES = [(name, kind) for name in NAMES for kind in ("discrete", "box")]
ARCHS = ("anakin", "sebulba")


def supports(name: str, space: str) -> bool:
    algorithm = FLAVOURS[name]
    env = make_jax_env(SPACES[space])
    return algorithm.supports(env.action_spec(None)) and (space != "masked" or algorithm.masks)


def probe_space(name: str, kind: str) -> str:
    """The probe a costly test runs for an action-space kind: masked when the algorithm can."""
    return "masked" if kind == "discrete" and FLAVOURS[name].masks else kind


SUPPORTED = [(name, space) for name, space in CASES if supports(name, space)]
# The costly checks run a recurrent flavour on discrete actions only: its continuous-action
# path differs from the feed-forward one's by nothing but the core, which discrete covers.
SUPPORTED_KINDS = [(name, kind) for name, kind in KIND_CASES if supports(name, probe_space(name, kind))
                   and not (name.endswith("-lstm") and kind == "box")]
# The costly checks (4 devices against 1, Anakin against Sebulba, learning) run one recurrent
# flavour: what they guard for a recurrent agent, the runners carrying core states and the
# learner unrolling them, is the same code for every recurrent agent
# (`podracer.agents.actor_critic`); the cheap checks run them all.
RECURRENT = [name for name in NAMES if name.endswith("-lstm")]
COSTLY_KINDS = [(name, kind) for name, kind in SUPPORTED_KINDS if name not in RECURRENT[1:]]


def arch_config(arch: str, rollout_length: int, envs_per_device: int, **kwargs) -> AnakinConfig | SebulbaConfig:
    """Two learner devices either way (Sebulba acts on a third)."""
    if arch == "anakin":
        return AnakinConfig(num_envs=2 * envs_per_device, rollout_length=rollout_length, devices=(0, 1), **kwargs)
    return SebulbaConfig(num_envs=2 * envs_per_device, rollout_length=rollout_length, actor_devices=(2,),
                         learner_devices=(0, 1), **kwargs)


@contextlib.contextmanager
def preset(monkeypatch, config: Config):
    """`config` as the command line's preset `contract`."""
    monkeypatch.setitem(PRESETS, "contract", lambda: config)
    yield "contract"


@contextlib.contextmanager
def nothing_compiled():
    """Fails if JAX traces, lowers or compiles anything inside the block."""
    events: list[str] = []

    def listen(name: str, *args, **kwargs) -> None:
        if name.startswith("/jax/core/compile/"):
            events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert not events, f"compiled before failing: {sorted(set(events))}"


def bad_value(annotation) -> object:
    """A value no config field of this type should accept, or None for fields any value fits."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # `float | None`: what the non-None type rejects
        options = [a for a in args if a is not type(None)]
        return bad_value(options[0]) if len(options) == 1 else None
    if annotation is float:
        return math.nan
    if annotation is int:
        return -10**9
    if origin is typing.Literal:
        return "no-such-choice"
    if origin is tuple:
        return (-1,)
    return None


@pytest.mark.parametrize("name", list(algorithms()))
def test_config_errors_name_the_field(name, capsys, monkeypatch, tmp_path):
    """Every hyperparameter is validated: NaN floats, absurd ints, unknown choices raise a
    ConfigError naming `agent.<field>`; on the command line, exit 2 with one line, nothing
    written."""
    algorithm = FLAVOURS[name]
    hints = typing.get_type_hints(algorithm.config)
    checked = []
    for field in dataclasses.fields(algorithm.config):
        value = bad_value(hints[field.name])
        if value is None:
            continue
        try:
            dataclasses.replace(algorithm.config(), **{field.name: value})
        except ConfigError as error:
            assert f"agent.{field.name}" in str(error), f"{name}: the ConfigError for agent.{field.name}={value!r} " \
                f"does not name agent.{field.name}: {error}"
        else:  # a third-party algorithm's author needs the field, not "DID NOT RAISE"
            pytest.fail(f"{name}: agent.{field.name}={value!r} was accepted; validate it in "
                        f"{algorithm.config.__name__}.__post_init__ (podracer.config.check)")
        checked.append(field.name)
    assert checked, f"{name}: no field to check"
    config = Config(agent=algorithm.default_probe_config(), arch=AnakinConfig(), env=EnvConfig(SPACES["discrete"]),
                    run_dir=str(tmp_path / "run"))
    float_field = next(name for name in checked if isinstance(bad_value(hints[name]), float))
    with preset(monkeypatch, config) as preset_name:
        assert_one_line_error(*run_main(capsys, "train", preset_name, f"--agent.{float_field.replace('_', '-')}",
                                        "nan"), f"agent.{float_field}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", NAMES)
def test_bad_batch_splits_exit_2_before_compiling(name, arch, capsys, monkeypatch, tmp_path):
    """A batch the algorithm's (mandatory) check rejects stops `podracer train` on either
    architecture with exit 2 and one line, before anything compiles or is written; a batch
    it accepts passes setup."""
    algorithm = FLAVOURS[name]
    configs = [algorithm.default_probe_config(), algorithm.config()]
    configs += [make().agent for make in all_presets().values() if type(make().agent) is algorithm.config]
    agent_config, bad, good = rejected_batch(algorithm, configs)
    space = next(space for space in SPACES if supports(name, space))  # a box-only algorithm takes the box probe
    base = Config(agent=agent_config, env=EnvConfig(SPACES[space]), run_dir=str(tmp_path / "run"),
                  arch=arch_config(arch, *good), total_env_steps=10**7)
    runner = anakin.runner if arch == "anakin" else sebulba.runner
    runner.setup(base)  # the accepted batch passes
    if bad is None:
        # Every built-in splits its batch (minibatches, sequences): a check that accepts all is a lost check.
        assert algorithm.name not in {a.name for a in BUILTIN_ALGORITHMS}, f"{name}: check_batch accepts every batch"
        pytest.skip(f"{name}: check_batch accepts every batch (no batch arithmetic to get wrong)")
    config = dataclasses.replace(base, arch=arch_config(arch, *bad))
    with pytest.raises(ConfigError):
        runner.setup(config)
    with preset(monkeypatch, config) as preset_name, nothing_compiled():
        assert_one_line_error(*run_main(capsys, "train", preset_name), "agent.")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name, space", CASES)
def test_pairing_is_checked_before_compiling(name, space, arch, capsys, monkeypatch, tmp_path):
    """An algorithm on an action space (or masks) it does not declare exits 2 with one line
    naming both, before anything compiles; a declared pairing passes setup."""
    algorithm = FLAVOURS[name]
    config = Config(agent=algorithm.default_probe_config(), env=EnvConfig(SPACES[space]),
                    arch=arch_config(arch, *probe_batch()), run_dir=str(tmp_path / "run"))
    runner = anakin.runner if arch == "anakin" else sebulba.runner
    if supports(name, space):
        runner.setup(config)
        return
    with preset(monkeypatch, config) as preset_name, nothing_compiled():
        assert_one_line_error(*run_main(capsys, "train", preset_name), algorithm.name, SPACES[space])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name, space", SUPPORTED)
@pytest.mark.costly
def test_act_and_greedy_act_agree_with_the_spec(name, space):
    """Shapes, dtypes, bounds and legality of the actions, and extras batched like them."""
    algorithm = FLAVOURS[name]
    env = make_jax_env(SPACES[space])
    obs_spec, action_spec = env.observation_spec(None), env.action_spec(None)
    agent = make_agent(algorithm.default_probe_config(), obs_spec, action_spec, num_updates=10, axis_name=None)
    params = jax.jit(agent.init)(jax.random.key(0)).params
    B, K = 8, 16
    _, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(1), B), None)
    if isinstance(obs, MaskedObs):  # random masks, at least one legal action each
        legal = jax.random.bernoulli(jax.random.key(2), 0.4, obs.action_mask.shape)
        obs = MaskedObs(obs.obs, legal.at[:, 0].set(~jnp.any(legal[:, 1:], axis=-1)))
    core, start = agent.initial_acting_state(B)
    actions, extras, _ = jax.jit(jax.vmap(agent.step, in_axes=(None, None, 0, None, None)))(
        params, obs, jax.random.split(jax.random.key(3), K), core, start)
    greedy = None if agent.greedy_act is None else jax.jit(agent.greedy_step)(params, obs, core, start)[0]
    for leaf in jax.tree.leaves(extras):
        assert leaf.shape[:2] == (K, B)
    for action in (np.asarray(actions), None if greedy is None else np.asarray(greedy)[None]):
        if action is None:
            continue
        if isinstance(action_spec, DiscreteSpec):
            assert action.shape[1:] == (B,) and action.dtype == np.int32
            assert action.min() >= 0 and action.max() < action_spec.num_actions
            if isinstance(obs, MaskedObs):
                assert np.take_along_axis(np.asarray(obs.action_mask)[None].repeat(len(action), 0),
                                          action[..., None], -1).all(), "an illegal action was chosen"
        else:
            assert isinstance(action_spec, BoxSpec)
            assert action.shape[1:] == (B,) + tuple(action_spec.shape) and np.issubdtype(action.dtype, np.floating)
            assert np.isfinite(action).all()
    if greedy is not None and isinstance(action_spec, BoxSpec):
        assert (np.asarray(greedy) >= action_spec.low).all() and (np.asarray(greedy) <= action_spec.high).all()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, kind", COSTLY_KINDS)
def test_update_on_four_devices_equals_the_global_batch_on_one(name, kind):
    """With the algorithm's split-invariant config (`Algorithm.exact_config`), Sebulba's
    learner step on 4 devices gives the state `agent.update` gives the whole batch on one
    device; its metrics are device-invariant (the metrics rule) and the loss is the same."""
    space = probe_space(name, kind)
    one_vs_four_devices(FLAVOURS[name], SPACES[space])


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, kind", COSTLY_KINDS)
def test_anakin_and_sebulba_give_the_same_update(name, kind):
    """The same trajectories, keys (`anakin.program.iteration_keys`) and state give the same
    parameters through Anakin's compiled program and Sebulba's learner step (2 devices
    each), over as many updates as it takes the parameters to move."""
    space = probe_space(name, kind)
    anakin_vs_sebulba(FLAVOURS[name], SPACES[space])


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name, kind", COSTLY_KINDS)
def test_learns_its_probe(name, kind, tmp_path):
    """The algorithm's probe config learns the probe of each action space it declares under
    Anakin; with masks, no illegal action is ever taken (every episode lasts one step), and
    `evaluate` of the run's checkpoint (masks restored with the state) scores the optimum."""
    from experiments.evaluate import evaluate
    from experiments.train import train

    space = probe_space(name, kind)
    algorithm = FLAVOURS[name]
    config = Config(env=EnvConfig(SPACES[space]), agent=algorithm.default_probe_config(),
                    total_env_steps=algorithm.probe_steps, run_dir=str(tmp_path / "run"),
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=50))
    result = train(config, console=False)
    learned_policy_ok(result, config, space)
    if space == "masked":
        rows = result.metrics
        assert all(row["episode_length"] == 1.0 for row in rows), [row["episode_length"] for row in rows]
        assert evaluate(result.run_dir, episodes=16)["mean_return"] == 1.0


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", [name for name, kind in COSTLY_KINDS if kind == "discrete"])
def test_several_seeds_in_one_program_match_the_one_seed_run(name):
    """Two seeds in one Anakin program (a `vmap` over seeds) run every algorithm, and seed 0
    ends where the one-seed run (no `vmap`: `anakin.program.over_seeds`) ends with the same
    `--seed`: the same keys, so the same parameters up to float rounding."""
    space = probe_space(name, "discrete")
    algorithm = FLAVOURS[name]

    def params(num_seeds: int):
        config = Config(env=EnvConfig(SPACES[space]), agent=algorithm.default_probe_config(),
                        total_env_steps=16 * 8 * 12, seed=3,
                        arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=4,
                                          num_seeds=num_seeds))
        result = anakin.train(config)
        assert all(np.isfinite(row["loss"]) for row in result.metrics if "loss" in row)
        return result.state.agent.params

    one, two = params(1), params(2)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
        assert b.shape[0] == 2
        np.testing.assert_allclose(np.asarray(b[0]), np.asarray(a[0]), rtol=1e-4, atol=1e-5)


def test_an_algorithm_without_batch_arithmetic_passes_the_batch_check():
    """An algorithm whose `check_batch` accepts every batch (a full-batch update) is a valid
    contract: `rejected_batch` finds nothing to reject rather than failing the suite; one that
    rejects every batch still fails it."""
    lenient = dataclasses.replace(FLAVOURS[NAMES[0]], check_batch=lambda config, batch: None)
    config, bad, good = rejected_batch(lenient, [lenient.config()])
    assert bad is None and good is not None

    def refuse(config, batch):
        raise ConfigError("agent.x never fits")

    with pytest.raises(AssertionError, match="every batch"):
        rejected_batch(dataclasses.replace(lenient, check_batch=refuse), [lenient.config()])
