"""Host environments: the JAX envs' TimeStep semantics over EnvPool and Gymnasium."""

from __future__ import annotations

import numpy as np
import pytest

from podracer.config import ConfigError, EnvConfig
from podracer.envs import UnknownEnvError
from podracer.envs.host import EpisodeCounters, HostStep, host_backend, host_env_specs, make_host_env
from podracer.types import ObsSpec

pytestmark = pytest.mark.timeout(60)


def run_steps(env, num_steps: int, seed: int = 0) -> list[HostStep]:
    """Step `env` with random actions; every HostStep, plus the observation acted on."""
    rng = np.random.default_rng(seed)
    obs = env.reset()
    steps = []
    for _ in range(num_steps):
        env.send(rng.integers(0, env.action_spec.num_actions, env.num_envs))
        step = env.recv()
        steps.append((obs, step))
        obs = step.timestep.obs
    return steps


def assert_cartpole_kinematics(obs_before: np.ndarray, obs_after: np.ndarray) -> None:
    """CartPole integrates by Euler steps of 0.02 s: the observation a step ends in has
    `x = x_prev + 0.02 * xdot_prev` and `theta = theta_prev + 0.02 * thetadot_prev`, which
    no other observation (the one before, or the next episode's first) satisfies."""
    predicted = obs_before[:, [0, 2]] + 0.02 * obs_before[:, [1, 3]]
    np.testing.assert_allclose(obs_after[:, [0, 2]], predicted, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_cartpole_final_obs_is_where_each_episode_ended(backend):
    """At every step, and so at every episode end, `final_obs` is the state the step led
    to (CartPole's kinematics from the observation acted on), not a stale one."""
    env = make_host_env(EnvConfig("CartPole-v1", backend=backend), 4, seed=2)
    try:
        steps = run_steps(env, 300, seed=2)
    finally:
        env.close()
    ends = 0
    for obs, step in steps:
        assert_cartpole_kinematics(obs, step.timestep.final_obs)
        ends += step.timestep.done.sum()
    assert ends >= 20


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_cartpole_every_step_is_a_real_transition(backend):
    """CartPole pays 1 per step: a hidden auto-reset step (reward 0) would show up here."""
    env = make_host_env(EnvConfig("CartPole-v1", backend=backend), 4, seed=0)
    try:
        steps = run_steps(env, 300)
    finally:
        env.close()
    lengths = np.zeros(4, int)
    ends = 0
    for _, step in steps:
        ts = step.timestep
        assert (ts.reward == 1.0).all()
        lengths += 1
        np.testing.assert_array_equal(ts.episode_length, lengths)
        np.testing.assert_array_equal(ts.episode_return, lengths.astype(np.float32))
        done = ts.terminated | ts.truncated
        assert not ts.truncated.any()  # random play never lasts 500 steps
        np.testing.assert_array_equal(step.episode_end, done)
        # Where the episode went on, final_obs is obs; where it ended, obs is a fresh start.
        np.testing.assert_array_equal(ts.final_obs[~done], ts.obs[~done])
        assert (np.abs(ts.obs[done]) <= 0.05).all()
        assert (np.abs(ts.final_obs[done]) > 0.05).any(axis=-1).all()
        lengths[done] = 0
        ends += done.sum()
    assert ends >= 20


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_truncation_is_computed_from_elapsed_steps(backend):
    """A simple controller keeps the pole up, so episodes end by the time limit only."""
    env = make_host_env(EnvConfig("CartPole-v1", backend=backend, max_episode_steps=25), 3, seed=1)
    try:
        obs = env.reset()
        for t in range(1, 76):
            env.send((obs[:, 2] + obs[:, 3] > 0).astype(np.int32))  # push towards the lean
            ts = env.recv().timestep
            before, obs = obs, ts.obs
            assert_cartpole_kinematics(before, ts.final_obs)
            limit = t % 25 == 0
            assert not ts.terminated.any()
            assert ts.truncated.all() == limit and ts.truncated.any() == limit
            if limit:
                np.testing.assert_array_equal(ts.episode_length, [25] * 3)
                assert not np.array_equal(ts.obs, ts.final_obs)
    finally:
        env.close()


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_terminating_on_the_time_limit_step_is_termination(backend):
    """Pushing left, poles fall at step 8 or 9; with a limit of 9 steps, those that fall on
    the 9th still terminate (the pole is down), and only the others are truncated. EnvPool
    reports `terminated = False` on the step that reaches its own limit."""
    env = make_host_env(EnvConfig("CartPole-v1", backend=backend, max_episode_steps=9), 16, seed=0)
    ends_at_limit = {"terminated": 0, "truncated": 0}
    try:
        env.reset()
        for _ in range(30):
            env.send(np.zeros(16, np.int32))
            ts = env.recv().timestep
            pole_down = (np.abs(ts.final_obs[:, 2]) > 12 * 2 * np.pi / 360) | (np.abs(ts.final_obs[:, 0]) > 2.4)
            limit = ts.episode_length == 9
            np.testing.assert_array_equal(ts.terminated, pole_down)
            np.testing.assert_array_equal(ts.truncated, ~pole_down & limit)
            ends_at_limit["terminated"] += int((pole_down & limit).sum())
            ends_at_limit["truncated"] += int((~pole_down & limit).sum())
    finally:
        env.close()
    assert min(ends_at_limit.values()) >= 1, ends_at_limit


def test_episode_counters_time_limit_and_termination():
    counters = EpisodeCounters(2, max_steps=3)
    no, yes = np.array([False, False]), np.array([True, False])
    r = np.ones(2, np.float32)
    assert not counters.step(r, no, no)[0].any()
    truncated, end, ret, length = counters.step(r, yes, yes)  # env 0 terminates at step 2
    assert not truncated.any() and end.tolist() == [True, False] and length.tolist() == [2, 2]
    truncated, end, ret, length = counters.step(r, no, no)  # env 1 reaches the limit
    assert truncated.tolist() == [False, True] and ret.tolist() == [1.0, 3.0]
    # Terminating on the last allowed step is termination, not truncation.
    counters = EpisodeCounters(1, max_steps=1)
    assert not counters.step(np.ones(1), np.array([True]), np.array([True]))[0].any()


def test_atari_preprocessing_episodic_life_and_real_returns():
    config = EnvConfig("Breakout-v5", episodic_life=True, reward_clip=True, max_episode_steps=2000)
    obs_spec, action_spec = host_env_specs(config)
    assert obs_spec.shape == (84, 84, 4) and obs_spec.dtype == np.uint8 and action_spec.num_actions == 4
    env = make_host_env(config, 2, seed=0)
    try:
        steps = run_steps(env, 400)
    finally:
        env.close()
    obs, first = steps[0]
    assert obs.shape == (2, 84, 84, 4) and obs.dtype == np.uint8
    lives_lost = sum(step.timestep.terminated.sum() for _, step in steps)
    games = [(step.timestep.episode_return[i], step.timestep.episode_length[i])
             for _, step in steps for i in np.flatnonzero(step.episode_end)]
    assert games, "random Breakout loses 5 lives well within 400 steps"
    # A game spans 5 lives: 5 terminations per logged episode, each game longer than a life.
    assert lives_lost >= 5 * len(games)
    for _, step in steps:
        ts = step.timestep
        assert set(np.unique(ts.reward)) <= {-1.0, 0.0, 1.0}
        assert not (step.episode_end & ~ts.terminated & ~ts.truncated).any()


def test_atari_time_limit_truncates_the_game():
    env = make_host_env(EnvConfig("Pong-v5", max_episode_steps=40), 2, seed=0)
    try:
        steps = run_steps(env, 80)
    finally:
        env.close()
    for t, (_, step) in enumerate(steps, start=1):
        ts = step.timestep
        assert ts.truncated.all() == (t % 40 == 0) and not ts.terminated.any()
        assert (ts.episode_length == (t - 1) % 40 + 1).all()


@pytest.mark.parametrize("env_id", ["CliffWalking-v0", "Blackjack-v1"])
def test_envpool_ids_without_a_time_limit_of_their_own(env_id):
    """EnvPool gives ids with no time limit int32's largest; the limit podracer sets it (one
    step beyond its own, see `envpool_options`) must stay an int32, not overflow into a
    TypeError from EnvPool's config at setup."""
    config = EnvConfig(env_id, backend="envpool")
    host_env_specs(config)
    env = make_host_env(config, 2, seed=0)
    try:
        steps = run_steps(env, 5)
    finally:
        env.close()
    assert not any(step.timestep.truncated.any() for _, step in steps)


def test_gymnasium_fallback_for_ids_envpool_lacks():
    config = EnvConfig("Taxi-v4")
    assert host_backend(config) == "gymnasium"
    env = make_host_env(config, 2, seed=0)
    try:
        steps = run_steps(env, 250)
    finally:
        env.close()
    assert any(step.timestep.truncated.any() for _, step in steps)  # Taxi's limit is 200 steps


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_state_index_observations_are_one_hot(backend):
    """FrozenLake's `Discrete(16)` observation is a state index: agents see it one-hot,
    float32 [16], the final observation of an ended episode too."""
    env = make_host_env(EnvConfig("FrozenLake-v1", backend=backend), 4, seed=0)
    try:
        assert env.observation_spec == ObsSpec((16,), np.dtype(np.float32))
        first = env.reset()
        assert first.shape == (4, 16) and first.dtype == np.float32
        np.testing.assert_array_equal(first.argmax(-1), 0)  # every episode starts in the corner
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(200):
            env.send(rng.integers(0, 4, 4))
            ts = env.recv().timestep
            for obs in (ts.obs, ts.final_obs):
                assert obs.shape == (4, 16) and obs.dtype == np.float32
                np.testing.assert_array_equal(obs.sum(-1), 1.0)
                assert set(np.unique(obs)) <= {0.0, 1.0}
            done = ts.terminated | ts.truncated
            np.testing.assert_array_equal(ts.obs[done].argmax(-1), 0)  # the next episode's start
            # FrozenLake ends in a hole or the goal: never the start square.
            assert (ts.final_obs[ts.terminated].argmax(-1) != 0).all()
            ended += int(done.sum())
    finally:
        env.close()
    assert ended > 0


def test_one_hot_of_a_space_that_starts_elsewhere():
    """`Discrete(4, start=2)` observations 2 .. 5 are one-hot in their place, any batch
    shape; one outside the space is an error, not a wrapped-around index."""
    import gymnasium

    from podracer.envs.host import one_hot, one_hot_size

    space = gymnasium.spaces.Discrete(4, start=2)
    assert one_hot_size(space) == 4 and one_hot_size(gymnasium.spaces.Box(0, 1, (3,))) is None
    np.testing.assert_array_equal(one_hot(np.array([2, 5, 3]), space), np.eye(4, dtype=np.float32)[[0, 3, 1]])
    assert one_hot(np.array([[4]]), space).shape == (1, 1, 4) and one_hot(np.int64(2), space).shape == (4,)
    for outside in (1, 6):
        with pytest.raises(ValueError, match=r"outside its space Discrete\(4, start=2\)"):
            one_hot(np.array([3, outside]), space)


def test_unknown_id_lists_close_matches():
    with pytest.raises(UnknownEnvError, match="CartPole-v1"):
        make_host_env(EnvConfig("CartPol-v1"), 2, seed=0)
    with pytest.raises(UnknownEnvError, match="Pong-v5"):
        host_backend(EnvConfig("Pong-v4", backend="envpool"))


def test_unknown_id_names_the_envpool_extra_when_envpool_is_missing(monkeypatch):
    from podracer.envs import envpool_env

    with pytest.raises(UnknownEnvError) as installed:
        host_backend(EnvConfig("Pong-v4"))
    assert "podracer[envpool]" not in str(installed.value)
    monkeypatch.setattr(envpool_env, "envpool_ids", lambda: ())  # as without EnvPool
    for backend in ("auto", "envpool"):
        with pytest.raises(UnknownEnvError, match=r"not installed: pip install 'podracer\[envpool\]'"):
            host_backend(EnvConfig("Pong-v5", backend=backend))


@pytest.mark.parametrize("field, value", [
    ("max_episode_steps", 0), ("max_episode_steps", 2**31), ("repeat_action_probability", 1.5), ("noop_max", -1),
    ("frame_skip", 0), ("frame_stack", 0), ("backend", "dm_env"),
])
def test_env_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"env.{field}"):
        EnvConfig("Pong-v5", **{field: value})


