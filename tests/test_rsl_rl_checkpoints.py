"""rsl_rl checkpoints both ways: a `.pt` saved by the installed rsl_rl's `OnPolicyRunner` loads into
strl_jax with the same actions and values, and `export --format rsl_rl` writes one that rsl_rl's
`OnPolicyRunner.load` accepts, acting the same through `get_inference_policy` (MLP and LSTM/GRU,
normalisers included)."""

from __future__ import annotations

import builtins

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict
from tiny_config import tiny

from strl_jax.checkpoints import torch_checkpoints
from strl_jax.checkpoints.manipulators import copy_overlap
from strl_jax.checkpoints.torch_checkpoints import load_torch_params_and_normalizers
from strl_jax.configs.loader import resolve_config
from strl_jax.configs.to_rsl_rl import to_rsl_rl_train_cfg
from strl_jax.errors import CheckpointMismatchError, ConfigError
from strl_jax.export import main as export_main
from strl_jax.inference import PolicyState, load_policy
from strl_jax.networks.acting import acting_policy, make_actor
from strl_jax.networks.normalizer import NormalizerState, normalize
from strl_jax.networks.policy import make_policy_model
from strl_jax.runners.runner import train

POLICY_OBS, CRITIC_OBS, ACT, ENVS = 5, 7, 3, 4
TOL = dict(rtol=1e-5, atol=1e-5)
NETWORK = ["policy.actor_hidden_dims=[8, 8]", "policy.critic_hidden_dims=[8, 8]", "env.clip_actions=null"]
RECURRENT = ["policy.class_name=ActorCriticRecurrent", "policy.rnn_hidden_size=6"]


class ToyEnv:
    """A torch VecEnv for rsl_rl's runner: random observations (`policy` and `critic` groups), a
    reward that prefers small actions, episodes of 6 steps."""

    def __init__(self, policy_obs: int = POLICY_OBS, critic_obs: int = CRITIC_OBS, num_actions: int = ACT):
        self.num_envs, self.num_actions, self.max_episode_length = ENVS, num_actions, 6
        self.device, self.cfg = "cpu", {}
        self.sizes = {"policy": policy_obs, "critic": critic_obs}
        self.episode_length_buf = torch.zeros(ENVS, dtype=torch.long)
        self.generator = torch.Generator().manual_seed(0)
        self.obs = self._observe()

    def _observe(self) -> TensorDict:
        groups = {
            k: 2.0 + 3.0 * torch.randn(ENVS, n, generator=self.generator) for k, n in self.sizes.items()
        }
        return TensorDict(groups, batch_size=[ENVS])

    def get_observations(self) -> TensorDict:
        return self.obs

    def step(self, actions):
        self.episode_length_buf += 1
        dones = (self.episode_length_buf >= self.max_episode_length).long()
        self.episode_length_buf[dones == 1] = 0
        self.obs = self._observe()
        rewards = -actions.square().sum(-1)
        return self.obs, rewards, dones, {"time_outs": dones.clone()}


def strl_config(*overrides: str):
    return resolve_config("inverted_pendulum", overrides=[*NETWORK, *overrides])


def rsl_rl_runner(cfg, env: ToyEnv | None = None) -> OnPolicyRunner:
    """rsl_rl 5.x's runner for the network of strl_jax's `cfg` (its `train_cfg` from strl_jax)."""
    torch.manual_seed(0)
    return OnPolicyRunner(env or ToyEnv(), to_rsl_rl_train_cfg(cfg), log_dir=None, device="cpu")


def abstract_state(cfg, policy_obs: int = POLICY_OBS, critic_obs: int = CRITIC_OBS) -> PolicyState:
    shapes = {"policy": (policy_obs,), "critic": (critic_obs,)}
    model = make_policy_model(ACT, cfg.policy)
    init = lambda key: PolicyState(  # noqa: E731
        params=model.init(key, shapes),
        normalizers={k: NormalizerState(jnp.zeros(s), jnp.ones(s), jnp.zeros(())) for k, s in shapes.items()},
    )
    return jax.eval_shape(init, jax.random.PRNGKey(0))


def observations(steps: int, seed: int = 1) -> list[TensorDict]:
    generator = torch.Generator().manual_seed(seed)
    sizes = {"policy": POLICY_OBS, "critic": CRITIC_OBS}
    return [
        TensorDict(
            {k: 2.0 + 3.0 * torch.randn(ENVS, n, generator=generator) for k, n in sizes.items()}, [ENVS]
        )
        for _ in range(steps)
    ]


