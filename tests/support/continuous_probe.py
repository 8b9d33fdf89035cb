"""A Gymnasium twin of the JAX `ProbeContinuousAction`, for Sebulba tests: one-step
episodes, observation `2 + s` (`s = +-1`), a Box action in `[-1, 1]`, reward
`-(action - s / 2)^2`."""

import gymnasium
import numpy as np

ENV_ID = "PodracerTests/ContinuousProbe-v0"


class ContinuousProbe(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(1.0, 3.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._sign = float(self.np_random.choice([-1.0, 1.0]))
        return np.array([2.0 + self._sign], np.float32), {}

    def step(self, action):
        reward = -float(np.square(np.asarray(action, np.float32)[0] - 0.5 * self._sign))
        return np.array([2.0 + self._sign], np.float32), reward, True, False, {}


def register() -> str:
    """Register the probe's id (idempotent) and return it."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=ContinuousProbe, max_episode_steps=10)
    return ENV_ID
