"""Typed, frozen run configuration with st_rl / rsl_rl field names.

Sections mirror an rsl_rl train config: `env`, `policy`, `algorithm`, `runner`, plus `seed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvConfig:
    """Which environment (Brax or MuJoCo Playground) to run and how to wrap it."""

    task: str = "inverted_pendulum"
    backend: str = "positional"
    num_envs: int = 1024
    episode_length: int = 1000
    action_repeat: int = 1
    clip_actions: float | None = 1.0  # executed actions are clipped to [-c, c]; None disables
    env_kwargs: dict = field(default_factory=dict)  # passed to the Brax env constructor
    # group name -> indices of the Brax observation it sees; groups not named see all of it.
    # e.g. {policy: [0, 1]} hides inverted_pendulum's velocities from the actor.
    obs_groups: dict = field(default_factory=dict)
    # AMP: components of the AMP observation frame (strl_jax.envs.amp_obs); None: the task's default
    amp_obs_components: tuple[str, ...] | None = None
    # MuJoCo Playground tasks only: overrides of the task's own config (its `default_config()` keys,
    # nested with dots or dicts, e.g. {impl: warp, reward_config.scales.pose: 0.2}).
    playground: dict = field(default_factory=dict)
    # MuJoCo Playground tasks only: each env gets its own physics drawn by the task's randomiser
    # (friction, masses, ...) once at the start of the run, as Playground's training does.
    domain_randomization: bool = True


@dataclass(frozen=True)
class AmpDiscriminatorConfig:
    """AMP discriminator and style reward (st_rl `policy.amp_discriminator`)."""

    hidden_dims: tuple[int, ...] = (1024, 512)
    activation: str = "relu"
    style_reward_coef: float = 1.0  # r_style = coef * max(0, 1 - 0.25 * (D - 1)^2)
    task_reward_lerp: float = 0.0  # r = (1 - lerp) * r_style + lerp * r_task; 0 drops the task reward
    discriminator_grad_pen: float = 10.0  # lambda of lambda * mean ||grad D(expert)||^2


@dataclass(frozen=True)
class PolicyConfig:
    """Actor-critic network (rsl_rl `policy` section)."""

    class_name: str = "ActorCritic"
    actor_hidden_dims: tuple[int, ...] = (256, 256, 256)
    critic_hidden_dims: tuple[int, ...] = (256, 256, 256)
    activation: str = "elu"
    init_noise_std: float = 1.0
    noise_std_type: str = "scalar"
    # ActorCriticRecurrent only (st_rl names)
    rnn_type: str = "lstm"
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1
    # APPO / ATPPO only
    amp_discriminator: AmpDiscriminatorConfig = field(default_factory=AmpDiscriminatorConfig)


@dataclass(frozen=True)
class TeacherPolicyConfig:
    """The trained policy that TPPO and Distillation learn from (st_rl `teacher_policy`)."""

    class_name: str = "ActorCritic"  # must match the teacher run's policy.class_name
    checkpoint: str = ""  # a strl_jax run folder, its checkpoints/ folder or one checkpoint step folder
    # observation group of the student's env the teacher acts on; None: `critic` or `policy`
    # per algorithm.label_action_with_critic_obs
    obs_group: str | None = None


@dataclass(frozen=True)
class AlgorithmConfig:
    """Algorithm hyperparameters under st_rl / rsl_rl names (defaults: current rsl_rl PPO).

    `class_name` picks PPO, TPPO (st_rl: PPO guided by a teacher) or Distillation (rsl_rl:
    behaviour cloning of a teacher); the TPPO and Distillation fields are ignored by PPO.
    """

    class_name: str = "PPO"
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    surrogate_loss_coef: float = 1.0
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.01
    learning_rate: float = 1e-3
    max_grad_norm: float | None = 1.0  # None disables gradient clipping
    optimizer: str = "adam"
    use_clipped_value_loss: bool = True
    schedule: str = "adaptive"
    desired_kl: float = 0.01
    normalize_advantage_per_mini_batch: bool = False
    clip_min_std: float | None = None
    timeout_bootstrap: str = "final_obs"  # or "rsl_rl": gamma * V(s_t) on time-outs
    reward_scale: float = 1.0  # multiplies rewards used for learning, not the logged returns
    # TPPO and Distillation
    teacher_policy: TeacherPolicyConfig = field(default_factory=TeacherPolicyConfig)
    label_action_with_critic_obs: bool = True
    action_labels_from_sample: bool = False  # labels are teacher samples instead of its mean
    # TPPO: a number, or "linear" | "exp" | "tanh" of the iteration scaled by update_times_scale
    teacher_act_prob: float | str = "exp"
    update_times_scale: float = 100.0
    using_ppo: bool = True  # false: pure DAgger, only the distillation loss
    distillation_loss_coef: float | str = 1.0  # a number or a schedule name like teacher_act_prob
    distill_target: str = "real"  # real | mse_sum | l1 | tanh | scaled_tanh | max_log_prob
    # Distillation: truncated BPTT length in steps, and the behaviour-cloning loss (mse | huber)
    gradient_length: int = 15
    loss_type: str = "mse"
    # AMP (st_rl APPO / ATPPO); the discriminator network is policy.amp_discriminator
    discriminator_loss_coef: float = 1.0  # multiplies the three discriminator terms; 0 turns them off
    mimic_loss_coef: float = 0.0  # mean ||ref_obs - ref_motion||
    dagger_loss_coef: float = 0.0  # mean ||mu - action_label||
    amp_motion_files: tuple[str, ...] = ()  # expert motion: dataset folders or motion files
    amp_replay_buffer_size: int = 100_000  # policy AMP observations kept for the discriminator
    amp_normalizer_until: float | None = 1.0e8  # samples after which the AMP normalisers freeze
    # shared: one normaliser fed with policy and expert AMP observations (AMP_for_hardware);
    # separate: st_rl's two, which standardise away any per-feature offset (e.g. forward speed)
    amp_normalizer: str = "shared"


@dataclass(frozen=True)
class RunnerConfig:
    """Rollout length, iteration count, logging, evaluation and checkpoint cadence."""

    num_steps_per_env: int = 24
    max_iterations: int = 1500
    empirical_normalization: bool = True
    normalizer_until: float | None = None
    log_interval: int = 1  # iterations between metrics.jsonl / TensorBoard rows
    print_interval: int = 10  # iterations between console summaries
    eval_interval: int = 10
    num_eval_envs: int = 16
    save_interval: int = 50
    max_checkpoints_to_keep: int = 5
    experiment_name: str = ""
    log_dir: str = ""  # default: runs/<task>/<timestamp>
    compile_cache: bool = True  # JAX persistent compilation cache under ~/.cache/strl_jax
    num_devices: int | None = None  # devices the envs are sharded over (all processes'); None: all
    # chex/checkify checks of shapes and finiteness inside the iteration (slower: for finding
    # where a NaN first appears); the cheap per-iteration finiteness check is always on.
    debug: bool = False


@dataclass(frozen=True)
class TrainConfig:
    """A whole run."""

    seed: int = 1
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
