"""st_rl's Conv2dModel / Conv2dHeadModel / MlpModel encoders against torch on identical weights.

The torch modules are st_rl's (rlpyt's) built with torch.nn as st_rl builds them: per layer
`Conv2d -> [normlayer] -> nonlinearity -> [MaxPool2d(stride) when use_maxpool and stride > 1]`,
flatten with `.view(B, -1)`, then Linear layers with the nonlinearity after every hidden one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

from strl_jax.errors import CheckpointMismatchError, ConfigError
from strl_jax.networks.conv2d import (
    Conv2dHeadModel,
    Conv2dModel,
    MlpModel,
    conv2d_output_shape,
    params_from_torch_state_dict,
)
from strl_jax.networks.encoders import ENCODER_CLASSES, make_encoder

TOL = {"rtol": 1e-5, "atol": 1e-5}


def torch_conv_stack(
    in_channels,
    channels,
    kernel_sizes,
    strides,
    paddings=None,
    nonlinearity="ReLU",
    use_maxpool=False,
    normlayer=None,
):
    paddings = paddings or [0] * len(channels)
    ones = [1] * len(channels)
    conv_strides, pool_strides = (ones, strides) if use_maxpool else (strides, ones)
    act = getattr(nn, nonlinearity)
    layers, ic = [], in_channels
    for oc, k, s, p, ps in zip(channels, kernel_sizes, conv_strides, paddings, pool_strides, strict=True):
        k, s, p = (tuple(v) if isinstance(v, list) else v for v in (k, s, p))
        layers.append(nn.Conv2d(ic, oc, kernel_size=k, stride=s, padding=p))
        if normlayer is not None:
            layers.append(getattr(nn, normlayer)(oc))
        layers.append(act())
        if ps > 1:
            layers.append(nn.MaxPool2d(ps))
        ic = oc
    return nn.Sequential(*layers)


def torch_mlp(input_size, hidden_sizes, output_size=None, nonlinearity="ReLU"):
    hidden_sizes = [hidden_sizes] if isinstance(hidden_sizes, int) else list(hidden_sizes or [])
    layers = []
    for n_in, n_out in zip([input_size, *hidden_sizes[:-1]], hidden_sizes, strict=False):
        layers += [nn.Linear(n_in, n_out), getattr(nn, nonlinearity)()]
    if output_size is not None:
        layers.append(nn.Linear(hidden_sizes[-1] if hidden_sizes else input_size, output_size))
    return nn.Sequential(*layers)


class TorchConv2dHead(nn.Module):
    def __init__(self, image_shape, channels, kernel_sizes, strides, hidden_sizes, output_size=None, **kw):
        super().__init__()
        self.conv = torch_conv_stack(image_shape[0], channels, kernel_sizes, strides, **kw)
        with torch.no_grad():
            conv_out = self.conv(torch.zeros(1, *image_shape)).numel()
        act = kw.get("nonlinearity", "ReLU")
        has_head = hidden_sizes or output_size
        self.head = torch_mlp(conv_out, hidden_sizes, output_size, act) if has_head else nn.Identity()

    def forward(self, x):
        return self.head(self.conv(x).view(x.shape[0], -1))


def images(lead, shape, seed=0):
    return np.random.default_rng(seed).standard_normal((*lead, *shape)).astype(np.float32)


def check_parity(model, torch_model, x, sample_ndim=3):
    """`model` on `x` [..., *sample] equals torch's on the samples flattened to one batch dim."""
    params = params_from_torch_state_dict(model, torch_model.state_dict())
    y = np.asarray(model.apply(params, jnp.asarray(x)))
    torch_in = torch.from_numpy(x).reshape(-1, *x.shape[x.ndim - sample_ndim :])
    with torch.no_grad():
        expected = torch_model(torch_in).numpy()
    assert y.size == expected.size
    np.testing.assert_allclose(y.reshape(expected.shape), expected, **TOL)
    return y


