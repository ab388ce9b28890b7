"""st_rl's image and MLP encoders (`modules/conv2d.py`, `modules/mlp.py`, from rlpyt), on torch's layout.

- `Conv2dModel`: per layer `Conv2d -> [normlayer] -> nonlinearity -> [MaxPool2d]`. With `use_maxpool`
  every conv has stride 1 and a `MaxPool2d(stride)` (kernel = stride, no padding) follows the
  nonlinearity of each layer whose stride is above 1; a stride of 1 adds no pooling layer.
- `Conv2dHeadModel`: the conv stack, flattened as torch's `.view(B, -1)` on NCHW, then an `MlpModel`
  head when `hidden_sizes or output_size` (rlpyt's test), else the flat conv features.
- `MlpModel`: `Linear -> nonlinearity` per hidden size, then a linear output layer when
  `output_size` is given; with `output_size=None` the last hidden layer (nonlinearity applied) is
  the output, which is how st_rl's encoders end (`hidden_sizes + [encoder_output_size]`).

Images are NCHW with any leading batch dims (`[..., C, H, W]`) and conv kernels are stored as torch's
`[out, in, kh, kw]`, so configs and checkpoints map 1:1 (`params_from_torch_state_dict`). Weights
and biases start as torch's defaults (`U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, i.e. kaiming_uniform
with a=sqrt(5)), which st_rl does not override for these modules.

`normlayer` is applied after each conv as in st_rl's `Conv2dModel` (which builds `normlayer(oc)`
from a `torch.nn` class name). Only the stateless `InstanceNorm2d` (torch's defaults: affine=False,
no running statistics, eps=1e-5) is offered: `BatchNorm2d` would make each env's action depend on
the other envs' images in the batch while acting, and its running statistics would be a mutable
state threaded through rollouts, minibatch updates, checkpoints and export, with train/eval modes
that PPO's re-evaluation of old actions would have to keep apart. st_rl's own `Conv2dHeadModel` (the
only conv encoder) passes `normlayer=None` to its conv stack, so no st_rl encoder ever used one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.errors import CheckpointMismatchError, ConfigError
from strl_jax.networks.mlp import resolve_activation

Pair = tuple[int, int]
IntOrPair = int | Sequence[int]

# torch.nn class names st_rl's configs use (st_rl resolves them with `getattr(torch.nn, name)`);
# lower-case rsl_rl names are accepted too.
NONLINEARITIES = (
    "ReLU",
    "ELU",
    "SELU",
    "CELU",
    "LeakyReLU",
    "Tanh",
    "Sigmoid",
    "Softplus",
    "GELU",
    "SiLU",
    "Mish",
    "Identity",
)
NORMLAYERS = (None, "InstanceNorm2d")
INSTANCE_NORM_EPS = 1e-5  # torch.nn.InstanceNorm2d's default


def resolve_nonlinearity(name: str) -> Callable[[jax.Array], jax.Array]:
    """A torch.nn activation class name -> the function with torch's defaults."""
    if not isinstance(name, str):
        raise ConfigError(f"nonlinearity must be a name, got {name!r}; valid choices: {list(NONLINEARITIES)}")
    key = name.lower()
    if key == "crelu":
        return nn.relu  # st_rl's get_activation_Cls alias "crelu" -> torch.nn.ReLU
    try:
        return resolve_activation(key)
    except ValueError:
        raise ConfigError(f"unknown nonlinearity {name!r}; valid choices: {list(NONLINEARITIES)}") from None


