"""Invariants over configurations and environment parameters drawn by Hypothesis.

Values are drawn from each field's annotation (`tests/support/off_default.py`) and kept only where
the config's own checks accept them: whatever a user may set, a run stays finite, counts
its env steps exactly (`num_envs * rollout_length * updates`), keeps its parameters' shapes,
and every stored transition is one environment's consistent step. Draws are derandomized,
so the suite is deterministic; shapes come from a few small sizes, so compiles stay few.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from anakin import AnakinConfig
from anakin import train as anakin_train
from anakin.rollout import reset_envs, rollout
from podracer.agents import algorithms, dqn, make_agent
from podracer.config import Config, ConfigError, EnvConfig, LogConfig
from podracer.envs import GYMNAX_IDS, make_jax_env
from podracer.envs.params import with_params
from podracer.replay import make_replay
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec, Trajectory
from tests.agents.test_dqn_nstep import random_stream
from tests.support.off_default import annotation_kind, numeric_fields, short_run_base

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRUE, FALSE = ("true", "True", "TRUE", "1"), ("false", "False", "FALSE", "0")


def field_values(config: typing.Any, field: str) -> st.SearchStrategy:
    """Values of a numeric field drawn around its current value (a factor of 1/4 to 4, or
    [0, 1] for a field already in it), kept only where the config accepts them."""
    value = getattr(config, field)
    if typing.get_type_hints(type(config))[field] is int:
        return st.integers(max(0, value // 4), max(1, value * 4))
    if 0 <= value <= 1:  # float32 values: a positive one that rounds to 0 is not a value a run can hold
        return st.floats(0.0, 1.0, width=32, allow_subnormal=False)
    return st.floats(min(value / 4, value * 4), max(value / 4, value * 4), allow_nan=False)


@st.composite
def ppo_runs(draw) -> Config:
    """A short Anakin PPO run with drawn sizes and drawn traced hyperparameters (several
    at once, each within what `PPOConfig` accepts)."""
    agent = short_run_base(algorithms()["ppo"].default_probe_config())
    fields = draw(
        st.lists(
            st.sampled_from(
                [
                    f
                    for f in numeric_fields(agent)
                    if f
                    not in (
                        "num_epochs",
                        "num_minibatches",
                        "replay_capacity",
                        "latent_size",
                        "core_size",
                        "replay_fraction",
                    )
                ]
            ),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    changes = {field: draw(field_values(agent, field)) for field in fields}
    try:
        agent = dataclasses.replace(agent, **changes)
    except ConfigError:
        assume(False)
    devices = draw(st.sampled_from([(0,), (0, 1)]))
    num_envs = len(devices) * draw(st.sampled_from([2, 4]))
    rollout_length, per_call, updates = draw(st.sampled_from([2, 4])), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    agent = dataclasses.replace(agent, num_minibatches=2)
    arch = AnakinConfig(num_envs=num_envs, rollout_length=rollout_length, devices=devices, updates_per_call=per_call)
    return Config(
        env=EnvConfig("Catch"),
        agent=agent,
        arch=arch,
        total_env_steps=num_envs * rollout_length * updates,
        log=LogConfig(console=False, tensorboard=False),
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@SETTINGS
@given(config=ppo_runs())
def test_drawn_runs_count_exactly_and_stay_finite(config):
    """Env steps in the metrics rows are `num_envs * rollout_length` times the updates run,
    row by row; parameters keep their shapes and stay finite; every metric is finite."""
    result = anakin_train(config)
    arch = config.arch
    updates = config.total_env_steps // (arch.num_envs * arch.rollout_length)
    done, expected = 0, []
    while done < updates:
        done = min(updates, done + arch.updates_per_call)
        expected.append(done * arch.num_envs * arch.rollout_length)
    assert [row["env_steps"] for row in result.metrics] == expected
    agent = result.agent
    fresh = jax.eval_shape(agent.init, jax.random.key(0)).params
    for leaf, init in zip(jax.tree.leaves(result.state.agent.params), jax.tree.leaves(fresh)):
        assert leaf.shape[1:] == init.shape and np.isfinite(np.asarray(leaf)).all()
    for row in result.metrics:
        assert all(np.isfinite(v) for k, v in row.items() if isinstance(v, float)), row


@pytest.mark.timeout(300)
@SETTINGS
@given(
    env_id=st.sampled_from(["Catch", "CartPole-v1", "Pendulum-v1", "Acrobot-v1"]),
    num_envs=st.sampled_from([1, 3]),
    length=st.sampled_from([5, 40]),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.costly
def test_every_transition_is_one_environments_step(env_id, num_envs, length, seed):
    """In a rollout, each environment's column is its own chain: where an episode goes on,
    `next_obs[t]` is `obs[t + 1]` of the same column; rewards and observations are finite
    and shaped `[T, B, ...]`; an episode ends terminated or truncated, never both."""
    env = make_jax_env(env_id)
    space = "box" if not hasattr(env.action_spec(None), "num_actions") else "discrete"
    algorithm = algorithms()["sac" if space == "box" else "ppo"]
    agent = make_agent(
        algorithm.default_probe_config(),
        env.observation_spec(None),
        env.action_spec(None),
        num_updates=1,
        axis_name=None,
    )
    traj = _rollout(env, agent, length, num_envs, seed)
    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    assert obs.shape[:2] == (length, num_envs) and np.asarray(traj.reward).shape == (length, num_envs)
    assert np.isfinite(obs).all() and np.isfinite(np.asarray(traj.reward)).all()
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    assert not (terminated & truncated).any()
    going_on = ~(terminated | truncated)[:-1]
    np.testing.assert_array_equal(next_obs[:-1][going_on], obs[1:][going_on])


def _rollout(env, agent, length: int, num_envs: int, seed: int):
    @jax.jit
    def run(key):
        state = agent.init(key)
        envs = reset_envs(env, env.default_params, key, num_envs, agent)
        return rollout(env, env.default_params, agent, state.params, envs, jax.random.fold_in(key, 1), length)[1]

    return jax.device_get(run(jax.random.key(seed)))


def _params_fields() -> list[tuple[str, str, str]]:
    """`(env id, field, kind)` for each field of each gymnax environment's parameters and
    the built-ins that have them."""
    out = []
    for env_id in ["Catch", *GYMNAX_IDS]:
        params = make_jax_env(env_id).default_params
        if not dataclasses.is_dataclass(params):
            continue
        for field in dataclasses.fields(params):
            value = getattr(params, field.name)
            kind = type(value.item()) if hasattr(value, "item") and np.shape(value) == () else type(value)
            out.append((env_id, field.name, kind.__name__))
    return out


PARAMS_FIELDS = _params_fields()


@pytest.mark.timeout(300)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=st.sampled_from(PARAMS_FIELDS), data=st.data())
def test_env_params_of_every_jax_environment(case, data):
    """`--env.params NAME=TEXT` on every parameter of every gymnax environment: a boolean
    reads true/1 as True and false/0 as False (any case) and refuses other text; a number
    is converted to the field's type; non-numbers are refused naming the field."""
    env_id, name, kind = case
    if kind == "bool":
        text = data.draw(st.sampled_from(TRUE + FALSE + ("yes", "2", "", "t")))
    elif kind == "int":
        text = data.draw(st.one_of(st.integers(0, 50).map(str), st.sampled_from(["x", "1.5e400", "nan"])))
    else:
        text = data.draw(st.one_of(st.floats(0.0, 10.0).map(repr), st.sampled_from(["x", "inf"])))
    assume(text.strip())
    env = make_jax_env(env_id)
    try:
        value = getattr(with_params(env, (f"{name}={text}",), env_id).default_params, name)
    except ConfigError as error:
        assert "env.params" in str(error) and name in str(error) or "finite" in str(error), error
        assert not (kind == "bool" and text in TRUE + FALSE), f"{env_id}.{name}={text!r} refused"
        return
    if kind == "bool":
        assert text in TRUE + FALSE, f"{env_id}.{name}={text!r} accepted"
        assert bool(value) is (text in TRUE), f"{env_id}.{name}={text!r} read as {value!r}"
    elif kind == "int":
        assert int(value) == int(text)
    else:
        assert np.isclose(float(value), float(text))


