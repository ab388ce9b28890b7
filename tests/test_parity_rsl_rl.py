"""Parity of strl_jax's building blocks with the installed PyTorch rsl_rl (rsl-rl-lib) on identical
float32 inputs, to 1e-5: rsl_rl's `compute_returns` (called on a stub whose critic looks its values
up in a table), its Gaussian distributions, the adaptive learning-rate branch of `PPO.update` and
`EmpiricalNormalization`. The learner's whole update against rsl_rl's `PPO.update()` and
`Distillation.update()` is tests/test_update_parity.py.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from rsl_rl.algorithms import PPO
from rsl_rl.modules import EmpiricalNormalization, GaussianDistribution, HeteroscedasticGaussianDistribution
from tensordict import TensorDict
from torch import nn

from strl_jax.agents.ppo import adaptive_learning_rate
from strl_jax.buffers.gae import compute_gae, normalize_advantages
from strl_jax.networks.gaussian import gaussian_entropy, gaussian_kl, gaussian_log_prob
from strl_jax.networks.normalizer import init_normalizer, normalize, update_normalizer

TOL = dict(rtol=1e-5, atol=1e-5)


def f32(x):
    """float64 numpy -> float32 numpy: the single source of numbers for both implementations."""
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def close(actual, desired, **kw):
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), np.asarray(desired, np.float64), **{**TOL, **kw}
    )


# ----------------------------------------------------------------------------- stub models


def _obs(idx: np.ndarray) -> TensorDict:
    """An observation that only carries the row index into the stubs' tables."""
    return TensorDict({"idx": t(f32(idx)[:, None])}, batch_size=[len(idx)])


class _TableCritic(nn.Module):
    """A critic whose value is looked up by the row index the observation carries."""

    is_recurrent = False

    def __init__(self):
        super().__init__()
        self.values = None

    def set_tables(self, values):
        self.values = t(values)

    def forward(self, obs, masks=None, hidden_state=None, stochastic_output=False):
        return self.values[obs["idx"].long().squeeze(-1)][:, None]

    def get_hidden_state(self):
        return None

    def reset(self, dones=None, hidden_state=None):
        pass


def test_compute_returns_stub_self_raw_advantages():
    """Calling PPO.compute_returns on a stub `self`: with per-minibatch normalisation the stored
    advantages are the raw GAE ones (returns - values), equal to compute_gae's, for a rollout with many
    dones; otherwise they equal normalize_advantages of them."""
    rng = np.random.default_rng(7)
    steps, envs = 9, 5
    rewards, values = f32(rng.normal(size=(steps, envs))), f32(rng.normal(size=(steps, envs)) * 3)
    dones = rng.random((steps, envs)) < 0.5
    last_values = f32(rng.normal(size=envs))
    storage = type(
        "S",
        (),
        dict(
            num_transitions_per_env=steps,
            rewards=t(rewards[..., None]),
            values=t(values[..., None]),
            dones=t(dones[..., None].astype(np.uint8)),
            returns=torch.zeros(steps, envs, 1),
            advantages=torch.zeros(steps, envs, 1),
        ),
    )()
    critic = _TableCritic()
    critic.set_tables(last_values)
    stub = type("P", (), dict(storage=storage, critic=critic, gamma=0.97, lam=0.9))()
    for per_mb in (True, False):
        stub.normalize_advantage_per_mini_batch = per_mb
        PPO.compute_returns(stub, _obs(np.arange(envs)))
        adv, ret = compute_gae(rewards, values, dones, last_values, 0.97, 0.9)
        close(ret, storage.returns[..., 0].numpy(), err_msg="returns")
        expected = adv if per_mb else normalize_advantages(adv)
        close(expected, storage.advantages[..., 0].numpy(), err_msg=f"advantages per_mb={per_mb}")


# ----------------------------------------------------------------------------- distribution