def as_pair(value: IntOrPair, what: str = "value") -> Pair:
    """torch's int-or-(h, w) convention for kernel sizes, strides and paddings."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value), int(value)
    if (
        isinstance(value, Sequence)
        and len(value) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
    ):
        return int(value[0]), int(value[1])
    raise ConfigError(f"{what} must be an int or a pair of ints (h, w), got {value!r}")


def conv2d_output_shape(
    h: int,
    w: int,
    kernel_size: IntOrPair = 1,
    stride: IntOrPair = 1,
    padding: IntOrPair = 0,
    dilation: int = 1,
) -> Pair:
    """Output (H, W) of a Conv2d or pooling layer: torch's `floor((h + 2p - d(k-1) - 1) / s) + 1`."""
    (kh, kw), (sh, sw), (ph, pw) = as_pair(kernel_size), as_pair(stride), as_pair(padding)
    h = (h + 2 * ph - dilation * (kh - 1) - 1) // sh + 1
    w = (w + 2 * pw - dilation * (kw - 1) - 1) // sw + 1
    return h, w


@dataclasses.dataclass(frozen=True)
class ConvLayer:
    """One layer of the stack as torch builds it: the conv, then an optional MaxPool2d(pool)."""

    in_channels: int
    out_channels: int
    kernel: Pair
    stride: Pair  # the conv's own stride (1 with use_maxpool)
    padding: Pair
    pool: Pair | None  # MaxPool2d kernel = stride, or None


def conv_layers(
    in_channels: int,
    channels: Sequence[int],
    kernel_sizes: Sequence[IntOrPair],
    strides: Sequence[IntOrPair],
    paddings: Sequence[IntOrPair] | None = None,
    use_maxpool: bool = False,
) -> tuple[ConvLayer, ...]:
    """The layers st_rl's `Conv2dModel` builds, checked (lengths equal, sizes positive)."""
    paddings = [0] * len(channels) if paddings is None else paddings
    lengths = {"channels": len(channels), "kernel_sizes": len(kernel_sizes), "strides": len(strides)}
    lengths["paddings"] = len(paddings)
    if len(set(lengths.values())) != 1:
        raise ConfigError(
            f"channels, kernel_sizes, strides and paddings need one entry per layer; got {lengths}"
        )
    layers = []
    for i, (oc, k, s, p) in enumerate(zip(channels, kernel_sizes, strides, paddings, strict=True)):
        k, s, p = as_pair(k, f"kernel_sizes[{i}]"), as_pair(s, f"strides[{i}]"), as_pair(p, f"paddings[{i}]")
        if isinstance(oc, bool) or not isinstance(oc, (int, np.integer)) or oc < 1:
            raise ConfigError(f"channels[{i}] must be a positive int, got {oc!r}")
        if min(k) < 1 or min(s) < 1 or min(p) < 0:
            raise ConfigError(
                f"layer {i}: kernel sizes and strides must be >= 1 and paddings >= 0, got {k}, {s}, {p}"
            )
        pool = s if use_maxpool and max(s) > 1 else None
        layers.append(ConvLayer(in_channels, int(oc), k, (1, 1) if use_maxpool else s, p, pool))
        in_channels = int(oc)
    return tuple(layers)


def layer_resolutions(layers: Sequence[ConvLayer], h: int, w: int) -> list[tuple[str, int, int]]:
    """(stage, H, W) after every conv and max-pool, stages named `conv i` / `maxpool i`."""
    out = []
    for i, layer in enumerate(layers):
        h, w = conv2d_output_shape(h, w, layer.kernel, layer.stride, layer.padding)
        out.append((f"conv {i}", h, w))
        if layer.pool is not None:
            h, w = conv2d_output_shape(h, w, layer.pool, layer.pool, 0)
            out.append((f"maxpool {i}", h, w))
    return out


def check_normlayer(normlayer: str | None) -> None:
    """Only stateless normalisation layers fit a pure policy (module docstring)."""
    if normlayer == "BatchNorm2d":
        raise ConfigError(
            "normlayer 'BatchNorm2d' is not supported: its batch statistics couple the envs of a rollout "
            "and its running statistics are state outside the parameters; use 'InstanceNorm2d' "
            f"(per image, stateless) or None. Valid choices: {list(NORMLAYERS)}"
        )
    if normlayer not in NORMLAYERS:
        raise ConfigError(f"unknown normlayer {normlayer!r}; valid choices: {list(NORMLAYERS)}")


