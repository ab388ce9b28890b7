"""Typed, frozen run configuration with st_rl / rsl_rl field names.

Sections mirror an rsl_rl train config: `env`, `policy`, `algorithm`, `runner`, plus `seed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvConfig:
    """Which environment (Brax or MuJoCo Playground) to run and how to wrap it."""

    # a Brax or MuJoCo Playground registry name, or an env of one's own as `package.module:Name`
    # (an MjxEnv or Brax env subclass, or a function returning one: strl_jax.envs.entry_points)
    task: str = "inverted_pendulum"
    backend: str = "positional"
    num_envs: int = 1024
    # steps per episode; null: the env's own (a Playground task's or MJX env's `default_config()`
    # episode_length over action_repeat, else 1000), resolved when the env is built and recorded
    # in the run's config.yaml
    episode_length: int | None = None
    action_repeat: int = 1
    clip_actions: float | None = 1.0  # executed actions are clipped to [-c, c]; None disables
    env_kwargs: dict = field(default_factory=dict)  # passed to the Brax env (or entry point) constructor
    # group name -> indices of the Brax observation it sees; groups not named see all of it.
    # e.g. {policy: [0, 1]} hides inverted_pendulum's velocities from the actor.
    obs_groups: dict = field(default_factory=dict)
    # group name -> component names (st_rl's `obs_components`): the group keeps only these
    # components of its layout, in this order (Brax groups get names through `obs_groups`:
    # {policy: {cart: [0], pole: [1]}}). e.g. {policy: [base_ang_vel, projected_gravity, ...]}.
    obs_components: dict = field(default_factory=dict)
    # AMP: components of the AMP observation frame (strl_jax.envs.amp_obs); None: the task's default
    amp_obs_components: tuple[str, ...] | None = None
    # MuJoCo Playground tasks only: overrides of the task's own config (its `default_config()` keys,
    # nested with dots or dicts, e.g. {impl: warp, reward_config.scales.pose: 0.2}); for an MJX
    # entry point, of its `Name.default_config()` or its module's `default_config()`.
    playground: dict = field(default_factory=dict)
    # MJX envs only: each env gets its own physics drawn by the task's randomiser (or env.randomizer;
    # friction, masses, ...) once at the start of the run, as Playground's training does.
    domain_randomization: bool = True
    # Where a finished training env's fresh initial state comes from: "pool" (drawn ahead, between
    # iterations, by a separately compiled reset: the iteration does not compile the env's reset)
    # or "in_step" (the step resets it). Both give each episode its own random initial state.
    auto_reset: str = "pool"
    # MuJoCo Playground rough-terrain tasks (and MJX envs of one's own with a heightfield geom named by
    # `geom`): terrain heights on a grid around the base (legged_gym's `measured_heights`) appended to
    # groups as the component `height_scan`; {} is off. Keys: `groups` (default [critic]), `geom`
    # (default floor) and the fields of strl_jax.envs.height_scan.HeightScanSpec.
    height_scan: dict = field(default_factory=dict)
    # MuJoCo Playground tasks: a depth image from ray casts off a camera on the robot, appended to
    # groups as the component `forward_depth`; {} is off (keys: strl_jax.envs.depth_camera).
    forward_depth: dict = field(default_factory=dict)
    # MJX tasks with a floating base: its true linear and angular velocity, gravity direction and
    # height (noise-free, in the commands' frame) appended to groups as components `true_base_lin_vel`,
    # `true_base_ang_vel`, `true_projected_gravity`, `true_base_height`; a privileged critic for tasks
    # without a privileged state (Op3, Spot, Barkour, H1). {} is off; keys `groups` (default
    # [critic]) and `components` (default all four) (strl_jax.envs.true_state).
    true_state: dict = field(default_factory=dict)
    # Named components of the observation: {key: [[name, size], ...]} per observation key (a
    # Playground-style dict's key, or `state` for an env whose observation is one array), the sizes
    # summing to the key's last dimension. A key given here replaces the env's own `obs_layout` (and
    # a registry task's built-in layout); names follow strl_jax.envs.obs_layout's convention.
    obs_layout: dict = field(default_factory=dict)
    # MJX envs (Playground tasks and envs of one's own): `package.module:function` with Playground's
    # randomiser signature fn(mjx_model, rng[N]) -> (batched model, in_axes); replaces the task's
    # own randomiser. null: the registry task's, none for an entry point. Unused when
    # domain_randomization is false.
    randomizer: str | None = None
    # MJX envs with a heightfield: how MJX collides spheres (Go1's feet) with it. "mjx": MJX's own
    # rule, Playground's physics (at most 4 contacts per foot, only those within a millimetre of the
    # deepest); "mujoco": C MuJoCo's (a contact for every prism of the field the foot penetrates), so
    # that a policy meets the same ground in C MuJoCo (`deploy`) (strl_jax.envs.hfield_contacts).
    hfield_contacts: str = "mjx"
    # MJX envs whose floor is one heightfield with nothing around it (Playground's rough terrain):
    # "fall" ends an episode as a fall once the robot's base is off the field and below its lowest
    # point (it walked off the world; the task itself would let it fall freely to the time limit);
    # "continue" keeps the task's own episode (strl_jax.envs.off_terrain). No effect on a plane.
    off_terrain: str = "fall"
    # Added to the reward of every step whose episode terminates (the robot fell; not a time-out),
    # after the env computed (and clipped) its own reward: legged_gym adds its `termination` reward
    # after `only_positive_rewards` clips the sum, whereas a Playground locomotion task clips its
    # sum at zero with the termination term inside, where a penalty cannot act. Reward units (not
    # scaled by dt); 0 is off. Training and its evaluation see it; `deploy` compares the env's own.
    termination_reward: float = 0.0
    # Playground humanoid tasks (their pushes: push_config): the training envs push their robots
    # scaled by a level per env that rises by `up` at each push the robot stands to receive and
    # drops by `down` at each fall, from `start` (strl_jax.envs.push_curriculum); the evaluation,
    # play and deploy push at the task's full strength. {} is off; {start: 0.0, up: 0.1,
    # down: 0.2} are the defaults of any key left out.
    push_curriculum: dict = field(default_factory=dict)
    # Playground joystick tasks: the training envs' commands are the task's draws times a level per
    # env, which rises by `up` after each episode that ends by a time-out with the linear-tracking
    # term at least `threshold` of its maximum on average and drops by `down` after any other, from
    # `start` (strl_jax.envs.command_curriculum; legged_gym's commands.curriculum, per env); the
    # evaluation, play and deploy draw the task's own commands. {} is off; {start: 0.2, up: 0.1,
    # down: 0.1, threshold: 0.8} are the defaults of any key left out.
    command_curriculum: dict = field(default_factory=dict)


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
    init_noise_std: float = 1.0  # the initial action std (tanh_gaussian: of the Gaussian before tanh)
    noise_std_type: str = "scalar"
    # gaussian: rsl_rl's, one learned std per action, the env clips actions; tanh_gaussian: brax's
    # NormalTanhDistribution, the actor also outputs the std (softplus + 0.001), actions = tanh(sample)
    distribution: str = "gaussian"
    # ActorCriticRecurrent only (st_rl names)
    rnn_type: str = "lstm"
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1
    # StateAc, StateAcRecurrent, PrivilegeStateAcRecurrent (st_rl `EstimatorMixin`): an estimator
    # predicts `estimator_target_components` of the critic group from `estimator_obs_components`
    # of the policy group and, with `replace_state_prob`, replaces them in the actor's input.
    estimator_obs_components: tuple[str, ...] | None = None
    estimator_target_components: tuple[str, ...] | None = None
    estimator_kwargs: dict = field(default_factory=dict)  # st_rl MlpModel: hidden_sizes, nonlinearity
    use_actor_rnn: bool = False  # recurrent policies: the estimator reads the actor's memory output
    replace_state_prob: float = 0.0
    # PrivilegeStateAcRecurrent (st_rl `PrivilegeEstimatorMixin`): the adaptor, applied first
    adaptor_obs_components: tuple[str, ...] | None = None
    adaptor_target_components: tuple[str, ...] | None = None
    adaptor_kwargs: dict = field(default_factory=dict)
    privilege_replace_state_prob: float = 0.0
    adaptor_recurrent: bool = True  # its own memory (recurrent policies); false: an MLP adaptor
    # EncoderActorCritic, EncoderActorCriticRecurrent, EncoderAmpActorCriticRecurrent, EncoderStateAc,
    # EncoderStateAcRecurrent (st_rl `EncoderActorCriticMixin`): each named component of the policy
    # group is embedded by its own encoder (`MlpModel` or `Conv2dHeadModel`, one class for all or one
    # per component; `encoder_kwargs` one mapping for all or one per component) into
    # `encoder_output_size` features that take its place in the actor's input.
    encoder_component_names: tuple[str, ...] | None = None
    encoder_class_name: str | tuple[str, ...] = "MlpModel"
    encoder_kwargs: dict | tuple[dict, ...] = field(default_factory=dict)
    encoder_output_size: int | None = None
    # the critic's encoders: component names of the critic group with encoders of their own, or
    # "shared": the actor's encoders, applied to the same components of the critic group
    critic_encoder_component_names: str | tuple[str, ...] | None = None
    # VisualDeterministicAC, VisualDeterministicRecurrent (st_rl `VisualActorCriticMixin`): one
    # Conv2dHeadModel embeds `visual_component_name` of the policy group into `visual_latent_size`
    # features; acting returns the mean action (`DeterministicPolicyMixin`)
    visual_component_name: str = "forward_depth"
    visual_kwargs: dict = field(default_factory=dict)
    visual_latent_size: int = 256
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
    behaviour cloning of a teacher), each also with the policy's estimator trained (`Estimator...`;
    `agents.algorithms.ALGORITHMS` lists them); the TPPO and Distillation fields are ignored by PPO.
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
    # the adaptive schedule's KL: st_rl adds this inside its log ratio, log(sigma/sigma_old + eps),
    # so an unchanged policy reads about eps per action dimension instead of 0: positive and below
    # desired_kl / 2, the first minibatch of an update grows the rate by 1.5; 0 is the exact KL
    # (rsl_rl 5.x, which leaves the rate alone at a KL of 0)
    kl_epsilon: float = 1e-5
    # false: one global norm over everything the optimiser trains is clipped to max_grad_norm
    # (st_rl); true: the actor's and the critic's gradients are clipped separately, each to
    # max_grad_norm, as torch's clip_grad_norm_ does (rsl_rl 5.x); a part's own parameters
    # (discriminator, estimator) form a group of their own
    clip_grad_per_network: bool = False
    clip_min_std: float | None = None
    # the floor lowered once the policy has learned what a larger std let it find: {final, start,
    # end} moves it linearly from clip_min_std to `final` between iterations `start` and `end`
    # (held before and after); None: clip_min_std throughout (st_rl)
    clip_min_std_schedule: dict | None = None
    # an update's early stop (stable-baselines3's target_kl): once a minibatch's KL to the acting
    # policy, measured before its step, exceeds 1.5 x target_kl, that step and the update's later
    # ones are skipped; None: every step is taken (rsl_rl, st_rl)
    target_kl: float | None = None
    # dual-clip PPO (Ye et al. 2020): for a negative advantage the surrogate is at most
    # dual_clip * |A|, so an executed action the policy found unlikely (a TPPO teacher's) cannot
    # give an unbounded ratio; None: PPO's clip alone (rsl_rl, st_rl)
    dual_clip: float | None = None
    # final_obs: gamma * V(final observation) on time-outs; rsl_rl: gamma * V(s_t); none: brax's
    # bootstrap_on_timeout=False, the time-out step is masked (advantage 0, return = its value)
    timeout_bootstrap: str = "final_obs"
    # GAE restarts every gae_horizon steps, bootstrapping from V(s_{t+h}) (brax's unroll_length);
    # None: one GAE over the whole num_steps_per_env rollout. Must divide num_steps_per_env.
    gae_horizon: int | None = None
    # feed-forward minibatches of shuffled transitions, or of whole gae_horizon-step segments
    # (`trajectory`, brax's batch_size trajectories of unroll_length); recurrent policies always
    # take whole num_steps_per_env rollouts
    minibatch_unit: str = "transition"
    # gae: the GAE advantage (rsl_rl); brax: r_t + gamma * R_{t+1} - V(s_t) with R the GAE value
    # targets (brax's PPO; R_{t+1} = V(s_{t+1}) where a segment ends)
    advantage_estimator: str = "gae"
    # true: values, GAE and advantages recomputed in every minibatch with the critic being trained
    # (brax's PPO); needs minibatch_unit=trajectory and normalize_advantage_per_mini_batch=true
    recompute_advantages: bool = False
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
    # TPPO: latent distillation {student latent: teacher latent} (a stage name such as `estimator`,
    # or an observation component of the actor's input), its weight and distance (real | l1 |
    # tanh | scaled_tanh)
    distill_latent_obs_component_mapping: dict | None = None
    distill_latent_coef: float = 1.0
    distill_latent_target: str = "real"
    # the update's batch holds this many rollouts (the newest and the ones before), st_rl's
    # QueueRolloutStorage; a whole number
    buffer_dilation_ratio: float = 1.0
    # a torch.optim.lr_scheduler by class name with its kwargs, stepped once per iteration
    lr_scheduler_class_name: str | None = None
    lr_scheduler: dict = field(default_factory=dict)
    # recurrent policies: each trajectory of a minibatch starts from a uniform(-1, 1) hidden state
    # with this probability
    hidden_state_resample_prob: float = 0.0
    # EstimatorPPO / EstimatorTPPO / EstimatorDistillation: the loss of the policy's estimator and
    # adaptor (torch.nn.functional names: mse_loss | l1_loss | smooth_l1_loss | huber_loss), summed
    # over features, mean over samples
    estimator_loss_func: str = "mse_loss"
    estimator_loss_kwargs: dict = field(default_factory=dict)
    estimator_loss_coef: float = 1.0
    adaptor_loss_coef: float = 1.0
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
    # rsl_rl's symmetry extension (PPO-style updates, feed-forward policies): {use_data_augmentation,
    # use_mirror_loss, mirror_loss_coeff, data_augmentation_func: 'module:function'} or None (off)
    symmetry_cfg: dict | None = None
    # rsl_rl's RND extension (PPO-style updates): {weight, weight_schedule, reward_normalization,
    # state_normalization, learning_rate, num_outputs, predictor_hidden_dims, target_hidden_dims,
    # activation, obs_group} (agents.rnd) or None (off)
    rnd_cfg: dict | None = None
    # settings of parts that rsl_rl and st_rl have no option for, by part name
    # (`algorithm.parts.<name>: {...}`, read by the part's own `PARTS` row); an entry adds the part
    parts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunnerConfig:
    """Rollout length, iteration count, logging, evaluation and checkpoint cadence."""

    # `metadata={"host_only": True}`: only the host loop reads the field, the compiled programs
    # never do, so runs that differ only in such fields share them (`runners.programs.program_key`)
    num_steps_per_env: int = 24
    max_iterations: int = field(default=1500, metadata={"host_only": True})
    empirical_normalization: bool = True
    # when the observation normalisers absorb a rollout: `after` its update (the next update's first
    # ratio is exactly 1, rsl_rl) or `before` it (brax: the update already sees the new statistics)
    normalizer_update: str = "after"
    normalizer_until: float | None = None
    # normalised observations clipped to [-c, c] before any network reads them (rl_games' 5.0,
    # stable-baselines3's 10.0); null: unclipped, as rsl_rl's EmpiricalNormalization
    normalizer_clip: float | None = None
    # iterations between metrics.jsonl / TensorBoard rows
    log_interval: int = field(default=1, metadata={"host_only": True})
    # iterations between console summaries
    print_interval: int = field(default=10, metadata={"host_only": True})
    eval_interval: int = field(default=10, metadata={"host_only": True})
    num_eval_envs: int = 16
    save_interval: int = field(default=50, metadata={"host_only": True})
    max_checkpoints_to_keep: int = field(default=5, metadata={"host_only": True})
    experiment_name: str = field(default="", metadata={"host_only": True})
    log_dir: str = field(default="", metadata={"host_only": True})  # default: runs/<task>/<timestamp>
    # JAX persistent compilation cache under ~/.cache/strl_jax
    compile_cache: bool = field(default=True, metadata={"host_only": True})
    num_devices: int | None = None  # devices the envs are sharded over (all processes'); None: all
    # chex/checkify checks of shapes and finiteness inside the iteration (slower: for finding
    # where a NaN first appears); the cheap per-iteration finiteness check is always on.
    debug: bool = False
    # a run whose KL, value loss or action std runs orders of magnitude past what the config asks
    # for (strl_jax.runners.divergence) is warned about once; true also stops it (exit 3, a
    # population member stops alone), e.g. for sweeps
    stop_on_divergence: bool = False
    # legged_gym/st_rl: the first episode of every env starts at a random step in
    # [0, episode_length), so that time-outs do not arrive in lockstep
    init_at_random_ep_len: bool = False
    # where scalars go besides metrics.jsonl: tensorboard, wandb or neptune (rsl_rl's names; the
    # last two are optional extras and also write TensorBoard files)
    logger: str = field(default="tensorboard", metadata={"host_only": True})
    wandb_project: str = field(default="strl_jax", metadata={"host_only": True})
    neptune_project: str = field(default="strl_jax", metadata={"host_only": True})
    # st_rl's add_git_repo_to_log: further repositories (any path inside them) whose commit,
    # status and diff are written to <log_dir>/git/ at the start of every run, besides strl_jax's
    git_status_repos: tuple[str, ...] = field(default=(), metadata={"host_only": True})
    # a fresh run's warm start, as `train --load` (which overrides it; `--resume` ignores it): params
    # and normalisers from a run folder, a checkpoint folder or an rsl_rl/st_rl model_N.pt, e.g. a
    # preset that fine-tunes a shipped policy; "" trains from scratch
    load: str = field(default="", metadata={"host_only": True})
    # st_rl's ckpt_manipulator: `module:function` mapping the params/normalisers loaded by --load
    # onto this run's shapes (e.g. after an observation component was added): called as
    # fn(loaded, current, **ckpt_manipulator_kwargs) -> loaded', each a nested dict
    # {"params": ..., "normalizers": ...} of numpy arrays; `current` holds this run's fresh ones
    ckpt_manipulator: str = field(default="", metadata={"host_only": True})
    # extra keyword arguments for it
    ckpt_manipulator_kwargs: dict = field(default_factory=dict, metadata={"host_only": True})
    # independent runs trained together in one compiled program (seeds seed, seed + 1, ...), times
    # the grid of `sweep` values (`strl_jax.runners.population`)
    num_seeds: int = 1
    # st_rl's TwoStageRunner: the first `pretrain_iterations` iterations learn from the transitions
    # of a demonstration dataset (`pretrain_dataset`: data_dir, dataset_loops,
    # random_shuffle_traj_order, imitation_loss_coef, learning_rate, imitation_labels, rl_imitation_*;
    # `defaults`: head_start, the values that give the head start, or st_rl's, for the keys left
    # out) instead of stepping the env (`buffers.rollout_dataset`)
    pretrain_iterations: int = 0
    pretrain_dataset: dict = field(default_factory=dict)
    # how `sweep` lists combine: `grid` (every combination) or `zip` (the i-th value of every list
    # together, e.g. a batch of Optuna trials; the lists must have one length)
    sweep_mode: str = "grid"


@dataclass(frozen=True)
class TrainConfig:
    """A whole run."""

    seed: int = 1
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    # values of numeric algorithm/policy fields to train side by side in one program, e.g.
    # {algorithm.learning_rate: [1e-3, 3e-4]}: one member per combination and seed
    sweep: dict = field(default_factory=dict)
