"""From a validated configuration to factories, a Scheme and a Learner."""

import os
import random

import numpy as np
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.algorithms.policy_loss_addons import POLICY_LOSS_ADDONS, SavedActorFactory
from pytorchrl.agent.vec_env import VecEnv
from pytorchrl.agent.spaces import PackedBox, describe_space, packed_space
from pytorchrl.agent.storages import STORAGES
from pytorchrl.config.schema import FEATURE_EXTRACTORS
from pytorchrl.config.errors import ConfigError
from pytorchrl.envs.families import ENV_FAMILIES
from pytorchrl.learner import Learner
from pytorchrl.schedules import Schedule
from pytorchrl.scheme import Scheme

#: Communication words of the configuration file and their constants.
COMMUNICATION = {"sync": prl.SYNC, "async": prl.ASYNC}


def seed_everything(seed):
    """Seed Python's, numpy's and torch's global generators (nothing when ``seed`` is None)."""
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)


def build_env_factories(config, log_dir=None):
    """Environment factories of a configuration.

    Parameters
    ----------
    config : dict
        Resolved configuration (``validate_config``).
    log_dir : str or None
        Run directory; episode logs go to ``<log_dir>/monitor`` when ``env.monitor`` is true.

    Returns
    -------
    train_factory : callable
        Factory of the training environments.
    test_factory : callable or None
        Factory of the test environments (None when ``env.test_env`` is false).
    action_space, obs_space : gymnasium.Space
        Spaces of one environment.

    Raises
    ------
    EnvError
        When the environment cannot be built with these kwargs (it is built once here).
    """
    env = config["env"]
    seed = env["seed"] if env["seed"] is not None else config["seed"]
    monitor_dir = os.path.join(log_dir, "monitor") if (log_dir and env["monitor"]) else None
    family = ENV_FAMILIES[env["family"]]
    env_kwargs = {"env_id": env["id"], **env["kwargs"],
                  **{k: env[k] for k in family.options if env[k] is not None}}
    if family.name != "gym" and seed is not None:
        # The family's factories combine the seed with the worker and env indexes (and
        # train/test) themselves: the vector env adds no seed of its own.
        env_kwargs["seed"], seed = seed, None
    common = dict(env_kwargs=env_kwargs, log_dir=monitor_dir, vectorization=env["vectorization"], seed=seed,
                  info_keywords=family.info_keywords)
    train_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=family.train_factory, vec_env_size=env["vec_env_size"], **common)
    test_factory = None
    if env["test_env"]:
        # Test envs get seeds of their own from the factory (it offsets the "test" mode).
        test_factory, _, _ = VecEnv.create_factory(env_fn=family.test_factory,
                                                   vec_env_size=env["test_vec_env_size"], **common)
    return train_factory, test_factory, action_space, obs_space


def _params(section):
    return {k: v for k, v in section.items() if k != "name"}


def build_algorithm_factory(config, obs_space=None, action_space=None):
    """``(factory, algorithm name)`` of the ``algorithm`` section.

    Parameters
    ----------
    config : dict
        Resolved configuration (``validate_config``).
    obs_space, action_space : gymnasium.Space or None
        Spaces of one environment: the behaviours of ``policy_loss_addons`` are actors of
        the run's configuration (``build_policy_loss_addons``), which needs them.
    """
    section = config["algorithm"]
    params = _params(section)
    if params.get("policy_loss_addons"):
        params["policy_loss_addons"] = build_policy_loss_addons(config, obs_space, action_space)
    return ALGORITHMS[section["name"]].create_factory(**params)


def build_policy_loss_addons(config, obs_space, action_space):
    """The add-ons of ``algorithm.policy_loss_addons``: each checkpoint becomes a behaviour
    built with this run's ``actor`` section (without its ``restart_model``) and loaded with
    the checkpoint's weights (``SavedActorFactory``: the weights travel with it). Each is
    built once here, on the CPU, so that a checkpoint of another network is refused before
    any worker starts.

    Parameters
    ----------
    config : dict
        Resolved configuration (``validate_config``).
    obs_space, action_space : gymnasium.Space
        Spaces of one environment.

    Raises
    ------
    ConfigError
        A checkpoint that cannot be read or does not fit the actor (naming its key).
    """
    if obs_space is None or action_space is None:
        raise ValueError("algorithm.policy_loss_addons: their behaviours are actors of this run's configuration; "
                         "pass the observation and action spaces to build_algorithm_factory")
    name = config["algorithm"]["name"]
    behaviour_config = {**config, "actor": {**config["actor"], "restart_model": None}}
    actor_factory = build_actor_factory(behaviour_config, obs_space, action_space, name)
    addons = []
    for i, entry in enumerate(config["algorithm"]["policy_loss_addons"]):
        factories = []
        for j, path in enumerate(entry["checkpoints"]):
            try:
                factory = SavedActorFactory(actor_factory, path)
                factory("cpu")
            except ValueError as exc:
                raise ConfigError(f"algorithm.policy_loss_addons.{i}.checkpoints.{j}", str(exc)) from None
            factories.append(factory)
        addons.append(POLICY_LOSS_ADDONS[entry["name"]](factories, entry["weights"],
                                                        loss_term_weight=entry["loss_term_weight"], eps=entry["eps"]))
    return addons


