"""Every shell command and Python snippet of README.md and docs/ runs here as written, and
the lines the pages say a command prints are the lines it prints.

``BLOCKS`` says how each fenced block of the pages is checked, keyed by its page and its
first line: a block without an entry (a new one) or an entry without a block (a changed
first line) fails ``test_every_block_of_the_documentation_is_checked``. The kinds:

* ``RUN``: shell commands, in order, in a directory of the page's own (``examples/`` and
  ``train.py`` linked in), as a user types them one after another. ``pytorchrl`` and
  ``python train.py`` run in this process (``pytorchrl.cli.main``, what the console script
  calls), on the session's Ray instance: a process and a Ray instance of their own would
  prove nothing more. A ``# `` line right under a command is a line it prints; a note at
  its end, ``(exit 2 ...)``, is the exit status it ends with (0 otherwise).
* ``PYTHON``: executed, in the page's directory (with ``context``: the names the page's
  prose gives, e.g. a running learner).
* ``OUTPUT``: what a command of the page prints (``of``): each line matches one of its
  lines, in order (``...``: anything).
* ``FAILURE``: ``$ command`` lines and what each prints: an error, exactly.
* ``YAML``: a configuration file, or part of one (validated with the rest of a small one).
* ``EXCERPT``: source quoted from a file of the repository, which must hold it.
* ``ELSEWHERE``: checked by another test, named (it must exist), with the shape its line has.
* ``TEXT``: a diagram or a tree of files: nothing to run.

Budgets are cut by ``PYTORCHRL_STEP_LIMIT`` (every learner is done after that many env
steps: ``Learner.step_limit``), never by changing a command. Lines of printed output match
with their numbers free (a budget changes them) unless they are an error, which must be
printed as written. What cannot run here is said per command in ``NOT_HERE``.
"""

import contextlib
import dataclasses
import fcntl
import importlib
import io
import os
import pty
import re
import shlex
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
import types

import pytest
import yaml

from pytorchrl.config import validate_config

from cli_helpers import REPO, TESTS, default_sigint, env, pytorchrl_in_process, source_of_test

DOCS = os.path.join(REPO, "docs")
EXAMPLES = os.path.join(REPO, "examples", "configs")
PAGES = ["README.md"] + [f"docs/{name}" for name in sorted(os.listdir(DOCS)) if name.endswith(".md")]

#: Env steps each learner of a documented command trains here (PYTORCHRL_STEP_LIMIT).
STEP_LIMIT = 2048

RUN, PYTHON, OUTPUT, FAILURE, YAML, EXCERPT, ELSEWHERE, TEXT = (
    "run", "python", "output", "failure", "yaml", "excerpt", "elsewhere", "text")


@dataclasses.dataclass
class Check:
    """How one block is checked (see the module's documentation).

    Attributes
    ----------
    kind : str
        One of the kinds above.
    limit : int or None
        PYTORCHRL_STEP_LIMIT of its commands (snippets): more where what it prints needs a
        longer run (a population's decisions), None for the budget as written (a policy
        good enough to record).
    context : str
        PYTHON: code run first in the snippet's namespace (names the page's prose defines).
    stdin : str
        RUN: what is typed into a command that reads the keyboard (``--human``).
    of : str
        OUTPUT: the command (as written on the page) whose output it is; "" for the
        background command (``background``).
    background : str
        RUN: a regular expression: the block's command runs on a terminal in the background
        (``pytorchrl set`` talks to it) until a line of its output matches it.
        OUTPUT: "interrupt" sends it Ctrl-C first (its interrupted line is part of it).
    setup : tuple
        Commands run first (in the page's directory), not shown on the page where they go
        without saying (a running job for ``pytorchrl set``).
    where : str
        EXCERPT: the file; ELSEWHERE: "test module::test".
    shape : str
        ELSEWHERE: the regular expression every line of the block matches (the line the
        named test checks the library prints).
    """

    kind: str
    limit: int = STEP_LIMIT
    context: str = ""
    stdin: str = ""
    of: str = None
    background: str = ""
    setup: tuple = ()
    where: str = ""
    shape: str = ""


