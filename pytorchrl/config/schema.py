"""Declarative schema of the YAML configuration file.

A configuration has top-level keys (``seed``, ``run_dir``) and sections (``env``,
``algorithm``, ``actor``, ``storage``, ``scheme``, ``learner``, ``schedules``). Every key is
described by a :class:`Key`: its kind, default, allowed values or range, and a one-line doc
(``Key`` and ``derived`` are in ``pytorchrl.config.keys``; this module lists the keys).

Where a key is a constructor argument of a component (an algorithm hyperparameter, a
storage or actor parameter, a Scheme option), its default, type and doc are read from that
component's signature and docstring (:func:`derived`), so this file never restates them
and cannot drift from the code. The ``algorithm`` and ``storage`` sections depend on their
``name``: their keys are those of the named class (:func:`algorithm_keys`,
:func:`storage_keys`).

Example::

    seed: 0
    env: {id: CartPole-v1, vec_env_size: 8, test_env: true}
    algorithm: {name: PPO, lr: 1.0e-3, num_epochs: 20}
    storage: {name: GAEBuffer, size: 32, gae_lambda: 0.8}
    learner: {target_steps: 100000}
    schedules:
      - {name: lr, target: algorithm, kind: linear, start: 1.0e-3, end: 0.0}
"""

import inspect

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.feature_extractors import get_feature_extractor
from pytorchrl.agent.actors.feature_extractors.mlp import ACTIVATIONS
from pytorchrl.agent.actors.normalization import DEFAULT_CLIP
from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.algorithms.policy_loss_addons import POLICY_LOSS_ADDONS, BehaviourKL
from pytorchrl.agent.vec_env import VecEnv
from pytorchrl.agent.storages import STORAGES
from pytorchrl.config.agent_presets import AGENT_PRESETS
from pytorchrl.config.keys import REQUIRED, Key, component_keys, derived, mark_fixed
from pytorchrl.envs.families import ENV_FAMILIES
from pytorchrl.learner import Learner
from pytorchrl.schedules import VALID_KINDS, VALID_TARGETS, Schedule
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.base.checks import COMMUNICATION_WORDS
from pytorchrl.scheme.base.worker import Worker
from pytorchrl.scheme.presets import PRESETS
from pytorchrl.scheme.servers.inference_server import INFERENCE_SERVER_DEFAULTS
from pytorchrl.scheme.servers.queues import ENDS, POPS, QUEUE_DEFAULTS, ROUTES, SELECTIONS
from pytorchrl.scheme.servers.replay_server import DATA_PATHS, REPLAY_SERVER_DEFAULTS
from pytorchrl.scheme.servers.weight_board import DEFAULT_PULL_EVERY, PULL_EACH_EPISODE, WEIGHT_MODES


#: Feature extractors by configuration name ("auto": MLP for flat observations, CNN for images).
FEATURE_EXTRACTORS = {name: get_feature_extractor(name) for name in ("mlp", "cnn", "fixup", "dict")}

#: Keys of the ``actor`` section that only one family of algorithms uses: given for the
#: other family they are refused (they would have no effect).
ON_POLICY_ACTOR_KEYS = ("shared_policy_value_network", "ortho_init", "log_std_init")
OFF_POLICY_ACTOR_KEYS = ("noise", "noise_sigma", "num_critics", "dueling", "sequence_overlap")
#: gSDE's keys (SAC only); without ``use_sde`` the others are refused.
SDE_ACTOR_KEYS = ("use_sde", "sde_log_std_init", "sde_sample_freq", "sde_full_std", "sde_use_expln")

#: Keys accepted in ``scheme.*_workers_resources``: the arguments of ``Worker.as_remote``.
RESOURCE_KEYS = tuple(n for n in inspect.signature(Worker.as_remote).parameters if n != "cls")

#: ``algorithm.policy_loss_addons`` of the algorithms that take add-ons (PPO, A2C): the
#: configuration's form of the objects their constructor takes.
POLICY_LOSS_ADDONS_KEY = dict(
    kind="any", default=[],
    doc="Terms added to the policy loss, each a mapping of the keys listed under 'each entry of "
        "policy_loss_addons' ({name: AttractionKL, checkpoints: [runs/x/model.state_dict], weights: [1.0]}): "
        "AttractionKL pulls the policy towards saved policies, RepulsionKL pushes it away; [] for none.")


