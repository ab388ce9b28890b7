"""st_rl's TwoStageRunner: `runner.pretrain_iterations` on a RolloutDataset, then ordinary RL.

The replay order and the stage switch are checked on a small synthetic dataset with the tiny
pendulum run; the head start on the 200-step pendulum expert's recorded episodes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning_runs import (
    PENDULUM_COMMON,
    filtered_pull_run,
    label_pull_run,
    pretraining_run,
    rl_imitation_run,
    two_stage_overrides,
)

from strl_jax.agents.demonstrations import DATASET_PART, DemonstrationPart, dataset_per_step, dataset_returns
from strl_jax.agents.parts import UpdateContext
from strl_jax.buffers.motion_files import METADATA_FILE, write_trajectory
from strl_jax.buffers.rollout_dataset import (
    DatasetCursor,
    advance,
    envs_used_up,
    init_cursor,
    load_dataset_arrays,
    pretrain_settings,
    step_index,
)
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.errors import ConfigError
from strl_jax.runners.runner import build_programs, train
from strl_jax.runners.stages import pretrain_source
from strl_jax.train import main

LENGTHS = [3, 5, 4, 6, 3, 7]
TIME_FIELDS = ("wall_time", "iteration_time", "fps")


def rows(path: Path) -> list[dict]:
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIME_FIELDS} for line in lines]


def write_dataset(
    out: Path,
    obs_size: int,
    action_size: int,
    lengths=LENGTHS,
    critic: bool = False,
    reward: float = 0.5,
    mean_actions: bool = False,
) -> None:
    """Trajectories whose every value encodes (trajectory, frame): obs[..., 0] = 100 j + t; every
    step earns `reward`; odd trajectories end on a time-out; `mean_actions` (with `mean_actions`)
    are the opposite of the actions."""
    out.mkdir(parents=True)
    (out / METADATA_FILE).write_text(json.dumps({"format": "strl_jax.motion_dataset"}))
    for j, length in enumerate(lengths):
        code = 100.0 * j + np.arange(length, dtype=np.float32)
        obs = np.repeat(code[:, None], obs_size, 1) / 1000.0
        arrays = {
            "obs": obs,
            "actions": np.tanh(np.repeat(code[:, None], action_size, 1) / 700.0),
            "rewards": np.full(length, reward, np.float32),
            "dones": np.eye(1, length, length - 1, dtype=np.uint8)[0],
            "timeouts": np.eye(1, length, length - 1, dtype=np.uint8)[0] * (j % 2),
        }
        if critic:
            arrays["critic_obs"] = obs
        if mean_actions:
            arrays["mean_actions"] = -arrays["actions"]
        write_trajectory(out / f"traj_{j:06d}.npz", arrays)


def settings(path: Path, **more) -> dict:
    return pretrain_settings({"data_dir": str(path), **more})


def test_virtual_envs_play_the_trajectories_in_turn(tmp_path):
    write_dataset(tmp_path / "d", 4, 1)
    arrays = load_dataset_arrays(settings(tmp_path / "d", dataset_loops=2), {"policy": (4,)}, 1, seed=0)
    assert list(arrays.start) == [0, 3, 8, 12, 18, 21] and list(arrays.length) == LENGTHS
    assert list(arrays.order) == [0, 1, 2, 3, 4, 5] * 2 and int(arrays.end) == 12
    num_envs = 4
    cursor = init_cursor(jnp.arange(num_envs))
    seen = [[] for _ in range(num_envs)]
    for _ in range(12):
        index = step_index(arrays, cursor)
        for i, code in enumerate(np.asarray(arrays.obs["policy"][index, 0]) * 1000):
            seen[i].append(round(float(code)))
        cursor = advance(arrays, cursor, index, num_envs)
    # env 0 plays trajectory 0 (3 frames), then trajectory 4 (position 4), then 2 (position 8)
    assert seen[0] == [0, 1, 2, 400, 401, 402, 200, 201, 202, 203, 0, 1]
    assert seen[1] == [100, 101, 102, 103, 104, 500, 501, 502, 503, 504, 505, 506]
    assert float(envs_used_up(arrays, cursor)) == 2  # envs 0 and 2 are past position 12 = 2 passes x 6
    assert (
        float(
            envs_used_up(
                arrays, DatasetCursor(*(jnp.asarray(x) for x in ([12, 13], [0, 0], [0.0, 0.0], [0, 0])))
            )
        )
        == 2
    )


def test_shuffled_order_is_a_permutation_per_pass(tmp_path):
    write_dataset(tmp_path / "d", 4, 1)
    arrays = load_dataset_arrays(
        settings(tmp_path / "d", dataset_loops=-1, random_shuffle_traj_order=True),
        {"policy": (4,)},
        1,
        seed=3,
    )
    passes = np.asarray(arrays.order).reshape(-1, len(LENGTHS))
    assert all(sorted(p) == list(range(len(LENGTHS))) for p in passes)
    assert len({tuple(p) for p in passes}) > 1 and int(arrays.end) == np.iinfo(np.int32).max


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {},
            "runner.pretrain_dataset needs data_dir: a dataset folder written by python -m strl_jax.collect",
        ),
        (
            {"data_dir": "x", "subset_traj": 3},
            "unknown runner.pretrain_dataset key 'subset_traj'; valid keys: \\['data_dir',",
        ),
        ({"data_dir": ""}, "data_dir must be a dataset folder"),
        ("x", "runner.pretrain_dataset must be a mapping with keys \\['data_dir',"),
        ({"data_dir": "x", "dataset_loops": 0}, "positive integer or -1"),
        ({"data_dir": "x", "imitation_loss_coef": -1}, "number >= 0"),
        ({"data_dir": "x", "rl_imitation_coef": -1}, "rl_imitation_coef must be a number >= 0"),
        ({"data_dir": "x", "rl_imitation_coef": 5}, "needs rl_imitation_iterations >= 1"),
        ({"data_dir": "x", "rl_imitation_iterations": 2.5}, "rl_imitation_iterations must be an integer"),
        (
            {"data_dir": "x", "rl_imitation_filter": "q"},
            "rl_imitation_filter must be one of \\['none', 'advantage', 'reward'\\]",
        ),
        (
            {"data_dir": "x", "imitation_labels": "teacher"},
            "imitation_labels must be one of \\['actions', 'mean_actions'\\]",
        ),
        (
            {"data_dir": "x", "defaults": "rsl_rl"},
            "defaults must be one of \\['head_start', 'st_rl'\\], got 'rsl_rl'",
        ),
        *[
            ({"data_dir": "x", "learning_rate": bad}, "learning_rate must be a number > 0")
            for bad in (0, -1e-3, "fast", True, float("nan"))
        ],
    ],
)
def test_pretrain_settings_errors(raw, message):
    with pytest.raises(ConfigError, match=message):
        pretrain_settings(raw)


def test_pretrain_learning_rate_is_a_float_or_unset():
    assert pretrain_settings({"data_dir": "x", "learning_rate": None}).learning_rate is None
    for given, rate in ((3e-4, 3e-4), (1, 1.0), ("1e-3", 1e-3)):  # YAML reads 1e-3 as a string
        assert pretrain_settings({"data_dir": "x", "learning_rate": given}).learning_rate == rate


def test_dataset_that_does_not_fit_is_refused(tmp_path):
    write_dataset(tmp_path / "d", 4, 1)
    with pytest.raises(ConfigError, match="'policy' observations are \\(4,\\), the policy's \\(5,\\)"):
        load_dataset_arrays(settings(tmp_path / "d"), {"policy": (5,)}, 1, seed=0)
    with pytest.raises(ConfigError, match="actions of size \\(1,\\), the env's 2"):
        load_dataset_arrays(settings(tmp_path / "d"), {"policy": (4,)}, 2, seed=0)
    with pytest.raises(ConfigError, match="no metadata.json"):
        load_dataset_arrays(settings(tmp_path), {"policy": (4,)}, 1, seed=0)
    labelled = settings(tmp_path / "d", imitation_labels="mean_actions")
    with pytest.raises(
        ConfigError, match="traj_000000.npz holds no 'mean_actions'.*imitation_labels: actions"
    ):
        load_dataset_arrays(labelled, {"policy": (4,)}, 1, seed=0)
    # left to the default, trajectories without mean actions are imitated on their actions
    arrays = load_dataset_arrays(settings(tmp_path / "d"), {"policy": (4,)}, 1, seed=0)
    np.testing.assert_array_equal(arrays.labels, arrays.actions)


def test_labels_are_the_chosen_array(tmp_path):
    write_dataset(tmp_path / "d", 4, 2, mean_actions=True)
    for labels, sign in (("actions", 1.0), ("mean_actions", -1.0)):
        arrays = load_dataset_arrays(
            settings(tmp_path / "d", imitation_labels=labels), {"policy": (4,)}, 2, 0
        )
        np.testing.assert_array_equal(arrays.labels, sign * arrays.actions)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.class_name=TPPO"], "applies to"),
        (["policy.class_name=ActorCriticRecurrent"], "feed-forward policy"),
        (["runner.num_seeds=2"], "trains one run"),
        (["policy.distribution=tanh_gaussian"], "use policy.distribution=gaussian for pretraining"),
    ],
)
def test_pretraining_config_errors(tmp_path, overrides, message):
    data = f"runner.pretrain_dataset={{data_dir: {tmp_path}}}"
    with pytest.raises(ConfigError, match=message):
        resolve_config("inverted_pendulum", overrides=["runner.pretrain_iterations=2", data, *overrides])


# ---------------------------------------------------------------------------- the stage switch
@pytest.fixture(scope="module")
def tiny_two_stage(tmp_path_factory) -> tuple[list[str], Path]:
    """A tiny run: 3 iterations on the synthetic dataset (used up during the third), then 3 RL."""
    root = tmp_path_factory.mktemp("two_stage")
    overrides = two_stage_overrides(root)
    assert main(["--log_dir", str(root / "run"), "--quiet", *overrides]) == 0
    return overrides, root


def test_pretraining_rows_then_rl_rows(tiny_two_stage):
    _, root = tiny_two_stage
    got = rows(root / "run")
    # 16 virtual envs x 8 steps: every env is past 12 trajectories' positions once env 0..11 have
    # finished their 5-frame trajectory (iteration 1); the env takes over from iteration 2
    assert [r.get("pretraining") for r in got] == [1.0, None, None, None, None, None]
    assert got[0]["dataset_used_up"] == 1.0 and got[0]["env_steps"] == 0
    assert [r["env_steps"] for r in got[1:]] == [128, 256, 384, 512, 640]
    assert got[0]["imitation"] > 0 and "imitation" not in got[1]
    assert got[0]["mean_reward"] == pytest.approx(2.5)  # 5 frames x 0.5


def test_resume_after_the_dataset_was_used_up_is_exact(tiny_two_stage, tmp_path):
    _, root = tiny_two_stage
    for step in (2, 4):
        copy = tmp_path / f"from_{step}"
        shutil.copytree(root / "run", copy)
        assert main(["--resume", str(copy), "--checkpoint", str(step), "--quiet"]) == 0
        assert rows(copy) == rows(root / "run")


def test_resume_across_the_stage_switch_is_exact(tiny_two_stage, tmp_path):
    overrides, root = tiny_two_stage
    longer = [o for o in overrides if not o.startswith("runner.pretrain_dataset")]
    longer.append(f"runner.pretrain_dataset={{data_dir: {root / 'data'}, dataset_loops: -1}}")
    full = tmp_path / "full"
    assert main(["--log_dir", str(full), "--quiet", *longer]) == 0
    assert [r.get("pretraining") for r in rows(full)] == [1.0] * 4 + [None] * 2
    shutil.copytree(full, tmp_path / "resumed")
    assert main(["--resume", str(tmp_path / "resumed"), "--checkpoint", "2", "--quiet"]) == 0
    assert rows(tmp_path / "resumed") == rows(full)


def test_imitation_pulls_towards_the_chosen_labels(tiny_two_stage, tmp_path):
    """`imitation_labels: mean_actions`: pretraining's imitation term pulls the policy's mean
    towards the dataset's `mean_actions`, not the executed `actions` (opposite ones here).
    `learning_runs.label_pull_run`, also measured by bench/learning_spread.py (case `dataset_pull`)."""
    overrides, root = tiny_two_stage
    run = label_pull_run(overrides, root, tmp_path / "run")
    # BENCHMARKS.md, Learning spread: pull to the labels: seeds 1-6, 0.174 / 0.31 / 0.418 (no
    # imitation weight: 1.58), margin 0.18 to the worst.
    assert run["to_labels"] < 0.6 * run["to_actions"], run


def grown(rate: float, steps: int) -> np.float32:
    """`rate` after `steps` float32 steps of the adaptive rule that all grow it (cap 1e-2)."""
    lr = np.float32(rate)
    for _ in range(steps):
        lr = min(np.float32(1e-2), lr * np.float32(1.5))
    return lr


def test_fixed_pretraining_rate_leaves_the_schedule_alone(tiny_two_stage, tmp_path):
    """With a desired KL of 1e9 the adaptive rule grows the rate at every step (the KL is positive,
    at least kl_epsilon = 1e-5 per action dimension), and the scheduler halves it every iteration:
    the pretraining rows step at the fixed rate all the same, and the env stage starts from
    `algorithm.learning_rate` (4 steps of the rule, then one of the scheduler)."""
    overrides, root = tiny_two_stage
    fixed = [o for o in overrides if not o.startswith("runner.pretrain_dataset")]
    data = f"{{data_dir: {root / 'data'}, dataset_loops: -1, learning_rate: 3.0e-4}}"
    fixed += [
        f"runner.pretrain_dataset={data}",
        "runner.pretrain_iterations=2",
        "runner.max_iterations=3",
        "algorithm.desired_kl=1.0e9",
        "algorithm.lr_scheduler_class_name=ExponentialLR",
        "algorithm.lr_scheduler={gamma: 0.5}",
    ]
    assert main(["--log_dir", str(tmp_path / "run"), "--quiet", *fixed]) == 0
    got = rows(tmp_path / "run")
    assert [r.get("pretraining") for r in got] == [1.0, 1.0, None]
    assert [r["learning_rate"] for r in got[:2]] == [float(np.float32(3e-4))] * 2
    assert got[2]["learning_rate"] == float(grown(1e-3, 4) * np.float32(0.5))


def stage_values(cfg) -> tuple[float, float | None, np.ndarray]:
    """The imitation weight, the fixed rate (None: the schedule's) and the labels that the
    pretraining steps of `cfg` take."""
    programs = build_programs(cfg)
    source = pretrain_source(cfg, programs)
    (dataset_part,) = [p for p in programs.learner.parts if p.name == DATASET_PART]
    return dataset_part.coef, source.fixed_rate, np.asarray(source.dataset.labels)


def test_pretraining_defaults_are_the_head_start_and_st_rl_is_an_option(tmp_path):
    """With only `pretrain_iterations` and the dataset set, the pretraining stage imitates the
    dataset's mean actions at weight 100 with the fixed rate 3e-4 (`defaults: head_start`), and
    its imitation distance falls; `defaults: st_rl` restores st_rl's weight 1 on the executed
    actions with the algorithm's schedule. `learning_runs.pretraining_run`, also measured by
    bench/learning_spread.py (case `pretraining`)."""
    run = pretraining_run(tmp_path)
    coef, rate, labels = stage_values(run["head_start"])
    assert (coef, rate) == (100.0, 3e-4)
    np.testing.assert_array_equal(labels, -run["actions"])  # the dataset's mean actions
    coef, rate, labels = stage_values(run["st_rl"])
    assert (coef, rate) == (1.0, None)
    np.testing.assert_array_equal(labels, run["actions"])

    got = run["rows"]
    assert [r.get("pretraining") for r in got] == [1.0] * 8
    assert [r["learning_rate"] for r in got] == [float(np.float32(3e-4))] * 8
    imitation = [r["imitation"] for r in got]
    # from the second row: the first update saw raw observations (the normalisers take in the
    # dataset after it). BENCHMARKS.md, Learning spread: pretraining: last over second, seeds 1-6,
    # 0.704 / 0.79 / 0.826 (the rate at its 1e-5 floor: 0.990-0.995): margin 0.074 to the worst.
    assert imitation[-1] < 0.9 * imitation[1], imitation


@pytest.mark.parametrize(
    "raw, values",
    [
        ({"learning_rate": None, "imitation_labels": "actions"}, [100.0, None, "actions"]),
        ({"defaults": "st_rl", "imitation_loss_coef": 0, "learning_rate": 1e-3}, [0, 1e-3, "actions"]),
    ],
)
def test_keys_set_by_hand_win_over_the_defaults_set(raw, values):
    """A key in `runner.pretrain_dataset` wins over its `defaults` set (`null`: the schedule)."""
    got = pretrain_settings({"data_dir": "x", **raw})
    assert [getattr(got, k) for k in ("imitation_loss_coef", "learning_rate", "imitation_labels")] == values


# ---------------------------------------------------------------------------- the head start
PENDULUM = [
    *PENDULUM_COMMON,
    "runner.num_steps_per_env=16",
    "runner.eval_interval=5",
    "runner.max_iterations=5",
]


def test_pretraining_on_expert_episodes_gives_a_head_start(pendulum_expert, tmp_path):
    """After 5 iterations on 3,200 steps of the expert acting with its sampled actions (no env
    step taken), the deterministic policy balances for the whole episode, where 5 iterations of RL
    from scratch (10,240 env steps) reach 31-150 of the 200 steps (seeds 1-4: 200 each after
    pretraining, with the default `defaults: head_start` and with `defaults: st_rl`). Recorded
    with the expert's mean actions instead, the dataset covers only upright states and the head
    start is unreliable (1 of 3 seeds, with st_rl's values)."""
    expert, expert_return = pendulum_expert
    assert expert_return >= 190
    data = tmp_path / "expert_data"
    args = [str(expert), "--out", str(data), "--num_envs", "16", "--min_timesteps", "3200",
            "--amp_obs_components", "joint_pos,joint_vel", "--sample_actions"]  # fmt: skip
    assert collect_main(args) == 0
    pretrain = [
        "runner.pretrain_iterations=5",
        f"runner.pretrain_dataset={{data_dir: {data}, dataset_loops: -1}}",
    ]
    two_stage = train(
        resolve_config("inverted_pendulum_teacher", overrides=[*PENDULUM, *pretrain]),
        tmp_path / "a",
        verbose=False,
    )
    fresh = train(
        resolve_config("inverted_pendulum_teacher", overrides=PENDULUM), tmp_path / "b", verbose=False
    )
    assert all(r.get("pretraining") == 1.0 and r["env_steps"] == 0 for r in two_stage.rows)
    assert two_stage.last_eval_reward >= 150
    assert two_stage.last_eval_reward >= fresh.last_eval_reward + 25


def test_rl_imitation_carries_the_pull_past_the_switch_and_resumes_exactly(tiny_two_stage, tmp_path):
    """`rl_imitation_coef` (agents.demonstrations): no weight while pretraining, then the given
    weight falling linearly over `rl_imitation_iterations` RL iterations; the RL updates pull the
    action mean towards the dataset's labels (which pretraining, with no imitation weight of its
    own, left alone; its `mean_actions` here, the opposite of its actions), and a run resumed in
    the middle of the decay repeats every row. `learning_runs.rl_imitation_run`, also measured by
    bench/learning_spread.py (case `dataset_pull`)."""
    overrides, root = tiny_two_stage
    run = rl_imitation_run(overrides, root, tmp_path / "run")
    got = rows(tmp_path / "run")
    assert [r.get("pretraining") for r in got] == [1.0, 1.0, None, None, None, None]
    assert [r["rl_imitation_weight"] for r in got] == [0.0, 0.0, 300.0, 225.0, 150.0, 75.0]
    distance = [r["rl_imitation"] for r in got[2:]]
    # BENCHMARKS.md, Learning spread: RL imitation distance: seeds 1-6, 0.202 / 0.32 / 0.41 (weight
    # 1e-6: 0.99), margin 0.19; RL imitation labels: 0.005 / 0.0064 / 0.008 (weight 1e-6: 0.27),
    # margin 0.092.
    assert distance[-1] < 0.6 * distance[0], distance
    assert run["to_labels"] < 0.1 * run["to_actions"], run
    shutil.copytree(tmp_path / "run", tmp_path / "resumed")
    assert main(["--resume", str(tmp_path / "resumed"), "--checkpoint", "4", "--quiet"]) == 0
    assert rows(tmp_path / "resumed") == got


def test_dataset_returns_discount_to_each_trajectorys_end(tmp_path):
    """The advantage filter's returns: scaled rewards discounted to the trajectory's end; after a
    time-out the last state's value stands in (its discount kept), after a termination nothing."""
    write_dataset(tmp_path / "d", 2, 1, lengths=[3, 2])  # trajectory 1 ends on a time-out
    arrays = load_dataset_arrays(pretrain_settings({"data_dir": str(tmp_path / "d")}), {"policy": (2,)}, 1, 0)
    returns, tail, last = dataset_returns(arrays, gamma=0.5, reward_scale=2.0)
    np.testing.assert_allclose(returns, [1.75, 1.5, 1.0, 1.5, 1.0])  # rewards 0.5 x 2
    np.testing.assert_allclose(tail, [0.0, 0.0, 0.0, 0.25, 0.5])
    assert last.tolist() == [2, 2, 2, 4, 4]


def test_advantage_filter_keeps_the_steps_whose_return_beats_the_value():
    """A drawn step is imitated only where its return (plus the stand-in value after a time-out)
    exceeds the critic's value of its state."""
    part = DemonstrationPart(
        name="demonstrations", obs={}, labels=jnp.zeros((4, 1)), coef=1.0, iterations=1,
        first_rl_iteration=0, target="mse_sum", returns=jnp.zeros(4), tail_discount=jnp.zeros(4),
        last_step=jnp.zeros(4, jnp.int32),
    )  # fmt: skip
    ctx = SimpleNamespace(critic_value=lambda obs: obs["critic"][..., 0], normalize=lambda obs: obs)
    inputs = {
        "labels": jnp.zeros((1, 4, 1)),
        "returns": jnp.asarray([[1.0, 1.0, 1.0, 1.0]]),
        "tail_discount": jnp.asarray([[0.0, 0.0, 0.5, 0.5]]),
        "obs": {"critic": jnp.asarray([[[0.5], [2.0], [2.0], [2.0]]])},
        "last_obs": {"critic": jnp.asarray([[[0.0], [0.0], [1.0], [4.0]]])},
    }
    # values 0.5 < 1; 2 > 1; 2 > 1 + 0.5 x 1; 2 < 1 + 0.5 x 4
    assert part.kept(ctx, inputs).tolist() == [[1.0, 0.0, 0.0, 1.0]]
    part = dataclasses.replace(part, returns=None, tail_discount=None, last_step=None)
    assert part.kept(ctx, inputs).tolist() == [[1.0, 1.0, 1.0, 1.0]]  # no filter: every step


def test_reward_gate_pulls_while_the_rollout_earns_less_or_falls_more_than_the_dataset():
    """`rl_imitation_filter: reward`: the rollout's env reward and terminations per step, averaged
    over every env on every device (two devices here, as a named vmap axis), against the
    dataset's; a pretraining iteration (no stored fields) leaves the gate's inputs alone."""
    part = DemonstrationPart(
        name="demonstrations", obs={}, labels=jnp.zeros((4, 1)), coef=1.0, iterations=1,
        first_rl_iteration=0, target="mse_sum", dataset_reward=1.0, dataset_terminations=0.1,
    )  # fmt: skip
    ctx = SimpleNamespace(axis_name="devices", num_envs=3)
    assert jax.tree.map(jnp.shape, part.init(None, ctx)[1]) == {"reward": (3,), "terminations": (3,)}

    update = UpdateContext(axis_name=None, num_envs=3, env_ids=jnp.arange(3), recurrent=False, steps=5)

    def gate(rewards, terminations):  # per device -> each device's `kept` on a 2 x 2 minibatch
        def on_device(reward, terminated):
            fields = {"env_reward": jnp.full((5, 3), reward), "terminated": jnp.full((5, 3), terminated)}
            rollout = part.before_update(None, part.init(None, ctx)[1], fields, ctx)
            inputs = part.minibatch_inputs(None, rollout, jnp.arange(4), jax.random.PRNGKey(0), update)
            return part.kept(None, inputs).reshape(2, 2)

        return jax.vmap(on_device, axis_name="devices")(jnp.asarray(rewards), jnp.asarray(terminations))

    pulled, released = [[[1.0, 1.0]] * 2] * 2, [[[0.0, 0.0]] * 2] * 2
    assert gate([0.5, 1.3], [0.0, 0.0]).tolist() == pulled  # 0.9 per step < 1
    assert gate([0.9, 1.3], [0.0, 0.1]).tolist() == released  # 1.1 > 1, 0.05 terminations < 0.1
    assert gate([0.9, 1.3], [0.0, 0.3]).tolist() == pulled  # 0.15 terminations per step > 0.1
    one_device = SimpleNamespace(axis_name=None, num_envs=3)
    fields = {"env_reward": jnp.asarray([[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]]), "terminated": jnp.eye(2, 3)}
    rollout = part.before_update(None, None, fields, one_device)
    np.testing.assert_allclose(rollout["reward"], [1.75] * 3)
    np.testing.assert_allclose(rollout["terminations"], [1 / 3] * 3, rtol=1e-6)
    assert part.before_update(None, rollout, {}, ctx) is rollout


def test_dataset_per_step_counts_terminations_not_time_outs(tmp_path):
    """The reward gate's dataset side: mean reward per step, and the trajectories that ended
    before the time limit per step."""
    write_dataset(tmp_path / "d", 2, 1, lengths=[3, 2, 5], reward=0.25)  # trajectory 1: a time-out
    arrays = load_dataset_arrays(pretrain_settings({"data_dir": str(tmp_path / "d")}), {"policy": (2,)}, 1, 0)
    assert dataset_per_step(arrays) == (0.25, 0.2)


@pytest.mark.parametrize(
    "filter_, reward, kept",
    [
        ("advantage", 1000.0, 1.0),
        ("advantage", -1000.0, 0.0),
        ("reward", 1000.0, 1.0),
        ("reward", -1000.0, 0.0),
    ],
)
def test_rl_imitation_filter_pulls_only_towards_demonstrations_that_did_better(
    tiny_two_stage, tmp_path, filter_, reward, kept
):
    """`rl_imitation_filter` through a run: demonstrations whose returns are far above anything the
    critic expects (`advantage`), or whose reward per step is far above the rollouts' (`reward`),
    are all imitated (the action mean is pulled to them); those far below are none (the mean is
    left where the RL updates put it). A gated run resumed mid-pull repeats every row (the gate's
    inputs are rollout state). `learning_runs.filtered_pull_run`, also measured by
    bench/learning_spread.py (case `dataset_pull`)."""
    overrides, _ = tiny_two_stage
    run = filtered_pull_run(overrides, tmp_path, filter_, reward)
    got = run["rows"]
    assert [r["rl_imitation_kept"] for r in got] == [kept] * 4
    distance = [r["rl_imitation"] for r in got]  # over every drawn step, kept or not
    # BENCHMARKS.md, Learning spread: filtered pull kept: seeds 1-6, 0.238 / 0.32 / 0.376, margin
    # 0.124; left: 1.009 / 1.12 / 1.696, margin 0.209 (both filters alike).
    if kept:
        assert distance[-1] < 0.5 * distance[0], distance
    else:
        assert distance[-1] > 0.8 * distance[0], distance
    if filter_ == "reward":
        shutil.copytree(run["run"], tmp_path / "resumed")
        assert main(["--resume", str(tmp_path / "resumed"), "--checkpoint", "4", "--quiet"]) == 0
        assert rows(tmp_path / "resumed") == rows(run["run"])