def rsl_rl_outputs(runner: OnPolicyRunner, steps: list[TensorDict]) -> tuple[np.ndarray, np.ndarray]:
    """rsl_rl's deterministic actions (`get_inference_policy`) and values over consecutive steps."""
    policy = runner.get_inference_policy()
    critic = runner.alg.critic
    policy.reset()
    critic.reset()
    with torch.inference_mode():
        actions = [policy(obs).numpy() for obs in steps]
        values = [critic(obs).numpy()[:, 0] for obs in steps]
    return np.stack(actions), np.stack(values)


def strl_outputs(cfg, params, normalizers, steps: list[TensorDict]) -> tuple[np.ndarray, np.ndarray]:
    """strl_jax's deterministic actions and values over the same steps (hidden states carried)."""
    model = make_policy_model(ACT, cfg.policy)
    acting = acting_policy(make_actor(model, cfg), params, normalizers)
    hidden, critic_hidden = acting.initial_hidden(ENVS), model.initial_hidden(ENVS)
    actions, values = [], []
    for obs in steps:
        groups = {k: jnp.asarray(obs[k].numpy()) for k in ("policy", "critic")}
        action, hidden = acting.step(groups["policy"], hidden)
        nobs = {k: normalize(normalizers[k], v) for k, v in groups.items()}
        value, critic_hidden = model.value_and_hidden(params, nobs, critic_hidden)
        actions.append(np.asarray(action))
        values.append(np.asarray(value))
    return np.stack(actions), np.stack(values)


