"""The configuration reference (docs/configuration.md), generated from the schema.

::

    python -m pytorchrl.config.docgen > docs/configuration.md
    pytorchrl keys --markdown            # the same text

Every key's kind, default, range and meaning comes from :mod:`pytorchrl.config.schema`,
which reads them from the components' signatures and docstrings; a test checks that the
committed file is this output.
"""

import sys

from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.storages import STORAGES
from pytorchrl.config.agent_presets import AGENT_PRESETS
from pytorchrl.config.schema import (MUTATION_KEYS, POLICY_LOSS_ADDON_KEYS, REQUIRED, SCHEDULE_KEYS, SECTION_ORDER,
                                     SECTIONS, TOP_LEVEL, WANDB_KEYS, algorithm_keys, storage_keys)
from pytorchrl.scheme.presets import PRESETS

INTRO = """\
# Configuration reference

<!-- Generated from the schema by `python -m pytorchrl.config.docgen > docs/configuration.md`
     (the same text as `pytorchrl keys --markdown`). Do not edit by hand: change the
     components' docstrings or pytorchrl/config/schema.py and generate it again. -->

A configuration file is YAML with three top-level keys and seven sections. Every key is
optional unless marked *required*; a missing key takes its default, and the run directory
receives the resolved file (`config.yaml`) with every default filled in. The file is
validated before anything starts: an unknown key, a wrong type or a value out of range is
one line naming the key and the value, and exit status 2.

```yaml
seed: 0
env: {id: CartPole-v1, vec_env_size: 8, test_env: true}
algorithm: {name: PPO, lr: 1.0e-3, num_epochs: 20, mini_batch_size: 256}
storage: {name: GAEBuffer, size: 32, gae_lambda: 0.8}
scheme: {preset: single-process}
learner: {target_steps: 100000}
schedules:
  - {name: lr, target: algorithm, kind: linear, start: 1.0e-3, end: 0.0}
```

Any key can be overridden on the command line with a dotted path and a YAML value;
numbers such as `1e-4` are read as numbers (YAML 1.1 would read a string):

```bash
pytorchrl train examples/configs/ppo_cartpole.yaml algorithm.gamma=0.99 actor.hidden_sizes=[128,128] schedules.0.end=1e-5
pytorchrl train examples/configs/ppo_cartpole.yaml algorithm.lr=3e-4
# algorithm.lr=3e-4 replaces schedules.0 (linear schedule of algorithm.lr): the schedule is dropped, algorithm.lr is 0.0003 for the whole run
```

A value given for a parameter that a schedule drives holds for the whole run: the schedule
is dropped, and a line says so (as above: that file anneals `lr`). To keep the schedule and
change where it starts, override the schedule instead (`schedules.0.start=3e-4`); giving
both is refused. `pytorchrl resume RUN_DIR algorithm.lr=1e-4` stops the schedule from the
step it resumes at (as `pytorchrl set` does).

More workers run as Ray actors, each asking Ray for one CPU unless its resources say
otherwise: on a machine with fewer cores than that, the run is refused in one line naming
what was asked for. Ask for less per worker:

```bash
pytorchrl train examples/configs/ppo_cartpole.yaml scheme.num_col_workers=4 scheme.col_workers_resources.num_cpus=0.5
```
"""


def _value(value):
    """A default as it is written in YAML."""
    if value is REQUIRED:
        return "*required*"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{'true' if value else 'false'}`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}`"
    if isinstance(value, list):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    return f"`{value}`"


def _cell(text):
    # "<run_dir>" would be read as an HTML tag by Markdown renderers.
    return str(text).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _table(keys):
    rows = ["| key | value | default | meaning |", "| --- | --- | --- | --- |"]
    for name, key in keys.items():
        value = key.expected
        if key.range_text:
            value += f", {key.range_text}"
        rows.append(f"| `{name}` | {_cell(value)} | {_value(key.default)} | {_cell(key.doc)} |")
    return "\n".join(rows)


