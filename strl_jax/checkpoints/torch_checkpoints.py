"""rsl_rl and st_rl `torch.save` checkpoints: read into strl_jax params and normalisers, and written.

Layouts, by the keys of the saved dict (torch tensor names inside them):

- `model_state_dict` (rsl_rl 1.x-3.x, st_rl, legged_gym): an `ActorCritic` or `ActorCriticRecurrent`
  with `actor.<i>` and `critic.<i>` (Linear layers of an `nn.Sequential`), `std` or `log_std`, and
  `memory_a.rnn.*` / `memory_c.rnn.*`. Observation normalisers either beside it, as
  `obs_norm_state_dict` with `privileged_obs_norm_state_dict` (rsl_rl 2.x) or
  `critic_obs_norm_state_dict` (st_rl), or inside it as `actor_obs_normalizer.*` /
  `critic_obs_normalizer.*` (rsl_rl 3.x).
- `actor_state_dict` + `critic_state_dict` (rsl_rl 5.x `MLPModel` / `RNNModel`): `mlp.<i>`,
  `distribution.std_param` or `distribution.log_std_param`, `rnn.rnn.*` and `obs_normalizer.*`.
  This is the layout `rsl_rl_checkpoint` writes.

Linear weights become flax kernels by a transpose; the memories already hold torch's gate layout
(`networks.memory`); rsl_rl's `EmpiricalNormalization` buffers (`_mean`, `_var` as `[1, D]`, `_std`
derived, `count`) are a `NormalizerState`. A learned `std` loads into a `log_std` network (and back)
by its logarithm. The optimiser state is not read: a warm start begins with a fresh optimiser, as
it does from a strl_jax run. torch is imported only when a `.pt` file is read or written.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from strl_jax.checkpoints.orbax_checkpoints import apply_manipulator, fill_from
from strl_jax.checkpoints.tree_layout import path_name, tree_signature
from strl_jax.errors import CheckpointError, CheckpointMismatchError, ConfigError, ExportError
from strl_jax.networks.conv2d import tensor_to_numpy as numpy_of

LEGACY = "model_state_dict"
ACTOR, CRITIC = "actor_state_dict", "critic_state_dict"
# Where each layout keeps a normaliser: (container, name prefix), the first one present wins.
NORMALIZER_SOURCES = {
    "legacy": {
        "policy": ((LEGACY, "actor_obs_normalizer."), ("obs_norm_state_dict", "")),
        "critic": (
            (LEGACY, "critic_obs_normalizer."),
            ("privileged_obs_norm_state_dict", ""),
            ("critic_obs_norm_state_dict", ""),
        ),
    },
    "split": {"policy": ((ACTOR, "obs_normalizer."),), "critic": ((CRITIC, "obs_normalizer."),)},
}
NORMALIZER_LEAVES = {"mean": "_mean", "var": "_var", "count": "count"}
DERIVED = "_std"  # stored by rsl_rl beside `_var` (its square root); checked, not read
SUPPORTED = "ActorCritic / ActorCriticRecurrent (MLP, LSTM or GRU) without estimator stages or encoders"

Source = tuple[str, str]  # (key of the saved dict, tensor name in that state dict)


def import_torch() -> Any:
    """torch, or a `ConfigError` naming the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "reading or writing rsl_rl/st_rl checkpoints (.pt) needs torch: "
            "pip install 'strl_jax[torch]' (the CPU build: pip install torch==2.13.0 first)"
        ) from None
    return torch


def show(source: Source) -> str:
    """`model_state_dict['actor.0.weight']`: how a torch user finds the tensor."""
    return f"{source[0]}[{source[1]!r}]"


# ---------------------------------------------------------------------------- name mapping
@dataclasses.dataclass(frozen=True)
class Entry:
    """One strl_jax leaf and the torch tensor it comes from; `torch_shape` is what the configured
    network needs there, in torch's layout."""

    name: str  # path in {"params": ..., "normalizers": ...}, as `checkpoint.path_name` writes it
    source: Source
    torch_shape: tuple[int, ...]
    kind: str  # "kernel", "same", "normalizer" or "count"


