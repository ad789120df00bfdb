"""EXARL's shared work counter of the queue data path (``pytorchrl.scheme.servers.queues``):
the run's budget of episodes or env steps, claimed by the requests of every collector set,
and the record of active actors."""

import math


class WorkCounter:
    """EXARL's shared work counter and its record of active actors, for every collector of
    every gradient worker (the queue server holds one; it is not thread-safe by itself: the
    server guards it).

    A collector set claims the episodes of each request before it sends it (``claim``) and
    settles the claim when the request reports (``settle``): the episodes the rollout
    finished are then handed over, and the ones it did not finish (a long episode goes on in
    the next rollout) are free to be claimed again. So the episodes handed over plus those
    claimed never pass the budget, whichever collectors do the work.

    Parameters
    ----------
    collectors : iterable of tuple
        (gradient worker index, collector index) of every collector.

    Attributes
    ----------
    episodes, steps : int or None
        The budget: finished episodes, env steps (None: no limit).
    received, samples : int
        Finished episodes and env steps handed over (episodes lost with a dead server are
        taken off, ``release``: they are run again).
    claimed : int
        Episodes the requests out may still finish.
    requests : dict
        Collector -> [requests out, episodes they claimed]: a collector is active while it
        has a request out (EXARL's bitmap of active actors, one entry per actor).
    """

    def __init__(self, collectors):
        self.episodes = self.steps = None
        self.received = self.samples = self.claimed = 0
        self.requests = {tuple(c): [0, 0] for c in collectors}

    @property
    def has_budget(self):
        """Whether a budget of episodes or env steps was set."""
        return self.episodes is not None or self.steps is not None

    def left(self):
        """Episodes that may still be claimed (``math.inf`` without an episode budget), 0
        once the env steps handed over reach the step budget."""
        if self.steps is not None and self.samples >= self.steps:
            return 0
        if self.episodes is None:
            return math.inf
        return max(0, self.episodes - self.received - self.claimed)

    def claim(self, collector, wanted):
        """Claim the episodes of one request of ``collector``.

        Parameters
        ----------
        collector : tuple
            (gradient worker index, collector index).
        wanted : int or None
            Episodes the request would finish at most (None: not bounded, a request of
            env steps: then it may go out while episodes are left to hand over).

        Returns
        -------
        (bool, int or None)
            Whether the request may go out, and the episodes it may finish (``wanted``,
            fewer when fewer are left; None: not bounded).
        """
        left = self.left()
        if left <= 0:
            return False, None
        granted = wanted if wanted is None or left == math.inf else int(min(wanted, left))
        entry = self.requests[tuple(collector)]
        entry[0] += 1
        entry[1] += granted or 0
        self.claimed += granted or 0
        return True, granted

    def settle(self, collector, claimed, episodes, samples):
        """A request of ``collector`` that claimed ``claimed`` episodes reported: ``episodes``
        finished episodes and ``samples`` env steps were handed over (0 and 0 when its
        rollout was lost: they are run again)."""
        entry = self.requests[tuple(collector)]
        entry[0] = max(0, entry[0] - 1)
        entry[1] = max(0, entry[1] - int(claimed or 0))
        self.claimed = max(0, self.claimed - int(claimed or 0))
        self.received += int(episodes)
        self.samples += int(samples)

    def release(self, episodes):
        """Take ``episodes`` handed over back (lost with a dead server): they are run again."""
        self.received = max(0, self.received - int(episodes))

    def reset(self, collectors):
        """Forget the requests of ``collectors`` (their gradient worker died with them): what
        they claimed is free again."""
        for c in collectors:
            entry = self.requests[tuple(c)]
            self.claimed = max(0, self.claimed - entry[1])
            entry[0] = entry[1] = 0

    def active(self, collector):
        """Whether ``collector`` has a request out."""
        return self.requests[tuple(collector)][0] > 0

    def finished(self, collectors):
        """Whether none of ``collectors`` is active and nothing is left to claim: they will
        hand nothing more over (a budget is set)."""
        return self.has_budget and self.left() <= 0 and not any(self.active(c) for c in collectors)
