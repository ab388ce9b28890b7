"""rsl_rl's symmetry extension (`algorithm.symmetry_cfg`): the augmented PPO update and mirror loss
against the installed rsl_rl's real `PPO` with `MLPModel`s of identical weights and normalisers
(losses and gradients to 1e-5), the mirror functions of `strl_jax.envs.symmetry`, config checks
and a short training run."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from extras import require_playground
from learning_runs import mirror_loss_rows
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict
from tiny_config import tiny

from strl_jax.agents.ppo import POLICY, MinibatchInputs, PPOBatch, make_optimizer, ppo_loss
from strl_jax.agents.symmetry import SymmetryEnv, SymmetryPart, copies
from strl_jax.checkpoints.torch_checkpoints import rsl_rl_state_dicts
from strl_jax.configs import ConfigError, resolve_config
from strl_jax.configs.to_rsl_rl import to_rsl_rl_train_cfg
from strl_jax.envs import symmetry as mirrors
from strl_jax.envs.playground_components import component_layout, component_slices
from strl_jax.networks.acting import make_actor
from strl_jax.networks.normalizer import InputNormalization, NormalizerState
from strl_jax.networks.policy import make_policy_model
from strl_jax.runners.runner import train
from strl_jax.train_loops.learner import Learner
from strl_jax.train_loops.ppo_update import loss_settings, minibatch_step
from strl_jax.train_loops.update_rules import PPOUpdate

TOL = dict(rtol=1e-5, atol=1e-5)
SIZES, ACT, ENVS, STEPS = {"policy": 5, "critic": 7}, 3, 8, 4
# A mirror of the toy observations and actions (permutation with signs, an involution), and a
# second transform for a three-copy augmentation.
TABLES = {
    "policy": (np.array([1, 0, 2, 4, 3]), np.array([1.0, 1.0, -1.0, 1.0, -1.0])),
    "critic": (np.array([0, 2, 1, 3, 6, 5, 4]), np.array([-1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0])),
}
ACTION_TABLE = (np.array([1, 0, 2]), np.array([1.0, 1.0, -1.0]))
SCALE = 0.5


def toy_mirror(obs, actions, env):
    """strl_jax's convention: `(obs, actions, env)`, originals first."""
    return mirrors.augment(obs, actions, TABLES, ACTION_TABLE)


def toy_three(obs, actions, env):
    """Originals, mirror images, and the originals scaled (k = 3)."""
    out_obs, out_actions = toy_mirror(obs, actions, env)
    if out_obs is not None:
        out_obs = {k: jnp.concatenate([v, SCALE * obs[k]]) for k, v in out_obs.items()}
    if out_actions is not None:
        out_actions = jnp.concatenate([out_actions, SCALE * actions])
    return out_obs, out_actions


def torch_mirror(env=None, obs=None, actions=None, three=False):
    """The same transforms in rsl_rl's convention (`env`, `obs` TensorDict, `actions` keywords)."""
    out_obs = out_actions = None
    if obs is not None:
        groups = {}
        for k, (perm, sign) in TABLES.items():
            x = obs[k]
            parts = [x, x[:, perm] * torch.tensor(sign, dtype=x.dtype)] + ([SCALE * x] if three else [])
            groups[k] = torch.cat(parts)
        out_obs = TensorDict(groups, batch_size=[groups["policy"].shape[0]])
    if actions is not None:
        perm, sign = ACTION_TABLE
        parts = [actions, actions[:, perm] * torch.tensor(sign, dtype=actions.dtype)]
        out_actions = torch.cat(parts + ([SCALE * actions] if three else []))
    return out_obs, out_actions


class ToyEnv:
    """Enough of a torch VecEnv for rsl_rl's runner to build PPO (observations come from the test)."""

    num_envs, num_actions, max_episode_length, device, cfg = ENVS, ACT, 6, "cpu", {}

    def get_observations(self) -> TensorDict:
        return random_obs(np.random.default_rng(0))


def random_obs(rng) -> TensorDict:
    groups = {
        k: torch.tensor(2.0 + 3.0 * rng.normal(size=(ENVS, n)), dtype=torch.float32) for k, n in SIZES.items()
    }
    return TensorDict(groups, batch_size=[ENVS])


