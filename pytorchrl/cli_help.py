"""The help texts of the ``pytorchrl`` command's subcommands (``pytorchrl.cli``): what
each does, and the epilog after its options (examples, files written, exit statuses)."""

TRAIN_DESCRIPTION = """\
Train an agent described by a YAML configuration file. The configuration is validated
before anything starts. On a terminal one status line shows the progress (env steps,
steps per second, recent return, policy lag, elapsed and remaining time); elsewhere a line
is printed every learner.log_every seconds. Ctrl-C stops at the end of the current update
and saves the model and a checkpoint ('pytorchrl resume RUN_DIR' continues it)."""

RUN_DIR_HELP = """\
run directory (default runs/<CONF stem>-<timestamp>, or run_dir in the file):
  config.yaml       the resolved configuration (every default filled in)
  metrics.csv       one row every learner.log_every s (and every 1/200 of the run), a column per metric
  tensorboard/      the same metrics as TensorBoard event files (tensorboard --logdir runs)
  hot_swaps.csv     every parameter change: schedules, 'pytorchrl set', resume overrides
  model.state_dict  the actor's weights (at the end, on Ctrl-C, every learner.save_every s)
  checkpoint.pt     the full training state, saved with the model (for 'pytorchrl resume'),
                    also every learner.save_every_steps env steps if set
  checkpoint.prev.pt  the checkpoint before it, used by 'pytorchrl resume' if checkpoint.pt is damaged
  summary.yaml      steps, time, final train return and deterministic test return
  monitor/          one CSV line per finished episode (env.monitor)
  control/          requests of 'pytorchrl set' and their answers"""

TRAIN_EPILOG = f"""\
overrides:
  KEY=VALUE pairs change the configuration after it is loaded; KEY is a dotted path
  (section.key, schedules.0.end) and VALUE is read as YAML:
    pytorchrl train conf.yaml algorithm.lr=1e-4 scheme.num_col_workers=4 actor.hidden_sizes=[128,128]
    pytorchrl train conf.yaml scheme.preset=dd-ppo     ('pytorchrl presets' lists the layouts)
    pytorchrl train examples/configs/ppo_atari.yaml env.id=BreakoutNoFrameskip-v4   (agent preset PPO-Atari)
  'pytorchrl keys' lists every key with its type, default and meaning.

while it runs:
  pytorchrl set RUN_DIR lr=1e-4      change a parameter on every worker, between updates

{RUN_DIR_HELP}

exit status: 0 done, 2 error (configuration, environment, resources; a worker that keeps dying or an
environment error under scheme.on_env_error=stop, after the checkpoint is saved), 130 interrupted
(Ctrl-C, SIGTERM)"""

PBT_DESCRIPTION = """\
Population-based training in place: train a population of pbt.population members of the
configuration side by side (pbt section: interval, metric, quantile, mutations, initial
values). Every pbt.interval env steps the members are ranked by pbt.metric; each of the
bottom quantile takes over the weights, optimizer state and counters of a member of the
top quantile (through Ray's object store, no file) and gets perturbed values by hot-swap:
its run goes on, no process restarts. Members run as Ray actors side by side, or one after
the other in this process on one core (pbt.execution). Ctrl-C saves every member;
'pytorchrl resume RUN_DIR' continues the population."""

PBT_EPILOG = """\
run directory (default runs/<CONF stem>-<timestamp>):
  config.yaml       the population's resolved configuration (with its pbt section)
  population.csv    one row per perturbed parameter of each decision: step, elapsed, to, from,
                    to_metric, from_metric, name, old, copied, new, how, copy_s
  population.json   the population's state ('pytorchrl resume' continues from it)
  summary.yaml      every member's final returns and values, the best member
  member-<i>/       member i: an ordinary run directory (metrics.csv, hot_swaps.csv with every
                    copy and perturbation, tensorboard/, checkpoint.pt, model.state_dict, ...)

  pytorchrl plot RUN_DIR      draws the members and marks each copy

example:
  pytorchrl pbt examples/configs/pbt_ppo_cartpole.yaml --population 4 --run-dir runs/pbt

exit status: 0 done, 2 error (configuration: a key that cannot be perturbed, ...; every member
failed), 130 interrupted (Ctrl-C, SIGTERM)"""