def build_actor_factory(config, obs_space, action_space, algorithm_name):
    """Actor factory of the ``actor`` section for these spaces and algorithm: an
    ``OnPolicyActor`` for PPO/A2C, an ``OffPolicyActor`` for the others."""
    actor = config["actor"]
    on_policy = ALGORITHMS[algorithm_name].on_policy
    name = actor["feature_extractor"]
    structured = isinstance(packed_space(obs_space), PackedBox)
    if name == "auto":
        # The off-policy actors read packed Dict/Tuple observations as one flat vector.
        name = "dict" if structured and on_policy else "cnn" if is_image_space(obs_space) else "mlp"
    if name == "dict" and not (structured and on_policy):
        raise ConfigError("actor.feature_extractor", f"dict reads Dict or Tuple observations with PPO or A2C; "
                                                     f"{algorithm_name}'s observations are {describe_space(obs_space)}")
    mlp_kwargs = {"hidden_sizes": list(actor["hidden_sizes"] or ([64, 64] if on_policy else [256, 256])),
                  "activation": actor["activation"] or ("tanh" if on_policy else "relu")}
    image_kwargs = {"precision": actor["precision"]}
    normalization = {"normalize_observations": actor["normalize_observations"],
                     "observation_clip": actor["observation_clip"]}
    if on_policy and name == "mlp" and actor["precision"] != "fp32":
        raise ConfigError("actor.precision", f"{actor['precision']} applies to the image feature extractors "
                                             f"(cnn, fixup) and to the off-policy algorithms' MLP networks; "
                                             f"{algorithm_name}'s observations {obs_space.shape} get the mlp")
    if on_policy:
        if name == "mlp":
            extractor, kwargs = FEATURE_EXTRACTORS["mlp"], mlp_kwargs
        elif name == "dict":
            extractor, kwargs = FEATURE_EXTRACTORS["dict"], {**mlp_kwargs, "image_kwargs": image_kwargs}
        else:
            extractor, kwargs = FEATURE_EXTRACTORS[name], image_kwargs
        return OnPolicyActor.create_factory(
            obs_space, action_space, algorithm_name, feature_extractor_network=extractor,
            feature_extractor_kwargs=kwargs, shared_policy_value_network=actor["shared_policy_value_network"],
            ortho_init=actor["ortho_init"], log_std_init=actor["log_std_init"], recurrent_net=actor["recurrent_net"],
            recurrent_net_kwargs={"hidden_size": actor["recurrent_hidden_size"]}, restart_model=actor["restart_model"],
            **normalization)
    return OffPolicyActor.create_factory(
        obs_space, action_space, algorithm_name, noise=actor["noise"],
        obs_feature_extractor=None if name == "mlp" else FEATURE_EXTRACTORS[name],
        obs_feature_extractor_kwargs=None if name == "mlp" else image_kwargs,
        common_feature_extractor_kwargs=mlp_kwargs, num_critics=actor["num_critics"],
        noise_kwargs={"sigma": actor["noise_sigma"]}, dueling=actor["dueling"], restart_model=actor["restart_model"],
        recurrent_net=actor["recurrent_net"], sequence_overlap=actor["sequence_overlap"],
        recurrent_net_kwargs={"hidden_size": actor["recurrent_hidden_size"]} if actor["recurrent_net"] else None,
        precision=actor["precision"], use_sde=actor["use_sde"], log_std_init=actor["sde_log_std_init"],
        sde_sample_freq=actor["sde_sample_freq"], full_std=actor["sde_full_std"], use_expln=actor["sde_use_expln"],
        **normalization)


#: Smallest image side the CNN of ``actor.feature_extractor: cnn`` takes.
CNN_MIN_SIZE = FEATURE_EXTRACTORS["cnn"].MIN_SIZE