def strl_cfg(per_mb: bool):
    overrides = [
        "policy.actor_hidden_dims=[8, 8]",
        "policy.critic_hidden_dims=[8, 8]",
        "env.clip_actions=null",
        "algorithm.num_learning_epochs=1",
        "algorithm.num_mini_batches=1",
        "algorithm.max_grad_norm=1e9",  # no clipping: the gradients are compared raw
        "algorithm.optimizer=sgd",
        "algorithm.entropy_coef=0.01",
        "algorithm.desired_kl=0.001",
        f"algorithm.normalize_advantage_per_mini_batch={str(per_mb).lower()}",
        f"runner.num_steps_per_env={STEPS}",
    ]
    return resolve_config("inverted_pendulum", overrides=overrides)


def random_params(cfg, seed: int):
    """strl_jax parameters with every weight drawn large, and normalisers far from identity."""
    model = make_policy_model(ACT, cfg.policy)
    params = model.init(jax.random.PRNGKey(seed), {k: (n,) for k, n in SIZES.items()})
    keys = iter(jax.random.split(jax.random.PRNGKey(seed + 100), 16))
    params = jax.tree.map(lambda x: 0.6 * jax.random.normal(next(keys), x.shape), params)
    std = jnp.exp(0.3 * jax.random.normal(next(keys), (ACT,)))  # positive, around 1
    params = {"params": {**params["params"], "std": std}}
    rng = np.random.default_rng(seed)
    normalizers = {
        k: NormalizerState(
            jnp.asarray(rng.normal(size=n) * 2 + 2, jnp.float32),
            jnp.asarray(rng.uniform(0.5, 9.0, size=n), jnp.float32),
            jnp.asarray(100.0),
        )
        for k, n in SIZES.items()
    }
    return model, params, normalizers


def load(runner, params, normalizers, train_cfg):
    actor, critic = rsl_rl_state_dicts(params, normalizers, train_cfg)
    runner.alg.actor.load_state_dict(actor, strict=True)
    runner.alg.critic.load_state_dict(critic, strict=True)


def run_rsl_rl(cfg, sym, three, params0, params1, normalizers):
    """rsl_rl's PPO: a rollout with `params0`, then one update (one minibatch) with `params1`;
    returns its losses, gradients (by torch name), final lr and the stored rollout."""
    train_cfg = to_rsl_rl_train_cfg(cfg)
    func = (lambda env, obs, actions: torch_mirror(env, obs, actions, three=True)) if three else torch_mirror
    train_cfg["algorithm"]["symmetry_cfg"] = {**sym, "data_augmentation_func": func}
    torch.manual_seed(0)
    runner = OnPolicyRunner(ToyEnv(), train_cfg, log_dir=None, device="cpu")
    alg = runner.alg
    load(runner, params0, normalizers, train_cfg)
    alg.train_mode()
    rng = np.random.default_rng(5)
    for _ in range(STEPS):
        obs = random_obs(rng)
        alg.act(obs)
        dones = torch.tensor(rng.random(ENVS) < 0.2)
        alg.process_env_step(obs, torch.tensor(rng.normal(size=ENVS), dtype=torch.float32), dones, {})
    alg.compute_returns(random_obs(rng))
    st = alg.storage
    stored = dict(
        obs={k: st.observations[k].flatten(0, 1).numpy().copy() for k in SIZES},
        actions=st.actions.flatten(0, 1).numpy().copy(),
        log_prob=st.actions_log_prob.flatten().numpy().copy(),
        mean=st.distribution_params[0].flatten(0, 1).numpy().copy(),
        std=st.distribution_params[1].flatten(0, 1).numpy().copy(),
        values=st.values.flatten().numpy().copy(),
        advantages=st.advantages.flatten().numpy().copy(),
        returns=st.returns.flatten().numpy().copy(),
    )
    with torch.no_grad():  # the update sees a moved policy
        load(runner, params1, normalizers, train_cfg)
    grads = {}
    step = alg.optimizer.step

    def recording_step(*args, **kwargs):
        for prefix, model in (("actor", alg.actor), ("critic", alg.critic)):
            for name, p in model.named_parameters():
                grads[(prefix, name)] = p.grad.numpy().copy()
        return step(*args, **kwargs)

    alg.optimizer.step = recording_step
    kls = []
    kl_fn = alg.actor.get_kl_divergence
    alg.actor.get_kl_divergence = lambda old, new: (
        kls.append(kl_fn(old, new).mean().item()) or kl_fn(old, new)
    )
    losses = alg.update()
    return losses | {"kl": kls[0]}, grads, alg.learning_rate, stored, train_cfg