def _presets_table():
    rows = ["| preset | what it does | scheme values |", "| --- | --- | --- |"]
    for preset in PRESETS.values():
        values = ", ".join(f"{k}: {_value(v).strip('`')}" for k, v in preset.scheme.items())
        rows.append(f"| `{preset.name}` | {_cell(preset.description)} | {_cell(values)} |")
    return "\n".join(rows)


def _agents_table():
    rows = ["| preset | agent | example |", "| --- | --- | --- |"]
    for agent in AGENT_PRESETS.values():
        rows.append(f"| `{agent.name}` | {_cell(agent.description)} | `examples/configs/{agent.file}` |")
    return "\n".join(rows)


AGENTS_TEXT = """\
`preset: NAME` names a whole agent: its values (algorithm, storage, actor, env, scheme layout,
learner budget, schedules) fill every section first, and the keys written in the file or
given on the command line win, key by key (`pytorchrl train examples/configs/ppo_atari.yaml
learner.target_steps=100000`). A section whose `algorithm.name`, `storage.name` or
`env.family` differs from the preset's replaces the preset's section instead (another
algorithm also drops the preset's schedules, and its actor and storage when it is of the
other family, on- or off-policy); an error in a value the file did not write says it is the
preset's. `pytorchrl presets NAME` prints an agent's values; the files are in
`pytorchrl/config/presets/`.
"""

SECTION_TEXT = {
    "env": "The environments: a family (`gym`, `atari`, `mujoco`, `minigrid`), an id, the family's options, "
           "and how many run side by side. The family options (`frame_stack`, `episodic_life`, ...) default "
           "to null, the factory's own default; one the family does not have is refused. Image observations "
           "(Atari's stacked frames, MiniGrid's `observation: rgb`) get the CNN feature extractor "
           "(`actor.feature_extractor: auto`); MiniGrid's small symbolic 7x7x3 view (`observation: image`) "
           "and flat vectors get the MLP (see [agents.md](agents.md#minigrid)).",
    "algorithm": "The algorithm (`name`) and its hyperparameters; the valid keys depend on the name. "
                 "A hyperparameter can change while training (`pytorchrl set RUN_DIR lr=1e-4`, "
                 "`schedules`) unless it says \"Fixed once built\" (e.g. `numpy_update`): a change of "
                 "those is refused before anything is applied.",
    "actor": "The policy and value networks.",
    "storage": "Where rollouts are kept and prepared (advantages, returns); the valid keys depend on "
               "the name. Parameters can change while training like the algorithm's, except those that "
               "say \"Fixed once built\" (a replay's `size` and `n_step`: its memory is laid out for them).",
    "scheme": "How the work is spread: collection workers (`col_*`) per gradient worker, gradient "
              "workers (`grad_*`), synchronous or asynchronous at each level, central or decentralized "
              "updates. With one worker at every level everything runs in one process without Ray. "
              "`preset` fills the section from a named layout (below); keys written next to it win.",
    "learner": "The training loop: its length, logging and checkpoints.",
}


PBT_TEXT = """\
Population-based training (`pytorchrl pbt CONF`, see [pbt.md](pbt.md)): only a file given to
`pytorchrl pbt` has this section (`pytorchrl train` refuses it). Every parameter named in
`mutations` or `initial` must be a hot-swappable algorithm or storage parameter (`lr`,
`algorithm.clip_param`, `storage.gae_lambda`): a key fixed once its component is built, a key of
another section, or one a schedule drives is refused when the file is read, with exit status 2.

```yaml
pbt:
  population: 4
  interval: 10000
  quantile: 0.25
  mutations:
    lr: {factors: [0.8, 1.25], log_uniform: [1.0e-5, 1.0e-2], resample_probability: 0.25}
    storage.gae_lambda: {values: [0.9, 0.95, 0.99]}
  initial:
    lr: [3.0e-5, 3.0e-4, 3.0e-3, 1.0e-2]
```
"""