CONV_CASES = {
    "strides": dict(image=(1, 11, 17), channels=[4, 6], kernel_sizes=[3, 2], strides=[1, 2]),
    "strides_3": dict(
        image=(2, 24, 32), channels=[3, 5, 4], kernel_sizes=[5, 3, 2], strides=[3, 2, 1], paddings=[0, 1, 0],
        nonlinearity="ELU",
    ),
    "padding_non_square": dict(
        image=(1, 11, 17), channels=[4, 4], kernel_sizes=[3, [3, 5]], strides=[2, [1, 2]],
        paddings=[2, [1, 2]], nonlinearity="LeakyReLU",
    ),
    "maxpool": dict(
        image=(2, 24, 32), channels=[4, 8], kernel_sizes=[3, 3], strides=[2, 2], paddings=[1, 1],
        use_maxpool=True, nonlinearity="Tanh",
    ),
    "maxpool_stride_1_and_3": dict(
        image=(2, 24, 32), channels=[3, 4, 5], kernel_sizes=[3, 3, 2], strides=[3, 1, 2],
        use_maxpool=True, nonlinearity="GELU",
    ),
    "instance_norm": dict(
        image=(2, 24, 32), channels=[4, 4], kernel_sizes=[3, 3], strides=[2, 1], normlayer="InstanceNorm2d",
    ),
}  # fmt: skip


def conv_kwargs(case):
    kw = dict(CONV_CASES[case])
    return kw.pop("image"), kw


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_model_matches_torch(case):
    image, kw = conv_kwargs(case)
    torch.manual_seed(0)
    torch_model = torch_conv_stack(image[0], **kw)
    model = Conv2dModel(image[0], **kw)
    x = images((3,), image)
    y = check_parity(model, torch_model, x)
    with torch.no_grad():
        out = torch_model(torch.from_numpy(x))
    assert y.shape == tuple(out.shape)
    assert model.conv_out_resolution(*image[1:]) == tuple(out.shape[-2:])
    assert model.conv_out_size(*image[1:]) == out[0].numel()


HEAD_CASES = {
    "hidden_no_output": dict(hidden_sizes=[16, 8], output_size=None),  # last layer nonlinear
    "hidden_and_output": dict(hidden_sizes=[16], output_size=6),
    "output_only": dict(hidden_sizes=[], output_size=6),
    "no_head": dict(hidden_sizes=[], output_size=None),  # the flat conv features
}


@pytest.mark.parametrize(
    "head, lead",
    [(head, (3, 4)) for head in HEAD_CASES] + [("hidden_no_output", (5,)), ("hidden_and_output", ())],
    ids=lambda v: {(): "single", (5,): "B", (3, 4): "TB"}.get(v, v),
)
def test_conv2d_head_model_matches_torch(head, lead):
    image, kw = conv_kwargs("maxpool" if lead == (5,) else "strides_3")
    torch.manual_seed(1)
    torch_model = TorchConv2dHead(image, **kw, **HEAD_CASES[head])
    model = Conv2dHeadModel(image, **kw, **HEAD_CASES[head])
    y = check_parity(model, torch_model, images(lead, image, seed=2))
    assert y.shape == (*lead, model.out_features)
    _, h, w = image
    assert model.conv_out_size == Conv2dModel(image[0], **kw).conv_out_size(h, w)
    if head == "hidden_no_output":  # the output went through the nonlinearity (ELU / Tanh: >= -1)
        assert model.out_features == 8 and y.min() >= -1.0


@pytest.mark.parametrize(
    "hidden_sizes, output_size", [([8, 5], None), ([8, 5], 3), (6, None), (None, 4)], ids=str
)
def test_mlp_model_matches_torch(hidden_sizes, output_size):
    torch.manual_seed(3)
    torch_model = torch_mlp(7, hidden_sizes, output_size, "ELU")
    model = MlpModel(7, hidden_sizes, output_size, "ELU")
    x = np.random.default_rng(4).standard_normal((3, 4, 7)).astype(np.float32)
    y = check_parity(model, torch_model, x, sample_ndim=1)
    assert y.shape == (3, 4, model.out_features)


@pytest.mark.parametrize(
    "image, kw",
    [
        ((3, 64, 64), dict(channels=[8], kernel_sizes=[3], strides=[2], paddings=[1])),  # st_rl's doc example
        (
            (1, 11, 17),
            dict(channels=[2, 2, 2], kernel_sizes=[2, 3, 1], strides=[2, 1, 3], paddings=[0, 1, 1]),
        ),
        (
            (2, 24, 32),
            dict(channels=[2, 3], kernel_sizes=[4, 3], strides=[3, 2], paddings=[2, 0], use_maxpool=True),
        ),
        ((1, 13, 7), dict(channels=[2, 2], kernel_sizes=[1, 1], strides=[2, 2], use_maxpool=True)),
        ((1, 9, 9), dict(channels=[], kernel_sizes=[], strides=[])),
    ],
)
def test_output_shapes_match_torch(image, kw):
    model = Conv2dModel(image[0], **kw)
    torch_model = torch_conv_stack(image[0], **kw)
    with torch.no_grad():
        out = torch_model(torch.zeros(1, *image))
    c, h, w = image
    assert model.conv_out_resolution(h, w) == tuple(out.shape[-2:])
    assert model.conv_out_size(h, w, c) == out.numel()
    assert jax.eval_shape(model.init_with_output, jax.random.key(0), jnp.zeros(image))[0].shape == tuple(
        out.shape[1:]
    )


