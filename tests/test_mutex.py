"""Mutex policies (st_rl ActorCriticMutex / FieldMutex / ClimbMutex) over tiny saved runs."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from flax import struct

from strl_jax.checkpoints.orbax_checkpoints import (
    CHECKPOINT_DIR,
    close_manager,
    open_manager,
    save_checkpoint,
)
from strl_jax.configs.loader import config_to_dict, resolve_config
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.inference import init_policy_state
from strl_jax.mutex import (
    MutexConfig,
    mutex_config,
    mutex_policy,
    non_selected_resets,
    policy_selection,
    sub_observation,
)
from strl_jax.mutex_from_runs import load_mutex_policy, load_sub_policies, run_action_scale
from strl_jax.networks.acting import acting_policy
from tests.tiny_config import tiny

NAMED = "env.obs_groups={policy: {x: [0], last_action: [1], command: [2], v: [3]}}"
SUB_RUNS = {  # two of one structure (one vmap), a recurrent one, a smaller jump-down one
    "walk": ("policy.actor_hidden_dims=[16]",),
    "walk2": ("policy.actor_hidden_dims=[16]",),
    "rnn": (
        "policy.class_name=ActorCriticRecurrent",
        "policy.rnn_type=gru",
        "policy.rnn_hidden_size=8",
        "policy.actor_hidden_dims=[8]",
    ),
    "down": ("policy.actor_hidden_dims=[8]",),
}
SCALES = (0.25, 0.5, 1.0, 2.0)
ENV_SCALE = 0.5


def save_random_run(path, overrides, seed):
    """A run folder holding one checkpoint of random weights and randomised normalisers."""
    cfg = resolve_config("inverted_pendulum", overrides=tiny(NAMED, *overrides))
    env = make_env_from_config(cfg.env, num_envs=1)
    state = init_policy_state(
        jax.random.PRNGKey(seed), cfg, env.observation_shapes(), env.action_size, env.components
    )
    norm = {
        k: v.replace(mean=v.mean + 0.1 * (seed + 1), var=v.var * (1.0 + seed))
        for k, v in state.normalizers.items()
    }
    manager = open_manager(path / CHECKPOINT_DIR)
    save_checkpoint(
        manager,
        1,
        {"train_state": {"params": state.params, "normalizers": norm}},
        {"config": config_to_dict(cfg)},
    )
    close_manager(manager)
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("subs")
    return {name: save_random_run(root / name, o, seed) for seed, (name, o) in enumerate(SUB_RUNS.items())}


@pytest.fixture(scope="module")
def subs(runs):
    return load_sub_policies(list(runs.values()), [None] * len(runs))


def layout(n_select: int):
    return (("x", 1), ("last_action", 1), ("command", 1), ("v", 1), ("engaging_block", n_select))


def field(subs, **options):
    opts = dict(
        class_name="ActorCriticFieldMutex",
        sub_policy_paths=("a", "b", "c"),
        env_action_scale=ENV_SCALE,
        sub_action_scales=SCALES[:3],
        reset_non_selected="none",
    )
    opts.update(options)
    return mutex_policy(MutexConfig(**opts), subs[:3], layout(5))


def observations(choice, key=0, n_select=5, flag=None):
    """Observations whose engaging_block selects `choice[b]` (-1: all zeros)."""
    b = len(choice)
    obs = np.array(jax.random.normal(jax.random.PRNGKey(key), (b, 4 + n_select)))
    block = np.zeros((b, n_select), np.float32)
    for row, c in enumerate(choice):
        if c >= 0:
            block[row, 1 + c] = 1.0
    if flag is not None:
        block[:, -1] = flag
    obs[:, 4:] = block
    return jnp.asarray(obs, jnp.float32)


def standalone(sub, x, h):
    return acting_policy(sub.actor, sub.params, sub.normalizers, sub.obs_size).step(x, h)


def own_input(obs, scale):
    """A sub-policy's input: its components, the previous action in its own scale."""
    return obs[:, :4].at[:, 1].multiply(ENV_SCALE / scale)


