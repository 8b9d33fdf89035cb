"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning") as a podracer
`Agent`: Q-learning with Peng's Q(lambda) targets over the rollouts of many parallel
environments, a LayerNorm Q-network, epsilon-greedy acting on a schedule, and neither a
replay buffer nor a target network; each rollout is learned in epochs of shuffled
minibatches, like PPO. The Q-learning method that fits Anakin: everything stays on device.

Where its state lives (the `AgentState` contract, as DQN's):
- `params` is what the actor needs, `PQNParams(online, env_steps)`: the Q-network and the
  env steps (all devices, one seed) the learner has received, the position of the
  epsilon schedule; whoever ships parameters to actors ships the schedule with them.
- `opt_state` is the optimizer's state; `local` is unused (no replay).

`act` records the behaviour's Q-values (`extras["q"]`): the targets bootstrap from them
where an episode went on (no second forward pass over the rollout; on-policy under Anakin
they are the learner's own), and from the network on the last step and on truncated
steps' final observations. A terminated step does not bootstrap.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from podracer import networks, ops, parallel
from podracer.agents.minibatches import flatten_time_batch, shuffled_minibatches
from podracer.agents.networks import ACTIVATIONS, TORSOS, init_params, make_torso
from podracer.agents.registry import Algorithm
from podracer.agents.schedules import learning_rate
from podracer.agents.sgd import make_sgd_epochs
from podracer.config import check
from podracer.counters import Count
from podracer.types import (
    Agent,
    AgentState,
    Array,
    BatchShape,
    DiscreteSpec,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
)


@dataclasses.dataclass(frozen=True)
class PQNConfig:
    """PQN hyperparameters. Defaults: purejaxql's classic-control settings (CartPole-v1)
    where they apply; `experiments.presets_pqn` holds the paper's MinAtar ones."""

    learning_rate: float = 1e-4  # optimizer step size (decayed with anneal_lr)
    anneal_lr: bool = True  # linear decay to 0 over the run's gradient steps
    optimizer: Literal["radam", "adam"] = "radam"  # "radam" (purejaxql's) or "adam"
    adam_eps: float = 1e-8  # RAdam's or Adam's epsilon, added to the root of the second-moment estimate
    max_grad_norm: float = 10.0  # gradients are rescaled to at most this global L2 norm
    num_epochs: int = 4  # passes over each update's batch
    num_minibatches: int = 16  # minibatches per pass, per device, slicing its T * B transitions
    gamma: float = 0.99  # discount factor per env step
    q_lambda: float = 0.95  # Peng's Q(lambda) trace parameter
    reward_scale: float = 1.0  # rewards are multiplied by this in the targets (purejaxql's CartPole: 0.1)
    epsilon_start: float = 1.0  # epsilon-greedy: probability of a random action when the run starts
    epsilon_end: float = 0.05  # epsilon-greedy: probability of a random action from epsilon_decay_steps on
    epsilon_decay_steps: int = 100_000  # env steps (all devices, one seed) of linear decay
    # network body: an MLP for vectors, "minatar_cnn" for MinAtar grids, a CNN for pixels;
    # "multi_encoder": a convolution per image-like field of dict/NamedTuple observations
    torso: Literal["mlp", "minatar_cnn", "nature_cnn", "impala_cnn", "multi_encoder"] = "mlp"
    hidden_sizes: tuple[int, ...] = (128, 128)  # MLP layer widths; minatar_cnn: its dense layers
    activation: Literal["tanh", "relu", "gelu"] = "relu"  # activation of the MLP and MinAtar CNN torsos
    layer_norm: bool = True  # LayerNorm before each activation: what stands in for a target network
    unroll_sgd: bool = False  # unroll epochs and minibatches (faster CNN updates on CPU)

    def __post_init__(self) -> None:
        for name in ("learning_rate", "adam_eps", "max_grad_norm", "num_epochs", "num_minibatches",
                     "epsilon_decay_steps", "reward_scale"):
            check(getattr(self, name) > 0, f"agent.{name}", "must be > 0", getattr(self, name))
        check(self.optimizer in ("radam", "adam"), "agent.optimizer", "must be 'radam' or 'adam'", self.optimizer)
        for name in ("gamma", "q_lambda", "epsilon_start", "epsilon_end"):
            check(0 <= getattr(self, name) <= 1, f"agent.{name}", "must be in [0, 1]", getattr(self, name))
        check(self.torso in TORSOS, "agent.torso", f"must be one of {TORSOS}", self.torso)
        check(self.activation in ACTIVATIONS, "agent.activation", f"must be one of {ACTIVATIONS}",
              self.activation)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
              "agent.hidden_sizes", "must be positive sizes", self.hidden_sizes)

    def check_batch(self, batch: BatchShape) -> None:
        """Raise ConfigError unless one device's batch of `T * B` transitions splits into
        `num_minibatches` minibatches."""
        check(batch.transitions % self.num_minibatches == 0, "agent.num_minibatches",
              f"must divide the per-device batch of {batch.transitions} transitions", self.num_minibatches)


class PQNParams(NamedTuple):
    """What `act` receives: the Q-network's parameters and the schedule position."""

    online: Params
    env_steps: Count  # env steps (all devices, one seed) the learner has received, exact past 2^31


def make_q_network(config: PQNConfig, obs_spec: ObservationSpec, action_spec: DiscreteSpec) -> nn.Module:
    torso = make_torso(config.torso, config.hidden_sizes, config.activation, obs_spec,
                              layer_norm=config.layer_norm)
    return networks.QNetwork(action_spec.num_actions, torso)


def make_optimizer(config: PQNConfig, num_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping, then RAdam (purejaxql's) or Adam, optionally decayed to 0 over
    `num_steps` gradient steps."""
    lr = learning_rate(config.learning_rate, config.anneal_lr, num_steps)
    base = optax.radam if config.optimizer == "radam" else optax.adam
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base(lr, eps=config.adam_eps))


def epsilon_schedule(config: PQNConfig) -> optax.Schedule:
    """Linear decay from `epsilon_start` to `epsilon_end` over `epsilon_decay_steps` env steps."""
    return optax.linear_schedule(config.epsilon_start, config.epsilon_end, config.epsilon_decay_steps)


def successor_values(apply_value: Callable[[Array], Array], traj: Trajectory, value: Array) -> Array:
    """The values of `traj.next_obs`, `[T, B, ...]`, without a forward pass over all of them.

    `value [T, B, ...]` holds the behaviour's values of `traj.obs` (what `act` computed);
    `apply_value(obs [N, ...]) -> [N, ...]` evaluates the network (observations may be
    pytrees, each leaf `[T, B, ...]`). Where an episode went on,
    `next_obs[t]` is `obs[t + 1]`, whose value is `value[t + 1]`; only the last step (always,
    `[B]` observations) and truncated steps (their final observations, in a second pass over
    all of `next_obs` that runs only when some step before the last was truncated) need the
    network. Terminated steps keep a value that a learner must not bootstrap from.
    """
    last = apply_value(jax.tree.map(lambda x: x[-1], traj.next_obs))
    shifted = jnp.concatenate([value[1:], last[None]])
    T, B = traj.reward.shape

    def with_truncations(carry):
        _, values = carry
        exact = apply_value(flatten_time_batch(traj.next_obs))
        exact = exact.reshape((T, B) + exact.shape[1:])
        mask = traj.truncated.reshape((T, B) + (1,) * (exact.ndim - 2))
        return jnp.zeros_like(carry[0]), jnp.where(mask, exact, values)

    # A loop that runs its body at most once: `lax.cond` fails under vmap in shard_map.
    pending = jnp.any(traj.truncated[:-1])
    return jax.lax.while_loop(lambda carry: carry[0], with_truncations, (pending, shifted))[1]


def q_lambda_targets(network: nn.Module, params: Params, traj: Trajectory, gamma: float, q_lambda: float,
                     reward_scale: float = 1.0) -> Array:
    """PQN's regression targets `[T, B]`: Peng's Q(lambda) over the rollout, bootstrapping
    from `max_a Q(next_obs)` (behaviour Q-values where the episode went on, the network on
    the last and truncated steps), not at all after a termination, and cut at every
    episode end."""
    next_q = successor_values(lambda obs: network.apply(params, obs), traj, traj.extras["q"])
    discount = gamma * (1.0 - traj.terminated.astype(jnp.float32))
    end = traj.terminated | traj.truncated
    targets = jax.vmap(ops.q_lambda_targets, in_axes=(1, 1, 1, None, 1), out_axes=1)
    return targets(reward_scale * traj.reward, discount, next_q, q_lambda, end)


def pqn_loss(
    params: Params, apply_fn: Callable[[Params, Array], Array], batch: tuple[Array, Array, Array]
) -> tuple[Array, dict[str, Array]]:
    """PQN's loss (Gallici et al. 2024, algorithm 1): half the mean squared error between
    `Q(obs, action)` and the Q(lambda) target computed before the update's epochs
    (`q_lambda_targets`, no gradient through it).

    Args:
      params: the Q-network's parameters, differentiated.
      apply_fn: `(params, obs [N, ...]) -> Q-values [N, A]`.
      batch: `(obs [N, ...], action int32 [N], target [N])`, a minibatch of transitions.

    Returns:
      `(loss, metrics)`: the scalar `0.5 mean((target - Q(obs, action))^2)`, and scalars
      `loss`, `q_mean` (the mean of every Q-value), `td_abs` (the mean absolute TD error).
    """
    obs, action, target = batch
    q = apply_fn(params, obs)
    td = ops.td_error(q, action, target)
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {"loss": loss, "q_mean": jnp.mean(q), "td_abs": jnp.mean(jnp.abs(td))}


def make_pqn(
    config: PQNConfig,
    obs_spec: ObservationSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the PQN `Agent`.

    num_updates: how many times `update` will be called in the run (for lr annealing).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    network = make_q_network(config, obs_spec, action_spec)
    optimizer = make_optimizer(config, num_updates * config.num_epochs * config.num_minibatches)
    epsilon = epsilon_schedule(config)

    def init(key: PRNGKey) -> AgentState:
        online = init_params(network, key, obs_spec)
        return AgentState(PQNParams(online, Count.zeros()), optimizer.init(online), jnp.zeros((), jnp.int32))

    def act(params: PQNParams, obs: Array, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        q = network.apply(params.online, obs)
        return ops.epsilon_greedy(key, q, epsilon(params.env_steps.as_float())), {"q": q}

    def greedy_act(params: PQNParams, obs: Array) -> Array:
        """The argmax of the Q-values (evaluation: no exploration)."""
        return jnp.argmax(network.apply(params.online, obs), axis=-1)

    def loss_fn(online: Params, minibatch: tuple[Array, Array, Array]) -> tuple[Array, dict[str, Array]]:
        return pqn_loss(online, network.apply, minibatch)

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)
    sgd_epochs = make_sgd_epochs(grad_fn, optimizer, shuffled_minibatches, config.num_epochs,
                                        config.num_minibatches, unroll=config.unroll_sgd)

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape
        num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
        online = state.params.online
        target = q_lambda_targets(network, online, traj, config.gamma, config.q_lambda, config.reward_scale)
        batch = flatten_time_batch((traj.obs, traj.action.astype(jnp.int32), target))
        online, opt_state, metrics = sgd_epochs(online, state.opt_state, batch, key)
        env_steps = state.params.env_steps.add(T * B * num_devices)
        metrics = parallel.pmean(metrics, axis_name)
        metrics.update(epsilon=epsilon(env_steps.as_float()), target_mean=parallel.pmean(jnp.mean(target), axis_name))
        return AgentState(PQNParams(online, env_steps), opt_state, state.update_count + 1), metrics

    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def _probe_config() -> PQNConfig:
    return PQNConfig(learning_rate=3e-3, anneal_lr=False, optimizer="adam", num_minibatches=2, num_epochs=2,
                     epsilon_decay_steps=4_000, hidden_sizes=(32,), gamma=0.9)


ALGORITHM = Algorithm(
    name="pqn", config=PQNConfig, make=make_pqn, check_batch=PQNConfig.check_batch,
    action_spaces=(DiscreteSpec,), masks=False, structured_obs=True, probe_config=_probe_config, probe_steps=20_000,
    # One minibatch: the update of a global batch is then the same however it is split.
    exact_config=lambda config, batch: dataclasses.replace(config, num_minibatches=1),
)