def is_image_space(space):
    """True for a Box of uint8 frames (C, H, W) at least as large as the Nature CNN takes
    (36x36): what ``actor.feature_extractor: auto`` gives the CNN. Smaller grids (MiniGrid's
    7x7 symbolic view, which the vector env hands channels first as (3, 7, 7)) get the MLP."""
    return getattr(space, "dtype", None) == np.uint8 and len(getattr(space, "shape", ()) or ()) == 3 \
        and min(space.shape[1:]) >= CNN_MIN_SIZE


def build_storage_factory(config):
    """Storage factory of the ``storage`` section."""
    section = config["storage"]
    return STORAGES[section["name"]].create_factory(**_params(section))


def build_schedules(config):
    """``Schedule`` objects of the ``schedules`` list."""
    return [Schedule(**s) for s in config["schedules"]]


def build_scheme(config, log_dir=None):
    """Seed, build every factory and the Scheme of a resolved configuration.

    Parameters
    ----------
    config : dict
        Resolved configuration (``validate_config``).
    log_dir : str or None
        Run directory (for the episode logs of the environments).

    Returns
    -------
    Scheme
        Its workers are started; call ``stop()`` (or the Learner's) when done.
    """
    seed_everything(config["seed"])
    train_envs, test_envs, action_space, obs_space = build_env_factories(config, log_dir)
    algo_factory, algo_name = build_algorithm_factory(config, obs_space, action_space)
    actor_factory = build_actor_factory(config, obs_space, action_space, algo_name)
    storage_factory = build_storage_factory(config)
    s = config["scheme"]
    if s["ray_address"] and (s["num_col_workers"] > 1 or s["num_grad_workers"] > 1):
        # Scheme joins RAY_ADDRESS or starts a local instance; connecting first makes it
        # use the configured cluster instead.
        from pytorchrl.scheme.base.ray_runtime import ensure_ray
        ensure_ray(address=s["ray_address"])
    kwargs = {} if test_envs is None else {"test_envs_factory": test_envs}
    return Scheme(
        algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
        train_envs_factory=train_envs, num_col_workers=s["num_col_workers"],
        col_compress_data=s["col_compress_data"],
        col_workers_communication=COMMUNICATION[s["col_workers_communication"]],
        col_workers_resources=s["col_workers_resources"],
        col_preemption_thresholds={"fraction_samples": s["fraction_samples"],
                                   "fraction_workers": s["fraction_workers"]},
        num_grad_workers=s["num_grad_workers"], grad_compress_data=s["grad_compress_data"],
        grad_workers_communication=COMMUNICATION[s["grad_workers_communication"]],
        grad_workers_resources=s["grad_workers_resources"], local_device=s["local_device"],
        decentralized_update_execution=s["decentralized_update_execution"],
        max_policy_lag=s["max_policy_lag"], max_grad_lag=s["max_grad_lag"],
        col_requests_in_flight=s["col_requests_in_flight"], max_worker_restarts=s["max_worker_restarts"],
        worker_restart_delay_s=s["worker_restart_delay_s"], on_env_error=s["on_env_error"],
        data_path=s["data_path"], replay_server=s["replay_server"], queues=s["queues"],
        col_rollout_unit=s["col_rollout_unit"],
        col_policy=s["col_policy"], col_weights=s["col_weights"], col_weight_pull_every=s["col_weight_pull_every"],
        inference_server=s["inference_server"], batch_step_frequency=s["batch_step_frequency"],
        batch_episode_frequency=s["batch_episode_frequency"], episode_block=s["episode_block"],
        col_worker_proxy=s["col_worker_proxy"],
        col_step_log_dir=os.path.abspath(os.path.join(log_dir, "steps")) if s["col_step_logs"] and log_dir else None, **kwargs)


def build_learner(config, log_dir=None):
    """Build the Scheme and the Learner of a resolved configuration.

    Parameters
    ----------
    config : dict
        Resolved configuration (``validate_config``).
    log_dir : str or None
        Run directory: saved models and episode logs go there.

    Returns
    -------
    Learner
        Driving a started Scheme; ``learner.stop()`` stops it. If the Learner cannot be
        built (a schedule it refuses) the Scheme is stopped before the error propagates.
    """
    scheme = build_scheme(config, log_dir)
    try:
        return Learner(scheme, config["learner"]["target_steps"], log_dir=log_dir,
                       schedules=build_schedules(config), checkpoint_replay=config["learner"]["checkpoint_replay"],
                       max_nonfinite_updates=config["learner"]["max_nonfinite_updates"],
                       target_episodes=config["learner"]["target_episodes"], cutoff=config["learner"]["cutoff"],
                       rolling_reward_length=config["learner"]["rolling_reward_length"],
                       # Collection-only runs write every episode to their results file.
                       record_episodes=config["scheme"]["num_grad_workers"] == 0)
    except BaseException:
        scheme.stop()
        raise
