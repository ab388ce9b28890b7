"""strl_jax: a functional JAX port of st_rl (PPO, TPPO, AMP) for Brax/MJX environments."""

from strl_jax.xla_cpu import apply_cpu_defaults

__version__ = "0.1.0"

apply_cpu_defaults()  # before jax creates its backends: see xla_cpu.py
