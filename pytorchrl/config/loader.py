"""Reading configuration files and ``key=value`` overrides."""

import copy
import os
import re

import yaml

from pytorchrl.config.validate import ConfigError, validate_config


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads 1e-4 as a number and refuses duplicate keys.

    PyYAML follows YAML 1.1, where a float needs a dot: ``lr: 1e-4`` would be the string
    "1e-4". Users write it all the time, so exponent-only floats are numbers here.
    """

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def parse_yaml(text, source="<string>"):
    """Parse YAML ``text`` (numbers like 1e-4 included).

    Parameters
    ----------
    text : str
        YAML document.
    source : str
        Name of the document (a file name) for error messages.

    Raises
    ------
    ConfigError
        One line naming ``source``, the line and the problem.
    """
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(where, f"invalid YAML: {problem}") from None


def load_yaml(path):
    """Load the YAML file ``path`` as a configuration mapping.

    Raises
    ------
    ConfigError
        Missing or unreadable file, YAML syntax error (naming the line), or a document that
        is not a mapping.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(str(path), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read: {exc}") from None
    data = parse_yaml(text, str(path))
    if data is None:
        raise ConfigError(str(path), "the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"expected a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(text):
    """Split ``"section.key=value"`` into (["section", "key"], parsed value).

    The value is read as YAML (``2`` is a number, ``[64, 64]`` a list, ``null`` None).
    """
    if "=" not in text:
        raise ConfigError("", f"override {text!r}: expected KEY=VALUE (e.g. algorithm.lr=1e-4)")
    path, _, value_text = text.partition("=")
    parts = path.strip().split(".")
    if not all(parts):
        raise ConfigError("", f"override {text!r}: empty key in {path!r}")
    return parts, parse_yaml(value_text, f"override {text!r}")


def apply_overrides(config, overrides):
    """Return a copy of ``config`` with the ``key=value`` strings of ``overrides`` applied.

    Keys are dotted paths (``scheme.num_col_workers``); a list element is addressed by its
    index (``schedules.0.end``). Missing sections are created; unknown keys are left for
    validation to refuse, with a suggestion.

    Parameters
    ----------
    config : dict
        Loaded configuration (not modified).
    overrides : list of str
        ``"path=value"`` strings, applied in order.
    """
    config = copy.deepcopy(config)
    for text in overrides:
        parts, value = parse_override(text)
        node = config
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = ".".join(parts[:depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(where, f"no element {part!r} in a list of {len(node)} "
                                             f"(override {text!r})")
                part = int(part)
            elif not isinstance(node, dict):
                raise ConfigError(".".join(parts[:depth]), f"is not a section (override {text!r})")
            if last:
                node[part] = value
            else:
                if isinstance(node, dict) and node.get(part) is None:
                    node[part] = {}
                node = node[part]
    return config


def _override_source(error, overrides):
    """The override that set the key ``error`` is about, or None."""
    for text in reversed(overrides):
        key = text.partition("=")[0].strip()
        if error.path == key or error.path.startswith(key + ".") or key.startswith(error.path + "."):
            return f"override {text}"
    return None


def load_config(path, overrides=()):
    """Load, override and validate a configuration file.

    Parameters
    ----------
    path : str
        YAML file.
    overrides : list of str
        ``"key=value"`` strings applied after loading (see ``apply_overrides``).

    Returns
    -------
    dict
        The resolved configuration (see ``validate_config``).

    Raises
    ------
    ConfigError
        Naming the key, the value and where it came from (the file or the override).
    """
    raw = apply_overrides(load_yaml(path), list(overrides))
    try:
        return validate_config(raw)
    except ConfigError as exc:
        raise exc.with_source(_override_source(exc, list(overrides)) or os.path.basename(str(path))) from None


class _Dumper(yaml.SafeDumper):
    """Block-style mappings; lists of plain values on one line ([64, 64])."""


def _represent_list(dumper, data):
    flat = all(not isinstance(v, (dict, list)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def dump_config(config):
    """The resolved configuration as YAML text (keys in schema order)."""
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