def test_executed_action_is_the_selected_sub_policys_scaled_action(subs):
    policy = field(subs)
    assert [m for _, _, m in policy.spec.groups] == [(0, 1), (2,)]  # same structures share a vmap
    choice = [0, 1, 2, -1, 2, 1]
    obs = observations(choice)
    action, state = jax.jit(policy.step)(obs, policy.initial_hidden(len(choice)))
    for i, sub in enumerate(subs[:3]):
        h = acting_policy(sub.actor, sub.params, sub.normalizers, sub.obs_size).initial_hidden(len(choice))
        ref, _ = standalone(sub, own_input(obs, SCALES[i]), h)
        expected = ref * SCALES[i] / ENV_SCALE
        rows = np.array([r for r, c in enumerate(choice) if max(c, 0) == i])
        np.testing.assert_allclose(action[rows], expected[rows], rtol=1e-5, atol=1e-6)


def test_recurrent_sub_policy_keeps_its_own_memory(subs):
    policy = field(subs)
    rnn = subs[2]
    steps = [observations([2, 2, 0], key=k) for k in range(3)]
    state = policy.initial_hidden(3)
    h = acting_policy(rnn.actor, rnn.params, rnn.normalizers, rnn.obs_size).initial_hidden(3)
    step = jax.jit(policy.step)
    for obs in steps:
        action, state = step(obs, state)
        ref, h = standalone(rnn, own_input(obs, SCALES[2]), h)
        np.testing.assert_allclose(action[:2], (ref * SCALES[2] / ENV_SCALE)[:2], rtol=1e-5, atol=1e-6)
    mine = jax.tree.map(lambda x: x[0], state.hidden[1])
    np.testing.assert_allclose(np.asarray(mine), np.asarray(h), rtol=1e-5, atol=1e-6)
    # an episode end restarts that env's memories only
    state = policy.reset(state, jnp.array([True, False, False]))
    assert float(jnp.abs(state.hidden[1][:, :, 0]).max()) == 0.0
    assert float(jnp.abs(state.hidden[1][:, :, 1]).max()) > 0.0


def test_selection_is_smoothed_over_the_last_k_steps(subs):
    policy = field(subs, action_smoothing_buffer_len=3)
    state = policy.initial_hidden(1)
    outputs = jax.jit(policy.outputs)
    expected = [[1 / 3, 0, 0], [1 / 3, 1 / 3, 0], [1 / 3, 2 / 3, 0], [0, 1, 0], [0, 2 / 3, 1 / 3]]
    for t, c in enumerate([0, 1, 1, 1, 2]):
        action, info, state = outputs(observations([c], key=t), state)
        np.testing.assert_allclose(info["selection"][0], expected[t], atol=1e-6)
        mixed = sum(info["sub_actions"][i] * SCALES[i] / ENV_SCALE * expected[t][i] for i in range(3))
        np.testing.assert_allclose(action, mixed, rtol=1e-5, atol=1e-6)