def test_values_drawn_from_annotations_cover_the_kinds():
    """Every annotation of every agent config is one the generated tests know how to vary."""
    for algorithm in algorithms().values():
        hints = typing.get_type_hints(algorithm.config)
        unknown = [name for name, hint in hints.items() if annotation_kind(hint)[0] == "other"]
        assert not unknown, f"{algorithm.name}: no off-default values for {unknown}"


# The algorithms whose buffer holds single steps and forms n-step targets when it samples
# (DQN's `transitions_at`): DQN, and SAC and TD3 with float actions.
N_STEP_REPLAY = {"dqn": DiscreteSpec(2), "sac": BoxSpec((1,), -1.0, 1.0), "td3": BoxSpec((1,), -1.0, 1.0)}


@st.composite
def replay_streams(draw, name: str) -> tuple:
    """A config of algorithm `name` (n-step 1..4, a buffer that holds the whole stream or
    more, learning from the first update or never) and a stream `[L, B]` of `B` environments
    cut into rollouts of `T`: observation `(t, b)`, random rewards and episode ends of both
    kinds (`test_dqn_nstep.random_stream`)."""
    n_step, envs, length = draw(st.integers(1, 4)), draw(st.sampled_from([1, 3])), draw(st.sampled_from([2, 4]))
    rollouts = draw(st.integers(2, 5))
    size = rollouts * length * envs
    config = dataclasses.replace(
        algorithms()[name].default_probe_config(),
        n_step=n_step,
        gamma=0.9,
        buffer_size=size + draw(st.sampled_from([0, envs * length])),
        batch_size=2,
        learning_starts=draw(st.sampled_from([envs * length, 10**9])),
        hidden_sizes=(8,),
    )
    return config, random_stream(rollouts * length, envs, seed=draw(st.integers(0, 2**16))), length


