"""Named latents of a policy, for st_rl's latent distillation (`get_encoder_latent`).

A latent is the output of an estimator stage (`estimator`, `adaptor`), the latent an encoder makes
of a component (named by the component, as st_rl's `get_encoder_latent(obs, component)`), or, for
a component of the actor's input without an encoder of its own, the component itself as the actor
reads it (normalised): the identity embedding. `distill_latent_obs_component_mapping` pairs a
student latent with a teacher latent by these names.
"""

from __future__ import annotations

import dataclasses

import jax

from strl_jax.errors import ConfigError
from strl_jax.static_take import take_static


@dataclasses.dataclass(frozen=True)
class LatentSource:
    """Where a latent comes from: a stage's estimate, or entries of the actor's input."""

    name: str
    stage: str | None = None
    indices: tuple[int, ...] = ()
    size: int = 0

    def read(self, estimates: dict[str, jax.Array], actor_input: jax.Array) -> jax.Array:
        return estimates[self.stage] if self.stage is not None else take_static(actor_input, self.indices)


def latent_source(name: str, model, layout, whose: str) -> LatentSource:
    """Resolve `name` among the policy's stages, its encoders and its actor input's components
    (`layout`); `model` is its `PolicyModel` (stages and encoders)."""
    for s in model.stages:
        if s.name == name:
            return LatentSource(name=name, stage=name, size=s.output_size)
    for e in model.encoders:
        if e.component == name:  # the forward pass returns encoder latents under the component's name
            return LatentSource(name=name, stage=name, size=e.output_size)
    start = 0
    for component, size in layout or ():
        if component == name:
            return LatentSource(name=name, indices=tuple(range(start, start + size)), size=size)
        start += size
    valid = [s.name for s in model.stages] + [c for c, _ in layout or ()]
    raise ConfigError(
        f"algorithm.distill_latent_obs_component_mapping: the {whose} has no latent {name!r}; "
        f"valid: {valid} (estimator stages, encoded components, or components of its actor's input)"
    )
