"""The sim-to-sim check's episodes: an exported policy in native MuJoCo beside the JAX env.

The run's ONNX policy (`policy.onnx`, written by `strl_jax.export` if missing, run by
onnxruntime) drives the run's Playground task on C MuJoCo's physics (`mujoco.MjData`, `mj_step`,
float64), and the same episodes run in the JAX env through strl_jax's evaluation loop. Two
native paths (`NATIVE_PATHS`):
- `generic`: any Playground task (registry or entry point) whose step calls
  Playground's `mjx_env.step`; C MuJoCo does the physics, the task's own code computes the
  observation, reward, termination, commands and its `state.info` on the native state
  (`strl_jax.envs.native_physics`), and the policy observes through the run's groups and
  components (height scan included). Episodes start from the JAX episodes' initial states, the
  task draws commands from its own state as in the JAX env.
- `hand`: Go1JoystickFlatTerrain / Go1JoystickRoughTerrain re-written in numpy
  (`strl_jax.envs.native_mujoco`), no JAX at all in the loop: a check of the generic path.
Both sides run the nominal model (no domain randomisation) and noise-free observations (the
task's observation-noise level set to 0 where its config has one), so the two columns differ
only by the physics engine (MJX vs C MuJoCo) and float32 vs float64.

Per episode: return (the env's full reward), velocity-tracking RMS errors in the base frame (xy
linear velocity, yaw rate) against the command in effect, episode length, falls. The command
line (`python -m strl_jax.deploy`) is `strl_jax.deploy`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from strl_jax.checkpoints.orbax_checkpoints import locate
from strl_jax.envs import native_mujoco as nm
from strl_jax.envs import native_physics as npx
from strl_jax.envs.commands import keeping_command, with_command
from strl_jax.envs.playground_env import flatten
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import ConfigError, ExportError
from strl_jax.export import deployed_layout, export_run
from strl_jax.train_loops.evaluation import act_in_env

METRICS = ("return", "lin_vel_rms", "yaw_rate_rms", "length", "fell")
# The native paths (`--native`): the task's own code on C MuJoCo's physics, or Go1's numpy twin.
NATIVE_PATHS = ("generic", "hand")
# Observation-noise levels of Playground tasks' configs (Go1, G1, T1, ...; H1; Op3): deploy sets
# the ones a task has to 0.
NOISE_LEVEL_KEYS = ("noise_config.level", "obs_noise.level", "obs_noise")
# `generic_simulation(command=...)`: each episode holds the command its start state holds.
KEEP_START_COMMAND = "start"


# ---- the exported policy -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class OnnxPolicy:
    """An exported policy in onnxruntime: its input layout and its recurrent inputs, if any."""

    session: Any
    layout: list[tuple[str, int]]
    hidden_inputs: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape at batch 1)

    def initial_hidden(self) -> dict[str, np.ndarray]:
        return {name: np.zeros(shape, np.float32) for name, shape in self.hidden_inputs}

    def __call__(self, obs: np.ndarray, hidden: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """`(action [A], hidden')` for one observation; `h_out` feeds `h_in` and so on."""
        outputs = [o.name for o in self.session.get_outputs()]
        values = self.session.run(outputs, {"obs": obs[None], **hidden})
        found = dict(zip(outputs, values, strict=True))
        nxt = {name: found[name.removesuffix("_in") + "_out"] for name in hidden}
        return np.asarray(found["actions"][0], np.float64), nxt


def load_onnx_policy(path: Path) -> OnnxPolicy:
    """The ONNX model at `path`; its `obs_components` metadata says how to build its input."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    if "obs_components" not in meta:
        raise ExportError(
            f"{path} has no obs_components metadata; re-export it with python -m strl_jax.export"
        )
    layout = [(str(n), int(s)) for n, s in json.loads(meta["obs_components"])]
    hidden = tuple(
        (i.name, (int(i.shape[0]), 1, *(int(d) for d in i.shape[2:])))
        for i in session.get_inputs()
        if i.name != "obs"
    )
    return OnnxPolicy(session=session, layout=layout, hidden_inputs=hidden)


