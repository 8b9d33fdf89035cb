"""Pure losses and returns over one trajectory, rlax style (vmap for batches)."""

from podracer.ops.returns import gae_advantages
from podracer.ops.losses import clipped_surrogate_loss, entropy_loss, categorical_log_prob
from podracer.ops.vtrace import VTraceOutput, vtrace_td_error_and_advantage

__all__ = [
    "gae_advantages", "clipped_surrogate_loss", "entropy_loss", "categorical_log_prob",
    "VTraceOutput", "vtrace_td_error_and_advantage",
]
