"""SAC's and TD3's configs (`podracer.agents.continuous.config`): every check names its field,
its rule and the value; values on the edge of a range are accepted; the gradient steps an
update earns and the buffer an update's steps need."""

import re

import pytest

from podracer.agents.continuous import SACConfig, TD3Config
from podracer.config import ConfigError
from podracer.types import BatchShape

SHARED = [
    (dict(actor_learning_rate=0.0), "agent.actor_learning_rate must be > 0, got 0.0"),
    (dict(critic_learning_rate=-1.0), "agent.critic_learning_rate must be > 0, got -1.0"),
    (dict(buffer_size=0), "agent.buffer_size must be > 0, got 0"),
    (dict(batch_size=0), "agent.batch_size must be > 0, got 0"),
    (dict(gradient_steps=0), "agent.gradient_steps must be > 0, got 0"),
    (dict(n_step=0), "agent.n_step must be > 0, got 0"),
    (dict(simba_blocks=0), "agent.simba_blocks must be > 0, got 0"),
    (
        dict(replay_ratio=0.0),
        "agent.replay_ratio must be > 0 (or None to take agent.gradient_steps per update), got 0.0",
    ),
    (dict(gamma=-0.01), "agent.gamma must be in [0, 1], got -0.01"),
    (dict(gamma=1.01), "agent.gamma must be in [0, 1], got 1.01"),
    (dict(tau=0.0), "agent.tau must be in (0, 1], got 0.0"),
    (dict(tau=1.01), "agent.tau must be in (0, 1], got 1.01"),
    (dict(buffer_size=8, batch_size=9), "agent.batch_size must be <= agent.buffer_size (8), got 9"),
    (dict(learning_starts=-1), "agent.learning_starts must be >= 0, got -1"),
    (dict(sampling="prioritized"), "agent.sampling must be one of ('uniform', 'stratified'), got 'prioritized'"),
    (dict(torso="cnn"), "agent.torso must be one of ('mlp', 'simba'), got 'cnn'"),
    (dict(hidden_sizes=()), "agent.hidden_sizes must be positive sizes, got ()"),
    (dict(hidden_sizes=(4, 0)), "agent.hidden_sizes must be positive sizes, got (4, 0)"),
    (dict(adam_b1=-0.1), "agent.adam_b1 must be in [0, 1), got -0.1"),
    (dict(adam_b1=1.0), "agent.adam_b1 must be in [0, 1), got 1.0"),
    (dict(critic="quantile"), "agent.critic must be one of ('twin', 'crossq', 'distributional'), got 'quantile'"),
    (
        dict(critic="crossq", torso="simba"),
        "agent.torso must be mlp with agent.critic crossq (its critic is an mlp with Batch Renormalization), got 'simba'",
    ),
    (dict(num_atoms=1), "agent.num_atoms must be >= 2, got 1"),
    (dict(v_max=float("inf")), "agent.v_max must be finite, got inf"),
    (dict(v_min=10.0), "agent.v_min must be < agent.v_max (10.0), got 10.0"),
    (dict(renorm_momentum=-0.1), "agent.renorm_momentum must be in [0, 1), got -0.1"),
    (dict(renorm_momentum=1.0), "agent.renorm_momentum must be in [0, 1), got 1.0"),
    (dict(renorm_warmup=-1), "agent.renorm_warmup must be >= 0, got -1"),
]
SAC_ONLY = [
    (dict(temperature_learning_rate=0.0), "agent.temperature_learning_rate must be > 0, got 0.0"),
    (dict(initial_temperature=-0.1), "agent.initial_temperature must be >= 0 (> 0 with agent.autotune), got -0.1"),
    (dict(initial_temperature=0.0), "agent.initial_temperature must be >= 0 (> 0 with agent.autotune), got 0.0"),
    (dict(target_entropy=float("nan")), "agent.target_entropy must be finite (or None for -|A|), got nan"),
    (dict(log_std_max=float("inf")), "agent.log_std_max must be finite, got inf"),
    (dict(log_std_min=2.0), "agent.log_std_min must be < agent.log_std_max (2.0), got 2.0"),
    (dict(policy_delay=0), "agent.policy_delay must be > 0, got 0"),
]
TD3_ONLY = [
    (dict(exploration_noise=-0.1), "agent.exploration_noise must be >= 0, got -0.1"),
    (dict(target_noise=-0.1), "agent.target_noise must be >= 0, got -0.1"),
    (dict(target_noise_clip=-0.1), "agent.target_noise_clip must be >= 0, got -0.1"),
    (dict(policy_delay=0), "agent.policy_delay must be > 0, got 0"),
]
CASES = [(SACConfig, *c) for c in SHARED + SAC_ONLY] + [(TD3Config, *c) for c in SHARED + TD3_ONLY]


@pytest.mark.parametrize("make, fields, message", CASES)
def test_each_bad_hyperparameter_is_named_with_its_rule_and_value(make, fields, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        make(**fields)


@pytest.mark.parametrize(
    "make, fields",
    [
        (SACConfig, dict(gamma=0.0, tau=1.0, learning_starts=0, adam_b1=0.0, num_atoms=2, renorm_momentum=0.0)),
        (SACConfig, dict(gamma=1.0, buffer_size=8, batch_size=8, renorm_warmup=0, replay_ratio=0.01)),
        (SACConfig, dict(initial_temperature=0.0, autotune=False, target_entropy=-3.0, v_min=-1.0, v_max=1.0)),
        (SACConfig, dict(critic="crossq", torso="mlp", sampling="stratified", hidden_sizes=(1,))),
        (TD3Config, dict(exploration_noise=0.0, target_noise=0.0, target_noise_clip=0.0, policy_delay=1)),
        (TD3Config, dict(critic="distributional", torso="simba", simba_blocks=1, n_step=1, gradient_steps=1)),
    ],
)
def test_hyperparameters_on_the_edge_of_their_range_are_accepted(make, fields):
    config = make(**fields)
    assert {name: getattr(config, name) for name in fields} == fields


def test_gradient_steps_per_update():
    """`gradient_steps` per update, or `replay_ratio * T * B / batch_size` steps of credit;
    the static cap is its ceiling, at least 1."""
    assert SACConfig(gradient_steps=3).steps_per_update(64) == 3.0
    assert type(SACConfig(gradient_steps=3).steps_per_update(64)) is float
    assert SACConfig(gradient_steps=3).max_steps_per_update(64) == 3
    assert TD3Config(batch_size=16, replay_ratio=0.3).steps_per_update(20) == pytest.approx(0.375)
    assert TD3Config(batch_size=16, replay_ratio=0.3).max_steps_per_update(20) == 1
    assert TD3Config(batch_size=16, replay_ratio=0.5).max_steps_per_update(20) == 1  # 0.625
    assert TD3Config(batch_size=16, replay_ratio=2.5).max_steps_per_update(20) == 4  # 3.125
    assert TD3Config(batch_size=10, replay_ratio=2.0).max_steps_per_update(20) == 4  # 4 exactly


def test_the_buffer_holds_n_step_updates_steps():
    """`n_step` updates of `T * B` steps must fit in a device's buffer: 3 x 8 x 4 = 96."""
    SACConfig(buffer_size=96, batch_size=8, n_step=3).check_batch(BatchShape(8, 4))
    message = "agent.buffer_size must hold agent.n_step (3) updates' steps per device (96), got 95"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        SACConfig(buffer_size=95, batch_size=8, n_step=3).check_batch(BatchShape(8, 4))