def exported_onnx(run: Path, loaded: Any, checkpoint: int | None = None) -> Path:
    """`<run>/exported/policy.onnx` (`exported/checkpoint_<N>/` for a chosen checkpoint), exported
    now if missing or older than the checkpoint it should hold."""
    folder = run / "exported" if checkpoint is None else run / "exported" / f"checkpoint_{checkpoint}"
    path = folder / "policy.onnx"
    step_dir = locate(run)[0] / str(loaded.step)
    stale = step_dir.exists() and path.exists() and path.stat().st_mtime < step_dir.stat().st_mtime
    if stale or not path.exists():
        export_run(loaded, folder)
    return path


# ---- commands ----------------------------------------------------------------------------------
@dataclasses.dataclass
class CommandProcess:
    """The env's command process (draws, exponential resampling times), a fixed command, or a
    recorded schedule (`[T, 3]`, the command in effect at each step) to replay."""

    task: nm.NativeTask
    rng: np.random.Generator
    fixed: np.ndarray | None = None
    schedule: np.ndarray | None = None
    countdown: int = 0

    def first(self) -> np.ndarray:
        if self.schedule is not None:
            return self.schedule[0]
        if self.fixed is not None:
            return self.fixed
        self.countdown = nm.steps_until_next_command(self.task, self.rng)
        return nm.initial_command(self.task, self.rng)

    def after_step(self, t: int, command: np.ndarray) -> np.ndarray:
        """The command in effect at step `t + 1`."""
        if self.schedule is not None:
            return self.schedule[min(t + 1, len(self.schedule) - 1)]
        if self.fixed is not None:
            return self.fixed
        self.countdown -= 1
        if self.countdown > 0:
            return command
        self.countdown = nm.steps_until_next_command(self.task, self.rng)
        return nm.next_command(self.task, self.rng, command)


# ---- metrics ----------------------------------------------------------------------------------
def episode_metrics(
    rewards: np.ndarray, velocity: np.ndarray, command: np.ndarray, fell: bool
) -> dict[str, float]:
    """Return, tracking RMS errors (base frame, against the command in effect), length, fall."""
    lin = np.sum(np.square(velocity[:, :2] - command[:, :2]), axis=-1)
    yaw = np.square(velocity[:, 2] - command[:, 2])
    return {
        "return": float(np.sum(rewards)),
        "lin_vel_rms": float(np.sqrt(np.mean(lin))),
        "yaw_rate_rms": float(np.sqrt(np.mean(yaw))),
        "length": float(len(rewards)),
        "fell": float(fell),
    }


def mean_metrics(episodes: Sequence[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([e[k] for e in episodes])) for k in METRICS}


# ---- native episodes ---------------------------------------------------------------------------
def native_episode(
    task: nm.NativeTask,
    policy: OnnxPolicy,
    start: tuple[np.ndarray, np.ndarray],
    commands: CommandProcess,
    frame: Callable[[Any], None] | None = None,
) -> dict[str, float]:
    """One episode in C MuJoCo until a fall or `task.episode_length` steps."""
    data = nm.reset_data(task, *start)
    book = nm.fresh_bookkeeping(commands.first(), task.model.nu)
    obs, hidden = nm.observation_components(task, data, book), policy.initial_hidden()
    rewards, velocity, command, fell = [], [], [], False
    for t in range(task.episode_length):
        action, hidden = policy(nm.assemble(obs, policy.layout), hidden)
        command.append(book.command.copy())
        out = nm.step(task, data, book, action)
        rewards.append(out.reward)
        velocity.append(nm.base_velocity(data))
        if frame is not None:
            frame(data)
        if out.fell:
            fell = True
            break
        obs = out.obs
        book.command = commands.after_step(t, book.command)
    return episode_metrics(np.array(rewards), np.array(velocity), np.array(command), fell)


