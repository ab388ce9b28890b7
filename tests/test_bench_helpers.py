"""Helpers of the benchmark scripts that change what runs: brax's jax substitute, worker flags,
the names of the runner's loop the strl_jax workers set for a call."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import common  # noqa: E402
import vs_brax  # noqa: E402


def test_device_put_replicated_substitute_stacks_one_copy_per_device(monkeypatch):
    monkeypatch.delattr(jax, "device_put_replicated", raising=False)
    assert vs_brax.install_jax_compat() == ["jax.device_put_replicated"]
    tree = {"w": np.arange(6.0).reshape(2, 3), "step": np.int32(4)}
    out = jax.device_put_replicated(tree, jax.devices())
    assert out["w"].shape == (jax.device_count(), 2, 3) and out["step"].shape == (jax.device_count(),)
    np.testing.assert_array_equal(np.asarray(out["w"])[0], tree["w"])
    assert vs_brax.install_jax_compat() == []  # present now: nothing substituted
    del jax.device_put_replicated  # leave jax as this test found it


def test_workers_get_the_xla_defaults_from_their_own_jaxlib(monkeypatch):
    defaults = common.xla_cpu_defaults()
    flags = f"{defaults.YNN_FUSION_FLAG}= {defaults.FAST_COMPILE_FLAG}=false"
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count=2 {flags}")
    assert common.child_environment()["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert "XLA_FLAGS" not in common.child_environment()


def test_the_loop_looks_up_the_names_the_bench_workers_set():
    """`common.strl_worker` sets `members.RunLogger` and go1_walk's worker `runner.save_members`
    for a call: the loop must create its loggers and save its checkpoints through those names."""
    from strl_jax.runners import members, runner

    assert "RunLogger" in members.start_members.__code__.co_names
    assert "save_members" in runner.run_loop.__code__.co_names
    parameters = list(inspect.signature(runner.save_members).parameters)
    assert parameters == ["axis", "members", "state", "iteration", "meta"]


def test_go1_walk_evaluates_the_task_reward_and_the_trained_one():
    """The unmodified task has neither the preset's reward weights nor its termination reward; the
    trained-reward env has both (bench/go1_walk.py reports the two returns side by side)."""
    import go1_walk

    from strl_jax.configs import resolve_config
    from strl_jax.envs.native_physics import mjx_env_of
    from strl_jax.envs.playground_env import flatten

    cfg = resolve_config(
        "Go1JoystickFlatTerrain_cpu",
        overrides=["env.termination_reward=-4.0", "env.playground.reward_config.scales.pose=0.7"],
    )
    trained = go1_walk.trained_reward(flatten(cfg.env.playground), cfg.env.termination_reward)
    assert trained["termination_reward"] == -4.0 and trained["reward_config.scales.pose"] == 0.7
    assert "impl" not in trained and go1_walk.trained_reward({"impl": "jax"}, 0.0) == {}
    spec = {"task": go1_walk.TASK, "eval_envs": 2, "episode_length": 5}
    task_env = go1_walk.evaluation_env(cfg.env, spec, {})
    trained_env = go1_walk.evaluation_env(cfg.env, spec, trained)
    assert task_env.termination_reward == 0.0 and trained_env.termination_reward == -4.0
    scales = lambda env: mjx_env_of(env.env)._config.reward_config.scales  # noqa: E731
    assert scales(task_env).pose == 0.5 and scales(trained_env).pose == 0.7
    assert scales(task_env).tracking_lin_vel == 1.0 and scales(trained_env).tracking_lin_vel == 3.0


def test_go1_walk_measures_the_standing_robot_under_the_runs_contact_rule(tmp_path, monkeypatch):
    """Runs trained on C MuJoCo's heightfield contacts are judged against a standing robot on the
    same contacts: the plan records the rule, the standing worker's spec carries it, and a standing
    robot saved under another rule is not reused."""
    import go1_walk

    args = go1_walk.parse_args(
        ["--preset", "Go1JoystickRoughTerrain_teacher_cpu", "--seeds", "1", "--no-peer"]
        + ["--set", "env.hfield_contacts=mujoco", "--set", "runner.load="]
    )
    (plan,) = go1_walk.planned_runs(args)
    assert plan["hfield_contacts"] == "mujoco"
    assert plan["off_terrain"] == "fall"  # the default; the runs' evaluations count falls off the edge
    assert go1_walk.records_contacts([{"label": "peer"}, plan]) == "mujoco"
    assert go1_walk.records_contacts([{"label": "recorded before"}]) == "mjx"
    specs = []

    def worker(argv, spec, *rest):
        specs.append(spec)
        return {"velrmsd": 1.0, "falls": 0.7}

    monkeypatch.setattr(go1_walk, "run_worker", worker)
    standing = go1_walk.measure_standing(plan["task"], args, tmp_path, "mujoco")
    assert specs[-1]["hfield_contacts"] == standing["hfield_contacts"] == "mujoco"
    assert go1_walk.standing_env_config(specs[-1]).hfield_contacts == "mujoco"
    assert go1_walk.measure_standing(plan["task"], args, tmp_path)["hfield_contacts"] == "mjx"


def test_go1_walk_resume_keeps_finished_runs_planned_as_now(tmp_path):
    import go1_walk

    spec = {"task": "Go1JoystickFlatTerrain_cpu", "overrides": ["seed=1"], "limit_s": 3600.0}
    runs = [
        {
            "label": "strl_jax-seed1",
            "spec": spec,
            "train": {"stop_reason": "time_limit"},
            "machine": {"cpu_model": "A"},
        },
        {"label": "strl_jax-seed2", "spec": {**spec, "overrides": ["seed=2"]}},  # stopped while training
        {"label": "playground-seed1", "spec": {"kwargs": {}}, "train": {"error": "worker died"}},
    ]
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs}))
    plans = [{"label": r["label"], "spec": r["spec"]} for r in runs]
    assert list(go1_walk.finished_runs(tmp_path, plans)) == ["strl_jax-seed1"]
    plans[0] = {**plans[0], "spec": {**spec, "limit_s": 1800.0}}
    with pytest.raises(SystemExit, match="strl_jax-seed1 was trained with"):
        go1_walk.finished_runs(tmp_path, plans)
    with pytest.raises(SystemExit, match="needs"):
        go1_walk.finished_runs(tmp_path / "elsewhere", plans)


def test_go1_walk_resume_continues_a_cut_strl_jax_run_from_its_newest_checkpoint_on_disk(tmp_path):
    """A run killed while training continues from the newest listed checkpoint whose folder is
    there, with its clock at that checkpoint's wall time; one planned differently, the peer's and
    one without a checkpoint train again from the start."""
    import go1_walk

    run_dir = tmp_path / "runs" / "strl_jax-seed1"
    (run_dir / "checkpoints" / "10").mkdir(parents=True)
    (run_dir / "checkpoints" / "20").mkdir()
    entries = [{"iteration": i, "env_steps": 100 * i, "wall_s": 18.0 * i} for i in (10, 20, 30)]
    lines = "".join(json.dumps(e) + "\n" for e in entries) + '{"iteration": 4'  # cut mid-line
    (run_dir / go1_walk.CHECKPOINTS_FILE).write_text(lines)
    assert go1_walk.continuation(run_dir) == entries[1]  # 30 was listed, its folder never written
    spec = {"task": "Op3Joystick", "overrides": ["seed=1"], "limit_s": 7200.0}
    saved = {"runs": [{"label": "strl_jax-seed1", "spec": spec, "machine": {"cpu_model": "A"}}]}
    plan = {"label": "strl_jax-seed1", "library": "strl_jax", "spec": spec, "run_dir": str(run_dir)}
    assert go1_walk.started_before(plan, saved) == {**entries[1], "before": {"machine": {"cpu_model": "A"}}}
    assert go1_walk.started_before({**plan, "spec": {**spec, "limit_s": 3600.0}}, saved) is None
    assert go1_walk.started_before({**plan, "library": "playground"}, saved) is None
    assert go1_walk.started_before(plan, {"runs": [{**saved["runs"][0], "train": {}}]}) is None
    assert go1_walk.started_before({**plan, "run_dir": str(tmp_path / "none")}, saved) is None
    clock = go1_walk.WallClock(limit_s=7200.0, every_s=180.0, offset_s=360.0)
    assert clock.now() >= 360.0 and clock.next_s == 540.0
    assert not clock.due(400.0) and clock.due(540.0) and clock.due(7200.0) and clock.over


def test_go1_walk_resume_with_longer_minutes_trains_a_finished_strl_jax_run_on(tmp_path):
    """A finished strl_jax run planned again with a longer time limit, nothing else changed,
    continues from its last checkpoint; a shorter limit, another change, a run that ended in an
    error or before its time, and the peer's runs do not."""
    import go1_walk

    run_dir = tmp_path / "runs" / "strl_jax-seed1"
    (run_dir / "checkpoints" / "50").mkdir(parents=True)
    last = {"iteration": 50, "env_steps": 5000, "wall_s": 3601.5}
    (run_dir / go1_walk.CHECKPOINTS_FILE).write_text(json.dumps(last) + "\n")
    spec = {"task": "Go1JoystickRoughTerrain_teacher_cpu", "overrides": ["seed=1"], "limit_s": 3600.0}
    record = {
        "label": "strl_jax-seed1",
        "library": "strl_jax",
        "spec": spec,
        "train": {"stop_reason": "time_limit", "sps": 3000.0},
        "machine": {"cpu_model": "A"},
        "continued": [{"iteration": 20, "wall_s": 1400.0, "machine": {"cpu_model": "B"}}],
    }
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [record]}))
    longer = {"label": "strl_jax-seed1", "library": "strl_jax", "spec": {**spec, "limit_s": 7200.0}}
    longer["run_dir"] = str(run_dir)
    assert go1_walk.finished_runs(tmp_path, [longer]) == {}
    before = {"machine": record["machine"], "continued": record["continued"]}
    assert go1_walk.started_before(longer, {"runs": [record]}) == {**last, "before": before}
    for plan, saved in [
        ({**longer, "spec": {**spec, "limit_s": 1800.0}}, record),
        ({**longer, "spec": {**spec, "limit_s": 7200.0, "overrides": ["seed=2"]}}, record),
        (longer, {**record, "train": {"stop_reason": "time_limit", "error": "worker died"}}),
        (longer, {**record, "train": {"stop_reason": "max_iterations"}}),
        ({**longer, "library": "playground"}, record),
    ]:
        assert not go1_walk.extends(plan, saved)
        assert go1_walk.started_before(plan, {"runs": [saved]}) is None
    with pytest.raises(SystemExit, match="strl_jax-seed1 was trained with"):
        go1_walk.finished_runs(tmp_path, [{**longer, "spec": {**spec, "limit_s": 1800.0}}])


