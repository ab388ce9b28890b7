"""Checkpoints on disk: strl_jax's own orbax checkpoints of a run (orbax_checkpoints.py), rsl_rl and
st_rl torch checkpoints in and out (torch_checkpoints.py) and ready-made checkpoint manipulators
for warm starts (manipulators.py). Training writes and resumes them; inference, export and
deployment read them without the training loop."""