def algorithm_keys(name):
    """Hyperparameter keys of the algorithm called ``name`` (a key of ``ALGORITHMS``)."""
    cls = ALGORITHMS[name]
    # (RND_PPO's networks: a configuration names a feature extractor; a class is Python's.)
    overrides = {"policy_loss_addons": POLICY_LOSS_ADDONS_KEY,
                 "intrinsic_rewards_network": dict(choices=("MLP", "CNN", "Fixup"))}
    keys = {n: derived(cls, n, **overrides.get(n, {})) for n in cls.hyperparameter_names()}
    return mark_fixed(keys, cls.fixed_hyperparameters)


#: Keys of one entry of ``algorithm.policy_loss_addons`` (PPO, A2C): an add-on of
#: ``pytorchrl.agent.algorithms.policy_loss_addons`` whose behaviours are saved runs, each
#: built with this run's ``actor`` section and loaded with the run's weights.
POLICY_LOSS_ADDON_KEYS = {
    "name": Key("str", REQUIRED, "AttractionKL (adds loss_term_weight times the weighted KL(behaviour || policy)) "
                                 "or RepulsionKL (subtracts loss_term_weight times the weighted 1 - exp(-KL), "
                                 "bounded).", choices=tuple(POLICY_LOSS_ADDONS)),
    "checkpoints": Key("str_list", REQUIRED, "The behaviours: files saved by earlier runs of the same actor "
                                             "configuration (their model.state_dict or checkpoint.pt; a relative "
                                             "path is read from the working directory)."),
    "weights": Key("number_list", None, "Relative weight of each behaviour, one per checkpoint, >= 0, normalised "
                                        "to sum 1 (null: equal weights).", low=0.0),
    "loss_term_weight": derived(BehaviourKL, "loss_term_weight", low=0.0),
    "eps": derived(BehaviourKL, "eps", low=0.0, low_inclusive=False, high=0.5),
}


def storage_keys(name):
    """Parameter keys of the storage called ``name`` (a key of ``STORAGES``)."""
    cls = STORAGES[name]
    return mark_fixed(component_keys(cls), getattr(cls, "fixed_parameters", ()))


#: Docs of family options whose factory docstring speaks of Python values (None) that the
#: configuration uses for "the factory's default".
_FAMILY_OPTION_OVERRIDES = {
    "max_episode_steps": dict(doc="Truncate a game after this many agent steps (4 frames each); 0: no limit."),
}


def env_family_option_keys():
    """Keys of the options of the environment families (``env.frame_stack``, ...).

    Each is documented by the first family's factory that takes it; its default is null,
    the factory's own default, so that an option given for a family without it is refused
    (``validate``), not silently ignored.
    """
    keys = {}
    for family in ENV_FAMILIES.values():
        for name in family.options:
            if name in keys:
                continue
            owners = [f.name for f in ENV_FAMILIES.values() if name in f.options]
            key = derived(family.train_factory, name, **_FAMILY_OPTION_OVERRIDES.get(name, {}))
            default = inspect.signature(family.train_factory).parameters[name].default
            default = str(default).lower() if isinstance(default, bool) else default
            keys[name] = Key(key.kind, None, f"Famil{'ies' if len(owners) > 1 else 'y'} {' and '.join(owners)}: "
                                             f"{key.doc} Null: the factory's default ({default}).",
                             low=key.low, high=key.high)
    return keys


#: ``env`` keys of the family options (frame_stack, episodic_life, ...).
ENV_FAMILY_OPTION_KEYS = env_family_option_keys()

# ------------------------------------------------------------------------------- schema
_COMM = ("sync", "async")
#: The Scheme's other words for the communication modes (``checks.COMMUNICATION_WORDS``):
#: a file may write them too.
_COMM_ALIASES = {word: ("sync" if mode == prl.SYNC else "async") for word, mode in COMMUNICATION_WORDS.items()
                 if word not in _COMM}

TOP_LEVEL = {
    "preset": Key("str", None, "Named agent whose values fill every section first (algorithm, storage, actor, "
                               "env, scheme, learner, schedules); keys written in the file win ('pytorchrl "
                               "presets' lists them).", choices=tuple(AGENT_PRESETS)),
    "seed": Key("int", None, "Seed of torch, numpy and random, and base seed of the environments."),
    "run_dir": Key("str", None, "Directory of the run (config.yaml, metrics.csv, model, episode logs); "
                                "null: runs/<config name>-<timestamp>."),
}