#: Why a command cannot run in this suite (by its first words), and what is checked instead.
NOT_HERE = {
    "python3 -m venv": "makes the environment the suite runs in (the quick start, run by hand from a fresh clone)",
    ". .venv/bin/activate": "the quick start's environment, as above",
    "pip install": "installs packages: the extras it names are checked to exist in setup.py",
    "python -m pytest": "the test suite itself",
    "wandb sync": "uploads to the W&B server: needs the network and an account",
}

#: Modules missing from the test extras: a command of a page that needs one runs where it is
#: installed and is said to be skipped elsewhere.
NEEDS = {"examples/configs/ppo_minigrid_empty.yaml": "minigrid",
         "examples/configs/sac_her_fetch_reach.yaml": "gymnasium_robotics"}

_HOT_SWAP_CONTEXT = """
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

envs, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=2)
algo_factory, name = A2C.create_factory()
scheme = Scheme(algo_factory=algo_factory, actor_factory=OnPolicyActor.create_factory(obs_space, action_space, name),
                storage_factory=GAEBuffer.create_factory(size=8), train_envs_factory=envs)
learner = Learner(scheme, target_steps=64)
new_actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name,
                                                 feature_extractor_kwargs={"hidden_sizes": [32]})
"""

_EXARL_CONTEXT = """
import importlib.util, os
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme import Scheme
# An agent written against EXARL's ExaAgent only, as a user's (tests/unit/test_exarl_agents.py).
spec = importlib.util.spec_from_file_location("exarl_agents", os.path.join(TESTS, "unit", "test_exarl_agents.py"))
agents = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agents)
MyDQN = agents.TorchDQN
train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"})
"""