# ---- generic native episodes: the task's own code on C MuJoCo's physics ------------------------
def generic_simulation(
    loaded: Any, episodes: int, episode_length: int | None, command: Any = None
) -> npx.NativeSimulation:
    """The run's env on nominal, noise-free physics (`episodes` envs, holding `command` where
    given, or `KEEP_START_COMMAND`: the command of each episode's start), its physics replaced by
    C MuJoCo's (`strl_jax.envs.native_physics`)."""
    env_cfg = nominal_env_config(loaded.cfg.env, episode_length, noise_level_keys(loaded.env.env))
    env = make_env_from_config(env_cfg, num_envs=episodes)
    if isinstance(command, str) and command == KEEP_START_COMMAND:
        env = keeping_command(env)
    elif command is not None:
        env = with_command(env, command)
    return npx.native_simulation(env)


def first_states(sim: npx.NativeSimulation, seed: int) -> Any:
    """The initial states `VecEnv.reset(PRNGKey(seed))` draws, the ones `jax_rollout` starts from."""
    import jax

    state, _ = jax.jit(sim.vec.reset)(jax.random.PRNGKey(seed))
    return state.brax_state


def row(tree: Any, i: int) -> Any:
    """Env `i`'s part of a batched state."""
    import jax

    return jax.tree.map(lambda x: x[i], tree)


def policy_entries(
    loaded: Any, components: Sequence[tuple[str, int]], layout: list[tuple[str, int]]
) -> np.ndarray:
    """Entries of the policy group the exported model reads, in its input order: all of them, or
    the measured ones where estimator stages replace some (as `strl_jax.export` lays them out)."""
    components = [(str(name), int(size)) for name, size in components]
    size = sum(n for _, n in components)
    if components == list(layout):
        return np.arange(size)
    measured = np.asarray(loaded.actor.model.measured_indices(size))
    if components and list(deployed_layout(components, {}, measured).components) == list(layout):
        return measured
    raise ConfigError(
        f"the exported policy reads components {layout}, the env's policy group holds {components}; "
        "re-export the run (python -m strl_jax.export)"
    )


def generic_episode(
    sim: npx.NativeSimulation,
    policy: OnnxPolicy,
    start: Any,
    entries: np.ndarray,
    frame: Callable[[Any], None] | None = None,
) -> dict[str, float]:
    """One episode on C MuJoCo from the task's initial state `start` until the task ends it or
    `episode_length` steps; velocities as the env's locomotion probe measures (NaN without one)."""
    data, state = npx.native_reset(sim, start)
    axes = getattr(sim.vec.probe, "frame", None)  # the commands' frame (Barkour's: the IMU's)
    hidden = policy.initial_hidden()
    rewards, velocity, command, fell = [], [], [], False
    for _ in range(sim.vec.episode_length):
        obs = npx.policy_observation(sim, state)[entries]
        action, hidden = policy(obs.astype(np.float32), hidden)
        command.append(np.asarray(command_in_effect(state.info), np.float64))
        state, _ = npx.native_step(sim, data, state, action)
        rewards.append(float(state.reward))
        velocity.append(nm.base_velocity(data, axes) if sim.vec.probe is not None else np.full(3, np.nan))
        if frame is not None:
            frame(data)
        if float(state.done) > 0:
            fell = True
            break
    return episode_metrics(np.array(rewards), np.array(velocity), np.array(command), fell)


# ---- the JAX side --------------------------------------------------------------------------------
def nominal_env_config(
    env_cfg: Any, episode_length: int | None = None, noise_keys: Sequence[str] = NOISE_LEVEL_KEYS[:1]
) -> Any:
    """The run's env config on nominal physics with noise-free observations (`noise_keys`: the
    task's observation-noise levels, `noise_level_keys`), rewarded by the env alone (no
    `termination_reward`: the native side computes the env's own reward)."""
    playground = {**flatten(dict(env_cfg.playground)), **dict.fromkeys(noise_keys, 0.0)}
    length = env_cfg.episode_length if episode_length is None else episode_length
    return dataclasses.replace(
        env_cfg,
        playground=playground,
        domain_randomization=False,
        episode_length=length,
        termination_reward=0.0,
    )