SECTIONS = {
    "env": {
        "id": Key("str", REQUIRED, "gymnasium environment id, e.g. CartPole-v1; 'module:Id' imports "
                                   "the module that registers it first."),
        "family": Key("str", "gym", "Which factories build the environments: gym (gymnasium.make), atari "
                                    "(ALE games, 84x84 frames: PongNoFrameskip-v4), mujoco (HalfCheetah-v5, "
                                    "...), minigrid (MiniGrid-Empty-5x5-v0, ...), robotics (gymnasium-robotics' goal "
                                    "tasks: FetchReach-v4, ...); the options below belong "
                                    "to one family or another.",
                      choices=tuple(ENV_FAMILIES)),
        "kwargs": Key("dict", {}, "Keyword arguments of gymnasium.make (e.g. max_episode_steps); family gym "
                                  "only."),
        "vec_env_size": derived(VecEnv.create_factory, "vec_env_size"),
        "vectorization": derived(VecEnv.create_factory, "vectorization", kind="str",
                                 choices=("sync", "subprocess"),
                                 doc="sync: the envs of a worker step in its process; subprocess: "
                                     "one process per env (for expensive envs)."),
        "seed": Key("int", None, "Base seed of the environments (null: the top-level seed)."),
        "test_env": Key("bool", False, "Build test environments for deterministic evaluation "
                                       "(Episodes/TestReward, the final evaluation)."),
        "test_vec_env_size": Key("int", 1, "Test environments evaluated together.", low=1),
        "monitor": Key("bool", True, "Write one CSV line per finished episode under <run_dir>/monitor."),
        **ENV_FAMILY_OPTION_KEYS,
    },
    "algorithm": {
        "name": Key("str", REQUIRED, "Algorithm; the other keys of this section are its "
                                     "hyperparameters.", choices=tuple(ALGORITHMS)),
    },
    "actor": {
        "feature_extractor": Key("str", "auto", "Network applied to observations: mlp, cnn (Nature DQN), "
                                                "fixup (IMPALA ResNet), dict (Dict/Tuple observations: the "
                                                "vector keys through one MLP, each image key through a CNN; PPO and "
                                                "A2C); auto: dict for Dict/Tuple "
                                                "observations with PPO and A2C, cnn for image observations "
                                                "(uint8, at least 36x36 pixels), mlp otherwise (flat vectors, "
                                                "MiniGrid's 7x7 grid).", choices=("auto",) + tuple(FEATURE_EXTRACTORS)),
        "precision": Key("str", "fp32", "Number format of the networks: fp32, or bf16: bfloat16 mixed precision "
                                        "(float32 weights, optimizer, heads and losses) in the image feature "
                                        "extractors (cnn, fixup: convolutions and linear layers) and in the MLP "
                                        "networks of DDQN, DDPG, TD3 and SAC (the products between two hidden "
                                        "layers, most of their arithmetic), in training and acting alike; PPO/A2C's "
                                        "small MLP refuses it. On a CPU without AVX512-BF16/AMX the run says so once "
                                        "and computes in fp32. Fixed when the actor is built.",
                         choices=("fp32", "bf16")),
        "hidden_sizes": Key("int_list", None, "Width of each hidden layer of the MLP (after the CNN for "
                                              "images); null: [64, 64] for PPO/A2C, [256, 256] for the "
                                              "off-policy algorithms.", low=1),
        "activation": Key("str", None, "Non-linearity of the MLP; null: tanh for PPO/A2C, relu for the "
                                       "off-policy algorithms.", choices=tuple(ACTIVATIONS)),
        "shared_policy_value_network": derived(OnPolicyActor, "shared_policy_value_network"),
        "ortho_init": derived(OnPolicyActor, "ortho_init"),
        "log_std_init": derived(OnPolicyActor, "log_std_init"),
        "recurrent_net": Key("str", None, "Memory after the feature extractor, GRU or LSTM (PPO, A2C, DDQN); "
                                          "null: a feed-forward actor. PPO/A2C: mini-batches are then whole "
                                          "environment sequences (num_mini_batch <= vec_env_size); DDQN "
                                          "(R2D2-style): storage.name RecurrentReplayBuffer.",
                             choices=("GRU", "LSTM")),
        "recurrent_hidden_size": Key("int", 64, "Hidden size of that memory (recurrent_net_kwargs "
                                                "hidden_size).", low=1),
        "sequence_overlap": derived(OffPolicyActor, "sequence_overlap", low=0.0),
        "noise": derived(OffPolicyActor, "noise", kind="str", choices=("Gauss", "OU", "NoNoise"),
                         doc="Exploration noise of DDPG and TD3 (null: Gauss)."),
        "noise_sigma": Key("number", 0.1, "Scale of that noise, in units of half the action range "
                                          "(DDPG, TD3).", low=0.0),
        "num_critics": derived(OffPolicyActor, "num_critics", low=1),
        "use_sde": derived(OffPolicyActor, "use_sde",
                           doc="SAC with Box actions: explore with gSDE (generalized state-dependent exploration, "
                               "Stable-Baselines3's use_sde): a noise linear in the policy's last hidden layer, "
                               "with exploration weights drawn per environment and held for a rollout "
                               "(sde_sample_freq) and a learned log_std sent with the weights. Other algorithms "
                               "refuse it, so does an inference server; the sde_* keys need it."),
        "sde_log_std_init": derived(OffPolicyActor, "log_std_init"),
        "sde_sample_freq": derived(OffPolicyActor, "sde_sample_freq", low=-1),
        "sde_full_std": derived(OffPolicyActor, "full_std"),
        "sde_use_expln": derived(OffPolicyActor, "use_expln"),
        "normalize_observations": Key("bool", False, "Normalise the observations at the actor's input with running "
                                                     "mean and variance (as stable-baselines3's VecNormalize), in "
                                                     "acting, evaluation and training alike: the float entries "
                                                     "(of a Dict/Tuple: the float Box keys; discrete keys and "
                                                     "images are left as they are); image observations are "
                                                     "refused. The learner updates the statistics from every "
                                                     "rollout it receives; they travel with the weights and are "
                                                     "saved with the actor. Not with "
                                                     "scheme.decentralized_update_execution. Fixed when the actor "
                                                     "is built."),
        "observation_clip": Key("number", DEFAULT_CLIP, "Normalised observations are clipped to [-observation_clip, "
                                                "observation_clip] (with actor.normalize_observations).",
                                low=0.0, low_inclusive=False),
        "dueling": derived(OffPolicyActor, "dueling"),
        "restart_model": derived(OnPolicyActor, "restart_model",
                                 doc="A saved run's model.state_dict (or checkpoint.pt) loaded into the "
                                     "actor after it is built: training starts from it, or a "
                                     "collection-only run (scheme.num_grad_workers: 0) acts with it."),
    },
    "storage": {
        "name": Key("str", None, "Storage; the other keys of this section are its parameters (null: "
                                 "GAEBuffer for PPO/A2C, ReplayBuffer for the off-policy algorithms, "
                                 "RecurrentReplayBuffer for DDQN with actor.recurrent_net).",
                    choices=tuple(STORAGES)),
    },
    "scheme": {
        "preset": Key("str", None, "Named layout whose values fill this section first; keys written next "
                                   "to it win ('pytorchrl presets' lists them).", choices=tuple(PRESETS)),
        "num_col_workers": derived(Scheme, "num_col_workers"),
        "col_workers_communication": Key("str", "sync", "Collection: sync (rounds) or async "
                                                        "(whichever rollout is ready first); also spelled "
                                                        "synchronous, synchronised, asynchronous.", choices=_COMM,
                                         aliases=_COMM_ALIASES),
        "col_compress_data": derived(Scheme, "col_compress_data", kind="bool_or_auto"),
        "fraction_samples": Key("number", 1.0, "Sync collection: a round ends once this fraction of its "
                                               "samples is in (stragglers are cut).",
                                low=0.0, low_inclusive=False, high=1.0),
        "fraction_workers": Key("number", 1.0, "Sync collection: ... and this fraction of the collection "
                                               "workers has answered.", low=0.0, low_inclusive=False, high=1.0),
        "num_grad_workers": derived(Scheme, "num_grad_workers"),
        "grad_workers_communication": Key("str", "sync", "Gradients: sync (averaged or all-reduced) or "
                                                         "async (A3C: applied as they arrive); also spelled "
                                                         "synchronous, synchronised, asynchronous.", choices=_COMM,
                                          aliases=_COMM_ALIASES),
        "grad_compress_data": derived(Scheme, "grad_compress_data", kind="bool_or_auto"),
        "decentralized_update_execution": derived(Scheme, "decentralized_update_execution"),
        "col_workers_resources": derived(Scheme, "col_workers_resources", kind="resources", default=None),
        "grad_workers_resources": derived(Scheme, "grad_workers_resources", kind="resources", default=None),
        "max_policy_lag": derived(Scheme, "max_policy_lag"),
        "col_requests_in_flight": derived(Scheme, "col_requests_in_flight"),
        "max_grad_lag": derived(Scheme, "max_grad_lag"),
        "max_worker_restarts": derived(Scheme, "max_worker_restarts",
                                       doc="Restarts allowed to each worker over the run: a remote worker "
                                           "that dies is replaced with the current weights and hot-swapped "
                                           "parameters, a failed environment rebuilt (each counts one); its "
                                           "next failure ends the run (checkpoint saved, exit status 2)."),
        "worker_restart_delay_s": derived(Scheme, "worker_restart_delay_s"),
        "on_env_error": derived(Scheme, "on_env_error", choices=("restart", "stop"),
                                doc="restart: an environment that raises is rebuilt in its worker, its "
                                    "rollout dropped, and training goes on; stop: the run ends with the "
                                    "error (checkpoint saved, exit status 2)."),
        "local_device": derived(Scheme, "local_device", doc="Device of the workers in this process "
                                                           "(cpu, cuda, cuda:1, auto; null: cpu)."),
        "data_path": Key("str", "direct", "How transitions reach the gradient workers: direct (each collector's "
                                          "rollouts go to its gradient worker's storage) or replay_server "
                                          "(off-policy: collectors insert into one replay server built from the "
                                          "storage section, gradient workers sample from it, paced by its rate "
                                          "limiter; remote collectors must be async) or queues (each async remote "
                                          "collector puts its rollouts into a bounded queue and waits while it is "
                                          "full; gradient workers pop them into their storage: EXARL's RMA).",
                         choices=DATA_PATHS),
        "replay_server": Key("dict", None, "With data_path: replay_server, the server's rate limiter and "
                                           "resources: " + ", ".join(f"{k} (default {v})" for k, v in
                                                                     REPLAY_SERVER_DEFAULTS.items())
                             + " (see docs/schemes.md); null: those defaults."),
        "queues": Key("dict", None, "With data_path: queues, the queues and how gradient workers read them: "
                                    + ", ".join(f"{k} (default {v})" for k, v in QUEUE_DEFAULTS.items())
                      + " (see docs/schemes.md); null: those defaults."),
        "col_rollout_unit": derived(Scheme, "col_rollout_unit", choices=("steps", "episodes")),
        "col_policy": derived(Scheme, "col_policy", choices=("learned", "random", "server"),
                              doc="Where collector actions come from: learned (the actor each collector "
                                  "holds), random (uniform draws), or server (SEED: a central inference "
                                  "server batches the observations of every collector and acts with the "
                                  "learner's weights; feed-forward actors, one gradient worker)."),
        "inference_server": Key("dict", None, "With col_policy: server, the server's batching and resources: "
                                + ", ".join(f"{k} (default {v})" for k, v in INFERENCE_SERVER_DEFAULTS.items())
                                + " (see docs/schemes.md); null: those defaults."),
        "col_weights": derived(Scheme, "col_weights", choices=WEIGHT_MODES,
                               doc="How remote collectors get new weights: push (with each rollout request; "
                                   "one version per rollout) or pull (EXARL's non-blocking async: each version "
                                   "is published once to a weight board that collectors check every "
                                   "col_weight_pull_every steps without waiting, swapping weights mid-rollout, "
                                   "or at every episode's start; async collection)."),
        "col_weight_pull_every": derived(Scheme, "col_weight_pull_every", kind="any", low=None,
                                         doc=f"With col_weights: pull, how often collectors read the weight board: "
                                             f"every this many env steps, without waiting for the answer (null: "
                                             f"{DEFAULT_PULL_EVERY}), or '{PULL_EACH_EPISODE}': at the start of "
                                             f"every episode, waiting for the answer (then allowed for PPO/A2C "
                                             f"with col_rollout_unit: episodes, the weights changing between "
                                             f"rollouts only)."),
        "col_worker_proxy": derived(Scheme, "col_worker_proxy"),
        "batch_step_frequency": derived(Scheme, "batch_step_frequency"),
        "batch_episode_frequency": derived(Scheme, "batch_episode_frequency"),
        "episode_block": derived(Scheme, "episode_block"),
        "col_step_logs": Key("bool", False, "Every collector writes a per-step log of its training steps to "
                                            "<run_dir>/steps/steps_g<i>_c<j>.csv (time, state, action, reward, "
                                            "next state, total reward, done, episode, step, policy): EXARL's "
                                            "actor logs. Large: one row per environment step."),
        "ray_address": Key("str", None, "Ray cluster to join when a level has several workers "
                                        "(null: RAY_ADDRESS, else a local instance)."),
    },
    "learner": {
        "target_steps": derived(Learner, "target_steps"),
        "log_every": Key("number", 5.0, "Seconds between progress lines and rows of metrics.csv "
                                        "and TensorBoard (which also get a row every 1/200 of "
                                        "target_steps, so that short runs draw smooth curves).",
                         low=0.0, low_inclusive=False),
        "save_every": Key("number", 300.0, "Seconds between checkpoints (model and full state) while "
                                           "training; null: only at the end and on Ctrl-C.",
                          low=0.0, low_inclusive=False),
        "save_every_steps": Key("int", None, "Also save a checkpoint each time the env steps pass a multiple "
                                             "of this (either interval triggers a save; null: time only).",
                                low=1),
        "target_episodes": derived(Learner, "target_episodes"),
        "cutoff": derived(Learner, "cutoff"),
        "rolling_reward_length": derived(Learner, "rolling_reward_length"),
        "checkpoint_replay": derived(Learner, "checkpoint_replay"),
        "max_nonfinite_updates": derived(Learner, "max_nonfinite_updates", low=1,
                                         doc="An update whose gradient is NaN or infinite is skipped (weights "
                                             "unchanged, counted in Scheme/SkippedUpdates); this many in a row "
                                             "end the run (checkpoint of the last finite weights saved, exit "
                                             "status 2); null: never."),
        "tensorboard": Key("bool", True, "Write TensorBoard event files under <run_dir>/tensorboard "
                                         "(skipped with a warning when tensorboard is not installed)."),
        "final_eval": Key("bool", True, "After training, evaluate deterministically on the test "
                                        "environments (when env.test_env is true)."),
        "final_eval_episodes": Key("int", None, "Episodes of the final evaluation (null: the "
                                                "algorithm's num_test_episodes).", low=1),
        "wandb": Key("dict", None, "Track the run with Weights & Biases (needs the wandb package: pip install "
                                   "\"pytorchrl[wandb]\"): a mapping of the keys listed under 'learner.wandb' "
                                   "({project: cartpole, mode: offline}); every metric of metrics.csv, every "
                                   "hot-swap, the configuration and the agent components are logged; null: no "
                                   "W&B run."),
        "plot_at_end": Key("bool", False, "After training, draw the return against env steps and against "
                                          "wall-clock time into <run_dir>/reward_vs_time.png (as 'pytorchrl "
                                          "plot RUN_DIR'; needs matplotlib)."),
    },
}

