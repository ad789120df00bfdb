"""Checks of the scheme's numeric options, shared by ``Scheme`` (which checks everything
before any worker or Ray starts) and the worker sets (which are public too)."""

import numpy as np

import pytorchrl as prl

#: Every word accepted for a communication mode, by the Scheme and the configuration file
#: alike: ``prl.SYNC`` and ``prl.ASYNC`` (their values), the configuration's "sync" and
#: "async", and "synchronised", which pytorchrl's scripts pass (their argparse default).
COMMUNICATION_WORDS = {prl.SYNC: prl.SYNC, "sync": prl.SYNC, "synchronised": prl.SYNC,
                       prl.ASYNC: prl.ASYNC, "async": prl.ASYNC}


def check_communication(name, mode):
    """The communication mode ``mode`` as ``prl.SYNC`` or ``prl.ASYNC``.

    Parameters
    ----------
    name : str
        The option's name, for the message (e.g. "col_workers_communication").
    mode : str
        A key of ``COMMUNICATION_WORDS``: ``prl.SYNC`` ("synchronous"), "sync" or
        "synchronised"; ``prl.ASYNC`` ("asynchronous") or "async".

    Raises
    ------
    ValueError
        Any other value, naming the valid ones.
    """
    if isinstance(mode, str) and mode in COMMUNICATION_WORDS:
        return COMMUNICATION_WORDS[mode]
    raise ValueError(f"{name} must be prl.SYNC ({prl.SYNC!r}, also spelled 'sync' or 'synchronised') or prl.ASYNC "
                     f"({prl.ASYNC!r}, also spelled 'async'), got {mode!r}")


