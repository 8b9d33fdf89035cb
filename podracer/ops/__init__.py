"""Pure losses and returns over one trajectory, rlax style (vmap for batches)."""

from podracer.ops.returns import gae_advantages
from podracer.ops.losses import clipped_surrogate_loss, entropy_loss, categorical_log_prob
from podracer.ops.vtrace import VTraceOutput, vtrace_td_error_and_advantage
from podracer.ops.transforms import (
    categorical_cross_entropy, categorical_to_scalar, from_two_hot, scalar_to_categorical, signed_hyperbolic,
    signed_parabolic, two_hot,
)
from podracer.ops.qlearning import (
    double_q_learning_target, epsilon_greedy, huber_loss, n_step_targets, q_learning_target, td_error,
)

__all__ = [
    "gae_advantages", "clipped_surrogate_loss", "entropy_loss", "categorical_log_prob",
    "VTraceOutput", "vtrace_td_error_and_advantage",
    "double_q_learning_target", "epsilon_greedy", "huber_loss", "n_step_targets", "q_learning_target",
    "td_error",
    "categorical_cross_entropy", "categorical_to_scalar", "from_two_hot", "scalar_to_categorical",
    "signed_hyperbolic", "signed_parabolic", "two_hot",
]
