"""Atari games of the Arcade Learning Environment with the standard DQN preprocessing.

Requires ``ale-py`` (``pip install "pytorchrl[atari]"``; it ships the game ROMs). The
preprocessing is written here with numpy only (no OpenCV, no gymnasium wrapper):

- no-op reset: a random number (1 to 30) of NOOP frames after every real reset;
- frame skip 4: every action is repeated for 4 emulator frames, the rewards summed and the
  observation is the pixel-wise maximum of the last two frames (Atari games draw some
  sprites only every other frame);
- 84x84 grayscale: ALE's grayscale screen, resized by area averaging (OpenCV's
  INTER_AREA), i.e. ``R @ frame @ C.T`` with precomputed weight matrices, rounded to the
  nearest integer (halves up). The weights are rationals with small denominators, so the
  product is computed exactly in integers, through the few non-zero weights of each row
  (no BLAS: with torch in the same process OpenBLAS threads contend with torch's and a
  dense float product took over 1 ms instead of 0.1);
- episodic life (training): losing a life ends the episode (``terminated``) but not the
  game; the next ``reset`` continues the same game, and a real reset happens at game over;
- FIRE on reset for games that wait for it (Breakout, ...);
- reward clipping to the reward's sign (training, optional);
- a time limit of ``max_episode_steps`` agent steps per game, reported as ``truncated``;
- frame stack: observations are uint8 arrays of shape (frame_stack, 84, 84), newest last;
- ``reward_delay``: rewards handed out only every ``reward_delay`` steps and at episode end.

Real game statistics
--------------------
With episodic life and reward clipping the episodes the agent sees are single lives with
clipped rewards. The score of the real game is reported in ``info`` instead: every step's
``info["game_over"]`` says whether the real game ended (game over, or the time limit),
and on that step ``info["episode"] = {"r": return, "l": length}`` together with the same
values as ``info["game_return"]`` and ``info["game_length"]`` (flat keys, usable as
``VecEnv`` ``info_keywords``). The return is the unclipped game score summed over all lives;
the length counts agent steps (calls of ``step``). ``info["lives"]``,
``info["episode_frame_number"]`` and ``info["frame_number"]`` come from the ALE.
"""

import gymnasium as gym
import numpy as np

from pytorchrl.envs.common import DelayedReward, FrameStack, env_seed

__all__ = ["atari_train_env_factory", "atari_test_env_factory", "AtariPreprocessing",
           "area_resize_weights"]


def _register_ale():
    try:
        import ale_py
    except ImportError as exc:
        raise ImportError("Atari environments need ale-py: pip install \"pytorchrl[atari]\"") from exc
    gym.register_envs(ale_py)


def area_resize_weights(n_in, n_out):
    """Matrix of area-interpolation weights resizing a length ``n_in`` to ``n_out``.

    Output pixel ``i`` covers the input interval ``[i * s, (i + 1) * s)`` with
    ``s = n_in / n_out``; its value is the mean of the input over that interval, input pixel
    ``j`` weighted by the length of ``[j, j + 1)`` inside it (OpenCV's INTER_AREA). An image
    is resized by ``R @ image @ C.T`` with ``R = area_resize_weights(H, h)`` and
    ``C = area_resize_weights(W, w)``.

    Parameters
    ----------
    n_in : int
        Input length (pixels).
    n_out : int
        Output length (pixels).

    Returns
    -------
    np.ndarray
        float32 array (n_out, n_in) whose rows sum to 1.
    """
    weights, denominator = _integer_area_weights(n_in, n_out)
    return (weights / denominator).astype(np.float32)


def _integer_area_weights(n_in, n_out):
    """``area_resize_weights(n_in, n_out)`` as integers over a common denominator.

    Measured in units of 1/n_out pixel every footprint boundary ``i * n_in / n_out`` is an
    integer, so the overlaps are integers; dividing them by their gcd keeps them small.

    Returns
    -------
    (np.ndarray, int)
        int64 weights (n_out, n_in) and their denominator (each row sums to it).
    """
    i = np.arange(n_out, dtype=np.int64)[:, None]
    j = np.arange(n_in, dtype=np.int64)[None, :]
    overlap = np.clip(np.minimum((j + 1) * n_out, (i + 1) * n_in) - np.maximum(j * n_out, i * n_in), 0, None)
    divisor = int(np.gcd.reduce(overlap[overlap > 0]))
    return overlap // divisor, n_in // divisor


