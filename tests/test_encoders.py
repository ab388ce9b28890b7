"""Encoder policies (st_rl `EncoderActorCriticMixin`, `VisualActorCriticMixin`, `DeterministicPolicyMixin`)
against a torch transcription of st_rl's `embed_encoders_latent` on identical weights, and their
configuration as st_rl class names."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from test_conv2d import TorchConv2dHead, torch_mlp
from torch import nn

from strl_jax.configs.loader import resolve_config
from strl_jax.configs.schema import PolicyConfig
from strl_jax.errors import ConfigError
from strl_jax.networks.conv2d import params_from_torch_state_dict
from strl_jax.networks.latents import latent_source
from strl_jax.networks.policy import make_policy_model
from strl_jax.networks.policy_classes import POLICY_CLASSES

TOL = {"rtol": 1e-5, "atol": 1e-5}
# the policy group: proprioception around a height image and a command; the critic adds a velocity
POLICY = (("base", 5), ("heights", 12), ("command", 3), ("feet", 4))
CRITIC = (("lin_vel", 3), ("base", 5), ("heights", 12), ("command", 3), ("feet", 4))
COMPONENTS = {"policy": POLICY, "critic": CRITIC}
SHAPES = {"heights": (1, 3, 4)}
CONV = {"channels": [3], "kernel_sizes": [2], "strides": [1], "hidden_sizes": [6], "nonlinearity": "ELU"}
MLP = {"hidden_sizes": [5], "nonlinearity": "ELU"}


def policy_cfg(**kw) -> PolicyConfig:
    base = dict(
        class_name="EncoderActorCritic",
        actor_hidden_dims=(16, 8),
        critic_hidden_dims=(12,),
        # listed out of layout order: the latents still take their components' places
        encoder_component_names=("feet", "heights"),
        encoder_class_name=("MlpModel", "Conv2dHeadModel"),
        encoder_kwargs=(MLP, CONV),
        encoder_output_size=4,
    )
    return PolicyConfig(**(base | kw))


def spans(layout):
    out, start = {}, 0
    for name, size in layout:
        out[name] = slice(start, start + size)
        start += size
    return out


def embed_torch(obs, layout, encoders: dict):
    """st_rl's `embed_encoders_latent`: each encoded slice replaced by its latent, in slice order."""
    where = spans(layout)
    order = sorted(encoders, key=lambda n: where[n].start)
    pieces, position = [], 0
    for name in order:
        pieces += [obs[..., position : where[name].start], encoders[name](obs[..., where[name]])]
        position = where[name].stop
    pieces.append(obs[..., position:])
    return torch.cat(pieces, dim=-1)


class TorchHeights(nn.Module):
    """A Conv2dHeadModel encoder on a flat component, as st_rl reshapes it."""

    def __init__(self, shape, kwargs, latent, linear=False):
        super().__init__()
        self.shape = shape
        kw = {k: v for k, v in kwargs.items() if k != "hidden_sizes"}
        hidden = list(kwargs["hidden_sizes"])
        head = (hidden, latent) if linear else ([*hidden, latent], None)
        self.net = TorchConv2dHead(shape, hidden_sizes=head[0], output_size=head[1], **kw)

    def forward(self, x):
        lead = x.shape[:-1]
        return self.net(x.reshape(-1, *self.shape)).reshape(*lead, -1)


def torch_dense(mlp_params: dict, layers: nn.Sequential) -> None:
    """Copy a torch Sequential of Linear layers into strl_jax's MLP params (hidden_i ..., output)."""
    linears = [m for m in layers if isinstance(m, nn.Linear)]
    names = [f"hidden_{i}" for i in range(len(linears) - 1)] + ["output"]
    for name, layer in zip(names, linears, strict=True):
        mlp_params[name] = {
            "kernel": jnp.asarray(layer.weight.detach().numpy().T),
            "bias": jnp.asarray(layer.bias.detach().numpy()),
        }


def torch_head(sizes, out):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ELU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], out))