def test_go1_walk_only_trains_the_named_runs_and_keeps_the_finished_ones():
    import go1_walk

    plans = [{"label": label} for label in ("strl_jax-seed1", "strl_jax-seed2", "playground-seed1")]
    assert go1_walk.selected_runs(plans, {}, None) == plans
    assert go1_walk.selected_runs(plans, {}, ["playground-seed1"]) == [plans[2]]
    finished = {"playground-seed1": {}}
    assert go1_walk.selected_runs(plans, finished, ["strl_jax-seed2"]) == plans[1:]
    with pytest.raises(
        SystemExit, match="--only strl_jax-seed9: not planned; the planned runs: strl_jax-seed1"
    ):
        go1_walk.selected_runs(plans, finished, ["strl_jax-seed9"])


def test_go1_walk_keeps_a_finished_run_planned_later_on_record_while_an_earlier_one_trains():
    """runs.json is written before each training: a kill then must not lose a run kept from an
    earlier invocation, also when it comes later in the plan (the peer after the seeds)."""
    import go1_walk

    plans = [{"label": label} for label in ("strl_jax-seed1", "strl_jax-seed2", "playground-seed1")]
    finished = {
        "strl_jax-seed1": {"label": "strl_jax-seed1", "evals": []},
        "playground-seed1": {"label": "p"},
    }
    on_record = go1_walk.runs_on_record(plans, finished, {"strl_jax-seed2"})
    assert on_record == [finished["strl_jax-seed1"], plans[1], finished["playground-seed1"]]
    assert go1_walk.runs_on_record(plans, finished, set()) == [
        finished["strl_jax-seed1"],
        finished["playground-seed1"],
    ]


