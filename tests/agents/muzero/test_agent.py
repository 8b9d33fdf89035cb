"""MuZero as an `Agent`, beyond the contract suite (`tests/integration/test_contract.py`, which checks 1
vs 4 devices, Anakin against Sebulba, config errors and probe learning for every
algorithm): its own config and CLI errors, the registry and presets, acting with search on
the conv torso, Sebulba end to end on 3 learner devices, the bench's search cost."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from experiments.cli import main
from experiments.presets import PRESETS
from experiments.presets_muzero import MUZERO_PRESETS
from podracer import parallel
from podracer.agents import MuZeroConfig, algorithms, make_agent
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import BatchShape, BoxSpec, DiscreteSpec, ObsSpec
from tests.support.helpers import assert_buffers_per_device_and_params_replicated

OBS_SPEC, ACTION_SPEC = ObsSpec((4,), jnp.float32), DiscreteSpec(2)
# A tiny agent: every test that compiles a search uses this one, so that the programs are
# few and small (the persistent compilation cache shares identical ones).
TINY = MuZeroConfig(num_simulations=4, hidden_sizes=(16,), latent_size=8, dynamics_hidden_sizes=(16,),
                    prediction_hidden_sizes=(16,), num_bins=11, value_max=20.0, unroll_steps=3, td_steps=3,
                    buffer_size=1024, batch_size=8, replay_ratio=0.5, learning_starts=0)


@pytest.mark.parametrize("field, value", [
    ("search", "alphazero"), ("num_simulations", 0), ("num_bins", 10), ("unroll_steps", 0), ("td_steps", 0),
    ("gamma", 1.5), ("dynamics_gradient_scale", 0.0), ("torso", "resnet"), ("hidden_sizes", ()),
    ("batch_size", 10**6), ("replay_ratio", 0.0), ("gradient_steps", 0), ("min_q_range", 0.0), ("dirichlet_fraction", 2.0),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"agent.{field}"):
        dataclasses.replace(MuZeroConfig(), **{field: value})


def test_batch_and_spec_errors_before_compiling():
    config = MuZeroConfig(buffer_size=1000, unroll_steps=5, td_steps=10)
    with pytest.raises(ConfigError, match=r"agent.buffer_size must hold agent.sequence_length \(16\)"):
        config.check_batch(BatchShape(16, 8))
    config.check_batch(BatchShape(31, 2))  # 16 x 62 steps and the 2 environments' next observations: 994
    with pytest.raises(ConfigError, match=r"and the next observation of each of its 2 environments \(994\)"):
        dataclasses.replace(config, buffer_size=993).check_batch(BatchShape(31, 2))
    with pytest.raises(ConfigError, match="muzero does not support the continuous actions"):
        make_agent(config, OBS_SPEC, BoxSpec((1,), -1.0, 1.0), num_updates=1, axis_name=None)
    with pytest.raises(ConfigError, match="agent.torso 'conv' needs grid observations"):
        make_agent(dataclasses.replace(config, torso="conv"), OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None)


def test_registered_with_presets():
    assert algorithms()["muzero"].config is MuZeroConfig and algorithms()["muzero"].make.__name__ == "make_muzero"
    for name in ("muzero-catch-anakin", "muzero-cartpole-anakin", "muzero-cartpole-sebulba"):
        assert name in PRESETS and isinstance(MUZERO_PRESETS[name]().agent, MuZeroConfig)


@pytest.mark.parametrize("argv, message", [
    (["train", "muzero-catch-anakin", "--agent.num-bins", "20"], "agent.num_bins must be odd"),
    (["train", "muzero-catch-anakin", "--agent.search", "mcts"], "agent.search must be one of"),
    (["train", "muzero-cartpole-anakin", "--agent.buffer-size", "500"], "agent.buffer_size must hold"),
    (["train", "muzero-catch-anakin", "--agent.torso", "conv", "--env.id", "CartPole-v1"], "agent.torso 'conv'"),
])
def test_cli_errors_exit_2_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("torso, obs_shape", [("conv", (6, 5))])  # the MLP: tests/integration/test_contract.py
def test_act_searches_and_greedy_act_is_deterministic(torso, obs_shape):
    """`act` returns the search's action, its improved policy and root value in `extras`;
    `greedy_act` (no key) searches without noise, the same action every call."""
    spec = ObsSpec(obs_shape, jnp.float32)
    config = dataclasses.replace(TINY, torso=torso, conv_channels=(4,))
    agent = make_agent(config, spec, DiscreteSpec(3), num_updates=1, axis_name=None)
    params = jax.jit(agent.init)(jax.random.key(0)).params
    obs = jax.random.normal(jax.random.key(1), (5,) + obs_shape)

    @jax.jit
    def both(params, obs):
        action, extras = agent.act(params, obs, jax.random.key(2))
        return action, extras, agent.greedy_act(params, obs), agent.greedy_act(params, obs)

    action, extras, greedy, again = both(params, obs)
    assert action.shape == (5,) and action.dtype == jnp.int32 and set(extras) == {"search_policy", "root_value"}
    assert extras["search_policy"].shape == (5, 3) and extras["root_value"].shape == (5,)
    np.testing.assert_allclose(extras["search_policy"].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(greedy, again)


def tiny_anakin_config() -> Config:
    from anakin.config import AnakinConfig

    return Config(env=EnvConfig("CartPole-v1"), agent=TINY, total_env_steps=4 * 8 * 10,
                  arch=AnakinConfig(num_envs=4, rollout_length=8, devices=(0, 1), updates_per_call=1))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sebulba_searches_on_the_actor_device_and_learns_on_three():
    """1 actor device (the search runs there), 3 learner devices with a buffer each; the
    parameters stay replicated, the logged replay ratio is the configured one, and the
    annealed learning rate falls linearly to 0 over the run's 12 updates."""
    from sebulba import SebulbaConfig, train

    config = Config(
        env=EnvConfig("CartPole-v1"), total_env_steps=6 * 8 * 12, agent=dataclasses.replace(TINY, learning_starts=96, anneal_lr=True),
        arch=SebulbaConfig(num_envs=6, rollout_length=8, max_policy_lag=1, actor_devices=(0,),
                           learner_devices=(1, 2, 3), updates_per_log=4),
    )
    result = train(config)
    rows, state = result.metrics, result.state
    assert [r["env_steps"] for r in rows] == [192, 384, 576]
    assert all(np.isfinite(r["loss"]) for r in rows) and rows[-1]["episodes"] > 0
    assert rows[-1]["replay_ratio_achieved"] == pytest.approx(0.5, rel=0.3)
    # Update k of 12 learns at 1 - k / 12 of the rate; a row is the mean of 4 updates.
    lr = [TINY.learning_rate * (1 - (4 * i + 2.5) / 12) for i in range(3)]
    np.testing.assert_allclose([r["learning_rate"] for r in rows], lr, rtol=1e-5)
    assert int(state.opt_state.gradient_steps) >= 8
    obs = state.local.experience.obs
    assert obs.shape == (3, 1, 1024, 4) and len(obs.sharding.device_set) == 3
    assert_buffers_per_device_and_params_replicated(state, held=192)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_reports_acting_with_and_without_search():
    """`podracer bench anakin`'s MuZero figures: acting with the prediction network alone
    (`limit_sps_without_search`, the same envs and rollout) and `search_cost`, the ratio to
    acting with the search; nothing for an agent without a search. (No figure asserted:
    benchmarks, not tests; `bench_anakin` itself is PPO's test's.)"""
    from anakin import runner
    from experiments.bench import _without_search
    from podracer.agents import PPOConfig
    from podracer.agents.muzero import without_search

    config = tiny_anakin_config()
    s = runner.setup(config)
    result = _without_search(config, s, runner.initial_state(config, s), 1, 1, 64, rollout_s=2.0)
    assert result["limit_sps_without_search"] > 0
    assert result["search_cost"] == pytest.approx(2.0 * result["limit_sps_without_search"] / 64, rel=0.02)
    ppo = make_agent(PPOConfig(), OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None)
    assert without_search(ppo, PPOConfig(), OBS_SPEC, ACTION_SPEC) is None
    prior = without_search(s.agent, config.agent, OBS_SPEC, ACTION_SPEC)
    assert prior.update is s.agent.update and prior.act is not s.agent.act