def build(cfg, action_dim=2):
    model = make_policy_model(action_dim, cfg, COMPONENTS, SHAPES)
    shapes = {"policy": (24,), "critic": (27,)}
    return model, model.init(jax.random.PRNGKey(0), shapes)


def as_mutable(params):
    return jax.tree.map(lambda x: x, dict(params["params"]), is_leaf=lambda x: not isinstance(x, dict))


@pytest.mark.parametrize("critic", ["shared", "own", "none"])
def test_encoder_actor_critic_matches_torch(critic):
    names = {"shared": "shared", "own": ("heights",), "none": None}[critic]
    model, params = build(policy_cfg(critic_encoder_component_names=names))
    torch.manual_seed(3)
    actor_enc = {
        "feet": torch_mlp(4, [5, 4], None, "ELU"),
        "heights": TorchHeights(SHAPES["heights"], CONV, 4),
    }
    critic_enc = {
        "shared": actor_enc,
        "own": {"heights": TorchHeights(SHAPES["heights"], CONV, 4)},
        "none": {},
    }[critic]
    p = as_mutable(params)
    for name, enc in actor_enc.items():
        module = next(s for s in model.module.encoders if s.component == name).build()
        p[f"encoder_{name}"] = params_from_torch_state_dict(module, getattr(enc, "net", enc).state_dict())[
            "params"
        ]
    if critic == "own":
        module = model.module.critic_encoders[0].build()
        state = critic_enc["heights"].net.state_dict()
        p["critic_encoder_heights"] = params_from_torch_state_dict(module, state)["params"]
    critic_in = 27 - sum(s.size - s.output_size for s in model.module.critic_encoders)
    actor, value = torch_head([24 - 16 + 8, 16, 8], 2), torch_head([critic_in, 12], 1)
    torch_dense(p["actor"], actor)
    torch_dense(p["critic"], value)
    params = {"params": p}

    rng = np.random.default_rng(4)
    pobs = rng.standard_normal((3, 5, 24)).astype(np.float32)
    cobs = rng.standard_normal((3, 5, 27)).astype(np.float32)
    mean, _, _, estimates = model.forward(params, {"policy": jnp.asarray(pobs)}, {})
    v = model.value(params, {"critic": jnp.asarray(cobs)}, {})
    with torch.no_grad():
        expected_mean = actor(embed_torch(torch.from_numpy(pobs), POLICY, actor_enc)).numpy()
        expected_value = value(embed_torch(torch.from_numpy(cobs), CRITIC, critic_enc))[..., 0].numpy()
        heights_latent = actor_enc["heights"](torch.from_numpy(pobs[..., 5:17])).numpy()
    np.testing.assert_allclose(np.asarray(mean), expected_mean, **TOL)
    np.testing.assert_allclose(np.asarray(v), expected_value, **TOL)
    np.testing.assert_allclose(np.asarray(estimates["heights"]), heights_latent, **TOL)  # get_encoder_latent
    assert ("critic_encoder_heights" in p) == (critic == "own")


def test_visual_deterministic_recurrent_matches_torch():
    cfg = PolicyConfig(
        class_name="VisualDeterministicRecurrent",
        actor_hidden_dims=(8,),
        critic_hidden_dims=(8,),
        rnn_type="gru",
        rnn_hidden_size=6,
        visual_component_name="heights",
        visual_kwargs={"channels": [2], "kernel_sizes": [2], "strides": [1], "hidden_sizes": [5]},
        visual_latent_size=3,
    )
    model, params = build(cfg)
    assert model.deterministic and model.recurrent
    spec = model.module.encoders[0]
    assert spec.linear_output and spec.output_size == 3 and model.module.shared_critic_encoders
    torch.manual_seed(5)
    twin = TorchHeights(SHAPES["heights"], dict(cfg.visual_kwargs), 3, linear=True)
    p = as_mutable(params)
    p["encoder_heights"] = params_from_torch_state_dict(spec.build(), twin.net.state_dict())["params"]
    params = {"params": p}
    obs = np.random.default_rng(6).standard_normal((4, 24)).astype(np.float32)
    # the memory reads the embedded observation: 24 - 12 + 3 values
    assert params["params"]["memory_a"]["layer_0"]["weight_ih"].shape == (18, 15)
    _, _, _, estimates = model.forward(params, {"policy": jnp.asarray(obs)}, model.initial_hidden(4))
    with torch.no_grad():
        expected = twin(torch.from_numpy(obs[:, 5:17])).numpy()
    np.testing.assert_allclose(np.asarray(estimates["heights"]), expected, **TOL)