def randomise(runner: OnPolicyRunner) -> None:
    """Large random weights and normaliser statistics, so that every tensor matters."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for model in (runner.alg.actor, runner.alg.critic):
            for name, tensor in model.state_dict().items():
                if name.endswith("count"):
                    tensor.fill_(100)
                elif name.endswith(("_var", "_std")):
                    continue
                else:
                    tensor.copy_(torch.randn(tensor.shape, generator=generator))
            normalizer = model.obs_normalizer
            normalizer._var.copy_(torch.rand(normalizer._var.shape, generator=generator) * 4 + 0.5)
            normalizer._std.copy_(normalizer._var.sqrt())


CASES = {
    "mlp": [],
    "mlp_log_std": ["policy.noise_std_type=log"],
    "lstm": [*RECURRENT, "policy.rnn_type=lstm"],
    "gru2": [*RECURRENT, "policy.rnn_type=gru", "policy.rnn_num_layers=2"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rsl_rl_checkpoint_loads_with_the_same_actions(case, tmp_path):
    cfg = strl_config(*CASES[case])
    runner = rsl_rl_runner(cfg)
    randomise(runner)
    path = tmp_path / "model_7.pt"
    runner.current_learning_iteration = 7
    runner.save(str(path))
    params, normalizers, step = load_torch_params_and_normalizers(path, abstract_state(cfg))
    assert step == 7
    steps = observations(5)
    want_actions, want_values = rsl_rl_outputs(runner, steps)
    got_actions, got_values = strl_outputs(cfg, params, normalizers, steps)
    np.testing.assert_allclose(got_actions, want_actions, **TOL)
    np.testing.assert_allclose(got_values, want_values, **TOL)
    assert float(normalizers["policy"].count) == 100.0


def test_rsl_rl_trained_policy_loads_with_the_same_actions(tmp_path):
    """A few PPO iterations of rsl_rl itself (normalisers updated from data), then loaded."""
    cfg = strl_config()
    runner = rsl_rl_runner(cfg)
    runner.learn(3)
    path = tmp_path / "model_2.pt"
    runner.save(str(path))
    params, normalizers, _ = load_torch_params_and_normalizers(path, abstract_state(cfg))
    assert float(normalizers["policy"].count) == 3 * runner.cfg["num_steps_per_env"] * ENVS
    steps = observations(2)
    np.testing.assert_allclose(
        strl_outputs(cfg, params, normalizers, steps)[0], rsl_rl_outputs(runner, steps)[0], **TOL
    )


def legacy_checkpoint(runner: OnPolicyRunner, style: str) -> dict:
    """The same policy as rsl_rl 2.x / st_rl (`model_state_dict` + normaliser dicts) or rsl_rl 3.x
    (normalisers inside the model) would have saved it."""
    actor, critic = runner.alg.actor.state_dict(), runner.alg.critic.state_dict()
    model = {}
    for net, state in (("actor", actor), ("critic", critic)):
        for name, value in state.items():
            if name.startswith("mlp."):
                model[f"{net}.{name[4:]}"] = value
            elif name.startswith("rnn."):
                model[f"memory_{net[0]}.{name[4:]}"] = value
            elif name.startswith("distribution."):
                model[name.split(".")[1].removesuffix("_param")] = value
            elif style == "rsl_rl_3":
                model[f"{net}_{name}"] = value
    saved = {"model_state_dict": model, "optimizer_state_dict": {}, "iter": 12, "infos": None}
    if style != "rsl_rl_3":
        norm = lambda state: {k.split(".")[1]: v for k, v in state.items() if k.startswith("obs_normalizer.")}  # noqa: E731
        critic_key = "critic_obs_norm_state_dict" if style == "st_rl" else "privileged_obs_norm_state_dict"
        saved |= {"obs_norm_state_dict": norm(actor), critic_key: norm(critic)}
    return saved


@pytest.mark.parametrize("style", ["rsl_rl_2", "st_rl", "rsl_rl_3"])
@pytest.mark.parametrize("case", ["mlp", "lstm"])
def test_legacy_layouts_load(style, case, tmp_path):
    cfg = strl_config(*CASES[case])
    runner = rsl_rl_runner(cfg)
    randomise(runner)
    path = tmp_path / "model_12.pt"
    torch.save(legacy_checkpoint(runner, style), path)
    params, normalizers, step = load_torch_params_and_normalizers(path, abstract_state(cfg))
    assert step == 12
    steps = observations(3)
    want_actions, want_values = rsl_rl_outputs(runner, steps)
    got_actions, got_values = strl_outputs(cfg, params, normalizers, steps)
    np.testing.assert_allclose(got_actions, want_actions, **TOL)
    np.testing.assert_allclose(got_values, want_values, **TOL)


def test_std_loads_into_a_log_std_network(tmp_path):
    runner = rsl_rl_runner(strl_config())
    runner.save(str(tmp_path / "model.pt"))
    params, _, _ = load_torch_params_and_normalizers(
        tmp_path / "model.pt", abstract_state(strl_config("policy.noise_std_type=log"))
    )
    std = runner.alg.actor.distribution.std_param.detach().numpy()
    np.testing.assert_allclose(np.exp(np.asarray(params["params"]["log_std"])), std, **TOL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_checkpoint_loads_in_rsl_rl(case, tmp_path):
    cfg = strl_config(*CASES[case])
    state = abstract_state(cfg)
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    params = jax.tree.map(
        lambda s, k: jax.random.normal(k, s.shape), state.params, _keys_like(state.params, keys[0])
    )
    normalizers = {
        g: NormalizerState(
            mean=jax.random.normal(jax.random.fold_in(keys[1], i), s.mean.shape),
            var=jnp.exp(jax.random.normal(jax.random.fold_in(keys[2], i), s.var.shape)),
            count=jnp.float32(50.0),
        )
        for i, (g, s) in enumerate(sorted(state.normalizers.items()))
    }
    if case == "mlp":  # a std learned as is must stay positive
        params["params"]["std"] = jnp.abs(params["params"]["std"]) + 0.1
    train_cfg = to_rsl_rl_train_cfg(cfg)
    saved = torch_checkpoints.rsl_rl_checkpoint(params, normalizers, train_cfg, iteration=9)
    path = torch_checkpoints.save_rsl_rl_checkpoint(saved, tmp_path / "model_9.pt")
    runner = rsl_rl_runner(cfg)
    runner.load(str(path))  # strict, optimizer included
    assert runner.current_learning_iteration == 9
    steps = observations(4)
    want_actions, want_values = strl_outputs(cfg, params, normalizers, steps)
    got_actions, got_values = rsl_rl_outputs(runner, steps)
    np.testing.assert_allclose(got_actions, want_actions, **TOL)
    np.testing.assert_allclose(got_values, want_values, **TOL)
    if case == "mlp":
        runner.learn(1)  # the loaded optimizer state steps


def _keys_like(tree, key):
    leaves, treedef = jax.tree.flatten(tree)
    return treedef.unflatten(list(jax.random.split(key, len(leaves))))


def test_mismatch_names_the_first_torch_tensor(tmp_path):
    runner = rsl_rl_runner(strl_config())
    path = tmp_path / "model.pt"
    runner.save(str(path))
    with pytest.raises(CheckpointMismatchError) as err:
        load_torch_params_and_normalizers(
            path, abstract_state(strl_config("policy.actor_hidden_dims=[8, 4]"))
        )
    message = str(err.value)
    assert "actor_state_dict['mlp.2.weight'] has shape (8, 8)" in message
    assert "needs (4, 8)" in message and "actor.hidden_1.kernel" in message
    with pytest.raises(
        CheckpointMismatchError, match=r"actor_state_dict\['obs_normalizer._mean'\] has shape \(1, 5\)"
    ):
        load_torch_params_and_normalizers(path, abstract_state(strl_config(), policy_obs=6))
    with pytest.raises(
        CheckpointMismatchError, match="feed-forward policy: set policy.class_name=ActorCritic$"
    ):
        load_torch_params_and_normalizers(path, abstract_state(strl_config(*CASES["lstm"])))
    lstm = rsl_rl_runner(strl_config(*CASES["lstm"]))
    lstm.save(str(path))
    with pytest.raises(
        CheckpointMismatchError, match="recurrent policy: set policy.class_name=ActorCriticRecurrent"
    ):
        load_torch_params_and_normalizers(path, abstract_state(strl_config()))


def test_missing_torch_names_the_extra(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    path = tmp_path / "model.pt"
    path.write_bytes(b"")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ConfigError, match=r"strl_jax\[torch\]"):
        load_torch_params_and_normalizers(path, abstract_state(strl_config()))


# ---------------------------------------------------------------------------- through the CLIs
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One iteration of a tiny inverted_pendulum run."""
    cfg = resolve_config("inverted_pendulum", overrides=tiny("runner.max_iterations=1"))
    return train(cfg, tmp_path_factory.mktemp("run"), verbose=False)