def check_int(name, value, low, optional=False):
    """Raise ValueError unless ``value`` is an integer >= ``low`` (a bool is not one).

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : object
        The value given (a Python or numpy integer).
    low : int
        Smallest valid value (0 or 1).
    optional : bool
        None is valid too.
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
        raise ValueError(f"{name} must be {'None or ' if optional else ''}{kind}, got {value!r}")


def merge_options(section, options, defaults):
    """``defaults`` updated with ``options``, after refusing keys it does not know.

    Parameters
    ----------
    section : str
        The options' name, for the message (e.g. "queues").
    options : dict or None
        The options given (None: all defaults).
    defaults : dict
        Every valid key and its default value.

    Raises
    ------
    ValueError
        An unknown key, naming the valid ones.
    """
    unknown = set(options or {}) - set(defaults)
    if unknown:
        raise ValueError(f"unknown {section} keys {sorted(unknown)}; valid: {sorted(defaults)}")
    return {**defaults, **(options or {})}


def check_non_negative(name, value):
    """Raise ValueError unless ``value`` is a number >= 0 (a bool is not one).

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : object
        The value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def check_fraction(name, value):
    """Raise ValueError unless ``value`` is a number in (0, 1].

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : object
        The value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


class Ineffective:
    """A scheme option set to a value that the chosen layout never uses.

    Attributes
    ----------
    option : str
        The option ("fraction_samples", "fraction_workers", "max_policy_lag", "max_grad_lag").
    value : object
        The value given.
    setting : str
        The layout option that makes it useless ("col_workers_communication",
        "num_col_workers", "grad_workers_communication", "num_grad_workers").
    current : object
        That option's value: "sync"/"async" for a communication, a count otherwise.
    needed : str
        The value of ``setting`` under which ``option`` acts, in words ("async", "2 or more").
    reason : str
        Why it cannot act, in a few words.
    """

    def __init__(self, option, value, setting, current, needed, reason):
        self.option, self.value, self.setting = option, value, setting
        self.current, self.needed, self.reason = current, needed, reason

    def __repr__(self):
        return f"Ineffective({self.option}={self.value!r}: {self.setting}={self.current!r})"


def ineffective_options(num_col_workers, col_async, num_grad_workers, grad_async, fraction_samples=1.0,
                        fraction_workers=1.0, max_policy_lag=None, max_grad_lag=None, col_compress=False,
                        grad_compress=False, decentralized=False, col_resources=None, grad_resources=None):
    """The options among the keyword arguments that have no effect in this layout (those
    left at their defaults are never listed). Shared by ``Scheme`` (which warns) and the
    configuration (which refuses), so that both follow the same rules.

    Parameters
    ----------
    num_col_workers : int
        Collection workers per gradient worker (1: the gradient worker collects itself).
    col_async : bool
        Asynchronous collection.
    num_grad_workers : int
        Gradient workers (1: the update worker computes the gradients itself).
    grad_async : bool
        Asynchronous gradients (A3C).
    fraction_samples, fraction_workers : float
        Preemption thresholds of synchronous collection.
    max_policy_lag : int or None
        Bound on the policy lag of asynchronous collection.
    max_grad_lag : int or None
        Bound on the lag of asynchronous gradients.
    col_compress, grad_compress : bool or str
        ``col_compress_data`` and ``grad_compress_data``: compression of what remote
        collection and gradient workers send (True, False or "auto").
    decentralized : bool
        ``decentralized_update_execution`` (DD-PPO): gradients are all-reduced by
        torch.distributed, not sent.
    col_resources, grad_resources : dict or None
        ``col_workers_resources`` and ``grad_workers_resources`` as given (None: not given):
        Ray resources of remote workers, which a worker in the learner's process never takes.

    Returns
    -------
    list of Ineffective
    """
    col_mode, grad_mode = ("async" if col_async else "sync"), ("async" if grad_async else "sync")
    out = []
    for option, value in (("fraction_samples", fraction_samples), ("fraction_workers", fraction_workers)):
        if value == 1.0:
            continue
        if col_async:
            out.append(Ineffective(option, value, "col_workers_communication", col_mode, "sync",
                                   "stragglers are cut in synchronous rounds only"))
        elif num_col_workers < 2:
            out.append(Ineffective(option, value, "num_col_workers", num_col_workers, "2 or more",
                                   "one collection worker has no stragglers to cut"))
    if max_policy_lag is not None:
        if not col_async:
            out.append(Ineffective("max_policy_lag", max_policy_lag, "col_workers_communication", col_mode, "async",
                                   "synchronous rounds collect with the current weights: the lag is always 0"))
        elif num_col_workers < 2:
            out.append(Ineffective("max_policy_lag", max_policy_lag, "num_col_workers", num_col_workers, "2 or more",
                                   "one collection worker collects in its gradient worker's process with the "
                                   "current weights: the lag is always 0"))
    if max_grad_lag is not None:
        if not grad_async:
            out.append(Ineffective("max_grad_lag", max_grad_lag, "grad_workers_communication", grad_mode, "async",
                                   "synchronous gradients are computed from the current weights"))
        elif num_grad_workers < 2:
            out.append(Ineffective("max_grad_lag", max_grad_lag, "num_grad_workers", num_grad_workers, "2 or more",
                                   "one gradient worker computes its gradients from the current weights"))
    if col_compress and num_col_workers < 2:
        out.append(Ineffective("col_compress_data", col_compress, "num_col_workers", num_col_workers, "2 or more",
                               "one collection worker runs in its gradient worker's process: its rollouts are "
                               "never sent"))
    if decentralized and num_grad_workers < 2:
        out.append(Ineffective("decentralized_update_execution", True, "num_grad_workers", num_grad_workers,
                               "2 or more", "one gradient worker has no peer to all-reduce its gradients with: "
                               "it applies its updates itself"))
    for option, resources, setting, count, words in (
            ("col_workers_resources", col_resources, "num_col_workers", num_col_workers,
             "one collection worker runs in its gradient worker's process"),
            ("grad_workers_resources", grad_resources, "num_grad_workers", num_grad_workers,
             "one gradient worker runs in the learner's process")):
        if resources is not None and count < 2:
            out.append(Ineffective(option, dict(resources), setting, count, "2 or more",
                                   f"{words}, which no Ray resources are reserved for"))
    if grad_compress:
        if num_grad_workers < 2:
            out.append(Ineffective("grad_compress_data", grad_compress, "num_grad_workers", num_grad_workers,
                                   "2 or more", "one gradient worker's gradients are applied in its process"))
        elif decentralized:
            out.append(Ineffective("grad_compress_data", grad_compress, "decentralized_update_execution", True,
                                   False, "DD-PPO's gradients are all-reduced by torch.distributed, never packed"))
    return out
