"""`podracer evaluate RUN_DIR`: the latest checkpoint's policy on fresh environments.

Exactly `episodes` episodes run side by side until every one has ended once; the policy
is greedy (the argmax; for continuous actions the Gaussian's mean, clipped to the box)
unless `sample`. A run with observation normalisation evaluates with the statistics its
checkpoint holds (they are part of the parameters). The same seed gives the same numbers. An Anakin run is
evaluated on its JAX environment (one vmapped environment per episode, in one jitted
`lax.while_loop`), a Sebulba run on its host environment (EnvPool or Gymnasium, one per
episode; with Atari's episodic life an episode is a whole game). `--video FILE` draws one
episode (GIF, or MP4 when imageio-ffmpeg is installed): a JAX environment's
`render(state)`, or a host environment's image observations (Atari frames).

A host environment may have no time limit (Gymnasium's CliffWalking-v1, EnvPool's
CliffWalking-v0 and Blackjack-v1), and a JAX one may be given a very long one
(`env.max_episode_steps`), where a greedy policy that walks into a wall would not end its
episode: an episode still running after `max_steps` steps ends there, its return so far
counted and the result's `unfinished` counting such episodes (a video shows at most
`max_steps` steps too).
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from experiments.run_dir import load_run_config
from podracer.agents import make_agent
from podracer.checkpoint import Checkpointer, NoCheckpointError, checkpoint_dir
from podracer.config import Config, ConfigError
from podracer.envs import JaxEnv, UnknownEnvError, make_configured_jax_env
from podracer.envs.base import clip_action, step_batch
from podracer.envs.host import host_env_specs, make_host_env
from podracer.envs.render import can_render
from podracer.population import concrete_config, make_population, population_size
from podracer.types import (
    ActionSpec,
    Array,
    BoxSpec,
    CoreState,
    ObservationSpec,
    Params,
    PRNGKey,
    network_obs_spec,
    split_mask,
)
from sebulba.config import SebulbaConfig

# imageio and imageio-ffmpeg (MP4 videos) are not podracer's dependencies: imported where used.
DEFAULT_MAX_STEPS = 100_000  # the steps an evaluation episode may last (Atari's own limit: 27,000)


class Policy(NamedTuple):
    """The policy under evaluation, with the memory of a recurrent agent:
    `act(params, obs [B, ...], key, core, start) -> (action [B], core)`, and `initial(B) ->
    (core, start)` before a batch's first step (`(None, None)`: feed-forward). `start [B]`
    marks observations that begin an episode (the core state is reset there)."""

    act: Callable[[Params, Any, PRNGKey, CoreState, Any], tuple[Array, CoreState]]
    initial: Callable[[int], tuple[CoreState, Any]]


class Loaded(NamedTuple):
    config: Config
    policy: Policy
    params: Params
    env_steps: int
    updates: int = 0  # the checkpoint's step: updates applied


def is_host_run(config: Config) -> bool:
    """Whether the run trained on host environments (Sebulba) rather than JAX ones."""
    return isinstance(config.arch, SebulbaConfig)


def evaluate(
    run_dir: str, episodes: int = 100, seed: int = 0, agent_seed: int = 0, sample: bool = False,
    video: str | None = None, max_steps: int = DEFAULT_MAX_STEPS, step: int | None = None,
) -> dict[str, Any]:
    """`{"mean_return", "std_return", "episodes", "unfinished", "step", ...}` of the run's
    latest checkpoint, or of the checkpoint of update `step` (one the run kept: an earlier
    policy, or the one before a damaged latest); `max_steps` bounds every episode (see the
    module docstring)."""
    # From Python as from the command line (argparse's int): 2.5 episodes, a step "39" or
    # max_steps=2.5 (which ran 2 steps) are refused, not truncated or crashed on.
    episodes, seed, agent_seed, max_steps = (_integer(name, value) for name, value in (
        ("episodes", episodes), ("seed", seed), ("agent_seed", agent_seed), ("max_steps", max_steps)))
    step = None if step is None else _integer("step", step)
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    if not 1 <= max_steps < 2**31:  # the JAX loop counts steps in an int32
        raise ConfigError(f"max_steps must be in [1, 2**31), got {max_steps}")
    if not 0 <= seed < 2**32:  # jax.random.key keeps the low 32 bits: 2**32 would repeat seed 0
        raise ConfigError(f"seed must be in [0, 2**32), got {seed}")
    config = load_run_config(run_dir)
    env = None if is_host_run(config) else _make_env(config)
    if video is not None:
        _check_video(env, config, video)
    obs_spec, action_spec = specs(config, env)
    loaded = load_policy(run_dir, config, obs_spec, action_spec, agent_seed, sample, step)
    key_eval, key_video = jax.random.split(jax.random.key(seed))
    if env is None:
        returns, frames, unfinished = host_episode_returns(config, loaded.policy, loaded.params, key_eval, episodes,
                                                           record=video is not None, max_steps=max_steps)
    else:
        returns, unfinished = episode_returns(env, loaded.policy, loaded.params, key_eval, episodes, max_steps)
    result = {
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "episodes": int(returns.size),
        "unfinished": unfinished,
        "env": config.env.id,
        "env_steps": loaded.env_steps,
        "step": loaded.updates,
        "agent_seed": agent_seed,
        "member": agent_seed,
        "seed": seed,
        "policy": "sample" if sample else ("mean" if isinstance(action_spec, BoxSpec) else "greedy"),
    }
    population = make_population(config)
    if population is not None:
        result["hypers"] = population.hypers(agent_seed)
    if video is not None:
        if env is not None:  # an episode of its own (a host run draws the first one evaluated)
            frames, video_return = record_episode(env, loaded.policy, loaded.params, key_video, max_steps)
        else:
            video_return = float(returns[0])
        write_video(frames, video, getattr(env, "render_fps", 20))
        result.update(video=video, video_return=video_return)
    return result


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _make_env(config: Config) -> JaxEnv:
    try:
        return make_configured_jax_env(config.env)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None


def specs(config: Config, env: JaxEnv | None) -> tuple[ObservationSpec, ActionSpec]:
    if env is None:
        return host_env_specs(config.env)
    return env.observation_spec(env.default_params), env.action_spec(env.default_params)


def _check_video(env: JaxEnv | None, config: Config, path: str) -> None:
    if env is None:
        spec = network_obs_spec(specs(config, None)[0])
        # Pixels only: a 3-D grid of 0/1 planes (MinAtar) is no picture (drawn, it is black).
        if len(spec.shape) != 3 or np.dtype(spec.dtype) != np.uint8:
            raise ConfigError(f"video: host environment {config.env.id!r} has no image observations to draw "
                              f"(uint8 pixels [H, W, C]; it observes {np.dtype(spec.dtype).name} {tuple(spec.shape)})")
    elif not can_render(env):
        raise ConfigError(f"video: environment {config.env.id!r} cannot render (it has no render(state) method)")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".gif", ".mp4"):
        raise ConfigError(f"video {path!r}: write a .gif or an .mp4 file")
    if suffix == ".mp4" and not _mp4_available():
        raise ConfigError("video: writing .mp4 needs `pip install imageio imageio-ffmpeg`; use a .gif")


def load_policy(run_dir: str, config: Config, obs_spec: ObservationSpec, action_spec: ActionSpec, agent_seed: int,
                sample: bool, step: int | None = None) -> Loaded:
    """The policy and parameters of member `agent_seed` (a seed, or a setting and seed of a
    sweep: `podracer.population`) from the run's latest checkpoint (or the checkpoint of
    update `step`)."""
    population = make_population(config)
    num_seeds = population_size(config)
    if not 0 <= agent_seed < num_seeds:
        raise ConfigError(f"agent_seed must be in [0, {num_seeds}) for this run ({num_seeds} members), "
                          f"got {agent_seed}")
    agent_config = config.agent if population is None else concrete_config(config.agent, population.hypers(agent_seed))
    agent = make_agent(agent_config, obs_spec, action_spec, num_updates=1, axis_name=None, env_id=config.env.id)
    if not sample and agent.greedy_act is None:
        raise ConfigError(f"{type(config.agent).__name__} has no greedy policy; evaluate with sample=True")
    abstract = jax.eval_shape(agent.init, jax.random.key(0)).params
    seed_axis = not is_host_run(config)  # Anakin states carry a leading seed axis
    if seed_axis:
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((num_seeds,) + x.shape, x.dtype), abstract)
    with Checkpointer(checkpoint_dir(run_dir), read_only=True) as checkpoints:
        if checkpoints.latest_step() is None:
            raise NoCheckpointError(f"no checkpoint to evaluate in {checkpoints.directory}")
        try:
            params, progress = checkpoints.restore_part(abstract, ("agent", "params"), step)
        except NoCheckpointError as error:  # a step the run did not keep
            raise ConfigError(f"step {step}: {error}") from None
    if seed_axis:
        params = jax.tree.map(lambda x: x[agent_seed], params)
    if sample:
        def act(p, obs, key, core, start):
            action, _, core = agent.step(p, obs, key, core, start)
            return action, core
    else:
        def act(p, obs, key, core, start):
            return agent.greedy_step(p, obs, core, start)
    return Loaded(config, Policy(act, agent.initial_acting_state), params, progress.env_steps, progress.updates)


def host_episode_returns(config: Config, policy: Policy, params: Params, key: PRNGKey, episodes: int,
                         record: bool = False, max_steps: int = DEFAULT_MAX_STEPS,
                         ) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Returns of exactly `episodes` episodes (whole games), one per host environment, with
    `record` the frames `uint8 [T, H, W, 3]` of the first one (its last stacked frame), and
    how many were still running after `max_steps` steps (each then counts its return so far)."""
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    act = jax.jit(policy.act)
    env = make_host_env(config.env, episodes, seed)
    returns = np.full(episodes, np.nan)
    frames: list[np.ndarray] = []
    stacked = getattr(env, "frame_stack", None) is not None  # Atari: channels are frames, not RGB
    core, start = policy.initial(episodes)
    unfinished = 0
    try:
        obs = env.reset()
        for _ in range(max_steps):
            if not np.isnan(returns).any():
                break
            if record and np.isnan(returns[0]):
                frames.append(_frame(np.asarray(jax.tree.leaves(split_mask(obs)[0])[0][0]), stacked))
            key, act_key = jax.random.split(key)
            action, core = act(params, obs, act_key, core, start)
            env.send(np.asarray(action))
            step = env.recv()
            first = step.episode_end & np.isnan(returns)
            returns[first] = step.timestep.episode_return[first]
            obs = step.timestep.obs
            if start is not None:
                start = step.timestep.terminated | step.timestep.truncated
        else:  # the cap: the episodes still running end here, with their return so far
            running = np.isnan(returns)
            unfinished = int(running.sum())
            returns[running] = step.timestep.episode_return[running]
    finally:
        env.close()
    return returns, (np.stack(frames) if record else None), unfinished