def uniform_init(bound: float) -> Callable[..., jax.Array]:
    """`U(-bound, bound)`: torch's default for Linear/Conv2d weights and biases with bound 1/sqrt(fan_in)."""

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class Conv2d(nn.Module):
    """torch.nn.Conv2d: NCHW input, `kernel` stored `[out, in, kh, kw]`, symmetric zero padding."""

    layer: ConvLayer

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        spec = self.layer
        bound = 1.0 / math.sqrt(spec.in_channels * spec.kernel[0] * spec.kernel[1])
        kernel = self.param(
            "kernel", uniform_init(bound), (spec.out_channels, spec.in_channels, *spec.kernel)
        )
        bias = self.param("bias", uniform_init(bound), (spec.out_channels,))
        y = jax.lax.conv_general_dilated(
            x,
            kernel.astype(x.dtype),
            window_strides=spec.stride,
            padding=[(spec.padding[0], spec.padding[0]), (spec.padding[1], spec.padding[1])],
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )
        return y + bias.astype(x.dtype)[:, None, None]


def max_pool(x: jax.Array, window: Pair) -> jax.Array:
    """torch.nn.MaxPool2d(window): stride = kernel, no padding, floor mode, on the last two dims."""
    dims = (1,) * (x.ndim - 2) + tuple(window)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, dims, "VALID")


def instance_norm(x: jax.Array) -> jax.Array:
    """torch.nn.InstanceNorm2d(c) with its defaults: per image and channel over H, W; biased variance."""
    mean = jnp.mean(x, axis=(-2, -1), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(-2, -1), keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + INSTANCE_NORM_EPS)


class Conv2dModel(nn.Module):
    """st_rl's `Conv2dModel`: `[..., in_channels, H, W] -> [..., channels[-1], H', W']`."""

    in_channels: int
    channels: Sequence[int]
    kernel_sizes: Sequence[IntOrPair]
    strides: Sequence[IntOrPair]
    paddings: Sequence[IntOrPair] | None = None
    nonlinearity: str = "ReLU"
    use_maxpool: bool = False  # convs use stride 1 and MaxPool2d(stride) downsamples
    normlayer: str | None = None

    def layers(self) -> tuple[ConvLayer, ...]:
        return conv_layers(
            self.in_channels, self.channels, self.kernel_sizes, self.strides, self.paddings, self.use_maxpool
        )

    def conv_out_resolution(self, h: int, w: int) -> Pair:
        """(H, W) of the output for an (h, w) input, without running the model."""
        stages = layer_resolutions(self.layers(), h, w)
        return stages[-1][1:] if stages else (h, w)

    def conv_out_size(self, h: int, w: int, c: int | None = None) -> int:
        """Flat output size `H' * W' * C'` for an (h, w) input (`c`: the channels when there is no layer)."""
        h, w = self.conv_out_resolution(h, w)
        return h * w * (self.channels[-1] if len(self.channels) else c)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        check_normlayer(self.normlayer)
        act = resolve_nonlinearity(self.nonlinearity)
        if x.ndim < 3 or x.shape[-3] != self.in_channels:
            raise ValueError(
                f"Conv2dModel expects [..., {self.in_channels}, H, W] inputs, got shape {x.shape}"
            )
        lead = x.shape[:-3]
        x = x.reshape(-1, *x.shape[-3:])
        for i, layer in enumerate(self.layers()):
            x = Conv2d(layer, name=f"conv_{i}")(x)
            if self.normlayer == "InstanceNorm2d":
                x = instance_norm(x)
            x = act(x)
            if layer.pool is not None:
                x = max_pool(x, layer.pool)
        return x.reshape(*lead, *x.shape[-3:])


def _hidden_list(hidden_sizes: Sequence[int] | int | None) -> tuple[int, ...]:
    if hidden_sizes is None:
        return ()
    if isinstance(hidden_sizes, (int, np.integer)):
        return (int(hidden_sizes),)
    return tuple(int(h) for h in hidden_sizes)


