"""The EnvPool adapter's options and observations, against EnvPool's own pool and by hand."""

import numpy as np
import pytest

pytest.importorskip("envpool", reason="EnvPool is not installed: pip install 'podracer[envpool]'")

from podracer.config import EnvConfig  # noqa: E402
from podracer.envs.envpool_env import EnvPoolEnv, envpool_specs  # noqa: E402


def test_atari_frame_stack_is_the_observations_last_axis():
    """`env.frame_stack=2` (EnvPool's `stack_num`, 4 by default) reaches the spec and the
    pool: two stacked frames, the first observation EnvPool's own transposed."""
    import envpool

    config = EnvConfig("Pong-v5", frame_stack=2, max_episode_steps=50)
    obs_spec, _ = envpool_specs(config)
    assert obs_spec.shape == (84, 84, 2) and obs_spec.dtype == np.uint8
    env = EnvPoolEnv(config, num_envs=1, seed=3)
    raw = envpool.make(
        "Pong-v5",
        env_type="gymnasium",
        num_envs=1,
        batch_size=1,
        seed=3,
        stack_num=2,
        max_episode_steps=51,
        noop_max=config.noop_max,
        repeat_action_probability=config.repeat_action_probability,
        episodic_life=config.episodic_life,
        reward_clip=config.reward_clip,
    )
    try:
        obs = env.reset()
        expected, _ = raw.reset(np.zeros(1, np.int32))
        assert env.frame_stack == 2 and obs.shape == (1, 84, 84, 2)
        np.testing.assert_array_equal(obs, expected.transpose(0, 2, 3, 1))
    finally:
        env.close()
        raw.close()


def test_observations_are_put_in_env_id_order():
    """A batch EnvPool returns out of order is sorted by its `env_id`."""
    env = EnvPoolEnv(EnvConfig("CartPole-v1", backend="envpool"), num_envs=3, seed=0)
    try:
        obs = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(env._observation(obs, np.array([2, 0, 1], np.int32)), obs[[1, 2, 0]])
        np.testing.assert_array_equal(env._observation(obs, np.arange(3, dtype=np.int32)), obs)
    finally:
        env.close()