#: Every fenced block of the pages: (page, its first line) -> Check.
BLOCKS = {
    # ------------------------------------------------------------------ README.md
    ("README.md", "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e . && pytorchrl "
                  "train examples/configs/ppo_cartpole.yaml"): Check(RUN),
    ("README.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[test]" && '
                  'python -m pytest -q -n 2'): Check(RUN),
    # (until its training and test returns are 500: the policy that the README's record-demos
    # keeps 5 episodes of 500 of, also after the changes 'pytorchrl set' makes)
    ("README.md", "pytorchrl train examples/configs/ppo_cartpole.yaml --run-dir runs/ppo learner.target_steps=300000"):
        Check(RUN, background=r".*\| return 500\.0 \| test 500\.0 \|.*"),
    ("README.md", "training PPO on CartPole-v1: 0/300,000 env steps; run directory runs/ppo"): Check(OUTPUT, of=""),
    ("README.md", "pytorchrl set runs/ppo lr=1e-4"): Check(RUN),
    ("README.md", "interrupted at 61,440 env steps; model saved to runs/ppo/model.state_dict; continue with: "
                  "pytorchrl resume runs/ppo"): Check(OUTPUT, of="", background="interrupt"),
    ("README.md", "pytorchrl resume runs/ppo"): Check(RUN),
    ("README.md", "at 48,384 env steps: collection worker 2 died (killed with ray.kill()); replaced (restart 1 of 3)"):
        Check(ELSEWHERE, where="test_worker_faults::test_killed_collector_is_replaced",
              shape=r"at [\d,]+ env steps: collection worker \d+ died \(killed with ray\.kill\(\)\); replaced "
                    r"\(restart \d+ of \d+\)"),
    ("README.md", "at 2,016 env steps: replay server died (killed with ray.kill()); replaced with the 1,504 "
                  "transitions saved at 1,504 env steps (restart 1 of 3)"):
        Check(ELSEWHERE, where="test_server_faults::test_killed_server_is_replaced_and_the_run_reaches_its_target",
              shape=r"at [\d,]+ env steps: replay server died \(killed with ray\.kill\(\)\); replaced with the "
                    r"[\d,]+ transitions saved at [\d,]+ env steps \(restart \d+ of \d+\)"),
    ("README.md", "pytorchrl evaluate runs/ppo --episodes 20"): Check(RUN),
    ("README.md", "pytorchrl record-demos runs/ppo demos/cartpole --demos 5 --min-return 500"): Check(RUN),
    ("README.md", "for seed in 0 1 2; do pytorchrl train examples/configs/ppo_cartpole.yaml seed=$seed --run-dir "
                  "runs/seeds/ppo-s$seed; done"): Check(RUN),
    ("README.md", "pytorchrl train examples/configs/ppo_cartpole.yaml scheme.preset=sync-collectors "
                  "scheme.num_col_workers=4"): Check(RUN),
    ("README.md", "pytorchrl train examples/configs/ppo_atari.yaml learner.target_steps=1000000"): Check(RUN, limit=1),
    # (a decision at 5,000 env steps, then the best member's line at the end)
    ("README.md", "pytorchrl pbt examples/configs/pbt_ppo_cartpole.yaml --population 4 --run-dir runs/pbt"):
        Check(RUN, limit=5_120),
    ("README.md", "Learner  (step / done / metrics / hot-swap / save)"): Check(TEXT),
    ("README.md", "import pytorchrl as prl"): Check(PYTHON),
    ("README.md", "from pytorchrl.config import build_learner, load_config"): Check(PYTHON),
    ("README.md", "seed: 0"): Check(YAML),
    ("README.md", "pytorchrl train examples/configs/ppo_cartpole.yaml algorithm.lr=3e-4 scheme.num_col_workers=2"):
        Check(RUN),
    ("README.md", 'python -m pytest -q -m "not (ray or subprocess or learning)"'): Check(RUN),
    ("README.md", "pytorchrl/"): Check(TEXT),
    # ------------------------------------------------------------------ docs/agents.md
    ("docs/agents.md", 'pip install "pytorchrl[minigrid]"'): Check(RUN),
    ("docs/agents.md", "import torch"): Check(PYTHON),
    ("docs/agents.md", "import pytorchrl as prl"): Check(PYTHON),
    ("docs/agents.md", "env: {id: MaskedCartPole-v1, vec_env_size: 16}"): Check(YAML),
    ("docs/agents.md", "env: {id: MaskedCartPole-v1, vec_env_size: 4}"): Check(YAML),
    ("docs/agents.md", "pytorchrl train examples/configs/rnd_ppo_mountaincar.yaml   # MountainCar-v0, 300k env "
                       "steps"): Check(RUN),
    ("docs/agents.md", "from pytorchrl.agent.actors import OnPolicyActor"): Check(PYTHON),
    ("docs/agents.md", "pytorchrl train examples/configs/ppo_cartpole.yaml run_dir=runs/cartpole-teacher "
                       "learner.target_steps=20000"): Check(RUN),
    ("docs/agents.md", "algorithm:"): Check(YAML),
    # (its whole budget: the policy that record-demos keeps the episodes of (return 200 or
    # more) is the file's, which ends at 500; after 30,000 env steps one run's reached 200 in 2
    # episodes of 100)
    ("docs/agents.md", "pytorchrl train examples/configs/ppo_cartpole.yaml --run-dir runs/ppo_cartpole      # a "
                       "policy to record"): Check(RUN, limit=None, stdin="0\n1\n" * 300),
    ("docs/agents.md", "from pytorchrl.agent.storages import PPODBuffer"): Check(PYTHON),
    ("docs/agents.md", "pytorchrl train examples/configs/sac_her_point_reach.yaml        # PointReach-v0, ~1 min on "
                       "one core"): Check(RUN),
    ("docs/agents.md", "from pytorchrl.agent.actors import OffPolicyActor"): Check(PYTHON),
    ("docs/agents.md", "from pytorchrl.agent.exarl import ExaActor, ExaAlgorithm"): Check(PYTHON, context=_EXARL_CONTEXT),
    # ------------------------------------------------------------------ docs/architecture.md
    ("docs/architecture.md", "cli                     the `pytorchrl` command"): Check(TEXT),
    ("docs/architecture.md", "HalvedPPO: numpy update not used (policy_loss overridden: the numpy update computes "
                             "PPO.policy_loss); updating in torch"):
        Check(ELSEWHERE, where="test_accel::test_an_overridden_loss_steps_aside_says_why_once_and_is_used",
              shape=r"HalvedPPO: numpy update not used \(policy_loss overridden: the numpy update computes "
                    r"PPO\.policy_loss\); updating in torch"),
    ("docs/architecture.md", "learner.py"): Check(TEXT),
    ("docs/architecture.md", "if kl_coef != 0.0:"): Check(EXCERPT, where="pytorchrl/agent/losses/actor_critic.py"),
    # ------------------------------------------------------------------ docs/benchmarks.md
    ("docs/benchmarks.md", "pytorchrl train examples/configs/ppo_cartpole.yaml --run-dir runs/one"): Check(RUN),
    # (hours of training: the zoo's smoke test runs a row with --quick, resumes it and reads its table)
    ("docs/benchmarks.md", "python benchmarks/zoo/run.py                       # every row; hours on 2 cores; "
                           "resumable"):
        Check(ELSEWHERE, where="test_benchmarks_smoke::test_zoo_quick_run_writes_results_the_table_and_resumes"),
    # ------------------------------------------------------------------ docs/cluster.md
    ("docs/cluster.md", "# on the head node: the cluster's token (once: it is written to ~/.ray/auth_token), then "
                        "the head"):
        Check(ELSEWHERE, where="test_multinode_netns::test_a_token_protected_cluster_started_as_docs_cluster_md_says"),
    ("docs/cluster.md", "error: cannot join the Ray cluster at HEAD_IP:6379: its token authentication refused this "
                        "process (no token, or another one): set RAY_AUTH_MODE=token and give the cluster's token in "
                        "~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN (docs/cluster.md)"):
        Check(ELSEWHERE, where="test_multinode_netns::test_a_token_protected_cluster_started_as_docs_cluster_md_says"),
    ("docs/cluster.md", "# in the configuration file (or as an override)"):
        Check(ELSEWHERE, where="test_multinode_netns::test_a_token_protected_cluster_started_as_docs_cluster_md_says"),
    ("docs/cluster.md", "scheme:"): Check(YAML),
    # ------------------------------------------------------------------ docs/configuration.md
    ("docs/configuration.md", "seed: 0"): Check(YAML),
    ("docs/configuration.md", "pytorchrl train examples/configs/ppo_cartpole.yaml algorithm.gamma=0.99 "
                              "actor.hidden_sizes=[128,128] schedules.0.end=1e-5"): Check(RUN),
    ("docs/configuration.md", "pytorchrl train examples/configs/ppo_cartpole.yaml scheme.num_col_workers=4 "
                              "scheme.col_workers_resources.num_cpus=0.5"): Check(RUN),
    ("docs/configuration.md", "algorithm:"):
        Check(YAML, setup=("pytorchrl train examples/configs/ppo_cartpole.yaml run_dir=runs/cartpole-teacher",)),
    ("docs/configuration.md", "learner:"): Check(YAML),
    ("docs/configuration.md", "schedules:"): Check(YAML),
    ("docs/configuration.md", "pbt:"): Check(YAML),
    # ------------------------------------------------------------------ docs/hot-swapping.md
    ("docs/hot-swapping.md", 'learner.update_algorithm_parameter("lr", 1e-4)          # PPO/A2C hyperparameters'):
        Check(PYTHON, context=_HOT_SWAP_CONTEXT),
    ("docs/hot-swapping.md", "schedules:"): Check(YAML),
    ("docs/hot-swapping.md", "pytorchrl set runs/ppo lr=1e-4"):
        Check(RUN, setup=("pytorchrl train examples/configs/ppo_cartpole.yaml --run-dir runs/ppo "
                          "learner.target_steps=100000000 &",)),
    # ------------------------------------------------------------------ docs/pbt.md
    # (its output below: a member reaches pbt.target_return at the second decision, 10,000 env steps)
    ("docs/pbt.md", "pytorchrl pbt examples/configs/pbt_ppo_cartpole.yaml --run-dir runs/pbt"): Check(RUN, limit=10_240),
    ("docs/pbt.md", "training a population of 4 PPO members on CartPole-v1: 0/100,000 env steps each, a decision "
                    "every 5,000 (test_return, quantile 0.25), members side by side as Ray actors (0.5 CPU each); run "
                    "directory runs/pbt"):
        Check(OUTPUT, of="pytorchrl pbt examples/configs/pbt_ppo_cartpole.yaml --run-dir runs/pbt"),
    ("docs/pbt.md", "schedules: []                # a schedule of a perturbed parameter is refused: it would "
                    "overwrite it"): Check(YAML),
    ("docs/pbt.md", "$ pytorchrl pbt examples/configs/pbt_ppo_cartpole.yaml 'pbt.mutations={actor.hidden_sizes: "
                    "{values: [[32]]}}'"): Check(FAILURE),
    ("docs/pbt.md", "runs/pbt/"): Check(TEXT),
    ("docs/pbt.md", "member-1 dropped from the population: collection worker 1 died 3 times (its restart limit): "
                    "...; 3 members go on"):
        Check(ELSEWHERE, where="test_cli_pbt::test_a_member_whose_run_fails_is_dropped_with_one_line_and_the_rest_go_on",
              shape=r"member-\d+ dropped from the population: collection worker \d+ died 3 times \(its restart "
                    r"limit\): .*; \d+ members go on"),
    ("docs/pbt.md", "from ray import tune"): Check(PYTHON),
    # ------------------------------------------------------------------ docs/schemes.md
    ("docs/schemes.md", "Learner  (step / done / metrics / hot-swap / save)"): Check(TEXT),
    ("docs/schemes.md", "pytorchrl train examples/configs/ppo_atari.yaml env.id=BreakoutNoFrameskip-v4 "
                        "scheme.preset=sync-collectors"): Check(RUN, limit=1),
    # ------------------------------------------------------------------ docs/spaces.md
    ("docs/spaces.md", "$ pytorchrl train examples/configs/dqn_cartpole.yaml env.id=MultiDiscreteCartPole-v1"):
        Check(FAILURE),
    ("docs/spaces.md", "pytorchrl train examples/configs/ppo_dict_cartpole.yaml"): Check(RUN),
    ("docs/spaces.md", "from pytorchrl.agent.actors import OnPolicyActor"): Check(PYTHON),
    # ------------------------------------------------------------------ docs/tracking.md
    ("docs/tracking.md", 'pip install "pytorchrl[wandb]"'): Check(RUN),
    ("docs/tracking.md", "learner:"): Check(YAML),
    ("docs/tracking.md", "$ pytorchrl train examples/configs/ppo_cartpole_wandb.yaml learner.wandb.projct=x"):
        Check(FAILURE),
}


