"""PPO+D: a GAE rollout storage that replays demonstrations in place of episodes.

"Guided exploration with proximal policy optimization using a single demonstration"
(Libardi et al., 2021). Whenever an environment's episode ends (and at the first rollout),
the storage draws what that environment's lane of the rollout holds next: with probability
``rho`` a *reward demonstration* (a human one, or one of the agent's own episodes whose
return reached the worst kept reward demonstration), with probability ``phi`` a *value
demonstration* (one of the agent's failed episodes in which the critic's value peaked
highest), otherwise a real episode. While a lane replays a demonstration the storage
records the demonstration's observations, actions and rewards; the value is the actor's at
the demonstration's observation (it acted on it), and the log-probability is recomputed
in ``finish``, in one batched call, as the current policy's of the demonstration's action:
PPO's ratio and clipping then treat the replayed steps as ordinary samples, and the
algorithm, its numpy update and its fused loss run unchanged (they only see mini-batches).

The real environment of a replaying lane keeps stepping (a vectorized step moves them all)
with the actions the actor chose from the demonstration's observations: its episodes are
held out of the episode statistics (``TorchVecEnv.hold``) and it is reset when the lane
returns to the environment (``TorchVecEnv.reset_env``).

Demonstration files are ``.npz`` archives, pytorchrl's format: ``Observation`` (L + 1 or
L observations; with ``frame_stack`` > 1 only the newest frame, ``obs.shape[0] //
frame_stack`` channels, of each), ``Action`` (L actions, as stored for training),
``Reward`` (L rewards), ``FrameSkip`` and, for value demonstrations, ``MaxValue``.
"""

import glob
import os
import tempfile
import uuid

import numpy as np
import torch

from pytorchrl import ACT, LOGP, OBS, REW, TERM, TRUNC, VAL
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.notices import say_once
from pytorchrl.agent.storages.base import FINAL_OBS
from pytorchrl.agent.storages.on_policy import GAEBuffer

#: Keys of a demonstration file (pytorchrl's names).
DEMO_OBS, DEMO_ACT, DEMO_REW, DEMO_FRAME_SKIP, DEMO_MAX_VALUE = "Observation", "Action", "Reward", "FrameSkip", \
    "MaxValue"


def save_demo(path, obs, act, rew, frame_skip=0, max_value=None):
    """Write one demonstration in the format ``PPODBuffer`` reads.

    Parameters
    ----------
    path : str
        File name (``.npz`` is added when missing). The file is written beside it under a
        temporary name and renamed into place: collectors that save the same name at once
        (several Ray collectors share one folder) leave one whole file, never a torn one.
    obs : array-like
        The observations of the episode, one per step (the one each action was taken
        from); the final observation may follow as one more row.
    act : array-like
        The actions, one per step, as the storage keeps them (``prl.ACT`` rows).
    rew : array-like
        The rewards, one per step.
    frame_skip : int
        Frame skip of the environment that produced it (checked when loading).
    max_value : float or None
        A value demonstration's highest value estimate (None: a reward demonstration).
    """
    arrays = {DEMO_OBS: np.asarray(obs), DEMO_ACT: np.asarray(act),
              DEMO_REW: np.asarray(rew, dtype=np.float32), DEMO_FRAME_SKIP: np.int64(frame_skip)}
    if max_value is not None:
        arrays[DEMO_MAX_VALUE] = np.float64(max_value)
    if not path.endswith(".npz"):
        path += ".npz"
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_demo(path, frame_skip=None):
    """Read a demonstration written by ``save_demo`` (or by pytorchrl).

    Parameters
    ----------
    path : str
        The ``.npz`` file.
    frame_skip : int or None
        When given, the frame skip the demonstration must have been recorded with.

    Returns
    -------
    dict
        ``obs``, ``act``, ``rew`` arrays, ``length`` (steps), ``total_reward``,
        ``max_value`` (None for a reward demonstration) and a unique ``id``.
    """
    with np.load(path) as f:
        missing = [k for k in (DEMO_OBS, DEMO_ACT, DEMO_REW) if k not in f.files]
        if missing:
            raise ValueError(f"demonstration {path} lacks {', '.join(missing)} (it holds {', '.join(f.files)})")
        skip = int(f[DEMO_FRAME_SKIP]) if DEMO_FRAME_SKIP in f.files else 0
        if frame_skip is not None and skip != frame_skip:
            raise ValueError(f"demonstration {path} was recorded with frame_skip={skip}, the storage has "
                             f"frame_skip={frame_skip}")
        demo = {"obs": f[DEMO_OBS], "act": f[DEMO_ACT], "rew": f[DEMO_REW].astype(np.float32).reshape(-1),
                "max_value": float(f[DEMO_MAX_VALUE]) if DEMO_MAX_VALUE in f.files else None}
    n = len(demo["act"])
    if n == 0 or len(demo["rew"]) != n or len(demo["obs"]) not in (n, n + 1):
        raise ValueError(f"demonstration {path}: {n} actions, {len(demo['rew'])} rewards and "
                         f"{len(demo['obs'])} observations (expected L >= 1 actions and rewards, L or L + 1 "
                         f"observations)")
    demo.update(length=n, total_reward=float(demo["rew"].sum()), id=str(uuid.uuid4()))
    return demo