def strl_update(cfg, part, model, params, normalizers, stored):
    """strl_jax's loss, gradients and adaptive lr on the same minibatch (rsl_rl's column order is
    irrelevant: every term is a mean over samples)."""
    learner = Learner(
        env=None,
        model=model,
        actor=make_actor(model, cfg),
        cfg=cfg,
        optimizer=make_optimizer("sgd", None),
        update_rule=PPOUpdate(),
        parts=(part,),
    )
    col = lambda x: jnp.asarray(x)[None]  # noqa: E731 - [1, B, ...]
    batch = PPOBatch(
        obs=InputNormalization().groups(normalizers, {k: col(v) for k, v in stored["obs"].items()}),
        hidden={},
        resets=col(np.zeros(STEPS * ENVS, np.float32)),
        actions=col(stored["actions"]),
        old_log_prob=col(stored["log_prob"]),
        old_mean=col(stored["mean"]),
        old_std=col(stored["std"]),
        old_values=col(stored["values"]),
        advantages=col(stored["advantages"]),
        returns=col(stored["returns"]),
        parts={"symmetry": {}},
        draws={},
    )
    inputs = MinibatchInputs(
        batch=batch,
        iteration=jnp.zeros((), jnp.int32),
        train_parts={"symmetry": None},
        part_inputs={"symmetry": None},
        normalizers=normalizers,
    )
    loss = functools.partial(ppo_loss, settings=loss_settings(learner))
    grads, (losses, metrics, _, _) = jax.jit(jax.grad(loss, has_aux=True))({POLICY: params}, inputs)
    carry = (
        {POLICY: params},
        learner.optimizer.init({POLICY: params}),
        jnp.float32(cfg.algorithm.learning_rate),
    )
    (_, _, lr), (step_metrics, _) = jax.jit(functools.partial(minibatch_step, learner))(carry, inputs)
    return metrics | {"kl": step_metrics["kl"]}, grads[POLICY], float(lr)


SYMMETRY_CASES = {
    # name: (symmetry_cfg without the function, three copies, per-minibatch advantages)
    "augment_and_mirror": (
        dict(use_data_augmentation=True, use_mirror_loss=True, mirror_loss_coeff=0.7),
        False,
        False,
    ),
    "augment_only": (dict(use_data_augmentation=True, use_mirror_loss=False), False, True),
    "mirror_only": (
        dict(use_data_augmentation=False, use_mirror_loss=True, mirror_loss_coeff=2.0),
        False,
        False,
    ),
    "logging_only": (dict(use_data_augmentation=False, use_mirror_loss=False), False, False),
    "three_copies": (
        dict(use_data_augmentation=True, use_mirror_loss=True, mirror_loss_coeff=0.3),
        True,
        True,
    ),
    "three_copies_mirror_only": (
        dict(use_data_augmentation=False, use_mirror_loss=True, mirror_loss_coeff=1.0),
        True,
        False,
    ),
}


@pytest.mark.parametrize("name", list(SYMMETRY_CASES))
def test_symmetry_update_matches_rsl_rl(name):
    """Surrogate, value, entropy and symmetry losses, every parameter's gradient and the adaptive
    lr (KL over the original samples) of one symmetry-augmented minibatch equal rsl_rl's."""
    sym, three, per_mb = SYMMETRY_CASES[name]
    cfg = strl_cfg(per_mb)
    seed = sorted(SYMMETRY_CASES).index(name)
    model, params0, normalizers = random_params(cfg, seed)
    _, params1, _ = random_params(cfg, seed + 50)
    params1 = jax.tree.map(lambda a, b: a + 0.05 * (b - a), params0, params1)  # a nearby policy
    losses, torch_grads, torch_lr, stored, train_cfg = run_rsl_rl(
        cfg, sym, three, params0, params1, normalizers
    )
    env = SymmetryEnv(task="toy", components={}, obs_sizes=SIZES, action_size=ACT)
    part = SymmetryPart(name="symmetry", func=toy_three if three else toy_mirror, env=env, **sym)
    metrics, grads, lr = strl_update(cfg, part, model, params1, normalizers, stored)
    names = {
        "surrogate": "surrogate",
        "value_function": "value",
        "entropy": "entropy",
        "symmetry": "symmetry",
    }
    for ours, theirs in names.items():
        assert float(metrics[ours]) == pytest.approx(losses[theirs], **{"rel": 1e-5, "abs": 1e-5}), ours
    assert losses["symmetry"] > 1e-3  # the mirror loss is not vacuous
    # the KL of the original samples only (strl_jax's has st_rl's eps of 1e-5 inside its log)
    assert float(metrics["kl"]) == pytest.approx(losses["kl"], rel=1e-3)
    actor, critic = rsl_rl_state_dicts(grads, normalizers, train_cfg)
    ours = {("actor", k): v for k, v in actor.items()} | {("critic", k): v for k, v in critic.items()}
    ours = {k: v.numpy() for k, v in ours.items() if "obs_normalizer" not in k[1]}
    assert set(ours) == set(torch_grads)
    for key, want in torch_grads.items():
        np.testing.assert_allclose(ours[key], want, err_msg=str(key), **TOL)
    assert lr == pytest.approx(torch_lr, rel=1e-6)


