"""How the schema describes one key (:class:`Key`), and how a key is derived from the
signature and docstring of the component that takes it (:func:`derived`): the building
blocks of ``pytorchrl.config.schema``.
"""

import inspect

from pytorchrl.agent.factory import documented_kind, documented_parameters


class _Required:
    """Marker of a key without default: the configuration must give it."""

    def __repr__(self):
        return "required"


REQUIRED = _Required()

#: Kinds of values a key may hold, with the words used in error messages.
KINDS = {
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "str": "a string",
    "dict": "a mapping",
    "int_list": "a list of integers",
    "number_list": "a list of numbers",
    "str_list": "a list of strings",
    "bool_or_auto": "true, false or 'auto'",
    "resources": "a mapping of Ray resources",
    "any": "a value",
}


#: Ranges of well-known component parameters. The components document the type of their
#: parameters but not their range, which the configuration checks before anything starts.
PARAMETER_RANGES = {
    "lr": dict(low=0.0), "lr_v": dict(low=0.0), "lr_pi": dict(low=0.0), "eps": dict(low=0.0, low_inclusive=False), "gamma": dict(low=0.0, high=1.0),
    "num_epochs": dict(low=1), "num_mini_batch": dict(low=1), "mini_batch_size": dict(low=1),
    "clip_param": dict(low=0.0), "kl_coef": dict(low=0.0), "entropy_coef": dict(low=0.0),
    "value_loss_coef": dict(low=0.0),
    "max_grad_norm": dict(low=0.0), "test_every": dict(low=1), "num_test_episodes": dict(low=1),
    "size": dict(low=1), "gae_lambda": dict(low=0.0, high=1.0), "vec_env_size": dict(low=1),
    "vtrace_lambda": dict(low=0.0, high=1.0), "clip_rho_threshold": dict(low=0.0, low_inclusive=False),
    "clip_pg_rho_threshold": dict(low=0.0, low_inclusive=False),
    "clip_c_threshold": dict(low=0.0, low_inclusive=False),
    "num_col_workers": dict(low=1), "num_grad_workers": dict(low=0), "max_policy_lag": dict(low=0),
    "max_grad_lag": dict(low=0), "col_requests_in_flight": dict(low=1), "target_steps": dict(low=1),
    "batch_step_frequency": dict(low=1), "batch_episode_frequency": dict(low=1),
    "episode_block": dict(low=1),
    "max_worker_restarts": dict(low=0), "worker_restart_delay_s": dict(low=0.0),
    "target_episodes": dict(low=1), "cutoff": dict(low=0.0), "rolling_reward_length": dict(low=1),
    "start_step": dict(low=0),
    "end_step": dict(low=1), "min_relative_change": dict(low=0.0),
    "frame_stack": dict(low=1), "frame_skip": dict(low=0), "reward_delay": dict(low=1),
    "max_episode_steps": dict(low=0),
    "sequence_length": dict(low=1), "burn_in": dict(low=0), "priority_eta": dict(low=0.0, high=1.0),
    "gamma_intrinsic": dict(low=0.0, high=1.0), "ext_adv_coeff": dict(low=0.0), "int_adv_coeff": dict(low=0.0),
    "predictor_proportion": dict(low=0.0), "pre_normalization_steps": dict(low=0),
    "pre_normalization_length": dict(low=1),
    "rho": dict(low=0.0, high=1.0), "phi": dict(low=0.0, high=1.0), "alpha": dict(low=0.0),
    "total_buffer_demo_capacity": dict(low=1), "save_demos_every": dict(low=1),
    "num_agent_demos_to_save": dict(low=0), "num_value_demos_to_save": dict(low=0),
    "n_sampled_goal": dict(low=1), "strategy": dict(choices=("future", "final", "episode")),
    **{k: dict(low=0.0, low_inclusive=False) for k in ("dual_constraint", "kl_mean_constraint", "kl_var_constraint",
                                                       "kl_constraint")},
    **{k: dict(low=0.0) for k in ("alpha_scale", "alpha_mean_scale", "alpha_var_scale", "alpha_mean_max",
                                  "alpha_var_max", "alpha_max")},
    "mstep_iterations": dict(low=1), "sample_action_num": dict(low=1),
}


