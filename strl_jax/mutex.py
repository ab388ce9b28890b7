"""st_rl's mutex policies: finished runs acting as skills, one of them chosen per env and step.

`ActorCriticMutex`, `ActorCriticFieldMutex` and `ActorCriticClimbMutex` are configurations of one
acting function here (`MutexConfig.class_name`), not classes. Each sub-policy is a finished strl_jax
run rebuilt from its own stored config and checkpoint (`SubPolicy`; `strl_jax.mutex_from_runs`
loads them and the mutex config). Sub-policies whose networks have the same structure are stacked
and evaluated in one `vmap`; the others are evaluated one by one inside the same jitted step, so a
step is one call whatever the mix.

Per step (st_rl `ActorCriticFieldMutex.act_inference`):

1. the selection: a one-hot slice of the observation component `selection_component` (st_rl's
   `engaging_block[1:1 + N]`), all zeros choosing sub-policy 0; `ActorCriticClimbMutex` splits the
   jump obstacle's entry into jump-up and jump-down (an extra last sub-policy) by the sign of the
   component's last entry;
2. the last `action_smoothing_buffer_len` selections are kept; their mean weighs the sub-policies;
3. each sub-policy reads its own components of the observation, with the previous action rewritten
   into its own action scale (`* env_action_scale / sub_scale`) and, for sub-policies in
   `cmd_vel_mapping`, the forward command replaced by its fixed or per-episode drawn value times
   the sub-policy's command scale;
4. executed action = sum_i weight_i * action_i * sub_scale_i / env_action_scale;
5. memories of sub-policies that were not selected are restarted (`reset_non_selected`).

Where st_rl rewrites one shared observation by the selected sub-policy, each sub-policy here gets its
own rewritten copy: identical for the selected one, and in the others' own units for the rest.

The step is written without scatters so that `strl_jax.export` can write the whole switch as ONNX.
`MutexActor` gives it an `Actor`'s acting interface (collection).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from strl_jax.errors import ConfigError
from strl_jax.networks.acting import Actor, acting_policy, action_size
from strl_jax.networks.memory import reset_hidden
from strl_jax.networks.policy_classes import MUTEX_CLASS_NAMES
from strl_jax.static_take import take_static

MUTEX_CLASSES = MUTEX_CLASS_NAMES
RESET_CHOICES = ("all", "when_skill", "none")
Layout = tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class MutexConfig:
    """st_rl's mutex `policy` section (its field names), plus where things are in the observation.

    `ActorCriticMutex` (st_rl's base class, which only loads) runs sub-policy 0 with the mutex's
    scaling; `ActorCriticFieldMutex` and `ActorCriticClimbMutex` select by the observation.
    """

    class_name: str = "ActorCriticFieldMutex"
    sub_policy_paths: tuple[str, ...] = ()
    env_action_scale: float | tuple[float, ...] = 0.5  # the executing env's action scale
    # {sub-policy index: forward velocity, or [low, high] drawn again at each env reset}
    cmd_vel_mapping: dict = dataclasses.field(default_factory=dict)
    reset_non_selected: str = "all"  # all | when_skill | none (st_rl True == all, False == none)
    action_smoothing_buffer_len: int = 1
    # ActorCriticClimbMutex: the jump-down run, appended as the last sub-policy, and its command
    # (None: the jump-up sub-policy's command; a number; or [low, high] drawn at each reset)
    jump_down_policy_path: str | None = None
    jump_down_vel: float | tuple[float, float] | None = None
    jump_obstacle_id: int = 3  # st_rl JUMP_OBSTACLE_ID: the selection entry jump-down splits
    # where the parts live in the observation (strl_jax component names)
    selection_component: str = "engaging_block"
    selection_offset: int = 1  # st_rl: engaging_block = [distance, one-hot ..., block info]
    last_action_component: str = "last_action"
    command_component: str = "command"
    # overrides of what the runs' configs say: one action scale (number or per joint) and one
    # command scale per sub-policy (st_rl `normalization.obs_scales.lin_vel`)
    sub_action_scales: tuple | None = None
    cmd_scales: tuple[float, ...] | None = None
    # the observation the mutex reads: ((name, size), ...) or st_rl's `obs_segments` mapping;
    # None: the first sub-policy's layout followed by the selection component
    obs_segments: Any = None
    checkpoints: tuple[int | None, ...] | None = None  # per sub-policy; None: each run's newest
    seed: int = 0  # draws of ranged commands


@dataclasses.dataclass(frozen=True)
class SubPolicy:
    """One loaded run as the mutex sees it (static parts; `params`/`normalizers` are arrays)."""

    actor: Actor
    obs_size: int
    params: Any
    normalizers: Any
    layout: Layout | None  # its run's policy-group components, None where the run names none
    action_scale: Any  # float or per-joint tuple, from its run's env config
    run_cfg: Any = None  # the TrainConfig stored with its checkpoint


@dataclasses.dataclass(frozen=True)
class MutexSpec:
    """Everything static about a mutex policy (hashable: closed over by the jitted step)."""

    num_policies: int
    action_size: int
    observation_size: int
    inputs: tuple[tuple[int, ...], ...]  # per sub-policy: the observation entries it reads
    last_action: tuple[tuple[int, int] | None, ...]  # per sub-policy: (start, size) in its input
    command: tuple[int | None, ...]  # per sub-policy: index of the forward command in its input
    sub_scales: tuple[Any, ...]
    env_action_scale: Any
    cmd_scales: tuple[float, ...]
    cmd_vel: tuple[Any, ...]  # per sub-policy: None | float | (low, high)
    jump_down_copies: bool  # climb: the jump-down sub-policy uses the jump-up one's command
    selection: tuple[int, int]  # (start, size) of the selection component
    selection_offset: int
    climb: bool
    jump_obstacle_id: int
    smoothing: int
    reset_mode: str
    groups: tuple[tuple[Actor, int, tuple[int, ...]], ...]  # (actor, obs size, member indices)


@struct.dataclass
class MutexState:
    """What the mutex carries between steps: the sub-policies' memories per group (stacked on a
    leading axis), the last selections `[k, B, N]`, the per-env commands `[B, N]` and a key."""

    hidden: tuple
    selections: jax.Array
    commands: jax.Array
    key: jax.Array


def component_slices(layout: Layout) -> dict[str, tuple[int, int]]:
    """`{name: (start, size)}` of a flat observation laid out as `layout`."""
    out, start = {}, 0
    for name, size in layout:
        out[name] = (start, int(size))
        start += int(size)
    return out


def as_layout(segments: Any) -> Layout:
    """st_rl's `obs_segments` (`{name: shape}`) or `((name, size), ...)` as a strl_jax layout."""
    items = segments.items() if isinstance(segments, Mapping) else segments
    return tuple((str(n), int(np.prod(s if isinstance(s, list | tuple) else (s,)))) for n, s in items)


