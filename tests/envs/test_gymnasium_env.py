"""The Gymnasium adapter against Gymnasium's own environments: specs, box actions (clipped to
the bounds) and the order of `send` and `recv`."""

import gymnasium
import numpy as np
import pytest

from podracer.config import EnvConfig
from podracer.envs.gymnasium_env import GymnasiumEnv, gymnasium_specs
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec


def test_specs_are_the_spaces_of_the_id():
    assert gymnasium_specs(EnvConfig("CartPole-v1")) == (ObsSpec((4,), np.dtype(np.float32)), DiscreteSpec(2))
    obs_spec, action_spec = gymnasium_specs(EnvConfig("Pendulum-v1"))
    assert obs_spec == ObsSpec((3,), np.dtype(np.float32)) and isinstance(action_spec, BoxSpec)
    assert action_spec.shape == (1,) and action_spec.low.tolist() == [-2.0] and action_spec.high.tolist() == [2.0]


def test_box_actions_step_gymnasiums_environments_clipped_to_the_bounds():
    """Pendulum-v1, environment i seeded `seed + i` (as `SyncVectorEnv.reset(seed)` does):
    the torques 0.5 and -3 (clipped to -2) give Gymnasium's own next observations and rewards."""
    env = GymnasiumEnv(EnvConfig("Pendulum-v1", backend="gymnasium"), num_envs=2, seed=4)
    try:
        first = env.reset()
        env.send(np.asarray([[0.5], [-3.0]], np.float32))
        ts = env.recv().timestep
    finally:
        env.close()
    assert first.dtype == ts.obs.dtype == ts.final_obs.dtype == np.float32
    for i, torque in enumerate([0.5, -2.0]):
        raw = gymnasium.make("Pendulum-v1")
        obs, _ = raw.reset(seed=4 + i)
        np.testing.assert_allclose(first[i], obs, rtol=1e-6)
        obs, reward, *_ = raw.step(np.asarray([torque], np.float32))
        np.testing.assert_allclose(ts.obs[i], obs, rtol=1e-6)
        np.testing.assert_allclose(ts.reward[i], reward, rtol=1e-6)


def test_recv_without_a_send_is_an_error():
    env = GymnasiumEnv(EnvConfig("CartPole-v1", backend="gymnasium"), num_envs=1, seed=0)
    try:
        env.reset()
        with pytest.raises(RuntimeError, match=r"recv\(\) without a send\(\)"):
            env.recv()
        env.send(np.zeros(1, np.int32))
        env.recv()
        with pytest.raises(RuntimeError, match=r"recv\(\) without a send\(\)"):
            env.recv()
    finally:
        env.close()


class _CutsItself(gymnasium.Env):
    """Truncates its own episodes after 3 steps (no `TimeLimit`); observes its step count."""

    observation_space = gymnasium.spaces.Box(0, 10, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, False, self.t == 3, {}


def test_an_environment_that_truncates_itself_is_truncated():
    """A truncation of the environment's own, with no time limit podracer counts: the episode
    ends truncated (not terminated), its last observation is `final_obs`, the next starts."""
    gymnasium.register("PodracerCutsItself-v0", entry_point=_CutsItself)
    env = GymnasiumEnv(EnvConfig("PodracerCutsItself-v0", backend="gymnasium"), num_envs=1, seed=0)
    try:
        env.reset()
        steps = []
        for _ in range(6):
            env.send(np.zeros(1, np.int32))
            steps.append(env.recv())
    finally:
        env.close()
    assert [bool(s.timestep.truncated[0]) for s in steps] == [False, False, True] * 2
    assert [bool(s.episode_end[0]) for s in steps] == [False, False, True] * 2
    assert not any(s.timestep.terminated.any() for s in steps)
    assert [float(s.timestep.final_obs[0, 0]) for s in steps] == [1, 2, 3] * 2
    assert [float(s.timestep.obs[0, 0]) for s in steps] == [1, 2, 0] * 2
    assert [int(s.timestep.episode_length[0]) for s in steps] == [1, 2, 3] * 2
