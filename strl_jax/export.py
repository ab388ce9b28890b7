"""`python -m strl_jax.export <log_dir>`: the deterministic policy as ONNX and as a `jax.export` artifact.

Both take the policy group's observation `[batch, obs_dim]` (float32) and return the clipped
mean action `[batch, action_dim]` (`tanh(mean)` for `policy.distribution: tanh_gaussian`), with
the observation normaliser inside, like rsl_rl's exported policies (opset 18). Recurrent
policies also take and return the actor's hidden state: ONNX inputs `obs, h_in[, c_in]` and
outputs `actions, h_out[, c_out]` (`[layers, batch, size]`; `c_*` for an LSTM only), as in
rsl_rl. Both are traced from the same acting step (`strl_jax.networks.acting.ActingPolicy`); the ONNX
graph is that trace written as ONNX operators (`strl_jax.onnx_graph`), so it needs nothing but
the `onnx` package to build.

`obs` is one flat input: the policy group's components in the env's order, images flattened
row-major from `(C, H, W)`, without the components estimator stages always replace. Where the env
names its components, the ONNX model says so in its `metadata_props` (`obs_components`: JSON
`[[name, size], ...]`; `image_shapes`: JSON `{name: [C, H, W]}`), as does the CLI's summary.

A mutex config (`python -m strl_jax.export mutex.yaml`, `strl_jax.mutex`) exports the
whole switch as one graph (`mutex_onnx_model`): the selection read from the observation, every
sub-policy's network, the command overrides, the smoothing of the selection and the weighted,
rescaled combination. Its state travels as inputs and outputs: `selections_in/_out
[k, batch, N]` (the last k selections; only when `action_smoothing_buffer_len` k > 1) and each
sub-policy's memory `sub<i>_h_in/_out[, sub<i>_c_in/_out]`. Fixed commands are constants of the
graph; where `cmd_vel_mapping` gives a `[low, high]` range, drawn per episode in strl_jax, the
model takes `commands [batch, N]`: the caller draws sub-policy i's value uniformly from its range at
each episode start and holds it (the other columns are ignored).

`--format rsl_rl` instead writes `model_<iteration>.pt` in rsl_rl 5.x's layout and the `train_cfg`
that builds the same network (`train_cfg.yaml`), so rsl_rl deployment code loads the policy with
`OnPolicyRunner(env, train_cfg).load(path)` (`checkpoints.torch_checkpoints`; needs torch).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import yaml

from strl_jax.checkpoints.torch_checkpoints import rsl_rl_checkpoint, save_rsl_rl_checkpoint
from strl_jax.configs.to_rsl_rl import to_rsl_rl_train_cfg
from strl_jax.errors import CheckpointError, ConfigError, ExportError
from strl_jax.inference import LoadedPolicy, load_policy
from strl_jax.mutex import MutexPolicy, MutexState, draw_commands, set_column
from strl_jax.mutex_from_runs import MutexRun, load_mutex_run
from strl_jax.networks.acting import ActingPolicy, policy_observation_size
from strl_jax.networks.encoded_inputs import raw_input_size
from strl_jax.networks.gaussian import GAUSSIAN
from strl_jax.onnx_graph import TensorSpec, function_to_onnx

ONNX_OPSET = 18
ONNX_IR_VERSION = 8  # the oldest IR that carries opset 18: readable by older runtimes
INPUT_NAME = "obs"
OUTPUT_NAME = "actions"
BATCH = "batch"
FORMATS = ("onnx", "rsl_rl")
HIDDEN_NAMES = {"gru": (("h_in",), ("h_out",)), "lstm": (("h_in", "c_in"), ("h_out", "c_out"))}


def hidden_structure(acting: ActingPolicy) -> tuple[list[jax.ShapeDtypeStruct], Any]:
    """The hidden state's leaves at batch 1 (`[layers, 1, size]`) and its tree structure."""
    return jax.tree.flatten(jax.eval_shape(lambda: acting.initial_hidden(1)))


def with_batch(leaf: jax.ShapeDtypeStruct, batch: Any) -> tuple[Any, ...]:
    """A hidden leaf's shape `[layers, batch, size]` for another batch size."""
    return (leaf.shape[0], batch, *leaf.shape[2:])