def demo_files(folder):
    """The ``.npz`` files of ``folder``, sorted; ValueError naming the folder when it does not exist."""
    if not os.path.isdir(folder):
        raise ValueError(f"no such demonstrations folder: {folder}")
    return sorted(glob.glob(os.path.join(folder, "*.npz")))


class PPODBuffer(GAEBuffer):
    """GAE rollout storage of PPO+D (see the module docstring).

    Parameters
    ----------
    device, actor, algorithm, envs, size, gae_lambda
        As in ``GAEBuffer``.
    frame_stack : int
        Frames stacked (along the first axis) in an observation; demonstrations keep the
        newest frame only and replay rebuilds the stack.
    frame_skip : int
        Frame skip of the environments; demonstrations recorded with another are refused.
    rho : float
        Probability that an environment's next episode is a replayed reward demonstration.
    phi : float
        Probability that it is a replayed value demonstration (rho + phi <= 1).
    alpha : float
        Value demonstrations are drawn with probability proportional to max(MaxValue, 0)
        to the power ``alpha`` (uniformly when all are 0).
    total_buffer_demo_capacity : int
        Most demonstrations kept, reward and value ones together: value demonstrations of
        the lowest MaxValue go first, then the agent's reward demonstrations of the lowest
        return (the initial human ones are never dropped).
    initial_human_demos_dir : str or None
        Folder of the human reward demonstrations to start from.
    initial_agent_demos_dir : str or None
        Folder of reward demonstrations saved by an earlier run (agent ones). Agent and
        value demonstrations beyond ``total_buffer_demo_capacity`` (several collectors'
        sets) are left out as a full buffer drops them, and the log says so once; human
        ones beyond it are refused.
    initial_value_demos_dir : str or None
        Folder of value demonstrations saved by an earlier run.
    target_agent_demos_dir : str or None
        Folder where the best agent reward demonstrations are saved (None: not saved).
        Each collector saves its own; a remote collector's file names carry its indices
        (``reward_demo_g0_c2_1.npz``), so collectors sharing the folder keep a set each.
    target_value_demos_dir : str or None
        Folder where the best value demonstrations are saved (None: not saved).
    save_demos_prefix : str or None
        Prefix of the saved files' names.
    save_demos_every : int
        Save the demonstrations every this many rollouts of a collector.
    num_agent_demos_to_save : int
        Agent reward demonstrations saved (highest return first).
    num_value_demos_to_save : int
        Value demonstrations saved (highest MaxValue first).

    A learner-side storage (``envs`` None) only prepares rollouts, like ``GAEBuffer``: the
    demonstrations live in the collectors' storages, each its own set. Recurrent actors are
    refused (a replayed lane would need the memory of the demonstration's past).
    """

    fixed_parameters = ("frame_stack", "frame_skip", "total_buffer_demo_capacity", "initial_human_demos_dir",
                        "initial_agent_demos_dir", "initial_value_demos_dir", "target_agent_demos_dir",
                        "target_value_demos_dir", "save_demos_prefix")

    def __init__(self, device, actor, algorithm, envs, size, frame_stack=1, frame_skip=0, rho=0.1, phi=0.3,
                 gae_lambda=0.95, alpha=10, total_buffer_demo_capacity=51, initial_human_demos_dir=None,
                 initial_agent_demos_dir=None, initial_value_demos_dir=None, target_agent_demos_dir=None,
                 target_value_demos_dir=None, save_demos_prefix=None, save_demos_every=10,
                 num_agent_demos_to_save=10, num_value_demos_to_save=0):
        if getattr(actor, "is_recurrent", False):
            raise ValueError("PPODBuffer does not take recurrent actors (a replayed demonstration has no memory "
                             "state to train from): use a feed-forward actor")
        super().__init__(device, actor, algorithm, envs, size, gae_lambda)
        self.frame_stack, self.frame_skip = int(frame_stack), int(frame_skip)
        self.rho, self.phi, self.alpha = float(rho), float(phi), float(alpha)
        self.initial_rho, self.initial_phi = self.rho, self.phi
        self.total_buffer_demo_capacity = int(total_buffer_demo_capacity)
        self.target_agent_demos_dir, self.target_value_demos_dir = target_agent_demos_dir, target_value_demos_dir
        self.save_demos_prefix = save_demos_prefix
        self.save_demos_every = int(save_demos_every)
        self.num_agent_demos_to_save = int(num_agent_demos_to_save)
        self.num_value_demos_to_save = int(num_value_demos_to_save)
        for name in ("rho", "phi", "alpha", "save_demos_every", "total_buffer_demo_capacity"):
            self.check_parameter_value(name, getattr(self, name))
        self.rng = np.random.default_rng()
        self.reward_demos, self.value_demos = [], []
        self.num_human_demos = 0
        self.rollouts = 0
        if envs is None:
            return
        folders = (initial_human_demos_dir, initial_agent_demos_dir, initial_value_demos_dir)
        files = [demo_files(f) if f else [] for f in folders]
        if len(files[0]) > self.total_buffer_demo_capacity:
            raise ValueError(f"{len(files[0])} human demonstrations in {initial_human_demos_dir} exceed "
                             f"total_buffer_demo_capacity={self.total_buffer_demo_capacity}")
        human, agent, value = ([load_demo(p, self.frame_skip) for p in group] for group in files)
        for d in value:
            d["max_value"] = -np.inf if d["max_value"] is None else d["max_value"]
        self.reward_demos = human + agent
        self.value_demos = value
        self.num_human_demos = len(human)
        # A folder saved by several collectors holds a set of each: the best are kept, as a
        # full buffer keeps them when the agent offers more.
        loaded = len(self.reward_demos) + len(self.value_demos)
        self._drop_beyond_capacity()
        dropped = loaded - len(self.reward_demos) - len(self.value_demos)
        if dropped:
            say_once(("ppod initial demos", folders), f"PPODBuffer: {loaded} initial demonstrations exceed "
                     f"total_buffer_demo_capacity={self.total_buffer_demo_capacity}; the {dropped} of lowest "
                     f"MaxValue (value ones) and lowest return (agent ones) are left out")
        n = envs.num_envs
        self._lane = [None] * n       # per env: [demo, step] while it replays one
        # The agent's episode in progress on each env: pieces from earlier rollouts, and the
        # row of this rollout where its part here starts (None: the lane replays a demo).
        self._carried = [[] for _ in range(n)]
        self._from = [0] * n
        self._demo_steps = []         # (t, env) of the replayed steps of this rollout
        self._held = set()            # envs stepping behind a demo: reset when their lane returns
        self._started = False

    @classmethod
    def create_factory(cls, size, frame_stack=1, frame_skip=0, rho=0.1, phi=0.3, gae_lambda=0.95, alpha=10,
                       total_buffer_demo_capacity=51, initial_human_demos_dir=None, initial_agent_demos_dir=None,
                       initial_value_demos_dir=None, target_agent_demos_dir=None, target_value_demos_dir=None,
                       save_demos_prefix=None, save_demos_every=10, num_agent_demos_to_save=10,
                       num_value_demos_to_save=0):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(
            cls, size=size, frame_stack=frame_stack, frame_skip=frame_skip, rho=rho, phi=phi, gae_lambda=gae_lambda,
            alpha=alpha, total_buffer_demo_capacity=total_buffer_demo_capacity,
            initial_human_demos_dir=initial_human_demos_dir, initial_agent_demos_dir=initial_agent_demos_dir,
            initial_value_demos_dir=initial_value_demos_dir, target_agent_demos_dir=target_agent_demos_dir,
            target_value_demos_dir=target_value_demos_dir, save_demos_prefix=save_demos_prefix,
            save_demos_every=save_demos_every, num_agent_demos_to_save=num_agent_demos_to_save,
            num_value_demos_to_save=num_value_demos_to_save)

    # ------------------------------------------------------------ hyperparameters
    @property
    def hyperparameters(self):
        return {**super().hyperparameters, "rho": self.rho, "phi": self.phi, "alpha": self.alpha,
                "save_demos_every": self.save_demos_every}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name in ("rho", "phi") and not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
        other = {"rho": "phi", "phi": "rho"}.get(name)
        if other and value + getattr(self, other, 0.0) > 1.0 + 1e-9:
            raise ValueError(f"rho + phi must be <= 1 (the probabilities of replaying a reward or a value "
                             f"demonstration), got {name}={value} with {other}={getattr(self, other)}")
        if name == "alpha" and value < 0:
            raise ValueError(f"alpha must be >= 0, got {value}")
        if name in ("save_demos_every", "total_buffer_demo_capacity") and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")

    @property
    def reward_threshold(self):
        """Return an agent episode must reach to become a reward demonstration: the lowest
        of the kept reward demonstrations (-inf when there is none)."""
        return min((d["total_reward"] for d in self.reward_demos), default=-np.inf)

    # ------------------------------------------------------------ collection side
    def start(self, obs, state=None):
        super().start(obs, state)
        self._demo_steps = []
        self._from = [None if lane is not None else 0 for lane in self._lane]
        if not self._started:
            # The first episodes are drawn as every later one is: some lanes start on a demo.
            self._started = True
            for i in range(len(self._lane)):
                self._draw(i, 0)

    def insert(self, step):
        t = self.step
        replaying = [i for i, lane in enumerate(self._lane) if lane is not None]
        final = step.get(FINAL_OBS)
        if replaying and final:
            # Episodes of an environment that runs behind a demonstration are not data.
            final = {i: o for i, o in final.items() if self._lane[i] is None}
            step = {**step, FINAL_OBS: final}
        super().insert(step)
        rec = self._rec
        for i in final or ():
            self._episode_ended(i, t + 1)
            self._draw(i, t + 1)
        for i in replaying:
            lane = self._lane[i]
            demo, k = lane
            rec[ACT][t, i] = demo["act"][k].reshape(rec[ACT].shape[2:])
            rec[REW][t, i] = demo["rew"][k]
            rec[TRUNC][t, i] = 0.0
            self._demo_steps.append((t, i))
            lane[1] = k = k + 1
            if k < demo["length"]:
                rec[TERM][t, i] = 0.0
                rec[OBS][t + 1, i] = self._stacked(demo, k, rec[OBS][t, i])
            else:
                rec[TERM][t, i] = 1.0
                self._lane[i] = None
                self._draw(i, t + 1)

    def finish(self, state=None):
        """Bootstrap (``GAEBuffer``), then give every replayed step the current policy's
        log-probability of the demonstration's action, in one batched evaluation."""
        super().finish(state)
        for i, start in enumerate(self._from):
            if start is not None and start < self.step:
                self._carried[i].append(self._episode_rows(i, start, self.step))
        if self._demo_steps:
            rec = self._rec
            ts, envs = (np.array(x) for x in zip(*self._demo_steps))
            obs = torch.as_tensor(rec[OBS][ts, envs], device=self.actor.device)
            act = torch.as_tensor(rec[ACT][ts, envs], device=self.actor.device)
            with torch.no_grad():
                logp, _, _ = self.actor.evaluate_actions(obs, act, entropy_grad=False)
            rec[LOGP][ts, envs] = logp.cpu().numpy().reshape(rec[LOGP][ts, envs].shape)
        self.rollouts += 1
        if self.rollouts % self.save_demos_every == 0:
            self.save_demos()

    def _draw(self, i, t):
        """Choose what lane ``i`` holds from row ``t`` on: a demonstration (its first
        observation written there) or the environment (reset if it ran behind a demo)."""
        u = self.rng.random()
        demo = None
        if u < self.rho and self.reward_demos:
            demo = self.reward_demos[self.rng.integers(len(self.reward_demos))]
        elif self.rho <= u < self.rho + self.phi and self.value_demos:
            demo = self.value_demos[self.rng.choice(len(self.value_demos), p=self._value_probs())]
        if demo is not None:
            self._lane[i] = [demo, 0]
            self._rec[OBS][t, i] = self._stacked(demo, 0, None)
            self.envs.hold(i)
            self._held.add(i)
        elif i in self._held:
            self._rec[OBS][t, i] = self.envs.reset_env(i)
            self._held.discard(i)
        self._carried[i] = []
        self._from[i] = None if demo is not None else t

    def _value_probs(self):
        w = np.maximum([d["max_value"] for d in self.value_demos], 0.0) ** self.alpha
        total = w.sum()
        return w / total if total > 0 and np.isfinite(total) else np.full(len(w), 1.0 / len(w))

    def _stacked(self, demo, k, previous):
        """Observation ``k`` of ``demo`` as the environment gives it: with frame stacking, the
        previous observation's frames shifted by one and the demo's frame appended."""
        frame = demo["obs"][min(k, len(demo["obs"]) - 1)]
        if self.frame_stack == 1:
            return frame
        if previous is None:
            return np.concatenate([frame] * self.frame_stack)
        c = frame.shape[0]
        return np.concatenate([previous[c:], frame])

    # ------------------------------------------------------------- agent demos
    def _episode_rows(self, i, start, stop):
        """Copies of rows ``start:stop`` of env ``i``'s observations (the newest frame only),
        actions, rewards and values in this rollout."""
        rec = self._rec
        obs = rec[OBS][start:stop, i]
        if self.frame_stack > 1:
            obs = obs[:, -(obs.shape[1] // self.frame_stack):]
        return (np.array(obs), np.array(rec[ACT][start:stop, i]), np.array(rec[REW][start:stop, i]),
                np.array(rec[VAL][start:stop, i]).reshape(-1))

    def _episode_ended(self, i, stop):
        """Offer env ``i``'s episode that ended at row ``stop`` (exclusive) as a demonstration."""
        start = self._from[i]
        pieces = self._carried[i] + ([self._episode_rows(i, start, stop)] if start is not None else [])
        if not pieces:
            return
        obs, act, rew, val = (np.concatenate(part) for part in zip(*pieces))
        demo = {"obs": obs, "act": act, "rew": rew.astype(np.float32), "length": len(act),
                "total_reward": float(rew.sum()), "id": str(uuid.uuid4()), "max_value": None}
        self.offer_demo(demo, float(val.max()))

    def offer_demo(self, demo, max_value):
        """Keep an agent episode ``demo`` (a dict as ``load_demo`` returns) as a reward
        demonstration when its return reaches ``reward_threshold``, else as a value
        demonstration when ``max_value`` (its highest value estimate) beats the lowest
        kept one or there is room; then drop the weakest beyond capacity.

        Returns
        -------
        str or None
            "reward", "value", or None when it was not kept.
        """
        if demo["total_reward"] >= self.reward_threshold:
            self.reward_demos.append(demo)
            self._anneal()
            kind = "reward"
        else:
            demo["max_value"] = max_value
            full = len(self.reward_demos) + len(self.value_demos) >= self.total_buffer_demo_capacity
            if full and (not self.value_demos or max_value < min(d["max_value"] for d in self.value_demos)):
                return None
            self.value_demos.append(demo)
            kind = "value"
        self._drop_beyond_capacity()
        return kind if any(d is demo for d in self.reward_demos + self.value_demos) else None

    def _anneal(self):
        """Move probability from value to reward demonstrations as reward ones are found
        (the paper's schedule: by initial phi over the number of value demonstrations)."""
        if self.value_demos and 0.0 < self.phi:
            step = self.initial_phi / len(self.value_demos)
            moved = min(step, self.phi)
            self.phi -= moved
            self.rho = min(self.rho + moved, self.initial_rho + self.initial_phi)

    def _drop_beyond_capacity(self):
        while len(self.reward_demos) + len(self.value_demos) > self.total_buffer_demo_capacity and self.value_demos:
            del self.value_demos[int(np.argmin([d["max_value"] for d in self.value_demos]))]
        while len(self.reward_demos) > self.total_buffer_demo_capacity and \
                len(self.reward_demos) > self.num_human_demos:
            agent = self.reward_demos[self.num_human_demos:]
            del self.reward_demos[self.num_human_demos + int(np.argmin([d["total_reward"] for d in agent]))]

    def _collector_tag(self):
        """``g<index_grad_worker>_c<index_col_worker>`` of a remote collector's environments
        (its saved files do not replace another collector's in a shared folder); empty for
        the in-process collector (0, 0) and for environments built without an index, whose
        files keep pytorchrl's names."""
        collector = getattr(self.envs, "collector", None)
        return f"g{collector[0]}_c{collector[1]}" if collector and collector != (0, 0) else ""

    def save_demos(self):
        """Write the ``num_agent_demos_to_save`` agent reward demonstrations of highest
        return to ``target_agent_demos_dir`` and the ``num_value_demos_to_save`` value
        demonstrations of highest MaxValue to ``target_value_demos_dir`` (where set)."""
        groups = ((self.target_agent_demos_dir, "reward_demo", self.reward_demos[self.num_human_demos:],
                   "total_reward", self.num_agent_demos_to_save),
                  (self.target_value_demos_dir, "value_demo", self.value_demos, "max_value",
                   self.num_value_demos_to_save))
        for folder, stem, demos, rank, count in groups:
            if not folder or count == 0:
                continue
            os.makedirs(folder, exist_ok=True)
            best = sorted(demos, key=lambda d: d[rank], reverse=True)[:count]
            for n, d in enumerate(best, 1):
                name = "_".join(filter(None, (self.save_demos_prefix, stem, self._collector_tag(), str(n))))
                save_demo(os.path.join(folder, name + ".npz"), d["obs"], d["act"], d["rew"], self.frame_skip,
                          d["max_value"] if stem == "value_demo" else None)
