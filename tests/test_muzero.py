"""MuZero as an `Agent`: config errors, the registry and presets, acting with search, one
vs four devices, Anakin's program against the Sebulba learner, Sebulba end to end."""

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
from podracer.agents.muzero import learning
from podracer.agents.muzero.networks import make_network
from podracer.config import Config, ConfigError, EnvConfig
from podracer.counters import Count
from podracer.replay_sequence import SequenceSample, same_episode
from podracer.types import BatchShape, BoxSpec, DiscreteSpec, ObsSpec
from tests.helpers import tree_allclose

OBS_SPEC, ACTION_SPEC = ObsSpec((4,), jnp.float32), DiscreteSpec(2)
# A tiny agent: every test that compiles a search uses this one, so that the programs are
# few and small (the persistent compilation cache shares identical ones).
TINY = MuZeroConfig(num_simulations=4, hidden_sizes=(16,), latent_size=8, dynamics_hidden_sizes=(16,),
                    prediction_hidden_sizes=(16,), num_bins=11, value_max=20.0, unroll_steps=3, td_steps=3,
                    buffer_size=1024, batch_size=8, replay_ratio=0.5, learning_starts=0)


@pytest.mark.parametrize("field, value", [
    ("search", "alphazero"), ("num_simulations", 0), ("num_bins", 10), ("unroll_steps", 0), ("td_steps", 0),
    ("gamma", 1.5), ("dynamics_gradient_scale", 0.0), ("torso", "resnet"), ("hidden_sizes", ()),
    ("batch_size", 10**6), ("replay_ratio", 0.0), ("min_q_range", 0.0), ("dirichlet_fraction", 2.0),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"agent.{field}"):
        dataclasses.replace(MuZeroConfig(), **{field: value})


def test_batch_and_spec_errors_before_compiling():
    config = MuZeroConfig(buffer_size=1000, unroll_steps=5, td_steps=10)
    with pytest.raises(ConfigError, match=r"agent.buffer_size must hold agent.sequence_length \(16\)"):
        config.check_batch(BatchShape(16, 8))
    config.check_batch(BatchShape(31, 2))
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


@pytest.mark.timeout(240)
@pytest.mark.parametrize("torso, obs_shape", [("mlp", (4,)), ("conv", (6, 5))])
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


def random_steps(seed: int, T: int, B: int) -> learning.ReplayStep:
    """Random buffer steps `[T, B]` with episode ends of both kinds."""
    rng = np.random.default_rng(seed)
    terminated = rng.uniform(size=(T, B)) < 0.15
    truncated = (rng.uniform(size=(T, B)) < 0.1) & ~terminated
    return learning.ReplayStep(
        obs=rng.normal(size=(T, B, 4)).astype(np.float32), action=rng.integers(0, 2, (T, B)).astype(np.int32),
        reward=rng.normal(size=(T, B)).astype(np.float32), terminated=terminated, truncated=truncated,
        search_policy=rng.dirichlet(np.ones(2), (T, B)).astype(np.float32),
        root_value=rng.normal(size=(T, B)).astype(np.float32),
        final_value=np.where(truncated, rng.normal(size=(T, B)), 0.0).astype(np.float32),
    )


def random_sample(seed: int, M: int) -> SequenceSample:
    """M random sequences of TINY's length."""
    items = random_steps(seed, TINY.sequence_length, M)
    return SequenceSample(items, np.asarray(same_episode(jnp.asarray(items.terminated | items.truncated))))


@pytest.mark.timeout(240)
def test_gradient_step_on_four_devices_equals_global_batch_on_one():
    network = make_network(TINY, OBS_SPEC, 2)
    optimizer = learning.make_optimizer(TINY)
    params = network.init(jax.random.key(0), jnp.zeros((1, 4)), jnp.zeros((1,), jnp.int32))
    opt_state = optimizer.init(params)
    sample = random_sample(0, 16)
    expected = jax.jit(learning.make_learn_on_batch(TINY, network, optimizer, None))(params, opt_state, sample)

    mesh = parallel.make_mesh(jax.devices()[:4], "d")
    learn = learning.make_learn_on_batch(TINY, network, optimizer, "d")
    four = jax.jit(jax.shard_map(lambda p, o, s: learn(p, o, s)[:2], mesh=mesh,
                                 in_specs=(P(), P(), P(None, "d")), out_specs=(P(), P())))
    got = four(params, opt_state, parallel.shard(sample, mesh, P(None, "d")))
    tree_allclose(got, expected[:2], rtol=1e-5, atol=1e-6)
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), expected[0], params)
    assert max(jax.tree.leaves(moved)) > 1e-4


def tiny_anakin_config() -> Config:
    from anakin.config import AnakinConfig

    return Config(env=EnvConfig("CartPole-v1"), agent=TINY, total_env_steps=4 * 8 * 10,
                  arch=AnakinConfig(num_envs=4, rollout_length=8, devices=(0, 1), updates_per_call=1))


def place(state, mesh):
    from sebulba.learner import state_specs

    return jax.tree.map(lambda x, spec: parallel.shard(x, mesh, spec), state, state_specs(state))