def test_encoder_state_ac_estimates_before_encoding():
    cfg = policy_cfg(
        class_name="EncoderStateAc",
        estimator_obs_components=("base", "feet"),
        estimator_target_components=("lin_vel",),
        estimator_kwargs={"hidden_sizes": [8]},
    )
    model, params = build(cfg)
    assert [s.name for s in model.stages] == ["estimator"] and len(model.encoders) == 2
    obs = jnp.asarray(np.random.default_rng(1).standard_normal((2, 24)).astype(np.float32))
    mean, _, _, estimates = model.forward(params, {"policy": obs}, {})
    assert mean.shape == (2, 2) and set(estimates) == {"estimator", "feet", "heights"}
    source = latent_source("heights", model, POLICY, "student")
    assert source.size == 4 and np.array_equal(source.read(estimates, obs), estimates["heights"])


def test_every_st_rl_class_name_is_a_row():
    for name in (
        "EncoderActorCritic",
        "EncoderActorCriticRecurrent",
        "EncoderAmpActorCriticRecurrent",
        "EncoderStateAc",
        "EncoderStateAcRecurrent",
        "VisualDeterministicAC",
        "VisualDeterministicRecurrent",
    ):
        assert name in POLICY_CLASSES
    assert POLICY_CLASSES["VisualDeterministicAC"].deterministic
    assert not POLICY_CLASSES["EncoderActorCritic"].deterministic


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"encoder_component_names": None}, "needs policy.encoder_component_names"),
        ({"encoder_output_size": None}, "needs policy.encoder_output_size"),
        ({"encoder_kwargs": (MLP,)}, "lists 1 entries for 2 encoder_component_names"),
        ({"encoder_component_names": ("feet", "nose"), "encoder_class_name": "MlpModel",
          "encoder_kwargs": MLP}, "unknown policy component(s) ['nose']"),
        ({"critic_encoder_component_names": ("torque",)}, "unknown critic component(s) ['torque']"),
        ({"encoder_class_name": "Conv2dHeadModel", "encoder_kwargs": CONV},
         "needs its image shape: the env knows no image shape for it"),
        ({"encoder_class_name": ("MlpModel", "Conv3d")}, "unknown encoder class 'Conv3d'"),
        ({"class_name": "ActorCritic"}, "has no encoders"),
    ],
)  # fmt: skip
def test_encoder_config_errors(overrides, needle):
    with pytest.raises(ConfigError, match=None) as err:
        make_policy_model(2, policy_cfg(**overrides), COMPONENTS, SHAPES)
    assert needle in str(err.value)


def test_config_names_go_through_the_loader():
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=[
            "policy.class_name=EncoderActorCritic",
            "policy.encoder_component_names=[pole]",
            "policy.encoder_kwargs={hidden_sizes: [8], nonlinearity: CELU}",
            "policy.encoder_output_size=3",
            "policy.critic_encoder_component_names=shared",
        ],
    )
    assert cfg.policy.encoder_kwargs == {"hidden_sizes": [8], "nonlinearity": "CELU"}
    assert cfg.policy.critic_encoder_component_names == "shared"
    with pytest.raises(ConfigError, match="policy.visual_kwargs is set but"):
        resolve_config("inverted_pendulum", overrides=["policy.visual_kwargs={channels: [4]}"])