@pytest.mark.parametrize("env_id, backend, space", [("Blackjack-v1", "gymnasium", "Tuple"),
                                                    ("CheetahRun-v1", "envpool", "Dict")])
def test_structured_observation_spaces_are_one_line_config_errors(env_id, backend, space):
    """A Tuple or Dict observation space is refused at setup with one line naming it,
    never a TypeError from inside the spec conversion."""
    import dataclasses

    from experiments import presets
    from sebulba.runner import setup

    config = presets.get("ppo-cartpole-sebulba")
    config = dataclasses.replace(config, env=dataclasses.replace(config.env, id=env_id, backend=backend))
    with pytest.raises(ConfigError, match=f"env.id: {env_id} has observation space {space}"):
        setup(config)


def test_max_episode_steps_truncates_jax_environments():
    """`env.max_episode_steps` is the time limit of a JAX environment too (Anakin's, and
    Sebulba's "jax" backend), as it is of EnvPool's and Gymnasium's: never ignored."""
    from podracer.envs import make_configured_jax_env

    config = EnvConfig("CartPole-v1", backend="jax", max_episode_steps=7)
    assert make_configured_jax_env(config).max_episode_steps(None) == 7
    env = make_host_env(config, 4, seed=0)
    env.reset()
    truncated = False
    for t in range(30):
        env.send(np.full(4, t % 2, np.int32))  # alternating pushes: balanced well past 7 steps
        step = env.recv()
        assert (step.timestep.episode_length <= 7).all()
        truncated |= bool(step.timestep.truncated.any())
    assert truncated


