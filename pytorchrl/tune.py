"""Ray Tune integration: :class:`Trainable`, a ``ray.tune.Trainable`` of a pytorchrl run.

Tune's population-based schedulers (``PopulationBasedTraining``, ``PB2``) perturb a trial
by pausing it and restarting it from a checkpoint of the trial it copies, with a new
configuration. With ``reuse_actors=True`` Tune first asks the trial's actor to take the new
configuration in place (``reset_config``): this Trainable does, by hot-swap on every worker
of its scheme, so no process restarts and no environment is rebuilt. The checkpoint that
Tune loads next brings the copied weights and optimizer state; the perturbed values stay
in force (they are applied again over the checkpoint's, a row of hot_swaps.csv each).

::

    from ray import tune
    from pytorchrl.config import load_yaml
    from pytorchrl.tune import Trainable

    config = load_yaml("examples/configs/ppo_cartpole.yaml")      # the YAML's structure
    del config["schedules"]                                       # Tune's scheduler drives lr
    config["algorithm"]["lr"] = tune.loguniform(1e-5, 1e-2)
    config["pbt"] = {"interval": 10000}                           # env steps per step()
    scheduler = tune.schedulers.PopulationBasedTraining(
        time_attr="env_steps", perturbation_interval=10000,
        hyperparam_mutations={"algorithm": {"lr": tune.loguniform(1e-5, 1e-2)}})
    tuner = tune.Tuner(Trainable, param_space=config, tune_config=tune.TuneConfig(
        scheduler=scheduler, metric="train_return", mode="max", num_samples=4, reuse_actors=True))
    tuner.fit()

Every trial is an ordinary run directory, ``run`` in the trial's working directory
(``Trainable.logdir``: metrics.csv, hot_swaps.csv, TensorBoard, a model and checkpoint
when the trial stops): ``pytorchrl plot`` and ``pytorchrl evaluate`` read it. Tune copies
it to the trial's directory in the experiment's storage with
``RunConfig(sync_config=tune.SyncConfig(sync_artifacts=True))``.
"""

import copy
import os

try:
    from ray import tune
except ImportError as exc:  # pragma: no cover - ray[tune] is an optional extra
    raise ImportError("pytorchrl.tune needs Ray Tune: pip install 'pytorchrl[tune]'") from exc

from pytorchrl import checkpoint as ckpt
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.config.schema import SECTIONS, hot_swappable_keys
from pytorchrl.pbt.member import Member
from pytorchrl.tools import CHECKPOINT, CONFIG
from pytorchrl.tools.session import write_config

#: Keys of the ``pbt`` section a Trainable reads; the others describe a population of
#: ``pytorchrl pbt`` (under Tune, its scheduler decides) and are refused when given.
TUNE_PBT_KEYS = ("interval", "metric")
#: Name of the run directory in a trial's directory.
RUN_DIR = "run"


def _flat(config, prefix=""):
    """A nested configuration as ``{"algorithm.lr": value, ...}`` (lists are values)."""
    out = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(_flat(value, path))
        else:
            out[path] = value
    return out


def hot_swappable_values(config):
    """The hot-swappable algorithm and storage values of a resolved configuration:
    ``{"algorithm.lr": 0.001, "storage.gae_lambda": 0.95, ...}``."""
    return {f"{target}.{name}": config[target][name] for target in ("algorithm", "storage")
            for name in hot_swappable_keys(target, config[target]["name"])}


