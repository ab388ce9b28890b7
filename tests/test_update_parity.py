"""strl_jax's learner against rsl_rl 5.x's own runner (the installed rsl-rl-lib), end to end on
one scripted environment, to 1e-5.

One rsl_rl train_cfg configures both sides: rsl_rl's `OnPolicyRunner` / `DistillationRunner` builds
its algorithm from it, strl_jax reads it as `--config` does (`resolve_config`, the rsl_rl config
translation), and the translated fields are checked against the dict's values. Both step the same
`scripted_env.Script` (observations, rewards, terminations and time-outs fixed in advance, actions
ignored): strl_jax's compiled `Learner.iteration` (`init`, then the rollout with its time-out
bootstrap and, for Distillation, the teacher's labels, GAE, the update) and rsl_rl's
`OnPolicyRunner.learn` (`act`, `process_env_step`, `compute_returns`, `update`). rsl_rl's networks
start from strl_jax's initial weights (`rsl_rl_state_dicts`); Distillation's teacher is one strl_jax
run, loaded by strl_jax as `algorithm.teacher_policy` and by rsl_rl's `DistillationRunner.load`
from that run's `export --format rsl_rl`.

Only the random draws cross over: rsl_rl's `act` samples with strl_jax's action noise, and
strl_jax's update takes rsl_rl's minibatch order through `ppo_update`'s `orders` (one permutation
for every epoch, feed-forward; the environments in order, recurrent). Compared, every iteration:
the stored rollout (observations, actions, log-probabilities, means, stds, values, rewards after
the time-out bootstrap, dones; Distillation's teacher labels), returns and advantages, the KL and
learning rate of every optimiser step, the mean losses, and every parameter and normaliser after
the update.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from rsl_rl.runners import DistillationRunner, OnPolicyRunner
from scripted_env import Script, ScriptedRslRlEnv, random_script, scripted_vec_env
from tensordict import TensorDict

from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, save_checkpoint
from strl_jax.checkpoints.torch_checkpoints import rsl_rl_state_dicts
from strl_jax.configs import ConfigError, config_to_dict, resolve_config
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs import make_env_from_config
from strl_jax.export import export_rsl_rl
from strl_jax.inference import init_policy_state, load_policy
from strl_jax.networks.normalizer import NormalizerState
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops import update_rules
from strl_jax.train_loops.learner import Learner
from strl_jax.train_loops.ppo_update import make_batch
from strl_jax.train_loops.state import TrainState

TOL = dict(rtol=1e-5, atol=1e-5)
APPROX = dict(rel=1e-5, abs=1e-5)
TASK = "hopper"  # the preset under the rsl_rl config, and the teacher run's env (11 obs, 3 actions)
GROUPS = {"policy": 8, "critic": 11}  # the actor's observations; the critic's (and the teacher's)
ACTIONS = 3
STEPS, ENVS = 6, 8
PPO_ITERATIONS = 2  # the second rollout acts with updated weights, normalisers, memories and rate
STRL_OVERRIDES = (f"env.num_envs={ENVS}",)
# rsl_rl's `PPO.process_env_step` adds gamma * V(s_t) to a time-out's reward; the translation
# leaves strl_jax's default (the final observation's value), so a run with rsl_rl's asks for it
RSL_RL_TIMEOUTS = "algorithm.timeout_bootstrap=rsl_rl"


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """rsl_rl's tiny networks on one thread: torch's thread pool beside XLA's stalls on a busy
    CPU (a two-layer GRU update took 9 s instead of 0.2 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- rsl_rl configs
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
        "max_iterations": PPO_ITERATIONS,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "actor": model_block(kind, True, normalize=kind == "mlp"),
        "critic": model_block(kind, False, normalize=kind == "mlp"),
        "algorithm": alg | algorithm,
    }


def strl_config(tmp_path: Path, train_cfg: dict, *overrides: str) -> TrainConfig:
    """strl_jax's config from the rsl_rl train_cfg, read as `--config` reads it."""
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(train_cfg))
    return resolve_config(TASK, [str(path)], [*STRL_OVERRIDES, *overrides])


