"""Independent references for the update steps that the parity tests exercise: PPO, IMPALA,
DQN and SAC written here in plain JAX, with rlax for returns and losses, distrax for the
policies' log-probabilities and entropies and optax for the optimizers, and nothing of
`podracer.agents` but its configs' numbers.

A parity test that runs the library's code path twice (1 device against 4, Anakin against
Sebulba) passes on a bug that both runs share; these references are the independent side.
Each takes the parameters the library's update starts from, its optimizer state (PPO and
IMPALA: a fresh one, as `init` gives), the trajectory or batch it receives and, where the
library shuffles, the indices of each minibatch it draws (`ppo_minibatch_indices`,
`sequence_minibatch_indices`: the library's own permutations, mapped onto the global batch;
the reference reuses the indices rather than the library's use of the random numbers).

The networks are the built-in feed-forward ones (`agent.torso` "mlp"), evaluated here from
their parameter trees: a torso is `Dense_0, Dense_1, ...` each followed by the activation,
an actor-critic has `torso`, `critic_torso` (unless shared), `policy` and `value` heads, a
Q-network `torso` and `q`; SAC's actor and twin critics are described where they are used.
"""

from __future__ import annotations

from typing import Any

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import rlax

from podracer.types import Trajectory
from tests.support.helpers import gae_episode_by_episode, vtrace_episode_by_episode

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "gelu": jax.nn.gelu}


def dense(layer: dict, x: jax.Array) -> jax.Array:
    return x @ layer["kernel"] + layer["bias"]


def mlp(layers: dict, x: jax.Array, activation: str) -> jax.Array:
    """`Dense_0 -> activation -> Dense_1 -> ...` over observations `[N, ...]`, flattened."""
    x = x.reshape(x.shape[0], -1)
    for i in range(len(layers)):
        x = ACTIVATIONS[activation](dense(layers[f"Dense_{i}"], x))
    return x


def actor_critic(params: Any, obs: jax.Array, activation: str) -> tuple[jax.Array, jax.Array]:
    """`obs [N, ...] -> (logits [N, A], value [N])`."""
    p = params["params"]
    hidden_pi = mlp(p["torso"], obs, activation)
    hidden_v = mlp(p["critic_torso"], obs, activation) if "critic_torso" in p else hidden_pi
    return dense(p["policy"], hidden_pi), dense(p["value"], hidden_v)[:, 0]


def q_network(params: Any, obs: jax.Array, activation: str) -> jax.Array:
    """`obs [N, ...] -> Q [N, A]`."""
    p = params["params"]
    return dense(p["q"], mlp(p["torso"], obs, activation))


def log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    return distrax.Categorical(logits=logits).log_prob(action)


def entropy(logits: jax.Array) -> jax.Array:
    return distrax.Categorical(logits=logits).entropy()


def schedule(learning_rate: float, anneal: bool, num_steps: int) -> float | optax.Schedule:
    """The step size: constant, or linear from `learning_rate` to 0 over `num_steps` steps."""
    return optax.linear_schedule(learning_rate, 0.0, num_steps) if anneal else learning_rate


def flat(x: Any) -> np.ndarray:
    """`[T, B, ...] -> [T * B, ...]`, time-major."""
    x = np.asarray(x)
    return x.reshape((-1,) + x.shape[2:])


def per_column(fn, *columns: np.ndarray) -> list:
    """`fn` on each environment's `[T]` column of `[T, B]` arrays, stacked back to `[T, B]`."""
    outs = [fn(*(c[:, b] for c in columns)) for b in range(columns[0].shape[1])]
    if isinstance(outs[0], tuple):
        return [np.stack(parts, axis=1) for parts in zip(*outs)]
    return np.stack(outs, axis=1)