def test_gymnasium_discrete_actions_with_a_start_are_offset():
    """Agents act in 0 .. n - 1; a Gymnasium `Discrete(n, start=s)` gets s .. s + n - 1
    (here action k is rewarded k - 1), never an action outside its space."""
    import gymnasium

    class Shifted(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(-1, 1, (1,), np.float32)
        action_space = gymnasium.spaces.Discrete(3, start=-1)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, np.float32), {}

        def step(self, action):
            assert self.action_space.contains(action), action
            return np.zeros(1, np.float32), float(action), False, False, {}

    gymnasium.register("PodracerShiftedActions-v0", entry_point=Shifted, max_episode_steps=10)
    env = make_host_env(EnvConfig("PodracerShiftedActions-v0", backend="gymnasium"), 3, seed=0)
    assert env.action_spec.num_actions == 3
    env.reset()
    env.send(np.array([0, 1, 2], np.int32))
    np.testing.assert_array_equal(env.recv().timestep.reward, [-1.0, 0.0, 1.0])


def test_a_gymnasium_id_whose_extra_is_missing_is_a_one_line_config_error(monkeypatch):
    """A Gymnasium id whose dependency is not installed (Box2D for LunarLander-v3) raises
    Gymnasium's DependencyNotInstalled, which is no ImportError: it is refused at setup like
    any environment that cannot load, one line naming the id and the missing extra."""
    import gymnasium
    from gymnasium.error import DependencyNotInstalled

    import sebulba.runner
    from experiments import presets

    def missing_extra(*args, **kwargs):
        raise DependencyNotInstalled('Box2D is not installed, run `pip install "gymnasium[box2d]"`')

    monkeypatch.setattr(gymnasium, "make", missing_extra)
    config = presets.get("ppo-cartpole-sebulba", env=dict(id="LunarLander-v3", backend="gymnasium"))
    with pytest.raises(ConfigError, match=r"env.id: LunarLander-v3 cannot be loaded here: Box2D is not installed"):
        sebulba.runner.setup(config)