class Trainable(tune.Trainable):
    """A Ray Tune trainable that trains a pytorchrl run, an interval per ``step()``.

    Tune passes the run configuration as a nested dict with the YAML file's structure
    (sections ``env``, ``algorithm``, ...), after sampling; it is validated like a file (a
    problem is a ``ConfigError`` naming the key). Its ``pbt`` section, when given, may set
    ``interval`` (env steps per ``step()``, 10,000 by default) and ``metric`` (with
    ``test_return`` each step evaluates the policy); its other keys are refused: Tune's
    scheduler makes the population's decisions. ``run_dir`` is set by the Trainable.

    ``step()`` returns ``env_steps``, ``train_return`` (mean of the last 100 training
    episodes, once one ended), ``test_return`` (when evaluated: every step with metric
    test_return, else the latest periodic evaluation), ``hyperparameters`` (the
    hot-swappable values in force on the workers, ``{"algorithm.lr": ...}``) and ``done``
    (the run reached ``learner.target_steps``).

    ``reset_config`` applies changed hot-swappable algorithm and storage values in place
    (hot-swap, a ``tune`` row of hot_swaps.csv each) and returns True; a change of any
    other key (another network, environment, seed) returns False, and Tune restarts the
    actor. When Tune hands the actor to another trial (Tune's PBT pauses and resumes trials
    often), the learner and its processes stay: the logs move to that trial's run
    directory and the trial's checkpoint brings its state (a trial given no checkpoint gets
    a learner built anew at its first step). ``load_checkpoint`` restores a checkpoint (the trial's own, or the one of the
    trial it copies) and then applies the configuration's hot-swappable values again:
    perturbed values are never overwritten by the checkpoint's.
    """

    def setup(self, config):
        """Build the trial's learner in ``<logdir>/run`` (called by Tune).

        Parameters
        ----------
        config : dict
            The run configuration, nested like the YAML file, after Tune's sampling.
        """
        self._trial = self.trial_id
        self._weights_of_trial = True
        self.run_config = self._resolve(config)
        self.interval = self._pbt("interval")
        run_dir = os.path.join(self.logdir, RUN_DIR)
        # A trial Tune restarted goes on in its run directory: the checkpoint Tune loads
        # next brings its state.
        restarted = os.path.exists(os.path.join(run_dir, CONFIG))
        os.makedirs(run_dir, exist_ok=True)
        self.run_config["run_dir"] = run_dir
        self._write_config(f"(Ray Tune trial {self.trial_id})")
        member = Member(0, self._run_only(), run_dir, append_logs=restarted)
        self._print(member.start()["lines"])
        self.member = member

    def _resolve(self, config):
        """The resolved run configuration of Tune's ``config``: validated, ``pbt`` keys other
        than interval and metric refused, and the episode logs of the environments off (an
        actor may go on with another trial, and its environments' logs could not follow)."""
        config = copy.deepcopy(dict(config))
        for key in config.get("pbt") or {}:
            if key not in TUNE_PBT_KEYS:
                raise ConfigError(f"pbt.{key}", "describes a population of 'pytorchrl pbt'; under Ray Tune its "
                                                "scheduler decides: give pbt.interval and pbt.metric only")
        for section, key in (("env", "monitor"), ("scheme", "col_step_logs")):
            if (config.get(section) or {}).get(key):
                raise ConfigError(f"{section}.{key}", "writes logs where the environments are built, and under Ray "
                                                      "Tune an actor may go on with another trial; set it to false "
                                                      "(metrics.csv has the returns)")
        config.setdefault("env", {})
        if isinstance(config["env"], dict):
            config["env"]["monitor"] = False
        return validate_config(config)

    def _run_only(self):
        """The run configuration without its ``pbt`` section: the run directory's (an
        ordinary run's, which ``pytorchrl resume`` and ``evaluate`` read)."""
        return {k: v for k, v in self.run_config.items() if k != "pbt"}

    def _write_config(self, note):
        write_config(self.run_config["run_dir"], self._run_only(), note)

    def _pbt(self, key):
        return self.run_config["pbt"][key] if "pbt" in self.run_config else SECTIONS["pbt"][key].default

    def _print(self, lines):
        for line in lines or ():
            print(line, flush=True)

    def _artifacts_copied(self):
        """Wait until a copy of the trial's directory that Tune runs in the background is done.

        With ``SyncConfig(sync_artifacts=True)`` Tune copies the trial's directory (the run
        directory is in it) to the experiment's storage in a thread of this process, after
        a checkpoint, while the next step already trains. A run writes files through
        temporary names and removes its control file when it closes: a copy that lists
        such a file and finds it gone fails, and Tune fails the trial's next save with it
        (RayTaskError(FileNotFoundError) on run/control/trainer.json, measured: the trial
        errors and stops, and PBT has one member fewer to exploit). So nothing of the run
        directory is written while a copy runs."""
        syncer = getattr(getattr(self, "_storage", None), "syncer", None)
        if syncer is not None:
            syncer.wait()

    def step(self):
        """Train ``pbt.interval`` more env steps; returns the result dict described in the
        class documentation (a run that cannot go on raises, with its one-line cause)."""
        self._artifacts_copied()
        if not self._weights_of_trial:
            # Tune moved this actor to a trial without giving it a checkpoint: the weights
            # held are another trial's, so the trial's learner is built anew.
            self.member.close()
            self.member = None
            self.setup(self.config)
        learner = self.member.session.learner
        report = self.member.train_until(learner.num_samples_collected + self.interval)
        self._print(report["lines"])
        if report["failed"]:
            raise RuntimeError(report["failed"])
        result = {"env_steps": report["env_steps"], "done": report["done"],
                  "hyperparameters": dict(sorted(self.member.values().items()))}
        if self._pbt("metric") == "test_return":
            report["test_return"] = self.member.evaluate()
        for key in ("train_return", "test_return"):
            if report[key] is not None:
                result[key] = report[key]
        return result

    def save_checkpoint(self, checkpoint_dir):
        """Write the full training state (``checkpoint.pt``, as a run's) into
        ``checkpoint_dir``, the directory Tune gives."""
        self.member.session.learner.save_checkpoint(os.path.join(checkpoint_dir, CHECKPOINT),
                                                    extra={"config": self.run_config, "trial": self.trial_id},
                                                    keep_previous=False)
        return None

    def load_checkpoint(self, checkpoint):
        """Restore the training state saved in the directory ``checkpoint`` (this trial's, or
        the trial's that Tune's scheduler copies), then apply this trial's hot-swappable
        values again where they differ from the checkpoint's: Tune's perturbations stay in
        force, each a ``tune`` row of hot_swaps.csv."""
        self._artifacts_copied()
        path = os.path.join(checkpoint, CHECKPOINT)
        state = ckpt.read_checkpoint(path)
        self.member.restore(state, path, copy=False)
        self._weights_of_trial = True
        wanted = hot_swappable_values(self.run_config)
        current = self.member.values()
        kept = {k: v for k, v in wanted.items() if current.get(k) != v}
        source = (state.get("extra") or {}).get("trial")
        self.member.apply(kept, "tune", f"kept over the checkpoint of trial {source}")

    def reset_config(self, new_config):
        """Take ``new_config`` (nested like the YAML file) in place: True when every value
        that changed is hot-swappable (applied on every worker of the scheme), False when
        another key changed (Tune then restarts the actor)."""
        self._artifacts_copied()
        resolved = self._resolve(new_config)
        moving = self.trial_id != self._trial
        resolved["run_dir"] = os.path.join(self.logdir, RUN_DIR) if moving else self.run_config["run_dir"]
        old = _flat({k: v for k, v in self.run_config.items() if k != "run_dir"})
        new = _flat({k: v for k, v in resolved.items() if k != "run_dir"})
        swappable = hot_swappable_values(resolved)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if set(changed) - set(swappable):
            return False   # another network, environment, seed, ...: Tune restarts the actor
        self.run_config = resolved
        if moving:
            # This actor goes on with another trial, in that trial's run directory; until
            # Tune loads that trial's checkpoint the weights held are not the trial's.
            os.makedirs(resolved["run_dir"], exist_ok=True)
            self._write_config(f"(Ray Tune trial {self.trial_id})")
            self.member.session.move(self._run_only(), resolved["run_dir"])
            self._trial, self._weights_of_trial = self.trial_id, False
        else:
            self._write_config(f"(Ray Tune trial {self.trial_id}, reset_config)")
        # An actor moved to another trial takes that trial's values now, unrecorded: the
        # trial's checkpoint comes next, and load_checkpoint records those that differ
        # from it (the perturbations), not the previous trial's values.
        self.member.apply({k: swappable[k] for k in changed}, "tune", "reset_config", record=not moving)
        return True

    def cleanup(self):
        """Save the trial's model and checkpoint in its run directory (when the weights
        held are the trial's) and stop its scheme."""
        member, self.member = getattr(self, "member", None), None
        if member is not None:
            self._artifacts_copied()
            if self._weights_of_trial:
                member.session.save_on_exit()
            member.close()


__all__ = ["Trainable", "hot_swappable_values", "TUNE_PBT_KEYS"]
