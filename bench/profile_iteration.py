"""Where one training iteration's time goes: rollout, update and the whole iteration timed apart.

Builds a task's learner (preset plus `key=value` overrides, or `--matched` for the settings
`vs_brax.py` maps from brax's published PPO ones), jit-compiles its init, its rollout, its update,
the whole iteration, the initial-state pool's refresh (`env.auto_reset=pool`) and the evaluation as
separate programs, and reports each one's compile time and its time per call (after one warm-up
call). It also times the
critic's dense layers alone at the minibatch and rollout batch sizes (the arithmetic that
dominates matched runs) and prints the GFLOP/s both reach, to tell library overhead from matmul
time. `--trace DIR` additionally records a `jax.profiler` trace of two iterations
(open with TensorBoard's profile plugin or Perfetto).

    python bench/profile_iteration.py --task inverted_pendulum --matched
    python bench/profile_iteration.py --task inverted_pendulum env.num_envs=1024
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import strl_jax  # noqa: E402,F401  (its XLA:CPU defaults, before jax starts a backend)


def timed(fn, *args, repeats: int) -> tuple[float, float]:
    """Compile seconds of the jitted `fn` for `args`, and the median seconds of a call over
    `repeats` calls after one warm-up call."""
    import jax

    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, sorted(times)[len(times) // 2]


def dense_flops(sizes: list[int], rows: int) -> float:
    """Multiply-add FLOPs of one forward pass of an MLP with layer sizes `sizes` on `rows` rows."""
    return 2.0 * rows * sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def critic_matmul_rate(sizes: list[int], rows: int, repeats: int) -> float:
    """GFLOP/s of forward + backward of a bare MLP (swish) with these sizes on `rows` rows."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    shapes = list(zip(sizes[:-1], sizes[1:], strict=True))
    ws = [jax.random.normal(jax.random.fold_in(key, i), shape) * 0.1 for i, shape in enumerate(shapes)]
    x = jax.random.normal(key, (rows, sizes[0]))

    def loss(ws, x):
        h = x
        for i, w in enumerate(ws):
            h = h @ w
            if i < len(ws) - 1:
                h = jax.nn.swish(h)
        return jnp.mean(h**2)

    grad = jax.jit(jax.grad(loss))
    _, seconds = timed(grad, ws, x, repeats=repeats)
    return 3 * dense_flops(sizes, rows) / seconds / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="inverted_pendulum")
    parser.add_argument("--matched", action="store_true", help="vs_brax.py's matched settings for the task")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trace", default=None, help="write a jax.profiler trace of two iterations here")
    parser.add_argument("--json", default=None)
    parser.add_argument("overrides", nargs="*", help="dotted key=value config overrides")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from strl_jax.configs.loader import resolve_config
    from strl_jax.runners.learner_builder import make_learner
    from strl_jax.runners.runner import evaluation_env, training_env
    from strl_jax.train_loops.ppo_update import ppo_update

    overrides = list(args.overrides)
    if args.matched:
        import vs_brax

        kw = vs_brax.brax_settings(args.task, 10**6, 1, True, vs_brax.NUM_EVAL_ENVS, {})
        backend = vs_brax.BENCH_DEFAULTS[args.task]["backend"]
        matched, _ = vs_brax.strl_matched(args.task, backend, kw, 1)
        overrides = matched + overrides
    cfg = resolve_config(args.task, overrides=overrides)
    env = training_env(cfg)
    learner = make_learner(env, cfg)
    n, t = cfg.env.num_envs, cfg.runner.num_steps_per_env
    steps = n * t * cfg.env.action_repeat
    print(
        f"{args.task}: {n} envs x {t} steps = {steps:,} env steps per iteration; "
        f"{cfg.algorithm.num_learning_epochs} epochs x {cfg.algorithm.num_mini_batches} minibatches",
        flush=True,
    )

    # init as the runner runs it: pending envs, the pool refresh, the first states
    init = jax.jit(learner.init_pending)
    init_compile, _ = timed(init, jax.random.PRNGKey(0), repeats=1)
    train_state, rollout_state = init(jax.random.PRNGKey(0))
    refresh = jax.jit(learner.refresh_pool)
    refresh_compile, _ = timed(refresh, rollout_state, repeats=1)
    start = jax.jit(learner.start_episodes)
    start_compile, start_s = timed(start, refresh(rollout_state), repeats=1)
    rollout_state = refresh(start(refresh(rollout_state)))  # the first iteration's refresh too
    key = jax.random.PRNGKey(1)
    rollout = jax.jit(learner.rollout)
    after, transitions, _ = rollout(train_state, rollout_state, key)
    # the critic's values and the time-out bootstrap's observations after the rollout, as the
    # iteration's update takes them
    last_values = jax.jit(learner.critic_value)(
        train_state.params, train_state.normalizers, after.obs, after.hidden
    )
    update = jax.jit(functools.partial(ppo_update, learner))
    iteration = jax.jit(learner.iteration)

    def run_env(rs, key):
        """The rollout's env steps alone, with zero actions (no networks)."""

        def step(state, _):
            state, _ = env.step(state, jnp.zeros((n, env.action_size)))
            return state, None

        return jax.lax.scan(step, rs.env_state, None, length=t)[0]

    env_only = jax.jit(run_env)
    used = rollout_state.replace(env_state=rollout_state.env_state.replace(pool_used=jnp.ones((n,), bool)))
    evaluate = jax.jit(functools.partial(learner.evaluate, evaluation_env(env, cfg)))
    results = {
        "init (parameters, pending envs)": (init_compile, float("nan")),
        "first states (after the pool refresh)": (start_compile, start_s),
        "env steps only": timed(env_only, rollout_state, key, repeats=args.repeats),
        "rollout (env + policy + critic)": timed(
            rollout, train_state, rollout_state, key, repeats=args.repeats
        ),
        "update (GAE + epochs x minibatches)": timed(
            update,
            train_state,
            rollout_state.parts,
            transitions,
            last_values,
            key,
            None,
            after.obs,
            repeats=args.repeats,
        ),
        "iteration (all of it)": timed(iteration, train_state, rollout_state, repeats=args.repeats),
        # env.auto_reset=pool: the program that draws the pool before each iteration
        "pool refresh (all rows used)": (refresh_compile, timed(refresh, used, repeats=args.repeats)[1]),
        "evaluation (runner.num_eval_envs episodes)": timed(
            evaluate, train_state.params, train_state.normalizers, key, repeats=args.repeats
        ),
    }
    critic_in = rollout_state.obs.get("critic", rollout_state.obs["policy"]).shape[-1]
    actor_in = rollout_state.obs["policy"].shape[-1]
    critic_sizes = [critic_in, *cfg.policy.critic_hidden_dims, 1]
    actor_sizes = [actor_in, *cfg.policy.actor_hidden_dims, env.action_size]
    mb_rows = n * t // cfg.algorithm.num_mini_batches
    grads = cfg.algorithm.num_learning_epochs * cfg.algorithm.num_mini_batches
    update_flops = grads * 3 * (dense_flops(critic_sizes, mb_rows) + dense_flops(actor_sizes, mb_rows))
    rollout_flops = t * (dense_flops(critic_sizes, n) + dense_flops(actor_sizes, n))
    rate_mb = critic_matmul_rate(critic_sizes, mb_rows, args.repeats)
    print()
    print("| part | compile s | s per call | env steps/s |")
    print("|:--|--:|--:|--:|")
    for name, (compile_s, s) in results.items():
        print(f"| {name} | {compile_s:.1f} | {s:.3f} | {steps / s:,.0f} |")
    print()
    upd = results["update (GAE + epochs x minibatches)"][1]
    print(
        f"update: {grads} gradient steps of {mb_rows:,} rows, {update_flops / 1e9:.1f} GFLOP of dense "
        f"layers -> {update_flops / upd / 1e9:.1f} GFLOP/s; a bare MLP of the critic's sizes, forward + "
        f"backward on {mb_rows:,} rows: {rate_mb:.1f} GFLOP/s"
    )
    print(f"rollout: {rollout_flops / 1e9:.1f} GFLOP of dense layers (policy and critic on every step)")
    if args.trace:
        ts, rs = train_state, rollout_state
        jax.profiler.start_trace(args.trace)
        for _ in range(2):
            ts, rs, m = iteration(ts, rs)
        jax.block_until_ready(m)
        jax.profiler.stop_trace()
        print(f"trace written to {args.trace}")
    if args.json:
        summary = {
            "config": overrides,
            "compile_s": {k: v[0] for k, v in results.items()},
            "seconds": {k: v[1] for k, v in results.items()},
            "update_gflop": update_flops / 1e9,
            "rollout_gflop": rollout_flops / 1e9,
            "bare_critic_gflop_per_s": rate_mb,
        }
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
