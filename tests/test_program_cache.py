"""A long-lived process keeps few configs' compiled programs: each holds thousands of memory
mappings of JIT code, and a process that crosses vm.max_map_count makes XLA segfault."""

from __future__ import annotations

import gc

import jax
from conftest import memory_mappings
from tiny_config import tiny

from strl_jax.configs import resolve_config
from strl_jax.runners import programs as program_cache


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