def ppo_minibatch_indices(permutations: np.ndarray, T: int, B: int, num_minibatches: int) -> np.ndarray:
    """The global minibatches of a feed-forward PPO update: `[E, M, T * B / M]` indices into
    the time-major flat `[T * B]` batch.

    permutations: `[D, E, T * B / D]`, device d's permutation of its own transitions in
    epoch e (device d holds the environments `d B / D ... (d + 1) B / D - 1`, flattened
    time-major); global minibatch m is every device's minibatch m."""
    D, E, n = permutations.shape
    b = B // D
    t, j = np.divmod(permutations, b)
    global_index = t * B + np.arange(D)[:, None, None] * b + j
    return np.concatenate(list(global_index.reshape(D, E, num_minibatches, n // num_minibatches)), axis=-1)


def sequence_minibatch_indices(permutations: np.ndarray, B: int, num_minibatches: int) -> np.ndarray:
    """The global minibatches of whole sequences: `[E, M, B / M]` environment columns, from
    each device's permutation `[D, E, B / D]` of its own columns (as `ppo_minibatch_indices`)."""
    D, E, b = permutations.shape
    global_column = permutations + np.arange(D)[:, None, None] * b
    return np.concatenate(list(global_column.reshape(D, E, num_minibatches, b // num_minibatches)), axis=-1)


def ppo_update(
    config: Any, params: Any, traj: Trajectory, minibatches: np.ndarray, num_updates: int
) -> tuple[Any, float]:
    """PPO's update (Schulman et al. 2017) of `params` on a feed-forward categorical
    actor-critic: `(params, mean loss over its gradient steps)`.

    GAE (Schulman et al. 2016, rlax on each episode alone) over the values of the update's
    start, the targets `A + V`; then for every epoch and minibatch (`minibatches [E, M, n]`)
    advantages standardised over the minibatch, the clipped surrogate (rlax), the value loss
    clipped around the start's values (CleanRL's), the entropy bonus (distrax), one step of
    global-norm clipping and Adam (optax).

    config: a `PPOConfig`'s fields; traj: `[T, B]` with `extras["log_prob"]` the behaviour's."""
    activation = config.activation
    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    T, B = obs.shape[:2]
    _, value = jax.jit(actor_critic, static_argnums=2)(params, flat(obs), activation)
    _, next_value = jax.jit(actor_critic, static_argnums=2)(params, flat(next_obs), activation)
    value, next_value = np.asarray(value).reshape(T, B), np.asarray(next_value).reshape(T, B)
    terminated, end = np.asarray(traj.terminated), np.asarray(traj.terminated) | np.asarray(traj.truncated)
    discount = (config.gamma * (1.0 - terminated)).astype(np.float32)
    advantage = per_column(
        lambda *c: gae_episode_by_episode(*c[:4], config.gae_lambda, c[4]),
        np.asarray(traj.reward),
        discount,
        value,
        next_value,
        end,
    )
    batch = (
        flat(obs),
        flat(traj.action),
        flat(traj.extras["log_prob"]),
        flat(value),
        flat(advantage),
        flat(advantage + value),
    )

    E, M = minibatches.shape[:2]
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(schedule(config.learning_rate, config.anneal_lr, num_updates * E * M), eps=config.adam_eps),
    )

    def loss_fn(params, obs, action, behaviour_log_prob, old_value, advantage, target):
        if config.normalize_advantages:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        logits, value = actor_critic(params, obs, activation)
        ratio = jnp.exp(log_prob(logits, action) - behaviour_log_prob)
        pg_loss = rlax.clipped_surrogate_pg_loss(ratio, advantage, config.clip_eps)
        squared = jnp.square(value - target)
        if config.clip_value:
            clipped = old_value + jnp.clip(value - old_value, -config.clip_eps, config.clip_eps)
            squared = jnp.maximum(squared, jnp.square(clipped - target))
        return pg_loss + config.value_coef * 0.5 * jnp.mean(squared) - config.entropy_coef * jnp.mean(entropy(logits))

    return _sgd(loss_fn, optimizer, params, [[tuple(x[idx] for x in batch) for idx in epoch] for epoch in minibatches])


def impala_update(
    config: Any, params: Any, traj: Trajectory, minibatches: np.ndarray, num_updates: int
) -> tuple[Any, float]:
    """IMPALA's update (Espeholt et al. 2018, section 4): for every epoch and minibatch of whole
    sequences (`minibatches [E, M, b]` environment columns), V-trace (rlax on each episode
    alone) from the current parameters' values and log-probabilities, then one optimizer step
    on `-mean(log pi * pg_advantage) + value_coef 0.5 mean((v_s - V)^2) - entropy_coef H`:
    global-norm clipping and TensorFlow 1's RMSProp (mean square from 1, epsilon inside the
    root) or Adam (optax). Returns `(params, mean loss)`."""
    activation = config.activation
    E, M = minibatches.shape[:2]
    lr = schedule(config.learning_rate, config.anneal_lr, num_updates * E * M)
    if config.optimizer == "rmsprop":
        base = optax.rmsprop(
            lr, decay=config.rmsprop_decay, eps=config.rmsprop_eps, initial_scale=1.0, eps_in_sqrt=True
        )
    else:
        base = optax.adam(lr, eps=config.adam_eps)
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)
    columns = jax.tree.map(np.asarray, traj)

    @jax.jit
    def outputs(params, obs, next_obs):
        T, b = obs.shape[:2]
        logits, value = actor_critic(params, obs.reshape((T * b,) + obs.shape[2:]), activation)
        _, next_value = actor_critic(params, next_obs.reshape((T * b,) + obs.shape[2:]), activation)
        return logits, value.reshape(T, b), next_value.reshape(T, b)

    def loss_fn(params, obs, action, pg_advantage, value_target):
        logits, value = actor_critic(params, obs, activation)
        pg_loss = -jnp.mean(log_prob(logits, action) * pg_advantage)
        value_loss = 0.5 * jnp.mean(jnp.square(value_target - value))
        return pg_loss + config.value_coef * value_loss - config.entropy_coef * jnp.mean(entropy(logits))

    def minibatch(params, cols):
        """V-trace's targets under the current `params`, for the gradient step that follows."""
        mb = jax.tree.map(lambda x: x[:, cols], columns)
        logits, value, next_value = outputs(params, mb.obs, mb.next_obs)
        T, b = value.shape
        action_log_prob = np.asarray(log_prob(logits, flat(mb.action))).reshape(T, b)
        rho = np.exp(action_log_prob - mb.extras["log_prob"])
        discount = (config.gamma * (1.0 - mb.terminated)).astype(np.float32)
        errors, pg_advantage = per_column(
            lambda *c: vtrace_episode_by_episode(
                *c[:5], config.vtrace_lambda, c[5], config.clip_rho_threshold, config.clip_pg_rho_threshold
            ),
            mb.reward,
            discount,
            np.asarray(value),
            np.asarray(next_value),
            rho,
            mb.terminated | mb.truncated,
        )
        return flat(mb.obs), flat(mb.action), flat(pg_advantage), flat(errors + np.asarray(value))

    return _sgd(
        loss_fn,
        optimizer,
        params,
        [[(lambda p, cols=cols: minibatch(p, cols)) for cols in epoch] for epoch in minibatches],
    )


def _sgd(loss_fn, optimizer: optax.GradientTransformation, params: Any, epochs: list[list]) -> tuple[Any, float]:
    """One optimizer step per minibatch, in order; a minibatch is its arrays, or a function
    of the current parameters that gives them. Returns `(params, mean loss)`."""

    @jax.jit
    def step(params, opt_state, *arrays):
        loss, grads = jax.value_and_grad(loss_fn)(params, *arrays)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state, losses = optimizer.init(params), []
    for epoch in epochs:
        for arrays in epoch:
            arrays = arrays(params) if callable(arrays) else arrays
            params, opt_state, loss = step(params, opt_state, *arrays)
            losses.append(float(loss))
    return params, float(np.mean(losses))


def dqn_optimizer(config: Any) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam."""
    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=config.adam_eps)
    )


def dqn_step(
    config: Any, online: Any, target: Any, opt_state: Any, gradient_steps: int, batch: tuple, weights: jax.Array
) -> tuple[Any, Any, float]:
    """One DQN gradient step (Mnih et al. 2015) on `batch = (obs, action, reward, discount,
    next_obs)`, each `[N, ...]`: Double DQN's TD errors (van Hasselt et al. 2016; rlax) or
    Q-learning's, the Huber or squared loss weighted by `weights [N]`, one step of
    `dqn_optimizer` from `opt_state`; the target network moves `tau` of the way to the new
    online one when the step count (`gradient_steps` before it, plus one) is a multiple of the
    period. Returns `(online, target, loss)`."""
    activation = config.activation
    obs, action, reward, discount, next_obs = batch
    optimizer = dqn_optimizer(config)

    def loss_fn(online):
        q_tm1 = q_network(online, obs, activation)
        q_t_value = q_network(target, next_obs, activation)
        if config.double_q:
            q_t_selector = q_network(online, next_obs, activation)
            td = jax.vmap(rlax.double_q_learning)(q_tm1, action, reward, discount, q_t_value, q_t_selector)
        else:
            td = jax.vmap(rlax.q_learning)(q_tm1, action, reward, discount, q_t_value)
        per_item = rlax.huber_loss(td, config.huber_delta) if config.loss == "huber" else 0.5 * jnp.square(td)
        return jnp.mean(weights * per_item)

    @jax.jit
    def step(online, target, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(online)
        online = optax.apply_updates(online, optimizer.update(grads, opt_state, online)[0])
        tau = config.target_update_tau if (gradient_steps + 1) % config.target_update_period == 0 else 0.0
        return online, jax.tree.map(lambda new, old: tau * new + (1.0 - tau) * old, online, target), loss

    online, target, loss = step(online, target, opt_state)
    return online, target, float(loss)


def squashed_gaussian_actor(actor: Any, obs: jax.Array, log_std_min: float, log_std_max: float):
    """SAC's actor: `obs [N, D] -> (mean [N, A], log_std [N, A])`, a ReLU torso, a mean head
    (`Dense_0`) and a log-std head (`Dense_1`) squashed by tanh into `[log_std_min, log_std_max]`."""
    p = actor["params"]
    x = mlp(p["torso"], obs, "relu")
    squashed = jnp.tanh(dense(p["Dense_1"], x))
    return dense(p["Dense_0"], x), log_std_min + 0.5 * (log_std_max - log_std_min) * (squashed + 1.0)


def twin_critic(critic: Any, obs: jax.Array, unit_action: jax.Array) -> jax.Array:
    """Two critics `Q_i(s, a)`, `[2, N]`, each a ReLU torso and a linear head over `[obs, action]`;
    their parameters stacked on a leading axis of 2."""
    p = critic["params"]
    x = jnp.concatenate([obs, unit_action], axis=-1)

    def one(i: int) -> jax.Array:
        torso, head = jax.tree.map(lambda w: w[i], (p["torso"], p["VmapCritic_0"]["Dense_0"]))
        return dense(head, mlp(torso, x, "relu"))[:, 0]

    return jnp.stack([one(0), one(1)])


def sac_optimizers(config: Any) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """`(actor's, critics')`: Adam each."""
    return optax.adam(config.actor_learning_rate), optax.adam(config.critic_learning_rate)


def sac_deterministic_step(
    config: Any,
    actor: Any,
    critic: Any,
    target_critic: Any,
    opt_states: tuple,
    batch: tuple,
    low: np.ndarray,
    high: np.ndarray,
) -> tuple[Any, Any, Any, float]:
    """One SAC gradient step (Haarnoja et al. 2018, arXiv 1812.05905) at temperature 0 with a
    policy of negligible spread, whose action is `tanh(mean)`, on `batch = (obs, action,
    reward, discount, next_obs)` `[N, ...]`: both critics regress on
    `r + discount min(Q1', Q2')(s', tanh(mean(s')))` (eq. 3, clipped double Q) with the target
    critics, one Adam step; then the actor maximises `min(Q1, Q2)(s, tanh(mean(s)))` under the
    updated critics (eq. 12), one Adam step (`opt_states`: the actor's and the critics');
    then the target critics move `tau` of the way. Box actions `[low, high]` are mapped to
    `[-1, 1]` for the critics. Returns `(actor, critic, target_critic, critic loss)`. The
    temperature and the entropy terms are not modelled: a config with a temperature or a
    spread is refused."""
    if config.autotune or config.initial_temperature != 0 or config.log_std_max > -30:
        raise ValueError("sac_deterministic_step models temperature 0 and a policy of negligible spread only")
    std_range = (config.log_std_min, config.log_std_max)
    obs, action, reward, discount, next_obs = batch
    actor_optimizer, critic_optimizer = sac_optimizers(config)

    def greedy(actor, obs):
        return jnp.tanh(squashed_gaussian_actor(actor, obs, *std_range)[0])

    def critic_loss(critic):
        q_t = twin_critic(target_critic, next_obs, greedy(actor, next_obs))
        target = jax.lax.stop_gradient(reward + discount * jnp.min(q_t, axis=0))
        unit = 2.0 * (action - low) / (high - low) - 1.0
        return jnp.sum(jnp.mean(jnp.square(twin_critic(critic, obs, unit) - target), axis=1))

    def actor_loss(actor, critic):
        return -jnp.mean(jnp.min(twin_critic(critic, obs, greedy(actor, obs)), axis=0))

    @jax.jit
    def step(actor, critic, target_critic, opt_states):
        loss, grads = jax.value_and_grad(critic_loss)(critic)
        critic = optax.apply_updates(critic, critic_optimizer.update(grads, opt_states[1], critic)[0])
        grads = jax.grad(actor_loss)(actor, critic)
        actor = optax.apply_updates(actor, actor_optimizer.update(grads, opt_states[0], actor)[0])
        tau = config.tau
        return actor, critic, jax.tree.map(lambda c, t: tau * c + (1.0 - tau) * t, critic, target_critic), loss

    actor, critic, target_critic, loss = step(actor, critic, target_critic, opt_states)
    return actor, critic, target_critic, float(loss)
