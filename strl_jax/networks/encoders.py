"""Encoders of observation components (st_rl `EncoderActorCriticMixin.build_encoders`).

An encoder reads one component of the flat observation and returns `output_size` latent features
(st_rl's `encoder_output_size`). As in st_rl, the encoder is the configured class with
`hidden_sizes = encoder_kwargs["hidden_sizes"] + [output_size]` and `output_size=None`: the latent is
the last hidden layer with its nonlinearity applied.

`encoder_kwargs` keep st_rl's names. st_rl takes a `Conv2dHeadModel`'s `image_shape` (C, H, W) from
the component's shape in `obs_segments`; strl_jax's components are flat `(name, size)`, so the
kwargs name it and the encoder reshapes `[..., C*H*W]` to `[..., C, H, W]` (row-major, as st_rl's
`reshape(-1, *shape)`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import numpy as np

from strl_jax.errors import ConfigError
from strl_jax.networks.conv2d import (
    Conv2dHeadModel,
    MlpModel,
    as_pair,
    conv_layers,
    layer_resolutions,
    resolve_nonlinearity,
)

ENCODER_CLASSES: dict[str, type[nn.Module]] = {"MlpModel": MlpModel, "Conv2dHeadModel": Conv2dHeadModel}

# encoder_kwargs each class takes (st_rl's names), and the ones it cannot do without
ENCODER_KWARGS: dict[str, tuple[str, ...]] = {
    "MlpModel": ("hidden_sizes", "nonlinearity"),
    "Conv2dHeadModel": (
        "image_shape",
        "channels",
        "kernel_sizes",
        "strides",
        "hidden_sizes",
        "paddings",
        "nonlinearity",
        "use_maxpool",
        "normlayer",
    ),
}
REQUIRED_KWARGS: dict[str, tuple[str, ...]] = {
    "MlpModel": ("hidden_sizes",),
    "Conv2dHeadModel": ("image_shape", "channels", "kernel_sizes", "strides", "hidden_sizes"),
}
# set by the encoder itself, never by encoder_kwargs (st_rl passes them too)
_SET_BY_ENCODER = {
    "input_size": "the component's size",
    "output_size": "encoder_output_size",
    "flat_input": "the encoder (components arrive flat)",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _positive_ints(what: str, value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(_is_int(v) and v > 0 for v in value)
    ):
        raise ConfigError(f"{what} must be a list of positive ints, got {value!r}")
    return tuple(int(v) for v in value)


def _pairs(what: str, value: Any) -> tuple[int | tuple[int, int], ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigError(f"{what} must be a list (one int or [h, w] per layer), got {value!r}")
    return tuple(int(v) if _is_int(v) else as_pair(v, f"{what}[{i}]") for i, v in enumerate(value))


def _hidden_sizes(where: str, value: Any) -> tuple[int, ...]:
    if _is_int(value) and value > 0:  # MlpModel's own rule: an int is one layer
        return (int(value),)
    return _positive_ints(f"{where}: hidden_sizes", value)


def make_encoder(
    class_name: str,
    kwargs: Mapping[str, Any],
    component_size: int,
    output_size: int,
    *,
    component: str = "component",
    linear_output: bool = False,
) -> nn.Module:
    """The encoder st_rl builds for one component: `[..., component_size] -> [..., output_size]`.

    `linear_output`: the latent is a linear layer after `hidden_sizes` (st_rl's visual encoder,
    `Conv2dHeadModel(output_size=visual_latent_size)`) instead of a hidden layer with its
    nonlinearity (`EncoderActorCriticMixin`).

    Raises ConfigError naming the problem and the valid choices (class, kwargs, image shape, a conv
    stack that shrinks the image below one pixel).
    """
    where = f"encoder {class_name!r} of {component!r}"
    if class_name not in ENCODER_CLASSES:
        raise ConfigError(
            f"unknown encoder class {class_name!r} for {component!r}; valid choices: {list(ENCODER_CLASSES)}"
        )
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{where}: encoder_kwargs must be a mapping, got {kwargs!r}")
    valid = ENCODER_KWARGS[class_name]
    for key in kwargs:
        if key in _SET_BY_ENCODER:
            raise ConfigError(f"{where}: {key!r} comes from {_SET_BY_ENCODER[key]}, not encoder_kwargs")
        if key not in valid:
            raise ConfigError(f"{where}: unknown encoder_kwargs key {key!r}; valid keys: {list(valid)}")
    missing = [k for k in REQUIRED_KWARGS[class_name] if k not in kwargs]
    if missing:
        raise ConfigError(f"{where}: encoder_kwargs lack {missing}; valid keys: {list(valid)}")
    if not (_is_int(output_size) and output_size > 0):
        raise ConfigError(f"{where}: encoder_output_size must be a positive int, got {output_size!r}")
    if not (_is_int(component_size) and component_size > 0):
        raise ConfigError(f"{where}: the component's size must be a positive int, got {component_size!r}")
    nonlinearity = kwargs.get("nonlinearity", "ReLU")
    try:
        resolve_nonlinearity(nonlinearity)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    hidden = _hidden_sizes(where, kwargs["hidden_sizes"])
    hidden, output = (hidden, int(output_size)) if linear_output else ((*hidden, int(output_size)), None)
    if class_name == "MlpModel":
        return MlpModel(int(component_size), hidden, output, nonlinearity)
    return _conv_encoder(where, kwargs, int(component_size), hidden, output, nonlinearity)


def _conv_encoder(
    where: str,
    kwargs: Mapping[str, Any],
    component_size: int,
    hidden: tuple[int, ...],
    output: int | None,
    nonlinearity: str,
) -> Conv2dHeadModel:
    image_shape = kwargs["image_shape"]
    if not (isinstance(image_shape, Sequence) and len(image_shape) == 3):
        raise ConfigError(f"{where}: image_shape must be [C, H, W], got {image_shape!r}")
    image_shape = _positive_ints(f"{where}: image_shape", image_shape)
    if math.prod(image_shape) != component_size:
        raise ConfigError(
            f"{where}: image_shape {list(image_shape)} holds {math.prod(image_shape)} values but the "
            f"component has {component_size}; give the component's [C, H, W]"
        )
    if kwargs.get("normlayer") is not None:
        raise ConfigError(
            f"{where}: normlayer {kwargs['normlayer']!r} has no effect in st_rl's Conv2dHeadModel (it builds "
            "its conv stack with normlayer=None); remove it or set it to None"
        )
    use_maxpool = kwargs.get("use_maxpool", False)
    if not isinstance(use_maxpool, bool):
        raise ConfigError(f"{where}: use_maxpool must be true or false, got {use_maxpool!r}")
    channels = _positive_ints(f"{where}: channels", kwargs["channels"])
    kernel_sizes = _pairs(f"{where}: kernel_sizes", kwargs["kernel_sizes"])
    strides = _pairs(f"{where}: strides", kwargs["strides"])
    paddings = kwargs.get("paddings")
    paddings = None if paddings is None else _pairs(f"{where}: paddings", paddings)
    try:
        layers = conv_layers(image_shape[0], channels, kernel_sizes, strides, paddings, use_maxpool)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    _, h, w = image_shape
    for stage, out_h, out_w in layer_resolutions(layers, h, w):
        if out_h < 1 or out_w < 1:
            i = int(stage.split()[-1])
            layer = layers[i]
            detail = (
                f"kernel {layer.pool}, stride {layer.pool}"
                if stage.startswith("maxpool")
                else f"kernel {layer.kernel}, stride {layer.stride}, padding {layer.padding}"
            )
            raise ConfigError(
                f"{where}: the conv stack shrinks the {h}x{w} image below 1 pixel at {stage} ({detail}): "
                f"{out_h}x{out_w}; use smaller kernel_sizes or strides, more paddings or fewer layers"
            )
    return Conv2dHeadModel(
        image_shape=image_shape,
        channels=channels,
        kernel_sizes=kernel_sizes,
        strides=strides,
        hidden_sizes=hidden,
        output_size=output,
        paddings=paddings,
        nonlinearity=nonlinearity,
        use_maxpool=use_maxpool,
        flat_input=True,
    )