def checkpoint_layout(saved: Mapping[str, Any], where: str) -> str:
    """`"split"` (rsl_rl 5.x) or `"legacy"` (rsl_rl 1.x-3.x, st_rl)."""
    if isinstance(saved, Mapping) and ACTOR in saved and CRITIC in saved:
        return "split"
    if isinstance(saved, Mapping) and LEGACY in saved:
        return "legacy"
    found = sorted(saved) if isinstance(saved, Mapping) else type(saved).__name__
    raise CheckpointError(
        f"{where} is not an rsl_rl/st_rl checkpoint: expected '{LEGACY}' (rsl_rl 1.x-3.x, st_rl) or "
        f"'{ACTOR}' and '{CRITIC}' (rsl_rl 5.x), found {found}"
    )


def _hidden_layers(names: list[str], net: str) -> int:
    return sum(1 for n in names if re.fullmatch(rf"params\.params\.{net}\.hidden_\d+\.kernel", n))


def param_source(name: str, layout: str, hidden: Mapping[str, int]) -> tuple[Source, str] | None:
    """`(torch source, kind)` of the strl_jax parameter `name` (`params.params.actor.hidden_0.kernel`),
    None where rsl_rl's actor-critics have no such tensor."""
    parts = name.split(".")[2:]
    split = layout == "split"
    if len(parts) == 3 and parts[0] in ("actor", "critic"):
        net, layer, leaf = parts
        match = re.fullmatch(r"hidden_(\d+)", layer)
        if layer != "output" and match is None:
            return None
        index = 2 * (hidden[net] if layer == "output" else int(match.group(1)))
        tensor = {"kernel": "weight", "bias": "bias"}.get(leaf)
        if tensor is None:
            return None
        if split:
            source = (ACTOR if net == "actor" else CRITIC, f"mlp.{index}.{tensor}")
        else:
            source = (LEGACY, f"{net}.{index}.{tensor}")
        return source, "kernel" if leaf == "kernel" else "same"
    if len(parts) == 3 and parts[0] in ("memory_a", "memory_c"):
        match = re.fullmatch(r"layer_(\d+)", parts[1])
        if match is None or parts[2] not in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            return None
        tensor = f"{parts[2]}_l{match.group(1)}"
        if split:
            return (ACTOR if parts[0] == "memory_a" else CRITIC, f"rnn.rnn.{tensor}"), "same"
        return (LEGACY, f"{parts[0]}.rnn.{tensor}"), "same"
    if parts in (["std"], ["log_std"]):
        if split:
            return (ACTOR, f"distribution.{parts[0]}_param"), "same"
        return (LEGACY, parts[0]), "same"
    return None


