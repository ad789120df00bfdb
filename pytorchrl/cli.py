"""The ``pytorchrl`` console command.

::

    pytorchrl train CONF [KEY=VALUE ...] [--run-dir DIR] [--dry-run]
    pytorchrl keys

Subcommands are registered in ``build_parser``; each has a handler ``<name>_command(args)``
that returns the exit status. Exit statuses: 0 success, 2 an error the user can fix (bad
configuration, environment, resources, command line), 130 interrupted (Ctrl-C).
"""

import argparse
import csv
import datetime
import math
import os
import shutil
import signal
import sys
import threading
import time

import pytorchrl
from pytorchrl.agent.env import EnvError
from pytorchrl.config import ConfigError, build_learner, describe_schema, dump_config, load_config
from pytorchrl.scheme.base.ray_runtime import ResourceError, WorkerError

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

#: File names inside a run directory.
MODEL = "model.state_dict"
CHECKPOINT = "checkpoint.pt"

#: Failures caused by the configuration or the machine rather than by a bug: reported in
#: one line, without traceback, at any time.
USER_ERRORS = (ConfigError, EnvError, ResourceError, WorkerError)


class UsageError(Exception):
    """A problem the user can fix, reported as one line ``error: <message>``."""


# ------------------------------------------------------------------------------ progress
class MetricsCSV:
    """``metrics.csv``: one row per log interval, one column per metric key.

    Metric keys can appear late (the first test reward, a loss after the first update);
    the file is then rewritten with the wider header, so every row stays aligned.

    Parameters
    ----------
    path : str
        File to write.
    """

    def __init__(self, path):
        self.path = path
        self.columns = []
        self.rows = []

    def append(self, metrics):
        """Add one row (a dict ``key -> value``)."""
        self.rows.append(dict(metrics))
        new = [k for k in metrics if k not in self.columns]
        if new or len(self.rows) == 1:
            self.columns += new
            tmp = self.path + ".tmp"
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, self.columns)
                writer.writeheader()
                writer.writerows(self.rows)
            os.replace(tmp, self.path)
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.columns).writerow(metrics)


def format_progress(metrics, target_steps):
    """One progress line from a ``Learner.get_metrics`` dict.

    Parameters
    ----------
    metrics : dict
        ``"Group/Name" -> value`` (with episode and time metrics).
    target_steps : int
        Steps of the whole run, for the percentage.
    """
    steps = metrics["Scheme/EnvSteps"]
    parts = [f"[{metrics.get('Time/Elapsed', 0):6.0f}s] steps {steps:,}/{target_steps:,} "
             f"({100 * steps / target_steps:.0f}%)"]
    if "Time/FPS" in metrics:
        parts.append(f"{metrics['Time/FPS']:,.0f} steps/s")
    for key, label in (("Episodes/TrainReward", "train return"), ("Episodes/TestReward", "test return"),
                       ("Algorithm/Loss", "loss"), ("Algorithm/Entropy", "entropy"),
                       ("Scheme/PolicyLag", "policy lag")):
        value = metrics.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            parts.append(f"{label} {value:.4g}")
    return " | ".join(parts)


class ProgressLog:
    """Prints a progress line and appends a row to ``metrics.csv`` every ``log_every`` seconds.

    Parameters
    ----------
    learner : Learner
        The learner whose metrics are logged.
    run_dir : str
        Where ``metrics.csv`` is written.
    log_every : float
        Seconds between two log lines.
    stream : file
        Where progress lines are printed.
    """

    def __init__(self, learner, run_dir, log_every, stream=None):
        self.learner = learner
        self.csv = MetricsCSV(os.path.join(run_dir, "metrics.csv"))
        self.log_every = log_every
        self.stream = stream or sys.stdout
        self.last = time.monotonic()

    def maybe_log(self, force=False):
        """Log now if ``log_every`` seconds passed since the last line (or if ``force``)."""
        now = time.monotonic()
        if not force and now - self.last < self.log_every:
            return None
        self.last = now
        # One get_metrics call per interval: it consumes the loss statistics.
        metrics = self.learner.get_metrics(add_algo_metrics=True, add_episodes_metrics=True,
                                           add_scheme_metrics=True, add_time_metrics=True)
        self.csv.append(metrics)
        print(format_progress(metrics, self.learner.target_steps), file=self.stream, flush=True)
        return metrics


