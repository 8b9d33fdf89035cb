"""Drawing environment states as RGB frames, for evaluation videos.

An environment can render if it has a method `render(state) -> uint8 [H, W, 3]` taking
its own (inner) state, the one `reset_env`/`step_env` return. It should be written with
`jax.numpy` so a whole episode renders under one `vmap`. `render_fps` (optional, default
20) sets the video's frame rate. The helpers here draw grids and CartPole.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from podracer.types import Array

BACKGROUND = (255, 255, 255)


def can_render(env: Any) -> bool:
    return callable(getattr(env, "render", None))


def grid_frame(cells: Array, palette: Array, cell_px: int = 24, gap_px: int = 1) -> Array:
    """`cells [R, C]` of palette indices -> `uint8 [R * cell_px, C * cell_px, 3]`, with thin
    lines of `palette[0]` darkened between the cells."""
    colors = jnp.asarray(palette, jnp.uint8)[cells]
    image = jnp.repeat(jnp.repeat(colors, cell_px, axis=0), cell_px, axis=1)
    ys = jnp.arange(image.shape[0])[:, None]
    xs = jnp.arange(image.shape[1])[None, :]
    line = ((ys % cell_px) < gap_px) | ((xs % cell_px) < gap_px)
    return jnp.where(line[..., None], jnp.uint8(40), image)


def cartpole_frame(x: Array, theta: Array, x_threshold: float = 2.4, pole_half_length: float = 0.5,
                   width: int = 300, height: int = 200) -> Array:
    """Gym's CartPole picture: a cart on a rail and its pole, `uint8 [height, width, 3]`."""
    scale = width / (2 * x_threshold)
    ys = jnp.arange(height, dtype=jnp.float32)[:, None]
    xs = jnp.arange(width, dtype=jnp.float32)[None, :]
    cart_x, cart_y = x * scale + width / 2, height * 0.65
    rail = jnp.abs(ys - (cart_y + 15)) < 1
    cart = (jnp.abs(xs - cart_x) <= 25) & (jnp.abs(ys - cart_y) <= 15)
    pivot_y = cart_y - 8
    tip_x = cart_x + 2 * pole_half_length * scale * jnp.sin(theta)
    tip_y = pivot_y - 2 * pole_half_length * scale * jnp.cos(theta)
    pole = _segment_distance(xs, ys, cart_x, pivot_y, tip_x, tip_y) <= 5
    axle = (xs - cart_x) ** 2 + (ys - pivot_y) ** 2 <= 16
    image = jnp.broadcast_to(jnp.asarray(BACKGROUND, jnp.uint8), (height, width, 3))
    for mask, color in ((rail, (0, 0, 0)), (cart, (40, 40, 40)), (pole, (202, 152, 101)), (axle, (129, 132, 203))):
        image = jnp.where(mask[..., None], jnp.asarray(color, jnp.uint8), image)
    return image


def _segment_distance(xs: Array, ys: Array, x0: Array, y0: Array, x1: Array, y1: Array) -> Array:
    """Distance of every pixel to the segment `(x0, y0)-(x1, y1)`."""
    dx, dy = x1 - x0, y1 - y0
    t = jnp.clip(((xs - x0) * dx + (ys - y0) * dy) / (dx * dx + dy * dy + 1e-9), 0.0, 1.0)
    return jnp.hypot(xs - (x0 + t * dx), ys - (y0 + t * dy))
