"""The ``pytorchrl`` console command.

::

    pytorchrl train CONF [KEY=VALUE ...] [--run-dir DIR] [--dry-run] [--progress MODE]
    pytorchrl pbt CONF [KEY=VALUE ...] [--population N] [--run-dir DIR] [--dry-run] [--progress MODE]
    pytorchrl resume RUN_DIR [KEY=VALUE ...] [--progress MODE]
    pytorchrl evaluate RUN_DIR [--episodes N] [--video out.gif|out.mp4]
    pytorchrl record-demos SOURCE OUT_DIR [--demos N] [--human] [--min-return R]
    pytorchrl plot RUN_DIR [RUN_DIR ...] [-o curves.png]
    pytorchrl set RUN_DIR KEY=VALUE [KEY=VALUE ...] [--timeout S]
    pytorchrl presets [NAME]
    pytorchrl keys [--markdown]

Subcommands are registered in ``build_parser``; each has a handler ``<name>_command(args)``
that returns the exit status. Exit statuses: 0 success, 2 an error the user can fix (bad
configuration, environment, resources, command line, a refused live change), 130
interrupted (Ctrl-C or SIGTERM: the run is saved first).
"""

import argparse
import datetime
import os
import sys

import pytorchrl
from pytorchrl.agent.vec_env import EnvError
from pytorchrl.agent.spaces import UnsupportedSpaceError
from pytorchrl.cli_help import (EVALUATE_DESCRIPTION, EVALUATE_EPILOG, PBT_DESCRIPTION, PBT_EPILOG,  # noqa: F401
                                PLOT_DESCRIPTION, PLOT_EPILOG, RECORD_DESCRIPTION, RECORD_EPILOG, RESUME_DESCRIPTION,
                                RESUME_EPILOG, RUN_DIR_HELP, SET_DESCRIPTION, SET_EPILOG, TRAIN_DESCRIPTION,
                                TRAIN_EPILOG)
from pytorchrl.config import ConfigError, describe_schema, dump_config, load_config
from pytorchrl.tools import CHECKPOINT, CONFIG, PREVIOUS_CHECKPOINT
from pytorchrl.tools.live_control import ControlError, running_trainer
from pytorchrl.tools.evaluate import EvaluationError
from pytorchrl.tools.metrics import MetricsCSV, RunLog  # noqa: F401  (public here before)
from pytorchrl.tools.plot import PlotError
from pytorchrl.tools.progress import MODES as PROGRESS_MODES
from pytorchrl.tools.progress import ProgressDisplay, format_progress, format_status  # noqa: F401
# The training job lives in pytorchrl.tools.session; these names were defined here before
# and stay importable from here.
from pytorchrl.tools.session import (CURVE_POINTS, REDRAW_EVERY_S, StopOnInterrupt,  # noqa: F401
                                     TrainingSession, UsageError, _config_differences, _finite,
                                     _schema_check, _stop_schedules, _StoppedSchedule, write_config)
from pytorchrl.scheme.base.ray_runtime import ClusterError, ResourceError, WorkerError

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

#: Keys a resumed run may not change: the checkpoint's weights and optimizer are tied to them.
FIXED_ON_RESUME = ("env.id", "env.kwargs", "actor", "algorithm.name", "storage.name")


#: Failures caused by the configuration or the machine rather than by a bug: reported in
#: one line, without traceback, at any time.
USER_ERRORS = (ConfigError, EnvError, ResourceError, WorkerError, ControlError, EvaluationError, PlotError,
               UnsupportedSpaceError, ClusterError)