# ---------------------------------------------------------------------------- the pages
@dataclasses.dataclass
class Block:
    """A fenced block of a page: its page, the line it starts on, its language and text."""

    page: str
    line: int
    lang: str
    text: str

    @property
    def key(self):
        return self.page, next(line.strip() for line in self.text.splitlines() if line.strip())


def blocks_of(page):
    """The fenced blocks of ``page`` (a path relative to the repository), in order."""
    with open(os.path.join(REPO, page)) as f:
        text = f.read()
    return [Block(page, text[:m.start()].count("\n") + 1, m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def test_every_block_of_the_documentation_is_checked():
    found = {block.key: block for page in PAGES for block in blocks_of(page)}
    unchecked = sorted(f"{b.page}:{b.line}: {key[1]!r}" for key, b in found.items() if key not in BLOCKS)
    stale = sorted(f"{page}: {first!r}" for page, first in BLOCKS if (page, first) not in found)
    assert not unchecked, "blocks of the documentation no test checks (add them to BLOCKS):\n" + "\n".join(unchecked)
    assert not stale, "BLOCKS names blocks the pages no longer have:\n" + "\n".join(stale)


def test_what_is_checked_elsewhere_is_checked_there_and_has_the_shape_printed():
    for (page, first), check in BLOCKS.items():
        if check.kind != ELSEWHERE:
            continue
        module, _, test = check.where.partition("::")
        assert source_of_test(module, test), f"{page}: {check.where} does not exist"
        if check.shape:
            (block,) = [b for b in blocks_of(page) if b.key == (page, first)]
            for line in block.text.strip().splitlines():
                assert re.fullmatch(check.shape, line), (page, line)


def test_the_excerpts_are_in_their_files():
    for (page, first), check in BLOCKS.items():
        if check.kind != EXCERPT:
            continue
        with open(os.path.join(REPO, check.where)) as f:
            source = f.read()
        for block in blocks_of(page):
            if block.key == (page, first):
                assert block.text in source, f"{page}:{block.line} is not in {check.where} any more"


def test_the_extras_that_pip_commands_name_exist():
    import ast
    with open(os.path.join(REPO, "setup.py")) as f:
        tree = ast.parse(f.read())
    (extras,) = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                 for kw in node.keywords if kw.arg == "extras_require"]
    names = {ast.literal_eval(k) for k in extras.keys}
    for page in PAGES:
        for block in blocks_of(page):
            for extra in re.findall(r"pip install [^\n]*?pytorchrl\[(\w+)\]", block.text):
                assert extra in names, f"{page}:{block.line}: no extra {extra!r} in setup.py"
            for extra in re.findall(r'-e "\.\[(\w+)\]"', block.text):
                assert extra in names, f"{page}:{block.line}: no extra {extra!r} in setup.py"


# ------------------------------------------------------------------------- output lines
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"


def pattern(line, numbers=True):
    """The regular expression a printed line (stripped) matches to be ``line`` as the page
    writes it: ``...`` stands for anything, a run of spaces for any (numbers padded to a
    width), and (with ``numbers``) every number for any number."""
    out = []
    for part in re.split(r"(\.\.\.)", line.strip()):
        if part == "...":
            out.append(".*")
            continue
        pieces = re.split(f"({NUMBER})", part) if numbers else [part]
        out.append("".join(NUMBER if i % 2 else r"\s+".join(map(re.escape, re.split(" +", p)))
                           for i, p in enumerate(pieces)))
    return re.compile("".join(out))


def assert_printed(expected, printed, numbers=True, where=""):
    """Each line of ``expected`` (but ``...`` lines) matches a line of ``printed``, in order."""
    lines = [ln.strip() for ln in printed]
    at = 0
    for want in expected:
        if want.strip() == "...":
            continue
        rx = pattern(want.rstrip(), numbers)
        for i in range(at, len(lines)):
            if rx.fullmatch(lines[i]):
                at = i + 1
                break
        else:
            pytest.fail(f"{where}: the page says it prints\n  {want}\nbut it printed:\n" + "\n".join(lines[-40:]))


def split_note(text):
    """``(line, exit status)`` of an expected line ``text`` with an optional note at its end:
    ``...   (exit 2; the run goes on)``."""
    m = re.match(r"(.*?)\s{3,}\((exit (\d+))?[^)]*\)\s*$", text)
    if m is None:
        return text, None
    return m.group(1), int(m.group(3)) if m.group(3) else None


def _importable(module):
    """Whether ``module`` imports (ray.tune is found without its extra, then refuses)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------ running pages
class Terminal:
    """A command running on a pseudo-terminal, as on a user's screen: its output is read as
    it comes (``segments``: its lines and the status line's redraws)."""

    def __init__(self, words, cwd):
        master, slave = pty.openpty()
        # A terminal as wide as the status line (a new pseudo-terminal has no size).
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        # (default_sigint: Ctrl-C reaches it when the suite runs as a background job; COLUMNS:
        # the width the status line fits, which the test runner's own may have set narrower)
        self.proc = subprocess.Popen([sys.executable, "-m", "pytorchrl.cli", *words[1:]], cwd=cwd,
                                     env=dict(env(), COLUMNS="200", LINES="50"),
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                     preexec_fn=default_sigint)
        os.close(slave)
        self.master, self.text, self.changed = master, "", threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                chunk = b""
            with self.changed:
                if not chunk:           # the command ended (its side of the terminal closed)
                    self.changed.notify_all()
                    return
                self.text += chunk.decode(errors="replace")
                self.changed.notify_all()

    def segments(self):
        """The lines printed, each redraw of the status line one of them."""
        with self.changed:
            text = self.text.replace("\x1b[K", "")
        return [s for s in re.split(r"[\r\n]+", text) if s.strip()]

    def wait_for(self, regex, timeout=300.0):
        """Wait until a segment fully matches ``regex`` (the command still running)."""
        rx = re.compile(regex)
        deadline = time.monotonic() + timeout
        with self.changed:
            while not any(rx.fullmatch(s) for s in self.segments()):
                assert self.proc.poll() is None, "the command ended first:\n" + "\n".join(self.segments()[-20:])
                assert time.monotonic() < deadline, "it printed no such line:\n" + "\n".join(self.segments()[-20:])
                self.changed.wait(1.0)

    def interrupt(self):
        """Ctrl-C; returns the exit status."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=120)
        self.reader.join(timeout=30)
        os.close(self.master)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Page:
    """A page's directory and what its commands printed; runs its blocks in order.

    Parameters
    ----------
    page : str
        The page (relative to the repository).
    directory : pathlib.Path
        An empty directory, the page's (``examples/`` and ``train.py`` are linked in).
    monkeypatch : pytest.MonkeyPatch
        Sets PYTORCHRL_STEP_LIMIT and what a command needs for the time it runs.
    """

    def __init__(self, page, directory, monkeypatch):
        self.page, self.directory, self.monkeypatch = page, directory, monkeypatch
        for name in ("examples", "train.py"):
            (directory / name).symlink_to(os.path.join(REPO, name))
        self.printed = {}            # command -> the lines it printed
        self.background = None       # Terminal
        self.skipped = []            # (command, why) not run here

    # ---------------------------------------------------------------- commands
    def run(self, line, limit=STEP_LIMIT, stdin=""):
        """Run one command line as written; returns ``(exit status, lines printed)``."""
        words = shlex.split(line, comments=True)
        variables = {}
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            variables[key] = value
        for prefix, why in NOT_HERE.items():
            if " ".join(words).startswith(prefix):
                self.skipped.append((line, why))
                return 0, []
        for file, module in NEEDS.items():
            if file in words and not _importable(module):
                self.skipped.append((line, f"needs {module}, not in the test extras"))
                return 0, []
        with self.monkeypatch.context() as mp:
            if limit is None:
                mp.delenv("PYTORCHRL_STEP_LIMIT", raising=False)
            else:
                mp.setenv("PYTORCHRL_STEP_LIMIT", str(limit))
            for key, value in variables.items():
                mp.setenv(key, value)
            mp.setattr(sys, "stdin", io.StringIO(stdin))
            if words[0] == "pytorchrl":
                result = pytorchrl_in_process(*words[1:], cwd=self.directory)
            elif words[:2] == ["python", "train.py"]:
                result = self._train_py(words[2:])
            elif words[0] == "ls":
                assert os.listdir(self.directory / words[1]), line
                return 0, []
            else:
                pytest.fail(f"{self.page}: a command this test cannot run: {line}")
        printed = (result.stdout + result.stderr).splitlines()
        self.printed[line] = printed
        return result.returncode, printed

    def _train_py(self, args):
        sys.path.insert(0, REPO)
        try:
            import train
        finally:
            sys.path.remove(REPO)
        out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
        try:
            os.chdir(self.directory)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = train.main(args)
        finally:
            os.chdir(here)
        return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())

    def commands(self, text):
        """``(command, expected lines)`` of a shell block: continued lines joined, ``for``
        loops unrolled, ``&&`` chains split; expected lines are the ``# `` lines right
        under a command."""
        out, lines = [], text.replace("\\\n", " ").splitlines()
        for line in lines:
            stripped = line.strip()
            if not stripped:
                out.append(None)
            elif stripped.startswith("#"):
                if out and out[-1] is not None:
                    out[-1][1].append(stripped[1:].strip())
            else:
                m = re.fullmatch(r"for (\w+) in ([^;]+); do (.*); done", stripped)
                if m:
                    for value in m.group(2).split():
                        out.append((m.group(3).replace("$" + m.group(1), value), []))
                    continue
                parts = stripped.split(" && ")
                for part in parts[:-1]:
                    out.append((part, []))
                out.append((parts[-1], []))
        return [c for c in out if c is not None]

    # ------------------------------------------------------------------ blocks
    def check(self, block, check):
        """Run or check one block as ``check`` says."""
        where = f"{self.page}:{block.line}"
        for line in check.setup:
            if line.endswith(" &"):        # a job running meanwhile, ended with Ctrl-C after the block
                self.background = Terminal(shlex.split(line[:-2]), self.directory)
                self.background.wait_for(r"\s*\d+% .*")
            else:
                self.run(line, check.limit)
        if check.kind == RUN:
            self._run_block(block, check, where)
        elif check.kind == PYTHON:
            self._python(block, check, where)
        elif check.kind == OUTPUT:
            self._output(block, check, where)
        elif check.kind == FAILURE:
            self._failure(block, where)
        elif check.kind == YAML:
            self._yaml(block, where)
        if any(line.endswith(" &") for line in check.setup):
            assert self.background.interrupt() == 130
            self.background = None

    def _run_block(self, block, check, where):
        for command, expected in self.commands(block.text):
            if check.background:
                self.background = Terminal(shlex.split(command), self.directory)
                self.background.wait_for(check.background)
                continue
            code, printed = self.run(command, check.limit, check.stdin)
            errors = [split_note(e) for e in expected if e.startswith(("error:", "config error:"))]
            if errors:
                (want, status), = errors
                assert code == (status or 2), (where, command, printed)
                assert_printed([want], printed, numbers=False, where=where)
            else:
                assert code == 0, f"{where}: {command} exited with {code}:\n" + "\n".join(printed[-30:])
                assert_printed([split_note(e)[0] for e in expected], printed, where=where)

    def _output(self, block, check, where):
        lines = block.text.rstrip("\n").splitlines()
        if check.of == "":
            if check.background == "interrupt":
                assert self.background.interrupt() == 130
            printed = self.background.segments()
        else:
            printed = self.printed[check.of]
        assert_printed(lines, printed, numbers=not lines[0].startswith(("error", "config error")), where=where)

    def _failure(self, block, where):
        command = None
        for line in block.text.rstrip("\n").splitlines():
            if line.startswith("$ "):
                command = line[2:]
                hidden = [m for m in ("wandb",) if f"without the {m} package" in line]
                with self.monkeypatch.context() as mp:
                    for module in hidden:    # None in sys.modules: the import fails as if not installed
                        mp.setitem(sys.modules, module, None)
                    code, printed = self.run(command)
                assert code == 2, (where, command, printed)
            else:
                assert [p for p in printed if p.strip()] == [line], (where, command, printed)

    def _python(self, block, check, where):
        if "from ray import tune" in block.text and not _importable("ray.tune"):
            self.skipped.append((where, "needs ray[tune] (the tune extra), not in the test extras"))
            return
        namespace = {"__name__": "__doc_snippet__", "TESTS": TESTS}
        out, here = io.StringIO(), os.getcwd()
        with self.monkeypatch.context() as mp:
            mp.setenv("PYTORCHRL_STEP_LIMIT", str(check.limit))
            mp.syspath_prepend(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            try:
                os.chdir(self.directory)
                with contextlib.redirect_stdout(out):
                    if check.context:
                        exec(compile(textwrap.dedent(check.context), f"{where} (context)", "exec"), namespace)
                    exec(compile(block.text, where, "exec"), namespace)
            finally:
                os.chdir(here)
                learner = namespace.get("learner")
                if check.context and learner is not None:
                    learner.stop()

    def _yaml(self, block, where):
        """A whole configuration, or sections of one: validated with the other sections of
        the PPO example (of the population example for a ``pbt`` section)."""
        from pytorchrl.config import load_yaml
        from pytorchrl.config.loader import merge_configs
        data = yaml.safe_load(block.text)
        base = load_yaml(os.path.join(EXAMPLES, "pbt_ppo_cartpole.yaml" if "pbt" in data else "ppo_cartpole.yaml"))
        # (As a file over an agent preset: another algorithm's section replaces PPO's.)
        config = merge_configs(base, data)
        here = os.getcwd()
        try:
            os.chdir(self.directory)
            validate_config(config)
        finally:
            os.chdir(here)


PAGES_WITH_COMMANDS = [p for p in PAGES if any(BLOCKS.get(b.key, Check(TEXT)).kind in (RUN, PYTHON, OUTPUT, FAILURE,
                                                                                      YAML) for b in blocks_of(p))]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS)
def test_the_commands_and_snippets_of_the_page_run_as_written(page, ray_session, tmp_path, monkeypatch, capsys):
    runner = Page(page, tmp_path, monkeypatch)
    try:
        for block in blocks_of(page):
            check = BLOCKS.get(block.key)
            if check is not None:
                runner.check(block, check)
    finally:
        if runner.background is not None:
            runner.background.kill()
    with capsys.disabled():
        for command, why in runner.skipped:
            print(f"\n{page}: not run here: {command}: {why}", end="")