#: Sections that a resolved configuration holds only when the file gives them: ``pbt``
#: describes a population (``pytorchrl pbt``); an ordinary run has none.
OPTIONAL_SECTIONS = ("pbt",)

#: Population-based training (``pytorchrl pbt``, ``pytorchrl.pbt``): the ``pbt`` section.
SECTIONS["pbt"] = {
    "population": Key("int", 4, "Members trained side by side ('pytorchrl pbt --population N' sets it); member i "
                                "is an ordinary run in <run_dir>/member-<i> whose seed is the top-level seed + i.",
                      low=2),
    "interval": Key("int", 10000, "Env steps of each member between two exploit/explore decisions: all members "
                                  "train to the next multiple of it, then the decision is made (under Ray Tune: "
                                  "the env steps of each step() of pytorchrl.tune.Trainable).", low=1),
    "metric": Key("str", "train_return", "What ranks the members at a decision: train_return (Episodes/TrainReward, "
                                         "the mean return of the last 100 training episodes) or test_return (a "
                                         "deterministic evaluation of num_test_episodes at the decision; needs "
                                         "env.test_env).", choices=("train_return", "test_return")),
    "quantile": Key("number", 0.25, "Fraction of the members replaced at a decision: each of the bottom quantile "
                                    "copies a member of the top quantile (at least one member, at most half).",
                    low=0.0, low_inclusive=False, high=0.5),
    "mutations": Key("dict", {}, "Parameters perturbed after a copy and how: parameter (lr, algorithm.lr, "
                                 "storage.gae_lambda) -> factors, values, log_uniform, resample_probability (below); "
                                 "any hot-swappable algorithm or storage parameter; 'pytorchrl pbt' needs one at "
                                 "least (under Ray Tune its scheduler perturbs instead)."),
    "initial": Key("dict", {}, "Starting values that differ between members: parameter -> a list of one value per "
                               "member (member i starts with the i-th); the others start from the sections above."),
    "target_return": Key("number", None, "End the population once the best member's metric reaches this at a "
                                         "decision (null: every member trains to learner.target_steps)."),
    "execution": Key("str", "auto", "How members run: ray (each in a Ray actor, side by side; a member's own "
                                    "scheme may be distributed too), interleaved (one after the other in this "
                                    "process, an interval each), or auto (ray when this process may use more than "
                                    "one CPU core, interleaved on one).", choices=("auto", "ray", "interleaved")),
    "member_resources": Key("resources", None, "Ray resources of each member's actor (execution ray); null: "
                                               "num_cpus 1, or an equal share of the cluster's CPUs when it has "
                                               "fewer than one per member."),
}

