"""strl_jax: a functional JAX port of st_rl (PPO, TPPO, AMP) for Brax/MJX environments."""

__version__ = "0.1.0"