def _sparse_rows(weights):
    """The non-zero entries of each row of ``weights``: (index, weight) arrays of shape
    (K, n_out), K the most non-zeros of a row, padded with zero weights."""
    k = int((weights > 0).sum(axis=1).max())
    index = np.zeros((k, weights.shape[0]), dtype=np.intp)
    value = np.zeros((k, weights.shape[0]), dtype=np.uint32)
    for i, row in enumerate(weights):
        nz = np.flatnonzero(row)
        index[:len(nz), i] = nz
        value[:len(nz), i] = row[nz]
    return index, value


class AtariPreprocessing(gym.Wrapper):
    """The standard Atari preprocessing over an ``ale_py.AtariEnv`` stepping single frames.

    Observations are uint8 arrays of shape (1, screen_size, screen_size) (channels-first, one
    grayscale channel; ``FrameStack`` stacks them). See the module documentation for the
    steps and for the real game statistics put in ``info``.

    Parameters
    ----------
    env : ale_py.AtariEnv
        The unwrapped ALE environment, built with ``frameskip=1``.
    noop_max : int
        Maximum number of NOOP frames after a real reset (a uniform draw in [1, noop_max]);
        0 disables them.
    frame_skip : int
        Emulator frames per agent step; the observation is the maximum of the last two.
    screen_size : int or None
        Side of the square output; None keeps the full 210x160 screen (no resize).
    episodic_life : bool
        End the episode at every life lost; the game goes on at the next reset.
    clip_rewards : bool
        Replace each agent step's reward by its sign.
    fire_reset : bool or None
        Press FIRE after resets; None: only for games whose second action is FIRE.
    max_episode_steps : int or None
        Truncate the game after this many agent steps; None or 0: no limit.
    seed : int or None
        Seed of the first reset (ALE and the no-op draws); None leaves them unseeded.
    """

    def __init__(self, env, noop_max=30, frame_skip=4, screen_size=84, episodic_life=True,
                 clip_rewards=False, fire_reset=None, max_episode_steps=None, seed=None):
        super().__init__(env)
        if int(frame_skip) < 1:
            raise ValueError(f"frame_skip must be >= 1, got {frame_skip!r}")
        ale_env = env.unwrapped
        self.ale = ale_env.ale
        self._actions = list(ale_env._action_set)
        meanings = ale_env.get_action_meanings()
        if fire_reset is None:
            # Baselines' rule: games that wait for FIRE have it as action 1 of at least 3.
            fire_reset = len(meanings) >= 3 and meanings[1] == "FIRE"
        self.fire_reset = bool(fire_reset)
        self.noop_max = int(noop_max)
        self.frame_skip = int(frame_skip)
        self.episodic_life = bool(episodic_life)
        self.clip_rewards = bool(clip_rewards)
        self.max_episode_steps = int(max_episode_steps) if max_episode_steps else 0

        height, width = self.ale.getScreenDims()
        self._screens = np.zeros((2, height, width), dtype=np.uint8)
        self._pooled = np.zeros((height, width), dtype=np.uint8)
        if screen_size is None:
            self._rows = self._cols = None
            shape = (1, height, width)
        else:
            rows, row_den = _integer_area_weights(height, int(screen_size))
            cols, col_den = _integer_area_weights(width, int(screen_size))
            self._rows, self._cols = _sparse_rows(rows), _sparse_rows(cols)
            # uint32 sums: at most 255 * height * width, far from overflowing for screens.
            self._denominator = row_den * col_den
            shape = (1, int(screen_size), int(screen_size))
        self.observation_space = gym.spaces.Box(0, 255, shape=shape, dtype=np.uint8)

        self._pending_seed = seed
        self._rng = np.random.default_rng(seed)
        if seed is not None:
            # Random actions drawn from the space (exploration warm-up) are reproducible too.
            self.action_space.seed(int(seed))
        # True only between a life lost (episodic life) and the reset that continues the game:
        # any other reset starts a new game.
        self._next_life = False
        self._lives = 0
        self._game_return = 0.0
        self._game_steps = 0

    # ------------------------------------------------------------------ internals
    def _grab(self, slot):
        self.ale.getScreenGrayscale(self._screens[slot])

    def _observation(self):
        np.maximum(self._screens[0], self._screens[1], out=self._pooled)
        if self._rows is None:
            return self._pooled[None].copy()
        (ri, rw), (ci, cw) = self._rows, self._cols
        rows = np.einsum("ki,kij->ij", rw, self._pooled[ri].astype(np.uint32))
        total = np.einsum("kj,ikj->ij", cw, rows[:, ci])
        # round(total / den) with halves up, in integers: floor((2 total + den) / (2 den)).
        # A convex combination of values in [0, 255] rounds into the uint8 range.
        den = self._denominator
        total *= 2
        total += den
        total //= 2 * den
        return total.astype(np.uint8)[None]

    def _skip_step(self, action):
        """Repeat ``action`` for frame_skip frames (fewer if the game ends); grab the last
        two screens; return the summed reward."""
        ale, act = self.ale, self._actions[action]
        reward = 0.0
        first_kept = self.frame_skip - 2
        for i in range(self.frame_skip):
            reward += ale.act(act)
            if ale.game_over():
                # Only the final frame is known to belong to this step: use it alone.
                self._grab(1)
                self._screens[0] = self._screens[1]
                return reward
            if i >= first_kept:
                self._grab(i - first_kept)
        if self.frame_skip == 1:
            self._screens[0] = self._screens[1]
        return reward

    def _info(self, game_over=False):
        return {"lives": self.ale.lives(), "episode_frame_number": self.ale.getEpisodeFrameNumber(),
                "frame_number": self.ale.getFrameNumber(), "game_over": game_over}

    def _real_reset(self, seed):
        self.env.reset(seed=seed)
        noop = self._actions[0]
        noops = int(self._rng.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            self.ale.act(noop)
            if self.ale.game_over():
                self.ale.reset_game()
        self._grab(1)
        self._screens[0] = self._screens[1]
        self._game_return = 0.0
        self._game_steps = 0
        self._press_fire()

    def _press_fire(self):
        if not self.fire_reset:
            return
        for action in (1, 2):
            # Points scored while the game restarts still count for the real game's score.
            self._game_return += self._skip_step(action)
            if self.ale.game_over():
                self._real_reset(None)
                return

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed=None, options=None):
        """Start a new episode: a new game, or after a life lost in episodic-life mode, the
        next life of the current game.

        Parameters
        ----------
        seed : int or None
            Reseed the ALE and the no-op draws and start a new game; None uses the seed
            given at construction on the first reset, and continues the streams afterwards.
        options : dict or None
            Unused (gymnasium API).

        Returns
        -------
        (np.ndarray, dict)
            First observation and info.
        """
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        if seed is not None:
            # The ALE derives its seeds from SeedSequence(seed); the no-op draws use a child.
            self._rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        if seed is not None or not self._next_life:
            self._real_reset(seed)
        else:
            # Next life: one NOOP step moves past the life-lost animation (as baselines).
            self._game_return += self._skip_step(0)
            if self.ale.game_over():
                self._real_reset(None)
            else:
                self._press_fire()
        self._next_life = False
        self._lives = self.ale.lives()
        return self._observation(), self._info()

    def step(self, action):
        """Play ``action`` for frame_skip frames.

        Parameters
        ----------
        action : int
            Index into the game's minimal action set.

        Returns
        -------
        obs, reward, terminated, truncated, info
            ``terminated`` at game over and, with episodic life, at every life lost;
            ``truncated`` at the time limit (agent steps) or the ALE's frame limit.
        """
        raw = self._skip_step(int(action))
        ale = self.ale
        self._game_return += raw
        self._game_steps += 1
        game_over = ale.game_over(with_truncation=False)
        time_up = self.max_episode_steps and self._game_steps >= self.max_episode_steps
        truncated = bool((ale.game_truncated() or time_up) and not game_over)
        lives = ale.lives()
        life_lost = 0 < lives < self._lives
        self._lives = lives
        self._next_life = self.episodic_life and life_lost and not (game_over or truncated)
        terminated = game_over or self._next_life
        real_end = game_over or truncated
        info = self._info(real_end)
        if real_end:
            info["episode"] = {"r": self._game_return, "l": self._game_steps}
            info["game_return"] = self._game_return
            info["game_length"] = self._game_steps
        reward = float(np.sign(raw)) if self.clip_rewards else raw
        return self._observation(), reward, bool(terminated), truncated, info


