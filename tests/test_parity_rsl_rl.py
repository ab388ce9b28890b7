"""Parity with the installed PyTorch rsl_rl (rsl-rl-lib) on identical float32 inputs, to 1e-5.

The end-to-end tests drive rsl_rl's real `PPO` (act -> process_env_step -> compute_returns -> update)
and `RolloutStorage`, with stub actor/critic modules that look their outputs up in fixed tables keyed
by an index stored in the observation. The actor stub produces its distribution through rsl_rl's own
`HeteroscedasticGaussianDistribution`, so log-probs, entropies and KL come from rsl_rl / torch code.
The same tables go through strl_jax's functions, and returns, advantages, losses and the adaptive
learning-rate sequence are compared.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
rsl_rl = pytest.importorskip("rsl_rl")

from rsl_rl.algorithms import PPO  # noqa: E402
from rsl_rl.modules import (  # noqa: E402
    EmpiricalNormalization,
    GaussianDistribution,
    HeteroscedasticGaussianDistribution,
)
from rsl_rl.storage import RolloutStorage  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torch import nn  # noqa: E402

from strl_jax.agents.ppo import adaptive_learning_rate, surrogate_loss, value_loss  # noqa: E402
from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages  # noqa: E402
from strl_jax.networks.gaussian import gaussian_entropy, gaussian_kl, gaussian_log_prob  # noqa: E402
from strl_jax.networks.normalizer import init_normalizer, normalize, update_normalizer  # noqa: E402

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


class _TableActor(nn.Module):
    """Actor whose Gaussian (mean, std) and sampled action are looked up by observation index."""

    is_recurrent = False

    def __init__(self, action_dim: int):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(()))  # gives the loss a gradient path; its gradient is 0
        self.distribution = HeteroscedasticGaussianDistribution(action_dim)
        self.mean = self.std = self.actions = None

    def set_tables(self, mean, std, actions=None):
        self.mean, self.std = t(mean), t(std)
        self.actions = None if actions is None else t(actions)

    def forward(self, obs, masks=None, hidden_state=None, stochastic_output=False):
        idx = obs["idx"].long().squeeze(-1)
        mean = self.mean[idx] + 0.0 * self.dummy
        self.distribution.update(torch.stack([mean, self.std[idx]], dim=-2))
        if stochastic_output and self.actions is not None:
            return self.actions[idx]
        return mean

    @property
    def output_entropy(self):
        return self.distribution.entropy

    @property
    def output_distribution_params(self):
        return self.distribution.params

    def get_output_log_prob(self, outputs):
        return self.distribution.log_prob(outputs)

    def get_kl_divergence(self, old_params, new_params):
        return self.distribution.kl_divergence(old_params, new_params)

    def get_hidden_state(self):
        return None

    def reset(self, dones=None, hidden_state=None):
        pass

    def update_normalization(self, obs):
        pass


class _TableCritic(_TableActor):
    """Critic whose value is looked up by observation index."""

    def __init__(self):
        nn.Module.__init__(self)
        self.dummy = nn.Parameter(torch.zeros(()))
        self.values = None

    def set_tables(self, values):
        self.values = t(values)

    def forward(self, obs, masks=None, hidden_state=None, stochastic_output=False):
        return self.values[obs["idx"].long().squeeze(-1)][:, None] + 0.0 * self.dummy


# ----------------------------------------------------------------------------- shared scenario

STEPS, ENVS, ACT = 6, 4, 3


def _scenario(seed: int, policy_shift: float, value_shift: float):
    """Rollout tables (float32) and the 'new' policy/critic seen during the update."""
    rng = np.random.default_rng(seed)
    n = STEPS * ENVS
    dones = rng.random((STEPS, ENVS)) < 0.25
    return dict(
        rewards=f32(rng.normal(size=(STEPS, ENVS))),
        dones=dones,
        time_outs=dones & (rng.random((STEPS, ENVS)) < 0.5),
        values=f32(rng.normal(size=(STEPS, ENVS)) * 2.0),
        last_values=f32(rng.normal(size=ENVS) * 2.0),
        mean=f32(rng.normal(size=(n, ACT))),
        std=f32(np.exp(rng.uniform(-1.0, 0.5, size=(n, ACT)))),
        actions=f32(rng.normal(size=(n, ACT)) * 1.5),
        new_mean_delta=f32(policy_shift * rng.normal(size=(n, ACT))),
        new_log_std_delta=policy_shift * rng.normal(size=(n, ACT)),
        new_values_delta=f32(value_shift * rng.normal(size=n)),
    )


def _new_policy(sc):
    return f32(sc["mean"] + sc["new_mean_delta"]), f32(sc["std"] * np.exp(sc["new_log_std_delta"]))


def _run_rsl_rl(sc, cfg, seed):
    """Drive rsl_rl's real PPO through one rollout and one update; return what it computed."""
    actor, critic = _TableActor(ACT), _TableCritic()
    actor.set_tables(sc["mean"], sc["std"], sc["actions"])
    values_table = np.concatenate([sc["values"].reshape(-1), sc["last_values"]])
    critic.set_tables(values_table)
    storage = RolloutStorage("rl", ENVS, STEPS, _obs(np.arange(ENVS)), [ACT], "cpu")
    alg = PPO(
        actor,
        critic,
        storage,
        num_learning_epochs=cfg["epochs"],
        num_mini_batches=cfg["mini_batches"],
        clip_param=cfg["clip"],
        gamma=cfg["gamma"],
        lam=cfg["lam"],
        value_loss_coef=1.0,
        entropy_coef=0.01,
        learning_rate=cfg["lr"],
        max_grad_norm=1.0,
        optimizer="sgd",
        use_clipped_value_loss=cfg["clipped"],
        schedule="adaptive",
        desired_kl=cfg["desired_kl"],
        normalize_advantage_per_mini_batch=cfg["per_mb"],
    )
    alg.train_mode()
    for step in range(STEPS):
        obs = _obs(step * ENVS + np.arange(ENVS))
        alg.act(obs)
        extras = {"time_outs": t(sc["time_outs"][step])}
        alg.process_env_step(obs, t(sc["rewards"][step]), t(sc["dones"][step]), extras)
    alg.compute_returns(_obs(STEPS * ENVS + np.arange(ENVS)))
    out = dict(
        rewards=storage.rewards[..., 0].numpy().copy(),
        returns=storage.returns[..., 0].numpy().copy(),
        advantages=storage.advantages[..., 0].numpy().copy(),
        old_log_prob=storage.actions_log_prob[..., 0].numpy().copy(),
    )
    # the update sees a moved policy and critic
    new_mean, new_std = _new_policy(sc)
    actor.set_tables(new_mean, new_std)
    critic.set_tables(f32(sc["values"].reshape(-1) + sc["new_values_delta"]))
    lrs = []
    step_fn = alg.optimizer.step

    def recording_step(*args, **kwargs):
        lrs.append(alg.optimizer.param_groups[0]["lr"])
        return step_fn(*args, **kwargs)

    alg.optimizer.step = recording_step
    torch.manual_seed(seed)
    out["losses"] = alg.update()
    torch.manual_seed(seed)  # mini_batch_generator draws one randperm, shared by all epochs
    out["perm"] = torch.randperm(STEPS * ENVS).numpy()
    out["lrs"] = lrs
    out["final_lr"] = alg.learning_rate
    return out


