"""MuZero's config (`podracer.agents.muzero.config`): every check names its field, its rule
and the value; values on the edge of a range are accepted; the sequence length, the gradient
steps an update earns and the buffer an update needs."""

import re

import pytest

from podracer.agents.muzero import MuZeroConfig
from podracer.config import ConfigError
from podracer.types import BatchShape

POSITIVE = [
    "num_simulations", "max_num_considered_actions", "temperature", "min_q_range", "latent_size", "value_max",
    "unroll_steps", "td_steps", "learning_rate", "adam_eps", "max_grad_norm", "buffer_size", "batch_size",
    "gradient_steps",
]  # fmt: skip
NON_NEGATIVE = ["gumbel_scale", "dirichlet_alpha", "weight_decay", "value_coef", "policy_coef", "reward_coef"]
SIZES = ["hidden_sizes", "conv_channels", "dynamics_hidden_sizes", "prediction_hidden_sizes"]
CASES = [
    (dict(search="alphazero"), "agent.search must be one of ('gumbel', 'muzero'), got 'alphazero'"),
    *[(dict([(name, 0)]), f"agent.{name} must be > 0, got 0") for name in POSITIVE],
    (
        dict(replay_ratio=0.0),
        "agent.replay_ratio must be > 0 (or None to take agent.gradient_steps per update), got 0.0",
    ),
    *[(dict([(name, -0.5)]), f"agent.{name} must be >= 0, got -0.5") for name in NON_NEGATIVE],
    (dict(learning_starts=-1), "agent.learning_starts must be >= 0, got -1"),
    (dict(dirichlet_fraction=1.5), "agent.dirichlet_fraction must be in [0, 1], got 1.5"),
    (dict(dirichlet_fraction=-0.5), "agent.dirichlet_fraction must be in [0, 1], got -0.5"),
    (dict(gamma=1.01), "agent.gamma must be in [0, 1], got 1.01"),
    (dict(gamma=-0.01), "agent.gamma must be in [0, 1], got -0.01"),
    (dict(dynamics_gradient_scale=0.0), "agent.dynamics_gradient_scale must be in (0, 1], got 0.0"),
    (dict(dynamics_gradient_scale=1.01), "agent.dynamics_gradient_scale must be in (0, 1], got 1.01"),
    (dict(torso="resnet"), "agent.torso must be one of ('mlp', 'conv'), got 'resnet'"),
    (dict(activation="elu"), "agent.activation must be one of ('tanh', 'relu', 'gelu'), got 'elu'"),
    *[(dict([(name, ())]), f"agent.{name} must be positive sizes, got ()") for name in SIZES],
    *[(dict([(name, (4, 0))]), f"agent.{name} must be positive sizes, got (4, 0)") for name in SIZES],
    (dict(num_bins=1), "agent.num_bins must be odd and >= 3 (a bin at 0), got 1"),
    (dict(num_bins=10), "agent.num_bins must be odd and >= 3 (a bin at 0), got 10"),
    (dict(buffer_size=8, batch_size=9), "agent.batch_size must be <= agent.buffer_size (8), got 9"),
    (
        dict(buffer_size=2**31 - 1 - 15, batch_size=4),
        f"agent.buffer_size must be <= {2**31 - 1 - 16} to sample 4 sequences exactly "
        f"(podracer.replay.sequence.max_capacity), got {2**31 - 16}",
    ),
]


@pytest.mark.parametrize("fields, message", CASES)
def test_each_bad_hyperparameter_is_named_with_its_rule_and_value(fields, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        MuZeroConfig(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        dict(gumbel_scale=0.0, dirichlet_alpha=0.0, weight_decay=0.0, value_coef=0.0, policy_coef=0.0, reward_coef=0.0),
        dict(learning_starts=0, dirichlet_fraction=0.0, gamma=0.0, dynamics_gradient_scale=1.0, num_bins=3),
        dict(dirichlet_fraction=1.0, gamma=1.0, buffer_size=16, batch_size=16, search="muzero", torso="conv"),
        dict(buffer_size=2**31 - 1 - 16, batch_size=4, activation="tanh", hidden_sizes=(1,), replay_ratio=None),
        dict(activation="gelu", conv_channels=(1,), dynamics_hidden_sizes=(1,), prediction_hidden_sizes=(1,)),
    ],
)
def test_hyperparameters_on_the_edge_of_their_range_are_accepted(fields):
    config = MuZeroConfig(**fields)
    assert {name: getattr(config, name) for name in fields} == fields


def test_sequence_length_and_gradient_steps_per_update():
    """A sequence is the root, K unrolled steps and n more; an update earns `gradient_steps`,
    or `replay_ratio * T * B / batch_size` steps, capped statically at its ceiling (>= 1)."""
    assert MuZeroConfig(unroll_steps=3, td_steps=4).sequence_length == 8
    fixed = MuZeroConfig(replay_ratio=None, gradient_steps=3)
    assert fixed.steps_per_update(64) == 3.0 and type(fixed.steps_per_update(64)) is float
    assert fixed.max_steps_per_update(64) == 3
    assert MuZeroConfig(batch_size=16, replay_ratio=0.3).steps_per_update(20) == pytest.approx(0.375)
    assert MuZeroConfig(batch_size=16, replay_ratio=0.3).max_steps_per_update(20) == 1
    assert MuZeroConfig(batch_size=16, replay_ratio=2.5).max_steps_per_update(20) == 4  # 3.125
    assert MuZeroConfig(batch_size=10, replay_ratio=2.0).max_steps_per_update(20) == 4  # 4 exactly


def test_the_buffer_holds_a_sequence_of_updates_and_the_next_observations():
    """`sequence_length` updates of `T * B` steps and `B` next observations: 8 x 12 + 3 = 99."""
    MuZeroConfig(unroll_steps=3, td_steps=4, batch_size=8, buffer_size=99).check_batch(BatchShape(4, 3))
    message = (
        "agent.buffer_size must hold agent.sequence_length (8) updates of 12 steps per device and the next "
        "observation of each of its 3 environments (99), got 98"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        MuZeroConfig(unroll_steps=3, td_steps=4, batch_size=8, buffer_size=98).check_batch(BatchShape(4, 3))