def mutex_config(data: Mapping[str, Any]) -> MutexConfig:
    """A `MutexConfig` from a run-config-like dict (`{"policy": {...}}`) or its `policy` section."""
    section = dict(data.get("policy", data))
    names = {f.name for f in dataclasses.fields(MutexConfig)}
    # st_rl keys this port does not need: each run's own config names its class and observation
    section.pop("sub_policy_class_name", None)
    section.pop("privileged_obs_segments", None)
    section.pop("num_actor_obs", None)
    section.pop("num_critic_obs", None)
    section.pop("num_actions", None)
    unknown = sorted(set(section) - names)
    if unknown:
        raise ConfigError(f"unknown mutex policy options {unknown}; valid choices: {sorted(names)}")
    cfg = MutexConfig(**section)
    check_mutex_config(cfg)
    return cfg


def check_mutex_config(cfg: MutexConfig) -> None:
    if cfg.class_name not in MUTEX_CLASSES:
        raise ConfigError(
            f"unknown mutex policy.class_name {cfg.class_name!r}; valid choices: {list(MUTEX_CLASSES)}"
        )
    if not cfg.sub_policy_paths:
        raise ConfigError("a mutex policy needs sub_policy_paths: the run folders of its sub-policies")
    if reset_mode(cfg.reset_non_selected) not in RESET_CHOICES:
        raise ConfigError(
            f"reset_non_selected={cfg.reset_non_selected!r}; "
            f"valid choices: {list(RESET_CHOICES)} (or true/false)"
        )
    if int(cfg.action_smoothing_buffer_len) < 1:
        raise ConfigError(f"action_smoothing_buffer_len={cfg.action_smoothing_buffer_len} must be >= 1")
    climb = cfg.class_name == "ActorCriticClimbMutex"
    if climb and cfg.jump_down_policy_path is None:
        raise ConfigError("ActorCriticClimbMutex needs jump_down_policy_path: the jump-down run folder")
    if not climb and cfg.jump_down_policy_path is not None:
        raise ConfigError(f"jump_down_policy_path is an ActorCriticClimbMutex option, not {cfg.class_name}'s")
    n = len(cfg.sub_policy_paths) + int(climb)
    for key in cfg.cmd_vel_mapping:
        if not 0 <= int(key) < n:
            raise ConfigError(f"cmd_vel_mapping key {key} is no sub-policy index; valid choices: 0..{n - 1}")


