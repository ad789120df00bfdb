"""Helpers for training scripts written with argparse, as pytorchrl's example scripts use them.

::

    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", "-c", type=open, action=LoadFromFile, help="YAML file of arguments")
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    cleanup_log_dir(args.log_dir)
    save_argparse(args, os.path.join(args.log_dir, "conf.yaml"), exclude=["conf"])
"""

import argparse
import os
import shutil

import yaml

__all__ = ["LoadFromFile", "save_argparse", "cleanup_log_dir"]


class LoadFromFile(argparse.Action):
    """argparse action that reads a YAML file of argument values into the namespace.

    Use it with ``type=open`` (the value is then an open file) or with a plain path. Every
    key of the file must be an argument the parser knows (an unknown key is refused: it
    would otherwise be silently ignored); the file's values replace the defaults and the
    values given before it on the command line, and arguments given after it win.
    Numbers like ``1e-4`` are read as numbers.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        from pytorchrl.config.loader import parse_yaml

        name = getattr(values, "name", values)
        if not str(name).endswith((".yaml", ".yml")):
            parser.error(f"{option_string or self.dest}: the configuration file must end with .yaml or .yml, "
                         f"got {name}")
        try:
            if hasattr(values, "read"):
                with values as f:
                    text = f.read()
            else:
                with open(values) as f:
                    text = f.read()
        except OSError as exc:
            parser.error(f"{option_string or self.dest}: cannot read {name}: {exc.strerror or exc}")
        try:
            config = parse_yaml(text, source=str(name)) or {}
        except ValueError as exc:
            parser.error(str(exc))
        if not isinstance(config, dict):
            parser.error(f"{name}: expected a mapping of argument names to values")
        unknown = [k for k in config if k not in namespace]
        if unknown:
            parser.error(f"{name}: unknown argument(s) {', '.join(map(str, unknown))}")
        namespace.__dict__.update(config)


def save_argparse(args, filename, exclude=None):
    """Write the arguments of ``args`` (an argparse Namespace) to the YAML file ``filename``.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed arguments.
    filename : str
        A ``.yaml`` or ``.yml`` path.
    exclude : str or list of str or None
        Arguments left out (e.g. the one naming the configuration file itself).
    """
    if not str(filename).endswith((".yaml", ".yml")):
        raise ValueError(f"the configuration file must end with .yaml or .yml, got {filename}")
    if isinstance(exclude, str):
        exclude = [exclude]
    values = {k: v for k, v in vars(args).items() if k not in set(exclude or ())}
    # An open file (type=open) is written as its name.
    values = {k: getattr(v, "name", v) if hasattr(v, "read") else v for k, v in values.items()}
    with open(filename, "w") as f:
        yaml.safe_dump(values, f, sort_keys=False)


def cleanup_log_dir(log_dir):
    """Empty ``log_dir`` (remove it with everything in it) and create it again.

    Parameters
    ----------
    log_dir : str
        The directory of a run's logs.
    """
    if os.path.isdir(log_dir):
        shutil.rmtree(log_dir)
    elif os.path.exists(log_dir):
        raise ValueError(f"{log_dir} exists and is not a directory")
    os.makedirs(log_dir, exist_ok=True)
