"""Checks of single values and mappings against the schema's ``Key`` descriptions, and the
helpers every part of the validation writes its messages with (``pytorchrl.config.validate``
checks a whole configuration with them).
"""

import copy
import difflib
import math

from pytorchrl.config.errors import ConfigError
from pytorchrl.config.keys import KINDS, Key
from pytorchrl.config.schema import RESOURCE_KEYS


def suggestion(word, candidates):
    """" (did you mean 'x'?)" for the closest of ``candidates`` to ``word``, or ""."""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def join_path(path, key):
    """The dotted path of ``key`` (a name or a list index) under ``path`` ("" at the top)."""
    return f"{path}.{key}" if path else str(key)


def show_value(value):
    """``value`` as a message shows it: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_number(value):
    """Whether ``value`` is an int or a float (a bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Kinds of keys holding a non-empty list, and the kind of their items.
LIST_KINDS = {"int_list": "int", "number_list": "number", "str_list": "str"}


def check_value(key, value, path):
    """Check ``value`` against ``key`` and return it normalised.

    Parameters
    ----------
    key : Key
        Description of the key.
    value : object
        Value read from the configuration.
    path : str
        Dotted path of the key, for messages.

    Raises
    ------
    ConfigError
        Wrong type, value not allowed, or out of range.
    """
    if value is None:
        if key.nullable:
            return None
        raise ConfigError(path, f"expected {key.expected}, got null")
    kind = key.kind
    bad = ConfigError(path, f"expected {key.expected}, got {show_value(value)}")
    if key.choices is not None:
        value = key.aliases.get(value, value) if isinstance(value, str) else value
        if value not in key.choices:
            raise ConfigError(path, f"expected {key.expected}, got {show_value(value)}"
                                    f"{suggestion(value, key.choices)}")
        return value
    if kind == "int":
        # 1e5 reads as a float in YAML; an integral float is the integer the user meant.
        if not is_number(value) or not float(value).is_integer():
            raise bad
        value = int(value)
    elif kind == "number":
        if not is_number(value) or math.isnan(value):
            raise bad
        value = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad
    elif kind == "str":
        if not isinstance(value, str):
            raise bad
    elif kind == "dict":
        if not isinstance(value, dict):
            raise bad
        value = copy.deepcopy(value)
    elif kind in LIST_KINDS:
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError(path, f"expected a non-empty {KINDS[kind].replace('a list', 'list', 1)}, got "
                                    f"{show_value(value)}")
        item = Key(LIST_KINDS[kind], low=key.low, high=key.high, low_inclusive=key.low_inclusive)
        return [check_value(item, v, join_path(path, i)) for i, v in enumerate(value)]
    elif kind == "bool_or_auto":
        if not (isinstance(value, bool) or value == "auto"):
            raise bad
    elif kind == "resources":
        return _check_resources(value, path)
    _check_range(key, value, path)
    return value


def _check_range(key, value, path):
    if not is_number(value) or not key.range_text:
        return
    too_low = key.low is not None and (value < key.low if key.low_inclusive else value <= key.low)
    too_high = key.high is not None and value > key.high
    if too_low or too_high:
        raise ConfigError(path, f"must be {key.range_text}, got {show_value(value)}")


def _check_resources(value, path):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping of Ray resources, got {show_value(value)}")
    for name, amount in value.items():
        where = join_path(path, name)
        if name not in RESOURCE_KEYS:
            raise ConfigError(where, f"unknown resource{suggestion(name, RESOURCE_KEYS)}; "
                                     f"valid: {', '.join(RESOURCE_KEYS)}")
        if name == "resources":
            if not isinstance(amount, dict):
                raise ConfigError(where, f"expected a mapping of custom resources, got {show_value(amount)}")
            for custom, n in amount.items():
                check_value(Key("number", low=0.0), n, join_path(where, custom))
        elif amount is not None:
            check_value(Key("number", low=0.0), amount, where)
    return copy.deepcopy(value)


def check_mapping(data, keys, path, owner=None):
    """Check a mapping against ``keys`` (name -> Key) and return it resolved.

    Unknown keys are refused with the closest valid name; missing keys take their
    default, or are refused when required.

    Parameters
    ----------
    data : dict or None
        The mapping read from the configuration (None reads as empty).
    keys : dict
        name -> Key of every valid key, in the order of the result.
    path : str
        Dotted path of the mapping, for messages ("" for the top level).
    owner : str or None
        Name of the component the keys belong to, for messages ("PPO").
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping of keys, got {show_value(data)}")
    for name in data:
        if name not in keys:
            what = f"unknown key of {owner}" if owner else "unknown key"
            raise ConfigError(join_path(path, name), f"{what}{suggestion(name, keys)}; valid: "
                                                 f"{', '.join(map(str, keys))}")
    out = {}
    for name, key in keys.items():
        if name in data:
            out[name] = check_value(key, data[name], join_path(path, name))
        elif key.required:
            raise ConfigError(join_path(path, name), "missing required key")
        else:
            out[name] = copy.deepcopy(key.default)
    return out


def check_named_section(data, name_key, keys_of, path):
    """Check a section whose valid keys depend on its ``name`` (algorithm, storage) and
    return it resolved.

    Parameters
    ----------
    data : dict or None
        The section as read (None reads as empty).
    name_key : Key
        The ``name`` key (its default names the component when ``name`` is absent).
    keys_of : callable
        ``keys_of(name)`` -> dict name -> Key of the component's other keys.
    path : str
        The section's name, for messages.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping of keys, got {show_value(data)}")
    name = check_value(name_key, data["name"], join_path(path, "name")) if "name" in data \
        else check_mapping({}, {"name": name_key}, path)["name"]
    return check_mapping(data, {"name": name_key, **keys_of(name)}, path, owner=name)


def strict_key(key):
    """``key`` without null: the type and range a value set while training must have (null is
    never one to switch to)."""
    return Key(key.kind, doc=key.doc, choices=key.choices, aliases=key.aliases, low=key.low, high=key.high,
               low_inclusive=key.low_inclusive)