def reset_mode(value: Any) -> str:
    """st_rl accepts True for `all`; False and None mean no reset."""
    if value is True:
        return "all"
    if value in (False, None):
        return "none"
    return str(value)


def command_value(value: Any, where: str) -> float | tuple[float, float]:
    """A fixed command or a `(low, high)` range (lists from YAML/JSON are ranges, as st_rl's tuples)."""
    if isinstance(value, list | tuple):
        if len(value) != 2:
            raise ConfigError(f"{where}={value!r}: give a number or a [low, high] range")
        return (float(value[0]), float(value[1]))
    return float(value)


def sub_input(layout: Layout, sub: SubPolicy, index: int) -> tuple[tuple[int, ...], Layout]:
    """The mutex observation entries sub-policy `index` reads, and its own layout: its run's
    components by name, or (a run naming none) the leading `obs_size` entries."""
    where = component_slices(layout)
    if sub.layout is None:
        own = []
        for name, size in layout:
            start = where[name][0]
            if start + size <= sub.obs_size:
                own.append((name, size))
        return tuple(range(sub.obs_size)), tuple(own)
    missing = [n for n, _ in sub.layout if n not in where]
    if missing:
        raise ConfigError(
            f"sub-policy {index} reads components {missing} the mutex observation lacks; "
            f"it has: {[n for n, _ in layout]}"
        )
    if sum(s for _, s in sub.layout) != sub.obs_size:
        raise ConfigError(f"sub-policy {index}: its layout {sub.layout} is not {sub.obs_size} inputs")
    indices = [i for name, _ in sub.layout for i in range(where[name][0], where[name][0] + where[name][1])]
    return tuple(indices), sub.layout


def group_by_structure(subs: Sequence[SubPolicy]) -> tuple[tuple[Actor, int, tuple[int, ...]], ...]:
    """Sub-policies sharing network, input size and parameter shapes act in one `vmap`."""

    def signature(sub: SubPolicy):
        leaves = jax.tree.leaves((sub.params, sub.normalizers))
        shapes = tuple((tuple(x.shape), str(x.dtype)) for x in leaves)
        return (sub.actor, sub.obs_size, jax.tree.structure((sub.params, sub.normalizers)), shapes)

    groups: dict[Any, list[int]] = {}
    for i, sub in enumerate(subs):
        groups.setdefault(signature(sub), []).append(i)
    return tuple((subs[m[0]].actor, subs[m[0]].obs_size, tuple(m)) for m in groups.values())


def command_mapping(cfg: MutexConfig, command: list, n: int, climb: bool) -> tuple[dict, bool]:
    """`(sub-policy -> the velocity command it is given, whether the climb switch's jump-down
    policy copies the jump policy's)`, checked against the sub-policies' command components."""
    mapping = {int(k): command_value(v, f"cmd_vel_mapping[{k}]") for k, v in cfg.cmd_vel_mapping.items()}
    for i in mapping:
        if command[i] is None:
            raise ConfigError(
                f"cmd_vel_mapping names sub-policy {i}, "
                f"whose input has no {cfg.command_component!r} component"
            )
    jump_down_copies = False
    if climb:
        jump_id = cfg.jump_obstacle_id
        if cfg.jump_down_vel is not None:
            mapping[n - 1] = command_value(cfg.jump_down_vel, "jump_down_vel")
        elif jump_id in mapping:
            jump_down_copies = True
            mapping[n - 1] = mapping[jump_id]
    return mapping, jump_down_copies


