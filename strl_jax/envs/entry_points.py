"""User environments named by entry point: `--task pkg.module:Name`.

The form is IsaacLab's (`gym.register(id=..., entry_point="pkg.module:Class")`), without a
registry: the task string itself names the env. `Name` is
- a MuJoCo Playground-style env, a subclass of `mujoco_playground._src.mjx_env.MjxEnv` (family
  `playground`: the same groups, perception, randomiser, probe and components as registry
  Playground tasks), or a factory function returning one. Its config is `Name.default_config()`
  where `Name` has that attribute, else the module's `default_config()`, with `env.playground`
  applied (`impl: jax` by default, as for registry tasks); it is built as
  `Name(config=<config>, **env.env_kwargs)`. Without a default config, `Name(**env.env_kwargs)`.
- a Brax env, a subclass of `brax.envs.base.Env` (family `brax`), or a factory returning one:
  built as `Name(**env.env_kwargs)`, plus `backend=env.backend` where `Name` takes a `backend`
  parameter the kwargs do not set.

The module is imported from the current folder or the installed packages, so the string stored in
a run's config rebuilds the env on resume and in other processes. Objects handed to
`train(cfg, env=...)` are remembered in this process (`register_env`): one defined in `__main__`
(a notebook) or inside a function can only be rebuilt here.

Every problem is a `ConfigError` raised before anything compiles: the env is built and its reset
and step are traced with `jax.eval_shape` only.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.envs.menagerie import use_offline_menagerie
from strl_jax.envs.playground_env import configured_overrides
from strl_jax.errors import ConfigError
from strl_jax.user_functions import ensure_cwd_on_path

SEPARATOR = ":"
EXPECTED = (
    "an MjxEnv subclass (mujoco_playground._src.mjx_env.MjxEnv), a Brax env subclass "
    "(brax.envs.base.Env), or a function returning an instance of one"
)
# Objects registered by `train(cfg, env=...)`, by their entry point `module:qualname`.
_IN_PROCESS: dict[str, Any] = {}
# Built and checked envs, by entry point, object and constructor settings (a config is checked
# when it is resolved and built again for each program: the env is built once).
_BUILT: dict[tuple, UserEnv] = {}
MAX_BUILT = 16


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    """The `env.*` settings an entry point is built with, where no `EnvConfig` is at hand (the
    defaults are EnvConfig's)."""

    task: str
    backend: str = "positional"
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    playground: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, eq=False)
class UserEnv:
    """A user env, built and checked: its family, resolved config and abstract reset state."""

    task: str
    env: Any  # an MjxEnv or a Brax Env
    family: str  # "playground" or "brax"
    config: Any  # the MJX env's config (default config + env.playground), None without one
    reset_state: Any  # `jax.eval_shape` of `env.reset`
    target: Any  # what the entry point names (kept alive: the cache key holds its id)


def abstract_key(*batch: int) -> jax.ShapeDtypeStruct:
    """A PRNG key's shape for `jax.eval_shape`: an eager key would compile a program."""
    return jax.ShapeDtypeStruct((*batch, 2), jnp.uint32)


def is_entry_point(task: str) -> bool:
    """Registry names have neither a colon nor a dot; an entry point has both (or is malformed)."""
    return SEPARATOR in task or "." in task


def task_dir_name(task: str) -> str:
    """A folder name for runs of `task`: the part after the colon of an entry point."""
    name = task.rpartition(SEPARATOR)[2] if is_entry_point(task) else task
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "task"


def task_name(task: str) -> str:
    """The env's own name: the registry name, or the qualified name after an entry point's colon."""
    return task.rpartition(SEPARATOR)[2] if is_entry_point(task) else task


# ---- the env classes ---------------------------------------------------------------------------
def mjx_env_class() -> type | None:
    try:
        from mujoco_playground._src.mjx_env import MjxEnv  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    return MjxEnv


def brax_env_class() -> type:
    from brax.envs.base import Env  # noqa: PLC0415 - brax loads with the env modules

    return Env


