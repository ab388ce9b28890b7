"""`algorithm.target_kl`: an update stops at the first minibatch whose KL to the acting policy
passes 1.5 x target_kl (stable-baselines3's early stop,
https://stable-baselines3.readthedocs.io/en/master/modules/ppo.html, `target_kl`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.configs import ConfigError, resolve_config
from strl_jax.runners.runner import train
from strl_jax.train_loops.ppo_update import early_stop


def test_early_stop_skips_the_passing_step_and_every_later_one():
    """KLs 0.1, 0.35, 0.1 under target 0.2 (bound 0.3): the first step is kept, the second and
    third are skipped although the third's KL is small again. The rate (the core's last part)
    follows every minibatch's adaptive change, skipped or not."""

    def step(carry, kl):
        core, stopped = carry
        params, opt_state, rate = core
        after = (params + 1.0, opt_state + 1.0, rate / 1.5)  # a step adds one; the rate falls
        core, stopped, metrics = early_stop(0.2, core, after, stopped, {"kl": kl})
        return (core, stopped), (core, metrics["kl_stopped"])

    start = ((jnp.zeros(()), jnp.zeros(()), jnp.ones(())), jnp.zeros((), bool))
    _, ((params, opt_state, rates), skipped) = jax.lax.scan(step, start, jnp.array([0.1, 0.35, 0.1]))
    np.testing.assert_array_equal(params, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(opt_state, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(rates, [1 / 1.5, 1 / 1.5**2, 1 / 1.5**3], rtol=1e-6)
    np.testing.assert_array_equal(skipped, [0.0, 1.0, 1.0])


def test_early_stop_off_takes_every_step():
    before, after = (jnp.zeros(()),) * 3, (jnp.ones(()),) * 3
    core, stopped, metrics = early_stop(None, before, after, jnp.zeros((), bool), {"kl": 9.0})
    assert [float(c) for c in core] == [1.0] * 3 and "kl_stopped" not in metrics and not bool(stopped)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny pendulum run three ways: no guard, a bound no update reaches, a bound every
    update's first step passes (st_rl's KL reads about kl_epsilon per action dimension at zero)."""
    out = {}
    for name, value in {"off": "null", "never": "1e9", "always": "1e-12"}.items():
        cfg = resolve_config(
            "inverted_pendulum", overrides=tiny(f"algorithm.target_kl={value}", "runner.max_iterations=3")
        )
        out[name] = train(cfg, tmp_path_factory.mktemp(name), verbose=False).rows
    return out


def test_a_bound_never_reached_changes_nothing(runs):
    """The same steps: equal up to the rounding of two programs that XLA compiles apart (bitwise
    under XLA:CPU's fusion emitters, within 4e-6 under its older emitter); one skipped step would
    move these by percents."""
    for off, never in zip(runs["off"], runs["never"], strict=True):
        assert never["kl_stopped"] == 0.0
        for key in ("kl", "mean_noise_std", "value_function", "surrogate", "learning_rate"):
            assert never[key] == pytest.approx(off[key], rel=1e-4, abs=1e-9), key


def test_a_bound_every_step_passes_freezes_the_policy(runs):
    """Every step skipped: the std stays at its initial value, where the unguarded run moves it."""
    init_std = 1.0
    assert [r["kl_stopped"] for r in runs["always"]] == [1.0, 1.0, 1.0]
    assert all(r["mean_noise_std"] == pytest.approx(init_std, abs=1e-7) for r in runs["always"])
    assert abs(runs["off"][-1]["mean_noise_std"] - init_std) > 1e-3


def test_the_adaptive_rate_follows_the_skipped_minibatches_kl(runs):
    """Every step skipped, so every minibatch's KL is that of zero change (about kl_epsilon per
    action dimension), below half the desired KL: rsl_rl's rule raises the rate 1.5x on each of
    the update's 4 minibatches, up to its cap of 1e-2. A stop that restored the rate would hold
    it at 1e-3."""
    rates = [r["learning_rate"] for r in runs["always"]]
    np.testing.assert_allclose(rates, [1e-3 * 1.5**4, 1e-2, 1e-2], rtol=1e-6)


@pytest.mark.parametrize("value", ["0", "-0.1", ".nan"])
def test_a_bad_target_kl_is_refused_by_name(value):
    with pytest.raises(ConfigError, match="algorithm.target_kl must be a positive number"):
        resolve_config("inverted_pendulum", overrides=[f"algorithm.target_kl={value}"])


@pytest.mark.parametrize("value", ["1.0", "1.2", ".nan", ".inf"])
def test_a_dual_clip_at_or_below_ppos_clip_is_refused_by_name(value):
    """With clip_param 0.2, a dual clip of 1.2 or less would bound terms PPO's clip leaves alone."""
    with pytest.raises(
        ConfigError, match=r"algorithm.dual_clip must be a number above 1 \+ clip_param \(1.2"
    ):
        resolve_config(
            "inverted_pendulum", overrides=["algorithm.clip_param=0.2", f"algorithm.dual_clip={value}"]
        )
