"""A long-lived process keeps few configs' compiled programs: each holds thousands of memory
mappings of JIT code, and a process that crosses vm.max_map_count makes XLA segfault."""

from __future__ import annotations

import dataclasses
import gc

import jax
from conftest import memory_mappings
from tiny_config import tiny

from strl_jax.configs import resolve_config
from strl_jax.runners import programs as program_cache
from strl_jax.runners.learner_builder import make_learner


def test_least_recently_used_config_is_dropped(monkeypatch):
    monkeypatch.setattr(program_cache, "MAX_CACHED_CONFIGS", 2)
    program_cache.release_programs()
    cfgs = [
        resolve_config("inverted_pendulum", overrides=tiny(f"algorithm.clip_param={c}"))
        for c in (0.1, 0.2, 0.3)
    ]
    first = program_cache.build_programs(cfgs[0])
    second = program_cache.build_programs(cfgs[1])
    assert program_cache.build_programs(cfgs[0]) is first  # reuse makes it the most recent
    program_cache.build_programs(cfgs[2])  # drops the second, not the first
    assert len(program_cache._PROGRAMS) == 2
    assert program_cache.build_programs(cfgs[0]) is first
    assert program_cache.build_programs(cfgs[1]) is not second
    # host-only fields and the seed share programs
    same = resolve_config(
        "inverted_pendulum", overrides=tiny("algorithm.clip_param=0.1", "seed=7", "runner.max_iterations=9")
    )
    assert program_cache.build_programs(same) is first


def test_released_programs_free_their_memory_mappings():
    program_cache.release_programs()
    gc.collect()
    before = memory_mappings()
    programs = program_cache.build_programs(resolve_config("inverted_pendulum", overrides=tiny()))
    jax.block_until_ready(programs.init(jax.random.PRNGKey(0)))
    del programs
    grown = memory_mappings() - before
    assert grown > 100, grown  # compiled code lives in mappings
    program_cache.release_programs()
    assert memory_mappings() - before < 0.2 * grown, (before, grown, memory_mappings())


def changed(value):
    """Another value of a runner field's type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "_changed"
    if isinstance(value, tuple):
        return (*value, "changed")
    if isinstance(value, dict):
        return {**value, "changed": 1}
    raise TypeError(f"no other value for {value!r}")


def traced_programs(cfg) -> tuple[str, str]:
    """The jaxprs of the learner's `init` and `iteration` for `cfg`."""
    learner = make_learner(program_cache.training_env(cfg), cfg)
    key = jax.random.PRNGKey(0)
    states = jax.eval_shape(learner.init, key)
    return str(jax.make_jaxpr(learner.init)(key)), str(jax.make_jaxpr(learner.iteration)(*states))


def test_host_only_fields_do_not_enter_the_programs():
    """The runner fields the schema marks `host_only` (runs differing only in them share compiled
    programs) leave the traced init and iteration as they are; a field the programs read does not."""
    cfg = resolve_config("inverted_pendulum", overrides=tiny())
    runner = cfg.runner
    assert {"max_iterations", "log_dir", "logger"} <= set(program_cache.HOST_ONLY_RUNNER_FIELDS)
    host = {f: changed(getattr(runner, f)) for f in program_cache.HOST_ONLY_RUNNER_FIELDS}
    baseline = traced_programs(cfg)
    assert traced_programs(dataclasses.replace(cfg, runner=dataclasses.replace(runner, **host))) == baseline
    longer = dataclasses.replace(runner, num_steps_per_env=runner.num_steps_per_env + 1)
    assert traced_programs(dataclasses.replace(cfg, runner=longer)) != baseline