@pytest.mark.parametrize("seed", range(4))
def test_gaussian_matches_rsl_rl_distribution(seed):
    """log_prob, entropy and exact KL (eps=0) equal rsl_rl's Gaussian distributions (torch Normal) on
    the same numbers, for state-dependent std (Heteroscedastic) and a state-independent std parameter
    (GaussianDistribution)."""
    rng = np.random.default_rng(seed)
    shape = (16, 5)
    mean, old_mean, actions = (f32(rng.normal(size=shape) * s) for s in (1.0, 1.0, 2.0))
    std, old_std = (f32(np.exp(rng.uniform(-2.0, 1.0, size=shape))) for _ in range(2))
    dist = HeteroscedasticGaussianDistribution(shape[-1])
    dist.update(torch.stack([t(mean), t(std)], dim=-2))
    close(gaussian_log_prob(actions, mean, std), dist.log_prob(t(actions)).numpy())
    close(gaussian_entropy(std), dist.entropy.numpy())
    kl_ref = dist.kl_divergence((t(old_mean), t(old_std)), (t(mean), t(std))).numpy()
    close(gaussian_kl(old_mean, old_std, mean, std, eps=0.0), kl_ref)
    # st_rl's eps=1e-5 variant exceeds the exact KL by log(1 + eps sigma_old/sigma) per dimension
    st_rl_kl = np.asarray(gaussian_kl(old_mean, old_std, mean, std))
    bound = np.sum(1e-5 * old_std / std, axis=-1) + 1e-5 * (1.0 + np.abs(kl_ref))
    assert np.all(np.abs(st_rl_kl - kl_ref) <= bound)
    assert np.all(st_rl_kl - kl_ref >= -1e-5 * (1.0 + np.abs(kl_ref)))

    scalar = GaussianDistribution(shape[-1])
    with torch.no_grad():
        scalar.std_param.copy_(t(std[0]))
    scalar.update(t(mean))
    close(gaussian_log_prob(actions, mean, std[0]), scalar.log_prob(t(actions)).detach().numpy())
    close(gaussian_entropy(np.broadcast_to(std[0], shape)), scalar.entropy.detach().numpy())


@pytest.mark.parametrize("desired_kl", [0.01, 0.003])
def test_adaptive_lr_matches_rsl_rl_branch_on_kl_grid(desired_kl):
    """On a grid of lr and float32 kl_mean tensors (incl. 0, negatives and the exact thresholds), the
    rsl_rl branch from PPO.update (run on torch tensors, as there) and adaptive_learning_rate agree."""
    kls = np.concatenate(
        [[0.0, -1e-3, desired_kl / 2, desired_kl * 2, desired_kl, 1e-9], np.geomspace(1e-6, 1.0, 25)]
    ).astype(np.float32)
    for lr0 in (5e-6, 1e-5, 1.2e-5, 1e-3, 7e-3, 1e-2, 3e-2):
        for kl in kls:
            kl_mean = torch.tensor(kl)
            lr = lr0
            # verbatim branch of rsl_rl PPO.update (single process)
            if kl_mean > desired_kl * 2.0:
                lr = max(1e-5, lr / 1.5)
            elif kl_mean < desired_kl / 2.0 and kl_mean > 0.0:
                lr = min(1e-2, lr * 1.5)
            ours = float(adaptive_learning_rate(jnp.float32(lr0), jnp.asarray(kl), desired_kl))
            assert ours == pytest.approx(lr, rel=1e-6), (lr0, float(kl))


# ----------------------------------------------------------------------------- normaliser


NORMALIZER_CASES = {
    "no_until": (3, [5, 1, 8, 2, 16], None),
    "until_mid_batch": (2, [4, 4, 4, 4], 6),
    "until_exact": (4, [3, 3, 7, 2], 6),
    "until_first_batch": (1, [10, 3, 3], 5),
    "big_offsets": (5, [64, 64, 64], None),
}


@pytest.mark.parametrize("name", list(NORMALIZER_CASES))
def test_normalizer_matches_empirical_normalization(name):
    """After every batch, update_normalizer and rsl_rl's EmpiricalNormalization (training mode, same `until`)
    hold the same mean, var, count, and normalise inputs identically."""
    dim, sizes, until = NORMALIZER_CASES[name]
    rng = np.random.default_rng(len(name))
    offset = rng.normal(size=dim) * (20.0 if name == "big_offsets" else 2.0)
    ref = EmpiricalNormalization(dim, until=until).train()
    state = init_normalizer(dim)
    for n in sizes:
        x = f32(offset + rng.normal(size=(n, dim)) * np.exp(rng.normal(size=dim)))
        ref.update(t(x))
        state = update_normalizer(state, x, until=until)
        assert int(state.count) == int(ref.count)
        close(state.mean, ref._mean[0].numpy(), err_msg="mean")
        close(state.var, ref._var[0].numpy(), err_msg="var")
        probe = f32(offset + rng.normal(size=(7, dim)) * 3)
        with torch.no_grad():
            close(normalize(state, probe), ref(t(probe)).numpy(), err_msg="normalised")
    if until is not None:
        assert int(ref.count) >= until


def test_normalizer_time_major_batch_matches_flattened_rsl_rl():
    """A [T, N, d] rollout fed to update_normalizer equals rsl_rl updating on `obs.flatten(0, 1)`."""
    rng = np.random.default_rng(3)
    ref = EmpiricalNormalization(4).train()
    state = init_normalizer(4)
    for _ in range(3):
        x = f32(rng.normal(size=(5, 6, 4)) * 2 + 1)
        ref.update(t(x).flatten(0, 1))
        state = update_normalizer(state, x)
    assert int(state.count) == int(ref.count) == 90
    close(state.mean, ref._mean[0].numpy())
    close(state.var, ref._var[0].numpy())