# ----------------------------------------------------------------------------- training
class StopOnInterrupt:
    """Context manager turning the first Ctrl-C into a request to stop between updates.

    Stopping at an update boundary leaves the weights and optimizer consistent for the
    model saved on the way out; a second Ctrl-C raises KeyboardInterrupt at once. Outside
    the main thread, or where SIGINT is not Python's default handler (ignored by a
    background shell job, or handled by the embedding program), nothing is changed.

    The handler only sets ``requested``: printing from it could re-enter a write to the
    same stream that the signal interrupted.
    """

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False


def make_run_dir(config, conf_path):
    """Create the run directory and write the resolved configuration there.

    Parameters
    ----------
    config : dict
        Resolved configuration; its ``run_dir`` (None: ``runs/<conf stem>-<timestamp>``)
        names the directory and is set to the directory chosen.
    conf_path : str
        The configuration file (its stem names the default directory).

    Returns
    -------
    (str, bool)
        The directory and whether it was created now.
    """
    run_dir = config["run_dir"]
    if run_dir is None:
        stem = os.path.splitext(os.path.basename(conf_path))[0]
        base = os.path.join("runs", f"{stem}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
        run_dir, n = base, 1
        while os.path.exists(run_dir):
            n += 1
            run_dir = f"{base}-{n}"
    if os.path.exists(os.path.join(run_dir, "config.yaml")):
        raise UsageError(f"run directory {run_dir} already holds a run (config.yaml); "
                         f"choose another with --run-dir")
    created = not os.path.exists(run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    config["run_dir"] = run_dir
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        f.write(f"# Resolved configuration of this run, written by pytorchrl {pytorchrl.__version__} "
                f"on {datetime.datetime.now():%Y-%m-%d %H:%M:%S} from {conf_path}\n")
        f.write(dump_config(config))
    return run_dir, created


def _build(config, run_dir, remove_run_dir_on_failure):
    try:
        return build_learner(config, log_dir=run_dir)
    except BaseException as exc:
        if remove_run_dir_on_failure:
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, ConfigError):
            # Raised by a component's constructor: a value the schema let through.
            raise UsageError(str(exc)) from exc
        raise


def run_training(config, run_dir, stream=None, remove_run_dir_on_failure=False):
    """Train the Learner of ``config`` in ``run_dir`` and return the exit status.

    Logs progress and metrics every ``learner.log_every`` seconds, saves the model (and a
    full checkpoint) every ``learner.save_every`` seconds and at the end, evaluates it on
    the test environments if any, writes ``summary.yaml`` and always stops the scheme.
    Ctrl-C saves the model and the checkpoint and returns ``EXIT_INTERRUPTED``.

    Parameters
    ----------
    config : dict
        Resolved configuration.
    run_dir : str
        Existing run directory (``make_run_dir``); the model and logs go there.
    stream : file or None
        Where progress is printed (default: stdout).
    remove_run_dir_on_failure : bool
        Delete ``run_dir`` if the scheme cannot be built (set when it was created for
        this run: a directory holding only the configuration would pose as a run).
    """
    stream = stream or sys.stdout
    learner = _build(config, run_dir, remove_run_dir_on_failure)
    opts = config["learner"]

    def save():
        # The weights for users, and the full state for resuming the run.
        learner.save_checkpoint(CHECKPOINT, extra={"config": config})
        return learner.save_model(MODEL)

    try:
        progress = ProgressLog(learner, run_dir, opts["log_every"], stream)
        last_save = time.monotonic()
        print(f"training {config['algorithm']['name']} on {config['env']['id']} for "
              f"{opts['target_steps']:,} env steps; run directory {run_dir}", file=stream, flush=True)
        try:
            with StopOnInterrupt() as stop:
                while not learner.done() and not stop.requested:
                    learner.step()
                    progress.maybe_log()
                    if opts["save_every"] and time.monotonic() - last_save >= opts["save_every"]:
                        save()
                        last_save = time.monotonic()
                if stop.requested:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            progress.maybe_log(force=True)
            path = save()
            print(f"interrupted at {learner.num_samples_collected:,} env steps; model saved to {path}",
                  file=stream, flush=True)
            return EXIT_INTERRUPTED
        metrics = progress.maybe_log(force=True)
        summary = {"env_steps": learner.num_samples_collected, "updates": learner.num_updates,
                   "seconds": round(metrics["Time/Elapsed"], 2),
                   "train_return": _finite(metrics.get("Episodes/TrainReward")), "model": save()}
        print(f"done: {summary['env_steps']:,} env steps, {summary['updates']:,} updates in "
              f"{summary['seconds']:.1f} s; model saved to {summary['model']}", file=stream, flush=True)
        if config["env"]["test_env"] and opts["final_eval"]:
            episodes = opts["final_eval_episodes"] or config["algorithm"].get("num_test_episodes")
            summary["test_return"] = float(learner.evaluate(episodes))
            summary["test_episodes"] = episodes
            print(f"evaluation: mean return {summary['test_return']:.1f} over {episodes} episodes "
                  f"(deterministic)", file=stream, flush=True)
        with open(os.path.join(run_dir, "summary.yaml"), "w") as f:
            f.write(dump_config(summary))
        return EXIT_OK
    finally:
        learner.stop()


def _finite(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def train_command(args):
    """Handler of `train`: validate, make the run directory, train; returns the exit status."""
    config = load_config(args.conf, args.overrides)
    if args.run_dir is not None:
        config["run_dir"] = args.run_dir
    if args.dry_run:
        sys.stdout.write(dump_config(config))
        return EXIT_OK
    run_dir, created = make_run_dir(config, args.conf)
    return run_training(config, run_dir, remove_run_dir_on_failure=created)


def keys_command(args):
    """Handler of `keys`: print every configuration key; returns the exit status."""
    print(describe_schema())
    return EXIT_OK


# ------------------------------------------------------------------------ command line
TRAIN_DESCRIPTION = """\
Train an agent described by a YAML configuration file. The configuration is validated
before anything starts; a progress line is printed every learner.log_every seconds;
Ctrl-C stops at the end of the current update and saves the model."""

TRAIN_EPILOG = """\
overrides:
  KEY=VALUE pairs change the configuration after it is loaded; KEY is a dotted path
  (section.key, schedules.0.end) and VALUE is read as YAML:
    pytorchrl train conf.yaml algorithm.lr=1e-4 scheme.num_col_workers=4 actor.hidden_sizes=[128,128]
  'pytorchrl keys' lists every key with its type, default and meaning.

run directory (default runs/<CONF stem>-<timestamp>, or run_dir in the file):
  config.yaml       the resolved configuration (every default filled in)
  metrics.csv       one row every learner.log_every seconds, one column per metric
  model.state_dict  the actor's weights (at the end, on Ctrl-C, every learner.save_every s)
  checkpoint.pt     the full training state, saved with the model
  summary.yaml      steps, time, final train return and deterministic test return
  monitor/          one CSV line per finished episode (env.monitor)

exit status: 0 done, 2 error (configuration, environment, resources), 130 interrupted"""


def add_train_arguments(parser):
    """Add the options of ``train`` that follow the configuration file to ``parser``.

    Shared by ``pytorchrl train`` and the repository's ``train.py`` (which names the file
    with ``--conf``).
    """
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="configuration overrides, e.g. algorithm.lr=1e-4 (see below)")
    parser.add_argument("--run-dir", metavar="DIR", default=None,
                        help="directory of the run (must not hold a run already); overrides run_dir")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate, print the resolved configuration and exit without training")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of errors instead of one line")


