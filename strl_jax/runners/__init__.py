"""The host loop: build and compile a config's programs, start or resume, iterate, evaluate,
checkpoint; populations, devices and hosts, and two-stage training's stages."""