# ----------------------------------------------------------------------------- mirror functions


def layout_env(task: str, action_size: int, config: dict | None = None) -> SymmetryEnv:
    """Static facts of a Playground task's default `policy` / `critic` groups (a task without a
    privileged state: `policy` only)."""
    components = {
        "policy": component_layout(task, "state", config or {}),
        "critic": component_layout(task, "privileged_state", config or {}),
    }
    components = {k: v for k, v in components.items() if v is not None}
    sizes = {k: sum(n for _, n in v) for k, v in components.items()}
    return SymmetryEnv(task=task, components=components, obs_sizes=sizes, action_size=action_size)


def span(layout, name: str) -> slice:
    start, stop = component_slices(layout, [name])[0]
    return slice(start, stop)


MIRROR_CASES = {
    "Go1JoystickFlatTerrain": (mirrors.go1_joystick, lambda: layout_env("Go1JoystickFlatTerrain", 12)),
    "Go1JoystickRoughTerrain": (mirrors.go1_joystick, lambda: layout_env("Go1JoystickRoughTerrain", 12)),
    "T1JoystickFlatTerrain": (mirrors.t1_joystick, lambda: layout_env("T1JoystickFlatTerrain", 23)),
    "BerkeleyHumanoidJoystickFlatTerrain": (
        mirrors.berkeley_humanoid_joystick,
        lambda: layout_env("BerkeleyHumanoidJoystickFlatTerrain", 12),
    ),
    "SpotFlatTerrainJoystick": (
        mirrors.spot_joystick,
        lambda: layout_env("SpotFlatTerrainJoystick", 12, {"history_len": 3}),
    ),
    "BarkourJoystick": (mirrors.barkour_joystick, lambda: layout_env("BarkourJoystick", 12)),
    "Op3Joystick": (mirrors.op3_joystick, lambda: layout_env("Op3Joystick", 20, {"obs_history_size": 3})),
    "ant": (mirrors.ant, lambda: SymmetryEnv("ant", {}, {"policy": 27, "critic": 27}, 8)),
    "inverted_pendulum": (
        mirrors.inverted_pendulum,
        lambda: SymmetryEnv("inverted_pendulum", {}, {"policy": 4}, 1),
    ),
}


@pytest.mark.parametrize("task", list(MIRROR_CASES))
def test_mirror_is_an_involution(task):
    """Mirroring the mirror image gives the input back, for every group and the actions; the
    function keeps the originals first and makes k = 2 copies."""
    func, make_env = MIRROR_CASES[task]
    env = make_env()
    rng = np.random.default_rng(0)
    obs = {k: jnp.asarray(rng.normal(size=(6, n)), jnp.float32) for k, n in env.obs_sizes.items()}
    actions = jnp.asarray(rng.normal(size=(6, env.action_size)), jnp.float32)
    assert copies(func, env) == 2
    out_obs, out_actions = jax.jit(lambda o, a: func(o, a, env))(obs, actions)
    again_obs, again_actions = func({k: v[6:] for k, v in out_obs.items()}, out_actions[6:], env)
    for k in obs:
        np.testing.assert_array_equal(out_obs[k][:6], obs[k])
        np.testing.assert_array_equal(again_obs[k][6:], obs[k])
        assert not np.allclose(out_obs[k][6:], obs[k])
    np.testing.assert_array_equal(again_actions[6:], actions)
    only_actions = func(None, actions, env)
    assert only_actions[0] is None
    np.testing.assert_array_equal(only_actions[1], out_actions)