def test_go1_walk_plans_the_peer_at_its_own_size_and_times_the_peers_final_return():
    """`--peer-envs` sizes the peer apart from strl_jax (a GPU run of the CPU preset against
    Playground's published 8192 envs), and the summary gives each run's first checkpoint at or
    above the peer's final evaluation return."""
    import go1_walk

    strl, peer = go1_walk.planned_runs(go1_walk.parse_args(["--peer-envs", "8192", "--seeds", "1"]))
    assert strl["num_envs"] == 512
    assert peer["num_envs"] == 8192 and peer["spec"]["kwargs"]["num_envs"] == 8192
    _, same = go1_walk.planned_runs(go1_walk.parse_args(["--seeds", "1"]))
    assert same["num_envs"] == 512 and same["spec"]["kwargs"]["num_envs"] == 512
    with pytest.raises(SystemExit):
        go1_walk.parse_args(["--peer-envs", "0"])

    def run(library, returns, num_envs):
        evals = [
            {
                "wall_s": 60.0 * (i + 1),
                "env_steps": 1000 * (i + 1),
                "velrmsd": 0.5,
                "falls": 0.0,
                "episode_reward": r,
            }
            for i, r in enumerate(returns)
        ]
        return {"library": library, "label": f"{library}-seed1", "num_envs": num_envs, "evals": evals}

    records = [run("strl_jax", [5.0, 19.0, 21.0], 512), run("playground", [9.0, 18.0, 18.0], 8192)]
    lines = go1_walk.peer_return_lines(records)
    assert lines[0].endswith(": 18.0")
    assert "strl_jax-seed1 (512 envs): return >= 18.0 at 120 s, 2,000 env steps" in lines[1]
    assert "playground-seed1 (8192 envs): return >= 18.0 at 120 s" in lines[2]
    records[0]["evals"] = records[0]["evals"][:1]
    assert (
        "strl_jax-seed1 (512 envs): return >= 18.0 not reached within 60 s"
        in go1_walk.peer_return_lines(records)[1]
    )
    assert go1_walk.peer_return_lines(records[:1]) == []


def test_go1_walk_plans_any_legged_task_and_aims_at_a_third_of_its_standing_robot():
    """Another robot's preset plans its own task for both libraries (the peer with that task's
    published settings), a non-joystick preset is refused, and the default target is a third of
    the standing robot's velrmsd."""
    import go1_walk

    strl, peer = go1_walk.planned_runs(
        go1_walk.parse_args(["--preset", "SpotFlatTerrainJoystick_cpu", "--seeds", "1"])
    )
    assert strl["task"] == peer["task"] == peer["spec"]["task"] == "SpotFlatTerrainJoystick"
    assert strl["trained_reward"]["reward_config.scales.tracking_lin_vel"] == 3.0
    published = go1_walk.published_settings("SpotFlatTerrainJoystick")
    assert peer["spec"]["kwargs"]["unroll_length"] == published["unroll_length"]
    assert go1_walk.plot_name("SpotFlatTerrainJoystick") == "SpotFlatTerrainJoystick_walk.png"
    assert go1_walk.plot_name(go1_walk.TASK) == "go1_walk.png"
    assert go1_walk.records_task([{"label": "old"}]) == go1_walk.TASK  # runs recorded before tasks
    with pytest.raises(SystemExit, match="evaluates joystick tracking on one of Go1JoystickFlatTerrain"):
        go1_walk.planned_runs(go1_walk.parse_args(["--preset", "hopper", "--seeds", "1"]))
    args = go1_walk.parse_args(["--seeds", "1"])
    go1_walk.set_target(args, {"velrmsd": 0.87})
    assert args.target == 0.29
    args = go1_walk.parse_args(["--seeds", "1", "--target", "0.4"])
    go1_walk.set_target(args, {"velrmsd": 0.87})
    assert args.target == 0.4
    args = go1_walk.parse_args(["--seeds", "1"])
    go1_walk.set_target(args, None)
    assert args.target == go1_walk.DEFAULT_TARGET