def class_family(cls: Any) -> str | None:
    """`playground` for an MjxEnv subclass, `brax` for a Brax Env subclass, else None."""
    if not isinstance(cls, type):
        return None
    if issubclass(cls, brax_env_class()):  # first: a Brax env never imports Playground (seconds)
        return "brax"
    mjx = mjx_env_class()
    if mjx is not None and issubclass(cls, mjx):
        return "playground"
    return None


def instance_family(obj: Any) -> str | None:
    return class_family(type(obj))


# ---- in-process entry points ------------------------------------------------------------------
def entry_point_of(obj: Any) -> str:
    """`module:qualname` of a class, a function, or an env instance's class."""
    named = obj if isinstance(obj, type) or inspect.isfunction(obj) else None
    if named is None and instance_family(obj) is not None:
        named = type(obj)
    if named is None:
        raise ConfigError(
            f"env= takes an env class, a factory function or an env instance; got {type(obj).__name__} "
            f"{obj!r:.80}; expected {EXPECTED}"
        )
    return f"{named.__module__}{SEPARATOR}{named.__qualname__}"


def registered(task: str) -> Any:
    """The object registered in this process under `task`, or None."""
    return _IN_PROCESS.get(task)


def register_env(obj: Any) -> str:
    """Remember `obj` (an env class, factory or instance) under its entry point, which is returned:
    a run's config stores it, and this process rebuilds the env from `obj` itself."""
    task = entry_point_of(obj)
    _IN_PROCESS[task] = obj
    return task


def in_process_only(module: str, name: str) -> bool:
    """Defined in `__main__` (a notebook or script) or inside a function: not importable elsewhere."""
    return module == "__main__" or "<" in name


# ---- loading -----------------------------------------------------------------------------------
def public_names(module: Any) -> list[str]:
    """The public classes and functions defined in `module`."""
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == module.__name__
    )


def check_form(task: str) -> tuple[str, str]:
    """`(module, name)` of `package.module:Name`; a ConfigError for any other form."""
    module, sep, name = task.partition(SEPARATOR)
    parts = [*module.split("."), *name.split(".")]
    if not sep or not module or not name or not all(p.isidentifier() for p in parts):
        found = "no ':'" if not sep else "a module and a name that are not dotted Python identifiers"
        raise ConfigError(
            f"entry point {task!r} is malformed ({found}); expected 'package.module:Name' with Name "
            f"{EXPECTED}"
        )
    return module, name


def load_target(task: str) -> Any:
    """What the entry point names: a registered object, or the attribute of an imported module."""
    if task in _IN_PROCESS:
        return _IN_PROCESS[task]
    module_name, _, name = task.partition(SEPARATOR)
    if SEPARATOR in task and in_process_only(module_name, name):
        raise ConfigError(
            f"entry point {task!r} was defined in __main__ (a notebook or script) or inside a function "
            "of the process that started the run; this process cannot import it: pass the env again, "
            "train(cfg, env=..., resume=True), or move it into a module (package.module:Name)"
        )
    module_name, name = check_form(task)
    ensure_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(
            f"entry point {task!r}: cannot import module {module_name!r} ({type(err).__name__}: {err}); "
            f"modules are imported from the current folder ({os.getcwd()}) or the installed packages"
        ) from None
    except Exception as err:
        raise ConfigError(
            f"entry point {task!r}: importing module {module_name!r} failed ({type(err).__name__}: {err})"
        ) from err
    target: Any = module
    for attr in name.split("."):
        if not hasattr(target, attr):
            raise ConfigError(
                f"entry point {task!r}: module {module_name!r} has no attribute {name!r}; its public "
                f"classes and functions: {public_names(module)}; expected {EXPECTED}"
            )
        target = getattr(target, attr)
    return target


def target_kind(task: str, target: Any) -> tuple[str, str | None]:
    """`(kind, family)`: kind `class`, `instance` or `factory`; family where known before building."""
    if isinstance(target, type):
        family = class_family(target)
        if family is None:
            bases = [f"{b.__module__}.{b.__qualname__}" for b in target.__mro__[1:-1]]
            raise ConfigError(
                f"entry point {task!r} is the class {target.__qualname__} (bases: {bases or 'none'}), "
                f"which is not an env; expected {EXPECTED}"
            )
        return "class", family
    family = instance_family(target)
    if family is not None:
        return "instance", family
    if not callable(target):
        raise ConfigError(
            f"entry point {task!r} names {target!r:.60} (of type {type(target).__name__}), not a class "
            f"or function; expected {EXPECTED}"
        )
    return "factory", returned_family(target)


