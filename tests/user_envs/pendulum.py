"""Brax user envs: Brax's inverted pendulum as an env of one's own, with named components."""

from __future__ import annotations

from brax.envs.inverted_pendulum import InvertedPendulum


class Pendulum(InvertedPendulum):
    """Brax's cart-pole under another name, declaring its observation's components."""

    obs_layout = {"state": [("cart_pos", 1), ("pole_angle", 1), ("cart_vel", 1), ("pole_vel", 1)]}


def make_pendulum(backend: str = "generalized", **kwargs) -> Pendulum:
    """A factory entry point: gets `backend=env.backend` because it takes a `backend` parameter."""
    return Pendulum(backend=backend, **kwargs)
