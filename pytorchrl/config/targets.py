"""Which parameters can change while a run trains, and how a name written by a user
(``lr``, ``algorithm.lr``, ``storage.gae_lambda``) is found among them.

Read by the configuration (the ``pbt`` section names such parameters) and by live control
(``pytorchrl.tools.live_control``: ``pytorchrl set RUN_DIR lr=1e-4``), which share the rules.
"""

#: Sections whose parameters can change while training, and their hot-swap method.
TARGETS = ("algorithm", "storage")


def resolve_key(key, algo_params, storage_params):
    """``(target, name)`` of a requested key.

    Parameters
    ----------
    key : str
        "lr" (looked up among the algorithm's, then the storage's parameters),
        "algorithm.lr" or "storage.gae_lambda".
    algo_params, storage_params : dict
        Current parameters of the algorithm and of the storage.

    Raises
    ------
    ValueError
        Unknown or ambiguous name, or a section that cannot change while training.
    """
    parts = key.split(".")
    if len(parts) == 2 and parts[0] in TARGETS:
        target, name = parts
        valid = algo_params if target == "algorithm" else storage_params
        if name not in valid:
            raise ValueError(f"unknown {target} parameter {name!r}; valid: {', '.join(sorted(valid))}")
        return target, name
    if len(parts) != 1:
        raise ValueError(f"cannot change {key!r} while training: live changes are algorithm and storage "
                         f"parameters (lr, algorithm.clip_param, storage.gae_lambda)")
    in_algo, in_storage = key in algo_params, key in storage_params
    if in_algo and in_storage:
        raise ValueError(f"{key!r} is both an algorithm and a storage parameter: write algorithm.{key} "
                         f"or storage.{key}")
    if not (in_algo or in_storage):
        raise ValueError(f"unknown parameter {key!r}; algorithm parameters: {', '.join(sorted(algo_params))}; "
                         f"storage parameters: {', '.join(sorted(storage_params))}")
    return ("algorithm" if in_algo else "storage"), key
