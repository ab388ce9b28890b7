"""Envs of one's own by entry point (`--task package.module:Name`, `strl_jax.envs.entry_points`).

Each kind (an MjxEnv class and factory, a Brax env class and factory; `tests/user_envs/`) trains,
resumes exactly, exports and plays; `train(cfg, env=...)` takes an object of one's own; a wrong
entry point, layout or randomiser stops with a ConfigError (exit 2) before anything compiles
(no jit is lowered: `jax.monitoring`'s lowering and compile events); declared layouts become the
groups' named components; `env.randomizer` draws each env's physics; a heightfield geom gives a
height scan.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the entry points name `tests.user_envs.*` from the repository root
    sys.path.insert(0, str(ROOT))

from strl_jax.configs.loader import config_from_dict, resolve_config  # noqa: E402
from strl_jax.deploy import main as deploy_main  # noqa: E402
from strl_jax.envs import entry_points, playground_env, symmetry  # noqa: E402
from strl_jax.envs.entry_points import register_env, task_dir_name, user_env  # noqa: E402
from strl_jax.envs.tasks import make_env_from_config  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402
from strl_jax.export import main as export_main  # noqa: E402
from strl_jax.networks.policy import make_policy_model  # noqa: E402
from strl_jax.play import main as play_main  # noqa: E402
from strl_jax.runners.runner import default_log_dir, train, with_env  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402
from tests.user_envs.pendulum import Pendulum  # noqa: E402

MJX = "tests.user_envs.slider:Slider"
MJX_FACTORY = "tests.user_envs.slider:make_slider"
BRAX = "tests.user_envs.pendulum:Pendulum"
BRAX_FACTORY = "tests.user_envs.pendulum:make_pendulum"
BROKEN = "tests.user_envs.broken"
SMALL = [
    "env.num_envs=4",
    "env.episode_length=20",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=0",
    "runner.save_interval=2",
    "runner.print_interval=1000",
]
TIME_KEYS = {"wall_time", "fps", "iteration_time"}
LOWERED = ("/jax/core/compile/jaxpr_to_mlir_module_duration", "/jax/core/compile/backend_compile_duration")


def small(*overrides: str) -> list[str]:
    return [*SMALL, *overrides]


def rows(log_dir: Path) -> list[dict]:
    lines = (log_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIME_KEYS} for line in lines]


def env_of(task: str, *overrides: str, num_envs: int = 2):
    cfg = resolve_config(task, overrides=[f"env.num_envs={num_envs}", *overrides])
    return make_env_from_config(cfg.env)


@pytest.fixture
def compiled():
    """The names of the programs jax lowers or compiles while the test runs."""
    seen: list[str] = []

    def listen(event: str, duration: float, **kwargs) -> None:
        if event in LOWERED:
            seen.append(str(kwargs.get("fun_name", event)))

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)


def randomize_mass(model, rng):
    """A randomiser of Playground's form: each env's body masses scaled by U(0.9, 1.1)."""
    scale = jax.vmap(lambda key: jax.random.uniform(key, (), minval=0.9, maxval=1.1))(rng)
    in_axes = jax.tree_util.tree_map(lambda _: None, model).tree_replace({"body_mass": 0})
    return model.tree_replace({"body_mass": scale[:, None] * model.body_mass}), in_axes


# ---- each kind end to end ----------------------------------------------------------------------
@pytest.fixture(scope="module", params=[MJX, MJX_FACTORY, BRAX, BRAX_FACTORY])
def runs(request, tmp_path_factory):
    """`(task, uninterrupted run, run stopped after 2 iterations and resumed to 4)`: the Brax class
    through the CLI in a subprocess, the others through `strl_jax.train.main`."""
    task = request.param
    base = tmp_path_factory.mktemp(task_dir_name(task))
    full, split = base / "full", base / "split"
    args = ["--task", task, "--quiet", "--max_iterations"]
    if task == BRAX:
        command = [sys.executable, "-m", "strl_jax.train", *args, "4", "--log_dir", str(full), *small()]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    else:
        assert train_main([*args, "4", "--log_dir", str(full), *small()]) == 0
    assert train_main([*args, "2", "--log_dir", str(split), *small()]) == 0
    assert train_main(["--resume", str(split), "--quiet", "--max_iterations", "4"]) == 0
    return task, full, split


def test_a_resumed_run_equals_an_uninterrupted_one(runs):
    task, full, split = runs
    assert yaml.safe_load((split / "config.yaml").read_text())["env"]["task"] == task
    assert [r["iteration"] for r in rows(split)] == [1, 2, 3, 4]
    assert rows(split) == rows(full)


def test_export_and_play(runs, tmp_path, capsys):
    task, full, _ = runs
    assert export_main([str(full), "--out", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "policy.onnx").stat().st_size > 0
    assert play_main([str(full), "--episodes", "2", "--no-video", "--out", str(tmp_path / "play")]) == 0
    out = capsys.readouterr().out
    assert f"{task}, checkpoint 4, 2 deterministic episodes" in out
    page = "episode.html" if "pendulum" in task else "episode.npz"
    assert (tmp_path / "play" / page).is_file()


def test_deploy_runs_an_mjx_entry_point_in_c_mujoco_and_names_why_not_a_brax_one(runs, tmp_path, capsys):
    task, full, _ = runs
    argv = [str(full), "--episodes", "1", "--episode_length", "5", "--json", str(tmp_path / "m.json")]
    if "pendulum" in task:  # Brax physics has no C MuJoCo twin
        assert deploy_main(argv) == 2
        assert "has no C MuJoCo twin" in capsys.readouterr().err
        return
    assert deploy_main(argv) == 0
    found = json.loads((tmp_path / "m.json").read_text())
    (native,), (jax_side,) = found["native"], found["jax"]
    assert native["length"] == jax_side["length"] == 5
    assert native["return"] == pytest.approx(jax_side["return"], rel=0.05, abs=1e-3)


def test_run_folders_are_named_after_the_entry_point():
    cfg = resolve_config(BRAX, overrides=["env.num_envs=2"])
    assert default_log_dir(cfg).parent == Path("runs", "Pendulum")
    assert task_dir_name("pkg.mod:Outer.Inner") == "Outer.Inner"
    assert task_dir_name("__main__:make.<locals>.Env") == "make._locals_.Env"


def test_train_takes_an_env_object_and_resumes_it_in_this_process_only(tmp_path, monkeypatch, capsys):
    """A factory defined inside a function (as in a notebook) is rebuilt from this process's table;
    another process (an empty table here) is told to pass `env=` again, which resumes it."""

    def notebook_pendulum(backend: str = "positional") -> Pendulum:
        return Pendulum(backend=backend)

    cfg = resolve_config(BRAX, overrides=small("runner.max_iterations=2"))  # the Brax runs' programs
    first = train(cfg, tmp_path, verbose=False, env=notebook_pendulum)
    stored = yaml.safe_load((tmp_path / "config.yaml").read_text())
    spec = f"{__name__}:{notebook_pendulum.__qualname__}"
    assert stored["env"]["task"] == spec and first.checkpoint == 2
    assert train_main(["--resume", str(tmp_path), "--quiet", "--max_iterations", "3"]) == 0
    monkeypatch.setattr(entry_points, "_IN_PROCESS", {})
    assert train_main(["--resume", str(tmp_path), "--quiet", "--max_iterations", "4"]) == 2
    assert "pass the env again" in capsys.readouterr().err
    stored = yaml.safe_load((tmp_path / "config.yaml").read_text())
    resumed = train(
        config_from_dict(stored), tmp_path, False, resume=True, more_iterations=1, env=notebook_pendulum
    )
    assert [r["iteration"] for r in rows(tmp_path)] == [1, 2, 3, 4] and resumed.checkpoint == 4


def test_env_objects_are_named_by_module_and_qualname(monkeypatch):
    cfg = resolve_config("inverted_pendulum")
    monkeypatch.setattr(entry_points, "_IN_PROCESS", {})
    assert with_env(cfg, Pendulum).env.task == BRAX
    monkeypatch.setattr(entry_points, "_IN_PROCESS", {})  # another object under a name drops programs
    instance = Pendulum(backend="positional")
    assert with_env(cfg, instance).env.task == BRAX and entry_points.registered(BRAX) is instance
    with pytest.raises(ConfigError, match="env= takes an env class, a factory function or an env instance"):
        with_env(cfg, 3)


# ---- construction and settings -----------------------------------------------------------------
def test_mjx_entry_points_get_their_default_config_with_impl_jax_and_playground_overrides():
    for task in (MJX, MJX_FACTORY):
        cfg = resolve_config(task, overrides=["env.playground.start_range=0.25"])
        user = user_env(cfg.env)
        assert user.family == "playground" and user.config.impl == "jax" and user.config.start_range == 0.25
        assert user.env.mjx_model.impl.value == "jax"
    assert resolve_config(overrides=[f"env.task={MJX}"]).env.task == MJX  # a YAML / override task too
    # make_pendulum's own default is generalized: it takes `backend`, so it gets env.backend
    assert user_env(resolve_config(BRAX_FACTORY).env).env.backend == "positional"


def test_layouts_become_named_components_that_parts_pick_by_name():
    env = env_of(MJX)
    assert env.components["policy"] == (("dof_pos", 1), ("dof_vel", 1))
    assert env.components["critic"] == (("state_dof_pos", 1), ("state_dof_vel", 1), ("dof_damping", 1))
    given = env_of(MJX, "env.obs_layout={state: [[x, 1], [v, 1]]}")  # the config wins over obs_layout
    assert (
        given.components["policy"] == (("x", 1), ("v", 1))
        and given.components["critic"] == env.components["critic"]
    )
    picked = env_of(MJX, "env.obs_components={policy: [dof_vel], critic: [dof_damping, state_dof_pos]}")
    assert picked.observation_shapes() == {"policy": (1,), "critic": (2,)}
    named = env_of("inverted_pendulum", "env.obs_layout={state: [[x, 1], [th, 1], [v, 1], [w, 1]]}")
    assert (
        named.components["policy"] == named.components["critic"] == (("x", 1), ("th", 1), ("v", 1), ("w", 1))
    )
    brax = env_of(BRAX, "env.obs_components={policy: [pole_angle, pole_vel]}")
    assert brax.observation_shapes() == {"policy": (2,), "critic": (4,)}
    assert brax.components["critic"][1] == ("pole_angle", 1)
    cfg = resolve_config(
        MJX,
        overrides=[
            "policy.class_name=StateAc",
            "algorithm.class_name=EstimatorPPO",
            "policy.estimator_obs_components=[dof_pos, dof_vel]",
            "policy.estimator_target_components=[dof_damping]",
            "policy.actor_hidden_dims=[8]",
            "policy.critic_hidden_dims=[8]",
        ],
    )
    model = make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes)
    params = jax.eval_shape(lambda k: model.init(k, env.observation_shapes()), jax.random.PRNGKey(0))
    estimator = params["params"]["stage_estimator"]["mlp"]  # dof_pos, dof_vel -> dof_damping
    assert estimator["hidden_0"]["kernel"].shape[0] == 2 and estimator["output"]["kernel"].shape[1] == 1


@pytest.mark.parametrize(
    ("task", "layout", "needle"),
    [
        (
            MJX,
            "{state: [[x, 1], [v, 2]]}",
            "env.obs_layout.state: sizes [1, 2] sum to 3, but observation 'state' has shape (2,)",
        ),
        (
            MJX,
            "{height: [[h, 1]]}",
            "env.obs_layout: 'height' is not an observation key; valid keys: ['privileged_state', 'state']",
        ),
        (MJX, "{state: [[x, 1], [x, 1]]}", "env.obs_layout.state names ['x'] more than once"),
        (BRAX, "{policy: [[x, 4]]}", "valid keys: ['state'] (the observation is one array)"),
        (BRAX, "{state: [[x, 4.5]]}", "each entry must be [name, size]"),
    ],
)
def test_bad_layouts_name_the_key_sizes_and_shape(task, layout, needle):
    with pytest.raises(ConfigError) as err:
        env_of(task, f"env.obs_layout={layout}")
    assert needle in str(err.value)


def test_a_user_randomiser_draws_each_envs_physics_and_replaces_a_registry_tasks(monkeypatch):
    spec = "env.randomizer=tests.user_envs.slider:randomize_damping"
    assert env_of(MJX).physics is None  # no randomiser of its own
    env = env_of(MJX, spec, num_envs=4)
    assert env.physics.fields == ("dof_damping",)
    state, obs = jax.jit(env.reset)(jax.random.PRNGKey(0))
    damping = np.asarray(state.physics["dof_damping"][:, 0])
    assert len(set(damping.tolist())) == 4 and np.all((damping >= 0.2) & (damping <= 2.0))
    np.testing.assert_array_equal(np.asarray(obs["critic"][:, 2]), damping)  # each env steps its own
    assert env_of(MJX, spec, "env.domain_randomization=false").physics is None
    # a registry task's own randomiser (one drawing masses here) is replaced
    monkeypatch.setattr(playground_env, "domain_randomizer", lambda task: randomize_mass)
    assert env_of("CartpoleBalance", "env.domain_randomization=true").physics.fields == ("body_mass",)
    assert env_of("CartpoleBalance", "env.domain_randomization=true", spec).physics.fields == ("dof_damping",)


def test_registry_only_features_refuse_or_take_entry_points_clearly():
    cfg = resolve_config(BRAX, overrides=["env.num_envs=2"])
    with pytest.raises(ConfigError, match="read off a registered Brax task's body layout"):
        make_env_from_config(cfg.env, extra_groups=("amp",))
    with pytest.raises(ConfigError, match="defined for brax tasks, not for playground task"):
        make_env_from_config(resolve_config(MJX).env, extra_groups=("amp",))
    # mirror tables by task name: an entry point's Name after the colon
    robot = SimpleNamespace(task="my_robots.go1:Go1JoystickStairs", components={"policy": (("command", 3),)})
    tables = symmetry.layout_tables(robot, ("Go1Joystick",), symmetry.GO1_RULES, {"policy": None})
    np.testing.assert_array_equal(tables["policy"][1], [1.0, -1.0, -1.0])
    with pytest.raises(ConfigError, match="the env is 'my_robots.go1:Spot'"):
        symmetry.layout_tables(SimpleNamespace(task="my_robots.go1:Spot"), ("Go1Joystick",), {}, {})


def test_height_scan_on_a_user_heightfield():
    env = env_of(
        "tests.user_envs.terrain:Terrain", "env.height_scan={geom: ground, body: block, num_x: 3, num_y: 2}"
    )
    assert env.components["critic"][-1] == ("height_scan", 6)
    assert env.observation_shapes()["critic"] == (9,)
    with pytest.raises(
        ConfigError, match="a user env needs a heightfield geom, named by env.height_scan.geom"
    ):
        env_of(MJX, "env.height_scan={body: block}")


# ---- errors before anything compiles -----------------------------------------------------------
@pytest.mark.parametrize(
    ("task", "overrides", "needle"),
    [
        ("tests.user_envs.slider", [], "entry point 'tests.user_envs.slider' is malformed (no ':')"),
        ("tests.user_envs.nope:X", [], "cannot import module 'tests.user_envs.nope' (ModuleNotFoundError"),
        (
            "tests.user_envs.slider:Nope",
            [],
            "has no attribute 'Nope'; its public classes and functions: ['Slider', 'default_config', "
            "'make_slider', 'randomize_damping']",
        ),
        (
            f"{BROKEN}:NOT_AN_ENV",
            [],
            "names 3 (of type int), not a class or function; expected an MjxEnv subclass",
        ),
        (f"{BROKEN}:Plain", [], "is the class Plain (bases: none), which is not an env; expected"),
        (f"{BROKEN}:returns_number", [], "returned builtins.int (3), not an env; expected"),
        (f"{BROKEN}:NeedsWidth", [], "missing 1 required keyword-only argument: 'width'"),
        (
            BRAX,
            ["env.env_kwargs={wings: 2}"],
            "could not be built with env.env_kwargs {'wings': 2, 'backend'",
        ),
        (
            f"{BROKEN}:Shapeshifter",
            [],
            "the observation changes between reset and step: reset gives {'privileged_state': (3,), "
            "'state': (2,)}, step gives {'privileged_state': (3,), 'state': (3,)}",
        ),
        (MJX, ["env.playground.nope=1"], "env.playground.nope is not a setting of entry point"),
        (BRAX, ["env.playground.impl=jax"], "env.playground applies to MJX envs, not to Brax env"),
        ("__main__:Robot", [], "pass the env again"),
        (MJX, ["env.randomizer=nocolon"], "env.randomizer='nocolon' must name a function"),
        (MJX, [f"env.randomizer={BROKEN}:nope"], "module 'tests.user_envs.broken' has no attribute 'nope'"),
        (
            MJX,
            [f"env.randomizer={BROKEN}:randomize_one_argument"],
            "takes 1 positional argument but 2 were given",
        ),
        (
            MJX,
            [f"env.randomizer={BROKEN}:randomize_returns_model"],
            "returned Model, not a pair (model, in_axes)",
        ),
    ],
)
def test_a_wrong_entry_point_or_randomiser_exits_2_before_compiling(
    task, overrides, needle, compiled, tmp_path, capsys
):
    code = train_main(["--task", task, "--log_dir", str(tmp_path), "--quiet", *small(*overrides)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert "Traceback" not in err and compiled == []


def test_playground_settings_need_a_default_config():
    def notebook_slider():
        from tests.user_envs.slider import Slider, default_config

        config = default_config()
        config.impl = "jax"
        return Slider(config)

    task = register_env(notebook_slider)
    assert resolve_config(task).env.task == task
    with pytest.raises(ConfigError, match="has no default config to apply them to"):
        resolve_config(task, overrides=["env.playground.impl=jax"])
