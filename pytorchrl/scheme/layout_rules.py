"""The rules of which collection layouts allow what, written once.

A layout is described by a plain dict of scheme options (``LAYOUT_DEFAULTS`` lists them,
with the configuration file's names and words). Each :class:`LayoutRule` has a name, a
predicate that is true when a layout breaks it, and a one-line message naming the cause.
The configuration (``pytorchrl.config.validate_scheme``) turns a broken rule into a
``ConfigError``, ``Scheme`` and ``CWorkerSet`` into a ``ValueError``: all three walk
``LAYOUT_RULES``, so a layout is refused by the same rule, for the same reason, whichever
way it is written. No other module writes these conditions. A ``CWorkerSet`` is not given
every setting (it knows neither the gradient workers nor EXARL's SYNC batching): it checks
the rules whose ``worker_set`` is true, the Scheme that builds it checks the others.

A message names options through placeholders, so that each caller spells them the way its
users write them (``scheme.col_workers_communication: async`` in a configuration file,
``communication=prl.ASYNC`` for a ``CWorkerSet``):

- ``{option}``: the option with the layout's value,
- ``{option=word}``: the option with the value ``word`` (a configuration word),
- ``{option:name}``: the option's name alone.

Every message starts with the option the rule blames (``LayoutRule.blames``), with its
value, so that a configuration error can be reported at that key.

This module imports nothing above ``pytorchrl.scheme``: the configuration reads it.
"""

import re

import pytorchrl as prl
from pytorchrl.scheme.base.checks import COMMUNICATION_WORDS

#: Every setting a rule may read, and its value when a caller does not give it. The names
#: and words are the configuration file's (``scheme`` section), except
#: ``remote_col_workers``: the collection workers that run as Ray actors (0 when the
#: gradient worker collects itself, i.e. ``num_col_workers: 1``). ``num_grad_workers`` 0 is
#: a collection-only scheme.
LAYOUT_DEFAULTS = {
    "remote_col_workers": 0,
    "col_workers_communication": "sync",
    "col_requests_in_flight": 1,
    "col_weights": "push",
    "col_policy": "learned",
    "data_path": "direct",
    "fraction_samples": 1.0,
    "fraction_workers": 1.0,
    "col_worker_proxy": False,
    "episode_block": None,
    "batch_episode_frequency": None,
    "num_grad_workers": 1,
    "grad_workers_communication": "sync",
    "decentralized_update_execution": False,
}



def layout_settings(**options):
    """The settings a rule reads: ``LAYOUT_DEFAULTS`` updated with ``options``.

    Parameters
    ----------
    **options
        Keys of ``LAYOUT_DEFAULTS``. ``col_workers_communication`` and
        ``grad_workers_communication`` may be ``prl.SYNC``, ``prl.ASYNC`` or any word of
        ``COMMUNICATION_WORDS`` (they are stored as the configuration's "sync" or "async").

    Raises
    ------
    KeyError
        An option that no rule reads (a misspelt name would silently pass every rule).
    """
    unknown = set(options) - set(LAYOUT_DEFAULTS)
    if unknown:
        raise KeyError(f"unknown layout settings {sorted(unknown)}; valid: {', '.join(LAYOUT_DEFAULTS)}")
    settings = {**LAYOUT_DEFAULTS, **options}
    for key in ("col_workers_communication", "grad_workers_communication"):
        if settings[key] in COMMUNICATION_WORDS:
            settings[key] = "async" if COMMUNICATION_WORDS[settings[key]] == prl.ASYNC else "sync"
    return settings


def settings_of_scheme_section(scheme):
    """The layout settings of a resolved ``scheme`` configuration section (a dict with every
    key of the section)."""
    num = scheme["num_col_workers"]
    return layout_settings(remote_col_workers=0 if num == 1 else num,
                           **{k: scheme[k] for k in LAYOUT_DEFAULTS if k != "remote_col_workers"})


def _async(s):
    return s["col_workers_communication"] == "async"


_PLACEHOLDER = re.compile(r"\{(\w+)(?:=([\w.]+)|:(name))?\}")


