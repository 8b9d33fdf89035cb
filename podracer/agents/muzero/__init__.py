"""MuZero with mctx's search, split by role: `config`, `networks`, `search` (acting),
`losses`, `learning`; `agent` puts them together as an `Agent`."""

from podracer.agents.muzero.agent import make_muzero, make_prior_act, without_search
from podracer.agents.muzero.config import MuZeroConfig

__all__ = ["MuZeroConfig", "make_muzero", "make_prior_act", "without_search"]
