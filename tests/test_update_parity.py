"""The learner's own update against rsl_rl 5.x's `PPO.update()` and `Distillation.update()` (the
installed rsl-rl-lib), on identical weights and an identical rollout, to 1e-5.

One rsl_rl train_cfg configures both sides: rsl_rl builds its algorithm from it
(`construct_algorithm`), strl_jax reads it as `--config` does (`resolve_config`, which sets
rsl_rl's update: `algorithm.kl_epsilon=0`, `algorithm.clip_grad_per_network=true`). rsl_rl's
models get strl_jax's initial weights (`rsl_rl_state_dicts`) and act for a few steps on random
observations, rewards, dones and time-outs. strl_jax evaluates the same steps with its own model
(log-probabilities, means, stds and values must equal those rsl_rl stored) and its learner's
`ppo_update` / `cloning_update` runs on them, with rsl_rl's minibatch order injected: one
permutation for every epoch (feed-forward), the environments in order (recurrent). Compared:
returns and advantages, every parameter after the update, the mean losses, and the KL and
learning rate of every optimiser step.
"""

from __future__ import annotations

import copy
import functools
from contextlib import nullcontext
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from rsl_rl.algorithms import PPO, Distillation
from tensordict import TensorDict

from strl_jax.agents.parts import InitContext
from strl_jax.buffers.gae import bootstrap_timeouts
from strl_jax.buffers.transitions import Transition
from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, save_checkpoint
from strl_jax.checkpoints.torch_checkpoints import rsl_rl_state_dicts
from strl_jax.configs import ConfigError, config_to_dict, resolve_config
from strl_jax.configs.rsl_rl_config import RSL_RL_UPDATE
from strl_jax.envs import make_env_from_config
from strl_jax.networks.normalizer import init_normalizer
from strl_jax.train_loops.learner import POLICY
from strl_jax.train_loops.learner_builder import make_learner
from strl_jax.train_loops.ppo_update import make_batch, ppo_update
from strl_jax.train_loops.state import TrainState
from strl_jax.train_loops.update_rules import cloning_update

TOL = dict(rtol=1e-5, atol=1e-5)
APPROX = dict(rel=1e-5, abs=1e-5)
TASK = "hopper"  # 11 observations, 3 actions: only its shapes are used
ACTOR_OBS = 8  # the actor sees the first 8 observations, the critic all 11
STEPS, ENVS = 6, 8
STRL_OVERRIDES = [f"env.num_envs={ENVS}", f"env.obs_groups={{policy: {list(range(ACTOR_OBS))}}}"]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """rsl_rl's tiny networks on one thread: torch's thread pool beside XLA's stalls on a busy
    CPU (a two-layer GRU update took 9 s instead of 0.2 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def model_block(kind: str, distribution: bool, normalize: bool = False) -> dict:
    """An rsl_rl 5.x `MLPModel` (`mlp`) or `RNNModel` (`lstm`, `gru`) block."""
    block = {
        "class_name": "MLPModel" if kind == "mlp" else "RNNModel",
        "hidden_dims": [16, 12],
        "activation": "elu",
        "obs_normalization": normalize,
    }
    if kind != "mlp":
        block |= {"rnn_type": kind, "rnn_hidden_dim": 8, "rnn_num_layers": 2 if kind == "gru" else 1}
    if distribution:
        block["distribution_cfg"] = {
            "class_name": "GaussianDistribution",
            "init_std": 0.8,
            "std_type": "scalar",
        }
    return block


def ppo_train_cfg(kind: str, **algorithm) -> dict:
    """rsl_rl's PPO train_cfg: clipping that binds on both networks, a schedule that moves."""
    alg = {
        "class_name": "PPO",
        "num_learning_epochs": 3,
        "num_mini_batches": 4,
        "clip_param": 0.2,
        "gamma": 0.97,
        "lam": 0.9,
        "value_loss_coef": 0.7,
        "entropy_coef": 0.01,
        "learning_rate": 3e-3,
        "max_grad_norm": 0.2,
        "optimizer": "adam",
        "use_clipped_value_loss": True,
        "schedule": "adaptive",
        "desired_kl": 0.002,
        "normalize_advantage_per_mini_batch": False,
    }
    return {
        "num_steps_per_env": STEPS,
        "max_iterations": 1,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "actor": model_block(kind, True, normalize=kind == "mlp"),
        "critic": model_block(kind, False, normalize=kind == "mlp"),
        "algorithm": alg | algorithm,
    }