def _frame(obs: np.ndarray, stacked: bool = False) -> np.ndarray:
    """An image observation `[H, W, C]` as RGB `uint8 [H, W, 3]`: the newest frame of a
    frame stack (grayscale; `stacked`, or C other than 3) or the image itself (3 channels).
    An Atari stack of 3 frames is a stack, not colours."""
    image = obs if obs.shape[-1] == 3 and not stacked else np.repeat(obs[..., -1:], 3, axis=-1)
    return np.asarray(image, np.uint8)


def episode_returns(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey, episodes: int,
                    max_steps: int = DEFAULT_MAX_STEPS) -> tuple[np.ndarray, int]:
    """Undiscounted returns of exactly `episodes` episodes, one per vmapped environment, and
    how many were still running after `max_steps` steps (each then counts its return so far)."""
    run = jax.jit(_episode_returns, static_argnums=(0, 1, 4))
    returns, done = run(env, policy, params, key, episodes, jnp.int32(max_steps))
    return np.asarray(returns), int(np.sum(~np.asarray(done)))


def _episode_returns(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey, episodes: int,
                     max_steps: Array) -> tuple[Array, Array]:
    env_params = env.default_params
    reset_key, key = jax.random.split(key)
    state, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, episodes), env_params)
    done = jnp.zeros(episodes, bool)
    returns = jnp.zeros(episodes, jnp.float32)

    def not_all_done(carry):
        return ~jnp.all(carry[3]) & (carry[0] < max_steps)

    def body(carry):
        t, state, obs, done, returns, key, core, start = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action, core = policy.act(params, obs, act_key, core, start)
        state, ts = step_batch(env, jax.random.split(step_key, episodes), state, action, env_params)
        start = None if start is None else ts.done
        # An episode's return so far until it ends, then the return it ended with.
        returns = jnp.where(done, returns, ts.episode_return)
        return t + 1, state, ts.obs, done | ts.done, returns, key, core, start

    first = (jnp.int32(0), state, obs, done, returns, key, *policy.initial(episodes))
    _, _, _, done, returns, *_ = jax.lax.while_loop(not_all_done, body, first)
    return returns, done