def test_an_environment_that_cannot_load_is_a_one_line_config_error(monkeypatch):
    """An id whose backend lacks a system library (EnvPool's Procgen without Qt raises
    ImportError) is refused at setup naming the id, not with a traceback."""
    import sebulba.runner
    from experiments import presets

    def missing_library(env_config):
        raise ImportError("EnvPool Procgen requires the system Qt 5 runtime")

    monkeypatch.setattr(sebulba.runner, "host_env_specs", missing_library)
    with pytest.raises(ConfigError, match="env.id: CartPole-v1 cannot be loaded here: EnvPool Procgen requires"):
        sebulba.runner.setup(presets.get("ppo-cartpole-sebulba"))


def test_specs_of_gymnasium_spaces_by_hand():
    """Float observations are float32 whatever their space says, others keep their dtype, a
    state index is one-hot; a box action keeps its bounds; other action spaces are refused."""
    from gymnasium import spaces

    from podracer.envs.host import specs_of_spaces
    from podracer.types import BoxSpec, DiscreteSpec

    f64 = spaces.Box(-1.0, 1.0, (3,), np.float64)
    assert specs_of_spaces(f64, spaces.Discrete(4), "x") == (ObsSpec((3,), np.dtype(np.float32)), DiscreteSpec(4))
    image = spaces.Box(0, 255, (2, 2), np.uint8)
    assert specs_of_spaces(image, spaces.Discrete(2), "x")[0] == ObsSpec((2, 2), np.dtype(np.uint8))
    assert specs_of_spaces(spaces.Discrete(5), spaces.Discrete(2), "x")[0] == ObsSpec((5,), np.dtype(np.float32))
    _, box = specs_of_spaces(f64, spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), (2,), np.float32), "x")
    assert isinstance(box, BoxSpec) and box.shape == (2,)
    np.testing.assert_array_equal(box.low, [-1.0, 0.0])
    np.testing.assert_array_equal(box.high, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"Bad-v0 has action space MultiDiscrete.*need Discrete or Box actions"):
        specs_of_spaces(f64, spaces.MultiDiscrete([2, 3]), "Bad-v0")
    # A vector of binary flags is not one choice among n.
    with pytest.raises(ValueError, match=r"Bad-v0 has action space MultiBinary.*need Discrete or Box actions"):
        specs_of_spaces(f64, spaces.MultiBinary(2), "Bad-v0")