def _make_atari(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_stack, reward_delay,
                episodic_life, clip_rewards, max_episode_steps, sticky_actions, render_mode, mode):
    _register_ale()
    # Frame skipping and max-pooling are ours: the ALE steps single frames. We drive the
    # emulator and read its screens directly; obs_type only sets what AtariEnv.reset
    # returns (ignored), and grayscale is its cheapest.
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.25 if sticky_actions else 0.0,
                   full_action_space=False, obs_type="grayscale", render_mode=render_mode).unwrapped
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, episodic_life=episodic_life,
                             clip_rewards=clip_rewards, max_episode_steps=max_episode_steps,
                             seed=env_seed(seed, index_col_worker, index_grad_worker, index_env, mode))
    env = FrameStack(env, frame_stack)
    if reward_delay > 1:
        env = DelayedReward(env, reward_delay)
    return env


def atari_train_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, frame_stack=1,
                            reward_delay=1, episodic_life=True, clip_rewards=False, max_episode_steps=4500,
                            sticky_actions=False, render_mode=None):
    """Create a training Atari environment (see the module documentation).

    Parameters
    ----------
    env_id : str
        Gymnasium id of the game, e.g. "PongNoFrameskip-v4" (frame skipping is ours, so the
        emulator's own is always turned off; "ALE/Pong-v5" ids work too).
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed; combined with the three indexes so that every environment of every
        worker gets a different, reproducible seed.
    frame_stack : int
        Number of consecutive frames in an observation, shape (frame_stack, 84, 84).
    reward_delay : int
        Give the accumulated reward only every ``reward_delay`` steps and at episode end.
    episodic_life : bool
        End the episode at every life lost (a real reset only at game over).
    clip_rewards : bool
        Clip every reward to its sign (-1, 0 or 1).
    max_episode_steps : int or None
        Truncate a game after this many agent steps (4 frames each); None or 0: no limit.
    sticky_actions : bool
        Repeat the previous action instead of the new one with probability 0.25 at every
        frame (Machado et al., 2018); otherwise the emulator is deterministic.
    render_mode : str or None
        Passed to the ALE environment ("rgb_array" to film episodes).

    Returns
    -------
    gymnasium.Env
        Observations uint8 (frame_stack, 84, 84), actions the game's minimal action set.
    """
    return _make_atari(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_stack, reward_delay,
                       episodic_life, clip_rewards, max_episode_steps, sticky_actions, render_mode, "train")