#: Keys of one entry of ``pbt.mutations``: how a copied value is perturbed. A parameter with
#: factors and a distribution (values or log_uniform) is resampled with
#: ``resample_probability``, multiplied otherwise; with one of the two, that one is used.
MUTATION_KEYS = {
    "factors": Key("any", None, "Numbers the copied value is multiplied by, one drawn at random (e.g. [0.8, 1.2]); "
                                "an integer parameter is rounded, and the result kept in the parameter's range "
                                "(and in log_uniform's, when given)."),
    "values": Key("any", None, "A list of values the parameter is resampled from, uniformly."),
    "log_uniform": Key("any", None, "[low, high]: the parameter is resampled log-uniformly between the two "
                                    "(positive numbers)."),
    "resample_probability": Key("number", 0.25, "With factors and a distribution (values or log_uniform): the "
                                                "probability of resampling instead of multiplying.",
                                low=0.0, high=1.0),
}


def hot_swappable_keys(target, name):
    """The parameters of the algorithm (``target`` "algorithm") or storage called ``name``
    that can change while training: every parameter but those fixed once the component is
    built (``fixed_hyperparameters``, ``fixed_parameters``)."""
    if target == "algorithm":
        keys, fixed = algorithm_keys(name), ALGORITHMS[name].fixed_hyperparameters
    else:
        keys, fixed = storage_keys(name), getattr(STORAGES[name], "fixed_parameters", ())
    return {k: v for k, v in keys.items() if k not in fixed}