def test_one_hot_of_a_state_outside_its_space_is_an_error():
    from gymnasium import spaces

    from podracer.envs.host import one_hot

    space = spaces.Discrete(3, start=1)
    np.testing.assert_array_equal(one_hot(np.array([1, 3]), space), [[1, 0, 0], [0, 0, 1]])
    for obs in ([0, 1], [1, 4]):
        with pytest.raises(ValueError, match=r"outside its space Discrete\(3, start=1\)"):
            one_hot(np.array(obs), space)


def test_episode_counters_count_int32_lengths_and_float32_returns():
    counters = EpisodeCounters(2, 3)
    no = np.zeros(2, bool)
    truncated, end, returns, lengths = counters.step(np.array([1.0, 2.0]), no, no)
    assert lengths.dtype == np.int32 and returns.dtype == np.float32
    np.testing.assert_array_equal(returns, [1.0, 2.0])
    truncated, end = counters.end(np.array([True, False]), truncated, end)
    np.testing.assert_array_equal(truncated, [True, False])
    np.testing.assert_array_equal(end, [True, False])
    _, _, returns, lengths = counters.step(np.array([0.5, 0.5]), no, no)
    np.testing.assert_array_equal(returns, [0.5, 2.5])
    np.testing.assert_array_equal(lengths, [1, 2])