def record_episode(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey,
                   max_steps: int = DEFAULT_MAX_STEPS) -> tuple[np.ndarray, float]:
    """Frames `uint8 [T + 1, H, W, 3]` of one episode, from the raw dynamics (no reset), its
    first `max_steps` steps at most, and the episode's undiscounted return over those steps."""
    limit = min(int(env.max_episode_steps(env.default_params)), max_steps)
    frames, length, episode_return = jax.jit(_record, static_argnums=(0, 1, 4))(env, policy, params, key, limit)
    return np.asarray(frames)[: int(length) + 1], float(episode_return)


def _record(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey, limit: int) -> tuple[Array, Array, Array]:
    env_params = env.default_params
    reset_key, key = jax.random.split(key)
    inner, obs = env.reset_env(reset_key, env_params)
    inner = jax.tree.map(jnp.asarray, inner)  # some envs start with Python scalars

    def step(carry, key):
        inner, obs, ended, core, start = carry
        act_key, step_key = jax.random.split(key)
        batch = jax.tree.map(lambda x: x[None], obs)
        action, core = policy.act(params, batch, act_key, core, start)
        action = clip_action(action[0], env.action_spec(env_params))
        start = None if start is None else jnp.zeros_like(start)  # one episode: no reset after the first step
        next_inner, next_obs, reward, terminated = env.step_env(step_key, inner, action, env_params)
        # Once the episode has ended, hold its last state.
        hold = lambda new, old: jnp.where(ended, old, new)  # noqa: E731
        next_inner, next_obs = jax.tree.map(hold, next_inner, inner), jax.tree.map(hold, next_obs, obs)
        reward = jnp.where(ended, 0.0, jnp.asarray(reward, jnp.float32))
        return (next_inner, next_obs, ended | terminated, core, start), (next_inner, ended | terminated, reward)

    first = (inner, obs, jnp.bool_(False), *policy.initial(1))
    _, (states, ended, rewards) = jax.lax.scan(step, first, jax.random.split(key, limit))
    states = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), inner, states)
    length = jnp.where(jnp.any(ended), jnp.argmax(ended) + 1, limit)
    return jax.vmap(env.render)(states), length, jnp.sum(rewards)


def write_video(frames: np.ndarray, path: str, fps: int) -> None:
    """A GIF (Pillow) or MP4 (imageio-ffmpeg) of `uint8 [T, H, W, 3]` frames."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.lower().endswith(".mp4"):
        import imageio.v2 as imageio

        imageio.mimwrite(path, list(frames), fps=fps)
        return
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def _mp4_available() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True