class MlpModel(nn.Module):
    """st_rl's `MlpModel`: `[..., input_size] -> [..., out_features]`; without `output_size` the last
    hidden layer, nonlinearity applied, is the output."""

    input_size: int
    hidden_sizes: Sequence[int] | int | None = ()
    output_size: int | None = None
    nonlinearity: str = "ReLU"

    @property
    def out_features(self) -> int:
        hidden = _hidden_list(self.hidden_sizes)
        if self.output_size is not None:
            return self.output_size
        return hidden[-1] if hidden else self.input_size

    def widths(self) -> tuple[int, ...]:
        """Output width of every Linear layer, in order."""
        hidden = _hidden_list(self.hidden_sizes)
        return hidden + (() if self.output_size is None else (self.output_size,))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = resolve_nonlinearity(self.nonlinearity)
        if x.shape[-1] != self.input_size:
            raise ValueError(f"MlpModel expects [..., {self.input_size}] inputs, got shape {x.shape}")
        n_hidden = len(_hidden_list(self.hidden_sizes))
        width = self.input_size
        for i, out in enumerate(self.widths()):
            init = uniform_init(1.0 / math.sqrt(width))  # torch.nn.Linear's default
            x = nn.Dense(out, kernel_init=init, bias_init=init, name=f"linear_{i}")(x)
            if i < n_hidden:
                x = act(x)
            width = out
        return x


class Conv2dHeadModel(nn.Module):
    """st_rl's `Conv2dHeadModel`: conv stack, flatten (torch's NCHW order), `MlpModel` head.

    `flat_input`: inputs are `[..., C*H*W]` (an observation component) and reshaped to `image_shape`.
    """

    image_shape: Sequence[int]  # (C, H, W)
    channels: Sequence[int]
    kernel_sizes: Sequence[IntOrPair]
    strides: Sequence[IntOrPair]
    hidden_sizes: Sequence[int] | int | None
    output_size: int | None = None
    paddings: Sequence[IntOrPair] | None = None
    nonlinearity: str = "ReLU"
    use_maxpool: bool = False
    flat_input: bool = False

    def conv_kwargs(self) -> dict[str, Any]:
        return dict(
            in_channels=self.image_shape[0],
            channels=self.channels,
            kernel_sizes=self.kernel_sizes,
            strides=self.strides,
            paddings=self.paddings,
            nonlinearity=self.nonlinearity,
            use_maxpool=self.use_maxpool,
        )

    def conv_model(self) -> Conv2dModel:
        """The conv stack's configuration (unbound: sizes only)."""
        return Conv2dModel(**self.conv_kwargs(), parent=None)

    @property
    def conv_out_size(self) -> int:
        _, h, w = self.image_shape
        return self.conv_model().conv_out_size(h, w)

    @property
    def has_head(self) -> bool:
        return bool(self.hidden_sizes or self.output_size)  # rlpyt's test, `0` and `[]` included

    def head_model(self) -> MlpModel:
        return MlpModel(
            self.conv_out_size, self.hidden_sizes, self.output_size, self.nonlinearity, parent=None
        )

    @property
    def out_features(self) -> int:
        return self.head_model().out_features if self.has_head else self.conv_out_size

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        shape = tuple(self.image_shape)
        if self.flat_input:
            if x.shape[-1] != math.prod(shape):
                raise ValueError(
                    f"expected [..., {math.prod(shape)}] inputs (image {shape}), got shape {x.shape}"
                )
            x = x.reshape(*x.shape[:-1], *shape)
        if x.shape[-3:] != shape:
            raise ValueError(
                f"expected [..., {shape[0]}, {shape[1]}, {shape[2]}] inputs, got shape {x.shape}"
            )
        y = Conv2dModel(**self.conv_kwargs(), name="conv")(x)
        y = y.reshape(*y.shape[:-3], -1)
        if not self.has_head:
            return y
        return MlpModel(
            self.conv_out_size, self.hidden_sizes, self.output_size, self.nonlinearity, name="head"
        )(y)


