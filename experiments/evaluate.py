"""`podracer evaluate RUN_DIR`: the latest checkpoint's policy on fresh JAX environments.

Exactly `episodes` episodes run side by side (one vmapped environment each, in one jitted
`lax.while_loop`) until every one has ended once; the policy is greedy (argmax) unless
`sample`. The same seed gives the same numbers. `--video FILE` draws one episode with the
environment's `render(state)` (GIF, or MP4 when imageio-ffmpeg is installed).
"""

from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from experiments.train import load_run_config
from podracer.agents import make_agent
from podracer.checkpoint import Checkpointer, NoCheckpointError, checkpoint_dir
from podracer.config import Config, ConfigError
from podracer.envs import JaxEnv, UnknownEnvError, make_jax_env
from podracer.envs.render import can_render
from podracer.types import Array, Params, PRNGKey

Policy = Callable[[Params, Array, PRNGKey], Array]  # (params, obs [B, ...], key) -> action [B]


class Loaded(NamedTuple):
    config: Config
    env: JaxEnv
    policy: Policy
    params: Params
    env_steps: int


def evaluate(
    run_dir: str, episodes: int = 100, seed: int = 0, agent_seed: int = 0, sample: bool = False,
    video: str | None = None,
) -> dict[str, Any]:
    """`{"mean_return", "std_return", "episodes", ...}` of the run's latest checkpoint."""
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {episodes}")
    config = load_run_config(run_dir)
    env = _make_env(config)
    if video is not None:
        _check_video(env, config, video)
    loaded = load_policy(run_dir, config, env, agent_seed, sample)
    key_eval, key_video = jax.random.split(jax.random.key(seed))
    returns = episode_returns(env, loaded.policy, loaded.params, key_eval, episodes)
    result = {
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "episodes": int(returns.size),
        "env": config.env.id,
        "env_steps": loaded.env_steps,
        "agent_seed": agent_seed,
        "seed": seed,
        "policy": "sample" if sample else "greedy",
    }
    if video is not None:
        frames = record_episode(env, loaded.policy, loaded.params, key_video)
        write_video(frames, video, getattr(env, "render_fps", 20))
        result["video"] = video
    return result


def _make_env(config: Config) -> JaxEnv:
    try:
        return make_jax_env(config.env.id)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None


def _check_video(env: JaxEnv, config: Config, path: str) -> None:
    if not can_render(env):
        raise ConfigError(f"--video: environment {config.env.id!r} cannot render (it has no render(state) method)")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".gif", ".mp4"):
        raise ConfigError(f"--video {path!r}: write a .gif or an .mp4 file")
    if suffix == ".mp4" and not _mp4_available():
        raise ConfigError("--video: writing .mp4 needs `pip install imageio imageio-ffmpeg`; use a .gif")


def load_policy(run_dir: str, config: Config, env: JaxEnv, agent_seed: int, sample: bool) -> Loaded:
    """The policy and parameters of seed `agent_seed` from the run's latest checkpoint."""
    num_seeds = getattr(config.arch, "num_seeds", 1)
    if not 0 <= agent_seed < num_seeds:
        raise ConfigError(f"--agent-seed must be in [0, {num_seeds}) for this run, got {agent_seed}")
    params = env.default_params
    agent = make_agent(config.agent, env.observation_spec(params), env.action_spec(params),
                       num_updates=1, axis_name=None)
    if not sample and agent.greedy_act is None:
        raise ConfigError(f"{type(config.agent).__name__} has no greedy policy; evaluate with --sample")
    abstract = jax.eval_shape(agent.init, jax.random.key(0))
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct((num_seeds,) + x.shape, x.dtype), abstract)
    with Checkpointer(checkpoint_dir(run_dir), read_only=True) as checkpoints:
        if checkpoints.latest_step() is None:
            raise NoCheckpointError(f"no checkpoint to evaluate in {checkpoints.directory}")
        agent_state, progress = checkpoints.restore_agent(abstract)
    seed_params = jax.tree.map(lambda x: x[agent_seed], agent_state.params)
    if sample:
        policy: Policy = lambda p, obs, key: agent.act(p, obs, key)[0]  # noqa: E731
    else:
        policy = lambda p, obs, key: agent.greedy_act(p, obs)  # noqa: E731
    return Loaded(config, env, policy, seed_params, progress.env_steps)


def episode_returns(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey, episodes: int) -> np.ndarray:
    """Undiscounted returns of exactly `episodes` episodes, one per vmapped environment."""
    run = jax.jit(_episode_returns, static_argnums=(0, 1, 4))
    return np.asarray(run(env, policy, params, key, episodes))


def _episode_returns(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey, episodes: int) -> Array:
    env_params = env.default_params
    reset_key, key = jax.random.split(key)
    state, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, episodes), env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    done = jnp.zeros(episodes, bool)
    returns = jnp.zeros(episodes, jnp.float32)

    def not_all_done(carry):
        return ~jnp.all(carry[2])

    def body(carry):
        state, obs, done, returns, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action = policy(params, obs, act_key)
        state, ts = step(jax.random.split(step_key, episodes), state, action, env_params)
        ended = ts.done & ~done
        return state, ts.obs, done | ts.done, jnp.where(ended, ts.episode_return, returns), key

    # Every episode ends by the time limit, so the loop ends.
    return jax.lax.while_loop(not_all_done, body, (state, obs, done, returns, key))[3]


def record_episode(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey) -> np.ndarray:
    """Frames `uint8 [T + 1, H, W, 3]` of one episode, from the raw dynamics (no reset)."""
    frames, length = jax.jit(_record, static_argnums=(0, 1))(env, policy, params, key)
    return np.asarray(frames)[: int(length) + 1]


def _record(env: JaxEnv, policy: Policy, params: Params, key: PRNGKey) -> tuple[Array, Array]:
    env_params = env.default_params
    limit = env.max_episode_steps(env_params)
    reset_key, key = jax.random.split(key)
    inner, obs = env.reset_env(reset_key, env_params)
    inner = jax.tree.map(jnp.asarray, inner)  # some envs start with Python scalars

    def step(carry, key):
        inner, obs, ended = carry
        act_key, step_key = jax.random.split(key)
        action = policy(params, obs[None], act_key)[0]
        next_inner, next_obs, _, terminated = env.step_env(step_key, inner, action, env_params)
        # Once the episode has ended, hold its last state.
        next_inner = jax.tree.map(lambda new, old: jnp.where(ended, old, new), next_inner, inner)
        next_obs = jnp.where(ended, obs, next_obs)
        return (next_inner, next_obs, ended | terminated), (next_inner, ended | terminated)

    _, (states, ended) = jax.lax.scan(step, (inner, obs, jnp.bool_(False)), jax.random.split(key, limit))
    states = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), inner, states)
    length = jnp.where(jnp.any(ended), jnp.argmax(ended) + 1, limit)
    return jax.vmap(env.render)(states), length


def write_video(frames: np.ndarray, path: str, fps: int) -> None:
    """A GIF (Pillow) or MP4 (imageio-ffmpeg) of `uint8 [T, H, W, 3]` frames."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.lower().endswith(".mp4"):
        import imageio.v2 as imageio

        imageio.mimwrite(path, list(frames), fps=fps)
        return
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def _mp4_available() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True