def strl_config(tmp_path, train_cfg: dict, *overrides: str):
    """strl_jax's config from the rsl_rl train_cfg, read as `--config` reads it."""
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(train_cfg))
    return resolve_config(TASK, [str(path)], [*STRL_OVERRIDES, *overrides])


def fresh_state(learner, seed: int) -> TrainState:
    """The learner's initial parameters, optimiser and normalisers (no env reset compiled)."""
    shapes = learner.env.observation_shapes()
    key = jax.random.PRNGKey(seed)
    params = learner.model.init(key, shapes)
    ctx = InitContext(num_envs=ENVS, env_ids=learner.env_ids(), obs_shapes=shapes, action_size=3)
    parts = {p.name: p.init(key, ctx)[0] for p in learner.parts}  # Distillation's labelling teacher
    return TrainState(
        params=params,
        opt_state=learner.init_optimizer(params, parts),
        normalizers={k: init_normalizer(s) for k, s in learner.policy_groups(shapes).items()},
        learning_rate=learner.initial_learning_rate(),
        key=key,
        iteration=jnp.zeros((), jnp.int32),
        parts=parts,
    )


def t(x) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def observations(x: np.ndarray) -> TensorDict:
    """An rsl_rl observation: `policy` (the actor's columns) and `critic` (all)."""
    return TensorDict({"policy": t(x[..., :ACTOR_OBS]), "critic": t(x)}, batch_size=list(x.shape[:-1]))


def strl_obs(x: np.ndarray) -> dict:
    return {"policy": jnp.asarray(x[..., :ACTOR_OBS]), "critic": jnp.asarray(x)}


def scenario(seed: int) -> dict:
    """Random observations (one more than the steps), rewards, dones and time-outs."""
    rng = np.random.default_rng(seed)
    dones = rng.random((STEPS, ENVS)) < 0.2
    return dict(
        obs=rng.normal(size=(STEPS + 1, ENVS, 11)).astype(np.float32),
        rewards=rng.normal(size=(STEPS, ENVS)).astype(np.float32),
        dones=dones,
        time_outs=dones & (rng.random((STEPS, ENVS)) < 0.5),
    )


def load_weights(models: list, dicts: tuple) -> None:
    for model, state in zip(models, dicts, strict=True):
        model.load_state_dict(state, strict=True)