def atari_test_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, frame_stack=1,
                           reward_delay=1, episodic_life=False, clip_rewards=False, max_episode_steps=4500,
                           sticky_actions=False, render_mode=None):
    """Create a test Atari environment: whole games with unclipped rewards.

    Same parameters as ``atari_train_env_factory``. ``episodic_life`` and ``clip_rewards``
    are accepted so that the training and test factories can share one keyword dict, and
    ignored: a test episode is always one whole game scored with the game's own rewards.
    Its seeds differ from those of the training environment with the same indexes.

    Parameters
    ----------
    env_id : str
        Gymnasium id of the game, e.g. "PongNoFrameskip-v4".
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed, combined with the indexes.
    frame_stack : int
        Number of consecutive frames in an observation.
    reward_delay : int
        Give the accumulated reward only every ``reward_delay`` steps and at episode end.
    episodic_life : bool
        Ignored (always False).
    clip_rewards : bool
        Ignored (always False).
    max_episode_steps : int or None
        Truncate a game after this many agent steps; None or 0: no limit.
    sticky_actions : bool
        Repeat the previous action with probability 0.25 at every frame.
    render_mode : str or None
        Passed to the ALE environment ("rgb_array" to film episodes).

    Returns
    -------
    gymnasium.Env
        Observations uint8 (frame_stack, 84, 84).
    """
    return _make_atari(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_stack, reward_delay,
                       False, False, max_episode_steps, sticky_actions, render_mode, "test")
