"""Entry points that are not envs, or envs that break the rules, for the error messages' tests."""

from __future__ import annotations

import jax.numpy as jnp

from tests.user_envs.slider import Slider

NOT_AN_ENV = 3


class Plain:
    """A class that is no env."""


def returns_number() -> int:
    return 3


class Shapeshifter(Slider):
    """Its step's `state` observation has one entry more than its reset's."""

    def step(self, state, action):
        state = super().step(state, action)
        obs = {**state.obs, "state": jnp.concatenate([state.obs["state"], action])}
        return state.replace(obs=obs)


class NeedsWidth(Slider):
    """A constructor argument without a default (env.env_kwargs must give it)."""

    def __init__(self, config=None, *, width: float):
        super().__init__(config)
        self.width = width


def randomize_one_argument(model):
    return model


def randomize_returns_model(model, rng):
    return model