def test_legged_zoo_tabulates_trained_robots_and_projects_the_others(tmp_path):
    """A robot with a CPU preset trains under it, the others under their body plan's recipe; the
    summary gives a trained robot's seeds at the target and an untrained one's projected time
    (the trained quadrupeds' median env steps to the target at its env steps/s)."""
    import legged_zoo

    assert legged_zoo.robot_config("Spot") == ("SpotFlatTerrainJoystick_cpu", [])
    preset, files = legged_zoo.robot_config("T1")
    assert preset == "T1JoystickFlatTerrain" and files[0].endswith("configs/recipes/legged_cpu.yaml")
    with pytest.raises(SystemExit):
        legged_zoo.parse_args(["train", "--robots", "Cheetah"])

    def checkpoint(minutes, velrmsd, falls):
        return {"wall_s": 60.0 * minutes, "env_steps": int(1e6 * minutes), "velrmsd": velrmsd, "falls": falls}

    seeds = [
        [checkpoint(10, 0.5, 0.0), checkpoint(20, 0.3, 0.1), checkpoint(30, 0.3, 0.0)],
        [checkpoint(10, 0.4, 0.0), checkpoint(20, 0.32, 0.0), checkpoint(30, 0.31, 0.03)],
    ]
    runs = [
        {"library": "strl_jax", "seed": i + 1, "evals": evals, "train": {"sps": 5000.0 + i}}
        for i, evals in enumerate(seeds)
    ]
    saved = {"standing": {"velrmsd": 0.99}, "args": {"target": 0.33, "max_falls": 0.05}, "runs": runs}
    (tmp_path / "Spot").mkdir()
    (tmp_path / "Spot" / "runs.json").write_text(json.dumps(saved))
    # a run cut before its training reported env steps/s: its newest checkpoint's 1M steps a minute
    cut = {"library": "strl_jax", "seed": 1, "evals": seeds[0][:2]}
    (tmp_path / "Barkour").mkdir()
    (tmp_path / "Barkour" / "runs.json").write_text(json.dumps({**saved, "runs": [cut]}))
    (tmp_path / "throughput.json").write_text(json.dumps({"robots": {"T1": {"sps": 2500.0}}}))
    # a variant folder: Spot's seed 2 alone under one more setting, trained as its args record
    variant = {**saved, "runs": runs[1:]}
    variant["args"] = {
        **saved["args"],
        "preset": "SpotFlatTerrainJoystick_cpu",
        "config": [],
        "set": ["algorithm.target_kl=0.2"],
    }
    (tmp_path / "Spot_target_kl").mkdir()
    (tmp_path / "Spot_target_kl" / "runs.json").write_text(json.dumps(variant))
    text = legged_zoo.summary(tmp_path)
    lines = text.splitlines()
    spot_rows = [line for line in lines if line.startswith("| Spot ")]
    assert len(spot_rows) == 2 and "| Spot_target_kl " in spot_rows[1]
    assert "| SpotFlatTerrainJoystick_cpu, algorithm.target_kl=0.2 " in spot_rows[1]
    assert "| 1 of 1 " in spot_rows[1] and "| 20.0 / 20.0 / 20.0 " in spot_rows[1]
    barkour = next(line for line in text.splitlines() if line.startswith("| Barkour "))
    assert "| 0 of 1 " in barkour and "| 16,667 " in barkour
    spot = next(line for line in text.splitlines() if line.startswith("| Spot "))
    assert "| 2 of 2 " in spot and "| 20.0 / 25.0 / 30.0 " in spot and "| 0.990 " in spot
    t1 = next(line for line in text.splitlines() if line.startswith("| T1 "))
    # median steps to target 25M at 2,500 env steps/s: 167 minutes
    assert "| not trained " in t1 and t1.rstrip(" |").endswith("167")
    assert (tmp_path / "summary.md").read_text().strip() == text.strip()


def test_set_values_read_as_the_cli_reads_them():
    """`--set` values: JSON, or a YAML flow mapping or list as `python -m strl_jax.train` takes it
    (`env.push_curriculum={up: 0.1}`), else the text."""
    sets = ["a={up: 0.1}", "b=1e-3", "c=[1, 2]", "d=warp", "e=0.2", 'f={"x": 1}']
    parsed = vs_brax.parse_sets(sets)
    assert parsed == {"a": {"up": 0.1}, "b": 0.001, "c": [1, 2], "d": "warp", "e": 0.2, "f": {"x": 1}}
    assert vs_brax.override("env.push_curriculum", parsed["a"]) == 'env.push_curriculum={"up": 0.1}'


def test_walk_falls_reports_each_fall_with_its_command_and_the_envs_draw():
    import walk_falls

    term = np.zeros((6, 3), bool)
    term[4, 1] = term[5, 1] = True  # env 1 falls at step 4 (and stays down); envs 0 and 2 never
    command = np.tile(np.array([0.5, -0.2, 1.0]), (6, 3, 1))
    velocity = np.arange(6 * 3 * 3, dtype=float).reshape(6, 3, 3)
    physics = {
        "body_mass": np.array([[0.0, 5.0, 1.0], [0.0, 6.0, 1.0], [0.0, 4.0, 1.0]]),
        "body_ipos": np.array(
            [[[0, 0, 0], [0.0, 0.0, 0.0]], [[0, 0, 0], [0.03, 0.04, 0.0]], [[0, 0, 0], [0.0, 0.0, 0.0]]]
        ),
        "geom_friction": np.array([[[0.4, 0, 0]], [[0.7, 0, 0]], [[1.0, 0, 0]]]),
    }
    drawn = walk_falls.drawn_physics(physics, 3)
    assert drawn["mass kg"].tolist() == [6.0, 7.0, 5.0]
    np.testing.assert_allclose(drawn["base com offset m"], [0.0, 0.05, 0.0])  # from the median draw
    assert drawn["floor friction"].tolist() == [0.4, 0.7, 1.0]
    (row,) = walk_falls.fall_rows("iteration 7", term, command, velocity, drawn, before=2)
    assert row == {
        "policy": "iteration 7",
        "env": 1,
        "step": 4,
        "command": [0.5, -0.2, 1.0],
        "velocity_before": velocity[2, 1].tolist(),
        "mass kg": 7.0,
        "base com offset m": 0.05,
        "floor friction": 0.7,
    }