def test_conv2d_output_shape_formula():
    assert conv2d_output_shape(64, 64, kernel_size=3, stride=2, padding=1) == (32, 32)
    assert conv2d_output_shape(11, 17, kernel_size=(3, 5), stride=(2, 3), padding=(1, 2)) == (6, 6)
    assert conv2d_output_shape(5, 5, kernel_size=7) == (-1, -1)  # torch would refuse: encoders check it


def test_initialisation_is_torch_default():
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for conv and linear weights and biases (torch's
    kaiming_uniform with a=sqrt(5))."""
    model = Conv2dHeadModel((2, 24, 32), [16, 16], [3, 5], [1, 2], [64], output_size=32)
    params = model.init(jax.random.key(0), jnp.zeros((2, 24, 32)))["params"]
    fan_ins = {"conv_0": 2 * 9, "conv_1": 16 * 25, "linear_0": model.conv_out_size, "linear_1": 64}
    for group in params.values():
        for name, leaves in group.items():
            bound = 1.0 / math.sqrt(fan_ins[name])
            for leaf in leaves.values():
                leaf = np.asarray(leaf)
                assert np.abs(leaf).max() <= bound
                if leaf.size >= 64:  # spread over the interval, not concentrated
                    assert np.abs(leaf).max() > 0.9 * bound and abs(leaf.mean()) < 0.2 * bound


def encoder_torch_twin(kwargs, output_size):
    """st_rl's build_encoders: the class with hidden_sizes + [encoder_output_size] and output_size=None."""
    kw = {k: v for k, v in kwargs.items() if k not in ("image_shape", "hidden_sizes")}
    return TorchConv2dHead(kwargs["image_shape"], hidden_sizes=[*kwargs["hidden_sizes"], output_size], **kw)


def test_make_encoder_conv_reads_flat_component():
    kwargs = dict(
        image_shape=[2, 24, 32], channels=[4, 8], kernel_sizes=[5, 3], strides=[2, 2], paddings=[1, 1],
        hidden_sizes=[32], nonlinearity="LeakyReLU", use_maxpool=False, normlayer=None,
    )  # fmt: skip
    encoder = make_encoder("Conv2dHeadModel", kwargs, 2 * 24 * 32, 8, component="depth")
    assert isinstance(encoder, ENCODER_CLASSES["Conv2dHeadModel"]) and encoder.out_features == 8
    torch.manual_seed(5)
    twin = encoder_torch_twin(kwargs, 8)
    flat = images((3, 4), (2 * 24 * 32,), seed=6)
    params = params_from_torch_state_dict(encoder, twin.state_dict())
    y = np.asarray(encoder.apply(params, jnp.asarray(flat)))
    with torch.no_grad():
        expected = twin(torch.from_numpy(flat).reshape(-1, 2, 24, 32)).numpy()
    assert y.shape == (3, 4, 8)
    np.testing.assert_allclose(y.reshape(-1, 8), expected, **TOL)
    # traceable and differentiable (shape checks are static)
    grad = jax.jit(jax.grad(lambda p, x: encoder.apply(p, x).sum()))(params, jnp.asarray(flat))
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grad))


def test_make_encoder_mlp():
    encoder = make_encoder("MlpModel", {"hidden_sizes": [16], "nonlinearity": "ELU"}, 10, 4)
    assert isinstance(encoder, MlpModel) and encoder.out_features == 4
    torch.manual_seed(7)
    twin = torch_mlp(10, [16, 4], None, "ELU")
    x = np.random.default_rng(8).standard_normal((3, 4, 10)).astype(np.float32)
    assert check_parity(encoder, twin, x, sample_ndim=1).shape == (3, 4, 4)


