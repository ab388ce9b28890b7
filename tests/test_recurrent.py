"""Recurrent policies learn what a feed-forward one cannot: on the pendulum with its velocities
hidden, an LSTM balances far better than an MLP with the same budget. (Sequences, minibatches and
resume are test_recurrent_sequences.py's; this module keeps XLA's optimised programs, with which
its threshold was measured.)"""

from __future__ import annotations

import pytest
from learning_runs import memory_vs_feedforward


@pytest.mark.slow
def test_memory_beats_mlp_when_velocities_are_hidden(tmp_path):
    """On the partially observable preset, an LSTM policy balances far better than an MLP with the
    same budget (the MLP cannot tell which way the pole is moving). Over seeds and both rounding
    variants the LSTM's best return within 60 iterations was 808-1000, the MLP's 132-286
    (BENCHMARKS.md)."""
    lstm, mlp = memory_vs_feedforward(tmp_path)
    # BENCHMARKS.md, Learning spread: memory: LSTM best 808 / 1000 / 1000 over 7 runs, seeds 1-4
    # (MLP 132-286 within 40 iterations): margin 408 to 400, 243 to twice its own MLP.
    assert lstm >= 2 * mlp and lstm >= 400, (lstm, mlp)
