"""Population-based training in place: what ``pytorchrl pbt`` and ``pytorchrl resume`` of a
population run.

A population of ``pbt.population`` members trains side by side, each an ordinary run in
``<run_dir>/member-<i>`` (:class:`~pytorchrl.pbt.member.Member`). Every ``pbt.interval``
env steps, once all members got there, the members are ranked by ``pbt.metric``; each of
the bottom quantile takes over the weights, optimizer state and counters of a member of
the top quantile (exploit), sent from process to process through Ray's object store (or
handed over in memory), and then gets perturbed values of ``pbt.mutations`` by hot-swap
(explore). No process is restarted and nothing goes through a file: the member's run goes
on, its hot_swaps.csv recording each change.

Members run as Ray actors, side by side (``pbt.execution: ray``; a member's own scheme
may be distributed too), or one after the other in this process, an interval each
(``interleaved``, for one core).

The run directory holds the population's ``config.yaml``, ``population.csv`` (one row per
parameter of each decision), ``population.json`` (what ``pytorchrl resume`` continues
from), ``summary.yaml`` at the end, and the members' run directories.

Faults. A member's scheme replaces its workers that die, as in any run; a member whose run
cannot go on (a worker that keeps dying, non-finite updates, its process lost) is dropped
from the population with one line, its last checkpoint kept, and the others go on.

Ctrl-C (or SIGTERM) stops every member at its next update, saves each and the population's
state; ``pytorchrl resume RUN_DIR`` continues the population.
"""

import copy
import json
import math
import os
import shutil
import time

import numpy as np

from pytorchrl.checkpoint import SaveError
from pytorchrl.config import ConfigError, dump_config, validate_config
from pytorchrl.config.schema import algorithm_keys, storage_keys
from pytorchrl.config.validate_pbt import resolve_parameter
from pytorchrl.pbt.explore import Parameter, perturb, plan_exploits
from pytorchrl.pbt.member import member_name
from pytorchrl.pbt.members import InProcessMembers, MemberLost, RayMembers
from pytorchrl.tools import CONFIG, SUMMARY
from pytorchrl.tools.metrics import _read_csv, _write_csv
from pytorchrl.tools.progress import ProgressDisplay, format_duration
from pytorchrl.tools.session import REDRAW_EVERY_S, StopOnInterrupt, UsageError, save_due, write_config

#: Files of a population's run directory.
POPULATION_CSV = "population.csv"
POPULATION_STATE = "population.json"
#: Columns of population.csv: one row per perturbed parameter of each decision.
CSV_COLUMNS = ["step", "elapsed", "to", "from", "to_metric", "from_metric", "name", "old", "copied", "new", "how",
               "copy_s"]
#: Version of population.json's layout.
STATE_FORMAT = 1


def is_population(run_dir):
    """True when ``run_dir`` is a population's run directory (it holds ``population.json``)."""
    return os.path.isfile(os.path.join(run_dir, POPULATION_STATE))


def member_config(config, index):
    """The resolved configuration of member ``index`` of the population of ``config``: the
    population's without its ``pbt`` section, with the seeds (``seed``, ``env.seed``) plus
    ``index``, its ``pbt.initial`` values and its own run directory."""
    member = copy.deepcopy({k: v for k, v in config.items() if k != "pbt"})
    if member["seed"] is not None:
        member["seed"] += index
    if member["env"]["seed"] is not None:
        member["env"]["seed"] += index
    for key, values in config["pbt"]["initial"].items():
        target, name = resolve_parameter(config, key, f"pbt.initial.{key}")
        member[target][name] = values[index]
    member["run_dir"] = os.path.join(config["run_dir"], member_name(index))
    return validate_config(member)


def parameters(config):
    """The ``Parameter`` of every entry of ``pbt.mutations``, in order."""
    out = []
    for key, spec in config["pbt"]["mutations"].items():
        target, name = resolve_parameter(config, key, f"pbt.mutations.{key}")
        keys = (algorithm_keys if target == "algorithm" else storage_keys)(config[target]["name"])
        param = keys[name]
        out.append(Parameter(key, target, name, param.kind, param.low, param.high, param.low_inclusive, spec))
    return out


