"""Observation components embedded by encoders before the actor and critic (st_rl
`EncoderActorCriticMixin`, `VisualActorCriticMixin`).

Each encoded component of a flat observation is replaced, where it stands, by its encoder's latent
(st_rl's `embed_encoders_latent`: the latents take the places of their components in the order the
components appear in the observation, whatever order the config lists them in). Slices are static,
so the embedded input is a concatenation of views: no gather, and the exported graph stays simple.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from strl_jax.networks.encoders import make_encoder


def frozen(value: Any) -> Any:
    """Config values as hashable tuples (flax module fields must be hashable)."""
    if isinstance(value, dict):
        return tuple((k, frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """One component's encoder, resolved against the env's layout (static, hashable)."""

    component: str
    start: int  # where the component starts in its group's flat observation
    size: int
    class_name: str  # "MlpModel" | "Conv2dHeadModel"
    kwargs: tuple[tuple[str, Any], ...]  # st_rl's encoder_kwargs, frozen
    output_size: int
    linear_output: bool = False  # the visual encoder's latent is linear; the encoder mixin's is not

    @property
    def stop(self) -> int:
        return self.start + self.size

    def build(self) -> nn.Module:
        kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.kwargs}
        return make_encoder(
            self.class_name,
            kwargs,
            self.size,
            self.output_size,
            component=self.component,
            linear_output=self.linear_output,
        )

    def at(self, start: int) -> EncoderSpec:
        """The same encoder on the same component placed elsewhere (the critic's group)."""
        return dataclasses.replace(self, start=start)


def embed(
    obs: jax.Array, specs: tuple[EncoderSpec, ...], encoders: dict[str, nn.Module]
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """`(obs with every encoded component replaced by its latent, {component: latent})`."""
    if not specs:
        return obs, {}
    pieces, latents, position = [], {}, 0
    for spec in sorted(specs, key=lambda s: s.start):
        pieces.append(obs[..., position : spec.start])
        latents[spec.component] = encoders[spec.component](obs[..., spec.start : spec.stop])
        pieces.append(latents[spec.component])
        position = spec.stop
    pieces.append(obs[..., position:])
    return jnp.concatenate(pieces, axis=-1), latents


def raw_input_size(embedded: int, specs: tuple[EncoderSpec, ...]) -> int:
    """A group's raw observation width from the embedded width the first layer reads."""
    return embedded - sum(s.output_size - s.size for s in specs)
