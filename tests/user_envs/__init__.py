"""Tiny user environments that tests load by entry point (`--task tests.user_envs.<module>:<Name>`)."""