def noise_level_keys(env: Any) -> tuple[str, ...]:
    """The observation-noise levels (`NOISE_LEVEL_KEYS`) the config of `env`'s Playground task has."""
    config = getattr(npx.mjx_env_of(env), "_config", None)
    if config is None or not hasattr(config, "to_dict"):
        return ()
    flat = flatten(config.to_dict())
    return tuple(k for k in NOISE_LEVEL_KEYS if isinstance(flat.get(k), int | float))


def command_in_effect(info: Any, batch: tuple[int, ...] = ()) -> Any:
    """`info["command"][..., :3]` (vx, vy, yaw rate), zeros for a task without a command."""
    import jax.numpy as jnp

    found = info.get("command") if isinstance(info, dict) else None
    return jnp.zeros((*batch, 3)) if found is None else jnp.asarray(found)[..., :3]


def jax_rollout(env: Any, actor: Any, params: Any, normalizers: Any, key: Any, command: Any = None) -> dict:
    """`episode_length` steps of the deterministic policy in `env` (one episode per env counted):
    initial states (`start`: the single env's whole state), the command in effect, reward, end
    flags and base velocity per step (NaN without the env's locomotion probe)."""
    import jax.numpy as jnp

    if command is not None:
        env = with_command(env, command)
    state, obs = env.reset(key)
    batch = (env.num_envs,)

    def record(env_state, _obs, _action, res):
        return {
            "command": command_in_effect(env_state.brax_state.info, batch),
            "reward": res.reward,
            "terminated": res.terminated,
            "done": res.terminated | res.truncated,
            "velocity": res.probe.get("velocity", jnp.full((*batch, 3), jnp.nan)),
        }

    _, steps = act_in_env(
        env,
        lambda o, h, _k: actor.act(params, normalizers, o, h),
        actor.reset_hidden,
        (state, obs, actor.initial_hidden(env.num_envs)),
        record,
        length=env.episode_length,
    )
    data = state.brax_state.data
    return {"qpos": data.qpos, "qvel": data.qvel, "start": state.brax_state, **steps}


def first_episodes(steps: dict) -> list[dict[str, float]]:
    """Per env, the metrics of its first episode in a `jax_rollout` (numpy arrays `[T, N, ...]`)."""
    done = np.asarray(steps["done"], bool)
    out = []
    for i in range(done.shape[1]):
        ends = np.flatnonzero(done[:, i])
        length = int(ends[0]) + 1 if len(ends) else done.shape[0]
        fell = bool(np.asarray(steps["terminated"])[length - 1, i])
        out.append(
            episode_metrics(
                np.asarray(steps["reward"])[:length, i],
                np.asarray(steps["velocity"])[:length, i],
                np.asarray(steps["command"])[:length, i],
                fell,
            )
        )
    return out


def jax_episodes(loaded: Any, episodes: int, seed: int, episode_length: int | None, command: Any) -> dict:
    """The JAX evaluation of the same policy on nominal, noise-free physics (numpy results)."""
    import jax

    env_cfg = nominal_env_config(loaded.cfg.env, episode_length, noise_level_keys(loaded.env.env))
    env = make_env_from_config(env_cfg, num_envs=episodes)
    actor = loaded.actor
    rollout = jax.jit(lambda p, n, k: jax_rollout(env, actor, p, n, k, command))
    return jax.device_get(rollout(loaded.params, loaded.normalizers, jax.random.PRNGKey(seed)))


# ---- the whole check -----------------------------------------------------------------------------
def native_task_of(loaded: Any, episode_length: int | None) -> nm.NativeTask:
    """The native twin of the run's task on its nominal, noise-free config."""
    nm.require_supported(loaded.cfg.env.task)
    env_cfg = nominal_env_config(loaded.cfg.env, episode_length)
    env = make_env_from_config(env_cfg, num_envs=1)
    return nm.native_task(env.env, env_cfg.task, env.episode_length, env_cfg.clip_actions)


