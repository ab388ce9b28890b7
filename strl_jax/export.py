"""`python -m strl_jax.export <log_dir>`: the deterministic policy as ONNX and as a `jax.export` artifact.

Both take the policy group's observation `[batch, obs_dim]` (float32) and return the clipped
mean action `[batch, action_dim]`, with the observation normaliser inside, like rsl_rl's
exported policies (opset 18). Recurrent policies also take and return the actor's hidden state:
ONNX inputs `obs, h_in[, c_in]` and outputs `actions, h_out[, c_out]` (`[layers, batch, size]`;
`c_*` for an LSTM only), as in rsl_rl. The ONNX graph is written out layer by layer from the
parameters (memory cells from primitive ops), so it needs nothing but the `onnx` package to build.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.inference import ActingPolicy, LoadedPolicy, action_size

ONNX_OPSET = 18
ONNX_IR_VERSION = 8  # the oldest IR that carries opset 18: readable by older runtimes
INPUT_NAME = "obs"
OUTPUT_NAME = "actions"
HIDDEN_NAMES = {"gru": (("h_in",), ("h_out",)), "lstm": (("h_in", "c_in"), ("h_out", "c_out"))}


class ExportError(ValueError):
    """The policy cannot be expressed in the requested format; the message says why."""


# ---------------------------------------------------------------------------- jax.export
def export_jax_policy(
    acting: ActingPolicy, observation_size: int, platforms: tuple[str, ...] = ("cpu", "cuda")
) -> bytes:
    """Serialized `jax.export` artifact for any batch size (load with `load_jax_policy`).

    Feed-forward: `obs -> action`; recurrent: `(obs, hidden) -> (action, hidden')`.
    """
    (batch,) = jax.export.symbolic_shape("batch")
    obs = jax.ShapeDtypeStruct((batch, observation_size), jnp.float32)
    if not acting.recurrent:
        exported = jax.export.export(jax.jit(lambda o: acting.step(o, {})[0]), platforms=platforms)(obs)
    else:
        one = jax.eval_shape(lambda: acting.initial_hidden(1))  # [layers, 1, size] leaves
        hidden = jax.tree.map(lambda h: jax.ShapeDtypeStruct((h.shape[0], batch, *h.shape[2:]), h.dtype), one)
        exported = jax.export.export(jax.jit(acting.step), platforms=platforms)(obs, hidden)
    return bytes(exported.serialize())


def load_jax_policy(data: bytes) -> Callable:
    """The exported policy as a callable; needs jax only, not strl_jax or the training config."""
    return jax.export.deserialize(bytearray(data)).call


# ---------------------------------------------------------------------------- ONNX
class _Graph:
    """Collects nodes and constant initialisers with unique names."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def name(self, base: str) -> str:
        self._count += 1
        return f"{base}_{self._count}"

    def const(self, value: Any, base: str = "const", dtype: Any = np.float32) -> str:
        name = self.name(base)
        array = np.asarray(value, dtype=dtype)
        self.initializers.append(self.numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def split(self, x: str, parts: int) -> list[str]:
        """`x` cut into `parts` equal pieces along the last axis (like `jnp.split`)."""
        outs = [self.name("split") for _ in range(parts)]
        self.nodes.append(self.helper.make_node("Split", [x], outs, name=outs[0], axis=-1, num_outputs=parts))
        return outs


def _gelu_tanh(g: _Graph, x: str) -> str:
    """flax's default (tanh-approximated) GELU; ONNX's Gelu op arrives only in opset 20."""
    cube = g.op("Mul", g.op("Mul", x, x), x)
    inner = g.op("Add", x, g.op("Mul", cube, g.const(0.044715)))
    inner = g.op("Mul", inner, g.const(math.sqrt(2.0 / math.pi)))
    return g.op("Mul", g.op("Mul", x, g.const(0.5)), g.op("Add", g.op("Tanh", inner), g.const(1.0)))


# Activation name (strl_jax.networks.mlp) -> ONNX subgraph with the same function as flax's.
ONNX_ACTIVATIONS: dict[str, Callable[[_Graph, str], str]] = {
    "elu": lambda g, x: g.op("Elu", x, alpha=1.0),
    "selu": lambda g, x: g.op("Selu", x, alpha=1.6732632423543772, gamma=1.0507009873554805),
    "relu": lambda g, x: g.op("Relu", x),
    "crelu": lambda g, x: g.op("Concat", g.op("Relu", x), g.op("Relu", g.op("Neg", x)), axis=-1),
    "lrelu": lambda g, x: g.op("LeakyRelu", x, alpha=0.01),
    "leaky_relu": lambda g, x: g.op("LeakyRelu", x, alpha=0.01),
    "tanh": lambda g, x: g.op("Tanh", x),
    "sigmoid": lambda g, x: g.op("Sigmoid", x),
    "softplus": lambda g, x: g.op("Softplus", x),
    "gelu": _gelu_tanh,
    "swish": lambda g, x: g.op("Mul", x, g.op("Sigmoid", x)),
    "silu": lambda g, x: g.op("Mul", x, g.op("Sigmoid", x)),
    "mish": lambda g, x: g.op("Mish", x),
    "identity": lambda g, x: g.op("Identity", x),
}


def _linear(g: _Graph, x: str, weight: np.ndarray, bias: np.ndarray, base: str) -> str:
    """`x @ weight.T + bias` with torch's `[out, in]` weight layout."""
    kernel = g.const(np.asarray(weight, np.float32).T, f"{base}_weight")
    return g.op("Add", g.op("MatMul", x, kernel), g.const(bias, f"{base}_bias"))


def _lstm_cell(g: _Graph, p: dict, x: str, h: str, c: str, base: str) -> tuple[str, str]:
    """`strl_jax.networks.memory.LSTMCell`: gates (i, f, g, o)."""
    gates = g.op(
        "Add",
        _linear(g, x, p["weight_ih"], p["bias_ih"], f"{base}_ih"),
        _linear(g, h, p["weight_hh"], p["bias_hh"], f"{base}_hh"),
    )
    i, f, gg, o = g.split(gates, 4)
    c = g.op("Add", g.op("Mul", g.op("Sigmoid", f), c), g.op("Mul", g.op("Sigmoid", i), g.op("Tanh", gg)))
    h = g.op("Mul", g.op("Sigmoid", o), g.op("Tanh", c))
    return h, c


def _gru_cell(g: _Graph, p: dict, x: str, h: str, base: str) -> str:
    """`strl_jax.networks.memory.GRUCell`: gates (r, z, n)."""
    xi = g.split(_linear(g, x, p["weight_ih"], p["bias_ih"], f"{base}_ih"), 3)
    hh = g.split(_linear(g, h, p["weight_hh"], p["bias_hh"], f"{base}_hh"), 3)
    r = g.op("Sigmoid", g.op("Add", xi[0], hh[0]))
    z = g.op("Sigmoid", g.op("Add", xi[1], hh[1]))
    n = g.op("Tanh", g.op("Add", xi[2], g.op("Mul", r, hh[2])))
    return g.op("Add", g.op("Mul", g.op("Sub", g.const(1.0, "one"), z), n), g.op("Mul", z, h))


def _memory(g: _Graph, memory: dict, rnn_type: str, num_layers: int, x: str) -> tuple[str, list[str]]:
    """`strl_jax.networks.memory.Memory` for one step: features and the stacked next hidden state(s)."""
    axis0 = g.const([0], "axis0", np.int64)
    state_in = HIDDEN_NAMES[rnn_type][0]
    new: list[list[str]] = [[] for _ in state_in]
    for layer in range(num_layers):
        index = g.const(layer, f"layer_{layer}_index", np.int64)
        state = [g.op("Gather", name, index, axis=0) for name in state_in]  # [batch, size]
        p = memory[f"layer_{layer}"]
        if rnn_type == "lstm":
            state = list(_lstm_cell(g, p, x, state[0], state[1], f"memory_a_layer_{layer}"))
        else:
            state = [_gru_cell(g, p, x, state[0], f"memory_a_layer_{layer}")]
        x = state[0]
        for stack, s in zip(new, state, strict=True):
            stack.append(g.op("Unsqueeze", s, axis0))
    stacked = [stack[0] if len(stack) == 1 else g.op("Concat", *stack, axis=0) for stack in new]
    return x, stacked


def onnx_policy_model(cfg, params: Any, normalizers: dict, observation_size: int):
    """The deterministic policy as an ONNX `ModelProto`: `obs [batch, obs_dim] -> actions` for an MLP
    policy; `(obs, h_in[, c_in]) -> (actions, h_out[, c_out])` for a recurrent one."""
    import onnx
    from onnx import TensorProto, helper

    if cfg.policy.class_name not in ("ActorCritic", "ActorCriticRecurrent"):
        raise ExportError(
            f"ONNX export supports ActorCritic and ActorCriticRecurrent policies, not "
            f"{cfg.policy.class_name!r}; the jax.export artifact may cover it "
            "(python -m strl_jax.export --no-onnx)"
        )
    recurrent = cfg.policy.class_name == "ActorCriticRecurrent"
    rnn_type = cfg.policy.rnn_type.lower() if recurrent else None
    if recurrent and rnn_type not in HIDDEN_NAMES:
        raise ExportError(
            f"rnn_type {cfg.policy.rnn_type!r} has no ONNX form here; supported: ['gru', 'lstm']"
        )
    activation = cfg.policy.activation.lower()
    if activation not in ONNX_ACTIVATIONS:
        raise ExportError(
            f"activation {cfg.policy.activation!r} has no ONNX form here; "
            f"supported: {sorted(ONNX_ACTIVATIONS)}"
        )
    g = _Graph()
    x = INPUT_NAME
    if cfg.runner.empirical_normalization:
        stats = jax.device_get(normalizers["policy"])
        denom = np.sqrt(np.asarray(stats.var, np.float32)) + np.float32(1e-2)  # networks.normalizer eps
        x = g.op("Div", g.op("Sub", x, g.const(stats.mean, "obs_mean")), g.const(denom, "obs_std"))
    inputs = [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", observation_size])]
    outputs = [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", action_size(params)])]
    if recurrent:
        layers_, size = int(cfg.policy.rnn_num_layers), int(cfg.policy.rnn_hidden_size)
        x, hidden_out = _memory(g, jax.device_get(params["params"]["memory_a"]), rnn_type, layers_, x)
        names_in, names_out = HIDDEN_NAMES[rnn_type]
        for name in names_in:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [layers_, "batch", size]))
        for name, value in zip(names_out, hidden_out, strict=True):
            g.nodes.append(helper.make_node("Identity", [value], [name], name=name))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [layers_, "batch", size]))
    actor = jax.device_get(params["params"]["actor"])
    layers = [f"hidden_{i}" for i in range(len(cfg.policy.actor_hidden_dims))] + ["output"]
    for i, layer in enumerate(layers):
        x = g.op("MatMul", x, g.const(actor[layer]["kernel"], f"{layer}_kernel"))
        x = g.op("Add", x, g.const(actor[layer]["bias"], f"{layer}_bias"))
        if i < len(layers) - 1:
            x = ONNX_ACTIVATIONS[activation](g, x)
    if cfg.env.clip_actions is not None:
        c = float(cfg.env.clip_actions)
        x = g.op("Clip", x, g.const(-c, "clip_min"), g.const(c, "clip_max"))
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT_NAME], name="actions"))
    graph = helper.make_graph(g.nodes, "strl_jax_policy", inputs, outputs, g.initializers)
    what = f"recurrent ({rnn_type}) " if recurrent else ""
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="strl_jax",
        doc_string=f"deterministic {what}{cfg.env.task} policy: normalised obs -> clipped mean action",
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------- CLI
def export_run(loaded: LoadedPolicy, out_dir: Path, onnx_model: bool = True) -> list[Path]:
    """Write `policy.jax_export` (and `policy.onnx`) for a loaded checkpoint; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "policy.jax_export"]
    written[0].write_bytes(export_jax_policy(loaded.acting(), loaded.observation_size))
    if onnx_model:
        model = onnx_policy_model(loaded.cfg, loaded.params, loaded.normalizers, loaded.observation_size)
        path = out_dir / "policy.onnx"
        path.write_bytes(model.SerializeToString())
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.export",
        description="Export a run's deterministic policy (normaliser inside) as ONNX and jax.export.",
    )
    parser.add_argument("log_dir", help="run folder (or checkpoints folder, or one checkpoint step folder)")
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: <log_dir>/exported)")
    parser.add_argument("--no-onnx", action="store_true", help="only the jax.export artifact")
    args = parser.parse_args(argv)

    from strl_jax.configs.loader import ConfigError
    from strl_jax.inference import load_policy
    from strl_jax.train_loops.checkpoint import CheckpointError

    try:
        loaded = load_policy(args.log_dir, args.checkpoint)
        out = Path(args.out) if args.out else Path(args.log_dir) / "exported"
        written = export_run(loaded, out, onnx_model=not args.no_onnx)
    except (CheckpointError, ConfigError, ExportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"error: {err.name} is needed for export: pip install 'strl_jax[export]'", file=sys.stderr)
        return 2
    shapes = f"obs [batch, {loaded.observation_size}] -> actions [batch, {loaded.action_size}]"
    if loaded.cfg.policy.class_name == "ActorCriticRecurrent":
        names_in, names_out = HIDDEN_NAMES.get(loaded.cfg.policy.rnn_type.lower(), (("hidden",), ("hidden",)))
        shape = f"[{loaded.cfg.policy.rnn_num_layers}, batch, {loaded.cfg.policy.rnn_hidden_size}]"
        shapes = shapes.replace(" ->", "".join(f", {n} {shape}" for n in names_in) + " ->")
        shapes += "".join(f", {n} {shape}" for n in names_out)
    print(f"checkpoint {loaded.step}: {shapes}")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
