"""Validation of the agent's sections together: the algorithm's storage family and actor
keys, policy-loss add-ons, demonstration folders, observation normalisation and recurrent
actors (``pytorchrl.config.validate.check_config`` calls these with the configuration
whose sections are resolved, unless said otherwise).
"""

import os

from pytorchrl.config import schema
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.schema import SECTIONS
from pytorchrl.config.values import check_mapping, join_path, show_value


def refuse_addons_without_support(data):
    """Refuse ``algorithm.policy_loss_addons`` for an algorithm that takes none (the
    off-policy ones), saying so rather than "unknown key". ``data``: the ``algorithm``
    section as read (before it is resolved)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    if not isinstance(data, dict) or "policy_loss_addons" not in data:
        return
    cls = ALGORITHMS.get(data.get("name")) if isinstance(data.get("name"), str) else None
    if cls is not None and "policy_loss_addons" not in cls.hyperparameter_names():
        takers = [n for n, c in ALGORITHMS.items() if "policy_loss_addons" in c.hyperparameter_names()]
        raise ConfigError("algorithm.policy_loss_addons", f"policy-loss add-ons are for {', '.join(takers[:-1])} and {takers[-1]} "
                                                          f"(terms added to an on-policy policy loss); "
                                                          f"{cls.name} takes none: remove the key")


def check_policy_loss_addons(algorithm):
    """Resolve ``algorithm.policy_loss_addons`` in place (``schema.POLICY_LOSS_ADDON_KEYS``):
    each entry a mapping naming an add-on, its checkpoints existing files (made absolute:
    workers and resumed runs may start elsewhere) and one non-negative weight per
    checkpoint, not all 0 (null: equal weights). ``algorithm``: the resolved section."""
    if "policy_loss_addons" not in algorithm:
        return
    path = "algorithm.policy_loss_addons"
    entries = algorithm["policy_loss_addons"] or []
    if not isinstance(entries, (list, tuple)):
        raise ConfigError(path, f"expected a list of add-ons ({{name: AttractionKL, checkpoints: [...]}}), got "
                                f"{show_value(entries)}")
    resolved = []
    for i, entry in enumerate(entries):
        where = join_path(path, i)
        addon = check_mapping(entry, schema.POLICY_LOSS_ADDON_KEYS, where, owner="a policy-loss add-on")
        files = []
        for j, name in enumerate(addon["checkpoints"]):
            if not os.path.isfile(name):
                raise ConfigError(join_path(join_path(where, "checkpoints"), j),
                                  f"no such file {name!r} (a model.state_dict or checkpoint.pt of an earlier run; "
                                  f"relative paths are read from {os.getcwd()})")
            files.append(os.path.abspath(name))
        addon["checkpoints"] = files
        weights = addon["weights"]
        if weights is None:
            addon["weights"] = [1.0] * len(files)
        elif len(weights) != len(files):
            raise ConfigError(join_path(where, "weights"), f"{len(weights)} weight(s) for {len(files)} checkpoint(s): "
                                                       f"give one weight per checkpoint")
        elif sum(weights) <= 0:
            raise ConfigError(join_path(where, "weights"), "all weights are 0: give at least one checkpoint a positive "
                                                       "weight")
        resolved.append(addon)
    algorithm["policy_loss_addons"] = resolved


#: PPODBuffer's folders that must exist when given (the target ones are created).
_DEMO_FOLDERS = ("initial_human_demos_dir", "initial_agent_demos_dir", "initial_value_demos_dir")


def check_demo_folders(storage):
    """PPODBuffer: refuse an initial demonstrations folder that does not exist and
    probabilities rho + phi above 1, and make every demonstrations folder absolute (Ray
    collectors may start elsewhere). ``storage``: the resolved section, changed in place."""
    if "rho" in storage and "phi" in storage and storage["rho"] + storage["phi"] > 1.0:
        raise ConfigError("storage.phi", f"rho + phi must be at most 1 (probabilities of replaying a reward or a "
                                         f"value demonstration), got {storage['rho']} + {storage['phi']}")
    for key in _DEMO_FOLDERS + ("target_agent_demos_dir", "target_value_demos_dir"):
        folder = storage.get(key)
        if folder is None:
            continue
        if key in _DEMO_FOLDERS and not os.path.isdir(folder):
            raise ConfigError(f"storage.{key}", f"no such demonstrations folder {folder!r} (relative paths are "
                                                f"read from {os.getcwd()}; 'pytorchrl record-demos' writes one)")
        storage[key] = os.path.abspath(folder)


def with_default_storage(data, algorithm_name, recurrent=False):
    """The ``storage`` section with its name filled in when absent: the storage family
    the algorithm learns from (on-policy rollouts, replay, or sequence replay for a
    recurrent off-policy actor). ``data``: the section as read; ``algorithm_name``: the
    resolved algorithm's name; ``recurrent``: whether the actor is recurrent."""
    if isinstance(data, dict) and data.get("name") is not None:
        return data
    from pytorchrl.agent.algorithms import ALGORITHMS
    if ALGORITHMS[algorithm_name].on_policy:
        name = "GAEBuffer"
    else:
        name = "RecurrentReplayBuffer" if recurrent else "ReplayBuffer"
    return {**(data or {}), "name": name} if isinstance(data, dict) or data is None else data


