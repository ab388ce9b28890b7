"""Devices and hosts: the env mesh, the sharded programs and the multi-host runtime.

The learner's `init` and `iteration` run under `jax.jit` + `jax.shard_map` over a one-axis mesh
(`ENV_AXIS`) of every device of every process: each device steps `num_envs / devices`
environments and holds their rollout, while params, optimiser, normalisers and RNG key are
replicated and kept identical by averaging gradients, KL and statistics across the axis (see
`strl_jax.collectives`). A single device is a mesh of one. Evaluation runs on one local device.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np
from jax.experimental import checkify, multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from strl_jax.agents.algorithms import algorithm_spec
from strl_jax.buffers.minibatch import env_block_size
from strl_jax.collectives import ENV_AXIS
from strl_jax.configs.schema import TrainConfig
from strl_jax.errors import ConfigError, NonFiniteError
from strl_jax.networks.policy_classes import policy_class
from strl_jax.train_loops.learner import Learner

REPLICATED = PartitionSpec()


def make_env_mesh(num_devices: int | None = None) -> Mesh:
    """A mesh over the first `num_devices` of all processes' devices (all of them by default)."""
    devices = jax.devices()
    if num_devices is not None:
        if not 1 <= num_devices <= len(devices):
            raise ConfigError(
                f"runner.num_devices={num_devices}, but {len(devices)} devices are available "
                f"({jax.process_count()} process(es) x {jax.local_device_count()} local devices)"
            )
        if jax.process_count() > 1 and num_devices != len(devices):
            raise ConfigError("a multi-process run uses every device: leave runner.num_devices unset")
        devices = devices[:num_devices]
    return Mesh(np.asarray(devices), (ENV_AXIS,))


def check_env_split(cfg: TrainConfig, mesh: Mesh) -> int:
    """Environments per device; clear errors when they cannot be split evenly."""
    num_devices = mesh.size
    num_envs = cfg.env.num_envs
    if num_envs % num_devices:
        raise ConfigError(f"env.num_envs={num_envs} must be a multiple of the {num_devices} devices")
    local = num_envs // num_devices
    alg = cfg.algorithm
    if algorithm_spec(alg.class_name).minibatched:
        steps = 1 if policy_class(cfg.policy.class_name).recurrent else cfg.runner.num_steps_per_env
        block = env_block_size(steps, alg.num_mini_batches)
        if local % block:
            raise ConfigError(
                f"env.num_envs / devices = {local} must be a multiple of {block} for "
                f"algorithm.num_mini_batches={alg.num_mini_batches} (every device's envs split "
                "evenly over the minibatches)"
            )
    return local


def rollout_specs(rollout_state: Any) -> Any:
    """PartitionSpecs of a RolloutState: the env axis is first, except in recurrent memories
    (`[layers, N, hidden]`, torch's layout) and in the stored rollouts of `history` (`[T, N, ...]`),
    where it is second; the history's fill count is the same on every device."""

    def spec(path, leaf):
        names = [getattr(k, "name", getattr(k, "key", None)) for k in path]
        if "history" in names:
            return PartitionSpec(None, ENV_AXIS) if leaf.ndim else REPLICATED
        return PartitionSpec(None, ENV_AXIS) if "hidden" in names else PartitionSpec(ENV_AXIS)

    return jax.tree_util.tree_map_with_path(spec, rollout_state)


@dataclasses.dataclass(frozen=True)
class ShardedPrograms:
    """`init(key)` and the donating `iteration(train_state, rollout_state)` over `mesh`, and the
    shardings a restored state must be placed with."""

    mesh: Mesh
    init: Any
    iteration: Any
    train_sharding: Any  # pytree of NamedSharding like the TrainState
    rollout_sharding: Any  # pytree of NamedSharding like the RolloutState
    # `(train_state, rollout_state, source)`: the donating iteration on another rollout source
    # (`train_loops.rollout.RolloutSource`, e.g. a replayed dataset), compiled when first called
    on_source: Any = None
    # the donating `rollout_state -> rollout_state` that draws the env's initial-state pool before
    # each env iteration (`VecEnv.refresh_pool`), or None when the env resets in its step
    refresh: Any = None