#: Keys of one entry of the ``schedules`` list; ``start`` and ``end`` take the type of the
#: parameter they schedule.
SCHEDULE_KEYS = {
    "name": derived(Schedule, "name"),
    "target": derived(Schedule, "target", choices=VALID_TARGETS),
    "kind": derived(Schedule, "kind", choices=VALID_KINDS),
    "start": derived(Schedule, "start", kind="any", default=REQUIRED),
    "end": derived(Schedule, "end", kind="any"),
    "start_step": derived(Schedule, "start_step"),
    "end_step": derived(Schedule, "end_step"),
    "min_relative_change": derived(Schedule, "min_relative_change"),
}

#: Keys of ``learner.wandb`` (``pytorchrl.tools.tracking``): the arguments of ``wandb.init``
#: that a run sets.
WANDB_KEYS = {
    "project": Key("str", "pytorchrl", "W&B project of the run."),
    "entity": Key("str", None, "W&B user or team owning the project (null: the logged-in user's default)."),
    "name": Key("str", None, "Name of the run in W&B (null: the run directory's name)."),
    "group": Key("str", None, "Group of runs the run belongs to (seeds of one experiment, members of a "
                              "population)."),
    "tags": Key("str_list", None, "Tags of the run."),
    "notes": Key("str", None, "A longer description of the run."),
    "mode": Key("str", "online", "online: sent to the W&B server as it runs; offline: written under "
                                 "<dir>/wandb/offline-run-* without any network (upload later with 'wandb sync'); "
                                 "disabled: no W&B run (the package is not needed).",
                choices=("online", "offline", "disabled")),
    "dir": Key("str", None, "Directory W&B writes its files under, in a 'wandb' folder (null: the run "
                            "directory)."),
}