def build_spec(cfg: MutexConfig, subs: Sequence[SubPolicy], layout: Layout) -> MutexSpec:
    climb = cfg.class_name == "ActorCriticClimbMutex"
    n = len(subs)
    where = component_slices(layout)
    if cfg.class_name != "ActorCriticMutex" and cfg.selection_component not in where:
        raise ConfigError(
            f"{cfg.class_name} selects sub-policies by the observation component "
            f"{cfg.selection_component!r}; the observation has: {list(where)}"
        )
    actions = {action_size(s.params) for s in subs}
    if len(actions) != 1:
        raise ConfigError(f"sub-policies disagree on the action size: {sorted(actions)}")
    inputs, last_action, command = [], [], []
    for i, sub in enumerate(subs):
        idx, own = sub_input(layout, sub, i)
        inputs.append(idx)
        own_where = component_slices(own)
        last_action.append(own_where.get(cfg.last_action_component))
        cmd = own_where.get(cfg.command_component)
        command.append(None if cmd is None else cmd[0])
    mapping, jump_down_copies = command_mapping(cfg, command, n, climb)
    scales = cfg.sub_action_scales or tuple(s.action_scale for s in subs)
    cmd_scales = cfg.cmd_scales or (1.0,) * n
    if len(scales) != n or len(cmd_scales) != n:
        raise ConfigError(f"sub_action_scales and cmd_scales need one entry per sub-policy ({n})")
    width = n - 1 if climb else n
    selects = cfg.class_name != "ActorCriticMutex"
    sel = where[cfg.selection_component] if selects else (0, 0)
    if selects and sel[1] < cfg.selection_offset + width + int(climb):
        raise ConfigError(
            f"{cfg.selection_component!r} has {sel[1]} entries; {cfg.class_name} with {n} sub-policies reads "
            f"{width} from entry {cfg.selection_offset}" + (" and the jump direction last" if climb else "")
        )

    def static_scale(s):
        return tuple(float(x) for x in s) if isinstance(s, list | tuple) else float(s)

    return MutexSpec(
        num_policies=n,
        action_size=actions.pop(),
        observation_size=sum(s for _, s in layout),
        inputs=tuple(inputs),
        last_action=tuple(last_action),
        command=tuple(command),
        sub_scales=tuple(static_scale(s) for s in scales),
        env_action_scale=static_scale(cfg.env_action_scale),
        cmd_scales=tuple(float(c) for c in cmd_scales),
        cmd_vel=tuple(mapping.get(i) for i in range(n)),
        jump_down_copies=jump_down_copies,
        selection=sel,
        selection_offset=int(cfg.selection_offset),
        climb=climb,
        jump_obstacle_id=int(cfg.jump_obstacle_id),
        smoothing=int(cfg.action_smoothing_buffer_len),
        reset_mode=reset_mode(cfg.reset_non_selected),
        groups=group_by_structure(subs),
    )


def set_column(x: jax.Array, j: int, column: jax.Array) -> jax.Array:
    """`x` with column `j` replaced (a concatenation, not a scatter: the ONNX export has no scatter)."""
    return jnp.concatenate([x[:, :j], column[:, None].astype(x.dtype), x[:, j + 1 :]], axis=-1)


def policy_selection(spec: MutexSpec, obs: jax.Array) -> jax.Array:
    """`[B, N]` bool: which sub-policy each env runs (st_rl `get_policy_selection`)."""
    start, size = spec.selection
    block = obs[:, start : start + size]
    width = spec.num_policies - int(spec.climb)
    onehot = block[:, spec.selection_offset : spec.selection_offset + width] != 0
    none = jnp.sum(onehot.astype(jnp.float32), axis=-1) == 0
    onehot = set_column(onehot, 0, onehot[:, 0] | none)
    if not spec.climb:
        return onehot
    jump_up = block[:, -1] > 0
    jump = onehot[:, spec.jump_obstacle_id]
    onehot = set_column(onehot, spec.jump_obstacle_id, jump & jump_up)
    return jnp.concatenate([onehot, (jump & ~jump_up)[:, None]], axis=-1)


def push_selection(selections: jax.Array, selection: jax.Array) -> jax.Array:
    """The last k selections with the newest at the end (st_rl `action_smoothing_buffer`)."""
    return jnp.concatenate([selections[1:], selection[None].astype(selections.dtype)], axis=0)


def sub_observation(spec: MutexSpec, obs: jax.Array, commands: jax.Array, i: int) -> jax.Array:
    """Sub-policy `i`'s input: its components, the previous action in its own scale and, where
    `cmd_vel_mapping` names it, its forward command (`commands[:, i]` times its command scale).
    Written with constant masks and factors, not scatters, so the ONNX export can express it."""
    x = take_static(obs, spec.inputs[i])
    if spec.last_action[i] is not None:
        start, size = spec.last_action[i]
        ratio = np.asarray(spec.env_action_scale, np.float32) / np.asarray(spec.sub_scales[i], np.float32)
        factors = np.ones(x.shape[-1], np.float32)
        factors[start : start + size] = np.broadcast_to(ratio, (size,))
        x = x * factors
    if spec.cmd_vel[i] is not None:
        mask = np.zeros(x.shape[-1], bool)
        mask[spec.command[i]] = True
        x = jnp.where(mask, commands[:, i : i + 1] * spec.cmd_scales[i], x)
    return x