def test_commands_are_written_into_each_sub_policys_input(subs):
    policy = field(subs, cmd_vel_mapping={1: 0.7, "2": [0.2, 0.4]}, cmd_scales=(1.0, 2.0, 3.0))
    obs = observations([0, 1, 2, 0])
    state = policy.initial_hidden(4)
    spec = policy.spec
    np.testing.assert_allclose(sub_observation(spec, obs, state.commands, 0)[:, 2], obs[:, 2])
    np.testing.assert_allclose(sub_observation(spec, obs, state.commands, 1)[:, 2], 1.4, rtol=1e-6)
    drawn = sub_observation(spec, obs, state.commands, 2)[:, 2] / 3.0
    assert bool(jnp.all((drawn >= 0.2) & (drawn <= 0.4)))
    assert len(set(np.round(np.asarray(drawn), 6))) > 1  # drawn per env
    done = jnp.array([True, False, True, False])
    after = policy.reset(state, done).commands
    np.testing.assert_array_equal(after[~done], state.commands[~done])
    assert bool(jnp.all(after[done][:, 2] != state.commands[done][:, 2]))
    assert bool(jnp.all((after[:, 2] >= 0.2) & (after[:, 2] <= 0.4)))
    np.testing.assert_allclose(after[:, 1], 0.7)
    # the sub-policy acts on that input
    action, _ = jax.jit(policy.step)(obs, state)
    x = own_input(obs, SCALES[1]).at[:, 2].set(1.4)
    ref, _ = standalone(subs[1], x, {})
    np.testing.assert_allclose(action[1], ref[1] * SCALES[1] / ENV_SCALE, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "kept"),
    [("none", [True, True]), ("all", [False, False]), ("when_skill", [True, False])],
)
def test_memories_of_non_selected_sub_policies_restart_per_option(subs, mode, kept):
    """The recurrent sub-policy (index 2, a skill) runs while env 0 walks (0) and env 1 runs skill 1."""
    policy = field(subs, reset_non_selected=mode)
    state = policy.initial_hidden(2)
    step = jax.jit(policy.step)
    _, state = step(observations([2, 2]), state)
    _, state = step(observations([0, 1], key=1), state)
    alive = np.asarray(jnp.abs(state.hidden[1][0, 0]).max(axis=-1) > 0)
    np.testing.assert_array_equal(alive, kept)


def test_reset_rules_on_constructed_selections(subs):
    spec = field(subs, reset_non_selected="when_skill").spec
    sel = jnp.array([[True, False, False], [False, True, False], [False, False, True]])
    expected = [[False, False, False], [False, False, True], [False, True, False]]
    np.testing.assert_array_equal(non_selected_resets(spec, sel[None].astype(jnp.float32), sel), expected)
    spec = field(subs, reset_non_selected=True, action_smoothing_buffer_len=2).spec
    history = jnp.stack([sel, sel[::-1]]).astype(jnp.float32)
    np.testing.assert_array_equal(
        non_selected_resets(spec, history, sel[::-1]),
        [[False, True, False], [True, False, True], [False, True, False]],
    )


def test_climb_mutex_splits_the_jump_by_direction(subs):
    cfg = MutexConfig(
        class_name="ActorCriticClimbMutex",
        sub_policy_paths=("a", "b", "c"),
        jump_down_policy_path="d",
        jump_obstacle_id=2,
        env_action_scale=ENV_SCALE,
        sub_action_scales=SCALES,
        cmd_vel_mapping={2: [0.2, 0.4]},
    )
    policy = mutex_policy(cfg, subs, layout(5))
    assert [m for _, _, m in policy.spec.groups] == [(0, 1), (2,), (3,)]
    up, down = observations([2, 0, 1], flag=1.0), observations([2, 0, 1], flag=-1.0)
    np.testing.assert_array_equal(policy_selection(policy.spec, up).argmax(-1), [2, 0, 1])
    np.testing.assert_array_equal(policy_selection(policy.spec, down).argmax(-1), [3, 0, 1])
    state = policy.initial_hidden(3)
    np.testing.assert_array_equal(state.commands[:, 3], state.commands[:, 2])  # jump_down_vel None
    action, _ = jax.jit(policy.step)(down, state)
    x = own_input(down, SCALES[3]).at[:, 2].set(state.commands[:, 3])
    ref, _ = standalone(subs[3], x, {})
    np.testing.assert_allclose(action[0], ref[0] * SCALES[3] / ENV_SCALE, rtol=1e-5, atol=1e-6)
    fixed = mutex_policy(dataclasses.replace(cfg, jump_down_vel=0.9), subs, layout(5))
    np.testing.assert_allclose(fixed.initial_hidden(2).commands[:, 3], 0.9)


