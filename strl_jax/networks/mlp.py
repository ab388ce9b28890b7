"""Multi-layer perceptron with activations chosen by name, as in rsl_rl configs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "elu": nn.elu,
    "selu": nn.selu,
    "celu": nn.celu,
    "relu": nn.relu,
    "crelu": nn.celu,  # rsl_rl >= 2 resolves "crelu" to torch.nn.CELU (rsl_rl 1.x and st_rl: ReLU)
    "lrelu": nn.leaky_relu,
    "leaky_relu": nn.leaky_relu,
    "leakyrelu": nn.leaky_relu,  # torch's class name, as st_rl configs write it (`LeakyReLU`)
    "tanh": nn.tanh,
    "sigmoid": nn.sigmoid,
    "softplus": nn.softplus,
    "gelu": functools.partial(nn.gelu, approximate=False),  # torch.nn.GELU() is the exact (erf) form
    "swish": nn.swish,
    "silu": nn.silu,
    "mish": lambda x: x * jnp.tanh(nn.softplus(x)),
    "identity": lambda x: x,
}


def resolve_activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """Look an activation up by its rsl_rl name; unknown names list the valid ones."""
    try:
        return ACTIVATIONS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; valid choices: {sorted(ACTIVATIONS)}") from None


class MLP(nn.Module):
    """Dense layers with an activation between them and a linear output layer."""

    hidden_dims: Sequence[int]
    output_dim: int
    activation: str = "elu"
    output_scale: float = 1.0
    output_bias_init: Callable = nn.initializers.zeros  # (key, shape, dtype) -> the output layer's bias

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = resolve_activation(self.activation)
        for i, width in enumerate(self.hidden_dims):
            x = act(nn.Dense(width, name=f"hidden_{i}")(x))
        init = nn.initializers.variance_scaling(self.output_scale, "fan_avg", "uniform")
        return nn.Dense(self.output_dim, kernel_init=init, bias_init=self.output_bias_init, name="output")(x)