@pytest.mark.slow
@pytest.mark.timeout(300)
@SETTINGS
@given(data=st.data())
def test_replay_never_mixes_streams(data):
    """Every n-step transition a DQN buffer holds, after updates that learn or not, is one
    environment's (`check_replay_streams`)."""
    check_replay_streams("dqn", data)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["sac", "td3"])
@settings(SETTINGS, max_examples=3)
@given(data=st.data())
def test_continuous_replay_never_mixes_streams(name, data):
    """As DQN's, for SAC's and TD3's buffers of float actions (`check_replay_streams`)."""
    check_replay_streams(name, data)


def check_replay_streams(name: str, data: st.DataObject) -> None:
    """Every n-step transition a buffer of algorithm `name` holds, after updates that learn or
    not, is one environment's: its observation is step `(t, b)`, its bootstrap observation
    the next observation of step `(t + k, b)`, the last of the k + 1 consecutive steps its
    return sums (k < n, fewer where an episode ended or was truncated), and it bootstraps
    with `gamma ** (k + 1)` unless that step terminated (then 0); counters are exact (the
    buffer holds every step pushed)."""
    config, stream, length = data.draw(replay_streams(name))
    obs, reward, terminated, truncated, next_obs = stream
    steps, envs = reward.shape
    action_spec = N_STEP_REPLAY[name]
    agent = make_agent(config, ObsSpec((2,), jnp.float32), action_spec, num_updates=steps // length, axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(0))
    update = jax.jit(agent.update)
    actions = (
        np.zeros((length, envs), np.int32)
        if isinstance(action_spec, DiscreteSpec)
        else np.zeros((length, envs, *action_spec.shape), np.float32)
    )
    for start in range(0, steps, length):
        rows = slice(start, start + length)
        traj = Trajectory(obs[rows], actions, reward[rows], terminated[rows], truncated[rows], next_obs[rows], {})
        state, _ = update(state, traj, jax.random.key(start))
    replay = make_replay(config.buffer_size, config.batch_size)
    assert int(replay.size(state.local)) == steps * envs
    sampleable = (steps - (config.n_step - 1)) * envs
    items = jax.device_get(
        jax.jit(dqn.transitions_at, static_argnums=(0, 3, 4))(replay, state.local, jnp.arange(sampleable), envs, config)
    )
    for slot in range(sampleable):
        t, b = divmod(slot, envs)
        np.testing.assert_array_equal(items.obs[slot], obs[t, b])
        last = t
        while last < t + config.n_step - 1 and not (terminated[last, b] or truncated[last, b]):
            last += 1
        np.testing.assert_array_equal(items.next_obs[slot], next_obs[last, b], err_msg=f"step {t, b}")
        expected = sum(config.gamma ** (j - t) * reward[j, b] for j in range(t, last + 1))
        np.testing.assert_allclose(items.reward[slot], expected, rtol=1e-5, atol=1e-5, err_msg=f"step {t, b}")
        discount = 0.0 if terminated[last, b] else config.gamma ** (last - t + 1)
        np.testing.assert_allclose(items.discount[slot], discount, rtol=1e-6, err_msg=f"step {t, b}")
