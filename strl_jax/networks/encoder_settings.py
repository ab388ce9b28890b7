"""The `policy.*` settings of st_rl's encoder mixins, resolved into `EncoderSpec`s.

`EncoderActorCriticMixin` (EncoderActorCritic, EncoderActorCriticRecurrent,
EncoderAmpActorCriticRecurrent, EncoderStateAc, EncoderStateAcRecurrent): `encoder_component_names`
of the policy group, each embedded by `encoder_class_name` (one for all, or one per component) with
`encoder_kwargs` (one mapping for all, or one per component) into `encoder_output_size` features;
the encoder is the class with `hidden_sizes + [encoder_output_size]` (the latent ends in the
nonlinearity). `critic_encoder_component_names`: the critic group's components with encoders of
their own (built alike), or `shared`: the actor's encoders applied to the same components of the
critic group.

`VisualActorCriticMixin` (VisualDeterministicAC, VisualDeterministicRecurrent): one
`Conv2dHeadModel` embeds `visual_component_name` with `visual_kwargs` over st_rl's defaults
(`VISUAL_DEFAULTS`) into a linear latent of `visual_latent_size`; the critic applies the same
encoder where its group holds that component, and reads its group unchanged otherwise.

A Conv2d encoder takes its `image_shape` (C, H, W) from the env where the component is an image
(`VecEnv.component_shapes`: `height_scan`, `forward_depth`), or from `encoder_kwargs`.
"""

from __future__ import annotations

from typing import Any

from strl_jax.errors import ConfigError
from strl_jax.networks.encoded_inputs import EncoderSpec, frozen
from strl_jax.networks.policy_classes import ENCODER, POLICY_CLASSES, VISUAL, PolicyClass, group_spans

CONV_CLASS = "Conv2dHeadModel"
SHARED = "shared"
VISUAL_DEFAULTS = {"channels": [64, 64], "kernel_sizes": [3, 3], "strides": [1, 1], "hidden_sizes": [256]}
ENCODER_KEYS = (
    "encoder_component_names",
    "critic_encoder_component_names",
    "encoder_output_size",
    "encoder_kwargs",
)


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


def check_encoder_settings(cfg: Any) -> None:
    """Checks that need no env: the encoder settings fit the class, and each other."""
    spec = POLICY_CLASSES.get(cfg.class_name)
    if spec is None:
        return  # policy_class() reports the unknown name
    if spec.encoders != ENCODER:
        stray = [k for k in ENCODER_KEYS if getattr(cfg, k)] + (
            ["encoder_class_name"] if cfg.encoder_class_name != "MlpModel" else []
        )
        if stray:
            having = [c for c, p in POLICY_CLASSES.items() if p.encoders == ENCODER]
            raise ConfigError(
                f"policy.{stray[0]} is set but policy.class_name {cfg.class_name} has no encoders; "
                f"classes with encoders: {having}"
            )
    if spec.encoders != VISUAL and cfg.visual_kwargs:
        having = [c for c, p in POLICY_CLASSES.items() if p.encoders == VISUAL]
        raise ConfigError(
            f"policy.visual_kwargs is set but policy.class_name {cfg.class_name} has no visual encoder; "
            f"classes with one: {having}"
        )
    if spec.encoders == ENCODER:
        names = _names(cfg.encoder_component_names)
        if not names:
            raise ConfigError(f"policy.class_name {cfg.class_name} needs policy.encoder_component_names")
        if len(set(names)) != len(names):
            raise ConfigError(f"policy.encoder_component_names lists a component twice: {list(names)}")
        if cfg.encoder_output_size is None or cfg.encoder_output_size < 1:
            raise ConfigError(
                f"policy.class_name {cfg.class_name} needs policy.encoder_output_size (a positive int), "
                f"got {cfg.encoder_output_size!r}"
            )
        for key in ("encoder_class_name", "encoder_kwargs"):
            value = getattr(cfg, key)
            if isinstance(value, tuple) and len(value) != len(names):
                raise ConfigError(
                    f"policy.{key} lists {len(value)} entries for {len(names)} encoder_component_names "
                    f"{list(names)}: give one for all, or one per component"
                )
    if spec.encoders == VISUAL and cfg.visual_latent_size < 1:
        raise ConfigError(f"policy.visual_latent_size must be a positive int, got {cfg.visual_latent_size}")


def _per_component(value: Any, names: tuple[str, ...], name: str) -> Any:
    return value[names.index(name)] if isinstance(value, tuple) else value


