"""The rows of our zoo table: each a configuration file trained with several seeds, and
what it is compared with.

Published figures are rl-baselines3-zoo's benchmark.md (https://github.com/DLR-RM/
rl-baselines3-zoo, commit 0088472: one trained agent per row, the mean and standard
deviation of its deterministic evaluation episodes, after ``n_timesteps``); the
hyperparameters are rl-zoo3 2.9.2's hyperparams/*.yml, each difference written in the row's
configuration file. A row of one of our own agents has no published figure: it is compared
with a baseline row (the same task and budget without what the agent adds) or a goal.
"""

from dataclasses import dataclass, field

ZOO = "rl-zoo benchmark.md"


@dataclass(frozen=True)
class Published:
    """A published figure: ``mean`` and ``std`` (the spread of its evaluation episodes)
    after ``steps`` env steps, from ``source``; ``note`` says how it differs from the row."""
    mean: float
    std: float
    steps: int
    source: str = ZOO
    note: str = ""


@dataclass(frozen=True)
class Row:
    """One row of the table.

    Attributes
    ----------
    name : str
        The row (``<algo>_<env>``); its configuration is ``examples/configs/zoo/<name>.yaml``
        unless ``config`` says otherwise.
    published : Published or None
        The figure the row is compared with.
    seeds : int
        Seeds 0 .. seeds-1.
    episodes : int
        Deterministic evaluation episodes of the final model, per seed.
    minutes : float
        Rough minutes per seed on one core of this machine (the order of the runs, and
        ``--max-minutes``).
    baseline : str or None
        A row whose IQM this row's is compared with (our agents' rows).
    goal : float or None
        A return the row's IQM must reach (a row without published figure or baseline).
    needs : tuple of str
        Modules the row's environment needs (``Box2D``, ``mujoco``, ``ale_py``, ``minigrid``):
        without them the row is skipped, saying which extra installs them.
    overrides : tuple of str
        ``key=value`` overrides of the configuration.
    config : str or None
        Another configuration file (relative to the repository).
    prepare : str or None
        ``FILE:FUNCTION`` (FILE relative to benchmarks/) called before each seed's training
        with its run directory and seed, returning more overrides (recorded demonstrations).
    measure : str or None
        ``FILE:FUNCTION`` that measures a seed instead of training the configuration: the
        score of a row that is not a return (``note`` says what it is).
    higher_is_better : bool
        Direction of the score (against the goal and the baseline).
    rlzoo : bool
        Whether rl-zoo3 can train the row itself (``run.py --system rl-zoo3``): it has the
        row's algorithm, environment and budget.
    score : str
        What a seed's score is: ``eval`` (the final model's deterministic return over
        ``episodes`` episodes) or ``games`` (the mean score of the last 100 real games of
        training, from the episode logs: Atari, where an episode is one life).
    note : str
        What the table says beside the row.
    """
    name: str
    published: Published = None
    seeds: int = 5
    episodes: int = 20
    minutes: float = 1.0
    baseline: str = None
    goal: float = None
    needs: tuple = ()
    overrides: tuple = field(default_factory=tuple)
    config: str = None
    prepare: str = None
    measure: str = None
    higher_is_better: bool = True
    rlzoo: bool = True
    score: str = "eval"
    note: str = ""

    @property
    def config_path(self):
        """The configuration file, relative to the repository."""
        return self.config or f"examples/configs/zoo/{self.name}.yaml"


