"""rsl_rl's symmetry extension (`algorithm.symmetry_cfg`): mirrored minibatches and the mirror loss.

A user function (`data_augmentation_func`, a `module:function`) returns, for raw observation groups
and/or actions `[B, ...]`, the originals followed by their mirrored copies `[k * B, ...]`
(`strl_jax.envs.symmetry` has them for Go1, a humanoid and Brax ant). As in rsl_rl's
`Symmetry` and `PPO.update`:
- `use_data_augmentation`: each minibatch becomes the originals plus the copies (old log-probs,
  values, advantages and returns repeated), so the surrogate and value terms average over all
  `k * B` samples, while the entropy and the adaptive-lr KL see the originals only.
- the mirror loss `mean((mu(obs') - mirror(sg(mu(obs))))^2)` over the copies, weighted by
  `mirror_loss_coeff` with `use_mirror_loss`; otherwise only logged (`Loss/symmetry`), which is also
  what rsl_rl does when neither option is on.
The batch holds normalised observations, so the function sees them un-normalised and its output
is normalised again (rsl_rl's actor normalises the augmented batch itself).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.agents.parts import AugmentContext, LossContext, Losses, Part, PartBuild
from strl_jax.config_sections import FLAG, accept, key, number
from strl_jax.errors import ConfigError
from strl_jax.networks.normalizer import denormalize, normalize
from strl_jax.user_functions import import_function, is_function_spec

OPTION = "algorithm.symmetry_cfg"


@dataclasses.dataclass(frozen=True)
class SymmetryEnv:
    """Static facts the augmentation function may read (rsl_rl passes its env object)."""

    task: str
    components: dict[str, tuple[tuple[str, int], ...]]  # group -> ((component, size), ...), where known
    obs_sizes: dict[str, int]  # group -> flat size
    action_size: int


AugmentFunc = Callable[[dict | None, jax.Array | None, SymmetryEnv], tuple[Any, Any]]


FUNCTION = accept(
    lambda v: isinstance(v, str) and is_function_spec(v),
    "a function as 'package.module:function' (e.g. strl_jax.envs.symmetry:go1_joystick)",
)


@dataclasses.dataclass(frozen=True)
class SymmetrySettings:
    """`algorithm.symmetry_cfg`, typed: rsl_rl's keys and defaults."""

    data_augmentation_func: str = key(FUNCTION)  # 'package.module:function'
    use_data_augmentation: bool = key(FLAG, False)
    use_mirror_loss: bool = key(FLAG, False)
    mirror_loss_coeff: float = key(number(minimum=0.0), 0.0)


def symmetry_env(env: Any, obs_sizes: dict[str, int]) -> SymmetryEnv:
    """The static facts of a `VecEnv` for the augmentation function."""
    return SymmetryEnv(
        task=env.task, components=dict(env.components), obs_sizes=obs_sizes, action_size=env.action_size
    )


def copies(func: AugmentFunc, env: SymmetryEnv) -> int:
    """How many samples (original included) the function makes of one, checked on shapes only."""
    batch = 2
    obs = {k: jax.ShapeDtypeStruct((batch, n), jnp.float32) for k, n in env.obs_sizes.items()}
    actions = jax.ShapeDtypeStruct((batch, env.action_size), jnp.float32)
    where = f"{OPTION}.data_augmentation_func"
    try:
        out_obs, out_actions = jax.eval_shape(lambda o, a: func(o, a, env), obs, actions)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of user code is a config problem here
        raise ConfigError(
            f"{where} fails on observations {env.obs_sizes}: {type(err).__name__}: {err}"
        ) from None
    rows = out_actions.shape[0]
    if rows % batch or rows < 2 * batch or out_actions.shape[1:] != (env.action_size,):
        raise ConfigError(
            f"{where} must return actions [k * B, {env.action_size}] (k >= 2: originals first), "
            f"got {out_actions.shape} for B={batch}"
        )
    if set(out_obs) != set(obs) or any(out_obs[k].shape != (rows, obs[k].shape[1]) for k in obs):
        got = {k: v.shape for k, v in out_obs.items()}
        raise ConfigError(f"{where} must return every group {sorted(obs)} as [{rows}, size], got {got}")
    return rows // batch


