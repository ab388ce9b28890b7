"""The jitted iteration, the host loop, evaluation and logging."""
