"""Live control of a running job through files in ``<run_dir>/control/``.

``pytorchrl set RUN_DIR lr=1e-4`` writes a request file ``<id>.request`` (JSON, written
to a temporary name and renamed, so the job never reads half a request). The training
loop looks into the directory between learner steps, at most every
``CHECK_EVERY_S`` seconds of wall time (one ``os.scandir``: nothing runs in between, no
thread, no sleeping), validates the request, applies it on every worker with the
Learner's hot-swap API, and answers with ``<id>.ack`` (JSON: ``status`` "applied" at env
step N, or "refused" with the reason). An invalid request changes nothing and the run
goes on.

While a job runs, ``control/trainer.json`` names its process, so that ``pytorchrl set``
can say at once that no job is running instead of waiting for an answer that will not come.

Files rather than a socket: they need no port, work wherever the run directory is
visible (a shared file system on a cluster), and leave a record of every request.
"""

import json
import os
import socket
import time
import uuid

# TARGETS and resolve_key are the configuration's (the pbt section names the same parameters);
# TARGETS stays importable from here.
from pytorchrl.config.targets import TARGETS, resolve_key  # noqa: F401
from pytorchrl.tools import CONTROL

#: Seconds of wall time between two looks into the control directory by a running job.
CHECK_EVERY_S = 0.5
#: File of a running job in the control directory.
TRAINER_FILE = "trainer.json"
REQUEST_SUFFIX = ".request"
ACK_SUFFIX = ".ack"

class ControlError(Exception):
    """A control request that cannot be sent or was not answered (one-line message)."""


def control_dir(run_dir):
    """The control directory of ``run_dir``."""
    return os.path.join(run_dir, CONTROL)