def _map_groups(normalizers: dict, obs: dict, fn: Callable) -> dict:
    return {k: fn(normalizers[k], v) if k in normalizers else v for k, v in obs.items()}


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class SymmetryPart(Part):
    """Augments each minibatch and/or adds the mirror loss (feed-forward policies: columns are samples)."""

    func: AugmentFunc
    env: SymmetryEnv
    use_data_augmentation: bool = False
    use_mirror_loss: bool = False
    mirror_loss_coeff: float = 0.0
    sections = {"symmetry": "Loss"}  # noqa: RUF012 - ClassVar of the base class

    def mirror(self, obs: dict | None, actions: jax.Array | None, normalizers: dict) -> tuple[Any, Any]:
        """The function on `[1, B, ...]` columns of normalised observations (raw actions)."""
        raw = (
            None if obs is None else _map_groups(normalizers, {k: v[0] for k, v in obs.items()}, denormalize)
        )
        out_obs, out_actions = self.func(raw, None if actions is None else actions[0], self.env)
        if out_obs is not None:
            out_obs = {k: v[None] for k, v in _map_groups(normalizers, out_obs, normalize).items()}
        return out_obs, None if out_actions is None else out_actions[None]

    def augment(self, train: Any, batch: Any, ctx: AugmentContext) -> Any:
        columns = batch.actions.shape[1]
        if not self.use_data_augmentation:
            obs, _ = self.mirror(batch.obs, None, ctx.normalizers)  # for the mirror loss only
            return batch.replace(parts={**batch.parts, self.name: {"mirrored_obs": obs}})
        obs, actions = self.mirror(batch.obs, batch.actions, ctx.normalizers)
        k = actions.shape[1] // columns
        tile = lambda x: jnp.concatenate([x] * k, axis=1)  # noqa: E731 - torch's `repeat(k, 1)`
        rest = [f for f in batch.STEP_FIELDS if f not in ("obs", "actions")]
        return batch.replace(
            obs=obs, actions=actions, **{f: jax.tree.map(tile, getattr(batch, f)) for f in rest}
        )

    def losses(self, params: Any, train: Any, ctx: LossContext, inputs: Any) -> Losses:
        b = ctx.originals
        if self.use_data_augmentation:
            mean_copies = ctx.mean[:, b:]
        else:
            mirrored = {k: v[:, b:] for k, v in ctx.batch.parts[self.name]["mirrored_obs"].items()}
            mean_copies = ctx.policy_mean(mirrored)
        _, target = self.mirror(None, jax.lax.stop_gradient(ctx.mean[:, :b]), {})
        loss = jnp.mean(jnp.square(mean_copies - target[:, b:]))
        if not self.use_mirror_loss:
            loss = jax.lax.stop_gradient(loss)
        coef = self.mirror_loss_coeff if self.use_mirror_loss else 0.0
        return {"symmetry": loss}, {"symmetry": coef}, {"symmetry": loss}


def build_symmetry(b: PartBuild) -> SymmetryPart:
    """rsl_rl's symmetry extension over the groups the policy's batch holds: its function imported
    and tried on the env's shapes."""
    settings: SymmetrySettings = b.settings
    func = import_function(settings.data_augmentation_func, f"{OPTION}.data_augmentation_func")
    info = symmetry_env(b.env, {k: int(math.prod(shape)) for k, shape in b.policy_shapes.items()})
    copies(func, info)
    return SymmetryPart(
        name=b.name,
        func=func,
        env=info,
        use_data_augmentation=settings.use_data_augmentation,
        use_mirror_loss=settings.use_mirror_loss,
        mirror_loss_coeff=settings.mirror_loss_coeff,
    )