ADDONS_TEXT = """\
`algorithm.policy_loss_addons` (PPO and A2C; see [agents.md](agents.md#policy-loss-add-ons)): terms
added to the policy loss that compare the policy with policies saved by earlier runs. Each
checkpoint is built with this run's `actor` section and loaded with the file's weights (a
checkpoint of another network is refused when the run starts). With add-ons the loss is computed
on the reference torch path: the numpy update and the fused loss step aside (said once in the log).

```yaml
algorithm:
  name: PPO
  policy_loss_addons:
    - {name: AttractionKL, checkpoints: [runs/cartpole-teacher/model.state_dict], weights: [1.0], loss_term_weight: 1.0}
```
"""

WANDB_TEXT = """\
`learner.wandb` tracks the run with Weights & Biases (see [tracking.md](tracking.md)): every
metric of metrics.csv (plotted against `Scheme/EnvSteps`), every hot-swap, the resolved
configuration and the agent components (`Scheme.get_agent_components()`, under
`agent_components` in the W&B config); the W&B run is finished when the job ends. A key not
listed here is refused; without the wandb package a run that asks for W&B is refused before
it starts (`pip install "pytorchrl[wandb]"`).

```yaml
learner:
  wandb: {project: cartpole, mode: offline, tags: [ppo]}
```
"""

MUTATIONS_TEXT = """\
How a copied value is perturbed: multiplied by one of `factors`, or resampled from `values` or
`log_uniform` (with both, resampled with `resample_probability`).
"""


def configuration_reference():
    """The whole reference as Markdown text."""
    out = [INTRO, "## Top level\n", _table(TOP_LEVEL), "", "### agent presets\n", AGENTS_TEXT, _agents_table(), ""]
    for section in SECTION_ORDER:
        if section == "schedules":
            out += ["## schedules\n",
                    "A list of planned hot-swaps, applied by the learner between updates at the env step "
                    "they are due (each change is logged in `hot_swaps.csv` and TensorBoard). `start` and "
                    "`end` obey the type and range of the parameter they schedule.\n",
                    "```yaml\nschedules:\n"
                    "  - {name: lr, target: algorithm, kind: linear, start: 1.0e-3, end: 0.0}\n"
                    "  - {name: gae_lambda, target: storage, kind: step, start: 0.95, end: 0.9, "
                    "start_step: 50000}\n```\n",
                    _table(SCHEDULE_KEYS), ""]
            continue
        out += [f"## {section}\n", SECTION_TEXT[section] + "\n", _table(SECTIONS[section]), ""]
        if section == "algorithm":
            for name in ALGORITHMS:
                out += [f"### algorithm `name: {name}`\n", _table(algorithm_keys(name)), ""]
            out += ["### each entry of `policy_loss_addons`\n", ADDONS_TEXT, _table(POLICY_LOSS_ADDON_KEYS), ""]
        elif section == "storage":
            for name, cls in STORAGES.items():
                if cls.__name__ != name:
                    out += [f"### storage `name: {name}`\n", f"Short name of `{cls.__name__}` (same keys).\n", ""]
                    continue
                out += [f"### storage `name: {name}`\n", _table(storage_keys(name)), ""]
        elif section == "learner":
            out += ["### `learner.wandb`\n", WANDB_TEXT, _table(WANDB_KEYS), ""]
        elif section == "scheme":
            out += ["### presets\n",
                    "`scheme: {preset: NAME}` (or `scheme.preset=NAME` on the command line); "
                    "`pytorchrl presets` prints this list. Resources are fractions of a CPU so that "
                    "every preset runs on a 2-core machine; raise them (and the worker counts) on "
                    "bigger ones.\n", _presets_table(), ""]
    out += ["## pbt\n", PBT_TEXT, _table(SECTIONS["pbt"]), "", "### each entry of `mutations`\n",
            MUTATIONS_TEXT, _table(MUTATION_KEYS), ""]
    return "\n".join(out).rstrip() + "\n"


def main():
    """Print the reference to stdout."""
    sys.stdout.write(configuration_reference())


if __name__ == "__main__":
    main()