def build_parser():
    """The argument parser of the ``pytorchrl`` command, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="pytorchrl", description="pytorchrl: distributed reinforcement learning in PyTorch.",
        epilog="Run 'pytorchrl COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"pytorchrl {pytorchrl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    train = sub.add_parser(
        "train", help="train an agent described by a YAML configuration file",
        description=TRAIN_DESCRIPTION,
        epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("conf", metavar="CONF", help="YAML configuration file (e.g. examples/configs/ppo_cartpole.yaml)")
    add_train_arguments(train)
    train.set_defaults(handler=train_command)
    keys = sub.add_parser("keys", help="list every configuration key with its type, default and meaning",
                          description="List every section and key of the configuration file.")
    keys.set_defaults(handler=keys_command, debug=False)
    return parser


def parse_args(parser, argv):
    """Parse ``argv``; KEY=VALUE words after options are overrides too.

    argparse does not accept positionals after an option once the positional list has
    been consumed (``train c.yaml --run-dir d a=1``); such words are collected here.
    """
    args, extra = parser.parse_known_args(argv)
    stray = [w for w in extra if w.startswith("-") or "=" not in w or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    return args


def run_command(args):
    """Run the handler of parsed ``args``, turning user errors into one line and a status."""
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except (UsageError,) + USER_ERRORS as exc:
        if args.debug:
            raise
        message = " ".join(str(exc).split())
        if not isinstance(exc, ConfigError):  # its message starts with "config error:"
            message = f"error: {message}"
        print(message, file=sys.stderr, flush=True)
        return EXIT_ERROR


def main(argv=None):
    """Entry point of the ``pytorchrl`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str or None
        Arguments after the program name (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    args = parse_args(parser, argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
