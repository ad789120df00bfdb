"""The agent components a worker holds: building them from their factories and replacing
them (``replace_agent_component``).

A gradient worker owns the learner's actor, algorithm and storage; a collection worker
holds its own, or acts with those of the gradient worker of its process (see
``CWorker``'s ``borrow_from``).
"""

from pytorchrl.agent.protocols import (ActorFactory, ActorProtocol, AlgorithmFactory, AlgorithmProtocol,
                                      StorageFactory, StorageProtocol)

#: Components ``replace_agent_component`` may replace.
AGENT_COMPONENTS = ("actor", "algo", "storage", "envs_train", "envs_test")
#: Those a gradient worker holds (the others are a collector's environments).
LEARNER_COMPONENTS = ("actor", "algo", "storage")


def check_component_name(component_name):
    """Raise ValueError naming the valid components unless ``component_name`` is one."""
    if component_name not in AGENT_COMPONENTS:
        raise ValueError(f"unknown agent component {component_name!r}; valid: {list(AGENT_COMPONENTS)}")


def build_agent(device, actor_factory: ActorFactory, algo_factory: AlgorithmFactory, storage_factory: StorageFactory,
                envs=None) -> tuple[ActorProtocol, AlgorithmProtocol, StorageProtocol]:
    """Build an actor, its algorithm and a storage, in that order (each needs the ones before).

    Parameters
    ----------
    device : torch.device
        Where they live.
    actor_factory, algo_factory, storage_factory : callable
        ``actor_factory(device)``, ``algo_factory(device, actor, envs)``,
        ``storage_factory(device, actor, algorithm, envs)``.
    envs : TorchVecEnv or None
        A collector's training environments (None for a learner-side storage).

    Returns
    -------
    actor, algorithm, storage
    """
    actor = actor_factory(device)
    algo = algo_factory(device, actor, envs)
    return actor, algo, storage_factory(device, actor, algo, envs)


def rebuild_learner_component(holder, component_name, factory, envs=None):
    """Replace ``holder``'s actor, algorithm or storage and rebuild what depends on it.

    The actor keeps its weights' place in the algorithm: a new actor gets a new algorithm
    (optimizer over the new parameters) with the old hyperparameters; a new algorithm keeps
    the actor; a new storage leaves the rest untouched.

    Parameters
    ----------
    holder : object
        A worker with ``device``, ``actor``, ``algo`` and ``storage`` attributes.
    component_name : str
        "actor", "algo" or "storage".
    factory : callable
        Factory of the new component, with that component's factory signature.
    envs : TorchVecEnv or None
        The environments the holder's algorithm and storage are built with (a collector's
        training environments; None for a gradient worker).
    """
    dev = holder.device
    if component_name == "actor":
        hyper = holder.algo.hyperparameters
        holder.actor = factory(dev)
        holder.algo = type(holder.algo)(dev, holder.actor, envs, **hyper)
        holder.storage.actor = holder.actor
        holder.storage.algorithm = holder.algo
    elif component_name == "algo":
        holder.algo = factory(dev, holder.actor, envs)
        holder.storage.algorithm = holder.algo
    elif component_name == "storage":
        holder.storage = factory(dev, holder.actor, holder.algo, envs)
    else:
        raise ValueError(f"{component_name!r} is not one of the learner's components {list(LEARNER_COMPONENTS)}")


def rebuild_component(worker, component_name, factory, owner=None):
    """Replace one agent component of the collection worker ``worker`` and rebuild the ones
    that depend on it (see ``rebuild_learner_component``).

    Parameters
    ----------
    worker : CWorker
        The worker.
    component_name : str
        One of ``AGENT_COMPONENTS``.
    factory : callable
        Factory of the new component, with that component's factory signature.
    owner : object or None
        The gradient worker whose actor and algorithm ``worker`` borrows (see
        ``CWorker``'s ``borrow_from``): it replaced them already, ``worker`` takes its new ones.
    """
    check_component_name(component_name)
    if owner is not None and component_name in ("actor", "algo"):
        worker.actor, worker.algo = owner.actor, owner.algo
        worker.storage.actor = worker.actor
        worker.storage.algorithm = worker.algo
    elif component_name in LEARNER_COMPONENTS:
        rebuild_learner_component(worker, component_name, factory, worker.envs_train)
    else:
        old = getattr(worker, component_name)
        mode = "train" if component_name == "envs_train" else "test"
        setattr(worker, component_name, factory(worker.device, worker.index_worker, worker.index_parent, mode))
        if old is not None:
            old.close()


__all__ = ["AGENT_COMPONENTS", "LEARNER_COMPONENTS", "check_component_name", "build_agent",
           "rebuild_learner_component", "rebuild_component"]
