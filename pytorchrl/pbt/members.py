"""Where the members of a population (``pytorchrl.pbt.population``) run: in this process,
trained one after another (``InProcessMembers``), or as Ray actors side by side
(``RayMembers``). Both answer the population's calls alike."""

from pytorchrl.pbt.member import Member, member_name

#: Seconds between two looks at Ctrl-C while members train (Ray actors): the wait ends
#: as soon as they answer, this only bounds how late a stop request goes out.
STOP_CHECK_S = 0.5


class MemberLost(RuntimeError):
    """A member's process is gone (its Ray actor died); one-line message."""


class InProcessMembers:
    """Members in this process, trained one after another (``pbt.execution: interleaved``).

    Parameters
    ----------
    stop_requested : callable
        The population's Ctrl-C flag, read by every member between its updates.
    while_training : callable or None
        Called by every member between its updates (the population's progress line).
    """

    uses_ray = False

    def __init__(self, stop_requested, while_training=None):
        self.stop_requested = stop_requested
        self.while_training = while_training or (lambda: None)
        self.members = {}

    def _between_updates(self):
        self.while_training()
        return self.stop_requested()

    def add(self, index, config, run_dir, resume=None):
        """Create member ``index`` (not yet started)."""
        self.members[index] = Member(index, config, run_dir, resume, self._between_updates)

    def progress(self):
        """Index -> the member's progress snapshot (``Member.progress``)."""
        return {index: member.progress() for index, member in self.members.items()}

    def call(self, calls):
        """Run ``{index: (method, args)}`` on the members, one after another.

        Returns
        -------
        dict
            index -> (result, exception): the exception the method raised, else None.
        """
        results = {}
        for index, (method, args) in calls.items():
            try:
                results[index] = (getattr(self.members[index], method)(*args), None)
            except Exception as exc:   # returned to the population, which decides
                results[index] = (None, exc)
        return results

    def exploit(self, loser, source, changes):
        """Member ``loser`` takes over member ``source``'s policy, then gets ``changes``
        (see ``Member.exploit``); returns its answer."""
        state = self.members[source].state()
        return self.members[loser].exploit(state, member_name(source), changes)

    def remove(self, index):
        """Close and forget member ``index``."""
        member = self.members.pop(index)
        try:
            member.close()
        except Exception:   # a member dropped for a failure may fail to close too
            pass

    def close(self):
        """Close every member."""
        for index in list(self.members):
            self.remove(index)


class RayMembers:
    """Members as Ray actors, trained side by side (``pbt.execution: ray``).

    Parameters
    ----------
    ray : module
        Ray, initialised.
    resources : dict
        ``Worker.as_remote`` arguments of each member's actor.
    stop_requested : callable
        The population's Ctrl-C flag, read while waiting on the members.
    while_training : callable or None
        Called every ``STOP_CHECK_S`` while waiting on the members (the population's
        progress line).
    """

    uses_ray = True

    def __init__(self, ray, resources, stop_requested, while_training=None):
        self.ray = ray
        self.cls = Member.as_remote(**resources)
        self.stop_requested = stop_requested
        self.while_training = while_training or (lambda: None)
        self.members = {}

    def progress(self):
        """Index -> the member's progress snapshot (``Member.progress``, answered in the
        actor's control thread while it trains); a member that does not answer is left out."""
        refs = {index: actor.progress.options(concurrency_group=Member.CONTROL).remote()
                for index, actor in self.members.items()}
        out = {}
        for index, ref in refs.items():
            try:
                out[index] = self.ray.get(ref, timeout=STOP_CHECK_S * 4)
            except Exception:   # a member whose process died: the population finds out from its call
                continue
        return out

    def add(self, index, config, run_dir, resume=None):
        """Create member ``index``'s actor (not yet started)."""
        self.members[index] = self.cls.remote(index, config, run_dir, resume)

    def call(self, calls):
        """Run ``{index: (method, args)}`` on the members' actors, side by side. A stop
        requested meanwhile (Ctrl-C) is sent to each of them, which ends its interval at
        its next update.

        Returns
        -------
        dict
            index -> (result, exception): ``MemberLost`` for a member whose process died,
            else the exception the method raised, else None.
        """
        refs = {index: getattr(self.members[index], method).remote(*args) for index, (method, args) in calls.items()}
        pending, stop_sent = list(refs.values()), False
        while pending:
            _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=STOP_CHECK_S)
            if pending and not stop_sent and self.stop_requested():
                stop_sent = True
                for index in refs:
                    self.members[index].request_stop.options(concurrency_group=Member.CONTROL).remote()
            if pending and not stop_sent:
                self.while_training()
        return {index: self._get(index, ref) for index, ref in refs.items()}

    def _get(self, index, ref):
        from ray.exceptions import RayActorError, RayTaskError

        from pytorchrl.scheme.base.ray_runtime import as_worker_error
        try:
            return self.ray.get(ref), None
        except RayActorError as exc:
            return None, MemberLost(str(as_worker_error(exc, f"the process of {member_name(index)}")))
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, RayActorError):   # a member whose state it needed is gone
                return None, MemberLost(str(as_worker_error(cause, "the process of a member it copied")))
            return None, cause if isinstance(cause, Exception) else as_worker_error(exc, member_name(index))

    def exploit(self, loser, source, changes):
        """Member ``loser`` takes over member ``source``'s policy, then gets ``changes``:
        the state goes from one actor to the other through the object store (it is never
        fetched here). Returns the loser's answer; raises ``MemberLost`` (naming the member)
        or the loser's error."""
        state = self.members[source].state.remote()
        (result, exc), = self.call({loser: ("exploit", (state, member_name(source), changes))}).values()
        if exc is not None:
            raise exc
        return result

    def remove(self, index):
        """Close member ``index`` and end its actor."""
        actor = self.members.pop(index)
        try:
            self.ray.get(actor.close.remote(), timeout=60)
        except Exception:   # a member dropped for a failure may fail to close too
            pass
        self.ray.kill(actor)

    def close(self):
        """Close every member and end the actors."""
        actors, self.members = self.members, {}
        refs = [actor.close.remote() for actor in actors.values()]
        try:
            self.ray.wait(refs, num_returns=len(refs), timeout=60)
        finally:
            for actor in actors.values():
                self.ray.kill(actor)
