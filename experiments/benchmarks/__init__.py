"""Benchmark-only code (not the library): the results table of `podracer bench table`, the
published numbers it compares with, and the hand-written reference PPO that
`podracer bench anakin --compare-reference` times podracer against."""