def test_walk_falls_tells_a_fall_off_the_heightfield_from_one_on_it():
    """Go1's rough floor is one heightfield with nothing around it: a fall is reported with the
    base's position and its distance past the field's edge; a plane floor has no edge."""
    import mujoco
    import walk_falls

    field = mujoco.MjModel.from_xml_string(
        '<mujoco><asset><hfield name="h" nrow="3" ncol="3" size="3 4 0.1 0.1"/></asset>'
        '<worldbody><geom type="hfield" hfield="h" pos="1 2 0"/></worldbody></mujoco>'
    )
    centre, half = walk_falls.terrain_rectangle(field)
    assert centre.tolist() == [1.0, 2.0] and half.tolist() == [3.0, 4.0]
    xy = np.array([[1.0, 2.0], [5.0, 2.0], [1.0, -2.5], [-1.5, 5.0]])
    np.testing.assert_allclose(walk_falls.past_edge(xy, (centre, half)), [-3.0, 1.0, 0.5, -0.5])
    plane = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><geom type="plane" size="1 1 1"/></worldbody></mujoco>'
    )
    assert walk_falls.terrain_rectangle(plane) is None

    term = np.zeros((4, 2), bool)
    term[2, 0] = term[3, 1] = True
    command = np.zeros((4, 2, 3))
    velocity = np.zeros((4, 2, 3))
    position = np.zeros((4, 2, 2))
    position[2, 0] = [5.0, 2.0]  # env 0 falls past the edge
    position[3, 1] = [1.5, 2.5]  # env 1 on the field
    rows = walk_falls.fall_rows("p", term, command, velocity, {}, 1, position, (centre, half))
    assert [(r["env"], r["base xy"], r["past the edge m"]) for r in rows] == [
        (0, [5.0, 2.0], 1.0),
        (1, [1.5, 2.5], -2.5),
    ]
    (plain,) = walk_falls.fall_rows("p", term[:, :1], command[:, :1], velocity[:, :1], {}, 1)
    assert "past the edge m" not in plain
    # each episode's first step past the edge, read from positions with the base's height
    position = np.zeros((4, 3, 3))
    position[:, :, :2] = [1.0, 2.0]
    position[2:, 0, :2] = [4.5, 2.0]  # env 0 crosses at step 2
    position[1, 2, :2] = [1.0, 6.5]  # env 2 at step 1
    assert walk_falls.left_terrain(position, (centre, half)) == [2, -1, 1]


def test_walk_falls_sets_what_a_runs_scan_reads_past_the_edge():
    """`--scan-beyond-edge` changes only that key of the run's height scan, and a run without a
    scan is refused with the reason."""
    import walk_falls

    from strl_jax.configs import resolve_config

    teacher = resolve_config("Go1JoystickRoughTerrain_teacher_cpu").env
    edge = walk_falls.with_scan_beyond_edge(teacher, "edge")
    assert edge.height_scan == {**teacher.height_scan, "beyond_edge": "edge"}
    assert dataclasses.replace(edge, height_scan=teacher.height_scan) == teacher
    assert walk_falls.with_scan_beyond_edge(teacher, None) is teacher
    blind = resolve_config("Go1JoystickRoughTerrain_cpu").env
    with pytest.raises(SystemExit, match="needs a run with a height scan"):
        walk_falls.with_scan_beyond_edge(blind, "void")


def test_terrain_edge_integrates_commands_in_the_body_frame_and_finds_the_first_exit():
    """A robot that tracks exactly moves at the commanded speed along its heading and turns at
    the commanded rate; an episode leaves the terrain at its first step past the edge (or within
    the margin of it)."""
    from types import SimpleNamespace

    import jax.numpy as jnp
    import terrain_edge

    task = SimpleNamespace(
        dt=0.02,
        _cmd_a=jnp.array([1.0, 1.0, 1.0]),
        _init_q=jnp.zeros(7),
        sample_command=lambda _key, command: command,  # hold each command for good
    )
    xy, yaw, error = terrain_edge.follow_commands(task, jax.random.PRNGKey(3), episodes=4, steps=50)
    assert xy.shape == (50, 4, 2) and yaw.shape == (50, 4) and not error.any()
    speed = np.linalg.norm(np.diff(xy, axis=0), axis=-1) / task.dt  # constant |(vx, vy)| per episode
    np.testing.assert_allclose(speed, np.broadcast_to(speed[:1], speed.shape), rtol=1e-3)
    moved = np.diff(xy, axis=0)  # along the heading: at a fixed angle to it (the command's)
    relative = np.angle(np.exp(1j * (np.arctan2(moved[..., 1], moved[..., 0]) - yaw[:-1])))
    np.testing.assert_allclose(relative, np.broadcast_to(relative[:1], relative.shape), atol=1e-3)
    turn = np.diff(yaw, axis=0) / task.dt  # constant yaw rate, within the command's range
    np.testing.assert_allclose(turn, np.broadcast_to(turn[:1], turn.shape), atol=1e-3)
    assert np.all(np.abs(turn) <= 1.0 + 1e-3) and np.all(np.abs(xy[0]) <= 0.5 + 0.05)

    rectangle = (np.zeros(2), np.array([2.0, 2.0]))
    path = np.zeros((5, 2, 2))
    path[:, 0, 0] = [0.0, 0.9, 1.5, 2.1, 2.5]  # episode 0 leaves at step 3, nears within 1 m at 2
    assert terrain_edge.leaving(path, rectangle, 0.0).tolist() == [3, -1]
    assert terrain_edge.leaving(path, rectangle, 1.0).tolist() == [2, -1]

    # stopping short: the same commands, each move clipped to a box; what is clipped is the error
    low, high = terrain_edge.inside((np.zeros(2), np.array([0.7, 0.7])), 0.1)
    np.testing.assert_allclose([low, high], [[-0.6, -0.6], [0.6, 0.6]])
    box = terrain_edge.follow_commands(task, jax.random.PRNGKey(3), episodes=4, steps=50, box=(low, high))
    assert np.all(box.xy >= low - 1e-6) and np.all(box.xy <= high + 1e-6)
    np.testing.assert_allclose(box.yaw, yaw, atol=1e-5)  # the yaw rate is always followed
    free = np.concatenate([box.xy[:1], box.xy[:-1]])  # each step's start
    velocity = np.diff(xy, axis=0, prepend=np.nan) / task.dt  # the command's world velocity
    wanted = free[1:] + velocity[1:] * task.dt
    removed = (wanted - np.clip(wanted, low, high)) / task.dt
    np.testing.assert_allclose(box.error[1:], np.sum(removed**2, axis=-1), rtol=1e-3, atol=1e-6)
    assert box.error.any() and (box.error == 0).any()