class MemberAxis(Protocol):
    """The members one run's programs advance together: `OneMember` (a plain run) or a
    population's `population.MemberLearners`, whose state has a leading member axis."""

    stacked: bool  # whether states carry a member axis
    values: dict[str, Any]  # path -> each member's swept value (arguments of the programs)

    def __call__(self, values: dict[str, Any]) -> Any: ...

    def lift(self, fn: Callable, in_axes: Any = 0) -> Callable: ...

    def specs(self, specs: Any) -> Any: ...

    def view(self, tree: Any, index: int) -> Any: ...

    def stack(self, trees: list[Any]) -> Any: ...


@dataclasses.dataclass(frozen=True)
class OneMember:
    """A plain run as a population of one: its state has no member axis, so its programs,
    numbers and checkpoints are those of a single run."""

    learner: Any
    stacked: bool = False
    values: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, values: dict[str, Any]) -> Any:
        return self.learner

    def lift(self, fn: Callable, in_axes: Any = 0) -> Callable:
        return fn

    def specs(self, specs: Any) -> Any:
        return specs

    def view(self, tree: Any, index: int) -> Any:
        return tree

    def stack(self, trees: list[Any]) -> Any:
        return trees[0]


@dataclasses.dataclass(frozen=True)
class WithValues:
    """A compiled program with the members' swept values bound as its first argument: arguments,
    not constants, so sweeps of the same fields share one compiled program."""

    program: Any
    values: Any

    def __call__(self, *args: Any) -> Any:
        return self.program(self.values, *args)

    def _cache_size(self) -> int:
        return self.program._cache_size()


def shard_programs(axis: MemberAxis, template: Any, cfg: TrainConfig, mesh: Mesh) -> ShardedPrograms:
    """`init(key)` (a population: `keys [M]`), the donating `iteration`, the pool refresh and the
    iteration on another rollout source, `on_source`, of every member of `axis` at once over
    `mesh`: each device steps its share of every member's envs. `template` is member 0's learner,
    built for all the envs."""
    local_env = template.env.replace(num_envs=check_env_split(cfg, mesh))
    local_template = template.shard(local_env, ENV_AXIS)
    train_abs, rollout_abs = jax.eval_shape(template.init, jax.random.PRNGKey(0))
    rollout_spec = axis.specs(rollout_specs(rollout_abs))

    def per_member(program: Callable, in_axes: Any = 0) -> Callable:
        """`program(learner, *args)` of every member, each with its own learner on this device's envs."""

        def each(values: dict, *args: Any) -> Any:
            return program(axis(values).shard(local_env, ENV_AXIS), *args)

        each.__name__ = each.__qualname__ = program.__name__  # names the compiled program (profiles)
        return axis.lift(each, in_axes)

    def sharded(fn, in_specs, out_specs):
        return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    named = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    # placed once: no host-to-device copy of the values in every iteration
    values = jax.tree.map(
        lambda x: jax.make_array_from_callback(x.shape, named(REPLICATED), lambda idx: x[idx]), axis.values
    )
    refresh = refresh_program(axis.lift(local_template.refresh_pool), template.env, mesh, rollout_spec)
    start = jax.jit(
        sharded(axis.lift(local_template.start_episodes), (rollout_spec,), rollout_spec), donate_argnums=0
    )
    init_fn = jax.jit(
        sharded(per_member(Learner.init_pending), (REPLICATED, REPLICATED), (REPLICATED, rollout_spec))
    )
    out_specs = (REPLICATED, rollout_spec, REPLICATED)
    iteration = sharded(per_member(Learner.iteration), (REPLICATED, REPLICATED, rollout_spec), out_specs)
    if cfg.runner.debug:
        iteration = checked_iteration(iteration, donate_argnums=(1, 2))
    else:
        iteration = jax.jit(iteration, donate_argnums=(1, 2))
    # the source's arrays (a dataset's): replicated, shared by the members, not donated
    in_specs = (REPLICATED, REPLICATED, rollout_spec, REPLICATED)
    on_source = sharded(per_member(Learner.iterate, (0, 0, 0, None)), in_specs, out_specs)
    return ShardedPrograms(
        mesh=mesh,
        init=staged_init(WithValues(init_fn, values), refresh, start),
        iteration=WithValues(iteration, values),
        on_source=WithValues(jax.jit(on_source, donate_argnums=(1, 2)), values),
        refresh=refresh,
        train_sharding=jax.tree.map(lambda _: named(REPLICATED), train_abs),
        rollout_sharding=jax.tree.map(named, rollout_spec, is_leaf=lambda x: isinstance(x, PartitionSpec)),
    )


