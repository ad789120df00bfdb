"""What an algorithm does on the collector side: what collectors store with each step,
the warm-up before the first rollout, the pre-processing and bootstrap of a finished
rollout, the state collectors accumulate, and the routing of the computations with
weights among these to an inference server (SEED: the collector then holds no weights).

``CollectorSide`` is that part of ``Algorithm``; its instances need ``name`` (for the
messages). The defaults ask nothing of the collectors.
"""


class CollectorSide:
    """Collector-side declarations and calls of an algorithm (see the module docstring)."""

    #: Keys of ``Actor.act``'s extras that collectors store with every step.
    acting_extras = ()
    #: Data keys that ``preprocess_rollout`` adds to a rollout (storages keep them).
    preprocessed_keys = ()
    #: Methods of this algorithm that its collector-side hooks (``preprocess_rollout``,
    #: bootstraps) compute with weights, through ``collector_call``: numpy arrays (or None)
    #: in, a numpy array out, no per-collector state read or changed. A collector acting
    #: through an inference server runs them on the server, with its current weights.
    server_calls = ()
    #: Attributes of one process only: a copy (deepcopy, pickle) leaves them out. A route
    #: leads to a server of this process (or to its handle's client): a copy computes with
    #: its own weights.
    process_local_attributes = ("_collector_route",)

    @property
    def collector_modules(self):
        """Names of ``learner_modules`` that collectors need for ``preprocess_rollout``: sent
        with every weight broadcast (``get_acting_weights``). None by default."""
        return ()

    def preprocess_rollout(self, data):
        """Collector-side pre-processing of a finished rollout, before it is sent.

        Runs on the collector with the weights it acted with (the actor's and those of
        ``collector_modules``); may add per-transition arrays under ``preprocessed_keys``.
        The default changes nothing.

        Parameters
        ----------
        data : dict of tensors
            The rollout as the storage hands it over (``Storage.get_data``).

        Returns
        -------
        dict of tensors
            The rollout to send.
        """
        return data

    def route_collector_calls(self, program):
        """Run ``collector_call`` through ``program`` instead of this algorithm's weights.

        Parameters
        ----------
        program : object or None
            Anything with ``call_algorithm(name, *args)`` (``ServerActing``: the collector's
            inference server). None: back to this algorithm's own weights.
        """
        self._collector_route = program

    def collector_call(self, name, *args):
        """``self.<name>(*args)``, or the same call run by the program set by
        ``route_collector_calls`` (the inference server's copy of this algorithm).

        Parameters
        ----------
        name : str
            One of ``server_calls``.
        *args : np.ndarray or None
            The method's arguments.

        Raises
        ------
        ValueError
            ``name`` is not one of ``server_calls``.
        """
        if name not in self.server_calls:
            raise ValueError(f"{self.name}.collector_call: {name!r} is not one of its server_calls "
                             f"{list(self.server_calls)}")
        route = getattr(self, "_collector_route", None)
        if route is None:
            return getattr(self, name)(*args)
        return route.call_algorithm(name, *args)

    def warm_up(self, envs):
        """What a collector does with its training environments before its first rollout
        (RND_PPO: observation statistics from random steps); nothing by default.

        Parameters
        ----------
        envs : TorchVecEnv
            The collector's training environments.

        Returns
        -------
        bool
            Whether ``envs`` were stepped (the collector then resets them).
        """
        return False

    def collector_state(self):
        """What a collector's algorithm accumulates over the run, in plain types (numbers,
        numpy arrays, lists, dicts), for checkpoints; None (the default): nothing."""
        return None

    def load_collector_state(self, state):
        """Restore a ``collector_state`` (a resumed run's collectors).

        Parameters
        ----------
        state : dict or None
            What ``collector_state`` returned.

        Raises
        ------
        ValueError
            ``state`` is not None: this algorithm keeps no collector state (the checkpoint
            was saved by another algorithm).
        """
        if state is not None:
            raise ValueError(f"{self.name} keeps no collector state; got one with keys {sorted(state)}")

    def bootstrap(self, obs, state=None):
        """What a rollout needs at its end, computed from observations (N, ...) numpy.

        Returns the values (N, 1) used to bootstrap returns, or None when the algorithm
        bootstraps at training time (replay-based algorithms). Called by on-policy
        storages for the observation after a rollout's last step and for the final
        observations of truncated episodes.

        Parameters
        ----------
        obs : np.ndarray
            The observations (N, ...).
        state : object or None
            The recurrent state of those rows (recurrent actors), else None.
        """
        return None


__all__ = ["CollectorSide"]