class LayoutRule:
    """One rule of the layouts: what breaks it, and why that cannot run.

    Parameters
    ----------
    name : str
        Identifier of the rule (``"replay_server_needs_async"``).
    blames : str
        The setting the problem is reported at (a key of ``LAYOUT_DEFAULTS``).
    refuses : callable
        ``refuses(settings) -> bool``: True when the layout ``settings`` (see
        ``layout_settings``) breaks the rule.
    message : str
        One line naming the cause, starting with ``{blames}``; options are written as
        placeholders (see the module docstring).
    worker_set : bool
        Whether ``CWorkerSet`` is given every setting the rule reads, and so checks it
        (False: only the configuration and ``Scheme`` do).
    """

    def __init__(self, name, blames, refuses, message, worker_set=True):
        if not message.startswith("{" + blames + "}"):
            raise ValueError(f"rule {name}: its message must start with {{{blames}}}, the option it blames")
        self.name, self.blames, self.refuses, self.message = name, blames, refuses, message
        self.worker_set = worker_set

    def explain(self, settings, spell, name_of=None):
        """The message, with every option written by ``spell``.

        Parameters
        ----------
        settings : dict
            The layout (``layout_settings``).
        spell : callable
            ``spell(option, value) -> str``: how the caller's users write ``option`` set to
            ``value`` (a configuration word).
        name_of : callable or None
            ``name_of(option) -> str``: how they write the option's name (None: as is).
        """
        def fill(match):
            option, word, bare = match.groups()
            if bare:
                return name_of(option) if name_of else option
            return spell(option, settings[option] if word is None else _word(word))
        return _PLACEHOLDER.sub(fill, self.message)

    def __repr__(self):
        return f"LayoutRule({self.name!r})"


def _word(text):
    """A value written in a message placeholder: an integer, or a word."""
    return int(text) if text.isdigit() else text


def _proxied(s):
    """The layout asks for worker proxies and has remote collectors for them."""
    return s["col_worker_proxy"] and s["remote_col_workers"] > 0


def _proxy_passes_rollouts_only(s):
    """A proxy would only pass rollouts on one at a time: the direct data path of
    asynchronous collection, or a synchronous round (whose rollouts the learner's storage
    takes)."""
    return not _async(s) or s["data_path"] == "direct"


