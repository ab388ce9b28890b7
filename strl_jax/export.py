"""`python -m strl_jax.export <log_dir>`: the deterministic policy as ONNX and as a `jax.export` artifact.

Both take the policy group's observation `[batch, obs_dim]` (float32) and return the clipped
mean action `[batch, action_dim]`, with the observation normaliser inside, like rsl_rl's
exported policies (opset 18). Recurrent policies also take and return the actor's hidden state:
ONNX inputs `obs, h_in[, c_in]` and outputs `actions, h_out[, c_out]` (`[layers, batch, size]`;
`c_*` for an LSTM only), as in rsl_rl. Both are traced from the same acting step
(`strl_jax.inference.ActingPolicy`); the ONNX graph is that trace written as ONNX operators
(`strl_jax.onnx_graph`), so it needs nothing but the `onnx` package to build.

`obs` is one flat input: the policy group's components in the env's order, images flattened
row-major from `(C, H, W)`, without the components estimator stages always replace. Where the env
names its components, the ONNX model says so in its `metadata_props` (`obs_components`: JSON
`[[name, size], ...]`; `image_shapes`: JSON `{name: [C, H, W]}`), as does the CLI's summary.

`--format rsl_rl` instead writes `model_<iteration>.pt` in rsl_rl 5.x's layout and the `train_cfg`
that builds the same network (`train_cfg.yaml`), so rsl_rl deployment code loads the policy with
`OnPolicyRunner(env, train_cfg).load(path)` (`train_loops.torch_checkpoints`; needs torch).
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

from strl_jax.configs.rsl_rl_config import to_rsl_rl_train_cfg
from strl_jax.errors import CheckpointError, ConfigError, ExportError
from strl_jax.inference import ActingPolicy, LoadedPolicy, load_policy, policy_observation_size
from strl_jax.networks.encoded_inputs import raw_input_size
from strl_jax.onnx_graph import TensorSpec, function_to_onnx
from strl_jax.train_loops.torch_checkpoints import rsl_rl_checkpoint, save_rsl_rl_checkpoint

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
    doc = f"deterministic {what}{cfg.env.task} policy: normalised obs -> clipped mean action"
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
    and `critic`); returns the paths. rsl_rl's policy does not clip: its env wrapper clips actions."""
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
    parser.add_argument("log_dir", help="run folder (or checkpoints folder, or one checkpoint step folder)")
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: <log_dir>/exported)")
    parser.add_argument("--no-onnx", action="store_true", help="only the jax.export artifact")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=FORMATS[0],
        help="onnx: policy.onnx and policy.jax_export (default); rsl_rl: model_<iteration>.pt for "
        "rsl_rl's OnPolicyRunner.load, with its train_cfg.yaml",
    )
    args = parser.parse_args(argv)
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