def evaluate_groups(spec: MutexSpec, params: tuple, xs: Sequence[jax.Array], hidden: tuple):
    """`([N, B, A] actions, hidden')`: each group of same-structured sub-policies in one `vmap`."""
    actions: list[Any] = [None] * spec.num_policies
    new_hidden = []
    for (actor, obs_size, members), (p, norm), h in zip(spec.groups, params, hidden, strict=True):

        def act(p1, n1, x1, h1, actor=actor, obs_size=obs_size):
            return acting_policy(actor, p1, n1, obs_size).step(x1, h1)

        stacked = jnp.stack([xs[m] for m in members])
        a, h = jax.vmap(act)(p, norm, stacked, h)
        for j, m in enumerate(members):
            actions[m] = a[j]
        new_hidden.append(h)
    return jnp.stack(actions), tuple(new_hidden)


def combine(spec: MutexSpec, actions: jax.Array, weights: jax.Array) -> jax.Array:
    """sum_i weight_i * action_i * sub_scale_i / env_action_scale (`actions [N, B, A]`, `weights [B, N]`)."""
    env_scale = jnp.asarray(spec.env_action_scale)
    out = jnp.zeros(actions.shape[1:], actions.dtype)
    for i in range(spec.num_policies):
        out = out + actions[i] * jnp.asarray(spec.sub_scales[i]) / env_scale * weights[:, i : i + 1]
    return out


def non_selected_resets(spec: MutexSpec, selections: jax.Array, selection: jax.Array) -> jax.Array:
    """`[B, N]` bool: whose memories restart (st_rl: `all` - not selected within the last k
    steps; `when_skill` - skills (index > 0) while another skill runs; `none`)."""
    if spec.reset_mode == "all":
        return selections.sum(axis=0) == 0
    if spec.reset_mode == "when_skill":
        others = ~selection & ~selection[:, :1]
        return set_column(others, 0, jnp.zeros_like(others[:, 0]))
    return jnp.zeros_like(selection)


def reset_members(spec: MutexSpec, hidden: tuple, done: jax.Array) -> tuple:
    """Zero the memories where `done [B, N]` (per env and sub-policy)."""
    out = []
    for (_, _, members), h in zip(spec.groups, hidden, strict=True):
        mask = jnp.stack([done[:, m] for m in members])
        out.append(jax.vmap(reset_hidden)(h, mask) if jax.tree.leaves(h) else h)
    return tuple(out)


def draw_commands(spec: MutexSpec, key: jax.Array, batch: int) -> jax.Array:
    """`[B, N]` commands: fixed values, or uniform draws from the `(low, high)` ranges."""
    cols = []
    keys = jax.random.split(key, spec.num_policies)
    for i, value in enumerate(spec.cmd_vel):
        if isinstance(value, tuple):
            cols.append(jax.random.uniform(keys[i], (batch,), minval=value[0], maxval=value[1]))
        else:
            cols.append(jnp.full((batch,), 0.0 if value is None else value))
    commands = jnp.stack(cols, axis=-1)
    if spec.jump_down_copies:
        commands = commands.at[:, -1].set(commands[:, spec.jump_obstacle_id])
    return commands