def torch_shape(shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """The torch shape of a strl_jax leaf of `shape`."""
    if kind == "kernel":
        return tuple(reversed(shape))
    if kind == "normalizer":
        return (1, *shape)
    return tuple(shape)


def param_entries(abstract_params: Any, layout: str, strict: bool = True) -> list[Entry]:
    """The torch source of every parameter. A network part that rsl_rl's actor-critics do not have
    (estimator stages, encoders) raises a `CheckpointMismatchError`, or with `strict=False` is left
    out (a checkpoint manipulator fills it)."""
    leaves = {
        path_name(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path({"params": abstract_params})
    }
    hidden = {net: _hidden_layers(list(leaves), net) for net in ("actor", "critic")}
    entries = []
    for name, leaf in leaves.items():
        found = param_source(name, layout, hidden)
        if found is None and strict:
            raise CheckpointMismatchError(
                f"the configured policy has {name.removeprefix('params.params.')}, which rsl_rl/st_rl "
                f"checkpoints do not hold; they load into {SUPPORTED}"
            )
        if found is not None:
            source, kind = found
            entries.append(Entry(name, source, torch_shape(tuple(leaf.shape), kind), kind))
    return entries


def normalizer_entries(
    saved: Mapping[str, Any], abstract_normalizers: Mapping[str, Any], layout: str
) -> list[Entry]:
    """The torch sources of the normalisers the checkpoint holds (policy and critic groups)."""
    entries = []
    for group, candidates in NORMALIZER_SOURCES[layout].items():
        if group not in abstract_normalizers:
            continue
        for container, prefix in candidates:
            state = saved.get(container)
            if isinstance(state, Mapping) and f"{prefix}_mean" in state:
                shape = tuple(abstract_normalizers[group].mean.shape)
                for leaf, tensor in NORMALIZER_LEAVES.items():
                    kind = "count" if leaf == "count" else "normalizer"
                    source = (container, prefix + tensor)
                    needed = () if kind == "count" else torch_shape(shape, kind)
                    entries.append(Entry(f"normalizers.{group}.{leaf}", source, needed, kind))
                entries.append(
                    Entry("", (container, prefix + DERIVED), torch_shape(shape, "normalizer"), "derived")
                )
                break
    return entries


# ---------------------------------------------------------------------------- reading
def read_torch_checkpoint(path: str | Path) -> dict:
    """The saved dict of a `torch.save` file, tensors on the CPU.

    Tensors-only pickles load with `weights_only=True`; others (an `infos` holding arbitrary
    objects) as rsl_rl's own `OnPolicyRunner.load` loads them.
    """
    torch = import_torch()
    try:
        try:
            return torch.load(str(path), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            return torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - a file torch cannot read is reported the same way
        raise CheckpointError(
            f"{str(path)!r} cannot be read as a torch checkpoint ({type(err).__name__}: {err})"
        ) from None


def model_tensors(saved: Mapping[str, Any], layout: str, entries: list[Entry]) -> dict[Source, np.ndarray]:
    """Every tensor of the state dicts the mapping reads from, in their saved order."""
    containers = [LEGACY] if layout == "legacy" else [ACTOR, CRITIC]
    containers += sorted({e.source[0] for e in entries} - set(containers))
    return {
        (c, name): numpy_of(value)
        for c in containers
        for name, value in dict(saved.get(c) or {}).items()
        if not name.endswith("num_batches_tracked")
    }


def first_mismatch(tensors: Mapping[Source, np.ndarray], entries: list[Entry]) -> str | None:
    """What differs first, in the checkpoint's order: a tensor of another shape or one the configured
    network has no place for, else a parameter the checkpoint lacks."""
    by_source = {e.source: e for e in entries}
    for source, value in tensors.items():
        entry = by_source.get(source) or _std_alternative(source, by_source)
        if entry is None:
            shape = tuple(value.shape)
            return f"torch tensor {show(source)} (shape {shape}) has no place in the configured network"
        if tuple(value.shape) != entry.torch_shape:
            what = entry.name.removeprefix("params.params.") or "the normaliser's std"
            return (
                f"torch tensor {show(source)} has shape {tuple(value.shape)}, the configured network needs "
                f"{entry.torch_shape} there (for {what})"
            )
    for entry in entries:
        if (
            entry.source not in tensors
            and _other_std(entry.source) not in tensors
            and entry.kind != "derived"
        ):
            return (
                f"the configured network needs torch tensor {show(entry.source)} (shape {entry.torch_shape}, "
                f"for {entry.name.removeprefix('params.params.')}), which the checkpoint does not hold"
            )
    return None


def _other_std(source: Source) -> Source | None:
    """The same std in the other parameterisation (`std` <-> `log_std`)."""
    swaps = {"std": "log_std", "log_std": "std", "distribution.std_param": "distribution.log_std_param"}
    swaps |= {v: k for k, v in swaps.items()}
    return (source[0], swaps[source[1]]) if source[1] in swaps else None


def _std_alternative(source: Source, by_source: Mapping[Source, Entry]) -> Entry | None:
    other = _other_std(source)
    return by_source.get(other) if other is not None else None


def hint(tensors: Mapping[Source, np.ndarray], names: list[str]) -> str:
    """A hint where the checkpoint's network class differs from the configured one."""
    torch_recurrent = any(".rnn." in name or name.startswith("rnn.") for _, name in tensors)
    recurrent = any(".memory_a." in n for n in names)
    if torch_recurrent and not recurrent:
        return "; the checkpoint holds a recurrent policy: set policy.class_name=ActorCriticRecurrent"
    if recurrent and not torch_recurrent:
        return "; the checkpoint holds a feed-forward policy: set policy.class_name=ActorCritic"
    return (
        "; set the network (policy.*_hidden_dims, rnn_*) and the task's observations as the "
        "checkpoint's run had them"
    )


def convert(entry: Entry, tensors: Mapping[Source, np.ndarray]) -> np.ndarray:
    """The strl_jax value of `entry` (a std stored in the other parameterisation is converted)."""
    if entry.source in tensors:
        value = tensors[entry.source]
    else:
        value = tensors[_other_std(entry.source)]
        value = np.exp(value) if entry.source[1] in ("std", "distribution.std_param") else np.log(value)
    if entry.kind == "kernel":
        return np.asarray(value, np.float32).T
    if entry.kind == "normalizer":
        return np.asarray(value, np.float32).reshape(-1)
    return np.asarray(value, np.float32)


def _nest(flat: Mapping[str, np.ndarray]) -> dict:
    out: dict = {}
    for name, value in flat.items():
        *parents, last = name.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def load_torch_params_and_normalizers(
    path: str | Path,
    abstract_train_state: Any,
    manipulate: Callable[[dict], dict] | None = None,
    manipulator_name: str = "the checkpoint manipulator",
) -> tuple[Any, Any, int]:
    """`(params, normalizers, iteration)` from an rsl_rl/st_rl checkpoint file, checked against
    `abstract_train_state` (see `checkpoint.load_params_and_normalizers`).

    Normalisers the checkpoint lacks (a run without empirical normalisation, other observation
    groups) start fresh. With `manipulate`, it receives the mapped `{"params", "normalizers"}` of
    every tensor found, plus `torch`: the checkpoint's model and normaliser state dicts as numpy
    arrays by torch name (`{"model_state_dict": {"actor.0.weight": ...}}`).
    """
    where = str(path)
    saved = read_torch_checkpoint(path)
    layout = checkpoint_layout(saved, where)
    wanted = {"params": abstract_train_state.params, "normalizers": abstract_train_state.normalizers}
    fresh = fresh_normalizers(abstract_train_state.normalizers)
    entries = param_entries(wanted["params"], layout, strict=manipulate is None)
    entries += normalizer_entries(saved, wanted["normalizers"], layout)
    tensors = model_tensors(saved, layout, entries)
    found = {e.name: convert(e, tensors) for e in entries if e.kind != "derived" and _present(e, tensors)}
    if manipulate is None:
        problem = first_mismatch(tensors, entries)
        if problem is not None:
            raise CheckpointMismatchError(
                f"checkpoint {where} does not fit the configured network: {problem}"
                + hint(tensors, [e.name for e in entries])
            )
        raw = _nest(fresh | found)
    else:
        loaded = _nest(fresh | found)
        loaded["torch"] = {}
        for (container, name), value in tensors.items():
            loaded["torch"].setdefault(container, {})[name] = value
        expected = tree_signature(wanted)
        raw = apply_manipulator(loaded, manipulate, manipulator_name, where, expected, tuple(wanted))
    picked = fill_from(wanted, raw)
    return picked["params"], picked["normalizers"], int(saved.get("iter") or 0)


def fresh_normalizers(abstract_normalizers: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Flat `normalizers.<group>.<leaf>` values of normalisers that have seen nothing yet."""
    flat = {}
    for group, state in abstract_normalizers.items():
        flat[f"normalizers.{group}.mean"] = np.zeros(state.mean.shape, state.mean.dtype)
        flat[f"normalizers.{group}.var"] = np.ones(state.var.shape, state.var.dtype)
        flat[f"normalizers.{group}.count"] = np.zeros(state.count.shape, state.count.dtype)
    return flat


def _present(entry: Entry, tensors: Mapping[Source, np.ndarray]) -> bool:
    return entry.source in tensors or _other_std(entry.source) in tensors


# ---------------------------------------------------------------------------- writing
def rsl_rl_state_dicts(
    params: Any, normalizers: Mapping[str, Any], train_cfg: Mapping[str, Any]
) -> tuple[dict, dict]:
    """rsl_rl 5.x `actor_state_dict` and `critic_state_dict` (torch tensors) for `train_cfg`'s
    `MLPModel`/`RNNModel` pair, as its `load_state_dict(strict=True)` expects them."""
    torch = import_torch()
    entries = param_entries(params, "split")
    std_type = train_cfg["actor"].get("distribution_cfg", {}).get("std_type", "scalar")
    has_log_std = any(e.name.endswith(".log_std") for e in entries)
    if has_log_std != (std_type == "log"):
        raise ExportError(
            f"the policy learns {'log_std' if has_log_std else 'std'}, the rsl_rl config's distribution "
            f"std_type is {std_type!r}; they must agree"
        )
    flat = {path_name(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path({"params": params})}
    dicts: dict[str, dict] = {ACTOR: {}, CRITIC: {}}
    for container, group, model in ((ACTOR, "policy", "actor"), (CRITIC, "critic", "critic")):
        if train_cfg[model].get("obs_normalization"):
            dicts[container] |= normalizer_tensors(normalizers[group], "obs_normalizer.", torch)
    for entry in sorted(entries, key=_torch_order):
        value = flat[entry.name]
        value = value.T if entry.kind == "kernel" else value
        dicts[entry.source[0]][entry.source[1]] = torch.tensor(np.ascontiguousarray(value, np.float32))
    return dicts[ACTOR], dicts[CRITIC]


def _torch_order(entry: Entry) -> tuple[int, int, str]:
    """rsl_rl's registration order: distribution, mlp (by index), rnn."""
    name = entry.source[1]
    if name.startswith("distribution."):
        return 0, 0, name
    if name.startswith("mlp."):
        return 1, int(name.split(".")[1]), name
    return 2, 0, name


def normalizer_tensors(state: Any, prefix: str, torch: Any) -> dict:
    """rsl_rl's `EmpiricalNormalization` buffers of a `NormalizerState`."""
    mean = np.asarray(state.mean, np.float32)[None]
    var = np.asarray(state.var, np.float32)[None]
    return {
        f"{prefix}_mean": torch.tensor(mean),
        f"{prefix}_var": torch.tensor(var),
        f"{prefix}_std": torch.tensor(np.sqrt(var)),
        f"{prefix}count": torch.tensor(int(round(float(state.count))), dtype=torch.long),
    }


def optimizer_state_dict(name: str, num_params: int, learning_rate: float, torch: Any) -> dict:
    """A valid state dict of rsl_rl's optimizer `name` for `num_params` parameters, without moments
    (torch starts them at the first step, as strl_jax's warm start does)."""
    classes = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}
    if name.lower() not in classes:
        raise ExportError(f"optimizer {name!r} has no rsl_rl equivalent; valid choices: {sorted(classes)}")
    dummies = [torch.nn.Parameter(torch.zeros(1)) for _ in range(num_params)]
    return getattr(torch.optim, classes[name.lower()])(dummies, lr=learning_rate).state_dict()


def rsl_rl_checkpoint(
    params: Any,
    normalizers: Mapping[str, Any],
    train_cfg: Mapping[str, Any],
    iteration: int,
    infos: Any = None,
) -> dict:
    """What rsl_rl 5.x `OnPolicyRunner.save` writes, for `OnPolicyRunner(env, train_cfg).load(path)`:
    actor and critic state dicts, an optimiser state for their parameters, `iter` and `infos`."""
    torch = import_torch()
    actor, critic = rsl_rl_state_dicts(params, normalizers, train_cfg)
    num_params = sum(1 for k in (*actor, *critic) if not k.startswith("obs_normalizer."))
    learning_rate = float(train_cfg["algorithm"].get("learning_rate", 1e-3))
    optimizer = str(train_cfg["algorithm"].get("optimizer", "adam"))
    return {
        ACTOR: actor,
        CRITIC: critic,
        "optimizer_state_dict": optimizer_state_dict(optimizer, num_params, learning_rate, torch),
        "iter": int(iteration),
        "infos": infos,
    }


def save_rsl_rl_checkpoint(saved: Mapping[str, Any], path: str | Path) -> Path:
    """`torch.save` the checkpoint to `path`."""
    torch = import_torch()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(dict(saved), str(path))
    return path