def test_go1_mirror_by_hand():
    """Hand-checked entries: legs FR<->FL, RR<->RL with the abduction joint negated; y of linear
    velocity and gravity, x and z of the gyro, vy and yaw rate of the command; feet swapped."""
    env = layout_env("Go1JoystickFlatTerrain", 12)
    state, priv = env.components["policy"], env.components["critic"]
    x = {k: jnp.arange(n, dtype=jnp.float32)[None] + 1.0 for k, n in env.obs_sizes.items()}
    (out, _), act = mirrors.go1_joystick(x, None, env), jnp.arange(12.0)[None] + 1.0
    m = {k: np.asarray(v[1]) for k, v in out.items()}
    p = np.asarray(x["policy"][0])
    lin, gyro, grav, cmd = (
        span(state, n) for n in ("base_lin_vel", "base_ang_vel", "projected_gravity", "command")
    )
    np.testing.assert_array_equal(m["policy"][lin], p[lin] * [1, -1, 1])
    np.testing.assert_array_equal(m["policy"][gyro], p[gyro] * [-1, 1, -1])
    np.testing.assert_array_equal(m["policy"][grav], p[grav] * [1, -1, 1])
    np.testing.assert_array_equal(m["policy"][cmd], p[cmd] * [1, -1, -1])
    legs = np.asarray(mirrors.go1_joystick(None, act, env)[1][1])
    # FR (0-2) takes FL (3-5) with hip abduction negated; RL (9-11) takes RR (6-8)
    np.testing.assert_array_equal(legs, [-4, 5, 6, -1, 2, 3, -10, 11, 12, -7, 8, 9])
    dof = span(state, "dof_pos")
    np.testing.assert_array_equal(
        m["policy"][dof], p[dof][[3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8]] * np.tile([-1, 1, 1], 4)
    )
    c = np.asarray(x["critic"][0])
    feet, vel = span(priv, "feet_contact"), span(priv, "feet_vel")
    np.testing.assert_array_equal(m["critic"][feet], c[feet][[1, 0, 3, 2]])
    fr_vel = c[vel].reshape(4, 3)
    np.testing.assert_array_equal(m["critic"][vel].reshape(4, 3), fr_vel[[1, 0, 3, 2]] * [1, -1, 1])
    np.testing.assert_array_equal(
        m["critic"][span(priv, "state_command")], c[span(priv, "state_command")] * [1, -1, -1]
    )


def test_t1_and_ant_mirror_by_hand():
    """T1: left arm/leg <-> right, roll and yaw joints negated (head yaw, waist too). Ant: legs
    1<->4 and 2<->3 (qpos order), hips negated; actuators in leg order 4, 1, 2, 3."""
    t1 = np.asarray(
        mirrors.t1_joystick(None, jnp.arange(23.0)[None] + 1, layout_env("T1JoystickFlatTerrain", 23))[1][1]
    )
    np.testing.assert_array_equal(t1[:2], [-1, 2])  # head yaw, pitch
    np.testing.assert_array_equal(t1[2:6], [7, -8, 9, -10])  # left arm from the right one
    np.testing.assert_array_equal(t1[10], -11)  # waist yaw
    np.testing.assert_array_equal(t1[11:17], [18, -19, -20, 21, 22, -23])  # left leg from the right
    env = SymmetryEnv("ant", {}, {"policy": 27}, 8)
    obs, act = mirrors.ant({"policy": jnp.arange(27.0)[None] + 1}, jnp.arange(8.0)[None] + 1, env)
    o = np.asarray(obs["policy"][1])
    np.testing.assert_array_equal(o[:5], [1, 2, -3, 4, -5])  # z, quaternion (w, -x, y, -z)
    np.testing.assert_array_equal(o[5:13], [-12, 13, -10, 11, -8, 9, -6, 7])  # hip_4, ankle_4 -> leg 1, ...
    np.testing.assert_array_equal(o[13:19], [14, -15, 16, -17, 18, -19])  # velocity, angular velocity
    np.testing.assert_array_equal(np.asarray(act[1]), [-3, 4, -1, 2, -7, 8, -5, 6])