def test_params_from_torch_state_dict_prefix_and_mismatch():
    image, kw = conv_kwargs("strides")
    twin = nn.Module()
    twin.encoders = nn.ModuleList([TorchConv2dHead(image, **kw, hidden_sizes=[8])])
    model = Conv2dHeadModel(image, **kw, hidden_sizes=[8])
    x = images((2,), image)
    params = params_from_torch_state_dict(model, twin.state_dict(), prefix="encoders.0.")
    with torch.no_grad():
        expected = twin.encoders[0](torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.asarray(model.apply(params, jnp.asarray(x))), expected, **TOL)
    wider = Conv2dHeadModel(image, [5, 6], kw["kernel_sizes"], kw["strides"], hidden_sizes=[8])
    with pytest.raises(CheckpointMismatchError, match="conv_0"):
        params_from_torch_state_dict(wider, twin.state_dict(), prefix="encoders.0.")
    deeper = Conv2dHeadModel(image, **kw, hidden_sizes=[8, 8])
    with pytest.raises(CheckpointMismatchError, match="1 Linear layers, the model 2"):
        params_from_torch_state_dict(deeper, twin.state_dict(), prefix="encoders.0.")
    batch_norm = torch_conv_stack(image[0], **kw, normlayer="BatchNorm2d")
    with pytest.raises(CheckpointMismatchError, match="neither a Conv2d nor a Linear"):
        params_from_torch_state_dict(Conv2dModel(image[0], **kw), batch_norm.state_dict())


CONV = dict(image_shape=[1, 11, 17], channels=[4], kernel_sizes=[3], strides=[2], hidden_sizes=[16])


@pytest.mark.parametrize(
    "class_name, kwargs, size, match",
    [
        ("Conv1dModel", CONV, 187, r"unknown encoder class 'Conv1dModel'.*'MlpModel', 'Conv2dHeadModel'"),
        (
            "Conv2dHeadModel",
            {**CONV, "kernel_size": [3]},
            187,
            r"unknown encoder_kwargs key 'kernel_size'.*kernel_sizes",
        ),
        ("MlpModel", {"hidden_sizes": [8], "channels": [4]}, 10, r"unknown encoder_kwargs key 'channels'"),
        ("Conv2dHeadModel", {**CONV, "output_size": 8}, 187, r"'output_size' comes from encoder_output_size"),
        ("MlpModel", {"nonlinearity": "ELU"}, 10, r"lack \['hidden_sizes'\]"),
        (
            "Conv2dHeadModel",
            {k: v for k, v in CONV.items() if k != "image_shape"},
            187,
            r"lack \['image_shape'\]",
        ),
        (
            "Conv2dHeadModel",
            {**CONV, "image_shape": [1, 11, 16]},
            187,
            r"holds 176 values but the component has 187",
        ),
        ("Conv2dHeadModel", {**CONV, "image_shape": [187]}, 187, r"image_shape must be \[C, H, W\]"),
        (
            "Conv2dHeadModel",
            {**CONV, "channels": [4, 4, 4], "kernel_sizes": [5, 5, 5], "strides": [2, 2, 2]},
            187,
            r"shrinks the 11x17 image below 1 pixel at conv 1 \(kernel \(5, 5\), stride \(2, 2\).*0x2",
        ),
        (
            "Conv2dHeadModel",
            {**CONV, "strides": [16], "use_maxpool": True},
            187,
            r"below 1 pixel at maxpool 0 \(kernel \(16, 16\), stride \(16, 16\)\): 0x0",
        ),
        ("Conv2dHeadModel", {**CONV, "strides": [2, 2]}, 187, r"one entry per layer"),
        (
            "Conv2dHeadModel",
            {**CONV, "nonlinearity": "Swish2"},
            187,
            r"unknown nonlinearity 'Swish2'.*'LeakyReLU'",
        ),
        (
            "Conv2dHeadModel",
            {**CONV, "normlayer": "BatchNorm2d"},
            187,
            r"normlayer 'BatchNorm2d' has no effect",
        ),
        ("Conv2dHeadModel", {**CONV, "channels": [0]}, 187, r"channels must be a list of positive ints"),
        ("MlpModel", {"hidden_sizes": "16"}, 10, r"hidden_sizes must be a list of positive ints"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else "",
)
def test_make_encoder_config_errors(class_name, kwargs, size, match):
    with pytest.raises(ConfigError, match=match):
        make_encoder(class_name, kwargs, size, 8, component="height_map")


def test_conv2d_model_normlayer_choices():
    x = jnp.zeros((1, 11, 17))
    with pytest.raises(ConfigError, match="BatchNorm2d' is not supported.*InstanceNorm2d"):
        Conv2dModel(1, [2], [3], [1], normlayer="BatchNorm2d").init(jax.random.key(0), x)
    with pytest.raises(ConfigError, match="unknown normlayer 'LayerNorm'"):
        Conv2dModel(1, [2], [3], [1], normlayer="LayerNorm").init(jax.random.key(0), x)