def available_cores():
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------- population
class Population:
    """Train the population of ``config`` in ``run_dir``: one ``pytorchrl pbt`` (or
    ``resume`` of a population) job.

    Parameters
    ----------
    config : dict
        Resolved configuration with a ``pbt`` section; its ``run_dir`` is ``run_dir``.
    run_dir : str
        Existing run directory of the population (its ``config.yaml`` written).
    stream : file or None
        Where the population's lines go (default: stdout).
    progress : str
        "auto", "live", "plain" or "quiet" (quiet: no line per decision, messages only).
    resume : dict or None
        Continue the population saved in ``run_dir``: ``{"previous": the configuration it
        was saved with}``; values that differ in ``config`` are hot-swapped on every member.
    remove_run_dir_on_failure : bool
        Delete ``run_dir`` if the population cannot be started (it was made for this job).

    Attributes
    ----------
    reports : dict
        Member index -> its latest report (``Member.report``), for the members in the
        population.
    dropped : dict
        Member index -> why it was dropped.
    decisions : int
        Members replaced so far (one per exploit).
    history : list of (int, dict)
        ``(env steps, {member index: metric})`` at each decision of this job, in order
        (what a benchmark reads; population.csv keeps the copies across resumes).
    """

    def __init__(self, config, run_dir, stream=None, progress="auto", resume=None, remove_run_dir_on_failure=False):
        self.config = config
        self.pbt = config["pbt"]
        self.run_dir = run_dir
        self.resume_from = resume
        self.remove_run_dir_on_failure = remove_run_dir_on_failure
        self.display = ProgressDisplay(config["learner"]["target_steps"], stream, progress)
        self.quiet = self.display.mode == "quiet"
        self.parameters = parameters(config)
        if not self.parameters:
            raise ConfigError("pbt.mutations", "is empty: a population perturbs at least one parameter")
        self.execution = self.pbt["execution"]
        if self.execution == "auto":
            self.execution = "ray" if available_cores() > 1 else "interleaved"
        self.interrupt = StopOnInterrupt()
        self.members = None
        self.reports, self.dropped, self.history = {}, {}, []
        self.round = self.decisions = self.rows = 0
        self.rng = np.random.default_rng(config["seed"])
        self._elapsed_before = 0.0
        self._start_time = time.monotonic()
        self._last_save = time.monotonic()
        self._save_step_mark = 0
        self._ray_held = False
        self._next_progress = math.inf       # when the next progress line is due (set by train)
        self._progress_mark = (time.monotonic(), 0)   # (time, members' env steps) of the last one

    # ------------------------------------------------------------------ paths
    def _path(self, name):
        return os.path.join(self.run_dir, name)

    def elapsed(self):
        """Seconds the population has trained, across resumes."""
        return self._elapsed_before + time.monotonic() - self._start_time

    # ------------------------------------------------------------------ set-up
    def _start_runtime(self):
        """Start (or join) Ray for actors, check that the members' actors fit, and make the
        members' runner."""
        if self.execution == "interleaved":
            self.members = InProcessMembers(lambda: self.interrupt.requested, self._show_progress)
            return "one after another in this process"
        from pytorchrl.scheme.base.ray_runtime import acquire_ray, check_schedulable
        ray = acquire_ray(address=self.config["scheme"]["ray_address"])
        self._ray_held = True
        count = self.pbt["population"] - len(self.dropped)
        resources = self.pbt["member_resources"]
        if resources is None:
            cpus = ray.cluster_resources().get("CPU", 1.0)
            resources = {"num_cpus": min(1.0, cpus / max(1, count))}
        check_schedulable([("population members (pbt.member_resources)", count, resources)])
        self.members = RayMembers(ray, resources, lambda: self.interrupt.requested, self._show_progress)
        return f"side by side as Ray actors ({resources.get('num_cpus', 1):.2g} CPU each)"

    def _create(self):
        """Make the members' run directories and configurations, population.csv and the
        first population.json."""
        for index in range(self.pbt["population"]):
            directory = self._path(member_name(index))
            if os.path.exists(os.path.join(directory, CONFIG)):
                raise UsageError(f"{directory} already holds a run; choose another population directory")
            os.makedirs(directory, exist_ok=True)
            write_config(directory, member_config(self.config, index),
                         f"(member {index} of the population in {self.run_dir})")
        _write_csv(self._path(POPULATION_CSV), CSV_COLUMNS, [])
        self._write_state()

    def _load(self):
        """Read population.json and cut population.csv back to the rows it counts (written
        after it by a population that then crashed)."""
        try:
            with open(self._path(POPULATION_STATE)) as f:
                state = json.load(f)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot resume the population in {self.run_dir}: {POPULATION_STATE} cannot be read "
                             f"({exc})") from None
        if state.get("format") != STATE_FORMAT:
            raise UsageError(f"{self._path(POPULATION_STATE)} has format {state.get('format')!r}; this pytorchrl "
                             f"reads format {STATE_FORMAT}")
        target = self.config["learner"]["target_steps"]
        if state.get("env_steps", 0) >= target:
            raise UsageError(f"the population already has {state['env_steps']:,} env steps per member, "
                             f"learner.target_steps is {target:,}: raise it, e.g. 'pytorchrl resume {self.run_dir} "
                             f"learner.target_steps={2 * target}'")
        self.round, self.decisions, self.rows = state["round"], state["decisions"], state["rows"]
        self.dropped = {int(k): v for k, v in state["dropped"].items()}
        self.rng.bit_generator.state = state["rng"]
        self._elapsed_before = state["elapsed"]
        self._save_step_mark = state.get("env_steps", 0)
        columns, rows = _read_csv(self._path(POPULATION_CSV))
        _write_csv(self._path(POPULATION_CSV), columns or CSV_COLUMNS, rows[:self.rows])

    def _write_state(self):
        """Write population.json (atomically): what ``resume`` continues from."""
        steps = max((r["env_steps"] for r in self.reports.values()), default=0)
        state = {"format": STATE_FORMAT, "round": self.round, "decisions": self.decisions, "rows": self.rows,
                 "dropped": {str(k): v for k, v in self.dropped.items()}, "rng": self.rng.bit_generator.state,
                 "elapsed": round(self.elapsed(), 3), "env_steps": steps}
        path = self._path(POPULATION_STATE)
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)

    def start(self):
        """Create or reload the population, start its members (each builds or restores its
        learner) and say what runs."""
        resuming = self.resume_from is not None
        try:
            if resuming:
                self._load()
            else:
                self._create()
            how = self._start_runtime()
            indices = [i for i in range(self.pbt["population"]) if i not in self.dropped]
            for index in indices:
                directory = self._path(member_name(index))
                config = member_config(self.config, index)
                resume = None
                if resuming:
                    from pytorchrl.config import load_config
                    resume = {"previous": load_config(os.path.join(directory, CONFIG))}
                self.members.add(index, config, directory, resume)
            results = self.members.call({i: ("start", ()) for i in indices})
            failures = [(i, exc) for i, (_, exc) in results.items() if exc is not None]
            if failures:
                raise failures[0][1]
        except BaseException:
            if self.remove_run_dir_on_failure:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        for index, (report, _) in results.items():
            self._absorb(report)
        learner, algo = self.config["learner"], self.config["algorithm"]["name"]
        steps = min((r["env_steps"] for r in self.reports.values()), default=0)
        self.display.message(
            f"{'resuming' if resuming else 'training'} a population of {len(indices)} {algo} members on "
            f"{self.config['env']['id']}: {steps:,}/{learner['target_steps']:,} env steps each, a decision every "
            f"{self.pbt['interval']:,} ({self.pbt['metric']}, quantile {self.pbt['quantile']:g}), members "
            f"{how}; run directory {self.run_dir}")
        for index, cause in sorted(self.dropped.items()):
            self.display.message(f"{member_name(index)} stays dropped: {cause}")

    # ---------------------------------------------------------------- training
    def _absorb(self, report):
        """Keep a member's report and print what it printed."""
        self.reports[report["index"]] = report
        self._print_lines(report["index"], report.get("lines"))

    def _print_lines(self, index, lines):
        for line in lines or ():
            self.display.message(f"{member_name(index)}: {line}")

    def _drop(self, index, cause):
        """Drop member ``index`` from the population, with one line; the others go on."""
        self.dropped[index] = " ".join(str(cause).split())
        self.reports.pop(index, None)
        self.members.remove(index)
        left = len(self.members.members)
        self.display.message(f"{member_name(index)} dropped from the population: {self.dropped[index]}; "
                             f"{left} member{'s' if left != 1 else ''} go on")
        if not left:
            raise UsageError(f"every member of the population failed; the last: {self.dropped[index]}")

    def _call(self, method, args_of):
        """Call ``method`` on every member (``args_of(index)`` its arguments); a member
        whose run failed or whose process died is dropped. Returns index -> result of the
        others."""
        results = self.members.call({i: (method, args_of(i)) for i in sorted(self.members.members)})
        out = {}
        for index, (result, exc) in sorted(results.items()):
            if isinstance(exc, MemberLost):
                self._drop(index, exc)
            elif exc is not None:
                raise exc
            elif isinstance(result, dict) and result.get("failed"):
                self._print_lines(index, result.get("lines"))
                self._drop(index, result["failed"])
            else:
                out[index] = result
        return out

    def metric_of(self, report):
        """A member's value of ``pbt.metric`` in ``report`` (None: none yet)."""
        return report["test_return"] if self.pbt["metric"] == "test_return" else report["train_return"]

    def _metrics(self):
        """Index -> the metric of every member; with test_return, each is evaluated now."""
        if self.pbt["metric"] == "test_return":
            for index, value in self._call("evaluate", lambda i: ()).items():
                self.reports[index]["test_return"] = value
        return {i: self.metric_of(r) for i, r in self.reports.items()}

    def train(self):
        """Train every member, interval after interval, making a decision at each boundary,
        until every member reaches ``learner.target_steps``, the best one
        ``pbt.target_return``, or Ctrl-C.

        Returns
        -------
        str
            "done", "target" (``pbt.target_return`` reached) or "interrupted".
        """
        interval, target = self.pbt["interval"], self.config["learner"]["target_steps"]
        self._next_progress = time.monotonic() + self.config["learner"]["log_every"]
        self._progress_mark = (time.monotonic(), sum(r["env_steps"] for r in self.reports.values()))
        while True:
            boundary = min((self.round + 1) * interval, target)
            for report in self._call("train_until", lambda i: (boundary,)).values():
                self._absorb(report)
            if self.interrupt.requested or any(r["stopped"] for r in self.reports.values()):
                return "interrupted"
            if all(r["done"] for r in self.reports.values()):
                return "done"
            metrics = self._metrics()
            self.history.append((boundary, dict(metrics)))
            self._progress(boundary, metrics)
            goal = self.pbt["target_return"]
            best = max((m for m in metrics.values() if m is not None), default=None)
            if goal is not None and best is not None and best >= goal:
                leader = max((i for i, m in metrics.items() if m is not None), key=lambda i: metrics[i])
                self.display.message(f"{member_name(leader)} reached pbt.target_return {goal:g} "
                                     f"({self.pbt['metric']} {best:.1f}) at {boundary:,} env steps")
                return "target"
            self.decide(boundary, metrics)
            self.round += 1
            self.maybe_save(boundary)

    def _show_progress(self):
        """While members train between two decisions: a progress line every
        ``learner.log_every`` seconds (plain), the status line redrawn (live); nothing when
        quiet. Called between the members' updates (in this process) or while waiting on
        their actors."""
        now = time.monotonic()
        if self.quiet or now < self._next_progress:
            return
        live = self.display.live
        self._next_progress = now + (REDRAW_EVERY_S if live else self.config["learner"]["log_every"])
        progress = self.members.progress()
        if not progress:
            return
        steps = {i: p["env_steps"] for i, p in progress.items()}
        total = sum(steps.values())
        fps = (total - self._progress_mark[1]) / max(1e-9, now - self._progress_mark[0])
        self._progress_mark = (now, total)
        returns = ", ".join(f"{member_name(i)} {'-' if p['train_return'] is None else format(p['train_return'], '.1f')}"
                            for i, p in sorted(progress.items()))
        target = self.config["learner"]["target_steps"]
        low, high = min(steps.values()), max(steps.values())
        line = (f"[{self.elapsed():6.0f}s] env steps {low:,}{f'-{high:,}' if high != low else ''}/{target:,} | "
                f"{fps:,.0f} steps/s | train_return: {returns} | next decision at "
                f"{min((self.round + 1) * self.pbt['interval'], target):,}")
        if live:
            self.display.status(line)
        else:
            self.display.message(line)

    def _progress(self, step, metrics):
        if self.quiet:
            return
        parts = [f"{member_name(i)} {'-' if m is None else f'{m:.1f}'}" for i, m in sorted(metrics.items())]
        self.display.message(f"{step:,}/{self.config['learner']['target_steps']:,} env steps | {self.pbt['metric']}: "
                             f"{', '.join(parts)} | {format_duration(self.elapsed())} elapsed")

    def decide(self, step, metrics):
        """One exploit/explore decision at env step ``step`` among members with ``metrics``
        (index -> value): the members replaced copy their sources in place and get
        perturbed values; each is a line of the output and rows of population.csv."""
        rows = []
        for loser, source in plan_exploits(metrics, self.pbt["quantile"], self.rng):
            if loser not in self.members.members or source not in self.members.members:
                continue   # dropped by an earlier copy of this decision
            copied = self.reports[source]["values"]
            changes, how, clipped = {}, {}, {}
            for param in self.parameters:
                q = param.qualified
                changes[q], how[q], clipped[q] = perturb(param, copied[q], self.rng)
            old = self.reports[loser]["values"]
            started = time.perf_counter()
            try:
                answer = self.members.exploit(loser, source, changes)
            except MemberLost as exc:
                self._drop_lost(loser, source, exc)
                continue
            seconds = time.perf_counter() - started
            self._print_lines(loser, answer["lines"])
            self.reports[loser]["values"] = answer["values"]
            self.reports[loser]["train_return"] = self.reports[source]["train_return"]
            self.reports[loser]["test_return"] = self.reports[source]["test_return"]
            self.decisions += 1
            text = "; ".join(f"{p.key} {_show(old[p.qualified])} -> {_show(changes[p.qualified])} "
                             f"({_how_text(how[p.qualified], copied[p.qualified], clipped[p.qualified])})"
                             for p in self.parameters)
            self.display.message(f"at {step:,} env steps: {member_name(loser)} ({_show(metrics[loser])}) copies "
                                 f"{member_name(source)} ({_show(metrics[source])}) in {seconds:.2f} s: {text}")
            for param in self.parameters:
                rows.append({"step": step, "elapsed": round(self.elapsed(), 3), "to": loser, "from": source,
                             "to_metric": metrics[loser], "from_metric": metrics[source], "name": param.qualified,
                             "old": old[param.qualified], "copied": copied[param.qualified],
                             "new": changes[param.qualified],
                             "how": how[param.qualified] + (", clipped" if clipped[param.qualified] else ""),
                             "copy_s": round(seconds, 4)})
        if rows:
            path = self._path(POPULATION_CSV)
            columns, existing = _read_csv(path)
            _write_csv(path, columns or CSV_COLUMNS, existing + rows)
            self.rows += len(rows)

    def _drop_lost(self, loser, source, exc):
        """After a copy that failed for a lost process: drop whichever of the two is gone."""
        answers = self.members.call({i: ("values", ()) for i in (loser, source)})
        lost = [i for i, (_, error) in answers.items() if isinstance(error, MemberLost)]
        for index in lost or [loser]:
            self._drop(index, answers[index][1] or exc)

    # ------------------------------------------------------------------ saving
    def save(self):
        """Save every member's model and checkpoint, then population.json; a member's
        failed save is said on a line of its own (its previous checkpoint is intact)."""
        results = self.members.call({i: ("save", ()) for i in self.members.members})
        for index, (_, exc) in sorted(results.items()):
            if isinstance(exc, SaveError):
                self.display.message(f"warning: {member_name(index)} not saved: {exc}; its previous checkpoint "
                                     f"is intact")
            elif exc is not None and not isinstance(exc, MemberLost):
                raise exc
        self._write_state()

    def maybe_save(self, step):
        """``save`` when ``learner.save_every`` seconds passed since the last save, or the
        env steps passed a multiple of ``learner.save_every_steps``."""
        now = time.monotonic()
        if save_due(self.config["learner"], now - self._last_save, self._save_step_mark, step):
            self._save_step_mark, self._last_save = step, now
            self.save()

    def interrupted(self):
        """After Ctrl-C: save every member and the population's state, say how to continue."""
        results = self.members.call({i: ("save_on_exit", ()) for i in self.members.members})
        for index, (answer, exc) in sorted(results.items()):
            if exc is not None:
                raise exc
            self._print_lines(index, answer["lines"])
        self._write_state()
        steps = ", ".join(f"{member_name(i)} {r['env_steps']:,}" for i, r in sorted(self.reports.items()))
        self.display.message(f"interrupted ({steps} env steps); every member saved; continue with: "
                             f"pytorchrl resume {self.run_dir}")

    def finish(self):
        """End every member's run (save, evaluate, summary.yaml), name the best member and
        write the population's summary.yaml; returns it."""
        summaries = self._call("finish", lambda i: ())
        for index, summary in summaries.items():
            self._print_lines(index, summary.pop("lines"))
        self._write_state()
        use_test = self.pbt["metric"] == "test_return"

        def score(index):
            s = summaries[index]
            value = s.get("test_return") if use_test else s.get("train_return")
            return -math.inf if value is None else value

        best = max(summaries, key=score)
        members = {member_name(i): {**{k: v for k, v in s.items() if k != "model"},
                                    "values": {p.qualified: self.reports[i]["values"][p.qualified]
                                               for p in self.parameters}}
                   for i, s in sorted(summaries.items())}
        summary = {"best": member_name(best), "decisions": self.decisions, "seconds": round(self.elapsed(), 2),
                   "members": members, "dropped": {member_name(i): c for i, c in sorted(self.dropped.items())}}
        with open(self._path(SUMMARY), "w") as f:
            f.write(dump_config(summary))
        s = summaries[best]
        returns = [f"{k.replace('_', ' ')} {s[k]:.1f}" for k in (("test_return", "train_return") if use_test else
                                                                   ("train_return", "test_return"))
                   if s.get(k) is not None]
        values = ", ".join(f"{p.key} {_show(members[member_name(best)]['values'][p.qualified])}"
                           for p in self.parameters)
        self.display.message(f"best member: {member_name(best)} ({', '.join(returns) or 'no return yet'}) at "
                             f"{s['env_steps']:,} env steps; {values}; {self.decisions} cop{'y' if self.decisions == 1 else 'ies'} in {POPULATION_CSV}; "
                             f"{format_duration(self.elapsed())} in all")
        return summary

    def close(self):
        """Close the members and give Ray back (idempotent)."""
        if self.members is not None:
            members, self.members = self.members, None
            members.close()
        if self._ray_held:
            from pytorchrl.scheme.base.ray_runtime import release_ray
            self._ray_held = False
            release_ray()

    def run(self):
        """Start (or resume), train and finish, closing everything in the end.

        Returns
        -------
        str
            "done", or "interrupted" (Ctrl-C or SIGTERM; every member and the population's
            state are saved).
        """
        # Entered before Ray starts: ensure_ray keeps this handler over the one ray.init
        # installs, and a signal while the members start stops them at their first update.
        with self.interrupt:
            try:
                self.start()
                try:
                    outcome = self.train()
                except KeyboardInterrupt:   # a second Ctrl-C
                    outcome = "interrupted"
                self._next_progress = math.inf
                self.display.close()        # (ends a live status line)
                if outcome == "interrupted":
                    self.interrupted()
                    return "interrupted"
                self.finish()
                return "done"
            finally:
                self.close()


def _how_text(how, copied, clipped):
    """How a perturbed value was made, for a decision's line: "resampled", "x2 of 0.03", or
    "x2 of 0.03, clipped to the upper bound of log_uniform" when the product left its range."""
    if how == "resampled":
        return how
    return f"{how} of {_show(copied)}" + (f", clipped to {clipped}" if clipped else "")


def _show(value):
    """A value in a line of the output: numbers with 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


__all__ = ["Population", "InProcessMembers", "RayMembers", "MemberLost", "member_config", "parameters",
           "is_population", "POPULATION_CSV", "POPULATION_STATE", "CSV_COLUMNS"]