MODEL_MIRRORS = {
    "Go1JoystickFlatTerrain": mirrors.GO1_JOINTS,
    "SpotFlatTerrainJoystick": mirrors.SPOT_JOINTS,
    "BarkourJoystick": mirrors.BARKOUR_JOINTS,
    "T1JoystickFlatTerrain": mirrors.T1_JOINTS,
    "BerkeleyHumanoidJoystickFlatTerrain": mirrors.BERKELEY_JOINTS,
    "Op3Joystick": mirrors.OP3_JOINTS,
}


@pytest.mark.parametrize("task", list(MODEL_MIRRORS))
def test_joint_mirrors_follow_the_models_joint_axes(task):
    """Each actuated joint's partner and sign checked against the robot's model at its standing
    keyframe. The reflection y -> -y turns a rotation by q about the world axis a into a rotation
    by q about -R a (R = diag(1, -1, 1): an axis is an axial vector), so the partner takes the same
    value where its axis is -R a and the negated value where its axis is R a; and the standing pose,
    symmetric, is its own mirror image."""
    import mujoco
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(task)
    model = registry.load(task).mj_model
    data = mujoco.MjData(model)
    data.qpos[:] = model.key_qpos[0]
    mujoco.mj_forward(model, data)
    joints = model.actuator_trnid[:, 0]
    axes, pose = data.xaxis[joints], data.qpos[model.jnt_qposadr[joints]]
    perm, sign = MODEL_MIRRORS[task]
    assert len(perm) == model.nu
    reflect = np.diag([1.0, -1.0, 1.0])
    for i, (partner, s) in enumerate(zip(perm, sign, strict=True)):
        want = -s * (reflect @ axes[i])
        np.testing.assert_allclose(axes[partner], want, atol=0.02, err_msg=model.joint(joints[i]).name)
    np.testing.assert_allclose(pose[perm] * sign, pose, atol=1e-6)


def test_spot_barkour_and_berkeley_humanoid_mirror_by_hand():
    """Spot: FL <-> FR, HL <-> HR, abduction negated, the joint-error history frame by frame;
    Barkour: the sides swapped (front left <-> front right, hind left <-> hind right), no sign;
    Berkeley Humanoid: left leg <-> right leg, hip rotation, hip and ankle abduction negated."""
    spot = layout_env("SpotFlatTerrainJoystick", 12, {"history_len": 3})
    x = jnp.arange(12.0)[None] + 1
    legs = np.asarray(mirrors.spot_joystick(None, x, spot)[1][1])
    np.testing.assert_array_equal(legs, [-4, 5, 6, -1, 2, 3, -10, 11, 12, -7, 8, 9])
    obs = {"policy": jnp.arange(spot.obs_sizes["policy"], dtype=jnp.float32)[None] + 1}
    m = np.asarray(mirrors.spot_joystick(obs, None, spot)[0]["policy"][1])
    p = np.asarray(obs["policy"][0])
    history = span(spot.components["policy"], "dof_pos_error_history")
    frames = p[history].reshape(3, 12)[:, [3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8]] * np.tile([-1, 1, 1], 4)
    np.testing.assert_array_equal(m[history], frames.ravel())
    barkour = np.asarray(mirrors.barkour_joystick(None, x, layout_env("BarkourJoystick", 12))[1][1])
    np.testing.assert_array_equal(barkour, [7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6])
    berkeley = layout_env("BerkeleyHumanoidJoystickFlatTerrain", 12)
    legs = np.asarray(mirrors.berkeley_humanoid_joystick(None, x, berkeley)[1][1])
    np.testing.assert_array_equal(legs, [-7, -8, 9, 10, 11, -12, -1, -2, 3, 4, 5, -6])