def assert_translated(cfg: TrainConfig, train_cfg: dict) -> None:
    """The translated config holds the rsl_rl dict's values: runner, algorithm and model."""
    assert cfg.runner.num_steps_per_env == train_cfg["num_steps_per_env"]
    assert cfg.runner.max_iterations == train_cfg["max_iterations"]
    for key, value in train_cfg["algorithm"].items():
        assert getattr(cfg.algorithm, key) == value, key
    actor = train_cfg.get("actor") or train_cfg["student"]
    policy = cfg.policy
    recurrent = actor["class_name"] == "RNNModel"
    assert policy.class_name == ("ActorCriticRecurrent" if recurrent else "ActorCritic")
    assert (policy.actor_hidden_dims, policy.activation) == (tuple(actor["hidden_dims"]), actor["activation"])
    if "critic" in train_cfg:
        assert policy.critic_hidden_dims == tuple(train_cfg["critic"]["hidden_dims"])
    assert cfg.runner.empirical_normalization == actor["obs_normalization"]
    dist = actor["distribution_cfg"]
    assert (policy.init_noise_std, policy.noise_std_type) == (dist["init_std"], dist["std_type"])
    if recurrent:
        rnn = (policy.rnn_type, policy.rnn_hidden_size, policy.rnn_num_layers)
        assert rnn == (actor["rnn_type"], actor["rnn_hidden_dim"], actor["rnn_num_layers"])


# ----------------------------------------------------------------------------- strl_jax's side
@dataclasses.dataclass
class UpdateSpy:
    """Where the update rule calls `ppo_update` / `cloning_update` inside the traced iteration:
    hands `ppo_update` rsl_rl's minibatch order (its `orders` seam) and keeps what the update
    learnt from and measured. The compiled iteration returns them as extra outputs (a host
    callback would keep the program out of the persistent compilation cache)."""

    orders: np.ndarray | None = None
    seen: dict = dataclasses.field(default_factory=dict)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        ppo, cloning = update_rules.ppo_update, update_rules.cloning_update
        signature = inspect.signature(ppo)

        def spied_ppo(*args, **kwargs):
            out = ppo(*args, **kwargs, orders=self.orders)
            given = signature.bind(*args, **kwargs).arguments
            batch, _ = make_batch(
                given["learner"], given["train_state"], given["transitions"], given["last_values"]
            )
            self.seen = {"transitions": given["transitions"], "batch": batch, "metrics": out[0].metrics}
            return out

        def spied_cloning(learner, train_state, transitions):
            out = cloning(learner, train_state, transitions)
            self.seen = {"transitions": transitions, "metrics": out.metrics}
            return out

        monkeypatch.setattr(update_rules, "ppo_update", spied_ppo)
        monkeypatch.setattr(update_rules, "cloning_update", spied_cloning)


def strl_jax_run(learner: Learner, spy: UpdateSpy, seed: int, iterations: int) -> tuple[TrainState, list]:
    """`Learner.init` and `iterations` compiled `Learner.iteration`s: the initial train state and,
    per iteration, `{"state": train state after it, "seen": what its update saw}` (numpy)."""
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(seed))

    @jax.jit
    def iteration(ts, rs):
        ts, rs, _ = learner.iteration(ts, rs)
        return ts, rs, spy.seen

    initial, out = ts, []
    for _ in range(iterations):
        ts, rs, seen = iteration(ts, rs)
        out.append(jax.tree.map(np.asarray, {"state": ts, "seen": seen}))
    return initial, out


def action_noise(iterations: list) -> Iterator[np.ndarray]:
    """strl_jax's standard-normal draws behind every stored action, step by step."""
    for it in iterations:
        tr = it["seen"]["transitions"]
        yield from ((tr.actions - tr.mean) / tr.std).astype(np.float32)


# ----------------------------------------------------------------------------- rsl_rl's side
def act_with_noise(alg, model, noise: Iterator[np.ndarray]) -> None:
    """rsl_rl's `act` draws `model`'s actions as mean + std * the next given noise, where
    `GaussianDistribution.sample` would draw from torch's generator: strl_jax's draws."""
    act, dist = alg.act, model.distribution

    def acting(obs: TensorDict) -> torch.Tensor:
        eps = torch.from_numpy(next(noise))
        dist.sample = lambda: dist.mean + dist.std * eps
        try:
            return act(obs)
        finally:
            del dist.sample

    alg.act = acting