def evaluate_program(axis: MemberAxis, eval_env: Any) -> Callable:
    """Every member's deterministic evaluation in one compiled call on one local device:
    `(params, normalizers, key) -> metrics` (a population: keys and metrics `[M]`)."""

    def evaluate(values: dict, params: Any, normalizers: Any, key: jax.Array) -> Any:
        one = lambda v, p, n, k: axis(v).evaluate(eval_env, p, n, k)  # noqa: E731
        return axis.lift(one)(values, params, normalizers, key)

    return WithValues(jax.jit(evaluate), jax.device_put(axis.values))


def init_optimizer_program(axis: MemberAxis) -> Callable:
    """`(params, parts) -> opt_state`, each member's optimiser (its own clip or rates) on its params."""

    def init(params: Any, parts: Any) -> Any:
        # values as constants: compiled once per warm start
        one = lambda v, p, q: axis(v).init_optimizer(p, q)  # noqa: E731
        return axis.lift(one)(axis.values, params, parts)

    return init


def staged_init(init_pending: Any, refresh: Any, start: Any) -> Any:
    """`Learner.init` as three compiled programs: the state with pending envs, the pool refresh
    (the one the iterations run; None without a pool) and the envs' first states. The env's reset
    is compiled once, in the refresh (or, without a pool, in `start`), not again in init."""

    def init(*args: Any) -> tuple[Any, Any]:
        train_state, rollout_state = init_pending(*args)
        if refresh is not None:
            rollout_state = refresh(rollout_state)
        return train_state, start(rollout_state)

    return init


def refresh_program(refresh: Any, env: Any, mesh: Mesh, rollout_spec: Any) -> Any:
    """The sharded, donating pool refresh (each device draws its own envs' rows), or None when
    `env` resets in its step."""
    if env.auto_reset != "pool":
        return None
    fn = jax.shard_map(refresh, mesh=mesh, in_specs=(rollout_spec,), out_specs=rollout_spec, check_vma=False)
    return jax.jit(fn, donate_argnums=0)


# What `runner.debug=true` checks inside the iteration: every NaN a primitive produces, divisions
# by zero and explicit `checkify.check`s (not index checks: gathers that clip or fill
# out-of-range indices on purpose, as brax's do, would fail them).
DEBUG_CHECKS = checkify.float_checks | checkify.user_checks


def checked_iteration(iteration: Any, donate_argnums: tuple[int, ...] = (0, 1)) -> Any:
    """The iteration with checkify's checks compiled in; the first failed check raises a
    `NonFiniteError` naming the primitive and where it ran (a host round-trip per iteration)."""
    compiled = jax.jit(checkify.checkify(iteration, errors=DEBUG_CHECKS), donate_argnums=donate_argnums)

    def run(*args: Any):
        err, out = compiled(*args)
        message = err.get()
        if message is not None:
            raise NonFiniteError(f"runner.debug check failed inside the iteration: {message}")
        return out

    return run


def local_copy(tree: Any) -> Any:
    """Replicated global arrays -> this process's copy on its first local device (for evaluation,
    logging and export; works when other processes hold the other copies)."""
    return jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array) else x, tree)


def is_primary() -> bool:
    """Only process 0 logs, evaluates and writes files other than checkpoints."""
    return jax.process_index() == 0


def any_process(flag: bool) -> bool:
    """True if `flag` is set on any process (a stop request must stop every process together)."""
    if jax.process_count() == 1:
        return flag
    flags = multihost_utils.process_allgather(np.asarray([flag], np.int32))
    return bool(np.any(flags))


def sync_processes(name: str) -> None:
    """Wait for every process (no-op with one)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: list[int] | None = None,
) -> None:
    """`jax.distributed.initialize`: explicit arguments, or auto-detection (TPU pods, SLURM, and
    the `JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES` / `JAX_PROCESS_ID` variables).

    CPU processes exchange collectives over gloo.
    """
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu") or _cpu_only():
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
    )
    # A first collective over every device while the processes are still in step: it sets up the
    # communicators (gloo's rendezvous waits only 30 s), so a host that compiles slower later on
    # does not fail the first iteration's collectives.
    sync_processes("strl_jax_start")


def _cpu_only() -> bool:
    """No accelerator plugin installed (checked without initialising a backend)."""
    return not any(
        importlib.util.find_spec(name) for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu")
    )