def test_loads_from_a_config_file_and_reads_scales_from_the_runs(runs, tmp_path):
    path = tmp_path / "mutex.yaml"
    names = ["walk", "rnn"]
    path.write_text(
        yaml.safe_dump(
            {
                "policy": {
                    "class_name": "ActorCriticFieldMutex",
                    "sub_policy_class_name": "ActorCriticRecurrent",
                    "sub_policy_paths": [runs[n] for n in names],
                    "env_action_scale": 1.0,
                    "action_smoothing_buffer_len": 2,
                    "reset_non_selected": "when_skill",
                }
            }
        )
    )
    policy = load_mutex_policy(path)
    assert policy.spec.sub_scales == (1.0, 1.0)  # Brax runs train unscaled
    assert policy.observation_size == 4 + 4  # the runs' components, then engaging_block
    action, _ = jax.jit(policy.step)(observations([1, 0], n_select=4), policy.initial_hidden(2))
    assert action.shape == (2, 1)
    cfg = resolve_config("inverted_pendulum", overrides=tiny())
    assert run_action_scale(cfg) == 1.0
    pg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, playground={"action_scale": 0.3}))
    assert run_action_scale(pg) == 0.3


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"class_name": "ActorCriticFoo"}, "valid choices"),
        ({"reset_non_selected": "some"}, "when_skill"),
        ({"class_name": "ActorCriticClimbMutex"}, "jump_down_policy_path"),
        ({"cmd_vel_mapping": {5: 1.0}}, "0..1"),
        ({"sub_policy_paths": []}, "sub_policy_paths"),
        ({"action_smoothing_buffer_len": 0}, ">= 1"),
        ({"hidden_dims": [4]}, "unknown mutex policy options"),
    ],
)
def test_config_errors_name_the_problem(options, needle):
    with pytest.raises(ConfigError, match=needle):
        mutex_config({"policy": {"sub_policy_paths": ["a", "b"], **options}})


def test_missing_selection_component_is_an_error(subs):
    cfg = MutexConfig(sub_policy_paths=("a", "b"), sub_action_scales=SCALES[:2])
    with pytest.raises(ConfigError, match="engaging_block"):
        mutex_policy(cfg, subs[:2], layout(5)[:-1])


def test_play_runs_a_mutex_config_in_its_env(runs, tmp_path, capsys):
    from strl_jax import play

    path = tmp_path / "mutex.yaml"
    named = {"x": [0], "last_action": [1], "command": [2], "v": [3], "engaging_block": [0, 1, 2]}
    policy = {
        "class_name": "ActorCriticFieldMutex",
        "sub_policy_paths": [runs["walk"], runs["rnn"]],
        "reset_non_selected": "when_skill",
        "cmd_vel_mapping": {1: [0.0, 0.1]},
    }
    path.write_text(yaml.safe_dump({"policy": policy, "env": {"obs_groups": {"policy": named}}}))
    assert play.main([str(path), "--episodes", "2", "--no-video"]) == 0
    out = capsys.readouterr().out
    assert "inverted_pendulum, 2 sub-policies, 2 deterministic episodes" in out
    assert (tmp_path / "mutex_play" / "episode.html").is_file()


def test_mutex_class_names_are_not_trainable_policies():
    from strl_jax.networks.policy_classes import policy_class

    with pytest.raises(ConfigError, match="load_mutex_policy"):
        policy_class("ActorCriticFieldMutex")