@dataclasses.dataclass
class Comparison:
    """Per-episode metrics of both sides (JAX's empty when skipped) and their wall times."""

    native: list[dict[str, float]]
    jax: list[dict[str, float]]
    native_seconds: float
    jax_seconds: float


def compare(
    loaded: Any,
    policy: OnnxPolicy,
    episodes: int,
    seed: int = 0,
    episode_length: int | None = None,
    command: Sequence[float] | None = None,
    with_jax: bool = True,
    frame: Callable[[Any], None] | None = None,
    native: str = "generic",
) -> Comparison:
    """Run the JAX episodes (if asked), then the native ones (`native`: one of `NATIVE_PATHS`)
    from the same starts and commands."""
    if native not in NATIVE_PATHS:
        raise ConfigError(f"unknown native path {native!r}; valid: {list(NATIVE_PATHS)}")
    if native == "generic":
        return compare_generic(loaded, policy, episodes, seed, episode_length, command, with_jax, frame)
    task = native_task_of(loaded, episode_length)
    rng = np.random.default_rng(seed)
    fixed = None if command is None else np.asarray(command, np.float64)
    jax_metrics, jax_seconds, starts, schedules = [], 0.0, None, None
    if with_jax:
        begin = time.perf_counter()
        steps = jax_episodes(loaded, episodes, seed, episode_length, fixed)
        jax_seconds = time.perf_counter() - begin
        jax_metrics = first_episodes(steps)
        starts = list(zip(np.asarray(steps["qpos"]), np.asarray(steps["qvel"]), strict=True))
        schedules = np.swapaxes(np.asarray(steps["command"], np.float64), 0, 1)
    begin = time.perf_counter()
    native = []
    for i in range(episodes):
        start = starts[i] if starts is not None else nm.random_start(task, rng)
        schedule = schedules[i] if schedules is not None else None
        process = CommandProcess(task, rng, fixed=fixed, schedule=schedule)
        native.append(native_episode(task, policy, start, process, frame if i == 0 else None))
    return Comparison(native, jax_metrics, time.perf_counter() - begin, jax_seconds)


def compare_generic(
    loaded: Any,
    policy: OnnxPolicy,
    episodes: int,
    seed: int,
    episode_length: int | None,
    command: Sequence[float] | None,
    with_jax: bool,
    frame: Callable[[Any], None] | None,
) -> Comparison:
    """`compare` on the generic path: the native episodes start from the JAX episodes' initial
    states (or the same draws without JAX), and the task draws its commands as in the JAX env."""
    fixed = None if command is None else np.asarray(command, np.float64)
    sim = generic_simulation(loaded, episodes, episode_length, fixed)
    entries = policy_entries(loaded, sim.vec.components.get("policy", ()), policy.layout)
    jax_metrics, jax_seconds = [], 0.0
    if with_jax:
        begin = time.perf_counter()
        steps = jax_episodes(loaded, episodes, seed, episode_length, fixed)
        jax_seconds = time.perf_counter() - begin
        jax_metrics, starts = first_episodes(steps), steps["start"]
    else:
        starts = first_states(sim, seed)
    begin = time.perf_counter()
    native = [
        generic_episode(sim, policy, row(starts, i), entries, frame if i == 0 else None)
        for i in range(episodes)
    ]
    return Comparison(native, jax_metrics, time.perf_counter() - begin, jax_seconds)


def native_model(loaded: Any, native: str) -> tuple[Any, float]:
    """The MjModel the native episodes simulate and their control step (for video and viewer)."""
    if native == "hand":
        task = native_task_of(loaded, None)
        return task.model, task.dt
    return npx.mjx_env_of(loaded.env.env).mj_model, float(loaded.env.dt)