def storage_arrays(st) -> dict:
    """What rsl_rl's `RolloutStorage` holds for the update, as numpy."""

    def last(x: torch.Tensor) -> np.ndarray:
        return x[..., 0].numpy().copy()

    out = {
        "obs": {k: v.numpy().copy() for k, v in st.observations.items()},
        "actions": st.actions.numpy().copy(),
        "rewards": last(st.rewards),
        "dones": last(st.dones).astype(bool),
    }
    if st.training_type == "distillation":
        return out | {"labels": st.privileged_actions.numpy().copy()}
    return out | {
        "log_prob": last(st.actions_log_prob),
        "mean": st.distribution_params[0].numpy().copy(),
        "std": st.distribution_params[1].numpy().copy(),
        "values": last(st.values),
        "returns": last(st.returns),
        "advantages": last(st.advantages),
    }


def record_updates(alg, models: dict, seed: int) -> list[dict]:
    """Every `update()` of rsl_rl's runner, reseeded (its feed-forward minibatch permutation is
    then `torch.randperm` after `torch.manual_seed(seed)`) and recorded: the rollout it learns
    from, each optimiser step's learning rate and KL, its losses, the rate and the parameters it
    leaves."""
    records: list[dict] = []
    update, step = alg.update, alg.optimizer.step
    policy = alg.get_policy()
    kl = policy.get_kl_divergence

    def recording_step(*args, **kwargs):
        records[-1]["lr"].append(alg.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    def recording_kl(old, new):
        value = kl(old, new)
        records[-1]["kl"].append(value.mean().item())
        return value

    def recording_update() -> dict:
        records.append({"rollout": storage_arrays(alg.storage), "lr": [], "kl": []})
        torch.manual_seed(seed)
        losses = update()
        params = {
            name: {k: v.numpy().copy() for k, v in m.state_dict().items()} for name, m in models.items()
        }
        records[-1] |= {"losses": losses, "params": params, "final_lr": alg.learning_rate}
        return losses

    alg.update, alg.optimizer.step, policy.get_kl_divergence = recording_update, recording_step, recording_kl
    return records


def rsl_rl_orders(learner: Learner, seed: int) -> np.ndarray:
    """rsl_rl's minibatch columns, `[epochs, minibatches, size]`: `mini_batch_generator`'s one
    permutation for every epoch, `recurrent_mini_batch_generator`'s environments in order."""
    alg = learner.cfg.algorithm
    torch.manual_seed(seed)
    perm = torch.randperm(STEPS * ENVS).numpy()
    columns = np.arange(ENVS) if learner.model.recurrent else perm
    per_epoch = columns.reshape(alg.num_mini_batches, -1)
    return np.broadcast_to(per_epoch, (alg.num_learning_epochs, *per_epoch.shape)).copy()


# ----------------------------------------------------------------------------- PPO
@dataclasses.dataclass
class PPORun:
    learner: Learner
    train_cfg: dict
    script: Script
    initial: TrainState  # strl_jax's, whose weights rsl_rl's runner starts from
    ours: list  # per iteration: {"state", "seen"}
    ref: list  # per iteration: rsl_rl's `record_updates` entry
    runner: OnPolicyRunner


def run_ppo(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    seed: int,
    algorithm: dict | None = None,
    overrides: tuple[str, ...] = (RSL_RL_TIMEOUTS,),
    iterations: int = PPO_ITERATIONS,
) -> PPORun:
    """Both learners on one script, strl_jax's first (its draws become rsl_rl's)."""
    train_cfg = ppo_train_cfg(kind, **(algorithm or {}))
    cfg = strl_config(tmp_path, train_cfg, *overrides)
    assert_translated(cfg, train_cfg)
    script = random_script(seed, STEPS * iterations, ENVS, GROUPS, ACTIONS)
    learner = make_learner(scripted_vec_env(script), cfg)
    spy = UpdateSpy(orders=rsl_rl_orders(learner, seed))
    spy.install(monkeypatch)
    initial, ours = strl_jax_run(learner, spy, seed, iterations)

    runner = OnPolicyRunner(ScriptedRslRlEnv(script), copy.deepcopy(train_cfg), log_dir=None, device="cpu")
    alg = runner.alg
    for model, state in zip(
        (alg.actor, alg.critic),
        rsl_rl_state_dicts(initial.params, initial.normalizers, train_cfg),
        strict=True,
    ):
        model.load_state_dict(state, strict=True)
    act_with_noise(alg, alg.actor, action_noise(ours))
    ref = record_updates(alg, {"actor": alg.actor, "critic": alg.critic}, seed)
    runner.learn(iterations)
    assert len(ref) == iterations
    return PPORun(learner, train_cfg, script, initial, ours, ref, runner)


def assert_same_rollout(tr, ref: dict, keys: tuple[str, ...]) -> None:
    """strl_jax's stored transitions are rsl_rl's storage."""
    for group, value in ref["obs"].items():
        np.testing.assert_array_equal(tr.obs[group], value, err_msg=f"obs {group}")
    np.testing.assert_array_equal(tr.dones > 0, ref["dones"], err_msg="dones")
    for key in keys:
        np.testing.assert_allclose(getattr(tr, key), ref[key], err_msg=key, **TOL)


def flat(metrics: dict, key: str) -> np.ndarray:
    return np.asarray(metrics[key]).reshape(-1)  # [epochs, minibatches] in step order


def assert_same_parameters(ours: dict, ref: dict) -> None:
    """Tensor by tensor in rsl_rl's names, normalisers included."""
    for net, state in ours.items():
        assert set(state) == set(ref[net]), net
        for name, value in state.items():
            np.testing.assert_allclose(value.numpy(), ref[net][name], err_msg=f"{net}.{name}", **TOL)


def assert_same_ppo_iteration(run: PPORun, ours: dict, ref: dict) -> None:
    learner, seen = run.learner, ours["seen"]
    tr, metrics = seen["transitions"], seen["metrics"]
    keys = ("actions", "log_prob", "mean", "std", "values", "rewards")
    assert_same_rollout(tr, ref["rollout"], keys)
    for key in ("returns", "advantages"):
        ours_key = getattr(seen["batch"], key).reshape(STEPS, ENVS)
        np.testing.assert_allclose(ours_key, ref["rollout"][key], err_msg=key, **TOL)
    # every optimiser step: its KL and learning rate
    assert len(ref["lr"]) == learner.update_rule.optimizer_steps(learner.cfg)
    if learner.cfg.algorithm.schedule == "adaptive":  # rsl_rl computes the KL for the schedule only
        assert len(ref["kl"]) == len(ref["lr"])
        # float32 rounding leaves ~1e-7 in a KL of nearly equal Gaussians (on either side)
        np.testing.assert_allclose(flat(metrics, "kl"), ref["kl"], rtol=1e-4, atol=1e-6, err_msg="kl")
    np.testing.assert_allclose(flat(metrics, "learning_rate"), ref["lr"], rtol=1e-6, err_msg="lr")
    assert float(ours["state"].learning_rate) == pytest.approx(ref["final_lr"], rel=1e-6)
    for theirs, name in (("surrogate", "surrogate"), ("value", "value_function"), ("entropy", "entropy")):
        assert float(np.mean(metrics[name])) == pytest.approx(ref["losses"][theirs], **APPROX), name
    state = ours["state"]
    actor, critic = rsl_rl_state_dicts(state.params, state.normalizers, run.train_cfg)
    assert_same_parameters({"actor": actor, "critic": critic}, ref["params"])


def assert_same_ppo_run(run: PPORun) -> None:
    assert run.script.truncated[:STEPS].any(), "the first rollout should have time-outs to bootstrap"
    for ours, ref in zip(run.ours, run.ref, strict=True):
        assert_same_ppo_iteration(run, ours, ref)


@pytest.mark.parametrize("kind", ["mlp", "lstm", "gru"])
def test_ppo_iterations_match_rsl_rl(tmp_path, monkeypatch, kind):
    """An rsl_rl config's run learns as rsl_rl's runner does, two iterations: Adam, the adaptive
    schedule, the actor's and the critic's gradients clipped apart, 3 epochs x 4 minibatches;
    MLP with observation normalisation (its statistics too), LSTM, two-layer GRU.

    The rule grows the rate only on a KL above 0, and a KL of nearly equal Gaussians below about
    1e-6 is float32 rounding's (it came out 0 or 1.5e-8 for the same step under two XLA:CPU
    emitters), so each script keeps every step's KL above 1e-5 with its desired_kl (at 0.002 the
    GRU's second rollout's rate fell so low that its first steps moved the policy by ~1e-8)."""
    seed, desired_kl = {"mlp": (0, 0.01), "lstm": (1, 0.006), "gru": (2, 0.015)}[kind]
    run = run_ppo(tmp_path, monkeypatch, kind, seed=seed, algorithm={"desired_kl": desired_kl})
    assert run.learner.model.recurrent == (kind != "mlp")
    moved = [abs(kl) for ref in run.ref for kl in ref["kl"] if kl != 0.0]  # the first step's is 0
    assert min(moved) > 1e-5, "a step's KL near float32's rounding: the rate's branch would be too"
    assert_same_ppo_run(run)
    rates = [lr for ref in run.ref for lr in ref["lr"]]
    assert min(rates) < rates[0] < max(rates), "the schedule should both shrink and grow the rate"


def test_sgd_per_minibatch_advantages_plain_value_loss_match_rsl_rl(tmp_path, monkeypatch):
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
    run = run_ppo(tmp_path, monkeypatch, "mlp", seed=3, algorithm=algorithm)
    assert_same_ppo_run(run)


@pytest.mark.parametrize(
    "bound,algorithm",
    [
        ("cap", dict(learning_rate=8e-3, desired_kl=10.0)),
        # SGD steps made large by the entropy bonus, so that every KL lies far above float32's
        # rounding; Adam's steps of 1e-5 give KLs of ~1e-9, where rounding would pick the branch
        (
            "floor",
            dict(optimizer="sgd", learning_rate=3e-5, desired_kl=1e-5, entropy_coef=1e3, max_grad_norm=1e4),
        ),
    ],
)
def test_schedule_bounds_match_rsl_rl(tmp_path, monkeypatch, bound, algorithm):
    """The adaptive rate meets rsl_rl's cap (1e-2) and floor (1e-5) where rsl_rl's does."""
    run = run_ppo(tmp_path, monkeypatch, "mlp", seed=4, algorithm=algorithm, iterations=1)
    assert_same_ppo_run(run)
    ref = run.ref[0]
    assert ref["final_lr"] == pytest.approx(1e-2 if bound == "cap" else 1e-5)
    assert ref["lr"].count(ref["final_lr"]) > 1  # it stayed at the bound


def test_translated_timeouts_bootstrap_from_the_final_observation(tmp_path, monkeypatch):
    """An rsl_rl config alone leaves strl_jax's time-out bootstrap, from the value of the
    observation the episode reached: a time-out's reward is rsl_rl's plus
    gamma * (V(s_final) - V(s_t)), both values from rsl_rl's critic, and every other reward is
    rsl_rl's."""
    run = run_ppo(tmp_path, monkeypatch, "mlp", seed=5, overrides=(), iterations=1)
    assert run.learner.cfg.algorithm.timeout_bootstrap == "final_obs"
    script, ref = run.script, run.ref[0]["rollout"]
    critic = run.runner.alg.critic
    critic.load_state_dict(rsl_rl_state_dicts(run.initial.params, run.initial.normalizers, run.train_cfg)[1])
    with torch.inference_mode():
        final = {g: torch.from_numpy(v) for g, v in script.final_obs.items()}
        final_values = critic(TensorDict(final, batch_size=[STEPS, ENVS]))[..., 0].numpy()
    gamma = run.train_cfg["algorithm"]["gamma"]
    expected = ref["rewards"] + gamma * script.truncated * (final_values - ref["values"])
    tr = run.ours[0]["seen"]["transitions"]
    assert_same_rollout(tr, ref, ("actions", "log_prob", "values"))
    np.testing.assert_allclose(tr.rewards, expected, err_msg="rewards", **TOL)
    assert np.abs(tr.rewards - ref["rewards"])[script.truncated].min() > 1e-3  # the two differ


def test_st_rl_update_is_not_rsl_rl_update(tmp_path, monkeypatch):
    """Without the rsl_rl mode (st_rl's KL with 1e-5 in its log, one global clip) the same run
    updates differently: the first step grows the rate on a KL of ~1e-5 where rsl_rl's is 0,
    and the parameters move elsewhere. So the parity above depends on both options."""
    st_rl = (RSL_RL_TIMEOUTS, "algorithm.kl_epsilon=1e-5", "algorithm.clip_grad_per_network=false")
    run = run_ppo(tmp_path, monkeypatch, "mlp", seed=0, overrides=st_rl, iterations=1)
    ref, ours = run.ref[0], run.ours[0]
    assert ref["lr"][0] == pytest.approx(3e-3) and ref["kl"][0] == 0.0
    assert flat(ours["seen"]["metrics"], "learning_rate")[0] == pytest.approx(4.5e-3)
    actor, _ = rsl_rl_state_dicts(ours["state"].params, ours["state"].normalizers, run.train_cfg)
    moved = max(np.max(np.abs(v.numpy() - ref["params"]["actor"][k])) for k, v in actor.items())
    assert moved > 1e-3


def test_per_network_clipping_alone_matters(tmp_path, monkeypatch):
    """With the exact KL but one global clip, SGD steps (which keep the clip's scale) differ from
    rsl_rl's: both networks' gradients exceed max_grad_norm, and their joint norm scales both."""
    algorithm = dict(optimizer="sgd", learning_rate=0.05, schedule="fixed")
    overrides = (RSL_RL_TIMEOUTS, "algorithm.clip_grad_per_network=false")
    run = run_ppo(
        tmp_path, monkeypatch, "mlp", seed=3, algorithm=algorithm, overrides=overrides, iterations=1
    )
    state = run.ours[0]["state"]
    _, critic = rsl_rl_state_dicts(state.params, state.normalizers, run.train_cfg)
    ref = run.ref[0]["params"]["critic"]
    assert max(np.max(np.abs(v.numpy() - ref[k])) for k, v in critic.items()) > 1e-3


# ----------------------------------------------------------------------------- Distillation
SMALL_CRITIC = ("policy.critic_hidden_dims=[8]",)  # the student's critic: the update does not use it


# student: (gradient length, loss); 2 epochs x 6 steps = 12 steps per update, so the LSTM's last
# 2 steps and the GRU's last 5 are evaluated but never backpropagated (rsl_rl warns about it)
DISTILLATION = {"mlp": (4, "mse"), "lstm": (5, "mse"), "gru": (7, "huber")}


def distillation_train_cfg(kind: str, teacher: dict) -> dict:
    """rsl_rl's Distillation train_cfg; `teacher`: the model block rsl_rl builds the teacher from."""
    gradient_length, loss_type = DISTILLATION[kind]
    return {
        "class_name": "DistillationRunner",
        "num_steps_per_env": STEPS,
        "max_iterations": 1,
        "obs_groups": {"student": ["policy"], "teacher": ["critic"]},
        "student": model_block(kind, True, normalize=kind == "mlp"),
        "teacher": teacher,
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


def write_teacher(path: Path) -> tuple[str, Path, dict]:
    """A strl_jax teacher run (untrained, with normaliser statistics of its own) and its
    `export --format rsl_rl`: `(run folder, rsl_rl checkpoint, rsl_rl's model block for it)`."""
    teacher_cfg = resolve_config(
        TASK, overrides=[f"env.num_envs={ENVS}", "policy.actor_hidden_dims=[8]", *SMALL_CRITIC]
    )
    assert teacher_cfg.runner.empirical_normalization
    env = make_env_from_config(teacher_cfg.env)
    shapes = env.observation_shapes()
    policy = init_policy_state(jax.random.PRNGKey(5), teacher_cfg, shapes, env.action_size)
    rng = np.random.default_rng(5)
    normalizers = {
        k: NormalizerState(
            mean=jnp.asarray(rng.normal(size=s), jnp.float32),
            var=jnp.asarray(rng.uniform(0.5, 2.0, size=s), jnp.float32),
            count=jnp.asarray(100.0, jnp.float32),
        )
        for k, s in shapes.items()
    }
    manager = open_manager(path / CHECKPOINT_DIR)
    meta = {"window": {}, "wall_time": 0.0, "config": config_to_dict(teacher_cfg)}
    state = {"train_state": {"params": policy.params, "normalizers": normalizers}}
    save_checkpoint(manager, 1, state, meta)
    manager.wait_until_finished()
    manager.close()
    checkpoint, train_cfg = export_rsl_rl(load_policy(path), path / "rsl_rl")
    return str(path), checkpoint, yaml.safe_load(train_cfg.read_text())["actor"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> tuple[str, Path, dict]:
    """`write_teacher` once for the module."""
    return write_teacher(tmp_path_factory.mktemp("teacher"))


@pytest.mark.parametrize("kind", ["mlp", "lstm", "gru"])
def test_distillation_iteration_matches_rsl_rl(tmp_path, monkeypatch, teacher, kind):
    """rsl_rl's `DistillationRunner` and the learner label the same rollout with the same teacher
    (its own normaliser), and their behaviour cloning (truncated backpropagation through time,
    Adam, clipping) leaves the same student, normaliser and mean loss, with windows that cross
    epochs and steps left over at the end."""
    teacher_run, teacher_checkpoint, teacher_block = teacher
    train_cfg = distillation_train_cfg(kind, teacher_block)
    cfg = strl_config(
        tmp_path, train_cfg, f"algorithm.teacher_policy.checkpoint={teacher_run}", *SMALL_CRITIC
    )
    assert_translated(cfg, train_cfg)
    assert cfg.algorithm.teacher_policy.class_name == "ActorCritic"
    assert cfg.algorithm.teacher_policy.obs_group == "critic"
    script = random_script(7, STEPS, ENVS, GROUPS, ACTIONS)
    with pytest.warns(UserWarning, match="never backpropagated") if kind != "mlp" else nullcontext():
        learner = make_learner(scripted_vec_env(script), cfg)
    spy = UpdateSpy()
    spy.install(monkeypatch)
    initial, ours = strl_jax_run(learner, spy, seed=7, iterations=1)

    with pytest.warns(UserWarning, match="never backpropagated") if kind != "mlp" else nullcontext():
        runner = DistillationRunner(
            ScriptedRslRlEnv(script), copy.deepcopy(train_cfg), log_dir=None, device="cpu"
        )
    runner.load(str(teacher_checkpoint))  # an RL checkpoint: rsl_rl's Distillation takes its actor
    alg = runner.alg
    student_cfg = {"actor": train_cfg["student"], "critic": {"obs_normalization": False}}
    student, _ = rsl_rl_state_dicts(initial.params, initial.normalizers, student_cfg)
    alg.student.load_state_dict(student, strict=True)
    act_with_noise(alg, alg.student, action_noise(ours))
    ref = record_updates(alg, {"student": alg.student}, seed=7)
    runner.learn(1)

    seen, ref = ours[0]["seen"], ref[0]
    tr = seen["transitions"]
    assert_same_rollout(tr, ref["rollout"], ("actions",))
    labels = tr.parts["teacher"]["action_labels"]  # strl_jax's teacher, inside the rollout
    np.testing.assert_allclose(labels, ref["rollout"]["labels"], err_msg="teacher labels", **TOL)
    assert float(seen["metrics"]["distillation"]) == pytest.approx(ref["losses"]["behavior"], **APPROX)
    assert len(ref["lr"]) == learner.update_rule.optimizer_steps(learner.cfg)
    state = ours[0]["state"]
    after, _ = rsl_rl_state_dicts(state.params, state.normalizers, student_cfg)
    assert_same_parameters({"student": after}, ref["params"])
    before = {k: v.numpy() for k, v in student.items() if not k.startswith("obs_normalizer")}
    assert max(np.max(np.abs(v - ref["params"]["student"][k])) for k, v in before.items()) > 1e-3  # moved


def test_kl_epsilon_must_not_be_negative():
    with pytest.raises(
        ConfigError, match=r"algorithm.kl_epsilon must be at least 0 \(0: the exact KL\), got -1"
    ):
        resolve_config("inverted_pendulum", overrides=["algorithm.kl_epsilon=-1"])
