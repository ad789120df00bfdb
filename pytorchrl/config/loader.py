"""Reading configurations: YAML files, the agent presets they name, ``key=value`` overrides.

Nothing here validates (``pytorchrl.config.validate`` does, and ``pytorchrl.config.resolve``
joins the two): a configuration read here may still hold any key and value.

Agent presets (``preset: NAME`` at the top of a file, see ``pytorchrl.config.agent_presets``).
A preset's values fill every section first; the keys written in the configuration file
(and ``key=value`` overrides) win, key by key::

    preset: PPO-Atari
    env: {id: BreakoutNoFrameskip-v4}
    learner: {target_steps: 1000000}

A preset file may start from another preset (``preset: A2C`` in the A3C file): the same
rule applies, its own keys win. When the file names another algorithm than the preset's
(``algorithm: {name: A2C}``), the preset's ``algorithm`` section and its schedules (which
name that algorithm's parameters) are dropped rather than merged, and its ``actor`` and
``storage`` sections too when the other algorithm is of the other family (on-policy or
off-policy); likewise the ``storage`` section for another storage name and the ``env``
section for another ``env.family``.
"""

import copy
import re

import yaml

from pytorchrl.config.agent_presets import get_agent_preset
from pytorchrl.config.errors import ConfigError


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


#: Key of a section (and its value when absent) whose change replaces the preset's section
#: instead of merging into it.
_IDENTITY = {"algorithm": ("name", None), "storage": ("name", None), "env": ("family", "gym")}

#: Preset file path -> its values as read (presets are read once per process).
_PRESET_VALUES = {}


def agent_preset_values(preset):
    """The configuration an agent preset's file holds (a copy), as written (its own
    ``preset`` unexpanded).

    Parameters
    ----------
    preset : AgentPreset or str
        The preset, or its name (see ``pytorchrl.config.agent_presets``).
    """
    if isinstance(preset, str):
        preset = get_agent_preset(preset)
    if preset.path not in _PRESET_VALUES:
        _PRESET_VALUES[preset.path] = load_yaml(preset.path)
    return copy.deepcopy(_PRESET_VALUES[preset.path])


def resolve_agent_preset(preset):
    """An agent preset's values with the presets it starts from expanded (not yet
    validated); ``preset``: an ``AgentPreset`` or its name."""
    return apply_agent_preset(agent_preset_values(preset))


def _replaces(below, value, section):
    """Whether the written ``value`` of ``section`` replaces the preset's instead of merging into it."""
    if section not in _IDENTITY:
        return False
    key, absent = _IDENTITY[section]
    return value.get(key) is not None and below.get(key, absent) != value[key]


def merge_configs(base, over):
    """``over`` written on top of ``base`` (neither is modified): sections merged key by key
    (``over`` wins), anything else replaced; see the module documentation for the sections
    that a different algorithm, storage or family replaces."""
    out = copy.deepcopy(base)
    for name, value in over.items():
        below = out.get(name)
        if isinstance(value, dict) and isinstance(below, dict) and not _replaces(below, value, name):
            out[name] = {**below, **copy.deepcopy(value)}
        else:
            out[name] = copy.deepcopy(value)
    if isinstance(base.get("algorithm"), dict) and isinstance(over.get("algorithm"), dict) \
            and _replaces(base["algorithm"], over["algorithm"], "algorithm"):
        # The preset's schedules name its algorithm's parameters; its actor and storage
        # belong to its family of algorithms (on-policy rollouts or replay).
        dropped = ["schedules"]
        if _on_policy(base["algorithm"]["name"]) != _on_policy(over["algorithm"]["name"]):
            dropped += ["actor", "storage"]
        for name in dropped:
            if name in over:
                out[name] = copy.deepcopy(over[name])    # the file's section alone, not merged
            else:
                out.pop(name, None)
    return out


def _on_policy(algorithm_name):
    """Whether the algorithm learns from on-policy rollouts (None for an unknown name: the
    validation refuses it with the valid names)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    cls = ALGORITHMS.get(algorithm_name)
    return None if cls is None else cls.on_policy


def apply_agent_preset(config):
    """``config`` with its top-level ``preset`` expanded: the preset's values, then the
    configuration's own keys. A configuration without ``preset`` is returned as is.

    Parameters
    ----------
    config : dict
        A configuration as loaded (it is not modified).

    Raises
    ------
    KeyError
        For an unknown preset name (see ``get_agent_preset``).
    """
    name = config.get("preset")
    if name is None:
        return config
    return merge_configs(resolve_agent_preset(name), config)


class _Dumper(yaml.SafeDumper):
    """Block-style mappings; lists of plain values on one line ([64, 64])."""


def _represent_list(dumper, data):
    flat = all(not isinstance(v, (dict, list)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def dump_config(config):
    """The resolved configuration as YAML text (keys in schema order)."""
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
