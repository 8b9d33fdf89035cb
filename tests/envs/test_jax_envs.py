"""The JAX environment protocol: auto-reset, final observation, termination vs truncation."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from podracer.envs import GYMNAX_IDS, Catch, GymnaxEnv, JaxEnv, UnknownEnvError, make_jax_env
from podracer.envs.base import step_batch
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec


def run(env, actions, key=0):
    """`(first obs, TimeSteps [T, ...])` of `actions`, in one jitted program (eagerly, every
    op would compile on its own)."""
    return _run(env, jnp.asarray(actions), key)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _run(env, actions, key):
    params = env.default_params
    state, obs = env.reset(jax.random.key(key), params)

    def body(state, inputs):
        k, a = inputs
        state, ts = env.step(k, state, a, params)
        return state, ts

    keys = jax.random.split(jax.random.key(key + 1), len(actions))
    return obs, jax.lax.scan(body, state, (keys, actions))[1]


def test_catch_terminates_with_plus_or_minus_one():
    env = Catch(rows=5, columns=3)
    _, ts = run(env, [1] * 12)
    ends = np.flatnonzero(np.asarray(ts.terminated))
    np.testing.assert_array_equal(ends, [3, 7, 11])  # ball lands after rows - 1 steps
    assert set(np.asarray(ts.reward)[ends]) <= {-1.0, 1.0}
    assert not np.asarray(ts.truncated).any()
    np.testing.assert_array_equal(np.asarray(ts.episode_length)[ends], 4)
    # After a terminal step the obs is a fresh board (ball on the top row).
    assert np.asarray(ts.obs)[3][0].sum() == 1.0
    assert np.asarray(ts.final_obs)[3][0].sum() == 0.0


def test_time_limit_truncates_and_keeps_final_observation():
    """MountainCar never reaches the goal with a constant action: every episode is cut
    at 200 steps, as truncation, never termination."""
    env = make_jax_env("MountainCar-v0")
    _, ts = run(env, [1] * 450)
    truncated = np.asarray(ts.truncated)
    np.testing.assert_array_equal(np.flatnonzero(truncated), [199, 399])
    assert not np.asarray(ts.terminated).any()
    np.testing.assert_array_equal(np.asarray(ts.episode_length)[[199, 399]], 200)
    np.testing.assert_array_equal(np.asarray(ts.episode_return)[[199, 399]], -200.0)
    # final_obs is where the episode ended; obs is the reset state of the next one.
    final, nxt = np.asarray(ts.final_obs)[199], np.asarray(ts.obs)[199]
    assert not np.allclose(final, nxt)
    assert -0.6 <= nxt[0] <= -0.4 and nxt[1] == 0.0  # MountainCar's reset distribution
    np.testing.assert_allclose(np.asarray(ts.final_obs)[198], np.asarray(ts.obs)[198])


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _batch_steps(env, num_envs, num_steps, seed):
    """`vmap(env.step)` and `step_batch` at each step of one run, from the same state, keys
    and random actions (the run follows the vmapped step): `(vmapped, batched)`, each the
    `(TimeStep, next state)` of every step, `[T, B, ...]`."""
    params = env.default_params
    reset_key, key = jax.random.split(jax.random.key(seed))
    state, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)
    spec = env.action_spec(params)

    def step(state, key):
        action_key, step_key = jax.random.split(key)
        if isinstance(spec, BoxSpec):
            action = jax.random.uniform(action_key, (num_envs, *spec.shape), minval=-2.0, maxval=2.0)
        else:
            action = jax.random.randint(action_key, (num_envs,), 0, spec.num_actions)
        keys = jax.random.split(step_key, num_envs)
        v_state, v_ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
        b_state, b_ts = step_batch(env, keys, state, action, params)
        return v_state, ((v_ts, v_state), (b_ts, b_state))

    return jax.lax.scan(step, state, jax.random.split(key, num_steps))[1]


@pytest.mark.parametrize("env_id,num_envs", [("CartPole-v1", 4), ("Catch", 3), ("Pendulum-v1", 2),
                                             ("MountainCar-v0", 2), ("Breakout-MinAtar", 2)])
def test_step_batch_is_the_vmapped_step(env_id, num_envs):
    """`step_batch` skips the batch's resets at steps where no episode ended (what makes
    it cheaper), and otherwise gives what `vmap(env.step)` gives: observations after
    resets, final observations, termination, truncation, returns and the next states; over
    steps where no episode ended, where one did, and (MountainCar, Pendulum: time limits
    only) where every episode ended at once. Integers, booleans and keys are equal; floats
    to float32's last bits (the two programs are compiled apart, so XLA may round a step's
    arithmetic differently)."""
    env = make_jax_env(env_id)
    vmapped, batched = _batch_steps(env, num_envs, 450 if env_id == "MountainCar-v0" else 220, 0)
    ended = np.asarray(vmapped[0].terminated | vmapped[0].truncated)
    assert ended.any() and (~ended.any(axis=1)).any()  # both kinds of step were exercised
    for v, b in zip(jax.tree.leaves(vmapped), jax.tree.leaves(batched)):
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            v, b = jax.random.key_data(v), jax.random.key_data(b)
        if jnp.issubdtype(v.dtype, jnp.floating):
            np.testing.assert_allclose(np.asarray(b), np.asarray(v), rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(np.asarray(b), np.asarray(v))


@functools.cache
def _adapter_and_raw(env_id: str):
    """The adapter and gymnax's own environment, built once and outside any trace (some
    gymnax constructors compute with `jnp`)."""
    import gymnax

    return GymnaxEnv(env_id), *gymnax.make(env_id)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _adapter_and_gymnax(env_id: str, num_steps: int, seed: int):
    """The adapter and gymnax's own `reset`/`step` (its auto-reset included) side by side,
    with the same keys and random actions: `(adapter TimeSteps, gymnax outputs)`, `[T, ...]`."""
    env, raw, raw_params = _adapter_and_raw(env_id)
    reset_key, key = jax.random.split(jax.random.key(seed))
    state, obs = env.reset(reset_key, env.default_params)
    raw_obs, raw_state = raw.reset(reset_key, raw_params)
    spec = env.action_spec(env.default_params)

    def random_action(key):  # inside the box for continuous actions, so clipping plays no part
        if isinstance(spec, BoxSpec):
            return jax.random.uniform(key, spec.shape, minval=spec.low, maxval=spec.high)
        return jax.random.randint(key, (), 0, spec.num_actions)

    def step(carry, key):
        state, raw_state = carry
        action_key, step_key = jax.random.split(key)
        action = random_action(action_key)
        state, ts = env.step(step_key, state, action, env.default_params)
        raw_obs, raw_state, reward, terminated, truncated, info = raw.step(step_key, raw_state, action, raw_params)
        return (state, raw_state), (ts, (raw_obs, reward, terminated, truncated, info["final_observation"]))

    _, (ts, raw_steps) = jax.lax.scan(step, (state, raw_state), jax.random.split(key, num_steps))
    return (obs, ts), (raw_obs, raw_steps)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", GYMNAX_IDS)
def test_gymnax_adapter_gives_gymnax_observations_and_rewards(env_id):
    """Every gymnax id, 110 random steps: the adapter's observations (after auto-reset and
    final), rewards, terminations and episode ends are gymnax's own (DiscountingChain-bsuite's
    time feature included, and its 100-step limit as a truncation)."""
    _adapter_and_raw(env_id)
    (obs, ts), (raw_first, (raw_obs, raw_reward, raw_terminated, raw_truncated, raw_final)) = (
        _adapter_and_gymnax(env_id, 110, 0))
    # Float rounding apart (the two programs fuse Acrobot's integrator differently).
    close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-5)
    close(obs, raw_first)
    close(ts.obs, raw_obs)
    close(ts.final_obs, raw_final)
    close(ts.reward, raw_reward)
    np.testing.assert_array_equal(ts.terminated, raw_terminated)
    np.testing.assert_array_equal(ts.truncated, np.asarray(raw_truncated) & ~np.asarray(raw_terminated))
    if env_id == "DiscountingChain-bsuite":
        np.testing.assert_allclose(np.asarray(ts.final_obs)[:3, 1], [0.01, 0.02, 0.03], rtol=1e-6)
        assert np.asarray(ts.truncated)[99] and np.asarray(ts.truncated).sum() == 1


@pytest.mark.parametrize("env_id", GYMNAX_IDS)
def test_gymnax_observation_spec_matches_its_observations(env_id):
    """Every gymnax id's observation spec is the shape and dtype its observations have (the
    check user environments get): gymnax's own space says int32 for Catch-bsuite's float32
    grid and float32 for FourRooms-misc's int32 positions, and a replay buffer or an actor's
    buffer allocated from the spec then casts every observation."""
    from podracer.envs import check_env_outputs

    check_env_outputs(make_jax_env(env_id), env_id)


def test_cartpole_terminates_when_pole_falls():
    _, ts = run(make_jax_env("CartPole-v1"), [1] * 100)
    terminated = np.asarray(ts.terminated)
    assert terminated.any() and not np.asarray(ts.truncated).any()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Breakout-MinAtar",
                                    "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Catch"])
def test_registry_builds_and_steps(env_id):
    env = make_jax_env(env_id)
    params = env.default_params
    spec = env.observation_spec(params)
    state, obs = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 2), params)
    assert obs.shape == (2,) + spec.shape
    actions = jnp.zeros(2, jnp.int32)
    _, ts = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(
        jax.random.split(jax.random.key(1), 2), state, actions, params)
    assert ts.obs.shape == obs.shape and ts.reward.shape == (2,)
    assert env.action_spec(params).num_actions >= 2


def test_unknown_env_lists_close_matches():
    with pytest.raises(UnknownEnvError, match="CartPole-v1"):
        make_jax_env("CartPole-v0")


def test_jax_env_ids_lists_each_id_once():
    from podracer.envs import jax_env_ids

    ids = jax_env_ids()
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


class _NoTimeLimit(JaxEnv):
    """A user environment that leaves out `max_episode_steps`."""

    name = "NoTimeLimit"

    def reset_env(self, key: jax.Array, params: None) -> tuple[jax.Array, jax.Array]:
        return jnp.zeros((), jnp.int32), jnp.ones((2,), jnp.float32)

    def step_env(self, key: jax.Array, state: jax.Array, action: jax.Array,
                 params: None) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        return state, jnp.ones((2,), jnp.float32), jnp.float32(1.0), jnp.bool_(False)

    def observation_spec(self, params: None) -> ObsSpec:
        return ObsSpec((2,), np.dtype(np.float32))

    def action_spec(self, params: None) -> DiscreteSpec:
        return DiscreteSpec(2)


@pytest.mark.parametrize("arch", ["anakin", "sebulba"])
def test_env_without_time_limit_is_a_config_error_at_setup(arch, tmp_path, monkeypatch):
    """A JaxEnv without `max_episode_steps` is refused at setup with a ConfigError naming
    `env.max_episode_steps` (it used to raise a bare NotImplementedError while compiling,
    after the run directory was written); `env.max_episode_steps` supplies the limit."""
    import anakin
    import podracer.envs
    import sebulba
    from podracer.agents import PPOConfig
    from podracer.config import Config, ConfigError, EnvConfig

    monkeypatch.setitem(podracer.envs._USER, "NoTimeLimit-v0", _NoTimeLimit)  # registered for this test only
    arch_config = (anakin.AnakinConfig(num_envs=4, rollout_length=8) if arch == "anakin"
                   else sebulba.SebulbaConfig(num_envs=4, rollout_length=8, actor_devices=(0,), learner_devices=(0,)))
    runner = anakin.runner if arch == "anakin" else sebulba.runner
    config = Config(env=EnvConfig("NoTimeLimit-v0"), agent=PPOConfig(num_minibatches=1), arch=arch_config, run_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=r"^env\.max_episode_steps: .*NoTimeLimit-v0"):
        runner.setup(config)
    runner.setup(dataclasses.replace(config, env=EnvConfig("NoTimeLimit-v0", max_episode_steps=10)))


def test_unknown_env_without_a_close_match_says_how_to_register_one():
    with pytest.raises(UnknownEnvError, match="must be registered with register_jax_env") as info:
        make_jax_env("MyGridWorld-v0")
    assert "known: " in str(info.value)
    assert "for the podracer command, name the module that registers it in $PODRACER_IMPORT" in str(info.value)
    with pytest.raises(UnknownEnvError) as close:
        make_jax_env("CartPole-v0")
    assert "register_jax_env" not in str(close.value)


class _Walk(JaxEnv):
    """A user environment that keeps its promises: a position, one-hot observations."""

    name = "Walk"

    def reset_env(self, key: jax.Array, params: None) -> tuple[jax.Array, jax.Array]:
        return jnp.zeros((), jnp.int32), self.observe(jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, state: jax.Array, action: jax.Array,
                 params: None) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        state = jnp.clip(state + 2 * action - 1, 0, 3)
        return state, self.observe(state), (state == 3).astype(jnp.float32), state == 3

    def observe(self, state: jax.Array) -> jax.Array:
        return jax.nn.one_hot(state, 4, dtype=jnp.float32)

    def max_episode_steps(self, params: None) -> int:
        return 10

    def observation_spec(self, params: None) -> ObsSpec:
        return ObsSpec((4,), np.dtype(np.float32))

    def action_spec(self, params: None) -> DiscreteSpec:
        return DiscreteSpec(2)


class _WideSpec(_Walk):
    def observation_spec(self, params: None) -> ObsSpec:
        return ObsSpec((5,), np.dtype(np.float32))


class _Uint8Spec(_Walk):  # DQN's replay would store the float observations as uint8 zeros
    def observation_spec(self, params: None) -> ObsSpec:
        return ObsSpec((4,), np.dtype(np.uint8))


class _VectorReward(_Walk):
    def step_env(self, key, state, action, params):
        state, obs, reward, terminated = super().step_env(key, state, action, params)
        return state, obs, reward[None], terminated


class _FloatState(_Walk):
    def step_env(self, key, state, action, params):
        state, obs, reward, terminated = super().step_env(key, state, action, params)
        return state.astype(jnp.float32), obs, reward, terminated


@pytest.mark.parametrize("arch", ["anakin", "sebulba"])
@pytest.mark.parametrize("env, message", [
    (_WideSpec, "reset_env returns observations float32[4], but observation_spec declares float32[5]"),
    (_Uint8Spec, "reset_env returns observations float32[4], but observation_spec declares uint8[4]"),
    (_VectorReward, "step_env returns a reward of shape (1,); it must be a scalar"),
    (_FloatState, "step_env returns a state float32[] unlike reset_env's int32[]"),
])
def test_user_env_that_breaks_its_specs_is_a_config_error_at_setup(env, message, arch, monkeypatch):
    """A user environment whose outputs differ from what it declares is refused at setup, on
    either architecture, naming `env.id` and the difference. Before, a wider spec failed inside
    flax ("torso/Dense_0" kernel shapes), a vector reward or a retyped state inside the
    rollout's scan, and a uint8 spec over float observations trained DQN on zeros, silently."""
    import anakin
    import podracer.envs
    import sebulba
    from podracer.agents import PPOConfig
    from podracer.config import Config, ConfigError, EnvConfig

    monkeypatch.setitem(podracer.envs._USER, "Walk-v0", env)  # registered for this test only
    arch_config = (anakin.AnakinConfig(num_envs=4, rollout_length=8) if arch == "anakin"
                   else sebulba.SebulbaConfig(num_envs=4, rollout_length=8, actor_devices=(0,), learner_devices=(0,)))
    runner = anakin.runner if arch == "anakin" else sebulba.runner
    config = Config(env=EnvConfig("Walk-v0"), agent=PPOConfig(num_minibatches=1), arch=arch_config)
    with pytest.raises(ConfigError, match=r"^env\.id 'Walk-v0': ") as error:
        runner.setup(config)
    assert message in str(error.value)
    monkeypatch.setitem(podracer.envs._USER, "Walk-v0", _Walk)
    runner.setup(config)


