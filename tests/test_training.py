"""The jitted PPO iteration learns: the default pendulum preset balances. (A tiny run's determinism
and outputs are test_tiny_runs.py's; this module keeps XLA's optimised programs, with which its
threshold was measured.)"""

from __future__ import annotations

import pytest
from learning_runs import pendulum_balance


@pytest.mark.slow
def test_inverted_pendulum_learns_to_balance(tmp_path):
    """The default preset balances the pendulum: a deterministic eval return >= 900 (of 1000)
    within its 100 iterations, with seed 1 or, where that run misses, seed 3."""
    # BENCHMARKS.md, Learning spread: balance: best 250 / 1000 / 1000 over 12 runs (seeds 1-8 with
    # strl_jax's XLA:CPU flag, 1-4 without); 11 of 12 reach 1000 by iteration 20-80, seed 2 with
    # the flag never balances (best 250). Another machine's rounding moves a seed as another seed
    # would: two independent tries both miss about once in 144, a broken learner every time.
    evals = pendulum_balance(tmp_path / "seed1", seed=1)
    if max(evals) < 900:
        evals += pendulum_balance(tmp_path / "seed3", seed=3)
    assert max(evals) >= 900, evals