# ---------------------------------------------------------------------------- input layout
@dataclasses.dataclass(frozen=True)
class ObsLayout:
    """What the deployed `obs` holds, in order: `(name, size)` per component, and the `(C, H, W)`
    of the image components (flattened row-major), so a robot can assemble the input."""

    components: tuple[tuple[str, int], ...]
    image_shapes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.components)

    def metadata(self) -> dict[str, str]:
        """ONNX `metadata_props` entries (JSON values)."""
        return {
            "obs_components": json.dumps([[name, size] for name, size in self.components]),
            "image_shapes": json.dumps({k: list(v) for k, v in self.image_shapes.items()}),
        }

    def describe(self) -> str:
        """`name[start:stop]` per component, images with their `(C, H, W)`."""
        parts, start = [], 0
        for name, size in self.components:
            image = f" {list(self.image_shapes[name])}" if name in self.image_shapes else ""
            parts.append(f"{name}[{start}:{start + size}]{image}")
            start += size
        return ", ".join(parts)


def deployed_layout(
    components: Sequence[tuple[str, int]], shapes: Mapping[str, Sequence[int]], measured: Sequence[int]
) -> ObsLayout:
    """The layout of the measured entries (`networks.estimators.measured_indices`) of a group
    whose components are `components`: a component no entry of which is measured is left out."""
    kept = {int(i) for i in measured}
    out, start = [], 0
    for name, size in components:
        count = sum(1 for i in range(start, start + size) if i in kept)
        if count:
            out.append((name, count))
        start += size
    images = {
        name: tuple(int(d) for d in shapes[name])
        for name, size in out
        if name in shapes and math.prod(shapes[name]) == size
    }
    return ObsLayout(tuple(out), images)


def policy_layout(loaded: LoadedPolicy) -> ObsLayout | None:
    """The deployed `obs` layout of a loaded run; None where its env does not name the policy
    group's components (or they do not add up to the observation the network reads)."""
    components = loaded.env.components.get("policy")
    actor = loaded.actor
    full = raw_input_size(policy_observation_size(loaded.params), actor.model.encoders)
    if not components or sum(size for _, size in components) != full:
        return None
    return deployed_layout(components, loaded.env.component_shapes, actor.model.measured_indices(full))


# ---------------------------------------------------------------------------- jax.export
def export_jax_policy(acting: ActingPolicy, platforms: tuple[str, ...] = ("cpu", "cuda")) -> bytes:
    """Serialized `jax.export` artifact for any batch size (load with `load_jax_policy`).

    Feed-forward: `obs -> action`; recurrent: `(obs, hidden) -> (action, hidden')`. A policy with
    estimator stages also returns its estimates: `(action, {stage: estimate}[, hidden'])`.
    """
    (batch,) = jax.export.symbolic_shape(BATCH)
    obs = jax.ShapeDtypeStruct((batch, acting.observation_size), jnp.float32)
    leaves, tree = hidden_structure(acting)
    hidden = tree.unflatten(jax.ShapeDtypeStruct(with_batch(h, batch), h.dtype) for h in leaves)

    def run(o, *h):
        actions, estimates, new_hidden = acting.outputs(o, h[0] if h else {})
        out = (actions, estimates) if acting.estimates else (actions,)
        out += (new_hidden,) if acting.recurrent else ()
        return out[0] if len(out) == 1 else out

    args = (obs, hidden) if acting.recurrent else (obs,)
    exported = jax.export.export(jax.jit(run), platforms=platforms)(*args)
    return bytes(exported.serialize())


def load_jax_policy(data: bytes) -> Callable:
    """The exported policy as a callable; needs jax only, not strl_jax or the training config."""
    return jax.export.deserialize(bytearray(data)).call


