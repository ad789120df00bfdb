"""What the scheme and the learner need of an algorithm, an actor and a storage.

The workers (``pytorchrl.scheme``) and the learner (``pytorchrl/learner*.py``) build these
components from factories and then use exactly the members below, nothing else: any
object that has them can play the part (the library's classes do, and so do EXARL's
adapters, ``pytorchrl.agent.exarl``). The scheme's annotations name these protocols, never
a concrete class, and ``tests/unit/test_protocols.py`` checks that every shipped class has
every member.

The protocols are ``runtime_checkable``: ``isinstance(x, AlgorithmProtocol)`` checks that
``x`` has every member (not their signatures).
"""

from typing import Any, Callable, Optional, Protocol, runtime_checkable


@runtime_checkable
class AlgorithmProtocol(Protocol):
    """An algorithm as the workers use it (``pytorchrl.agent.algorithms.Algorithm``'s
    members of these names say what each does).

    A gradient worker computes and applies gradients, moves weights and state; a collector
    acts through its actor and asks the algorithm for its collector-side work; the learner
    checks and applies hot-swaps. Replacing the actor of a worker rebuilds its algorithm as
    ``type(algo)(device, actor, envs, **algo.hyperparameters)``.
    """

    #: Name of the algorithm (messages, checkpoints).
    name: str
    #: Optimizer steps taken (a gradient worker sets it to its weight version).
    updates_applied: int
    #: Collection rounds between two evaluations on the test environments.
    test_every: int
    #: Episodes of one evaluation.
    num_test_episodes: int
    #: Transitions per mini-batch (read by the replay-server data path).
    mini_batch_size: Optional[int]
    #: Methods ``collector_call`` may run (on an inference server, for SEED collectors).
    server_calls: tuple
    #: ``update_algorithm_parameter(parameter_name, new_parameter_value)``: hot-swap one
    #: hyperparameter (declared as a callable: its one definition is the registry's,
    #: ``algorithms.hyperparameters.HyperparameterRegistry``).
    update_algorithm_parameter: Callable[[str, Any], None]

    @property
    def collector_modules(self) -> tuple:
        """Names of the learner modules collectors need (sent with the acting weights)."""

    @property
    def hyperparameters(self) -> dict:
        """Current value of every hyperparameter."""

    def check_update(self, parameter_name: str, new_parameter_value: Any) -> Any:
        """The value a hot-swap would set, or the error it would raise; nothing changes."""

    def warm_up(self, envs: Any) -> bool:
        """Collector-side work with the training environments before the first rollout."""

    def preprocess_rollout(self, data: dict) -> dict:
        """Collector-side pre-processing of a finished rollout."""

    def route_collector_calls(self, program: Any) -> None:
        """Run the collector-side computations with weights through ``program``."""

    def collector_call(self, name: str, *args: Any) -> Any:
        """One of ``server_calls``, here or through the routed program."""

    def collector_state(self) -> Optional[dict]:
        """What a collector's algorithm accumulated over the run (None: nothing)."""

    def load_collector_state(self, state: Optional[dict]) -> None:
        """Restore a ``collector_state``."""

    def get_acting_weights(self) -> dict:
        """The weights collectors act with."""

    def set_acting_weights(self, weights: dict) -> None:
        """Load weights from ``get_acting_weights`` (or ``get_weights``)."""

    def get_weights(self) -> dict:
        """Everything a gradient worker needs to compute gradients."""

    def set_weights(self, weights: dict) -> None:
        """Load weights from ``get_weights``."""

    def compute_gradients(self, batch: dict, grads_to_cpu: bool = True, return_grads: bool = True) -> tuple:
        """``(gradients or None, info)`` of one mini-batch."""

    def apply_gradients(self, gradients: Optional[list] = None) -> bool:
        """One update; False when it was skipped (non-finite gradients)."""

    def trainable_parameters(self) -> list:
        """The parameters that get gradients, in the order of the gradient lists."""

    def state_dict(self) -> dict:
        """Full state for checkpoints."""

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict``."""


@runtime_checkable
class ActorProtocol(Protocol):
    """An actor as the workers use it (``pytorchrl.agent.actors.base.Actor``'s members of
    these names say what each does).

    Two members are optional, looked up with a default: ``ready_to_send(data)`` (whether a
    collector may send its rollout yet: EXARL's agents) and ``save_own(directory)`` (a
    format of the actor's own, saved with the model).
    """

    #: Whether the actor has a recurrent memory.
    is_recurrent: bool
    #: The observation normaliser (``ObservationNormalizer``), or None.
    obs_norm: Any

    def act(self, obs: Any, state: Any = None, deterministic: bool = False) -> tuple:
        """``(env_action, extras, next_state)`` for a batch of observations."""

    def values(self, obs: Any, state: Any = None) -> Any:
        """Value estimates of a batch of observations (an inference server's bootstraps)."""

    def initial_state(self, num_envs: int) -> Any:
        """Recurrent state at the start of an episode (None: no state)."""

    def reset_state(self, state: Any, env_indices: list) -> Any:
        """``state`` with the rows of ended episodes reset."""

    def route_acting(self, program: Optional[Callable]) -> None:
        """Act through ``program`` (an inference server) instead of the actor's networks."""

    def merge_observation_moments(self, stats: Any) -> None:
        """Add a rollout's observation statistics to the running ones."""

    def state_dict(self) -> dict:
        """The actor's weights (a saved model)."""


@runtime_checkable
class StorageProtocol(Protocol):
    """A storage as the workers use it (``pytorchrl.agent.storages.base.Storage``'s members
    of these names say what each does): a collector side (``start``, ``current_obs``,
    ``insert``, ``finish``, ``get_data``, ...) and a learner side (``add_data``, ``ready``,
    ``batches``, ``after_update``, ``clear``). A worker whose actor or algorithm is replaced
    sets the storage's ``actor`` and ``algorithm``.
    """

    #: The actor whose steps are stored.
    actor: Any
    #: The algorithm whose ``acting_extras`` and bootstrap the storage uses.
    algorithm: Any
    #: Steps of the rollout running.
    step: int

    @property
    def hyperparameters(self) -> dict:
        """Parameters a hot-swap may change."""

    def check_update(self, parameter_name: str, new_parameter_value: Any) -> Any:
        """The value a hot-swap would set, or the error it would raise; nothing changes."""

    def update_storage_parameter(self, parameter_name: str, new_parameter_value: Any) -> None:
        """Hot-swap one parameter."""

    def rollout_steps(self, num_envs: int) -> int:
        """Vectorized steps in one rollout of a collector with ``num_envs`` environments."""

    def start(self, obs: Any, state: Any = None) -> None:
        """Begin a rollout from ``obs``."""

    def current_obs(self) -> Any:
        """The observations the next step acts on."""

    def insert(self, step: dict) -> None:
        """Keep one vectorized step."""

    def finish(self, state: Any = None) -> None:
        """End the rollout (bootstraps)."""

    def next_rollout_obs(self) -> Any:
        """The observations the next rollout starts from."""

    def rollout_observations(self) -> Any:
        """The observations of the rollout just finished."""

    def get_data(self, data_to_cpu: bool = True) -> dict:
        """The rollout, as sent to the learner."""

    def add_data(self, data: dict) -> None:
        """Add a rollout (learner side)."""

    def ready(self) -> bool:
        """Whether mini-batches can be drawn."""

    def batches(self) -> Any:
        """The mini-batches of this update stage."""

    def after_update(self, batch: dict, info: dict) -> None:
        """Feedback of an update (priorities)."""

    def clear(self) -> None:
        """Forget the data added (on-policy storages after an update)."""


@runtime_checkable
class ReplayStorageProtocol(StorageProtocol, Protocol):
    """A replay storage, as a replay server and the learner's checkpoints use it
    (``pytorchrl.agent.storages.ReplayBuffer``'s members of these names)."""

    #: Transitions held.
    num_items: int

    def sample(self, batch_size: int) -> dict:
        """A mini-batch of ``batch_size`` transitions."""

    def state_dict(self) -> dict:
        """The transitions held and the counters (checkpoints)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict``."""


#: ``factory(device)`` -> an actor.
ActorFactory = Callable[[Any], ActorProtocol]
#: ``factory(device, actor, envs)`` -> an algorithm.
AlgorithmFactory = Callable[[Any, ActorProtocol, Any], AlgorithmProtocol]
#: ``factory(device, actor, algorithm, envs)`` -> a storage.
StorageFactory = Callable[[Any, ActorProtocol, AlgorithmProtocol, Any], StorageProtocol]


def _declared(protocol):
    """(data attribute names, method and property names) a protocol of this module declares,
    its own and those of the protocols it extends."""
    data, methods = set(), set()
    for cls in protocol.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        data.update(getattr(cls, "__annotations__", {}))
        methods.update(n for n, v in vars(cls).items()
                       if not n.startswith("_") and (callable(v) or isinstance(v, property)))
    return data, methods


def members(protocol):
    """Every name a protocol of this module declares (its own and those it extends), sorted.

    Parameters
    ----------
    protocol : type
        One of the protocols above.
    """
    data, methods = _declared(protocol)
    return sorted(data | methods)


def provides(cls, protocol):
    """Whether the class ``cls`` has every method and property ``protocol`` declares (its
    data attributes are set by the constructor: only an instance shows them, which
    ``isinstance(instance, protocol)`` checks).

    Parameters
    ----------
    cls : type
        A component class (e.g. the class a storage factory builds).
    protocol : type
        One of the protocols above.
    """
    return all(hasattr(cls, name) for name in _declared(protocol)[1])


__all__ = ["AlgorithmProtocol", "ActorProtocol", "StorageProtocol", "ReplayStorageProtocol", "ActorFactory",
           "AlgorithmFactory", "StorageFactory", "members", "provides"]
