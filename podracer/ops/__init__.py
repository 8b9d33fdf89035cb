"""Pure losses and returns over one trajectory, rlax style (vmap for batches)."""

from podracer.ops.gaussian import gaussian_entropy, gaussian_log_prob, gaussian_sample
from podracer.ops.losses import (
                                 categorical_log_prob,
                                 clipped_surrogate_loss,
                                 clipped_value_loss,
                                 entropy_loss,
                                 legal_or_all,
                                 masked_logits,
                                 reconstruction_loss,
)
from podracer.ops.qlearning import (
                                 double_q_learning_target,
                                 epsilon_greedy,
                                 huber_loss,
                                 masked_argmax,
                                 n_step_targets,
                                 q_lambda_targets,
                                 q_learning_target,
                                 td_error,
)
from podracer.ops.returns import discounted_returns, gae_advantages, lambda_returns
from podracer.ops.transforms import (
                                    categorical_cross_entropy,
                                    categorical_to_scalar,
                                    from_two_hot,
                                    scalar_to_categorical,
                                    signed_hyperbolic,
                                    signed_parabolic,
                                    two_hot,
)
from podracer.ops.vtrace import VTraceOutput, vtrace_td_error_and_advantage

__all__ = [
    "discounted_returns", "gae_advantages", "lambda_returns", "clipped_surrogate_loss", "clipped_value_loss",
    "entropy_loss", "reconstruction_loss",
    "categorical_log_prob", "legal_or_all", "masked_logits", "masked_argmax", "gaussian_entropy",
    "gaussian_log_prob", "gaussian_sample",
    "VTraceOutput", "vtrace_td_error_and_advantage",
    "double_q_learning_target", "epsilon_greedy", "huber_loss", "n_step_targets", "q_lambda_targets",
    "q_learning_target",
    "td_error",
    "categorical_cross_entropy", "categorical_to_scalar", "from_two_hot", "scalar_to_categorical",
    "signed_hyperbolic", "signed_parabolic", "two_hot",
]