def test_base_mutex_runs_the_first_sub_policy(subs):
    cfg = MutexConfig(
        class_name="ActorCriticMutex",
        sub_policy_paths=("a", "b"),
        env_action_scale=ENV_SCALE,
        sub_action_scales=SCALES[:2],
    )
    policy = mutex_policy(cfg, subs[:2], layout(5)[:-1])
    obs = observations([1, 1])[:, :4]
    action, _ = jax.jit(policy.step)(obs, policy.initial_hidden(2))
    ref, _ = standalone(subs[0], own_input(obs, SCALES[0]), {})
    np.testing.assert_allclose(action, ref * SCALES[0] / ENV_SCALE, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- export
@pytest.fixture(scope="module")
def switch_onnx(subs):
    """A 3-sub-policy switch (a vmapped pair and a GRU) with smoothing, a fixed and a drawn
    command, as ONNX, and an onnxruntime session of it."""
    import onnxruntime as ort

    from strl_jax.export import mutex_onnx_model

    policy = field(
        subs,
        action_smoothing_buffer_len=3,
        reset_non_selected="all",
        cmd_vel_mapping={1: 0.7, 2: [0.2, 0.4]},
        cmd_scales=(1.0, 2.0, 3.0),
    )
    model = mutex_onnx_model(policy, None, "inverted_pendulum")
    return policy, model, ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_onnx_switch_interface(switch_onnx):
    policy, model, session = switch_onnx
    assert [i.name for i in session.get_inputs()] == ["obs", "selections_in", "commands", "sub2_h_in"]
    assert [o.name for o in session.get_outputs()] == ["actions", "selections_out", "sub2_h_out"]
    meta = json.loads({p.key: p.value for p in model.metadata_props}["mutex"])
    assert meta["commands"] == [None, 0.7, [0.2, 0.4]] and meta["smoothing"] == 3


def test_onnx_switch_equals_the_jax_step_over_steps(switch_onnx):
    """Same actions and carried state as `MutexPolicy.step` while the selection moves between
    sub-policies (smoothing, the GRU's memory and its restarts included)."""
    policy, _, session = switch_onnx
    state = policy.initial_hidden(4)
    feed_sel = np.asarray(state.selections)
    h = np.asarray(state.hidden[1][0])
    step = jax.jit(policy.step)
    for t, choice in enumerate([[0, 1, 2, -1], [2, 2, 1, 0], [2, 0, 2, 1], [1, 0, 2, 2], [0, 0, 0, 2]]):
        obs = observations(choice, key=10 + t)
        action, state = step(obs, state)
        out = session.run(
            None,
            {
                "obs": np.asarray(obs),
                "selections_in": feed_sel,
                "commands": np.asarray(state.commands),
                "sub2_h_in": h,
            },
        )
        np.testing.assert_allclose(out[0], action, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[1], state.selections, atol=1e-6)
        np.testing.assert_allclose(out[2], state.hidden[1][0], rtol=1e-5, atol=1e-5)
        feed_sel, h = out[1], out[2]


# ---------------------------------------------------------------------------- skill selection
SEGMENT = 3
SWITCH_EPISODE = 12


@struct.dataclass
class CommandState:
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    metrics: dict
    info: dict


class CommandEnv:
    """A joystick-like env: the command in `info`, resampled every step, shown in the observation."""

    action_size = 1
    dt = 0.02

    def observe(self, info: dict) -> jax.Array:
        return jnp.concatenate([info["pos"][None], info["command"]])

    def reset(self, key):
        info = {"pos": jnp.zeros(()), "command": jax.random.uniform(key, (3,)), "steps_until_next_cmd": 1}
        return CommandState(self.observe(info), jnp.zeros(()), jnp.zeros(()), {}, info)

    def step(self, state, action):
        info = {**state.info, "pos": state.info["pos"] + action[0], "command": state.info["command"] + 1.0}
        return state.replace(obs=self.observe(info), reward=info["command"][0], info=info)


def expected_block(steps: np.ndarray, n: int, offset: int = 1) -> np.ndarray:
    block = np.zeros((len(steps), offset + n), np.float32)
    block[np.arange(len(steps)), offset + (steps // SEGMENT) % n] = 1.0
    return block


def command_env(num_envs: int, episode_length: int):
    from strl_jax.envs.vec_env import VecEnv

    return VecEnv(
        env=CommandEnv(),
        num_envs=num_envs,
        episode_length=episode_length,
        observe=lambda s: {"policy": s.obs, "critic": s.obs},
        components={"policy": (("x", 1), ("command", 3))},
    )


def test_skill_selection_block_follows_the_schedule_and_restarts_with_episodes():
    from strl_jax.envs.skill_selection import SkillSchedule, with_skill_selection

    env = with_skill_selection(command_env(2, 5), SkillSchedule(num_skills=3, segment_steps=SEGMENT))
    assert env.components["policy"][-1] == ("engaging_block", 4)
    assert env.observation_shapes() == {"policy": (8,), "critic": (4,)}
    state, obs = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    blocks, counts = [obs["policy"][:, 4:]], [state.step_count]
    for _ in range(7):
        state, res = step(state, jnp.zeros((2, 1)))
        blocks.append(res.obs["policy"][:, 4:])
        counts.append(state.step_count)
        assert res.obs["critic"].shape == (2, 4)
        np.testing.assert_allclose(
            res.final_obs["policy"][:, 4:], expected_block(np.asarray(counts[-2]) + 1, 3)
        )
    assert [int(c[0]) for c in counts] == [0, 1, 2, 3, 4, 0, 1, 2]  # episodes of 5 steps
    for block, count in zip(blocks, counts, strict=True):
        np.testing.assert_array_equal(block, expected_block(np.asarray(count), 3))


def test_skill_selection_holds_each_skills_command():
    from strl_jax.envs.skill_selection import SkillSchedule, with_skill_selection

    base = command_env(2, 20)
    commands = ((0.75, 0.0, 0.0), (0.0, 0.0, 1.0))
    env = with_skill_selection(base, SkillSchedule(num_skills=2, segment_steps=SEGMENT, commands=commands))
    state, obs = env.reset(jax.random.PRNGKey(1))
    for t in range(1, 8):
        state, res = env.step(state, jnp.ones((2, 1)))
        k = (t // SEGMENT) % 2
        np.testing.assert_allclose(res.obs["policy"][:, 1:4], np.tile(commands[k], (2, 1)))
        np.testing.assert_allclose(res.obs["policy"][:, 4:], expected_block(np.full(2, t), 2))
        np.testing.assert_allclose(res.obs["policy"][:, 0], float(t))  # the env's own state runs on
        # the reward of a step is computed with the command held when it started
        np.testing.assert_allclose(res.reward, commands[((t - 1) // SEGMENT) % 2][0] + 1.0)
    with pytest.raises(ConfigError, match="info\\['command'\\]"):
        cfg = resolve_config("inverted_pendulum", overrides=tiny(NAMED))
        with_skill_selection(
            make_env_from_config(cfg.env, num_envs=1),
            SkillSchedule(num_skills=2, segment_steps=SEGMENT, commands=commands),
        )


@pytest.fixture(scope="module")
def switch_yaml(runs, tmp_path_factory):
    """A mutex config over the walk and GRU runs whose selection a schedule sets."""
    path = tmp_path_factory.mktemp("switch") / "switch.yaml"
    named = {"x": [0], "last_action": [1], "command": [2], "v": [3]}
    policy = {
        "class_name": "ActorCriticFieldMutex",
        "sub_policy_paths": [runs["walk"], runs["rnn"]],
        "reset_non_selected": "none",
        "cmd_vel_mapping": {1: 0.05},
    }
    env = {"obs_groups": {"policy": named}, "episode_length": SWITCH_EPISODE}
    path.write_text(
        yaml.safe_dump({"policy": policy, "env": env, "skill_selection": {"segment_steps": SEGMENT}})
    )
    return path


def replay(policy, obs: np.ndarray):
    """The switch's actions and per-step outputs over one episode's stored observations."""
    state = policy.initial_hidden(1)
    outputs = jax.jit(policy.outputs)
    actions, infos = [], []
    for x in obs:
        action, info, state = outputs(jnp.asarray(x[None]), state)
        actions.append(np.asarray(action[0]))
        infos.append(jax.device_get(info))
    return np.stack(actions), infos


def test_collect_records_the_switchs_actions(switch_yaml, tmp_path):
    from strl_jax.collect import main as collect_main
    from strl_jax.mutex_from_runs import load_mutex_run

    out = tmp_path / "demo"
    argv = [
        str(switch_yaml),
        "--out",
        str(out),
        "--num_envs",
        "2",
        "--amp_obs_components",
        "joint_pos,joint_vel",
    ]
    assert collect_main([*argv, "--min_timesteps", "10", "--min_episodes", "2"]) == 0
    run = load_mutex_run(switch_yaml)
    files = sorted(out.glob("traj_*.npz"))
    assert len(files) >= 2
    scale = np.asarray(run.policy.spec.sub_scales) / ENV_SCALE
    for path in files:
        traj = dict(np.load(path))
        steps = np.arange(len(traj["obs"]))
        np.testing.assert_array_equal(traj["obs"][:, 4:], expected_block(steps, 2))
        actions, infos = replay(run.policy, traj["obs"])
        np.testing.assert_allclose(traj["actions"], actions, rtol=1e-5, atol=1e-6)
        chosen = (steps // SEGMENT) % 2
        selected = np.stack(
            [info["sub_actions"][c, 0] * scale[c] for info, c in zip(infos, chosen, strict=True)]
        )
        np.testing.assert_allclose(traj["actions"], selected, rtol=1e-5, atol=1e-6)
    assert collect_main([*argv, "--min_timesteps", "20", "--sample_actions"]) == 2


def test_export_cli_writes_the_whole_switch(switch_yaml, tmp_path, capsys):
    import onnxruntime as ort

    from strl_jax.export import load_jax_policy
    from strl_jax.export import main as export_main
    from strl_jax.mutex_from_runs import load_mutex_run

    out = tmp_path / "exported"
    assert export_main([str(switch_yaml), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "obs [batch, 7], sub1_h_in [1, batch, 8] -> actions [batch, 1], sub1_h_out" in printed
    assert "engaging_block[4:7]" in printed
    session = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["obs_components"])[-1] == ["engaging_block", 3]
    call = load_jax_policy((out / "policy.jax_export").read_bytes())
    policy = load_mutex_run(switch_yaml).policy
    obs = np.asarray(observations([0, 1, 1, 0, -1, 1], key=3, n_select=3)[:, :7])
    expected, _ = replay(policy, obs)
    h = np.zeros((1, 1, 8), np.float32)
    for t, x in enumerate(obs):
        action, h_next = session.run(None, {"obs": x[None], "sub1_h_in": h})
        np.testing.assert_allclose(action[0], expected[t], rtol=1e-5, atol=1e-5)
        jax_action, _ = call(x[None], h)
        np.testing.assert_allclose(jax_action[0], expected[t], rtol=1e-5, atol=1e-5)
        h = h_next
    assert export_main([str(switch_yaml), "--format", "rsl_rl"]) == 2
    assert "onnx only" in capsys.readouterr().err


def test_onnx_of_the_base_and_climb_mutexes(subs):
    """No selection input (base) and the jump split by direction (climb) have ONNX forms too."""
    import onnxruntime as ort

    from strl_jax.export import mutex_onnx_model

    base = mutex_policy(
        MutexConfig(class_name="ActorCriticMutex", sub_policy_paths=("a", "b"), sub_action_scales=SCALES[:2]),
        subs[:2],
        layout(5)[:-1],
    )
    cfg = MutexConfig(
        class_name="ActorCriticClimbMutex",
        sub_policy_paths=("a", "b", "c"),
        jump_down_policy_path="d",
        jump_obstacle_id=1,
        env_action_scale=ENV_SCALE,
        sub_action_scales=SCALES,
        cmd_vel_mapping={1: [0.2, 0.4]},
    )
    climb = mutex_policy(cfg, subs, layout(5))
    for policy, obs in ((base, observations([1, 0])[:, :4]), (climb, observations([1, 1, 0], flag=-1.0))):
        model = mutex_onnx_model(policy)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        state = policy.initial_hidden(obs.shape[0])
        action, _ = policy.step(obs, state)
        feed = {"obs": np.asarray(obs)}
        names = [i.name for i in session.get_inputs()]
        if "commands" in names:
            feed["commands"] = np.asarray(state.commands)
        for i in session.get_inputs():
            if i.name.endswith("_h_in"):
                feed[i.name] = np.zeros([obs.shape[0] if d == "batch" else d for d in i.shape], np.float32)
        np.testing.assert_allclose(session.run(None, feed)[0], action, rtol=1e-5, atol=1e-5)