def test_export_format_rsl_rl_and_load_back(tiny_run, tmp_path):
    run = tiny_run.log_dir
    assert export_main([str(run), "--format", "rsl_rl", "--out", str(tmp_path)]) == 0
    path = tmp_path / "model_1.pt"
    train_cfg = yaml.safe_load((tmp_path / "train_cfg.yaml").read_text())
    loaded = load_policy(run)
    obs_size = loaded.acting().observation_size
    env = ToyEnv(obs_size, obs_size, loaded.action_size)
    runner = OnPolicyRunner(env, train_cfg, log_dir=None, device="cpu")
    runner.load(str(path))
    obs = env.get_observations()
    with torch.inference_mode():
        got = runner.get_inference_policy()(obs).numpy()
    clip = loaded.cfg.env.clip_actions
    want = np.asarray(loaded.acting().step(jnp.asarray(obs["policy"].numpy()), {})[0])
    np.testing.assert_allclose(np.clip(got, -clip, clip), want, **TOL)

    # ... and the .pt warm-starts a strl_jax run of the same config
    cfg = resolve_config("inverted_pendulum", overrides=tiny("runner.max_iterations=1"))
    warm = train(cfg, tmp_path / "warm", verbose=False, load=path)
    assert int(warm.train_state.iteration) == 1
    per_iteration = 16 * 8  # envs x steps of the tiny config
    assert float(warm.train_state.normalizers["policy"].count) == 2 * per_iteration


def test_a_torch_file_is_for_load_only(tmp_path, capsys):
    path = tmp_path / "model.pt"
    path.write_bytes(b"")
    assert export_main([str(path)]) == 2
    assert "load with --load only" in capsys.readouterr().err


def test_manipulator_sees_torch_names(tmp_path):
    cfg = strl_config()
    runner = rsl_rl_runner(cfg)
    path = tmp_path / "model.pt"
    runner.save(str(path))
    seen = {}

    def manipulate(loaded):
        seen.update(loaded["torch"])
        return {"params": loaded["params"], "normalizers": loaded["normalizers"]}

    params, _, _ = load_torch_params_and_normalizers(path, abstract_state(cfg), manipulate=manipulate)
    assert "mlp.0.weight" in seen["actor_state_dict"]
    np.testing.assert_allclose(
        np.asarray(params["params"]["actor"]["hidden_0"]["kernel"]),
        seen["actor_state_dict"]["mlp.0.weight"].T,
    )


def test_copy_overlap_maps_a_checkpoint_onto_a_wider_observation(tmp_path):
    """st_rl's use of a manipulator: one more observation entry than the checkpoint's run had."""
    runner = rsl_rl_runner(strl_config())
    path = tmp_path / "model.pt"
    runner.save(str(path))
    cfg = strl_config()
    state = abstract_state(cfg, policy_obs=POLICY_OBS + 1)
    shapes = {"policy": (POLICY_OBS + 1,), "critic": (CRITIC_OBS,)}
    current = {
        "params": jax.device_get(make_policy_model(ACT, cfg.policy).init(jax.random.PRNGKey(1), shapes)),
        "normalizers": {
            k: {"mean": np.zeros(s, np.float32), "var": np.ones(s, np.float32), "count": np.float32(0)}
            for k, s in shapes.items()
        },
    }
    manipulate = lambda loaded: copy_overlap(loaded, current)  # noqa: E731
    params, normalizers, _ = load_torch_params_and_normalizers(path, state, manipulate=manipulate)
    kernel = np.asarray(params["params"]["actor"]["hidden_0"]["kernel"])
    weight = runner.alg.actor.state_dict()["mlp.0.weight"].numpy()
    np.testing.assert_array_equal(kernel[:POLICY_OBS], weight.T)
    np.testing.assert_array_equal(
        kernel[POLICY_OBS:], current["params"]["params"]["actor"]["hidden_0"]["kernel"][POLICY_OBS:]
    )
    assert normalizers["policy"].mean.shape == (POLICY_OBS + 1,)