# ---------------------------------------------------------------------------- ONNX
def hidden_names(acting: ActingPolicy, rnn_type: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """ONNX names of the hidden state's inputs and outputs, in its leaves' order: rsl_rl's
    `h_in[, c_in]` for the actor's memory, `<stage>_h_in[, <stage>_c_in]` for a stage's own."""
    if not acting.recurrent:
        return (), ()
    base_in, base_out = HIDDEN_NAMES[rnn_type.lower()]
    hidden = jax.eval_shape(lambda: acting.initial_hidden(1))
    if not isinstance(hidden, dict):
        return base_in, base_out
    prefix = lambda k: "" if k == "actor" else f"{k}_"  # noqa: E731
    names_in = tuple(prefix(k) + n for k in sorted(hidden) for n in base_in)
    names_out = tuple(prefix(k) + n for k in sorted(hidden) for n in base_out)
    return names_in, names_out


def onnx_policy_model(cfg: Any, acting: ActingPolicy, layout: ObsLayout | None = None) -> Any:
    """The deterministic policy as an ONNX `ModelProto`: `obs [batch, obs_dim] -> actions` for an MLP
    policy; `(obs, h_in[, c_in]) -> (actions, h_out[, c_out])` for a recurrent one; the estimates
    of estimator stages follow `actions`, one output per stage (in the env's units). `layout`, the
    components of `obs`, goes into the model's metadata and doc string."""
    if layout is not None and layout.size != acting.observation_size:
        raise ExportError(
            f"the obs layout ({layout.describe()}) holds {layout.size} values, the policy reads "
            f"{acting.observation_size}"
        )
    names_in, names_out = hidden_names(acting, cfg.policy.rnn_type)
    leaves, tree = hidden_structure(acting)
    stage_names = tuple(name for name, _ in acting.estimates)

    def step(obs: jax.Array, *hidden: jax.Array) -> tuple[jax.Array, ...]:
        actions, estimates, hidden = acting.outputs(obs, tree.unflatten(hidden))
        return (actions, *(estimates[n] for n in stage_names), *jax.tree.leaves(hidden))

    inputs = [TensorSpec(INPUT_NAME, (BATCH, acting.observation_size))]
    inputs += [TensorSpec(n, with_batch(h, BATCH), h.dtype) for n, h in zip(names_in, leaves, strict=True)]
    what = f"recurrent ({cfg.policy.rnn_type.lower()}) " if acting.recurrent else ""
    mode = "tanh(mean)" if cfg.policy.distribution != GAUSSIAN else "mean"
    doc = f"deterministic {what}{cfg.env.task} policy: normalised obs -> clipped {mode} action"
    if layout is not None:
        doc += f"; obs = {layout.describe()} (images flattened row-major from [C, H, W])"
    return function_to_onnx(
        step,
        inputs,
        (OUTPUT_NAME, *stage_names, *names_out),
        opset=ONNX_OPSET,
        ir_version=ONNX_IR_VERSION,
        graph_name="strl_jax_policy",
        doc_string=doc,
        metadata=None if layout is None else layout.metadata(),
    )


# ---------------------------------------------------------------------------- mutex policies
SELECTIONS_NAMES = ("selections_in", "selections_out")
COMMANDS_NAME = "commands"


@dataclasses.dataclass(frozen=True)
class MutexInterface:
    """The exported switch's state as named tensors: which exist and their shapes at batch 1."""

    smoothing: bool  # selections_in/_out carried (k > 1)
    ranged: tuple[bool, ...]  # per sub-policy: its command is an input (drawn per episode)
    fixed: Any  # [1, N] the commands that are constants of the graph
    members: tuple[tuple[int, ...], ...]  # per group: its sub-policies
    leaves: tuple[tuple[jax.ShapeDtypeStruct, ...], ...]  # per group: its memory leaves [k, L, 1, H]
    trees: tuple[Any, ...]  # per group: the memory's tree structure
    names_in: tuple[str, ...]  # per sub-policy memory leaf, sub-policies in order
    names_out: tuple[str, ...]


def leaf_names(index: int, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`sub<i>_h_*` for a GRU's one leaf, `sub<i>_h_*, sub<i>_c_*` for an LSTM's two."""
    bases = ("h", "c") if count == 2 else ("h",) if count == 1 else tuple(f"hidden{j}" for j in range(count))
    return tuple(f"sub{index}_{b}_in" for b in bases), tuple(f"sub{index}_{b}_out" for b in bases)


def mutex_interface(policy: MutexPolicy) -> MutexInterface:
    spec = policy.spec
    state = jax.eval_shape(lambda: policy.initial_hidden(1))
    members = tuple(m for _, _, m in spec.groups)
    flat = [jax.tree.flatten(h) for h in state.hidden]
    names: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for group, (leaves, _) in zip(members, flat, strict=True):
        for m in group:
            names[m] = leaf_names(m, len(leaves))
    order = range(spec.num_policies)
    return MutexInterface(
        smoothing=spec.smoothing > 1,
        ranged=tuple(isinstance(v, tuple) for v in spec.cmd_vel),
        fixed=draw_commands(fixed_spec(spec), jax.random.PRNGKey(0), 1),
        members=members,
        leaves=tuple(tuple(leaves) for leaves, _ in flat),
        trees=tuple(tree for _, tree in flat),
        names_in=tuple(n for m in order for n in names[m][0]),
        names_out=tuple(n for m in order for n in names[m][1]),
    )


def fixed_spec(spec: Any) -> Any:
    """The spec with ranged commands set to 0 (their values come from the `commands` input)."""
    cmd = tuple(0.0 if isinstance(v, tuple) else v for v in spec.cmd_vel)
    return dataclasses.replace(spec, cmd_vel=cmd)


def mutex_inputs(policy: MutexPolicy, io: MutexInterface) -> list[TensorSpec]:
    n = policy.spec.num_policies
    specs = [TensorSpec(INPUT_NAME, (BATCH, policy.observation_size))]
    if io.smoothing:
        specs.append(TensorSpec(SELECTIONS_NAMES[0], (policy.spec.smoothing, BATCH, n)))
    if any(io.ranged):
        specs.append(TensorSpec(COMMANDS_NAME, (BATCH, n)))
    names = iter(io.names_in)
    per_sub: dict[int, list[TensorSpec]] = {}
    for group, leaves in zip(io.members, io.leaves, strict=True):
        for m in group:
            per_sub[m] = [
                TensorSpec("", with_batch(jax.ShapeDtypeStruct(x.shape[1:], x.dtype), BATCH), x.dtype)
                for x in leaves
            ]
    for m in range(n):
        specs += [dataclasses.replace(t, name=next(names)) for t in per_sub.get(m, [])]
    return specs


def mutex_step(policy: MutexPolicy, io: MutexInterface) -> Callable:
    """The switch's step on flat tensors, in the order of `mutex_inputs`:
    `(obs[, selections][, commands], *memories) -> (actions[, selections'], *memories')`."""
    spec = policy.spec
    n = spec.num_policies
    ranged = jnp.asarray(io.ranged)
    fixed = jnp.asarray(io.fixed, jnp.float32)

    def step(obs: jax.Array, *rest: jax.Array) -> tuple[jax.Array, ...]:
        rest = list(rest)
        batch = obs.shape[0]
        selections = rest.pop(0) if io.smoothing else jnp.zeros((1, batch, n), jnp.float32)
        commands = jnp.broadcast_to(fixed, (batch, n))
        if any(io.ranged):
            commands = jnp.where(ranged, rest.pop(0), commands)
            if spec.jump_down_copies:  # the jump-down sub-policy runs at the jump-up one's command
                commands = set_column(commands, n - 1, commands[:, spec.jump_obstacle_id])
        per_sub: dict[int, list[jax.Array]] = {}
        for group, leaves in zip(io.members, io.leaves, strict=True):
            for m in group:
                per_sub[m] = [None] * len(leaves)
        for m in range(n):
            per_sub[m] = [rest.pop(0) for _ in per_sub[m]]
        hidden = tuple(
            tree.unflatten([jnp.stack([per_sub[m][j] for m in group]) for j in range(len(leaves))])
            for group, leaves, tree in zip(io.members, io.leaves, io.trees, strict=True)
        )
        state = MutexState(hidden=hidden, selections=selections, commands=commands, key=None)
        action, _, state = policy.outputs(obs, state)
        out = [action] + ([state.selections] if io.smoothing else [])
        new_sub: dict[int, list[jax.Array]] = {}
        for group, h in zip(io.members, state.hidden, strict=True):
            leaves = jax.tree.leaves(h)
            for j, m in enumerate(group):
                new_sub[m] = [x[j] for x in leaves]
        for m in range(n):
            out += new_sub[m]
        return tuple(out)

    return step


def mutex_layout(run: MutexRun) -> ObsLayout | None:
    """The mutex observation's components: the env's policy group where it names them."""
    components = run.env.components.get("policy")
    if not components or sum(size for _, size in components) != run.policy.observation_size:
        return None
    return ObsLayout(tuple((str(name), int(size)) for name, size in components))


def mutex_onnx_model(policy: MutexPolicy, layout: ObsLayout | None = None, task: str = "") -> Any:
    """The whole switch as an ONNX `ModelProto` (opset 18): `(obs[, selections_in][, commands],
    sub<i>_h_in...) -> (actions[, selections_out], sub<i>_h_out...)`, a deterministic step equal to
    `MutexPolicy.step` on the same state. Metadata: `obs_components` (where known) and `mutex`
    (JSON: class, sub-policy count, smoothing, commands, the inputs that carry state)."""
    if layout is not None and layout.size != policy.observation_size:
        raise ExportError(
            f"the obs layout ({layout.describe()}) holds {layout.size} values, the mutex reads "
            f"{policy.observation_size}"
        )
    io = mutex_interface(policy)
    inputs = mutex_inputs(policy, io)
    outputs = (OUTPUT_NAME, *(SELECTIONS_NAMES[1:] if io.smoothing else ()), *io.names_out)
    spec = policy.spec
    info = {
        "num_sub_policies": spec.num_policies,
        "smoothing": spec.smoothing,
        "commands": [list(v) if isinstance(v, tuple) else v for v in spec.cmd_vel],
        "command_input": COMMANDS_NAME if any(io.ranged) else None,
        "state_inputs": [t.name for t in inputs[1:] if t.name != COMMANDS_NAME],
    }
    metadata = {**(layout.metadata() if layout is not None else {}), "mutex": json.dumps(info)}
    doc = f"deterministic {task} mutex policy of {spec.num_policies} sub-policies: obs -> action"
    if layout is not None:
        doc += f"; obs = {layout.describe()}"
    if any(io.ranged):
        doc += f"; {COMMANDS_NAME}[:, i]: sub-policy i's command, drawn per episode from {info['commands']}"
    return function_to_onnx(
        mutex_step(policy, io),
        inputs,
        outputs,
        opset=ONNX_OPSET,
        ir_version=ONNX_IR_VERSION,
        graph_name="strl_jax_mutex_policy",
        doc_string=doc,
        metadata=metadata,
    )


def export_mutex_jax(policy: MutexPolicy, platforms: tuple[str, ...] = ("cpu", "cuda")) -> bytes:
    """`jax.export` artifact of the same flat step as the ONNX model (any batch size)."""
    io = mutex_interface(policy)
    (batch,) = jax.export.symbolic_shape(BATCH)
    avals = [
        jax.ShapeDtypeStruct(tuple(batch if d == BATCH else d for d in t.shape), t.dtype)
        for t in mutex_inputs(policy, io)
    ]
    return bytes(jax.export.export(jax.jit(mutex_step(policy, io)), platforms=platforms)(*avals).serialize())


def export_mutex(source: str | Path, out_dir: Path, onnx_model: bool = True) -> tuple[MutexRun, list[Path]]:
    """Write `policy.jax_export` (and `policy.onnx`) of a mutex config; returns the run and paths."""
    run = load_mutex_run(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "policy.jax_export"]
    written[0].write_bytes(export_mutex_jax(run.policy))
    if onnx_model:
        model = mutex_onnx_model(run.policy, mutex_layout(run), run.cfg.env.task)
        written.append(out_dir / "policy.onnx")
        written[1].write_bytes(model.SerializeToString())
    return run, written


def describe_mutex(policy: MutexPolicy) -> str:
    """`inputs -> outputs` of the exported switch."""
    io = mutex_interface(policy)
    specs = mutex_inputs(policy, io)
    shape = lambda t: "[" + ", ".join(map(str, t.shape)) + "]"  # noqa: E731
    inputs = ", ".join(f"{t.name} {shape(t)}" for t in specs)
    outs = [f"{OUTPUT_NAME} [batch, {policy.action_size}]"]
    outs += [f"{SELECTIONS_NAMES[1]} {shape(specs[1])}"] if io.smoothing else []
    state = [t for t in specs if t.name in io.names_in]
    outs += [f"{n} {shape(t)}" for n, t in zip(io.names_out, state, strict=True)]
    return f"{inputs} -> {', '.join(outs)}"


def is_mutex_config(path: str) -> bool:
    return Path(path).suffix in (".yaml", ".yml") and Path(path).is_file()


def main_mutex(args: argparse.Namespace) -> int:
    """The CLI for a mutex config."""
    if args.format != "onnx":
        print(f"error: a mutex policy exports as onnx only (--format {args.format})", file=sys.stderr)
        return 2
    if args.checkpoint is not None:
        print(
            "error: --checkpoint names one run's step; a mutex config names its sub-policies' in "
            "policy.checkpoints",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out) if args.out else Path(args.log_dir).with_name(f"{Path(args.log_dir).stem}_exported")
    try:
        run, written = export_mutex(args.log_dir, out, onnx_model=not args.no_onnx)
    except (CheckpointError, ConfigError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"error: {err.name} is needed for export: pip install 'strl_jax[export]'", file=sys.stderr)
        return 2
    layout = mutex_layout(run)
    described = f"; obs = {layout.describe()}" if layout is not None else ""
    print(f"mutex of {run.policy.spec.num_policies} sub-policies: {describe_mutex(run.policy)}{described}")
    for path in written:
        print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------------------- CLI
def export_run(loaded: LoadedPolicy, out_dir: Path, onnx_model: bool = True) -> list[Path]:
    """Write `policy.jax_export` (and `policy.onnx`) for a loaded checkpoint; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "policy.jax_export"]
    acting = loaded.acting()
    written[0].write_bytes(export_jax_policy(acting))
    if onnx_model:
        model = onnx_policy_model(loaded.cfg, acting, policy_layout(loaded))
        path = out_dir / "policy.onnx"
        path.write_bytes(model.SerializeToString())
        written.append(path)
    return written


def export_rsl_rl(loaded: LoadedPolicy, out_dir: Path) -> list[Path]:
    """Write `model_<iteration>.pt`, which rsl_rl 5.x's `OnPolicyRunner.load` accepts, and beside it
    `train_cfg.yaml`, the `train_cfg` that builds the same network (env observation groups `policy`
    and `critic`); returns the paths. rsl_rl's policy does not clip: its env wrapper clips actions.
    rsl_rl has no tanh-squashed policy (`policy.distribution: tanh_gaussian`) and its normaliser no
    clip (`runner.normalizer_clip`): both are refused."""
    if loaded.cfg.policy.distribution != GAUSSIAN:
        raise ExportError(
            f"--format rsl_rl writes rsl_rl's Gaussian policy; this run's policy.distribution is "
            f"{loaded.cfg.policy.distribution!r} (valid for rsl_rl: {GAUSSIAN!r}); use --format onnx"
        )
    if loaded.cfg.runner.normalizer_clip is not None:
        raise ExportError(
            f"--format rsl_rl writes rsl_rl's EmpiricalNormalization, which does not clip; this run "
            f"clips its normalised observations (runner.normalizer_clip="
            f"{loaded.cfg.runner.normalizer_clip:g}); use --format onnx, which keeps the clip"
        )
    train_cfg = to_rsl_rl_train_cfg(loaded.cfg)
    infos = {
        "exported_from": "strl_jax",
        "task": loaded.cfg.env.task,
        "clip_actions": loaded.cfg.env.clip_actions,
    }
    saved = rsl_rl_checkpoint(loaded.params, loaded.normalizers, train_cfg, loaded.step, infos)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = save_rsl_rl_checkpoint(saved, out_dir / f"model_{loaded.step}.pt")
    config = out_dir / "train_cfg.yaml"
    config.write_text(yaml.safe_dump(train_cfg, sort_keys=False))
    return [model, config]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.export",
        description="Export a run's deterministic policy (normaliser inside) as ONNX and jax.export, "
        "or as an rsl_rl checkpoint (--format rsl_rl).",
    )
    parser.add_argument(
        "log_dir",
        help="run folder (or checkpoints folder, or one checkpoint step folder); or a mutex YAML config",
    )
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    parser.add_argument(
        "--out", metavar="DIR", help="output folder (default: <log_dir>/exported; <config>_exported)"
    )
    parser.add_argument("--no-onnx", action="store_true", help="only the jax.export artifact")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=FORMATS[0],
        help="onnx: policy.onnx and policy.jax_export (default); rsl_rl: model_<iteration>.pt for "
        "rsl_rl's OnPolicyRunner.load, with its train_cfg.yaml",
    )
    args = parser.parse_args(argv)
    if is_mutex_config(args.log_dir):
        return main_mutex(args)
    try:
        loaded = load_policy(args.log_dir, args.checkpoint)
        out = Path(args.out) if args.out else Path(args.log_dir) / "exported"
        if args.format == "rsl_rl":
            written = export_rsl_rl(loaded, out)
        else:
            written = export_run(loaded, out, onnx_model=not args.no_onnx)
    except (CheckpointError, ConfigError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"error: {err.name} is needed for export: pip install 'strl_jax[export]'", file=sys.stderr)
        return 2
    policy = loaded.cfg.policy
    acting = loaded.acting()
    names_in, names_out = hidden_names(acting, policy.rnn_type)
    hidden = f"[{policy.rnn_num_layers}, batch, {policy.rnn_hidden_size}]"
    inputs = f"obs [batch, {acting.observation_size}]" + "".join(f", {n} {hidden}" for n in names_in)
    outputs = f"actions [batch, {loaded.action_size}]"
    outputs += "".join(f", {n} [batch, {size}]" for n, size in acting.estimates)
    outputs += "".join(f", {n} {hidden}" for n in names_out)
    layout = policy_layout(loaded)
    described = f"; obs = {layout.describe()}" if layout is not None else ""
    print(f"checkpoint {loaded.step}: {inputs} -> {outputs}{described}")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