#: Keys of ``scheme.replay_server`` (``pytorchrl.scheme.servers.replay_server``).
REPLAY_SERVER_KEYS = {
    "min_size_to_sample": Key("int", REPLAY_SERVER_DEFAULTS["min_size_to_sample"],
                              "Transitions the server holds before the first sample.", low=1),
    "samples_per_insert": Key("number", REPLAY_SERVER_DEFAULTS["samples_per_insert"],
                              "Transitions sampled per transition inserted, on average.", low=0.0,
                              low_inclusive=False),
    "error_buffer": Key("number", REPLAY_SERVER_DEFAULTS["error_buffer"],
                        "How far (in sampled transitions) either side may run ahead of the ratio.", low=0.0),
    "num_cpus": Key("number", REPLAY_SERVER_DEFAULTS["num_cpus"], "Ray CPUs of the server actor.", low=0.0),
}

#: Keys of ``scheme.inference_server`` (``pytorchrl.scheme.servers.inference_server``).
INFERENCE_SERVER_KEYS = {
    "max_batch": Key("int", INFERENCE_SERVER_DEFAULTS["max_batch"],
                     "Most observations in one batched act; a batch runs once this many are waiting.", low=1),
    "timeout_ms": Key("number", INFERENCE_SERVER_DEFAULTS["timeout_ms"],
                      "Milliseconds the oldest waiting request waits for more before its batch runs.", low=0.0),
    "num_cpus": Key("number", INFERENCE_SERVER_DEFAULTS["num_cpus"], "Ray CPUs of the server actor.", low=0.0),
}