def test_op3_mirror_by_hand():
    """Op3: the head pan negated and the tilt kept, the arms and legs swapped with every joint
    negated; each of the stacked frames mirrored alike (gyro axial, up vector polar, command)."""
    op3 = layout_env("Op3Joystick", 20, {"obs_history_size": 3})
    x = jnp.arange(20.0)[None] + 1
    joints = np.asarray(mirrors.op3_joystick(None, x, op3)[1][1])
    arms = [-6, -7, -8, -3, -4, -5]
    legs = [-15, -16, -17, -18, -19, -20, -9, -10, -11, -12, -13, -14]
    np.testing.assert_array_equal(joints, [-1, 2, *arms, *legs])
    layout = op3.components["policy"]
    assert sum(n for _, n in layout) == 3 * 49
    obs = {"policy": jnp.arange(3 * 49, dtype=jnp.float32)[None] + 1}
    m = np.asarray(mirrors.op3_joystick(obs, None, op3)[0]["policy"][1])
    p = np.asarray(obs["policy"][0])
    for suffix in ("", "_prev1", "_prev2"):
        gyro, up, command = (p[span(layout, n + suffix)] for n in ("base_ang_vel", "upvector", "command"))
        np.testing.assert_array_equal(m[span(layout, "base_ang_vel" + suffix)], gyro * [-1, 1, -1])
        np.testing.assert_array_equal(m[span(layout, "upvector" + suffix)], up * [1, -1, 1])
        np.testing.assert_array_equal(m[span(layout, "command" + suffix)], command * [1, -1, -1])
        for name in ("dof_pos", "last_action"):
            block, mirrored = p[span(layout, name + suffix)], m[span(layout, name + suffix)]
            head, arms, legs = [-block[0], block[1]], [*block[5:8], *block[2:5]], [*block[14:], *block[8:14]]
            want = np.array([*head, *(-np.array(arms)), *(-np.array(legs))])
            np.testing.assert_array_equal(mirrored, want)


# ----------------------------------------------------------------------------- config and training

FUNC = "strl_jax.envs.symmetry:inverted_pendulum"


