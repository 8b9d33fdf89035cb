"""The Brax adapter (`brax/<name>`, the `brax` extra): its specs, a step, termination apart
from the time limit's truncation, auto-reset, and SAC training under Anakin on
`brax/inverted_pendulum`. Skipped where Brax is not installed; the Brax presets' check
without Brax is in tests/core/test_api.py.

Brax compiles even inverted_pendulum's step for seconds on a CPU (and its
`observation_size` runs a reset), so these tests are slow; the adapter's own logic is checked
fast, with or without Brax, against a stand-in in tests/envs/test_brax_adapter.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax")

from anakin import AnakinConfig  # noqa: E402
from experiments.train import train  # noqa: E402
from podracer.agents import SACConfig  # noqa: E402
from podracer.config import Config, EnvConfig  # noqa: E402
from podracer.envs import make_jax_env  # noqa: E402
from podracer.envs.brax_env import BraxEnv  # noqa: E402
from podracer.types import BoxSpec, ObsSpec  # noqa: E402

# Brax's inverted_pendulum ends an episode (termination) once the pole leans past 0.2 rad;
# a full push one way topples it within a few dozen steps.
PUSH = 1.0


def run_steps(env, action, steps: int):
    """`steps` steps of one environment from a reset, always taking `action`: the stacked
    TimeSteps `[steps, ...]` and the first observation."""
    key = jax.random.key(0)
    state, obs = env.reset(key)

    def body(state, key):
        state, ts = env.step(key, state, action)
        return state, ts

    _, ts = jax.lax.scan(body, state, jax.random.split(key, steps))
    return ts, obs


@pytest.mark.slow
@pytest.mark.parametrize("name, obs, act", [("inverted_pendulum", 4, 1), ("halfcheetah", 17, 6)])
def test_specs_are_brax_sizes_in_the_unit_box(name, obs, act):
    env = make_jax_env(f"brax/{name}")
    assert env.name == f"brax/{name}"
    assert env.observation_spec(None) == ObsSpec((obs,), jnp.float32)
    assert env.action_spec(None) == BoxSpec((act,), -1.0, 1.0)
    assert env.max_episode_steps(None) == 1000


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_step_keeps_the_pole_up_and_pays_one():
    env = make_jax_env("brax/inverted_pendulum")
    ts, obs = jax.jit(lambda: run_steps(env, jnp.zeros((1,)), 3))()
    assert obs.shape == (4,) and obs.dtype == jnp.float32
    assert ts.obs.shape == (3, 4) and ts.reward.shape == (3,)
    np.testing.assert_allclose(ts.reward, 1.0)
    assert not np.any(ts.terminated | ts.truncated)
    np.testing.assert_array_equal(ts.episode_length, [1, 2, 3])
    np.testing.assert_allclose(ts.episode_return, [1.0, 2.0, 3.0])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_falling_terminates_and_the_time_limit_truncates_with_auto_reset():
    """Pushed one way the pole falls: the episode terminates (not truncated) and the next
    episode starts (its observation near upright, the final one kept apart). Held still with
    a 5-step limit the episode is truncated (not terminated) at step 5, then again at 10."""
    env = make_jax_env("brax/inverted_pendulum")
    ts, _ = jax.jit(lambda: run_steps(env, jnp.full((1,), PUSH), 200))()
    ended = np.flatnonzero(np.asarray(ts.terminated))
    assert ended.size > 0 and not np.any(ts.truncated)
    first = int(ended[0])
    assert int(ts.episode_length[first]) == first + 1
    assert abs(float(ts.final_obs[first][1])) > 0.2  # the pole's angle past the limit
    assert abs(float(ts.obs[first][1])) < 0.05  # the next episode's first observation
    assert int(ts.episode_length[first + 1]) == 1

    limited = BraxEnv("inverted_pendulum", episode_length=5)
    ts, _ = jax.jit(lambda: run_steps(limited, jnp.zeros((1,)), 10))()
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(ts.truncated)), [4, 9])
    assert not np.any(ts.terminated)
    np.testing.assert_array_equal(ts.episode_length, [1, 2, 3, 4, 5] * 2)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sac_trains_under_anakin_with_exact_counters(tmp_path):
    """A few hundred env steps of SAC on `brax/inverted_pendulum` under Anakin on 2 devices:
    the run takes exactly its budget, its gradient steps are the replay ratio's, every
    metric is finite and episodes (returns of whole steps balanced, at most 1000) complete."""
    config = Config(
        env=EnvConfig("brax/inverted_pendulum"),
        agent=SACConfig(buffer_size=1024, batch_size=32, hidden_sizes=(32, 32), replay_ratio=32.0, learning_starts=64),
        arch=AnakinConfig(num_envs=4, rollout_length=8, updates_per_call=4, devices=(0, 1)),
        total_env_steps=384,
        run_dir=str(tmp_path / "run"),
    )
    result = train(config, console=False)
    assert result.env_steps == 384
    rows = result.metrics
    assert [row["env_steps"] for row in rows] == [128, 256, 384]
    # Per device an update adds 8 x 2 steps and earns 32 * 16 / 32 = 16 gradient steps, from
    # the second update on (64 env steps of both devices): 11 of the 12 updates learn.
    counter = result.state.agent.opt_state.gradient_steps  # a 64-bit Count, [S] for the one seed
    assert int(jax.tree.map(lambda word: word[0], counter)) == 11 * 16
    assert rows[-1]["replay_ratio_achieved"] == pytest.approx(32.0)
    for row in rows:
        assert all(np.isfinite(value) for value in row.values() if isinstance(value, float))
    returns = [row["episode_return"] for row in rows if row["episode_return"] is not None]
    assert returns and all(1.0 <= value <= 1000.0 for value in returns)