# ----------------------------------------------------------------------------- training
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
    if os.path.exists(os.path.join(run_dir, CONFIG)):
        raise UsageError(f"run directory {run_dir} already holds a run ({CONFIG}); "
                         f"choose another with --run-dir, or continue it with 'pytorchrl resume {run_dir}'")
    created = not os.path.exists(run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    config["run_dir"] = run_dir
    write_config(run_dir, config, f"from {conf_path}")
    return run_dir, created


def run_training(config, run_dir, stream=None, remove_run_dir_on_failure=False, progress="auto",
                 resume=None):
    """Train the Learner of ``config`` in ``run_dir`` and return the exit status.

    Shows progress (see ``pytorchrl.tools.progress``), logs metrics to metrics.csv and
    TensorBoard every ``learner.log_every`` seconds, answers live-control requests between
    updates (``pytorchrl set``), saves the model and a full checkpoint every
    ``learner.save_every`` seconds and every ``learner.save_every_steps`` env steps and at
    the end, evaluates on the test environments if any, writes ``summary.yaml`` and always
    stops the scheme. Ctrl-C saves the model and the checkpoint and returns
    ``EXIT_INTERRUPTED``. The job is a ``pytorchrl.tools.session.TrainingSession``.

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
    progress : str
        Progress display: "auto", "live", "plain" or "quiet" (see ``ProgressDisplay``).
    resume : dict or None
        Continue from ``<run_dir>/checkpoint.pt`` (``checkpoint.prev.pt`` if that one is
        damaged): ``{"previous": config the checkpoint was made with}``. Algorithm and
        storage values that differ in ``config`` are applied as hot-swaps after loading.
    """
    session = TrainingSession(config, run_dir, stream=stream, remove_run_dir_on_failure=remove_run_dir_on_failure,
                              progress=progress, resume=resume)
    return EXIT_INTERRUPTED if session.run() == "interrupted" else EXIT_OK


# --------------------------------------------------------------------------- commands
def train_command(args):
    """Handler of `train`: validate, make the run directory, train; returns the exit status."""
    notes = []
    config = load_config(args.conf, args.overrides, notes=notes)
    if "pbt" in config:
        raise UsageError(f"{args.conf} has a pbt section, which describes a population: train it with "
                         f"'pytorchrl pbt {args.conf}', or remove the section")
    made = _run_dir_of(args, config, notes)
    if made is None:
        return EXIT_OK
    run_dir, created = made
    return run_training(config, run_dir, remove_run_dir_on_failure=created, progress=args.progress)


def _run_dir_of(args, config, notes=()):
    """``(run directory, whether it was created)`` of a `train` or `pbt` command (``--run-dir``
    taken into ``config``), or None after ``--dry-run`` printed the resolved configuration.
    ``notes`` (schedules dropped for an override, see ``load_config``) are printed first:
    as YAML comments with ``--dry-run``, whose output stays a configuration file."""
    if args.run_dir is not None:
        config["run_dir"] = args.run_dir
    prefix = "# " if args.dry_run else ""
    for note in notes:
        print(prefix + note, flush=True)
    if args.dry_run:
        sys.stdout.write(dump_config(config))
        return None
    return make_run_dir(config, args.conf)


def pbt_command(args):
    """Handler of `pbt`: validate, make the population's run directory, train the population;
    returns the exit status."""
    from pytorchrl.pbt import Population
    overrides = list(args.overrides)
    if args.population is not None:
        overrides.append(f"pbt.population={args.population}")
    notes = []
    config = load_config(args.conf, overrides, notes=notes)
    if not config.get("pbt", {}).get("mutations"):
        raise UsageError(f"{args.conf} names no parameter to perturb: 'pytorchrl pbt' needs a pbt section with "
                         f"mutations (see examples/configs/pbt_ppo_cartpole.yaml)")
    made = _run_dir_of(args, config, notes)
    if made is None:
        return EXIT_OK
    run_dir, created = made
    population = Population(config, run_dir, progress=args.progress, remove_run_dir_on_failure=created)
    return EXIT_INTERRUPTED if population.run() == "interrupted" else EXIT_OK


def _resume_population(args, previous, config):
    """``resume`` of a population's run directory (``previous``: the configuration it was
    saved with, ``config``: with the overrides)."""
    from pytorchrl.pbt import Population, member_name
    run_dir = args.run_dir
    for index in range(previous["pbt"]["population"]):
        trainer = running_trainer(os.path.join(run_dir, member_name(index)))
        if trainer is not None:
            raise UsageError(f"a job is training {member_name(index)} of {run_dir} already (pid {trainer.get('pid')} "
                             f"on {trainer.get('host')}); stop it first")
    if config["pbt"]["population"] != previous["pbt"]["population"]:
        raise UsageError(f"cannot change pbt.population when resuming: the population in {run_dir} has "
                         f"{previous['pbt']['population']} members")
    config["run_dir"] = run_dir
    write_config(run_dir, config, "(resumed)")
    return EXIT_INTERRUPTED if Population(config, run_dir, progress=args.progress,
                                          resume={"previous": previous}).run() == "interrupted" else EXIT_OK


def _check_run_dir(run_dir, *needed):
    if not os.path.isdir(run_dir):
        raise UsageError(f"no such run directory: {run_dir}")
    for name in needed:
        if not os.path.isfile(os.path.join(run_dir, name)):
            raise UsageError(f"{run_dir} has no {name}: not a run directory, or the run saved nothing yet")


def _prefix_of(key):
    """The FIXED_ON_RESUME entry covering dotted ``key``, or None."""
    for fixed in FIXED_ON_RESUME:
        if key == fixed or key.startswith(fixed + "."):
            return fixed
    return None


def resume_command(args):
    """Handler of `resume`: continue a run from its checkpoint; returns the exit status."""
    from pytorchrl.pbt import is_population
    run_dir = args.run_dir
    _check_run_dir(run_dir, CONFIG)
    population = is_population(run_dir)
    if not population and not any(os.path.isfile(os.path.join(run_dir, name))
                                  for name in (CHECKPOINT, PREVIOUS_CHECKPOINT)):
        # (checkpoint.prev.pt alone: a save was cut between its two renames; resume uses it.)
        _check_run_dir(run_dir, CHECKPOINT)
    trainer = running_trainer(run_dir)
    if trainer is not None:
        raise UsageError(f"a job is training in {run_dir} already (pid {trainer.get('pid')} on "
                         f"{trainer.get('host')}); stop it first")
    path = os.path.join(run_dir, CONFIG)
    previous = load_config(path)
    # The checkpoint holds the schedules' places: an override stops its schedule instead
    # (TrainingSession.start), as 'pytorchrl set' does.
    config = load_config(path, args.overrides, drop_overridden_schedules=False)
    for text in args.overrides:
        key = text.partition("=")[0].strip()
        if key == "run_dir":
            raise UsageError("cannot change run_dir when resuming: the run continues in its directory")
        fixed = _prefix_of(key)
        if fixed is not None:
            raise UsageError(f"cannot change {key} when resuming: the checkpoint's model depends on "
                             f"{fixed}; start a new run with 'pytorchrl train'")
    if population:
        return _resume_population(args, previous, config)
    config["run_dir"] = run_dir
    return run_training(config, run_dir, progress=args.progress, resume={"previous": previous})


def evaluate_command(args):
    """Handler of `evaluate`: deterministic episodes of a run's model; returns the exit status."""
    from pytorchrl.tools.evaluate import evaluate_run
    _check_run_dir(args.run_dir, CONFIG)
    if args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {args.episodes}")

    def on_episode(i, ret, length):
        print(f"episode {i + 1}/{args.episodes}: return {ret:.1f} ({length} steps)", flush=True)

    result = evaluate_run(args.run_dir, episodes=args.episodes, video=args.video,
                          video_episodes=args.video_episodes, seed=args.seed, model=args.model,
                          on_episode=on_episode)
    returns = result["returns"]
    print(f"mean return {result['mean']:.2f} ± {result['std']:.2f} (std) over {len(returns)} episodes, "
          f"min {min(returns):.1f}, max {max(returns):.1f} (deterministic policy, seed {result['seed']})",
          flush=True)
    if result["video"]:
        print(f"video: {result['video']} ({result['frames']} frames, first {min(args.video_episodes, len(returns))} "
              f"episode(s))", flush=True)
    return EXIT_OK


def record_demos_command(args):
    """Handler of `record-demos`: demonstrations for PPO+D; returns the exit status."""
    from pytorchrl.tools.record_demos import record_demos
    if args.human:
        if not (os.path.isdir(args.source) or os.path.isfile(args.source)):
            raise UsageError(f"no such run directory or configuration file: {args.source}")
    else:
        _check_run_dir(args.source, CONFIG)
    for name in ("demos", "frame_stack"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.max_episodes is not None and args.max_episodes < 1:
        raise UsageError(f"--max-episodes must be at least 1, got {args.max_episodes}")
    # The human's prompts go to stderr: stdout keeps one line per episode.
    out = sys.stderr if args.human else sys.stdout

    def on_episode(i, ret, length, path):
        kept = f"kept as {path}" if path else f"not kept (below {args.min_return})"
        print(f"episode {i + 1}: return {ret:.3f} ({length} steps), {kept}", flush=True)

    result = record_demos(args.source, args.out_dir, demos=args.demos, human=args.human, min_return=args.min_return,
                          max_episodes=args.max_episodes, seed=args.seed, model=args.model,
                          deterministic=not args.sample, frame_stack=args.frame_stack, stdout=out,
                          on_episode=on_episode)
    kept = len(result["kept"])
    print(f"{kept} demonstration(s) in {args.out_dir} from {len(result['returns'])} episode(s)"
          + (" (quit)" if result["quit"] else ""), flush=True)
    if kept < args.demos:
        print(f"error: {kept} of the {args.demos} demonstrations asked for were recorded", file=sys.stderr,
              flush=True)
        return EXIT_ERROR
    return EXIT_OK


def _parse_size(text):
    try:
        w, h = (float(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in inches, e.g. 10x4, got {text!r}") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return w, h


def plot_command(args):
    """Handler of `plot`: learning curves of runs into an image; returns the exit status."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("pytorchrl plot needs matplotlib: pip install matplotlib (or pip install 'pytorchrl[plot]')")
    from pytorchrl.tools.plot import plot_runs, population_copies
    drawn = plot_runs(args.run_dirs, args.output, metric=args.metric, labels=args.label or None,
                      band=args.band, size=args.size, dpi=args.dpi, title=args.title)
    curves = "; ".join(f"{label} ({n} run{'s' if n > 1 else ''})" for label, n in drawn)
    copies = sum(len(population_copies(path) or ()) for path in args.run_dirs)
    marks = f"; {copies} cop{'y' if copies == 1 else 'ies'} of a population marked" if copies else ""
    print(f"wrote {args.output}: {curves}{marks}", flush=True)
    return EXIT_OK


def set_command(args):
    """Handler of `set`: send a live change to a running job and wait for its answer."""
    from pytorchrl.config.loader import parse_override
    from pytorchrl.tools.live_control import send_request, wait_for_ack
    _check_run_dir(args.run_dir)
    if not args.assignments:
        raise UsageError("nothing to set: give KEY=VALUE, e.g. lr=1e-4")
    assignments = []
    for text in args.assignments:
        parts, value = parse_override(text)
        assignments.append((".".join(parts), value))
    trainer = running_trainer(args.run_dir)
    if trainer is None:
        raise UsageError(f"no job is training in {args.run_dir}: live changes go to a running "
                         f"'pytorchrl train' or 'pytorchrl resume'")
    request_id = send_request(args.run_dir, assignments)
    ack = wait_for_ack(args.run_dir, request_id, args.timeout)
    if ack.get("status") == "applied":
        changes = ", ".join(f"{t}.{n} = {v!r}" for t, n, v in ack.get("changes", []))
        notes = "; ".join(ack.get("notes") or [])
        print(f"applied at env step {ack.get('step', '?'):,}: {changes}" + (f" ({notes})" if notes else ""),
              flush=True)
        return EXIT_OK
    raise UsageError(f"refused by the job: {ack.get('reason', 'no reason given')}")


def presets_command(args):
    """Handler of `presets`: list the named scheme layouts, then the named agents; returns the exit status."""
    from pytorchrl.config.agent_presets import AGENT_PRESETS
    from pytorchrl.scheme.presets import PRESETS, get_preset
    if args.name:
        if args.name in AGENT_PRESETS:
            _print_agent_preset(AGENT_PRESETS[args.name], full=True)
            return EXIT_OK
        try:
            presets = [get_preset(args.name)]
        except KeyError:
            raise UsageError(f"unknown preset {args.name!r}; scheme layouts: {', '.join(PRESETS)}; agents: "
                             f"{', '.join(AGENT_PRESETS)}") from None
    else:
        presets = list(PRESETS.values())
        print("scheme layouts\n")
    for i, preset in enumerate(presets):
        if i:
            print()
        ray = "Ray" if preset.uses_ray else "one process"
        print(f"{preset.name}  ({ray})\n  {preset.description}")
        values = ", ".join(f"{k}: {_yaml_inline(v)}" for k, v in preset.scheme.items())
        print(f"  scheme: {{{values}}}")
        if preset.algorithm:
            values = ", ".join(f"{k}: {_yaml_inline(v)}" for k, v in preset.algorithm.items())
            print(f"  meant for  algorithm: {{{values}}}  (written in the configuration file)")
    if not args.name:
        print("\nuse one with  scheme: {preset: NAME}  in the configuration file (keys next to it win), "
              "or  scheme.preset=NAME  on the command line")
        print("\n\nagents\n")
        for i, agent in enumerate(AGENT_PRESETS.values()):
            if i:
                print()
            _print_agent_preset(agent, full=False)
        print("\nuse one with  preset: NAME  at the top of the configuration file (keys written in the file "
              "win); 'pytorchrl presets NAME' prints its values")
    return EXIT_OK


def _print_agent_preset(agent, full):
    """Print an agent preset: name, example file, description, then its values section by
    section (``full``) or one line saying what it combines."""
    from pytorchrl.config.loader import resolve_agent_preset
    values = resolve_agent_preset(agent)
    print(f"{agent.name}  (examples/configs/{agent.file})\n  {agent.description}")
    if not full:
        env, scheme = values.get("env", {}), values.get("scheme") or {}
        storage = (values.get("storage") or {}).get("name", "default")
        print(f"  algorithm: {values['algorithm']['name']}, storage: {storage}, env: {env.get('id')} "
              f"(family {env.get('family', 'gym')}), scheme: {scheme.get('preset') or 'single-process'}")
        return
    values.pop("preset", None)
    for section, value in values.items():
        if isinstance(value, list):
            print(f"  {section}:")
            for item in value:
                print(f"    - {_yaml_inline(item)}")
        else:
            print(f"  {section}: {_yaml_inline(value)}")


def _yaml_inline(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def keys_command(args):
    """Handler of `keys`: print every configuration key; returns the exit status."""
    if args.markdown:
        from pytorchrl.config.docgen import configuration_reference
        sys.stdout.write(configuration_reference())
    else:
        print(describe_schema())
    return EXIT_OK


# ------------------------------------------------------------------------ command line
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
    _add_progress_argument(parser)
    _add_debug_argument(parser)


def _add_progress_argument(parser):
    parser.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                        help="progress display: live (one line redrawn), plain (a line every "
                             "learner.log_every s), quiet, or auto (live on a terminal, plain otherwise)")


def _add_debug_argument(parser):
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of errors instead of one line")


def build_parser():
    """The argument parser of the ``pytorchrl`` command, one subparser per subcommand."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="pytorchrl", description="pytorchrl: distributed reinforcement learning in PyTorch.",
        epilog="Run 'pytorchrl COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"pytorchrl {pytorchrl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train an agent described by a YAML configuration file",
                           description=TRAIN_DESCRIPTION, epilog=TRAIN_EPILOG, formatter_class=raw)
    train.add_argument("conf", metavar="CONF", help="YAML configuration file (e.g. examples/configs/ppo_cartpole.yaml)")
    add_train_arguments(train)
    train.set_defaults(handler=train_command)

    pbt = sub.add_parser("pbt", help="population-based training: a population that copies and perturbs in place",
                         description=PBT_DESCRIPTION, epilog=PBT_EPILOG, formatter_class=raw)
    pbt.add_argument("conf", metavar="CONF", help="YAML configuration file with a pbt section "
                                                  "(e.g. examples/configs/pbt_ppo_cartpole.yaml)")
    pbt.add_argument("--population", type=int, default=None, metavar="N",
                     help="members of the population (sets pbt.population)")
    add_train_arguments(pbt)
    pbt.set_defaults(handler=pbt_command)

    resume = sub.add_parser("resume", help="continue a run (or a population) from its checkpoint",
                            description=RESUME_DESCRIPTION, epilog=RESUME_EPILOG, formatter_class=raw)
    resume.add_argument("run_dir", metavar="RUN_DIR", help="run directory with config.yaml and checkpoint.pt")
    resume.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="configuration changes, e.g. learner.target_steps=200000 (see below)")
    _add_progress_argument(resume)
    _add_debug_argument(resume)
    resume.set_defaults(handler=resume_command)

    evaluate = sub.add_parser("evaluate", help="run deterministic episodes with a run's saved model",
                              description=EVALUATE_DESCRIPTION, epilog=EVALUATE_EPILOG, formatter_class=raw)
    evaluate.add_argument("run_dir", metavar="RUN_DIR", help="run directory with config.yaml and model.state_dict")
    evaluate.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default 10)")
    evaluate.add_argument("--video", metavar="FILE", default=None,
                          help="film the first episode(s) into FILE (.gif or .mp4)")
    evaluate.add_argument("--video-episodes", type=int, default=1, metavar="K",
                          help="episodes filmed with --video (default 1)")
    evaluate.add_argument("--seed", type=int, default=None,
                          help="seed of the environment (default: the run's seed + 1000)")
    evaluate.add_argument("--model", metavar="FILE", default=None,
                          help="weights to load instead of RUN_DIR/model.state_dict: a saved model, or a "
                               "checkpoint (e.g. RUN_DIR/checkpoint.prev.pt)")
    _add_debug_argument(evaluate)
    evaluate.set_defaults(handler=evaluate_command)

    record = sub.add_parser("record-demos", help="record demonstrations for PPO+D (storage.name: ppod)",
                            description=RECORD_DESCRIPTION, epilog=RECORD_EPILOG, formatter_class=raw)
    record.add_argument("source", metavar="SOURCE",
                        help="run directory whose saved policy plays; with --human, a run directory or a "
                             "configuration file (its env section)")
    record.add_argument("out_dir", metavar="OUT_DIR", help="folder of the .npz demonstrations (created)")
    record.add_argument("--demos", type=int, default=5, metavar="N", help="demonstrations to keep (default 5)")
    record.add_argument("--human", action="store_true", help="read one action per step on stdin")
    record.add_argument("--min-return", type=float, default=None, metavar="R",
                        help="keep only episodes whose return is at least R")
    record.add_argument("--max-episodes", type=int, default=None, metavar="M",
                        help="episodes played at most (default: 20 per demonstration; no limit with --human)")
    record.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    record.add_argument("--model", metavar="FILE", default=None,
                        help="weights to load instead of SOURCE/model.state_dict")
    record.add_argument("--sample", action="store_true",
                        help="sample the policy's actions instead of taking its mode")
    record.add_argument("--frame-stack", type=int, default=1, metavar="K",
                        help="frames stacked in an observation: keep the newest one (storage.frame_stack K)")
    _add_debug_argument(record)
    record.set_defaults(handler=record_demos_command)

    plot = sub.add_parser("plot", help="draw learning curves of runs into an image",
                          description=PLOT_DESCRIPTION, epilog=PLOT_EPILOG, formatter_class=raw)
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                      help="run directories, or directories holding runs")
    plot.add_argument("-o", "--output", default="curves.png", metavar="FILE",
                      help="image file, .png, .pdf or .svg (default curves.png)")
    plot.add_argument("--metric", default="Episodes/TrainReward",
                      help="column of metrics.csv to draw, or its last part, e.g. TestReward "
                           "(default Episodes/TrainReward)")
    plot.add_argument("--label", action="append", metavar="LABEL",
                      help="label of a run, once per run in order; runs with equal labels are averaged")
    plot.add_argument("--band", choices=("minmax", "std", "none"), default="minmax",
                      help="spread drawn around the mean of several runs (default minmax)")
    plot.add_argument("--size", type=_parse_size, default=(10.0, 4.0), metavar="WxH",
                      help="figure size in inches (default 10x4)")
    plot.add_argument("--dpi", type=int, default=150, help="pixels per inch of a PNG (default 150)")
    plot.add_argument("--title", default=None, help="title above the panels")
    _add_debug_argument(plot)
    plot.set_defaults(handler=plot_command)

    setp = sub.add_parser("set", help="change a parameter of a running job (e.g. lr=1e-4)",
                          description=SET_DESCRIPTION, epilog=SET_EPILOG, formatter_class=raw)
    setp.add_argument("run_dir", metavar="RUN_DIR", help="run directory of the running job")
    setp.add_argument("assignments", nargs="+", metavar="KEY=VALUE", help="parameters to change (see below)")
    setp.add_argument("--timeout", type=float, default=30.0, metavar="S",
                      help="seconds to wait for the job's answer (default 30)")
    _add_debug_argument(setp)
    setp.set_defaults(handler=set_command)

    presets = sub.add_parser("presets", help="list the named scheme layouts (scheme.preset) and agents (preset)",
                             description="List the named scheme layouts: name, what it does, and the scheme "
                                         "values it sets. Use one with 'scheme: {preset: NAME}' in a "
                                         "configuration file; keys written next to it win. Then list the "
                                         "named agents, whole configurations used with 'preset: NAME' at the "
                                         "top of a file; keys written in the file win.")
    presets.add_argument("name", nargs="?", default=None,
                         help="show only this preset (an agent: all its values)")
    _add_debug_argument(presets)
    presets.set_defaults(handler=presets_command)

    keys = sub.add_parser("keys", help="list every configuration key with its type, default and meaning",
                          description="List every section and key of the configuration file.")
    keys.add_argument("--markdown", action="store_true",
                      help="print the reference as Markdown (docs/configuration.md is this output)")
    keys.set_defaults(handler=keys_command, debug=False)
    return parser


def parse_args(parser, argv):
    """Parse ``argv``; KEY=VALUE words after options are overrides too.

    argparse does not accept positionals after an option once the positional list has
    been consumed (``train c.yaml --run-dir d a=1``); such words are collected here.
    """
    args, extra = parser.parse_known_args(argv)
    target = "overrides" if hasattr(args, "overrides") else "assignments" if hasattr(args, "assignments") else None
    stray = [w for w in extra if w.startswith("-") or "=" not in w or target is None]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        setattr(args, target, list(getattr(args, target)) + extra)
    return args


def run_command(args):
    """Run the handler of parsed ``args``, turning user errors into one line and a status."""
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader of stdout went away (`pytorchrl presets | head`): not an error. Point
        # stdout at /dev/null so that flushing it at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except (UsageError,) + USER_ERRORS as exc:
        if getattr(args, "debug", False):
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