def test_walk_falls_scores_each_episode_up_to_its_fall():
    """Each episode's velrmsd counts its steps up to and with its first fall, as the pooled score
    does: the pooled mean square is the step-weighted mean of the episodes'."""
    import walk_falls

    term = np.zeros((4, 2), bool)
    term[1, 1] = term[3, 1] = True  # env 1 falls at step 1 (steps 2-3 are not its own any more)
    command = np.zeros((4, 2, 3))
    velocity = np.zeros((4, 2, 3))
    velocity[:, 0, 0] = [1.0, 1.0, 3.0, 3.0]  # env 0: squared errors 1, 1, 9, 9
    velocity[:, 1, 1] = [2.0, 2.0, 100.0, 100.0]  # env 1: 4, 4, then fallen
    each = walk_falls.episode_errors(term, command, velocity)
    np.testing.assert_allclose(each, [np.sqrt(5.0), 2.0])
    pooled = walk_falls.tracking_error(term, command, velocity)
    np.testing.assert_allclose(pooled**2, (4 * 5.0 + 2 * 4.0) / 6)


def test_walk_falls_takes_a_tasks_pushes_away_only_where_it_pushes():
    import walk_falls

    humanoid = "BerkeleyHumanoidJoystickFlatTerrain"
    assert walk_falls.without_overrides(humanoid, []) == {}
    assert walk_falls.without_overrides(humanoid, ["randomizer"]) == {}
    off = walk_falls.without_overrides(humanoid, ["pushes", "randomizer"])
    assert off == {"push_config": {"enable": False}}
    # Go1's joystick tasks have a pert_config, switched off by default: nothing to take away
    with pytest.raises(SystemExit, match="Go1JoystickRoughTerrain.*no push switch that is on"):
        walk_falls.without_overrides("Go1JoystickRoughTerrain", ["pushes"])


def test_walk_falls_tracks_over_each_episode_until_its_fall():
    import walk_falls

    term = np.zeros((4, 2), bool)
    term[1:, 1] = True  # env 1 falls at step 1: steps 0 and 1 count, 2 and 3 do not
    command = np.zeros((4, 2, 3))
    velocity = np.zeros((4, 2, 3))
    velocity[:, 0, 0] = 0.3  # env 0 errs by 0.3 at every step
    velocity[2:, 1, 0] = 100.0  # env 1 after its fall: not counted
    velocity[1, 1, 2] = 0.6
    expected = np.sqrt((4 * 0.09 + 0.36) / 6)
    assert walk_falls.tracking_error(term, command, velocity) == pytest.approx(expected)


def test_go1_terrain_gives_each_student_its_own_seeds_teacher_and_the_blind_run_the_whole_time(tmp_path):
    import go1_terrain

    args = go1_terrain.parse_args(
        ["--out", str(tmp_path), "--teacher-minutes", "90", "--student-minutes", "30"]
    )
    assert args.stages == list(go1_terrain.STAGES) and args.seeds == [1, 2]

    def value(argv, flag):
        return argv[argv.index(flag) + 1]

    blind = go1_terrain.stage_argv("blind", 2, args)
    assert value(blind, "--preset") == "Go1JoystickRoughTerrain_cpu" and value(blind, "--minutes") == "120"
    assert value(blind, "--out") == str(tmp_path / "blind" / "seed2") and "--resume" not in blind
    teacher = go1_terrain.stage_argv("teacher", 1, args)
    assert value(teacher, "--minutes") == "90" and value(teacher, "--target") == "0.4"
    student = go1_terrain.stage_argv("student_dagger", 2, args)
    assert value(student, "--preset") == "Go1JoystickRoughTerrain_student_dagger_cpu"
    assert value(student, "--minutes") == "30"
    teacher_dir = tmp_path / "teacher" / "seed2" / "runs" / "strl_jax-seed2"
    assert f"algorithm.teacher_policy.checkpoint={teacher_dir}" in student
    assert go1_terrain.teacher_run(tmp_path, 2) == teacher_dir
    chosen = go1_terrain.parse_args(["--out", str(tmp_path), "--teacher-checkpoint", "943"])
    student = go1_terrain.stage_argv("student_distillation", 2, chosen)
    assert f"algorithm.teacher_policy.checkpoint={teacher_dir / 'checkpoints' / '943'}" in student