def recorded(alg, model) -> dict:
    """Hooks on rsl_rl's update: the rate of every optimiser step and every minibatch's KL."""
    out = {"lr": [], "kl": []}
    step = alg.optimizer.step

    def recording_step(*args, **kwargs):
        out["lr"].append(alg.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    alg.optimizer.step = recording_step
    kl = model.get_kl_divergence
    model.get_kl_divergence = lambda old, new: out["kl"].append(kl(old, new).mean().item()) or kl(old, new)
    return out


# ----------------------------------------------------------------------------- PPO
def rsl_rl_ppo(train_cfg: dict, params, normalizers, sc: dict, seed: int) -> dict:
    """rsl_rl's own PPO from `train_cfg`: a rollout of `sc`, `compute_returns`, `update()`."""
    env = SimpleNamespace(num_envs=ENVS, num_actions=3)
    cfg = copy.deepcopy(train_cfg) | {"multi_gpu": None}
    alg = PPO.construct_algorithm(observations(sc["obs"][0]), env, cfg, "cpu")
    load_weights([alg.actor, alg.critic], rsl_rl_state_dicts(params, normalizers, train_cfg))
    alg.train_mode()
    torch.manual_seed(seed)
    with torch.inference_mode():
        for step in range(STEPS):
            alg.act(observations(sc["obs"][step]))
            extras = {"time_outs": t(sc["time_outs"][step])}
            alg.process_env_step(
                observations(sc["obs"][step + 1]), t(sc["rewards"][step]), t(sc["dones"][step]), extras
            )
        alg.compute_returns(observations(sc["obs"][STEPS]))
    st = alg.storage
    out = dict(
        actions=st.actions.numpy().copy(),
        log_prob=st.actions_log_prob[..., 0].numpy().copy(),
        mean=st.distribution_params[0].numpy().copy(),
        std=st.distribution_params[1].numpy().copy(),
        values=st.values[..., 0].numpy().copy(),
        returns=st.returns[..., 0].numpy().copy(),
        advantages=st.advantages[..., 0].numpy().copy(),
    )
    steps = recorded(alg, alg.actor)
    torch.manual_seed(seed + 1)
    out["losses"] = alg.update()
    torch.manual_seed(seed + 1)  # the feed-forward generator's one permutation, shared by all epochs
    perm = torch.randperm(STEPS * ENVS).numpy()
    out |= steps | {"perm": perm, "final_lr": alg.learning_rate}
    out["actor"] = {k: v.numpy().copy() for k, v in alg.actor.state_dict().items()}
    out["critic"] = {k: v.numpy().copy() for k, v in alg.critic.state_dict().items()}
    return out


def rsl_rl_orders(learner, perm: np.ndarray) -> np.ndarray:
    """rsl_rl's minibatch columns, `[epochs, minibatches, size]`."""
    alg = learner.cfg.algorithm
    columns = np.arange(ENVS) if learner.model.recurrent else perm
    per_epoch = columns.reshape(alg.num_mini_batches, -1)
    return np.broadcast_to(per_epoch, (alg.num_learning_epochs, *per_epoch.shape)).copy()


def evaluate_rollout(learner, ts: TrainState, sc: dict, actions: np.ndarray):
    """strl_jax's model on the rollout's steps, as the learner's rollout evaluates them:
    `(transitions, last values)` with rsl_rl's actions and time-out bootstrap (gamma V(s_t))."""

    @jax.jit
    def act(ts, obs, hidden, actions):
        mean, std, hidden, _ = learner.actor.forward(ts.params, ts.normalizers, obs, hidden, {})
        critic_obs = learner.normalization.groups(ts.normalizers, learner.policy_groups(obs))
        values, hidden = learner.model.value_and_hidden(ts.params, critic_obs, hidden)
        return mean, std, values, learner.model.action_dist.log_prob(actions, mean, std), hidden

    hidden0 = hidden = learner.model.initial_hidden(ENVS)
    columns = []
    for step in range(STEPS):
        mean, std, values, log_prob, hidden = act(ts, strl_obs(sc["obs"][step]), hidden, actions[step])
        hidden = learner.actor.reset_hidden(hidden, jnp.asarray(sc["dones"][step]))
        columns.append((mean, std, values, log_prob))
    mean, std, values, log_prob = (jnp.stack(c) for c in zip(*columns, strict=True))
    gamma = learner.cfg.algorithm.gamma
    rewards = bootstrap_timeouts(jnp.asarray(sc["rewards"]), jnp.asarray(sc["time_outs"]), values, gamma)
    transitions = Transition(
        obs=strl_obs(sc["obs"][:STEPS]),
        actions=jnp.asarray(actions),
        log_prob=log_prob,
        mean=mean,
        std=std,
        values=values,
        rewards=rewards,
        dones=jnp.asarray(sc["dones"], jnp.float32),
        initial_hidden=hidden0,
    )
    last_values = learner.critic_value(ts.params, ts.normalizers, strl_obs(sc["obs"][STEPS]), hidden)
    return transitions, last_values


def strl_ppo(learner, ts: TrainState, sc: dict, ref: dict) -> dict:
    """The learner's update on rsl_rl's rollout, in rsl_rl's minibatch order."""
    transitions, last_values = evaluate_rollout(learner, ts, sc, ref["actions"])
    batch, _ = jax.jit(functools.partial(make_batch, learner))(ts, transitions, last_values)
    update = jax.jit(functools.partial(ppo_update, learner))
    (trainable, _, lr, metrics, _, _), _ = update(
        ts,
        {},
        transitions,
        last_values,
        jax.random.PRNGKey(0),
        None,
        None,
        rsl_rl_orders(learner, ref["perm"]),
    )
    normalizers = learner.absorb(ts.normalizers, transitions.obs) if learner.normalization.enabled else {}
    return dict(
        transitions=transitions,
        batch=batch,
        params=trainable[POLICY],
        normalizers=normalizers,
        lr=float(lr),
        metrics=jax.tree.map(np.asarray, metrics),
    )


def run_both(tmp_path, kind: str, seed: int, algorithm: dict | None = None, overrides=()) -> tuple:
    train_cfg = ppo_train_cfg(kind, **(algorithm or {}))
    cfg = strl_config(tmp_path, train_cfg, *overrides)
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts = fresh_state(learner, seed)
    sc = scenario(seed)
    ref = rsl_rl_ppo(train_cfg, ts.params, ts.normalizers, sc, seed)
    return learner, train_cfg, ref, strl_ppo(learner, ts, sc, ref)


def flat(metrics: dict, key: str) -> np.ndarray:
    return np.asarray(metrics[key]).reshape(-1)  # [epochs, minibatches] in step order


def assert_same_update(learner, train_cfg: dict, ref: dict, ours: dict) -> None:
    tr, batch, recurrent = ours["transitions"], ours["batch"], learner.model.recurrent
    # the rollout: what rsl_rl stored is what strl_jax's model computes
    for key, ours_key in (("log_prob", "log_prob"), ("mean", "mean"), ("std", "std"), ("values", "values")):
        np.testing.assert_allclose(getattr(tr, ours_key), ref[key], err_msg=key, **TOL)
    shape = (STEPS, ENVS) if recurrent else (1, STEPS * ENVS)
    np.testing.assert_allclose(batch.returns, ref["returns"].reshape(shape), err_msg="returns", **TOL)
    np.testing.assert_allclose(
        batch.advantages, ref["advantages"].reshape(shape), err_msg="advantages", **TOL
    )
    # every optimiser step: its KL and learning rate
    assert len(ref["lr"]) == learner.update_rule.optimizer_steps(learner.cfg)
    if learner.cfg.algorithm.schedule == "adaptive":  # rsl_rl computes the KL for the schedule only
        assert len(ref["kl"]) == len(ref["lr"])
        # float32 rounding leaves ~1e-7 in a KL of nearly equal Gaussians (on either side)
        np.testing.assert_allclose(flat(ours["metrics"], "kl"), ref["kl"], rtol=1e-4, atol=1e-6, err_msg="kl")
    np.testing.assert_allclose(flat(ours["metrics"], "learning_rate"), ref["lr"], rtol=1e-6, err_msg="lr")
    assert ours["lr"] == pytest.approx(ref["final_lr"], rel=1e-6)
    for theirs, name in (("surrogate", "surrogate"), ("value", "value_function"), ("entropy", "entropy")):
        assert float(np.mean(ours["metrics"][name])) == pytest.approx(ref["losses"][theirs], **APPROX), name
    # the parameters after the update, tensor by tensor in rsl_rl's names
    actor, critic = rsl_rl_state_dicts(ours["params"], ours["normalizers"], train_cfg)
    for net, state in (("actor", actor), ("critic", critic)):
        assert set(state) == set(ref[net]), net
        for name, value in state.items():
            np.testing.assert_allclose(value.numpy(), ref[net][name], err_msg=f"{net}.{name}", **TOL)


@pytest.mark.parametrize("kind", ["mlp", "lstm", "gru"])
def test_ppo_update_matches_rsl_rl(tmp_path, kind):
    """An rsl_rl config's run updates as rsl_rl does: Adam, the adaptive schedule, the actor's and
    the critic's gradients clipped apart, 3 epochs x 4 minibatches; MLP with observation
    normalisation (its statistics after the update too), LSTM, two-layer GRU."""
    learner, train_cfg, ref, ours = run_both(tmp_path, kind, seed={"mlp": 0, "lstm": 1, "gru": 2}[kind])
    assert {k: getattr(learner.cfg.algorithm, k) for k in RSL_RL_UPDATE} == RSL_RL_UPDATE
    assert learner.model.recurrent == (kind != "mlp")
    assert_same_update(learner, train_cfg, ref, ours)
    rates = ref["lr"]
    assert min(rates) < rates[0] < max(rates), "the schedule should both shrink and grow the rate"


def test_sgd_per_minibatch_advantages_plain_value_loss_match_rsl_rl(tmp_path):
    """SGD, where clipping shows directly in the step; advantages normalised per minibatch, the
    unclipped value loss, the fixed schedule."""
    algorithm = dict(
        optimizer="sgd",
        learning_rate=0.05,
        schedule="fixed",
        normalize_advantage_per_mini_batch=True,
        use_clipped_value_loss=False,
        num_learning_epochs=2,
        num_mini_batches=3,
    )
    learner, train_cfg, ref, ours = run_both(tmp_path, "mlp", seed=3, algorithm=algorithm)
    assert learner.cfg.algorithm.optimizer == "sgd" and learner.cfg.algorithm.schedule == "fixed"
    assert_same_update(learner, train_cfg, ref, ours)


@pytest.mark.parametrize(
    "bound,algorithm",
    [
        ("cap", dict(learning_rate=8e-3, desired_kl=10.0)),
        ("floor", dict(learning_rate=2e-5, desired_kl=1e-9)),
    ],
)
def test_schedule_bounds_match_rsl_rl(tmp_path, bound, algorithm):
    """The adaptive rate meets rsl_rl's cap (1e-2) and floor (1e-5) where rsl_rl's does."""
    learner, train_cfg, ref, ours = run_both(tmp_path, "mlp", seed=4, algorithm=algorithm)
    assert_same_update(learner, train_cfg, ref, ours)
    assert ref["final_lr"] == pytest.approx(1e-2 if bound == "cap" else 1e-5)
    assert ref["lr"].count(ref["final_lr"]) > 1  # it stayed at the bound


def test_st_rl_update_is_not_rsl_rl_update(tmp_path):
    """Without the rsl_rl mode (st_rl's KL with 1e-5 in its log, one global clip) the same run
    updates differently: the first step grows the rate on a KL of ~1e-5 where rsl_rl's is 0,
    and the parameters move elsewhere. So the parity above depends on both options."""
    st_rl = ("algorithm.kl_epsilon=1e-5", "algorithm.clip_grad_per_network=false")
    learner, _, ref, ours = run_both(tmp_path, "mlp", seed=0, overrides=st_rl)
    assert ref["lr"][0] == pytest.approx(3e-3) and ref["kl"][0] == 0.0
    assert flat(ours["metrics"], "learning_rate")[0] == pytest.approx(4.5e-3)
    train_cfg = ppo_train_cfg("mlp")
    actor, _ = rsl_rl_state_dicts(ours["params"], ours["normalizers"], train_cfg)
    moved = max(np.max(np.abs(v.numpy() - ref["actor"][k])) for k, v in actor.items())
    assert moved > 1e-3


def test_per_network_clipping_alone_matters(tmp_path):
    """With the exact KL but one global clip, SGD steps (which keep the clip's scale) differ from
    rsl_rl's: both networks' gradients exceed max_grad_norm, and their joint norm scales both."""
    algorithm = dict(optimizer="sgd", learning_rate=0.05, schedule="fixed")
    learner, train_cfg, ref, ours = run_both(
        tmp_path, "mlp", seed=3, algorithm=algorithm, overrides=("algorithm.clip_grad_per_network=false",)
    )
    actor, critic = rsl_rl_state_dicts(ours["params"], ours["normalizers"], train_cfg)
    moved = max(np.max(np.abs(v.numpy() - ref["critic"][k])) for k, v in critic.items())
    assert moved > 1e-3


# ----------------------------------------------------------------------------- Distillation
SMALL_CRITIC = ("policy.critic_hidden_dims=[8]",)  # the student's critic: the update does not use it


# student: (gradient length, loss); 2 epochs x 6 steps = 12 steps per update, so the LSTM's last
# 2 steps and the GRU's last 5 are evaluated but never backpropagated (rsl_rl warns about it)
DISTILLATION = {"mlp": (4, "mse"), "lstm": (5, "mse"), "gru": (7, "huber")}


def distillation_train_cfg(kind: str) -> dict:
    gradient_length, loss_type = DISTILLATION[kind]
    return {
        "class_name": "DistillationRunner",
        "num_steps_per_env": STEPS,
        "max_iterations": 1,
        "obs_groups": {"student": ["policy"], "teacher": ["critic"]},
        "student": model_block(kind, True),
        "teacher": model_block("mlp", True),
        "algorithm": {
            "class_name": "Distillation",
            "num_learning_epochs": 2,
            "gradient_length": gradient_length,  # windows cross the epoch boundary
            "learning_rate": 3e-3,
            "max_grad_norm": 0.5,
            "loss_type": loss_type,
            "optimizer": "adam",
        },
    }


def write_teacher(path) -> str:
    """A strl_jax teacher run (untrained) acting on the critic group, for `make_learner`: the
    update reads its labels from the rollout, here rsl_rl's."""
    teacher_cfg = resolve_config(
        TASK, overrides=[f"env.num_envs={ENVS}", "policy.actor_hidden_dims=[8]", *SMALL_CRITIC]
    )
    shapes = {"policy": (11,), "critic": (11,)}
    params = make_learner(make_env_from_config(teacher_cfg.env), teacher_cfg).model.init(
        jax.random.PRNGKey(5), shapes
    )
    normalizers = {k: init_normalizer(s) for k, s in shapes.items()}
    manager = open_manager(path / CHECKPOINT_DIR)
    meta = {"window": {}, "wall_time": 0.0, "config": config_to_dict(teacher_cfg)}
    save_checkpoint(manager, 1, {"train_state": {"params": params, "normalizers": normalizers}}, meta)
    manager.wait_until_finished()
    manager.close()
    return str(path)


def rsl_rl_distillation(train_cfg: dict, params, sc: dict, seed: int) -> dict:
    env = SimpleNamespace(num_envs=ENVS, num_actions=3)
    cfg = copy.deepcopy(train_cfg) | {"multi_gpu": None}
    alg = Distillation.construct_algorithm(observations(sc["obs"][0]), env, cfg, "cpu")
    student_cfg = {"actor": train_cfg["student"], "critic": {"obs_normalization": False}}
    actor, _ = rsl_rl_state_dicts(params, {}, student_cfg)
    alg.student.load_state_dict(actor, strict=True)
    alg.train_mode()
    torch.manual_seed(seed)
    with torch.inference_mode():
        for step in range(STEPS):
            alg.act(observations(sc["obs"][step]))
            alg.process_env_step(
                observations(sc["obs"][step + 1]), t(sc["rewards"][step]), t(sc["dones"][step]), {}
            )
    labels = alg.storage.privileged_actions.numpy().copy()
    losses = alg.update()
    student = {k: v.numpy().copy() for k, v in alg.student.state_dict().items()}
    return {"labels": labels, "losses": losses, "student": student}


@pytest.mark.parametrize("kind", ["mlp", "lstm", "gru"])
def test_distillation_update_matches_rsl_rl(tmp_path, kind):
    """rsl_rl's Distillation (behaviour cloning with truncated backpropagation through time, Adam,
    clipping) and the learner's `cloning_update` leave the same student and the same mean loss,
    with windows that cross epochs and steps left over at the end."""
    train_cfg = distillation_train_cfg(kind)
    teacher = write_teacher(tmp_path / "teacher")
    cfg = strl_config(tmp_path, train_cfg, f"algorithm.teacher_policy.checkpoint={teacher}", *SMALL_CRITIC)
    assert cfg.algorithm.class_name == "Distillation" and cfg.algorithm.teacher_policy.obs_group == "critic"
    with pytest.warns(UserWarning, match="never backpropagated") if kind != "mlp" else nullcontext():
        learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts = fresh_state(learner, seed=7)
    sc = scenario(seed=7)
    ref = rsl_rl_distillation(train_cfg, ts.params, sc, seed=7)
    transitions = Transition(
        obs=strl_obs(sc["obs"][:STEPS]),
        actions=jnp.zeros((STEPS, ENVS, 3)),
        log_prob=jnp.zeros((STEPS, ENVS)),
        mean=jnp.zeros((STEPS, ENVS, 3)),
        std=jnp.ones((STEPS, ENVS, 3)),
        values=jnp.zeros((STEPS, ENVS)),
        rewards=jnp.asarray(sc["rewards"]),
        dones=jnp.asarray(sc["dones"], jnp.float32),
        initial_hidden=learner.model.initial_hidden(ENVS),
        parts={"teacher": {"action_labels": jnp.asarray(ref["labels"])}},
    )
    trainable, _, _, metrics, _, _ = jax.jit(functools.partial(cloning_update, learner))(ts, transitions)
    assert float(metrics["distillation"]) == pytest.approx(ref["losses"]["behavior"], **APPROX)
    student_cfg = {"actor": train_cfg["student"], "critic": {"obs_normalization": False}}
    actor, _ = rsl_rl_state_dicts(trainable[POLICY], {}, student_cfg)
    assert set(actor) == set(ref["student"])
    for name, value in actor.items():
        np.testing.assert_allclose(value.numpy(), ref["student"][name], err_msg=name, **TOL)
    before, _ = rsl_rl_state_dicts(ts.params, {}, student_cfg)
    assert max(np.max(np.abs(v.numpy() - ref["student"][k])) for k, v in before.items()) > 1e-3  # it moved


def test_kl_epsilon_must_not_be_negative():
    with pytest.raises(
        ConfigError, match=r"algorithm.kl_epsilon must be at least 0 \(0: the exact KL\), got -1"
    ):
        resolve_config("inverted_pendulum", overrides=["algorithm.kl_epsilon=-1"])