#: Every rule, in the order they are checked (the first broken one is reported).
LAYOUT_RULES = (
    LayoutRule(
        "decentralized_updates_need_sync_gradients", "decentralized_update_execution",
        lambda s: s["decentralized_update_execution"] and s["grad_workers_communication"] != "sync",
        "{decentralized_update_execution} needs {grad_workers_communication=sync}: every gradient worker applies "
        "the gradients all-reduced in each step",
        worker_set=False),
    LayoutRule(
        "requests_in_flight_need_async", "col_requests_in_flight",
        lambda s: s["col_requests_in_flight"] > 1 and not _async(s),
        "{col_requests_in_flight} needs {col_workers_communication=async} (a synchronous round sends each "
        "collector one request)"),
    LayoutRule(
        "episode_block_or_batch_episode_frequency", "episode_block",
        lambda s: s["episode_block"] is not None and s["batch_episode_frequency"] is not None,
        "{episode_block} and {batch_episode_frequency:name} both set the episodes of a rollout: give one "
        "({episode_block:name} for asynchronous collection, {batch_episode_frequency:name} otherwise)",
        worker_set=False),
    LayoutRule(
        "episode_block_needs_async", "episode_block",
        lambda s: s["episode_block"] is not None and not _async(s),
        "{episode_block} needs asynchronous collection ({col_workers_communication=async}): a synchronous round "
        "already waits for every collector (use {batch_episode_frequency:name} for the episodes of its rollouts)"),
    LayoutRule(
        "episode_block_needs_one_request", "episode_block",
        lambda s: s["episode_block"] is not None and s["col_requests_in_flight"] != 1,
        "{episode_block} needs {col_requests_in_flight=1}: a block round sends every collector one request with "
        "the same weights"),
    LayoutRule(
        "worker_proxy_needs_remote_collectors", "col_worker_proxy",
        lambda s: s["col_worker_proxy"] and s["remote_col_workers"] == 0,
        "{col_worker_proxy} needs remote collectors: with {remote_col_workers=0} the one collector runs in its "
        "learner's process"),
    LayoutRule(
        "worker_proxy_cuts_no_stragglers", "col_worker_proxy",
        lambda s: _proxied(s) and not _async(s) and min(s["fraction_samples"], s["fraction_workers"]) < 1.0,
        "{col_worker_proxy} does not cut stragglers (the proxy hands a node's rollouts over together): leave "
        "{fraction_samples:name} and {fraction_workers:name} at 1"),
    LayoutRule(
        "worker_proxy_with_inference_server", "col_worker_proxy",
        lambda s: _proxied(s) and s["col_policy"] == "server" and _proxy_passes_rollouts_only(s),
        "{col_worker_proxy} has nothing to share: with {col_policy=server} the collectors load no weights, and "
        "their rollouts go to the learner without it (it passes on rollouts only to a data server, in "
        "asynchronous collection)"),
    LayoutRule(
        "worker_proxy_with_pulled_weights", "col_worker_proxy",
        lambda s: _proxied(s) and s["col_weights"] == "pull" and _proxy_passes_rollouts_only(s),
        "{col_worker_proxy} has nothing to share: with {col_weights=pull} the collectors pull their weights from "
        "the weight board, which Ray already fetches once per node, and their rollouts go to the learner "
        "without it (it passes on rollouts only to a data server, in asynchronous collection)"),
    LayoutRule(
        "pull_needs_async", "col_weights",
        lambda s: s["col_weights"] == "pull" and s["remote_col_workers"] > 0 and not _async(s),
        "{col_weights}: pulled weights need asynchronous collection ({col_workers_communication=async}): a "
        "synchronous round collects every rollout with the same weights"),
    LayoutRule(
        "data_server_needs_training", "data_path",
        lambda s: s["data_path"] in ("replay_server", "queues") and s["num_grad_workers"] == 0,
        "{data_path} with {num_grad_workers=0} (collection only): nothing takes the rollouts out of it; use "
        "{data_path=direct}",
        worker_set=False),
    LayoutRule(
        "queues_need_remote_collectors", "data_path",
        lambda s: s["data_path"] == "queues" and s["remote_col_workers"] == 0,
        "{data_path} needs remote collectors: with {remote_col_workers=0} the one collector runs in its gradient "
        "worker's process and hands its rollouts over directly",
        worker_set=False),
    LayoutRule(
        "replay_server_needs_async", "data_path",
        lambda s: s["data_path"] == "replay_server" and s["remote_col_workers"] > 0 and not _async(s),
        "{data_path} with remote collection workers needs asynchronous collection "
        "({col_workers_communication=async}): a synchronous round would wait for inserts that only the waiting "
        "learner's samples admit"),
    LayoutRule(
        "queues_need_async", "data_path",
        lambda s: s["data_path"] == "queues" and s["remote_col_workers"] > 0 and not _async(s),
        "{data_path} needs asynchronous collection ({col_workers_communication=async}): a synchronous round "
        "would wait for puts that only the waiting learner's pops admit"),
    LayoutRule(
        "pull_with_inference_server", "col_weights",
        lambda s: s["col_weights"] == "pull" and s["col_policy"] == "server",
        "{col_weights}: with {col_policy=server} the collectors act through the inference server and load no "
        "weights; remove it"),
    LayoutRule(
        "inference_server_needs_one_learner", "col_policy",
        lambda s: s["col_policy"] == "server" and s["num_grad_workers"] > 1,
        "{col_policy} needs one gradient worker ({num_grad_workers=1}): the server acts with one learner's weights",
        worker_set=False),
    LayoutRule(
        "inference_server_with_queues", "col_policy",
        lambda s: s["col_policy"] == "server" and s["data_path"] == "queues",
        "{col_policy} with {data_path=queues} is not supported: use {data_path=direct} with the inference server "
        "(preset exarl-seed), or collectors that act themselves on the queue path"),
)

#: The rules by name.
RULES_BY_NAME = {rule.name: rule for rule in LAYOUT_RULES}


def broken_rules(settings, worker_set=False):
    """The rules of ``LAYOUT_RULES`` that the layout ``settings`` (``layout_settings``)
    breaks, in order (an empty list: the layout may run). ``worker_set``: only the rules a
    ``CWorkerSet`` checks (``LayoutRule.worker_set``)."""
    return [rule for rule in LAYOUT_RULES if (rule.worker_set or not worker_set) and rule.refuses(settings)]