def test_go1_terrain_summary_compares_each_student_with_its_teacher(tmp_path):
    import go1_terrain

    def stage(name, seed, evals, metrics=None, teacher=None):
        folder = tmp_path / name / f"seed{seed}"
        run_dir = folder / "runs" / f"strl_jax-seed{seed}"
        run_dir.mkdir(parents=True)
        if metrics:
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
        record = {"seed": seed, "run_dir": str(run_dir), "evals": evals, "train": {"sps": 3000.0}}
        if teacher:
            record["spec"] = {"overrides": ["seed=1", f'algorithm.teacher_policy.checkpoint="{teacher}"']}
        (folder / "runs.json").write_text(json.dumps({"runs": [record]}))
        return record

    def ev(minutes, velrmsd, falls):
        return {
            "iteration": 10 * minutes,
            "wall_s": 60.0 * minutes,
            "env_steps": 1e6 * minutes,
            "velrmsd": velrmsd,
            "falls": falls,
        }

    stage("teacher", 1, [ev(60, 0.5, 0.1), ev(120, 0.38, 0.04)])
    errors = [{"estimator_rmse_base_lin_vel": e} for e in [1.0] * 5 + [0.2] * 10]
    record = stage("student_tppo", 1, [ev(30, 0.6, 0.1), ev(60, 0.418, 0.06)], errors)
    # a student of the teacher's iteration 600 (60 minutes) is compared with that checkpoint
    chosen = go1_terrain.teacher_run(tmp_path, 1) / "checkpoints" / "600"
    of_600 = stage("student_dagger", 1, [ev(30, 0.55, 0.15)], teacher=chosen)
    rows = go1_terrain.summary_rows(tmp_path, 0.40, 0.05)
    teacher, student, dagger = rows
    assert teacher[:3] == ["teacher", 1, "120.0"] and teacher[4] == "120.0"  # at the target at 120
    assert student[0] == "student_tppo" and student[4] == "never"
    assert student[8] == "1.10 / 1.50" and student[9] == "0.200"
    assert dagger[0] == "student_dagger" and dagger[8] == "1.10 / 1.50"
    assert go1_terrain.offset_minutes("student_tppo", tmp_path, record) == 120.0
    assert go1_terrain.offset_minutes("student_dagger", tmp_path, of_600) == 60.0
    assert "student_tppo" in go1_terrain.write_summary(tmp_path, 0.40, 0.05)


def test_go1_terrain_ships_a_teacher_whose_students_are_measured_against_it(tmp_path, monkeypatch):
    import go1_terrain
    import ship_run

    out, shipped = tmp_path / "out", tmp_path / "go1_rough_teacher"
    folder = out / "teacher" / "seed1"
    folder.mkdir(parents=True)
    evals = [
        {"iteration": 400, "wall_s": 1800.0, "env_steps": 5e6, "velrmsd": 0.5, "falls": 0.2},
        {"iteration": 900, "wall_s": 3600.0, "env_steps": 1.1e7, "velrmsd": 0.44, "falls": 0.1},
    ]
    record = {"seed": 1, "evals": evals, "spec": {"overrides": ["seed=1"]}, "machine": {"cpu_count": 2}}
    (folder / "runs.json").write_text(json.dumps({"runs": [record], "standing": {"velrmsd": 1.0}}))
    (out / go1_terrain.START_FILE).write_text(json.dumps({"run": "examples/go1_walk", "minutes": 60.0}))
    copies = []

    def fake_ship(run, checkpoint, to, envs):
        copies.append((run, checkpoint, envs))
        to.mkdir()

    monkeypatch.setattr(ship_run, "ship", fake_ship)

    def ship(*extra):
        argv = ["ship", "--out", str(out), "--seeds", "1", "--teacher", str(shipped), *extra]
        return go1_terrain.ship_teacher(go1_terrain.parse_args(argv))

    with pytest.raises(SystemExit, match=r"checkpoint 500 of seed 1 is not evaluated; there are \[400, 900"):
        ship("--teacher-checkpoint", "500")
    ship("--teacher-checkpoint", "400")  # the chosen one, not the newest
    assert copies == [(go1_terrain.teacher_run(out, 1), 400, 16)]
    written = go1_terrain.shipped_teacher(shipped)
    assert written["evaluation"] == evals[0] and written["pipeline_minutes"] == 90.0
    assert written["standing"] == {"velrmsd": 1.0} and written["checkpoint"] == 400

    # students of every seed distil from the shipped folder; the summary compares with its evaluation
    students = tmp_path / "students"
    argv = ["--out", str(students), "--stages", "student_tppo", "--teacher", str(shipped)]
    args = go1_terrain.parse_args(argv)
    for seed in (1, 2):
        argv = go1_terrain.stage_argv("student_tppo", seed, args)
        assert f"algorithm.teacher_policy.checkpoint={shipped.resolve()}" in argv
    run_dir = students / "student_tppo" / "seed2" / "runs" / "strl_jax-seed2"
    run_dir.mkdir(parents=True)
    student = {
        "seed": 2,
        "run_dir": str(run_dir),
        "evals": [{"iteration": 50, "wall_s": 600.0, "env_steps": 1e6, "velrmsd": 0.55, "falls": 0.15}],
        "spec": {"overrides": [f'algorithm.teacher_policy.checkpoint="{shipped.resolve()}"']},
    }
    (run_dir.parents[1] / "runs.json").write_text(json.dumps({"runs": [student]}))
    (row,) = go1_terrain.summary_rows(students, 0.40, 0.05)
    assert row[0] == "student_tppo" and row[8] == "1.10 / 0.75"  # 0.55 / 0.5, 0.15 / 0.2
    assert go1_terrain.offset_minutes("student_tppo", students, student) == 90.0
    for wrong in (["--teacher-checkpoint", "400"], ["--stages", "teacher"]):
        with pytest.raises(SystemExit):
            go1_terrain.parse_args(["--out", str(students), "--teacher", str(shipped), *wrong])