class Key:
    """Description of one configuration key.

    Parameters
    ----------
    kind : str
        One of ``KINDS``: what the value must be.
    default : object
        Value used when the key is absent; ``REQUIRED`` when it must be given.
    doc : str
        One line saying what the key means.
    choices : tuple or None
        Allowed values (for ``kind="str"``).
    low, high : float or None
        Inclusive bounds of a number (``low`` exclusive when ``low_inclusive`` is False).
    low_inclusive : bool
        Whether ``low`` itself is allowed.
    nullable : bool
        Whether ``null`` is allowed (it is whenever the default is None).
    aliases : dict or None
        Other words accepted for some of the ``choices``: word -> the choice it means (the
        resolved configuration holds the choice).
    """

    def __init__(self, kind, default=REQUIRED, doc="", choices=None, low=None, high=None,
                 low_inclusive=True, nullable=False, aliases=None):
        if kind not in KINDS:
            raise ValueError(f"unknown key kind {kind!r}; valid: {sorted(KINDS)}")
        self.kind = kind
        self.default = default
        self.doc = doc
        self.choices = tuple(choices) if choices is not None else None
        self.low, self.high, self.low_inclusive = low, high, low_inclusive
        self.nullable = nullable or default is None
        self.aliases = dict(aliases or {})

    @property
    def required(self):
        """True when the configuration must give this key."""
        return self.default is REQUIRED

    @property
    def expected(self):
        """Words describing an acceptable value, for error messages."""
        text = ("one of " + ", ".join(repr(c) for c in self.choices)) if self.choices else KINDS[self.kind]
        return text + (" or null" if self.nullable else "")

    @property
    def range_text(self):
        """The allowed range in words ("in [0, 1]", ">= 1"), or "" when unbounded."""
        if self.low is not None and self.high is not None:
            return f"in {'[' if self.low_inclusive else '('}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{'>=' if self.low_inclusive else '>'} {self.low:g}"
        if self.high is not None:
            return f"<= {self.high:g}"
        return ""

    def describe(self):
        """One line: kind, default, allowed values or range, doc."""
        parts = [self.expected]
        if self.range_text:
            parts.append(self.range_text)
        parts.append("required" if self.required else f"default {self.default!r}")
        return f"{', '.join(parts)}. {self.doc}"

    def __repr__(self):
        return f"Key({self.kind!r}, default={self.default!r})"


def _kind_of(type_text, default):
    """Key kind from a documented type ("float or None") or, failing that, from the default."""
    kind = documented_kind(type_text)
    if kind is not None:
        return kind
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "number"
    if isinstance(default, str):
        return "str"
    return "any"


def derived(obj, name, signature_of=None, **overrides):
    """A Key for parameter ``name`` of ``obj``, read from its signature and docstring.

    Parameters
    ----------
    obj : type or callable
        Component whose docstring documents ``name`` (a class: its bases' docstrings too).
    name : str
        Parameter name.
    signature_of : callable or None
        Callable whose signature gives the default (default: ``obj.__init__`` for a class,
        ``obj`` for a function).
    **overrides
        Key arguments that replace the derived ones (``doc``, ``default``, ``choices``...).
        Ranges come from ``PARAMETER_RANGES`` unless given here.
    """
    fn = signature_of or (obj.__init__ if inspect.isclass(obj) else obj)
    param = inspect.signature(fn).parameters.get(name)
    if param is None:
        raise KeyError(f"{getattr(fn, '__qualname__', fn)} has no parameter {name!r}")
    default = REQUIRED if param.default is inspect.Parameter.empty else param.default
    type_text, doc = documented_parameters(obj).get(name, ("", ""))
    args = dict(kind=_kind_of(type_text, default), default=default, doc=doc,
                nullable="none" in type_text.lower())
    args.update(PARAMETER_RANGES.get(name, {}))
    args.update(overrides)
    return Key(**args)


_COMPONENT_ARGS = ("self", "device", "actor", "algorithm", "envs")


def component_keys(cls):
    """A Key (``derived``) for every constructor parameter of the component class ``cls``,
    except those the library passes itself (device, actor, algorithm, envs)."""
    names = [n for n in inspect.signature(cls.__init__).parameters if n not in _COMPONENT_ARGS]
    return {n: derived(cls, n) for n in names}


#: Said of a parameter that a hot-swap (``pytorchrl set``, a schedule) may not change.
FIXED_DOC = " Fixed once built: a hot-swap to another value is refused."


def mark_fixed(keys, fixed):
    """``keys`` with ``FIXED_DOC`` added to the doc of those named in ``fixed``."""
    for name in fixed:
        if name in keys:
            keys[name].doc += FIXED_DOC
    return keys