def _run_strl_jax(sc, cfg, perm):
    """The same computation with strl_jax's functions, minibatches in rsl_rl's order."""
    rewards = bootstrap_timeouts(sc["rewards"], sc["time_outs"], sc["values"], cfg["gamma"])
    adv, ret = compute_gae(rewards, sc["values"], sc["dones"], sc["last_values"], cfg["gamma"], cfg["lam"])
    stored_adv = adv if cfg["per_mb"] else normalize_advantages(adv)
    old_log_prob = gaussian_log_prob(sc["actions"], sc["mean"], sc["std"])
    new_mean, new_std = _new_policy(sc)
    flat = dict(
        adv=stored_adv.reshape(-1),
        ret=ret.reshape(-1),
        old_values=sc["values"].reshape(-1),
        new_values=f32(sc["values"].reshape(-1) + sc["new_values_delta"]),
        old_log_prob=old_log_prob,
        actions=sc["actions"],
        old_mean=sc["mean"],
        old_std=sc["std"],
        new_mean=new_mean,
        new_std=new_std,
    )
    mb_size = STEPS * ENVS // cfg["mini_batches"]
    lr = jnp.float32(cfg["lr"])
    lrs, surr, vals, ents = [], [], [], []
    for _ in range(cfg["epochs"]):
        for i in range(cfg["mini_batches"]):
            idx = perm[i * mb_size : (i + 1) * mb_size]
            b = {k: jnp.asarray(v)[idx] for k, v in flat.items()}
            a = normalize_advantages(b["adv"]) if cfg["per_mb"] else b["adv"]
            kl = gaussian_kl(b["old_mean"], b["old_std"], b["new_mean"], b["new_std"], eps=0.0)
            lr = adaptive_learning_rate(lr, jnp.mean(kl), cfg["desired_kl"])
            lrs.append(float(lr))
            log_prob = gaussian_log_prob(b["actions"], b["new_mean"], b["new_std"])
            surr.append(float(surrogate_loss(log_prob, b["old_log_prob"], a, cfg["clip"])))
            vals.append(
                float(value_loss(b["new_values"], b["old_values"], b["ret"], cfg["clip"], cfg["clipped"]))
            )
            ents.append(float(jnp.mean(gaussian_entropy(b["new_std"]))))
    return dict(
        rewards=rewards,
        returns=ret,
        advantages=stored_adv,
        old_log_prob=old_log_prob.reshape(STEPS, ENVS),
        losses={"surrogate": np.mean(surr), "value": np.mean(vals), "entropy": np.mean(ents)},
        lrs=lrs,
    )


