"""What runs inside the compiled iteration: the run's static description, the rollout, the
updates, the iteration, evaluation episodes and the finiteness checks. Nothing here reads files,
logs or loops on the host (`strl_jax.runners` does that, `strl_jax.records` writes)."""
