"""A step counter that stays exact far past 2**31, on the device.

JAX computes in 32 bits unless x64 is on, and an int32 count of env steps overflows at
2**31 (2.1e9): a 10B-frame Atari run is 2.5e9 agent steps. `Count` keeps `hi * 2**32 + lo`
in two uint32 words: exact to 2**64, a pytree of plain arrays that jit, vmap, shard_map and
checkpoints handle like any other, and a few integer ops to add to.

Host-side counts (updates, env steps in metrics rows and checkpoints' `Progress`) are
Python ints and need none of this.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from podracer.types import Array

_WORD = 2**32


class Count(NamedTuple):
    """A non-negative integer `hi * 2**32 + lo`; `hi`, `lo` uint32 arrays of one shape."""

    hi: Array
    lo: Array

    @classmethod
    def of(cls, value: int, shape: tuple[int, ...] = ()) -> Count:
        """The count `value` (a Python int, `0 <= value < 2**64`), as arrays of `shape`."""
        hi, lo = divmod(int(value), _WORD)
        if not 0 <= hi < _WORD:
            raise ValueError(f"a Count holds 0 .. 2**64 - 1, not {value}")
        return cls(jnp.full(shape, hi, jnp.uint32), jnp.full(shape, lo, jnp.uint32))

    @classmethod
    def zeros(cls, shape: tuple[int, ...] = ()) -> Count:
        return cls.of(0, shape)

    def add(self, n: int | Array) -> Count:
        """`self + n`, for `0 <= n < 2**32` (a Python int or an integer array); the carry
        out of the low word goes into the high one."""
        lo = self.lo + jnp.asarray(n, jnp.uint32)
        return Count(self.hi + (lo < self.lo).astype(jnp.uint32), lo)

    def ge(self, value: int) -> Array:
        """`bool`: `self >= value` for a Python int `value >= 0`, exactly."""
        hi, lo = divmod(int(value), _WORD)
        if hi >= _WORD:
            return jnp.zeros(jnp.shape(self.lo), bool)
        hi, lo = jnp.uint32(hi), jnp.uint32(lo)
        return (self.hi > hi) | ((self.hi == hi) & (self.lo >= lo))

    def mod(self, divisor: int) -> Array:
        """`self % divisor` (int32) for a Python int `1 <= divisor < 2**31`, exactly: the high
        word's remainder times `2**32 % divisor` (for a large divisor, shifted up 32 bits one
        bit at a time so that each step stays below 2**32), plus the low word's."""
        if not 1 <= divisor < 2**31:
            raise ValueError(f"divisor must be in [1, 2**31), got {divisor}")
        d = jnp.uint32(divisor)
        if divisor <= 2**16:  # the product of two remainders fits in a word
            shifted = (self.hi % d) * jnp.uint32(_WORD % divisor)
        else:
            shifted = self.hi % d
            for _ in range(32):
                shifted = (shifted * 2) % d
        return ((shifted % d + self.lo % d) % d).astype(jnp.int32)

    def as_float(self) -> Array:
        """float32 (relative error ~6e-8): for schedules and ratios, not for comparisons."""
        return self.hi.astype(jnp.float32) * float(_WORD) + self.lo.astype(jnp.float32)

    def __int__(self) -> int:
        """The exact value of a concrete (host or device) scalar count."""
        return int(np.asarray(self.hi)) * _WORD + int(np.asarray(self.lo))