#: Keys of ``scheme.queues`` (``pytorchrl.scheme.servers.queues``).
QUEUE_KEYS = {
    "size": Key("int", QUEUE_DEFAULTS["size"], "Rollouts a queue holds; a collector whose queue is full waits "
                                               "(back-pressure).", low=1),
    "pop": Key("str", QUEUE_DEFAULTS["pop"], "one: a pop takes the oldest rollout of the queue chosen; all: it "
                                             "drains that queue.", choices=POPS),
    "prefetch": Key("bool", QUEUE_DEFAULTS["prefetch"], "A gradient worker asks for its next pop before it trains "
                                                        "on the current data."),
    "selection": Key("str", QUEUE_DEFAULTS["selection"], "binned: a gradient worker reads its own collectors' "
                                                         "queues (oldest head first); random: a random non-empty "
                                                         "queue among all collectors'.", choices=SELECTIONS),
    "steal": Key("bool", QUEUE_DEFAULTS["steal"], "Work stealing (EXARL's multi-learner RMA queue): a gradient "
                                                  "worker whose collectors are done (none has a request out and "
                                                  "nothing is left of the budget, learner.target_episodes or "
                                                  "target_steps, to claim) and whose "
                                                  "queues are empty pops other gradient workers' queues "
                                                  "(Queues/StolenPops); needs num_grad_workers >= 2, selection "
                                                  "binned and end all."),
    "end": Key("str", QUEUE_DEFAULTS["end"], "all: the run ends once every group is finished and every queue is "
                                             "empty; first: as soon as one gradient worker's group is finished and "
                                             "its queues are empty (EXARL's short multi-learner RMA queue).",
               choices=ENDS),
    "kind": Key("str", QUEUE_DEFAULTS["kind"], "fifo: a bounded queue, a put into a full one waits; circular: a put "
                                               "into a full one overwrites its oldest rollout "
                                               "(Queues/Overwritten) and never waits; or the import path of an "
                                               "ExaData subclass (package.module:Class: EXARL's memory pool, "
                                               "pytorchrl.agent.exarl.ExaData), one window per queue, whose push "
                                               "and pop are the puts and pops."),
    "route": Key("str", QUEUE_DEFAULTS["route"], "collector: one queue per collector; learner: one queue per "
                                                 "gradient worker, each collector puts into a random one with "
                                                 "room.", choices=ROUTES),
    "num_cpus": Key("number", QUEUE_DEFAULTS["num_cpus"], "Ray CPUs of the queue server actor.", low=0.0),
}

#: Section names in the order they are written to a resolved configuration.
SECTION_ORDER = ("env", "algorithm", "actor", "storage", "scheme", "learner", "schedules")


def describe_schema():
    """The whole schema as text: one line per key, sections in order."""
    out = []
    for name, key in TOP_LEVEL.items():
        out.append(f"{name}: {key.describe()}")
    for section in SECTION_ORDER + OPTIONAL_SECTIONS:
        if section == "schedules":
            out.append("\nschedules: list of planned hot-swaps, each with")
            out += [f"  {n}: {k.describe()}" for n, k in SCHEDULE_KEYS.items()]
            continue
        out.append(f"\n{section}:" + ("  (pytorchrl pbt only)" if section == "pbt" else ""))
        out += [f"  {n}: {k.describe()}" for n, k in SECTIONS[section].items()]
        if section == "learner":
            out.append("  each key of wandb:")
            out += [f"    {n}: {k.describe()}" for n, k in WANDB_KEYS.items()]
        if section == "pbt":
            out.append("  each entry of mutations:")
            out += [f"    {n}: {k.describe()}" for n, k in MUTATION_KEYS.items()]
        dynamic = {"algorithm": (ALGORITHMS, algorithm_keys), "storage": (STORAGES, storage_keys)}.get(section)
        if dynamic:
            for cls_name, cls in dynamic[0].items():
                if getattr(cls, "__name__", cls_name) != cls_name:
                    out.append(f"  with name: {cls_name}  (short name of {cls.__name__}: the same keys)")
                    continue
                out.append(f"  with name: {cls_name}")
                keys = dynamic[1](cls_name)
                out += [f"    {n}: {k.describe()}" for n, k in keys.items()]
                if "policy_loss_addons" in keys and section == "algorithm":
                    out.append("    each entry of policy_loss_addons:")
                    out += [f"      {n}: {k.describe()}" for n, k in POLICY_LOSS_ADDON_KEYS.items()]
    return "\n".join(out)