def returned_family(factory: Callable) -> str | None:
    """The family a factory's return annotation names (None when it names no env class)."""
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # noqa: BLE001 - unresolvable annotations only lose the hint
        return None
    return class_family(hints.get("return"))


# ---- building ----------------------------------------------------------------------------------
def default_config_of(task: str, target: Any) -> Any:
    """`target.default_config()`, else the module's `default_config()`, else None."""
    found = getattr(target, "default_config", None)
    where = f"{getattr(target, '__qualname__', task)}.default_config()"
    if found is None:
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        found = getattr(module, "default_config", None) if module is not None else None
        where = f"{getattr(module, '__name__', '?')}.default_config()"
    if found is None:
        return None
    if not callable(found):
        raise ConfigError(f"entry point {task!r}: {where} is a {type(found).__name__}, not a function")
    try:
        config = found()
    except Exception as err:
        raise ConfigError(f"entry point {task!r}: {where} failed ({type(err).__name__}: {err})") from err
    if not (hasattr(config, "to_dict") and hasattr(config, "update_from_flattened_dict")):
        raise ConfigError(
            f"entry point {task!r}: {where} returned {type(config).__name__}; expected an "
            "ml_collections ConfigDict, as Playground's default_config() returns"
        )
    return config


def takes_parameter(target: Any, name: str) -> bool:
    try:
        return name in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def signature_text(target: Any) -> str:
    try:
        return f"{getattr(target, '__qualname__', 'it')}{inspect.signature(target)}"
    except (TypeError, ValueError):
        return "not inspectable"


def construct(task: str, target: Any, kwargs: dict[str, Any], described: str) -> Any:
    """`target(**kwargs)`, its errors as ConfigErrors naming the settings that went in."""
    try:
        return target(**kwargs)
    except ConfigError:
        raise
    except TypeError as err:
        raise ConfigError(
            f"entry point {task!r} could not be built with {described}: {err}; its signature: "
            f"{signature_text(target)}"
        ) from err
    except Exception as err:
        raise ConfigError(
            f"entry point {task!r}: building it with {described} failed ({type(err).__name__}: {err})"
        ) from err


def configured(task: str, env_cfg: Any, target: Any, family: str | None) -> tuple[dict, Any, str]:
    """`(constructor kwargs, config or None, a description for errors)`."""
    if family == "brax" and env_cfg.playground:
        raise ConfigError(f"env.playground applies to MJX envs, not to Brax env {task!r}")
    kwargs = dict(env_cfg.env_kwargs)
    default = None if family == "brax" else default_config_of(task, target)
    if default is None:
        if env_cfg.playground:
            raise ConfigError(
                f"env.playground sets {sorted(env_cfg.playground)}, but entry point {task!r} has no default "
                f"config to apply them to (no {task_name(task)}.default_config() and no module-level "
                "default_config()); give it one, or pass constructor arguments in env.env_kwargs"
            )
        if family != "playground" and takes_parameter(target, "backend") and "backend" not in kwargs:
            kwargs["backend"] = env_cfg.backend
        return kwargs, None, f"env.env_kwargs {kwargs!r}"
    config = configured_overrides(default, env_cfg.playground, f"entry point {task!r}")
    return {"config": config, **kwargs}, config, f"config=<its default config> and env.env_kwargs {kwargs!r}"


def shapes_of(obs: Any) -> Any:
    """`{key: shape}` or a shape, for comparing and printing observation structures."""
    if isinstance(obs, Mapping):
        return {k: tuple(getattr(v, "shape", ())) for k, v in obs.items()}
    return tuple(getattr(obs, "shape", ()))


def traced(task: str, what: str, fn: Callable, *args: Any) -> Any:
    try:
        return jax.eval_shape(fn, *args)
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(
            f"entry point {task!r}: {what} failed while tracing ({type(err).__name__}: {err})"
        ) from err


