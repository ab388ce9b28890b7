"""A run that blows up while its numbers stay finite: the KL, the value loss or the action std
orders of magnitude past what the config asks for.

The per-iteration finiteness check stops a run at the first NaN or infinity; a learning rate far
too large can instead leave a value loss of 1e29 and a std of thousands that never overflow. The
bounds below are far outside any healthy run, so crossing one means the run diverged:

- KL above `KL_FACTOR` x `algorithm.desired_kl` (the step size the config asks for, under the
  fixed schedule too);
- action std above `STD_FACTOR` x `policy.init_noise_std`;
- value loss above `VALUE_FACTOR` x (1 + R^2), R = `algorithm.reward_scale` x |mean step reward|
  / (1 - gamma): the discounted return that rewards of the rollout's size add up to.
"""

from __future__ import annotations

from strl_jax.configs.schema import TrainConfig

KL_FACTOR = 1e3
STD_FACTOR = 1e2
VALUE_FACTOR = 1e6


def divergence_bounds(cfg: TrainConfig, mean_step_reward: float) -> dict[str, tuple[float, str]]:
    """`{scalar name: (bound, what it derives from)}` for one iteration of a run with `cfg`."""
    alg = cfg.algorithm
    returns = alg.reward_scale * abs(mean_step_reward) / (1.0 - alg.gamma) if alg.gamma < 1 else 0.0
    return {
        "kl": (KL_FACTOR * alg.desired_kl, f"{KL_FACTOR:g} x algorithm.desired_kl={alg.desired_kl:g}"),
        "mean_noise_std": (
            STD_FACTOR * cfg.policy.init_noise_std,
            f"{STD_FACTOR:g} x policy.init_noise_std={cfg.policy.init_noise_std:g}",
        ),
        "value_function": (
            VALUE_FACTOR * (1.0 + returns**2),
            f"{VALUE_FACTOR:g} x (1 + R^2), R = {returns:.3g} the discounted return of the rollout's rewards",
        ),
    }


def diverged(cfg: TrainConfig, scalars: dict, mean_step_reward: float) -> list[str]:
    """What ran past its bound this iteration, one phrase each (empty: nothing)."""
    out = []
    for name, (bound, source) in divergence_bounds(cfg, mean_step_reward).items():
        value = scalars.get(name)
        if value is not None and float(value) > bound:
            out.append(f"{name} = {float(value):.3g} > {bound:.3g} ({source})")
    return out


def divergence_message(what: list[str], iteration: int, stopping: bool) -> str:
    """The warning (or the stop) for a run whose numbers ran away at `iteration`."""
    action = (
        "runner.stop_on_divergence=true: the run stops here."
        if stopping
        else "Training goes on (runner.stop_on_divergence=true stops such runs); this warning is "
        "given once per run."
    )
    return (
        f"iteration {iteration}: the run is diverging: {'; '.join(what)}. Lower "
        "algorithm.learning_rate or algorithm.max_grad_norm, or use algorithm.schedule=adaptive. "
        f"{action}"
    )
