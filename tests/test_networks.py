"""Networks: shapes, std parameterisations and activation lookup."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from strl_jax.networks import MLP, ActorCritic, resolve_activation


@pytest.mark.parametrize("noise_std_type", ["scalar", "log"])
def test_actor_critic_shapes_and_initial_std(noise_std_type):
    model = ActorCritic(
        action_dim=3,
        actor_hidden_dims=(8, 8),
        critic_hidden_dims=(4,),
        init_noise_std=0.7,
        noise_std_type=noise_std_type,
    )
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 5)), jnp.zeros((1, 6)))
    mean, std = model.apply(params, jnp.ones((10, 5)), method=ActorCritic.distribution)
    value = model.apply(params, jnp.ones((10, 6)), method=ActorCritic.value)
    chex.assert_shape([mean, std], (10, 3))
    chex.assert_shape(value, (10,))
    np.testing.assert_allclose(std, 0.7, rtol=1e-6)
    assert ("std" if noise_std_type == "scalar" else "log_std") in params["params"]


def test_unknown_noise_std_type_is_clear():
    model = ActorCritic(action_dim=1, noise_std_type="softplus")
    with pytest.raises(ValueError, match="valid choices"):
        model.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)), jnp.zeros((1, 2)))


def test_mlp_layers_and_activation_names():
    mlp = MLP(hidden_dims=(7, 5), output_dim=2, activation="tanh")
    params = mlp.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    assert params["params"]["hidden_0"]["kernel"].shape == (3, 7)
    assert params["params"]["hidden_1"]["kernel"].shape == (7, 5)
    assert mlp.apply(params, jnp.zeros((4, 3))).shape == (4, 2)
    assert resolve_activation("ELU") is resolve_activation("elu")
    with pytest.raises(ValueError, match="unknown activation 'swoosh'; valid choices"):
        resolve_activation("swoosh")


def test_activation_names_mean_what_rsl_rl_means():
    """Every name rsl_rl's `resolve_nn_activation` knows computes torch's function here (`crelu` is
    torch.nn.CELU there, GELU the exact erf form), and strl_jax's aliases export to rsl_rl's name."""
    import rsl_rl.utils.utils as rsl_utils
    import torch

    from strl_jax.configs.to_rsl_rl import rsl_rl_activation

    x = np.linspace(-4.0, 4.0, 97, dtype=np.float32)
    for name in (
        "elu",
        "selu",
        "relu",
        "crelu",
        "lrelu",
        "tanh",
        "sigmoid",
        "softplus",
        "gelu",
        "swish",
        "mish",
    ):
        expected = rsl_utils.resolve_nn_activation(name)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(resolve_activation(name)(jnp.asarray(x)), expected, rtol=1e-6, atol=1e-6)
    for alias in ("celu", "leaky_relu", "LeakyReLU", "silu", "ELU"):
        rsl_name = rsl_rl_activation(alias)
        expected = rsl_utils.resolve_nn_activation(rsl_name)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(resolve_activation(alias)(jnp.asarray(x)), expected, rtol=1e-6, atol=1e-6)