def test_without_vma_check_runs_untyped_loops_under_shard_map():
    """mctx's pattern: a loop that starts from constants and carries device-varying values
    is rejected under `shard_map(check_vma=True)`; wrapped, it runs, and its output is
    typed device-varying, so a `pmean` of it averages over the devices."""
    def count_up(x):  # while_loop from a constant (invariant) carry to a varying one
        return jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x), (0, jnp.zeros(x.shape)))[1]

    mesh = parallel.make_mesh(jax.devices()[:2], "d")
    x = jnp.arange(4.0)
    run = lambda fn: jax.jit(jax.shard_map(lambda x: jax.lax.pmean(fn(x), "d"), mesh=mesh,  # noqa: E731
                                           in_specs=P("d"), out_specs=P()))(x)
    with pytest.raises(TypeError, match="carry input and carry output must have equal types"):
        run(count_up)
    # Device 0 holds [0, 1], device 1 [2, 3]: the mean of 3x over the two is [3, 6].
    np.testing.assert_allclose(run(parallel.without_vma_check(count_up)), [3.0, 6.0])
    np.testing.assert_allclose(jax.jit(parallel.without_vma_check(count_up))(x), 3 * x)  # outside: fn itself


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_final_values_are_the_value_of_truncated_steps_final_observations():
    """The bootstrap of a truncated episode (`learning.final_values`): the predicted value
    of `next_obs` where the step was truncated, 0 elsewhere (terminated steps included)."""
    from podracer.agents.muzero import learning
    from podracer.agents.muzero.networks import MuZeroNetwork, make_network
    from podracer.ops import categorical_to_scalar
    from podracer.types import Trajectory

    network = make_network(TINY, OBS_SPEC, 2)
    params = network.init(jax.random.key(0), jnp.zeros((1, 4)), jnp.zeros((1,), jnp.int32))
    leaves, tree = jax.tree.flatten(params)  # perturbed: the value head starts at zero
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    T, B = 3, 2
    flags = jnp.zeros((T, B), bool)
    next_obs = jax.random.normal(jax.random.key(2), (T, B, 4))
    traj = Trajectory(obs=next_obs, action=jnp.zeros((T, B), jnp.int32), reward=jnp.zeros((T, B)),
                      terminated=flags.at[0, 1].set(True), truncated=flags.at[1, 0].set(True), next_obs=next_obs,
                      extras={})
    final = jax.jit(lambda p, t: learning.final_values(network, p, t, TINY.value_max))
    got = np.asarray(final(params, traj))
    latent = network.apply(params, next_obs[1, 0][None], method=MuZeroNetwork.represent)
    expected = categorical_to_scalar(network.apply(params, latent, method=MuZeroNetwork.predict)[1], TINY.value_max)
    assert abs(float(expected[0])) > 1e-3
    want = np.zeros((T, B), np.float32)
    want[1, 0] = float(expected[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(final(params, traj._replace(truncated=flags)), 0.0)