def _spec(
    component: str,
    span: tuple[int, int],
    class_name: str,
    kwargs: dict,
    output_size: int,
    shapes: dict,
    linear_output: bool = False,
) -> EncoderSpec:
    kwargs = dict(kwargs)
    if class_name == CONV_CLASS and "image_shape" not in kwargs:
        if component not in shapes:
            raise ConfigError(
                f"a {CONV_CLASS} encoder of {component!r} needs its image shape: the env knows no image "
                f"shape for it (images it knows: {sorted(shapes)}); give encoder_kwargs.image_shape [C, H, W]"
            )
        kwargs["image_shape"] = list(shapes[component])
    spec = EncoderSpec(
        component=component,
        start=span[0],
        size=span[1] - span[0],
        class_name=class_name,
        kwargs=frozen(kwargs),
        output_size=int(output_size),
        linear_output=linear_output,
    )
    spec.build()  # every kwargs / image-shape problem is a ConfigError now, naming the component
    return spec


def _pick(spans: dict, names: tuple[str, ...], key: str, group: str) -> None:
    unknown = [n for n in names if n not in spans]
    if unknown:
        raise ConfigError(
            f"policy.{key}: unknown {group} component(s) {unknown}; valid components: {list(spans)}"
        )


def visual_encoders(cfg: Any, components: dict | None, actor: dict, shapes: dict) -> tuple:
    """The visual classes' one conv encoder of `visual_component_name`, shared with the critic
    where the critic's group holds that component too."""
    named = (components or {}).get("critic") is not None
    critic = group_spans(components, "critic", cfg.class_name) if named else {}
    name = cfg.visual_component_name
    _pick(actor, (name,), "visual_component_name", "policy")
    kwargs = {**VISUAL_DEFAULTS, **cfg.visual_kwargs}
    size = cfg.visual_latent_size
    own = _spec(name, actor[name], CONV_CLASS, kwargs, size, shapes, linear_output=True)
    shared = (own.at(critic[name][0]),) if name in critic else ()
    if shared and critic[name][1] - critic[name][0] != own.size:
        raise ConfigError(
            f"the critic's {name!r} differs in size from the policy's: cannot share the encoder"
        )
    return (own,), shared, True


def own_critic_encoders(cfg: Any, critic: dict, names: tuple, shapes: dict) -> tuple[EncoderSpec, ...]:
    """Encoders of the critic's own (`critic_encoder_component_names`); components the actor also
    encodes take the actor's per-component class and settings."""
    critic_names = _names(cfg.critic_encoder_component_names)
    _pick(critic, critic_names, "critic_encoder_component_names", "critic")
    per_component = [
        k for k in ("encoder_class_name", "encoder_kwargs") if isinstance(getattr(cfg, k), tuple)
    ]
    strangers = [n for n in critic_names if n not in names]
    if per_component and strangers:
        raise ConfigError(
            f"policy.{per_component[0]} gives one entry per actor component, so the critic's encoders of "
            f"{strangers} (not encoded for the actor) have none; give one for all components instead"
        )
    critic_specs = tuple(
        _spec(
            n,
            critic[n],
            _per_component(cfg.encoder_class_name, names, n) if n in names else cfg.encoder_class_name,
            _per_component(cfg.encoder_kwargs, names, n) if n in names else cfg.encoder_kwargs,
            cfg.encoder_output_size,
            shapes,
        )
        for n in critic_names
    )
    return critic_specs


def resolve_encoders(
    cfg: Any, spec: PolicyClass, components: dict | None, shapes: dict | None = None
) -> tuple[tuple[EncoderSpec, ...], tuple[EncoderSpec, ...], bool]:
    """`(actor encoders, critic encoders, shared)` of policy class `spec` in the env's layouts."""
    check_encoder_settings(cfg)
    if spec.encoders is None:
        return (), (), False
    shapes = shapes or {}
    actor = group_spans(components, "policy", cfg.class_name)
    if spec.encoders == VISUAL:
        return visual_encoders(cfg, components, actor, shapes)
    names = _names(cfg.encoder_component_names)
    _pick(actor, names, "encoder_component_names", "policy")
    actor_specs = tuple(
        _spec(
            n,
            actor[n],
            _per_component(cfg.encoder_class_name, names, n),
            _per_component(cfg.encoder_kwargs, names, n),
            cfg.encoder_output_size,
            shapes,
        )
        for n in names
    )
    critic_names = cfg.critic_encoder_component_names
    if critic_names is None or critic_names == ():
        return actor_specs, (), False
    critic = group_spans(components, "critic", cfg.class_name)
    if critic_names == SHARED:
        _pick(critic, names, "critic_encoder_component_names (shared: the actor's components)", "critic")
        wrong = [
            s.component for s in actor_specs if critic[s.component][1] - critic[s.component][0] != s.size
        ]
        if wrong:
            raise ConfigError(
                f"policy.critic_encoder_component_names=shared: the critic's {wrong} differ in size from "
                "the policy's, so the actor's encoders cannot read them"
            )
        return actor_specs, tuple(s.at(critic[s.component][0]) for s in actor_specs), True
    return actor_specs, own_critic_encoders(cfg, critic, names, shapes), False