def tensor_to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value, np.float32)


def _torch_layers(state_dict: Mapping[str, Any], prefix: str) -> tuple[list, list]:
    """The (name, weight, bias) of the Conv2d and the Linear layers under `prefix`, in the
    state dict's order (torch's registration order: Sequential index order)."""
    groups: dict[str, dict[str, np.ndarray]] = {}
    for key, value in state_dict.items():
        if key.startswith(prefix):
            path, _, leaf = key[len(prefix) :].rpartition(".")
            groups.setdefault(prefix + path, {})[leaf] = tensor_to_numpy(value)
    convs, linears = [], []
    for path, leaves in groups.items():
        weight = leaves.get("weight")
        if set(leaves) != {"weight", "bias"} or weight.ndim not in (2, 4):
            raise CheckpointMismatchError(
                f"{path!r} ({sorted(leaves)}) is neither a Conv2d nor a Linear layer with a bias; "
                "these encoders hold only those (no normalisation layer with parameters)"
            )
        (convs if weight.ndim == 4 else linears).append((path, weight, leaves["bias"]))
    return convs, linears


def _layer_params(found: Sequence, expected: Sequence[tuple[str, tuple[int, ...], str]], what: str) -> dict:
    """Checked flax params `{name: {"kernel", "bias"}}` for the torch layers `found`."""
    if len(found) != len(expected):
        raise CheckpointMismatchError(
            f"the state dict holds {len(found)} {what} layers, the model {len(expected)}"
        )
    params = {}
    for (path, weight, bias), (name, shape, kind) in zip(found, expected, strict=True):
        if weight.shape != shape or bias.shape != (shape[0],):
            raise CheckpointMismatchError(
                f"{path}.weight has shape {weight.shape} (bias {bias.shape}); "
                f"{kind} {name} needs {shape} ({shape[0]},)"
            )
        kernel = weight if weight.ndim == 4 else weight.T
        params[name] = {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)}
    return params


def _conv_expected(model: Conv2dModel) -> list[tuple[str, tuple[int, ...], str]]:
    return [
        (f"conv_{i}", (c.out_channels, c.in_channels, *c.kernel), "Conv2d")
        for i, c in enumerate(model.layers())
    ]


def _linear_expected(model: MlpModel) -> list[tuple[str, tuple[int, ...], str]]:
    ins = (model.input_size, *model.widths()[:-1])
    return [
        (f"linear_{i}", (o, n), "Linear") for i, (n, o) in enumerate(zip(ins, model.widths(), strict=True))
    ]


def params_from_torch_state_dict(
    model: Conv2dModel | MlpModel | Conv2dHeadModel, state_dict: Mapping[str, Any], prefix: str = ""
) -> dict:
    """`{"params": ...}` for `model` from a torch state dict of st_rl's module of the same config.

    Reads the entries whose keys start with `prefix` (e.g. `"encoders.0."` in an st_rl policy's
    checkpoint), Conv2d and Linear layers each in the state dict's order; tensors or arrays.
    """
    convs, linears = _torch_layers(state_dict, prefix)
    if isinstance(model, Conv2dModel):
        _layer_params(linears, [], "Linear")
        tree = _layer_params(convs, _conv_expected(model), "Conv2d")
    elif isinstance(model, MlpModel):
        _layer_params(convs, [], "Conv2d")
        tree = _layer_params(linears, _linear_expected(model), "Linear")
    elif isinstance(model, Conv2dHeadModel):
        tree = {"conv": _layer_params(convs, _conv_expected(model.conv_model()), "Conv2d")}
        head = _layer_params(
            linears, _linear_expected(model.head_model()) if model.has_head else [], "Linear"
        )
        if model.has_head:
            tree["head"] = head
    else:
        raise TypeError(f"no torch mapping for {type(model).__name__}")
    return {"params": tree}
