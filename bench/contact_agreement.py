"""Do MJX and C MuJoCo agree on the same state? The accelerations and the feet's contacts of each
state a policy visits, computed by both engines.

    python bench/contact_agreement.py RUN [--checkpoint N] [--task TASK] [--envs 4] [--steps 300]
        [--hfield-contacts mjx|mujoco] [--out FILE.json]

The policy acts in the JAX env (nominal physics, noise-free evaluation as `deploy` runs it) for
`--steps` steps in `--envs` envs. Every visited state (joint positions, velocities, controls) is
then handed to `mujoco.mjx.forward` (MJX's JAX implementation, float32) and to `mujoco.mj_forward`
(C, float64), and the two results compared: the base's linear and angular acceleration and the
joints', and per foot geom the contacts each engine makes and its deepest penetration. `--task`
runs the same policy on another task with the same observation (Go1JoystickFlatTerrain beside
Go1JoystickRoughTerrain: a plane against a heightfield) as a control. `--hfield-contacts mujoco`
has MJX collide spheres with the heightfield by C MuJoCo's rule (`env.hfield_contacts`,
strl_jax.envs.hfield_contacts) in its forward pass.

A policy that walks in the JAX env and falls in C MuJoCo (`deploy`) meets different physics; this
says where: if the engines disagree on the states the policy visits, training saw MJX's contacts
and not C MuJoCo's. MJX collides a sphere with a heightfield through the prisms under it and keeps
at most 4 contacts, only where they penetrate (`hfield_sphere` in MJX's collision_convex.py:
https://github.com/google-deepmind/mujoco/blob/main/mjx/mujoco/mjx/_src/collision_convex.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from common import format_table, machine_info
from go1_walk import evaluation_env

PERCENTILES = (50, 90, 99)
FOOT_NAMES = ("FR", "FL", "RR", "RL", "left_foot", "right_foot")  # Playground's foot geoms


def foot_geoms(model) -> dict[str, int]:
    """The feet's collision geoms: the geoms of the task's `feet_pos` sites' bodies that touch the floor
    (Playground's quadrupeds name them FR, FL, RR, RL)."""
    import mujoco

    names = {model.geom(i).name: i for i in range(model.ngeom)}
    feet = {n: i for n, i in names.items() if n in FOOT_NAMES}
    if not feet:
        raise SystemExit(f"no foot geoms named {list(FOOT_NAMES)} in the model: {sorted(names)}")
    assert all(model.geom_type[i] != mujoco.mjtGeom.mjGEOM_PLANE for i in feet.values())
    return feet


def native_forward(model, qpos, qvel, ctrl, feet: dict[str, int]) -> tuple[np.ndarray, dict]:
    """C MuJoCo's accelerations at each state, and per foot its contact count and deepest distance."""
    import mujoco

    data = mujoco.MjData(model)
    qacc, contacts = [], {name: ([], []) for name in feet}
    for q, v, c in zip(qpos, qvel, ctrl, strict=True):
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, v, c
        mujoco.mj_forward(model, data)
        qacc.append(data.qacc.copy())
        geoms = np.stack([data.contact.geom1[: data.ncon], data.contact.geom2[: data.ncon]], -1)
        dist = np.asarray(data.contact.dist[: data.ncon])
        for name, g in feet.items():
            mine = np.any(geoms == g, axis=-1) & (dist < 0)
            contacts[name][0].append(int(mine.sum()))
            contacts[name][1].append(float(dist[mine].min()) if mine.any() else 0.0)
    return np.asarray(qacc), {k: (np.asarray(a), np.asarray(b)) for k, (a, b) in contacts.items()}


def mjx_forward(
    mjx_model, qpos, qvel, ctrl, feet: dict[str, int], rule: str = "mjx", slots: int = 4
) -> tuple[np.ndarray, dict]:
    """MJX's accelerations at the same states, and per foot its contacts that penetrate, with the
    heightfield contacts of `rule` (`env.hfield_contacts`; `slots` per pair under `mujoco`)."""
    import contextlib

    import jax
    from mujoco import mjx

    from strl_jax.envs.hfield_contacts import mujoco_hfield_contacts

    rule_open = lambda: mujoco_hfield_contacts(slots) if rule == "mujoco" else contextlib.nullcontext()  # noqa: E731
    with rule_open():
        template = mjx.make_data(mjx_model)

    def one(q, v, c):
        with rule_open():
            d = mjx.forward(mjx_model, template.replace(qpos=q, qvel=v, ctrl=c))
        contact = d._impl.contact
        return d.qacc, contact.geom, contact.dist

    qacc, geom, dist = jax.device_get(jax.jit(jax.vmap(one))(qpos, qvel, ctrl))
    contacts = {}
    for name, g in feet.items():
        mine = np.any(geom == g, axis=-1) & (dist < 0)
        deepest = np.where(mine, dist, 0.0).min(axis=-1)
        contacts[name] = (mine.sum(axis=-1), deepest)
    return np.asarray(qacc, np.float64), contacts


def spread(values: np.ndarray) -> str:
    return " / ".join(f"{np.percentile(values, p):.3g}" for p in PERCENTILES)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--checkpoint", type=int, default=None, help="default: the newest")
    p.add_argument("--task", default=None, help="run the policy on this task (default: its own)")
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hfield-contacts", choices=("mjx", "mujoco"), default="mjx", help="MJX's contact rule")
    p.add_argument(
        "--slots", type=int, default=None, help="contacts per pair under mujoco (default: the rule's)"
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    import jax

    from strl_jax.envs.hfield_contacts import SLOTS
    from strl_jax.envs.native_physics import mjx_env_of
    from strl_jax.envs.perception import height_scan_setting
    from strl_jax.inference import load_policy
    from strl_jax.networks.policy import reset_hidden_groups
    from strl_jax.train_loops.evaluation import act_in_env

    policy = load_policy(args.run_dir, args.checkpoint)
    task = args.task or policy.cfg.env.task
    spec = {"task": task, "eval_envs": args.envs, "episode_length": args.steps + 1}
    env_cfg = policy.cfg.env
    if task != env_cfg.task and env_cfg.height_scan:
        # another task's ground may be a plane: the scan goes, which only the policy must not read
        if "policy" in height_scan_setting(env_cfg.height_scan).groups:
            raise SystemExit(f"the policy reads the height scan; it cannot act on {task!r}'s ground")
        env_cfg = dataclasses.replace(env_cfg, height_scan={})
    env = evaluation_env(env_cfg, spec, {}, randomize=False)
    base = mjx_env_of(env.env)
    actor = policy.actor

    def rollout(key):
        state, obs = env.reset(key)

        def keep(s, _obs, _action, res):
            d = s.brax_state.data
            return d.qpos, d.qvel, d.ctrl, res.terminated

        act = lambda o, h, _k: actor.act(policy.params, policy.normalizers, o, h)  # noqa: E731
        carry = (state, obs, actor.initial_hidden(args.envs))
        _, out = act_in_env(env, act, reset_hidden_groups, carry, keep, length=args.steps)
        return out

    qpos, qvel, ctrl, term = jax.device_get(jax.jit(rollout)(jax.random.PRNGKey(args.seed)))
    alive = (np.cumsum(term, axis=0) - term) == 0  # up to and with each env's first fall
    pick = np.flatnonzero(alive.reshape(-1))
    flat = lambda x: np.asarray(x).reshape(-1, x.shape[-1])[pick]  # noqa: E731
    qpos, qvel, ctrl = flat(qpos), flat(qvel), flat(ctrl)

    feet = foot_geoms(base.mj_model)
    native_qacc, native_contacts = native_forward(base.mj_model, qpos, qvel, ctrl, feet)
    slots = args.slots or SLOTS
    mjx_qacc, mjx_contacts = mjx_forward(base.mjx_model, qpos, qvel, ctrl, feet, args.hfield_contacts, slots)

    parts = {"base linear": slice(0, 3), "base angular": slice(3, 6), "joints": slice(6, None)}
    rows, report = [], {"task": task, "run_dir": str(args.run_dir), "states": len(pick), "parts": {}}
    report["hfield_contacts"] = args.hfield_contacts
    if args.hfield_contacts == "mujoco":
        report["slots"] = slots
    for what, cut in parts.items():
        gap = np.linalg.norm(mjx_qacc[:, cut] - native_qacc[:, cut], axis=-1)
        size = np.linalg.norm(native_qacc[:, cut], axis=-1)
        rows.append([f"{what} acceleration", spread(size), spread(gap)])
        report["parts"][what] = {"native_norm": spread(size), "difference_norm": spread(gap)}
    feet_rows, report["feet"] = [], {}
    for name in feet:
        n_native, d_native = native_contacts[name]
        n_mjx, d_mjx = mjx_contacts[name]
        touching = (n_native > 0) | (n_mjx > 0)
        agree = float(np.mean((n_native > 0) == (n_mjx > 0)))
        mean_touching = (np.mean(n_native[touching]), np.mean(n_mjx[touching])) if any(touching) else None
        counts = "-" if mean_touching is None else f"{mean_touching[0]:.2f} / {mean_touching[1]:.2f}"
        both = (n_native > 0).any() and (n_mjx > 0).any()
        depth = f"{-np.median(d_native[n_native > 0]) * 1e3:.2f} / {-np.median(d_mjx[n_mjx > 0]) * 1e3:.2f}"
        share = f"{np.mean(n_native > 0):.2f} / {np.mean(n_mjx > 0):.2f}"
        most = f"{n_native.max()} / {n_mjx.max()}"
        same = float(np.mean(n_native[touching] == n_mjx[touching])) if any(touching) else 1.0
        feet_rows.append([name, share, f"{agree:.3f}", counts, most, f"{same:.3f}", depth if both else "-"])
        report["feet"][name] = {
            "in_contact_native": float(np.mean(n_native > 0)),
            "in_contact_mjx": float(np.mean(n_mjx > 0)),
            "agree": agree,
            "most_contacts_native": int(n_native.max()),
            "most_contacts_mjx": int(n_mjx.max()),
            "same_count_when_touching": same,
        }
    print(
        f"{task}: {len(pick)} states of {args.envs} envs x {args.steps} steps (before any fall); "
        f"MJX's heightfield contacts: {args.hfield_contacts}"
        + (f", {slots} per pair" if args.hfield_contacts == "mujoco" else "")
    )
    print(format_table(["quantity", "C MuJoCo norm p50/p90/p99", "MJX - C norm p50/p90/p99"], rows))
    print(
        format_table(
            [
                "foot",
                "in contact C / MJX",
                "agree",
                "contacts touching C / MJX",
                "most C / MJX",
                "same count",
                "median depth mm C / MJX",
            ],
            feet_rows,
        )
    )
    if args.out:
        report["machine"] = machine_info()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