RESUME_DESCRIPTION = """\
Continue a run from RUN_DIR/checkpoint.pt with the configuration in RUN_DIR/config.yaml:
weights, optimizer, step counters, recent returns, schedules, hot-swapped values and
random states are restored; metrics.csv, hot_swaps.csv and the TensorBoard curves continue
from the checkpoint's step (rows written after it, by a run that crashed, are dropped).
Environments start new episodes. If checkpoint.pt cannot be read (empty, truncated,
damaged), the one saved before it, checkpoint.prev.pt, is used, and the job says so; a
checkpoint that does not fit the configuration (another network or algorithm) is an error.
A population's run directory (pytorchrl pbt) continues as a population: every member from
its checkpoint, population.csv and the decisions' random draws from population.json."""

RESUME_EPILOG = """\
overrides:
  KEY=VALUE pairs change the run's configuration (config.yaml is rewritten with them):
    pytorchrl resume runs/ppo learner.target_steps=200000     train further
    pytorchrl resume runs/ppo algorithm.lr=1e-4               applied as a hot-swap, logged
  The environment (env.id, env.kwargs), the actor and the algorithm and storage names
  cannot change: the checkpoint's model depends on them.

exit status: 0 done, 2 error (no checkpoint, target already reached, a worker that keeps dying, ...),
130 interrupted (Ctrl-C, SIGTERM)"""

EVALUATE_DESCRIPTION = """\
Run deterministic episodes (the mode of the policy) with the model saved in RUN_DIR
(model.state_dict, rebuilt from RUN_DIR/config.yaml) in one environment, print each
episode's return and the mean and standard deviation, and optionally film them."""

EVALUATE_EPILOG = """\
videos (gymnasium's rgb_array rendering; classic-control envs need pygame):
  --video out.gif   needs Pillow (installed with matplotlib) or imageio; frames at most 480 px wide
  --video out.mp4   needs imageio and imageio-ffmpeg: pip install 'pytorchrl[video]'

exit status: 0 done, 2 error (no model, missing video dependency, ...)"""

RECORD_DESCRIPTION = """\
Record demonstrations for PPO+D (storage.name: ppod): episodes played by the policy saved
in a run directory, or by a human typing one action per step (--human), each written to
OUT_DIR as an .npz file (Observation, Action, Reward, FrameSkip) that the storage's
initial_human_demos_dir or initial_agent_demos_dir reads."""

RECORD_EPILOG = """\
examples:
  pytorchrl record-demos runs/ppo_doorkey demos/ --demos 5 --min-return 0.5
  pytorchrl record-demos examples/configs/ppod_minigrid_doorkey.yaml demos/ --human --demos 1

exit status: 0 all demonstrations recorded, 2 error or fewer than asked for"""

PLOT_DESCRIPTION = """\
Draw learning curves from the metrics.csv of one or more runs: the return against
environment steps (left) and against wall-clock time (right). Runs with the same --label,
or without labels runs whose configurations differ only in the seed (and run_dir and the
learner section), are one curve: their mean, with a band from min to max (or +-1 std)
over the steps all of them reached. A population's directory (pytorchrl pbt) draws each
member as a curve of its own and marks every copy of population.csv on the member replaced."""

PLOT_EPILOG = """\
examples:
  pytorchrl plot runs/ppo_cartpole-20250101-120000 -o curves.png
  pytorchrl plot runs/ -o curves.png                   every run under runs/
  pytorchrl plot runs/a-* runs/b-* --label A --label A --label B --label B -o ab.pdf
  pytorchrl plot runs/ --metric TestReward --band std --size 6x3 --dpi 300 -o test.png

A PNG is WIDTH x DPI by HEIGHT x DPI pixels (10x4 at 150: 1500 x 600); .pdf and .svg
give vector files.

exit status: 0 done, 2 error (no run, no such metric, ...)"""

SET_DESCRIPTION = """\
Change algorithm or storage parameters of a running job (pytorchrl train / resume in
RUN_DIR). The request is written to RUN_DIR/control/; the job picks it up between two
updates (it looks every 0.5 s), validates it, applies it on every worker and answers;
this command waits for the answer and prints it. An invalid request is refused with the
reason and the run goes on unchanged. Every change is logged in the job's output,
hot_swaps.csv and TensorBoard. Changing a parameter that a schedule drives stops that
schedule."""

SET_EPILOG = """\
keys:
  lr=1e-4                  a parameter of the algorithm or of the storage, by name
  algorithm.clip_param=0.1 an algorithm parameter
  storage.gae_lambda=0.9   a storage parameter
  Several KEY=VALUE pairs are applied together, or none of them.

exit status: 0 applied, 2 refused (with the reason), no job running, or no answer in time"""