def test_go1_terrain_starts_teacher_and_blind_where_their_presets_load_counting_its_minutes(
    tmp_path, monkeypatch
):
    import go1_terrain
    import go1_walk

    calls = []
    monkeypatch.setattr(go1_walk, "main", lambda argv: calls.append(argv) or 0)
    shipped = str((Path(go1_terrain.REPO_DIR) / "examples" / "go1_walk").resolve())
    out = tmp_path / "out"
    args = go1_terrain.parse_args(["--out", str(out)])
    assert go1_terrain.preset_start(args) == {"run": shipped, "minutes": 60.0}
    for stage in ("teacher", "blind"):
        assert f"runner.load={shipped}" in go1_terrain.stage_argv(stage, 1, args)
    loads = [a for a in go1_terrain.stage_argv("student_tppo", 1, args) if a.startswith("runner.load=")]
    assert loads == ["runner.load="]
    elsewhere = go1_terrain.parse_args(["--out", str(out), "--set", f"runner.load={shipped}"])
    assert [a for a in go1_terrain.stage_argv("student_tppo", 1, elsewhere) if "runner.load" in a][-1] == (
        "runner.load="
    )
    scratch = go1_terrain.parse_args(["--out", str(out), "--set", "runner.load="])
    assert go1_terrain.preset_start(scratch) is None
    assert go1_terrain.preset_start(go1_terrain.parse_args(["--smoke"])) is None  # small nets: from scratch
    with pytest.raises(SystemExit, match="runner.load 'nowhere' is neither in"):
        go1_terrain.preset_start(go1_terrain.parse_args(["--set", "runner.load=nowhere"]))

    out.mkdir()
    one = ["--out", str(out), "--stages", "teacher", "--seeds", "1", "--start-minutes", "45"]
    assert go1_terrain.run_stages(go1_terrain.parse_args(one)) == 0
    assert len(calls) == 1 and go1_terrain.start_of(out) == {"run": shipped, "minutes": 45.0}
    folder = out / "teacher" / "seed1"
    folder.mkdir(parents=True)
    evals = [{"wall_s": 1800.0, "env_steps": 6e6, "velrmsd": 0.38, "falls": 0.0}]
    (folder / "runs.json").write_text(json.dumps({"runs": [{"seed": 1, "evals": evals, "train": {}}]}))
    (teacher,) = go1_terrain.summary_rows(out, 0.40, 0.05)
    assert teacher[2] == "30.0" and teacher[4] == "75.0"  # 30 trained minutes, 75 on the pipeline's clock
    assert go1_terrain.offset_minutes("student_dagger", out, {"seed": 1}) == 75.0
    with pytest.raises(SystemExit, match="holds runs that started from"):
        go1_terrain.run_stages(go1_terrain.parse_args([*one, "--set", "runner.load="]))
    assert len(calls) == 1


def test_foot_lift_counts_each_foot_off_the_ground_up_to_the_fall():
    import foot_lift

    # one env, two feet over 6 steps: foot 0 steps (up 5 cm every other step), foot 1 stays down
    # but for 2 cm at the last step, after the fall at step 4 (not counted)
    z = np.zeros((6, 1, 2))
    z[1::2, 0, 0] = 0.05
    z[5, 0, 1] = 0.02
    alive = np.array([True, True, True, True, True, False])[:, None]
    share, most = foot_lift.foot_lift(z + 0.3, alive)
    np.testing.assert_allclose(share, [2 / 5, 0.0])
    np.testing.assert_allclose(most, [0.05, 0.0], atol=1e-12)


def test_normalised_inputs_counts_the_envs_read_far_out_and_those_at_an_episode_start():
    import normalised_inputs

    # 3 envs, 2 frames of 3 values; env 0 at its first step (older frame zero), env 2 tilted
    mean, var = np.array([0.0, 0.0, 1.0] * 2), np.array([1.0, 1.0, 0.0009] * 2)
    obs = np.array([[0.1, 0.2, 1.0, 0, 0, 0], [0, 0.1, 0.99, 0, 0.1, 1.0], [0, 3.0, 0.7, 0, 0, 0.9]])
    raw = {
        "rollout_state": {"env_state": {"brax_state": {"obs": obs}, "step_count": np.array([0, 40, 30])}},
        "train_state": {"normalizers": {"policy": {"mean": mean, "var": var}}},
    }
    z, steps, std = normalised_inputs.normalised_inputs(raw)
    assert z[0, 5] == pytest.approx(-1.0 / 0.04) and std[2] == pytest.approx(0.03)
    figures = normalised_inputs.describe(z, steps, std, beyond=5.0, frame=3, frames=2)
    assert figures["envs_beyond"] == 2 and figures["of_them_in_first_frames"] == 1
    assert figures["features_beyond"] == [2] and figures["largest"] == 25.0
    assert figures["std_of_those_features"] == {2: 0.03}