BOX2D = ("Box2D",)
ROWS = [
    Row("ppo_cartpole", Published(500.0, 0.0, 100_000), minutes=0.2),
    Row("a2c_cartpole", Published(500.0, 0.0, 500_000), minutes=0.3),
    Row("dqn_cartpole", Published(500.0, 0.0, 50_000), minutes=0.5),
    Row("ppo_acrobot", Published(-73.506, 18.201, 1_000_000), minutes=2.5),
    Row("a2c_acrobot", Published(-83.353, 17.213, 500_000), minutes=1.0),
    Row("dqn_acrobot", Published(-76.639, 11.752, 100_000), minutes=3.0),
    Row("ppo_mountaincar", Published(-110.423, 19.473, 1_000_000), minutes=2.0),
    Row("dqn_mountaincar", Published(-100.849, 9.925, 120_000), minutes=2.0),
    Row("sac_mountaincar_continuous", Published(94.679, 1.134, 50_000), minutes=4.0, episodes=10),
    Row("td3_mountaincar_continuous", Published(93.483, 0.075, 300_000), minutes=15.0, seeds=3, episodes=10),
    Row("ppo_pendulum", Published(-172.225, 104.159, 100_000, note="zoo with gSDE"), minutes=0.5),
    Row("sac_pendulum", Published(-156.995, 88.714, 20_000), minutes=1.5),
    Row("td3_pendulum", Published(-151.855, 90.227, 20_000), minutes=1.0),
    Row("ddpg_pendulum", Published(-152.099, 94.282, 20_000), minutes=1.0),
    Row("ppo_lunarlander", Published(242.119, 31.823, 1_000_000, note="LunarLander-v2"), minutes=4.0, needs=BOX2D),
    Row("dqn_lunarlander", Published(154.382, 79.241, 100_000, note="LunarLander-v2"), minutes=3.0, needs=BOX2D),
    Row("a2c_lunarlander", Published(155.751, 80.419, 200_000, note="LunarLander-v2"), minutes=0.5, needs=BOX2D),
    Row("sac_lunarlander_continuous", Published(260.390, 65.467, 500_000, note="v2"), minutes=40.0, seeds=3,
        episodes=10, needs=BOX2D),
    Row("td3_lunarlander_continuous", Published(207.451, 67.562, 300_000, note="v2"), minutes=20.0, seeds=3,
        episodes=10, needs=BOX2D),
    Row("sac_halfcheetah", Published(9535.451, 100.470, 1_000_000, note="HalfCheetah-v3, at 1M steps"),
        minutes=12.0, seeds=3, episodes=5, needs=("mujoco",),
        note="100k of the zoo's 1M steps; at 100k the reference is SB3 side by side"),
    Row("sac_her_fetch_reach", Published(-1.659, 0.873, 20_000, note="TQC, FetchReach-v1"), minutes=3.0, seeds=3,
        episodes=20, needs=("gymnasium_robotics",), rlzoo=False,
        note="gymnasium-robotics (in the test extra, with MuJoCo < 3.12); the zoo publishes TQC, not SAC, here"),
    Row("ppo_breakout", Published(6.6, 2.6, 250_000, source="SB3 side by side, atari_ppo/run.py",
                                  note="median of 4 seeds; zoo: 398 +- 33 at 10M"),
        minutes=25.0, seeds=3, needs=("ale_py",), score="games", rlzoo=False,
        note="score: mean of the last 100 training games; 1M of the zoo's 10M frames, against SB3 at 1M"),
    # Our own agents: each against a baseline or a goal.
    Row("rnd_ppo_mountaincar", baseline="ppo_mountaincar_300k", minutes=1.0, seeds=3, episodes=10,
        note="sparse task: the flag or -200; RND-PPO's settings (benchmarks/RESULTS.md, RND-PPO on MountainCar)"),
    Row("ppo_mountaincar_300k", minutes=0.7, seeds=3, episodes=10, note="the baseline of rnd_ppo_mountaincar"),
    Row("ppod_minigrid_doorkey", baseline="ppo_minigrid_doorkey", minutes=1.0, seeds=3, episodes=10,
        needs=("minigrid",), prepare="ppod_minigrid/run.py:zoo_prepare",
        note="5 demonstrations (shortest solutions of seeds 100-104); return 1 - 0.9 steps / 250, 0 if not solved"),
    Row("ppo_minigrid_doorkey", minutes=1.0, seeds=3, episodes=10, needs=("minigrid",),
        note="the baseline of ppod_minigrid_doorkey"),
    Row("impala_cartpole", goal=475.0, minutes=1.5, seeds=3, episodes=10,
        note="V-trace, 2 asynchronous Ray collectors: goal 475 (CartPole solved)"),
    Row("r2d2_cartpole_masked", baseline="dqn_cartpole_masked", minutes=3.0, seeds=3, episodes=10,
        note="CartPole without velocities (a memory task); R2D2-Lite preset, 30k steps"),
    Row("dqn_cartpole_masked", minutes=2.0, seeds=3, episodes=10, note="the baseline of r2d2_cartpole_masked"),
    Row("ppo_attraction_kl", config="examples/configs/ppo_attraction_kl.yaml", goal=0.25, higher_is_better=False,
        measure="attraction_kl/run.py:zoo_attraction", minutes=0.2, seeds=3,
        note="score: KL(saved || trained) with AttractionKL (weight 5) / without, 4,096 steps (goal: <= 0.25)"),
    Row("ppo_repulsion_kl", config="examples/configs/ppo_attraction_kl.yaml", goal=2.0,
        measure="attraction_kl/run.py:zoo_repulsion", minutes=0.2, seeds=3,
        note="score: KL(saved || trained) with RepulsionKL (weight 1) / without, 4,096 steps (goal: >= 2)"),
]

#: Rows by name.
BY_NAME = {row.name: row for row in ROWS}

#: The pip extra that installs each module a row needs.
EXTRA_OF = {"Box2D": "box2d", "mujoco": "mujoco", "ale_py": "atari", "minigrid": "minigrid",
            "gymnasium_robotics": "robotics"}