def test_an_id_of_no_family_has_no_record():
    from podracer.envs.host import host_env_record

    assert host_env_record(EnvConfig("CartPole-v1")) is None


def test_env_action_clips_a_box_to_its_bounds_and_gives_discrete_actions_as_int32():
    from podracer.envs.host import env_action
    from podracer.types import DiscreteSpec, box_spec

    box = env_action(np.array([[0.5], [-3.0], [3.0]]), box_spec((1,), -2.0, 2.0), np.float32)
    assert box.dtype == np.float32
    np.testing.assert_array_equal(box, [[0.5], [-2.0], [2.0]])
    discrete = env_action(np.array([0, 2]), DiscreteSpec(3))
    assert discrete.dtype == np.int32 and discrete.tolist() == [0, 2]


def test_host_env_ids_are_the_union_of_every_backends(monkeypatch):
    import podracer.envs
    from podracer.envs import envpool_env, gymnasium_env
    from podracer.envs.host import host_env_ids

    monkeypatch.setattr(envpool_env, "envpool_ids", lambda: ("Pong-v5", "CartPole-v1"))
    monkeypatch.setattr(gymnasium_env, "gymnasium_ids", lambda: ("Taxi-v4", "CartPole-v1"))
    monkeypatch.setattr(podracer.envs, "jax_env_ids", lambda: ["Catch"])
    assert {"Pong-v5", "Taxi-v4", "Catch", "CartPole-v1"} <= set(host_env_ids())


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_env_params_are_refused_on_envpool_and_gymnasium(backend):
    with pytest.raises(ConfigError, match=f"env.params sets parameters of JAX environments.*runs on {backend}"):
        host_backend(EnvConfig("CartPole-v1", backend=backend, params=("gravity=9",)))


def test_an_id_the_jax_backend_does_not_know_is_an_unknown_env_error(monkeypatch):
    import podracer.envs

    monkeypatch.setattr(podracer.envs, "jax_env_ids", lambda: ["Catch", "CartPole-v1"])
    with pytest.raises(UnknownEnvError, match="CartPol-v1"):
        host_backend(EnvConfig("CartPol-v1", backend="jax"))


def test_observed_indices_out_of_range_name_the_id():
    with pytest.raises(ConfigError, match=r"must be in \[0, 4\) for CartPole-v1"):
        host_env_specs(EnvConfig("CartPole-v1", backend="gymnasium", observe=(0, 9)))


def test_a_familys_specs_and_record_get_the_config(monkeypatch):
    from podracer.envs import families
    from podracer.envs.host import host_env_record
    from podracer.plugins import load_plugins

    load_plugins()
    monkeypatch.setattr(families, "_HOST_FAMILIES", dict(families._HOST_FAMILIES))
    calls = []

    def specs(*args):
        calls.append(args)
        return ObsSpec((2,), np.dtype(np.float32)), None

    families.register_host_env_family("recorded", r"Rec-\d", None, specs, record=lambda env_id: {"id": env_id})
    config = EnvConfig("Rec-1", max_episode_steps=9, params=("a=1",))
    assert host_env_specs(config)[0] == ObsSpec((2,), np.dtype(np.float32))
    assert calls == [("Rec-1", 9, ("a=1",))]
    assert host_env_record(config) == {"id": "Rec-1"}