def check_observation(task: str, family: str, obs: Any) -> None:
    """An array (or, for MJX, a dict of arrays); Brax observations are vectors."""
    arrays = obs.values() if isinstance(obs, Mapping) and family == "playground" else [obs]
    if not all(isinstance(a, jax.ShapeDtypeStruct) and a.ndim >= 1 for a in arrays):
        kind = "an array or a dict {key: array}" if family == "playground" else "one array [n]"
        raise ConfigError(
            f"entry point {task!r}: reset's observation is {shapes_of(obs)!r} "
            f"({type(obs).__name__}); expected {kind}"
        )
    if family == "brax" and obs.ndim != 1:
        raise ConfigError(
            f"entry point {task!r}: a Brax env's observation must be a vector [n], got {obs.shape}"
        )


def checked_states(task: str, env: Any, family: str) -> Any:
    """The abstract reset state, after checking reset's and step's states agree (shapes only)."""
    size = getattr(env, "action_size", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"entry point {task!r}: action_size must be an integer >= 1, got {size!r}")
    reset = traced(task, "reset(rng)", env.reset, abstract_key())
    if not hasattr(reset, "obs"):
        raise ConfigError(
            f"entry point {task!r}: reset returned {type(reset).__name__}, not a state with .obs"
        )
    check_observation(task, family, reset.obs)
    action = jax.ShapeDtypeStruct((size,), jnp.float32)
    stepped = traced(task, "step(reset state, zero action)", env.step, reset, action)
    before, after = shapes_of(reset.obs), shapes_of(getattr(stepped, "obs", None))
    if jax.tree.structure(reset.obs) != jax.tree.structure(getattr(stepped, "obs", None)) or before != after:
        raise ConfigError(
            f"entry point {task!r}: the observation changes between reset and step: reset gives "
            f"{before}, step gives {after}; expected the same keys and shapes from both"
        )
    for field in ("reward", "done"):
        value = getattr(stepped, field, None)
        if getattr(value, "shape", None) != ():
            raise ConfigError(
                f"entry point {task!r}: step's {field} must be a scalar per env, got "
                f"{getattr(value, 'shape', type(value).__name__)}"
            )
    return reset


def build(task: str, target: Any, env_cfg: Any) -> UserEnv:
    kind, family = target_kind(task, target)
    if family != "brax" and mjx_env_class() is not None:
        use_offline_menagerie(task)  # models under Playground's MENAGERIE_PATH load offline
    if kind == "instance":
        if env_cfg.env_kwargs or env_cfg.playground:
            raise ConfigError(
                f"entry point {task!r} is an env instance: env.env_kwargs and env.playground cannot apply "
                "to it; pass its class or a factory instead"
            )
        env, config = target, getattr(target, "_config", None) if family == "playground" else None
    else:
        kwargs, config, described = configured(task, env_cfg, target, family)
        env = construct(task, target, kwargs, described)
    found = instance_family(env)
    if found is None:
        raise ConfigError(
            f"entry point {task!r} returned {type(env).__module__}.{type(env).__qualname__} ({env!r:.60}), "
            f"not an env; expected {EXPECTED}"
        )
    if found == "brax" and env_cfg.playground:
        raise ConfigError(f"env.playground applies to MJX envs, not to Brax env {task!r}")
    return UserEnv(task, env, found, config, checked_states(task, env, found), target)


def cache_key(task: str, target: Any, env_cfg: Any) -> tuple:
    settings = (env_cfg.backend, env_cfg.env_kwargs, env_cfg.playground)
    return (task, id(target), json.dumps(settings, sort_keys=True, default=repr))


def user_env(env_cfg: Any) -> UserEnv:
    """The checked env `env_cfg.task` names, built with `env_cfg`'s settings (once per process)."""
    task = env_cfg.task
    target = load_target(task)
    key = cache_key(task, target, env_cfg)
    if key not in _BUILT:
        while len(_BUILT) >= MAX_BUILT:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = build(task, target, env_cfg)
    return _BUILT[key]
