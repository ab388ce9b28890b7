"""The YAML run presets, one per task variant; installed as the package `strl_jax.presets`.

They live at the top of the repository so that they are easy to find and edit; pyproject.toml maps
this folder to `strl_jax.presets` so that an installed copy reads them through `importlib.resources`.
"""