BASE = dict(epochs=2, mini_batches=4, clip=0.2, gamma=0.99, lam=0.95, lr=1e-3, clipped=True, per_mb=False)
CASES = {
    # name: (config overrides, policy shift, value shift)
    "shrink": (dict(desired_kl=1e-4), 0.3, 0.5),
    "shrink_to_floor": (dict(desired_kl=1e-4, lr=2e-5), 0.3, 0.5),
    "grow": (dict(desired_kl=10.0), 0.05, 0.1),
    "grow_to_cap": (dict(desired_kl=10.0, lr=8e-3), 0.05, 0.1),
    "mixed_band": (dict(desired_kl=0.02, mini_batches=6, epochs=1), 0.1, 0.3),
    "per_minibatch_adv_plain_value": (dict(desired_kl=0.01, per_mb=True, clipped=False), 0.2, 0.3),
    "one_minibatch_gamma_lam": (
        dict(desired_kl=0.01, mini_batches=1, epochs=1, gamma=0.9, lam=0.7),
        0.2,
        1.0,
    ),
    "wide_clip": (dict(desired_kl=0.01, clip=0.05, mini_batches=2), 0.5, 1.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_ppo_pipeline_matches_rsl_rl(name):
    """rsl_rl's real PPO rollout/compute_returns/update and strl_jax agree on time-out bootstrapped
    rewards, returns, (normalised) advantages, stored log-probs, mean surrogate/value/entropy and
    every adaptive-lr step."""
    overrides, policy_shift, value_shift = CASES[name]
    cfg = {**BASE, **overrides}
    seed = sorted(CASES).index(name)
    sc = _scenario(seed, policy_shift, value_shift)
    ref = _run_rsl_rl(sc, cfg, seed)
    ours = _run_strl_jax(sc, cfg, ref["perm"])
    for key in ("rewards", "returns", "advantages", "old_log_prob"):
        close(ours[key], ref[key], err_msg=key)
    for key in ("surrogate", "value", "entropy"):
        assert ours["losses"][key] == pytest.approx(ref["losses"][key], rel=1e-5, abs=1e-5), key
    assert len(ref["lrs"]) == cfg["epochs"] * cfg["mini_batches"]
    close(ours["lrs"], ref["lrs"], err_msg="lr sequence", rtol=1e-5, atol=0.0)
    assert ours["lrs"][-1] == pytest.approx(ref["final_lr"], rel=1e-5)


def test_pipeline_cases_cover_every_lr_branch():
    """The scenarios above exercise shrink, floor, grow, cap and unchanged (no vacuous cases)."""
    seen = set()
    for name, (overrides, policy_shift, value_shift) in CASES.items():
        cfg = {**BASE, **overrides}
        sc = _scenario(sorted(CASES).index(name), policy_shift, value_shift)
        ref = _run_rsl_rl(sc, cfg, sorted(CASES).index(name))
        prev = [cfg["lr"]] + ref["lrs"][:-1]
        for before, after in zip(prev, ref["lrs"], strict=True):
            if after == before:
                seen.add("floor" if after == 1e-5 else "cap" if after == 1e-2 else "same")
            elif after < before:
                seen.add("floor" if after == 1e-5 else "shrink")
            else:
                seen.add("cap" if after == 1e-2 else "grow")
    assert {"shrink", "floor", "grow", "cap", "same"} <= seen, seen


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