@dataclasses.dataclass(frozen=True, eq=False)  # holds arrays: hashed by identity
class MutexPolicy:
    """An `ActingPolicy`-like mutex: `step(obs, state) -> (action, state)`, `reset(state, done)`
    for finished episodes (what `act_in_env`'s `reset_hidden` takes) and `initial_hidden(batch)`."""

    spec: MutexSpec
    params: tuple  # per group: (stacked params, stacked normalizers)
    seed: int = 0

    recurrent = True  # the selection buffer and commands are carried, whatever the sub-policies
    estimates = ()

    @property
    def observation_size(self) -> int:
        return self.spec.observation_size

    @property
    def action_size(self) -> int:
        return self.spec.action_size

    def initial_hidden(self, batch: int) -> MutexState:
        hidden = []
        for actor, obs_size, members in self.spec.groups:
            h = acting_policy(actor, None, {}, obs_size).initial_hidden(batch)
            k = len(members)
            hidden.append(jax.tree.map(lambda x, k=k: jnp.stack([x] * k), h))
        key, draw = jax.random.split(jax.random.PRNGKey(self.seed))
        n = self.spec.num_policies
        return MutexState(
            hidden=tuple(hidden),
            selections=jnp.zeros((self.spec.smoothing, batch, n), jnp.float32),
            commands=draw_commands(self.spec, draw, batch),
            key=key,
        )

    def step(self, obs: jax.Array, state: MutexState) -> tuple[jax.Array, MutexState]:
        action, _, state = self.outputs(obs, state)
        return action, state

    def outputs(self, obs: jax.Array, state: MutexState) -> tuple[jax.Array, dict, MutexState]:
        """`(action, {"selection": [B, N] weights, "sub_actions": [N, B, A]}, state')`."""
        spec = self.spec
        if spec.selection[1]:
            selection = policy_selection(spec, obs)
        else:  # plain ActorCriticMutex: st_rl leaves selecting to subclasses; sub-policy 0 acts
            first = jnp.ones((obs.shape[0], 1), bool)
            selection = jnp.concatenate([first, jnp.zeros((obs.shape[0], spec.num_policies - 1), bool)], -1)
        selections = push_selection(state.selections, selection)
        weights = selections.mean(axis=0)
        xs = [sub_observation(spec, obs, state.commands, i) for i in range(spec.num_policies)]
        actions, hidden = evaluate_groups(spec, self.params, xs, state.hidden)
        hidden = reset_members(spec, hidden, non_selected_resets(spec, selections, selection))
        action = combine(spec, actions, weights)
        info = {"selection": weights, "sub_actions": actions}
        return action, info, state.replace(hidden=hidden, selections=selections)

    def reset(self, state: MutexState, done: jax.Array) -> MutexState:
        """Finished episodes: every sub-policy's memory restarts, ranged commands are drawn again
        (st_rl `reset(dones)`); the selection buffer runs on, as st_rl's does."""
        n = self.spec.num_policies
        hidden = reset_members(self.spec, state.hidden, jnp.broadcast_to(done[:, None], (done.shape[0], n)))
        key, draw = jax.random.split(state.key)
        fresh = draw_commands(self.spec, draw, done.shape[0])
        commands = jnp.where(done[:, None], fresh, state.commands)
        return state.replace(hidden=hidden, commands=commands, key=key)


@dataclasses.dataclass(frozen=True, eq=False)
class MutexActor:
    """A mutex policy in an `Actor`'s acting interface (`act`, `reset_hidden`, `initial_hidden`),
    so rollouts written for a run's actor (collection) run the switch: it reads the `policy`
    group, always acts deterministically and carries its own state as the hidden state."""

    policy: MutexPolicy
    obs_group: str = "policy"

    def initial_hidden(self, batch: int) -> MutexState:
        return self.policy.initial_hidden(batch)

    def reset_hidden(self, state: MutexState, done: jax.Array) -> MutexState:
        return self.policy.reset(state, done)

    def act(self, params: Any, normalizers: Any, obs: dict, state: MutexState, keys: Any = None):
        """`(action, state')`; `params`/`normalizers` are unused (the switch holds its own)."""
        del params, normalizers, keys
        return self.policy.step(obs[self.obs_group], state)


def stack_groups(spec: MutexSpec, subs: Sequence[SubPolicy]) -> tuple:
    """Per group: its members' params and normalizers stacked on a leading axis."""
    out = []
    for _, _, members in spec.groups:
        trees = [(subs[m].params, subs[m].normalizers) for m in members]
        out.append(jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *trees))
    return tuple(out)


def mutex_policy(cfg: MutexConfig, subs: Sequence[SubPolicy], layout: Layout | None = None) -> MutexPolicy:
    """The mutex of already loaded sub-policies over an observation laid out as `layout`."""
    if layout is None:
        layout = default_layout(cfg, subs)
    spec = build_spec(cfg, subs, layout)
    return MutexPolicy(spec=spec, params=stack_groups(spec, subs), seed=int(cfg.seed))


def default_layout(cfg: MutexConfig, subs: Sequence[SubPolicy]) -> Layout:
    if cfg.obs_segments is not None:
        return as_layout(cfg.obs_segments)
    if subs[0].layout is None:
        raise ConfigError(
            "the mutex needs its observation's components: give obs_segments ({name: size, ...}) "
            "or sub-policy runs whose policy group names its components"
        )
    if cfg.class_name == "ActorCriticMutex":
        return subs[0].layout
    n = len(subs)
    size = cfg.selection_offset + n - int(cfg.class_name == "ActorCriticClimbMutex") + 1
    return (*subs[0].layout, (cfg.selection_component, size))