def check_families(config, raw):
    """Refuse a storage of the other family than the algorithm's, and actor keys that the
    algorithm's actor does not have (they would have no effect). ``config``: the
    configuration with its sections resolved; ``raw``: as written (what was given)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.agent.storages import STORAGES, ReplayBuffer
    algo = config["algorithm"]["name"]
    on_policy = ALGORITHMS[algo].on_policy
    storage = config["storage"]["name"]
    if issubclass(STORAGES[storage], ReplayBuffer) == on_policy:
        wanted = "an on-policy storage (GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer)" if on_policy else \
            "a replay storage (ReplayBuffer, NStepReplayBuffer, PERBuffer)"
        raise ConfigError("storage.name", f"{algo} learns from {wanted}, got {storage!r}")
    given = raw.get("actor") if isinstance(raw.get("actor"), dict) else {}
    other = schema.OFF_POLICY_ACTOR_KEYS if on_policy else schema.ON_POLICY_ACTOR_KEYS
    for key in other:
        # A resolved configuration (config.yaml of a run) holds every key at its default:
        # only a value that would change something is refused.
        if key in given and given[key] != SECTIONS["actor"][key].default:
            family = "off-policy algorithms (DDQN, DDPG, TD3, SAC)" if on_policy else "PPO and A2C"
            raise ConfigError(f"actor.{key}", f"applies to {family}; {algo} has no use for it")
    if config["learner"]["checkpoint_replay"] and on_policy:
        raise ConfigError("learner.checkpoint_replay", f"{algo} keeps no replay to save (on-policy)")
    if not on_policy and config["actor"]["feature_extractor"] == "dict":
        raise ConfigError("actor.feature_extractor", f"dict (the Dict/Tuple observation network) serves PPO and A2C; {algo} "
                                                     f"reads Dict or Tuple observations as one flat vector "
                                                     f"(mlp)")
    if on_policy and config["actor"]["feature_extractor"] == "mlp" and config["actor"]["precision"] != "fp32":
        raise ConfigError("actor.precision", f"{config['actor']['precision']} applies to the image feature "
                                             f"extractors (cnn, fixup) and to the off-policy algorithms' MLP "
                                             f"networks, not to {algo}'s actor.feature_extractor mlp")
    if config["actor"]["dueling"] and algo != "DDQN":
        raise ConfigError("actor.dueling", f"a dueling Q-network is for DDQN, not {algo}")
    if given.get("noise") is not None and algo not in ("DDPG", "TD3"):
        raise ConfigError("actor.noise", f"exploration noise is for DDPG and TD3; {algo} explores otherwise")
    _check_sde_keys(config, given, algo)


def _check_sde_keys(config, given, algo):
    """Refuse gSDE (``actor.use_sde``) for another algorithm than SAC, and its settings
    (``actor.sde_*``) given a value of their own without it: they would have no effect."""
    if config["actor"]["use_sde"] and algo != "SAC":
        raise ConfigError("actor.use_sde", f"gSDE is served for SAC's Gaussian policy, not for {algo}")
    if config["actor"]["sde_sample_freq"] == 0:
        raise ConfigError("actor.sde_sample_freq", "must be -1 (new exploration weights with each rollout) or >= 1")
    if not config["actor"]["use_sde"]:
        for key in schema.SDE_ACTOR_KEYS[1:]:
            if key in given and given[key] != SECTIONS["actor"][key].default:
                raise ConfigError(f"actor.{key}", "configures gSDE; it has no effect without actor.use_sde: true")


def check_normalization(config):
    """Refuse an observation clip without normalisation (it would have no effect), and
    normalisation with decentralized updates (every gradient worker would keep statistics
    of its own)."""
    actor = config["actor"]
    if not actor["normalize_observations"]:
        if actor["observation_clip"] != SECTIONS["actor"]["observation_clip"].default:
            raise ConfigError("actor.observation_clip", "has no effect without actor.normalize_observations: true")
        return
    if config["scheme"]["decentralized_update_execution"]:
        raise ConfigError("actor.normalize_observations", "true is not supported with "
                                                          "scheme.decentralized_update_execution (each gradient "
                                                          "worker would keep statistics of its own)")


def check_recurrent(config):
    """Refuse what a recurrent actor cannot train with: on-policy, more mini-batches than a
    collector has environments (a mini-batch is whole environment sequences); off-policy,
    another algorithm than DDQN, another storage than RecurrentReplayBuffer, collector-side
    targets and the replay server. Refuse the sequence settings without a recurrent actor."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    actor, storage, algo = config["actor"], config["storage"]["name"], config["algorithm"]
    if actor["recurrent_net"] is None:
        if storage == "RecurrentReplayBuffer":
            raise ConfigError("storage.name", "RecurrentReplayBuffer stores sequences for a recurrent actor: set "
                                              "actor.recurrent_net (GRU or LSTM), or use ReplayBuffer")
        for key in ("recurrent_hidden_size", "sequence_overlap"):
            if actor[key] != SECTIONS["actor"][key].default:
                raise ConfigError(f"actor.{key}", "applies to recurrent actors (actor.recurrent_net); remove it")
        return
    if not ALGORITHMS[algo["name"]].on_policy:
        _check_recurrent_replay(config)
        return
    algo = config["algorithm"]
    num_mini_batch, vec_env_size = algo.get("num_mini_batch", 1), config["env"]["vec_env_size"]
    if algo.get("mini_batch_size") is None and num_mini_batch > vec_env_size:
        raise ConfigError("algorithm.num_mini_batch",
                          f"{num_mini_batch} with a recurrent actor: mini-batches are subsets of the "
                          f"environments (whole sequences) and env.vec_env_size is {vec_env_size}; set "
                          f"num_mini_batch <= {vec_env_size}")


def _check_recurrent_replay(config):
    """A recurrent off-policy actor: DDQN learning from RecurrentReplayBuffer sequences."""
    actor, storage, algo = config["actor"], config["storage"]["name"], config["algorithm"]
    if algo["name"] != "DDQN":
        raise ConfigError("actor.recurrent_net", f"recurrent off-policy actors are supported for DDQN only "
                                                 f"(R2D2-style); {algo['name']} actors are feed-forward")
    if storage != "RecurrentReplayBuffer":
        raise ConfigError("storage.name", f"a recurrent DDQN (actor.recurrent_net) learns from sequences: "
                                          f"RecurrentReplayBuffer, got {storage!r}")
    if not actor["sequence_overlap"] < 1.0:
        raise ConfigError("actor.sequence_overlap", f"must be in [0, 1), got {actor['sequence_overlap']}")
    if algo["targets_on_collector"]:
        raise ConfigError("algorithm.targets_on_collector", "computes targets of single transitions; a recurrent "
                                                            "DDQN trains on sequences: set it to false")
    if config["scheme"]["data_path"] == "replay_server":
        raise ConfigError("scheme.data_path", "replay_server holds single transitions; a recurrent DDQN "
                                              "(RecurrentReplayBuffer) uses data_path direct or queues")