@pytest.mark.xdist_group("muzero-cartpole-anakin")  # shares its train program with the bench test
@pytest.mark.timeout(400)
def test_learner_update_matches_anakin():
    """The same MuZero agent, state (a different pre-filled buffer per device, some replay
    credit carried), trajectory and keys: Anakin's program (acting with search included)
    and the Sebulba learner give the same parameters, learner state and buffers (2 learner
    devices each); each device's buffer holds its own environments."""
    from anakin import runner as anakin_runner
    from anakin.program import make_train_call
    from anakin.program import state_specs as anakin_specs
    from anakin.rollout import rollout
    from sebulba import SebulbaConfig, setup
    from sebulba.learner import device_keys, make_update_step, trajectory_sharding

    config = tiny_anakin_config()
    a = anakin_runner.setup(config)
    state = jax.device_get(anakin_runner.initial_state(config, a))
    replay = learning.make_replay(TINY)
    add = jax.jit(replay.add)
    # Pre-filled buffers: 6 earlier updates of 8 steps x 2 envs per device, different per device.
    prefill = [add(jax.tree.map(lambda x, d=d: x[0, d], state.agent.local), random_steps(10 + d, 48, 2)) for d in range(2)]
    learner = state.agent.opt_state._replace(replay_credit=np.full((1,), 0.5, np.float32),
                                             env_steps=Count.of(2 * 96, (1,)))
    state = state._replace(agent=state.agent.replace(
        opt_state=learner, local=jax.tree.map(lambda *xs: np.stack(xs)[None], *jax.device_get(prefill))))
    agent_state = jax.tree.map(lambda x: x[0], state.agent)

    trajectories, update_keys = [], []
    roll = jax.jit(lambda params, envs, key: rollout(a.env, a.env_params, a.agent.act, params, envs, key, 8)[1])
    for d in range(2):  # Anakin's first iteration on device d, on its half of the envs
        _, rollout_key, update_key = jax.random.split(state.key[0, d], 3)
        envs = jax.tree.map(lambda x, d=d: x[0, 2 * d: 2 * d + 2], state.envs)
        trajectories.append(roll(agent_state.params, envs, rollout_key))
        update_keys.append(update_key)
    trajectory = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *trajectories)

    placed = jax.tree.map(lambda x, spec: parallel.shard(x, a.mesh, spec), state, anakin_specs(state))
    anakin_state, _ = make_train_call(a.env, a.env_params, a.agent, a.mesh, 8)(placed, np.int32(1))

    s = setup(dataclasses.replace(config, arch=SebulbaConfig(
        num_envs=4, rollout_length=8, actor_devices=(2,), learner_devices=(0, 1))))
    keys = jax.device_put(jnp.stack(update_keys), device_keys(jax.random.key(0), s.mesh).sharding)
    sebulba_state, metrics = make_update_step(s.agent, s.mesh)(
        place(agent_state, s.mesh), (jax.device_put(trajectory, trajectory_sharding(s.mesh)),), keys)

    expected = jax.tree.map(lambda x: x[0], jax.device_get(anakin_state.agent))
    got = jax.device_get(sebulba_state)
    # 16 steps per device at ratio 0.5 in batches of 8 earn 1 step; with 0.5 carried, 1 is taken.
    assert int(got.opt_state.gradient_steps) == 1 and float(metrics["gradient_steps"]) == 1.0
    tree_allclose(got, expected, rtol=1e-5, atol=1e-6)  # params, learner state and both buffers
    obs = got.local.experience.obs  # [D, 1, capacity, 4]: this update's steps follow the 96 pre-filled
    for d in range(2):
        np.testing.assert_array_equal(obs[d, 0, 96:112].reshape(8, 2, 4), trajectory.obs[:, 2 * d: 2 * d + 2])


@pytest.mark.timeout(400)
def test_sebulba_searches_on_the_actor_device_and_learns_on_three():
    """1 actor device (the search runs there), 3 learner devices with a buffer each; the
    parameters stay replicated, the logged replay ratio is the configured one."""
    from sebulba import SebulbaConfig, train

    config = Config(
        env=EnvConfig("CartPole-v1"), total_env_steps=6 * 8 * 12, agent=dataclasses.replace(TINY, learning_starts=96),
        arch=SebulbaConfig(num_envs=6, rollout_length=8, max_policy_lag=1, actor_devices=(0,),
                           learner_devices=(1, 2, 3), updates_per_log=4),
    )
    result = train(config)
    rows, state = result.metrics, result.state
    assert [r["env_steps"] for r in rows] == [192, 384, 576]
    assert all(np.isfinite(r["loss"]) for r in rows) and rows[-1]["episodes"] > 0
    assert rows[-1]["replay_ratio_achieved"] == pytest.approx(0.5, rel=0.3)
    assert int(state.opt_state.gradient_steps) >= 8
    obs = state.local.experience.obs
    assert obs.shape == (3, 1, 1024, 4) and len(obs.sharding.device_set) == 3
    shards = sorted(obs.addressable_shards, key=lambda shard: shard.index[0].start)
    held = [np.asarray(shard.data)[0, 0, :192] for shard in shards]
    assert not np.array_equal(held[0], held[1]) and not np.array_equal(held[1], held[2])
    for leaf in jax.tree.leaves(state.params):
        first = np.asarray(leaf.addressable_shards[0].data)
        for shard in leaf.addressable_shards[1:]:
            np.testing.assert_array_equal(np.asarray(shard.data), first)


@pytest.mark.xdist_group("muzero-cartpole-anakin")
@pytest.mark.timeout(400)
def test_bench_reports_acting_with_and_without_search():
    """`podracer bench anakin` on a MuZero config: training, acting with the search, and
    acting with the prediction network alone (no figures asserted: benchmarks, not tests)."""
    from experiments.bench import bench_anakin

    result = bench_anakin(tiny_anakin_config(), repeats=1)
    assert result["sps"] > 0 and result["limit_sps"] > 0 and result["limit_sps_without_search"] > 0
    assert result["search_cost"] == pytest.approx(result["limit_sps_without_search"] / result["limit_sps"], rel=0.05)


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