def _write_json_atomically(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _read_json(path):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------------- client side
def running_trainer(run_dir):
    """The ``trainer.json`` record of the job running in ``run_dir``, or None.

    A record left by a job that was killed (its process is gone, on this host) counts as
    no job.
    """
    path = os.path.join(control_dir(run_dir), TRAINER_FILE)
    try:
        info = _read_json(path)
    except (OSError, ValueError):
        return None
    if info.get("host") == socket.gethostname():
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return None
        except (PermissionError, KeyError, ValueError):
            pass
    return info


def send_request(run_dir, assignments):
    """Write a request to change parameters of the job running in ``run_dir``.

    Parameters
    ----------
    run_dir : str
        Run directory of the job.
    assignments : list of (str, object)
        ``(key, value)`` pairs: key "lr", "algorithm.lr" or "storage.gae_lambda"; the
        value as parsed from YAML.

    Returns
    -------
    str
        The request id (the acknowledgement is ``<id>.ack``).
    """
    directory = control_dir(run_dir)
    os.makedirs(directory, exist_ok=True)
    # Time first, so that requests are applied in the order they were made.
    request_id = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _write_json_atomically(os.path.join(directory, request_id + REQUEST_SUFFIX),
                           {"id": request_id, "assignments": [[k, v] for k, v in assignments],
                            "created": time.time()})
    return request_id


def wait_for_ack(run_dir, request_id, timeout, poll_s=0.1):
    """Wait up to ``timeout`` seconds for the acknowledgement of a request; returns it (a dict).

    The client polls the file: the file system offers no portable notification, the wait
    is bounded, and it is this short-lived command that waits, never the training job.
    If no answer comes, the request is withdrawn (so that a job started later does not
    apply it) and ControlError is raised.

    Parameters
    ----------
    run_dir : str
        Run directory of the job.
    request_id : str
        Id returned by ``send_request``.
    timeout : float
        Seconds to wait.
    poll_s : float
        Seconds between two looks.
    """
    directory = control_dir(run_dir)
    request = os.path.join(directory, request_id + REQUEST_SUFFIX)
    try:
        return _wait(run_dir, request_id, timeout, poll_s)
    except KeyboardInterrupt:
        _withdraw(request)   # the user gave up on it: the job must not apply it later
        raise


def _wait(run_dir, request_id, timeout, poll_s):
    directory = control_dir(run_dir)
    ack = os.path.join(directory, request_id + ACK_SUFFIX)
    request = os.path.join(directory, request_id + REQUEST_SUFFIX)
    deadline = time.monotonic() + timeout
    while True:
        if os.path.exists(ack):
            result = _read_json(ack)
            os.remove(ack)
            return result
        if time.monotonic() >= deadline:
            break
        if running_trainer(run_dir) is None and not os.path.exists(ack):
            _withdraw(request)
            raise ControlError(f"the job in {run_dir} ended before answering request {request_id}")
        time.sleep(poll_s)
    if not _withdraw(request):
        # The job took the request just now: its answer follows within one learner step.
        grace = time.monotonic() + 10.0
        while time.monotonic() < grace:
            if os.path.exists(ack):
                result = _read_json(ack)
                os.remove(ack)
                return result
            time.sleep(poll_s)
    raise ControlError(f"no running job answered within {timeout:g} s (request withdrawn); "
                       f"is the job in {run_dir} still training?")


def _withdraw(path):
    """Remove a request file; False if it was gone already (taken by the job)."""
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------------ job side
def apply_changes(learner, assignments, check=None):
    """Validate every change of a request, then apply them all (or none).

    Parameters
    ----------
    learner : Learner
        The running learner; changes go through ``update_algorithm_parameter`` /
        ``update_storage_parameter`` and so reach every worker.
    assignments : list of (str, object)
        Requested ``(key, value)`` pairs.
    check : callable or None
        ``check(target, name, value) -> value``: an extra validation (the configuration
        schema's ranges), raising ValueError/TypeError.

    Returns
    -------
    list of (str, str, object)
        ``(target, name, value)`` of each change applied.

    Raises
    ------
    ValueError, TypeError
        The reason of a refusal; nothing was changed.
    """
    local = learner.update_worker.local_worker
    current = {"algorithm": local.algo.hyperparameters, "storage": local.storage.hyperparameters}
    if not assignments:
        raise ValueError("the request holds no change")
    planned = []
    for key, value in assignments:
        target, name = resolve_key(str(key), current["algorithm"], current["storage"])
        if check is not None:
            value = check(target, name, value)
        # Every change is checked (fixed parameters included) before the first is applied.
        value = learner.control.check(target, name, value, target + " parameter")
        planned.append((target, name, value))
    for target, name, value in planned:
        if target == "algorithm":
            learner.update_algorithm_parameter(name, value)
        else:
            learner.update_storage_parameter(name, value)
    return planned


class ControlServer:
    """The job side: announces the job, and answers requests between learner steps.

    Parameters
    ----------
    run_dir : str
        Run directory of the job.
    handle : callable
        ``handle(request_id, assignments) -> dict``: apply a request and return the
        acknowledgement (with ``status``); called from the training loop.
    check_every : float
        Seconds of wall time between two looks into the directory.
    """

    def __init__(self, run_dir, handle, check_every=CHECK_EVERY_S):
        self.directory = control_dir(run_dir)
        self.handle = handle
        self.check_every = check_every
        self._next_check = 0.0
        os.makedirs(self.directory, exist_ok=True)
        for entry in os.scandir(self.directory):
            # Requests addressed to an earlier job whose sender gave up on them.
            if entry.name.endswith(REQUEST_SUFFIX):
                _withdraw(entry.path)
        _write_json_atomically(os.path.join(self.directory, TRAINER_FILE),
                               {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})

    def poll(self, now=None):
        """Answer the pending requests if ``check_every`` seconds passed since the last look.

        Parameters
        ----------
        now : float or None
            ``time.monotonic()`` (read here when None).

        Returns
        -------
        list of dict
            The acknowledgements written.
        """
        now = time.monotonic() if now is None else now
        if now < self._next_check:
            return []
        self._next_check = now + self.check_every
        pending = sorted(e.name for e in os.scandir(self.directory) if e.name.endswith(REQUEST_SUFFIX))
        acks = []
        for name in pending:
            path = os.path.join(self.directory, name)
            request_id = name[:-len(REQUEST_SUFFIX)]
            try:
                request = _read_json(path)
                assignments = [(str(k), v) for k, v in request["assignments"]]
            except FileNotFoundError:
                continue   # withdrawn by its sender meanwhile
            except (OSError, ValueError, KeyError, TypeError) as exc:
                ack = {"id": request_id, "status": "refused", "reason": f"unreadable request: {exc}"}
            else:
                ack = self.handle(request_id, assignments)
            ack["id"] = request_id
            _write_json_atomically(os.path.join(self.directory, request_id + ACK_SUFFIX), ack)
            _withdraw(path)
            acks.append(ack)
        return acks

    def close(self):
        """Say that the job no longer runs (``pytorchrl set`` then fails at once)."""
        try:
            os.remove(os.path.join(self.directory, TRAINER_FILE))
        except FileNotFoundError:
            pass