def sym_override(**kw) -> str:
    cfg = {"data_augmentation_func": FUNC} | kw
    body = ", ".join(
        f"{k}: {str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, str) else v}"
        for k, v in cfg.items()
    )
    return f"algorithm.symmetry_cfg={{{body}}}"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            sym_override(use_mirror_loss=True, mirror_coef=1.0),
            "unknown algorithm.symmetry_cfg key 'mirror_coef'; valid keys: ['data_augmentation_func'",
        ),
        (
            sym_override(use_mirror_loss=True, data_augmentation_func="not a function"),
            "package.module:function",
        ),
        (
            sym_override(use_mirror_loss=True, mirror_loss_coeff=-1.0),
            "mirror_loss_coeff must be a number >= 0",
        ),
        (sym_override(use_data_augmentation="yes"), "use_data_augmentation must be true or false"),
    ],
)
def test_symmetry_config_errors(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_config("inverted_pendulum", overrides=[override])


def test_symmetry_needs_a_feed_forward_ppo_and_an_importable_function(tmp_path):
    on = sym_override(use_data_augmentation=True)
    with pytest.raises(ConfigError, match="recurrent"):
        resolve_config("inverted_pendulum", overrides=[on, "policy.class_name=ActorCriticRecurrent"])
    with pytest.raises(ConfigError, match="not to algorithm.class_name Distillation"):
        resolve_config("inverted_pendulum", overrides=[on, "algorithm.class_name=Distillation"])
    missing = sym_override(use_data_augmentation=True, data_augmentation_func="strl_jax.envs.symmetry:nope")
    cfg = resolve_config("inverted_pendulum", overrides=tiny(missing, "runner.max_iterations=1"))
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        train(cfg, tmp_path / "missing", verbose=False)
    wrong_env = sym_override(use_data_augmentation=True, data_augmentation_func="strl_jax.envs.symmetry:ant")
    cfg = resolve_config("inverted_pendulum", overrides=tiny(wrong_env, "runner.max_iterations=1"))
    with pytest.raises(ConfigError, match="for Brax 'ant'"):
        train(cfg, tmp_path / "wrong", verbose=False)


def test_training_with_the_mirror_loss_makes_the_policy_symmetric(tmp_path):
    """Four iterations of inverted_pendulum with the mirror loss (no augmentation, whose mirrored
    samples would make the policy symmetric by themselves) and no observation normaliser (each
    update of its mean moves the mirror image of a normalised observation, an asymmetry no few
    steps undo): the policy's mirror error stays near zero, where PPO alone makes it asymmetric.

    `learning_runs.mirror_loss_rows`, also measured by bench/learning_spread.py (case `mirror`)."""
    rows = mirror_loss_rows(tmp_path / "run")
    assert len(rows) == 4
    for key in ("surrogate", "value_function", "entropy", "symmetry", "kl", "learning_rate"):
        assert all(np.isfinite(r[key]) for r in rows), key
    # BENCHMARKS.md, Learning spread: mirror loss: `symmetry` of iteration 4, seeds 0-4,
    # 1.3e-4 / 4.2e-4 / 2.5e-3 (the loss only logged, `use_mirror_loss=False`: 0.061-0.39):
    # margin 0.0075 to the worst.
    assert rows[-1]["symmetry"] < 0.01


def test_rsl_rl_symmetry_cfg_maps_to_algorithm_symmetry_cfg():
    """An rsl_rl train config's `symmetry_cfg` (with a strl_jax function) is strl_jax's, checked as one;
    the rsl_rl config written back for export leaves it out (no torch function to name)."""
    from strl_jax.configs.from_rsl_rl import from_rsl_rl_config

    sym = {"use_data_augmentation": True, "use_mirror_loss": False, "data_augmentation_func": FUNC}
    data = {"num_steps_per_env": 8, "algorithm": {"class_name": "PPO", "symmetry_cfg": sym}}
    assert from_rsl_rl_config(data)["algorithm"]["symmetry_cfg"] == sym
    off = from_rsl_rl_config({"num_steps_per_env": 8, "algorithm": {"symmetry_cfg": None}})
    assert "symmetry_cfg" not in off["algorithm"]
    cfg = resolve_config("inverted_pendulum", overrides=[sym_override(use_mirror_loss=True)])
    assert to_rsl_rl_train_cfg(cfg)["algorithm"]["symmetry_cfg"] is None


@pytest.mark.slow
def test_go1_mirror_matches_the_reflected_physical_state():
    """Reflect a Go1JoystickFlatTerrain state across the x-z plane (base y, quaternion (w, -x, y, -z),
    joints and controls by the joint table, linear velocity y, angular velocity x and z) and recompute
    the observation: it equals the mirrored observation of the original state. The Go1's IMU site
    sits 6.7 cm right of the sagittal plane, so for the check it is moved onto the plane (else its
    velocimeter picks up omega x offset); the accelerometer reads the one-iteration contact solve,
    which is not mirror-exact, and is left out."""
    require_playground()
    import mujoco
    from mujoco import mjx
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    task = "Go1JoystickFlatTerrain"
    config = registry.get_default_config(task)
    config.noise_config.level = 0.0
    use_offline_menagerie(task)
    env = registry.load(task, config=config)
    state = jax.jit(env.reset)(jax.random.PRNGKey(1))
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    for _ in range(15):
        state = step(state, jnp.asarray(rng.uniform(-1, 1, 12), jnp.float32))
    imu = mujoco.mj_name2id(env.mj_model, mujoco.mjtObj.mjOBJ_SITE, "imu")
    model = env.mjx_model.replace(site_pos=env.mjx_model.site_pos.at[imu, 1].set(0.0))
    joints = lambda x: mirrors.apply(x, mirrors.GO1_JOINTS)  # noqa: E731
    d = state.data.replace(qacc_warmstart=jnp.zeros_like(state.data.qacc_warmstart))
    polar, axial = jnp.array([1.0, -1.0, 1.0]), jnp.array([-1.0, 1.0, -1.0])
    reflected = d.replace(
        qpos=jnp.concatenate(
            [d.qpos[:3] * polar, d.qpos[3:7] * jnp.array([1.0, -1, 1, -1]), joints(d.qpos[7:])]
        ),
        qvel=jnp.concatenate([d.qvel[:3] * polar, d.qvel[3:6] * axial, joints(d.qvel[6:])]),
        ctrl=joints(d.ctrl),
        xfrc_applied=d.xfrc_applied.at[:, :3].multiply(polar).at[:, 3:].multiply(axial),
    )
    feet = np.array([1, 0, 3, 2])
    info = dict(state.info)
    reflected_info = info | {
        "last_act": joints(info["last_act"]),
        "command": info["command"] * jnp.array([1.0, -1.0, -1.0]),
        "last_contact": info["last_contact"][feet],
        "feet_air_time": info["feet_air_time"][feet],
    }
    observe = jax.jit(lambda data, info: env._get_obs(mjx.forward(model, data), info))  # one compile for both
    obs = observe(d, dict(info))
    got = observe(reflected, reflected_info)
    sym_env = layout_env(task, 12)
    groups = {"policy": "state", "critic": "privileged_state"}
    want, _ = mirrors.go1_joystick({g: obs[k][None] for g, k in groups.items()}, None, sym_env)
    for group, key in groups.items():
        start = 0
        for name, size in sym_env.components[group]:
            if name != "accelerometer":
                np.testing.assert_allclose(
                    got[key][start : start + size],
                    want[group][1, start : start + size],
                    atol=1e-4,
                    err_msg=name,
                )
            start += size