class _KeyInState(_Walk):
    """Keeps a PRNG key in its state (a typed key, as the runners pass): valid."""

    def reset_env(self, key, params):
        return (key, jnp.zeros((), jnp.int32)), self.observe(jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        own, position = state
        own, _ = jax.random.split(own)
        position, obs, reward, terminated = super().step_env(key, position, action, params)
        return (own, position), obs, reward, terminated


def test_user_env_with_a_key_in_its_state_passes_the_spec_check():
    """The spec check compares dtypes as JAX gives them: a typed PRNG key in the state (whose
    dtype numpy cannot interpret) is accepted, and a state that drops it is still named."""
    from podracer.config import ConfigError
    from podracer.envs import check_env_outputs

    check_env_outputs(_KeyInState(), "Walk-v0")

    class _DropsKey(_KeyInState):
        def step_env(self, key, state, action, params):
            (_, position), obs, reward, terminated = super().step_env(key, state, action, params)
            return (jax.random.key_data(state[0]), position), obs, reward, terminated

    with pytest.raises(ConfigError, match=r"step_env returns a state .*uint32\[2\].* unlike reset_env's .*key<fry>"):
        check_env_outputs(_DropsKey(), "Walk-v0")


@struct.dataclass
class _TrackParams:
    length: int = struct.field(pytree_node=False, default=4)


class _Track(_Walk):
    """A walk whose observation length is a parameter, but whose spec forgets it: right
    with the default parameters only."""

    def __init__(self) -> None:
        self._params = _TrackParams()

    @property
    def default_params(self) -> _TrackParams:
        return self._params

    def replace_params(self, params: _TrackParams) -> None:
        self._params = params

    def observe(self, state: jax.Array) -> jax.Array:
        return jax.nn.one_hot(state, self._params.length, dtype=jnp.float32)


def test_user_env_spec_check_uses_the_runs_parameters(monkeypatch):
    """`--env.params` are applied before the spec check: an environment right with its
    default parameters but wrong with the run's is refused at setup (it used to pass the
    check and fail inside the network)."""
    import podracer.envs
    from podracer.config import ConfigError, EnvConfig
    from podracer.envs import make_configured_jax_env

    monkeypatch.setitem(podracer.envs._USER, "Track-v0", _Track)
    make_configured_jax_env(EnvConfig("Track-v0"))
    make_configured_jax_env(EnvConfig("Track-v0", params=("length=4",)))
    with pytest.raises(ConfigError, match=r"reset_env returns observations float32\[6\], but observation_spec "
                                          r"declares float32\[4\]"):
        make_configured_jax_env(EnvConfig("Track-v0", params=("length=6",)))


@pytest.mark.costly
def test_step_batch_honours_an_overridden_step_and_default_params():
    """An environment that overrides `step` itself gets its own `step`, vmapped (the split
    halves would bypass it); `params=None` means the environment's defaults, as for `step`."""

    class Doubled(Catch):
        def step(self, key, state, action, params=None):
            state, ts = super().step(key, state, action, params)
            return state, ts._replace(reward=2.0 * ts.reward)

    env, plain = Doubled(), Catch()
    keys = jax.random.split(jax.random.key(0), 3)
    state, _ = jax.vmap(plain.reset)(keys)
    action = jnp.zeros(3, jnp.int32)
    for _ in range(plain.rows - 2):  # to the step before the ball lands
        state, ts = step_batch(plain, keys, state, action)
    _, doubled = step_batch(env, keys, state, action, None)
    _, ts = step_batch(plain, keys, state, action, None)
    assert np.asarray(ts.terminated).all() and (np.asarray(ts.reward) != 0).all()
    np.testing.assert_array_equal(np.asarray(doubled.reward), 2.0 * np.asarray(ts.reward))
