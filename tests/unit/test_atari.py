"""Atari environments on real ALE games: shapes, frame skip, max-pool, resize, episodic life,
reward clipping and delay, frame stack, time limit, real game statistics, seeding."""

import numpy as np
import pytest

from _util import needs_extra

needs_extra("ale_py", "atari")

from pytorchrl.agent.env import VecEnv  # noqa: E402
from pytorchrl.envs import atari_test_env_factory, atari_train_env_factory  # noqa: E402
from pytorchrl.envs.atari import area_resize_weights  # noqa: E402
from pytorchrl.envs.common import env_seed  # noqa: E402

PONG = "PongNoFrameskip-v4"
BREAKOUT = "BreakoutNoFrameskip-v4"
INVADERS = "SpaceInvadersNoFrameskip-v4"


def reference_area_resize(image, out_h, out_w):
    """Area interpolation pixel by pixel: each output pixel is the mean of the input over its
    footprint, each input pixel weighted by the part of it inside (written independently of
    the weight matrices under test)."""
    in_h, in_w = image.shape
    sy, sx = in_h / out_h, in_w / out_w

    def overlaps(i, scale, n_in):
        lo, hi = i * scale, (i + 1) * scale
        return [(j, min(j + 1, hi) - max(j, lo)) for j in range(int(np.floor(lo)), min(int(np.ceil(hi)), n_in))
                if min(j + 1, hi) - max(j, lo) > 0]

    rows = [overlaps(i, sy, in_h) for i in range(out_h)]
    cols = [overlaps(j, sx, in_w) for j in range(out_w)]
    img = image.astype(np.float64)
    out = np.empty((out_h, out_w))
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            out[i, j] = sum(wr * wc * img[r, c] for r, wr in row for c, wc in col) / (sy * sx)
    return out


def assert_rounded(obs, expected):
    """obs (uint8) is ``expected`` (float64) rounded to nearest, halves up. The exact values
    are multiples of 1/200, so float64 error (far below 1e-9) only matters at exact halves,
    which the 1e-9 nudge sends up as the integer arithmetic does."""
    np.testing.assert_array_equal(obs, np.floor(expected + 0.5 + 1e-9).astype(np.uint8))


def play(env, actions):
    """Step ``env`` through ``actions`` (resetting after every episode end); return the
    list of (obs, reward, terminated, truncated, info)."""
    out = []
    for a in actions:
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            env.reset()
    return out


# ----------------------------------------------------------------- shapes and spaces
@pytest.mark.parametrize("frame_stack", [1, 4])
def test_observation_shape_and_dtype(frame_stack):
    for factory in (atari_train_env_factory, atari_test_env_factory):
        env = factory(PONG, 0, 0, frame_stack=frame_stack)
        assert env.observation_space.shape == (frame_stack, 84, 84)
        assert env.observation_space.dtype == np.uint8
        obs, info = env.reset()
        assert obs.shape == (frame_stack, 84, 84) and obs.dtype == np.uint8
        obs, *_ = env.step(0)
        assert obs.shape == (frame_stack, 84, 84) and obs.dtype == np.uint8
        assert env.observation_space.contains(obs)
        env.close()


def test_sticky_actions_setting():
    assert atari_train_env_factory(PONG, 0, 0, sticky_actions=True).unwrapped.ale.getFloat(
        "repeat_action_probability") == pytest.approx(0.25)
    assert atari_train_env_factory(PONG, 0, 0).unwrapped.ale.getFloat("repeat_action_probability") == 0.0


# ----------------------------------------------------------------- frame skip, max-pool, resize
def test_frame_skip_steps_the_emulator_four_frames():
    env = atari_train_env_factory(PONG, 0, 0)
    env.reset()
    ale = env.unwrapped.ale
    for _ in range(20):
        before = ale.getEpisodeFrameNumber()
        _, _, term, trunc, info = env.step(2)
        assert not (term or trunc)
        assert ale.getEpisodeFrameNumber() - before == 4
        assert info["episode_frame_number"] == before + 4


def test_observation_is_resized_max_of_last_two_frames():
    """Replay every step from a cloned emulator state, grabbing the frames straight from the
    ALE: the observation is the area-resized pixel-wise max of frames 3 and 4."""
    env = atari_test_env_factory(BREAKOUT, 0, 0, seed=1)  # whole games: no life-loss reset
    env.reset()
    ale = env.unwrapped.ale
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)
    pooled_differs = 0
    for _ in range(25):
        a = int(rng.integers(len(actions)))
        state = ale.cloneState()
        obs, _, term, trunc, _ = env.step(a)
        assert not (term or trunc)
        after = ale.cloneState()
        ale.restoreState(state)
        frames = []
        for _ in range(4):
            ale.act(actions[a])
            frames.append(ale.getScreenGrayscale().copy())
        ale.restoreState(after)
        pooled = np.maximum(frames[2], frames[3])
        pooled_differs += bool((pooled != frames[3]).any())
        assert_rounded(obs[-1], reference_area_resize(pooled, 84, 84))
    # The ball moves between the two frames: the max really combines two different frames.
    assert pooled_differs > 0


def test_full_screen_observation_is_exact_max_pool():
    """Without resize (screen_size=None) the observation is exactly max(frame 3, frame 4)."""
    import gymnasium as gym

    from pytorchrl.envs.atari import AtariPreprocessing, _register_ale
    _register_ale()
    base = gym.make(PONG, frameskip=1, repeat_action_probability=0.0, obs_type="grayscale").unwrapped
    env = AtariPreprocessing(base, screen_size=None, seed=0)
    assert env.observation_space.shape == (1, 210, 160)
    env.reset()
    ale = base.ale
    for t in range(60):
        a = t % 3 + 1
        state = ale.cloneState()
        obs, *_ = env.step(a)
        after = ale.cloneState()
        ale.restoreState(state)
        frames = []
        for _ in range(4):
            ale.act(ale.getMinimalActionSet()[a])
            frames.append(ale.getScreenGrayscale().copy())
        ale.restoreState(after)
        np.testing.assert_array_equal(obs[0], np.maximum(frames[2], frames[3]))


@pytest.mark.parametrize("n_in,n_out", [(210, 84), (160, 84), (84, 84), (10, 3)])
def test_area_weights_match_reference(n_in, n_out):
    weights = area_resize_weights(n_in, n_out)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-6)
    image = np.random.default_rng(n_in).integers(0, 256, (n_in, 7)).astype(np.float64)
    np.testing.assert_allclose(weights @ image, reference_area_resize(image, n_out, 7), rtol=1e-5, atol=1e-3)


# ----------------------------------------------------------------- episodic life and real game stats
def test_life_loss_ends_training_episode_but_not_the_game():
    env = atari_train_env_factory(BREAKOUT, 0, 0, seed=3)
    _, info = env.reset()
    ale = env.unwrapped.ale
    assert info["lives"] == 5
    for _ in range(1000):
        _, _, term, trunc, info = env.step(0)  # NOOP: the ball is soon missed
        if term or trunc:
            break
    assert term and not trunc
    assert info["lives"] == 4 and not info["game_over"] and "episode" not in info
    frame_at_loss = ale.getEpisodeFrameNumber()
    _, info = env.reset()
    # The same game goes on: no new game (frame count continues), one life fewer.
    assert info["lives"] == 4
    assert ale.getEpisodeFrameNumber() > frame_at_loss


def test_test_env_plays_whole_games_and_reports_real_stats():
    env = atari_test_env_factory(BREAKOUT, 0, 0, seed=3, episodic_life=True, clip_rewards=True)
    env.reset()
    lives_seen, total, steps = set(), 0.0, 0
    for _ in range(3000):
        _, r, term, trunc, info = env.step(1)  # FIRE keeps relaunching the ball after a loss
        total += r
        steps += 1
        lives_seen.add(info["lives"])
        if term or trunc:
            break
    assert term and info["game_over"] and info["lives"] == 0
    assert lives_seen >= {5, 4, 3, 2, 1}  # several lives lost inside one episode
    assert info["episode"] == {"r": total, "l": steps}
    assert info["game_return"] == total and info["game_length"] == steps


def test_training_env_reports_real_game_return_across_lives():
    """With episodic life and clipping the agent sees clipped lives; the info of the last one
    carries the unclipped score and agent steps of the whole game."""
    clipped = atari_train_env_factory(INVADERS, 0, 0, seed=5, clip_rewards=True, max_episode_steps=200)
    raw = atari_train_env_factory(INVADERS, 0, 0, seed=5, clip_rewards=False, max_episode_steps=200)
    clipped.reset()
    raw.reset()
    rng = np.random.default_rng(1)
    raw_total, episodes, steps = 0.0, 0, 0
    while True:
        a = int(rng.integers(clipped.action_space.n))
        _, rc, tc, uc, ic = clipped.step(a)
        _, rr, tr, ur, ir = raw.step(a)
        steps += 1
        assert (tc, uc) == (tr, ur)
        assert rc == np.sign(rr)
        raw_total += rr
        if tc or uc:
            episodes += 1
            if ic["game_over"]:
                break
            clipped.reset()
            raw.reset()
    assert episodes > 1 and raw_total > 1  # lives were lost and rewards exceeded 1
    # The 200-step time limit counts agent steps of the whole game and truncates it.
    assert uc and steps == 200
    for info in (ic, ir):
        assert info["episode"] == {"r": raw_total, "l": 200}
    # After the time limit the next reset starts a new game.
    _, info = clipped.reset()
    assert info["lives"] == 3 and info["episode_frame_number"] < 60


def test_reward_delay_keeps_the_sum():
    plain = atari_test_env_factory(INVADERS, 0, 0, seed=2, max_episode_steps=60)
    delayed = atari_test_env_factory(INVADERS, 0, 0, seed=2, max_episode_steps=60, reward_delay=7)
    plain.reset()
    delayed.reset()
    rng = np.random.default_rng(2)
    plain_rewards, delayed_rewards = [], []
    for t in range(1, 61):
        a = int(rng.integers(plain.action_space.n))
        plain_rewards.append(plain.step(a)[1])
        _, r, term, trunc, _ = delayed.step(a)
        delayed_rewards.append(r)
        if t % 7 and not (term or trunc):
            assert r == 0.0
    assert trunc
    assert sum(plain_rewards) > 0 and sum(delayed_rewards) == sum(plain_rewards)
    # Rewards at steps 7, 14, ... are the sums of the 7 steps before.
    assert delayed_rewards[6] == sum(plain_rewards[:7])


# ----------------------------------------------------------------- frame stack
def test_frame_stack_order_newest_last():
    single = atari_train_env_factory(PONG, 0, 0, seed=4, frame_stack=1)
    stacked = atari_train_env_factory(PONG, 0, 0, seed=4, frame_stack=4)
    frames = [single.reset()[0][0]]
    obs = stacked.reset()[0]
    for k in range(4):
        np.testing.assert_array_equal(obs[k], frames[0])
    for t in range(40):
        a = t % 6
        frames.append(single.step(a)[0][0])
        obs = stacked.step(a)[0]
        history = [frames[max(len(frames) - 4 + k, 0)] for k in range(4)]
        np.testing.assert_array_equal(obs, np.stack(history))
    assert not np.array_equal(obs[0], obs[-1])


# ----------------------------------------------------------------- seeding
def test_seeds_differ_for_every_env_worker_and_mode():
    seeds = {env_seed(s, c, g, e, m) for s in range(3) for c in range(4) for g in range(3) for e in range(8)
             for m in ("train", "test")}
    assert len(seeds) == 3 * 4 * 3 * 8 * 2
    with pytest.raises(ValueError):
        env_seed(-1, 0, 0, 0)


def _reset_frames(env, n=4):
    """Episode frame number after each of ``n`` resets (the no-op count shows in it)."""
    frames = []
    for _ in range(n):
        _, info = env.reset()
        frames.append(info["episode_frame_number"])
    return frames


def test_seeding_is_reproducible_and_distinct():
    def trajectory(**kwargs):
        env = atari_train_env_factory(PONG, **kwargs, sticky_actions=True)
        obs = [env.reset()[0]]
        obs += [env.step(t % 6)[0] for t in range(30)]
        return np.stack(obs), _reset_frames(env)

    base = dict(index_col_worker=1, index_grad_worker=2, index_env=3, seed=7)
    obs_a, frames_a = trajectory(**base)
    obs_b, frames_b = trajectory(**base)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert frames_a == frames_b
    # Every index enters the seed (test_seeds_differ_for_every_env_worker_and_mode); here two
    # of them are checked to reach the emulator.
    for change in ({"index_env": 4}, {"seed": 8}):
        _, frames_c = trajectory(**{**base, **change})
        assert frames_c != frames_a, change
    test_env = atari_test_env_factory(PONG, 1, 2, index_env=3, seed=7, sticky_actions=True)
    assert _reset_frames(test_env) != frames_a


def test_fire_reset_only_for_games_that_need_it():
    assert atari_train_env_factory(BREAKOUT, 0, 0).env.fire_reset
    assert not atari_train_env_factory("FreewayNoFrameskip-v4", 0, 0).env.fire_reset


# ----------------------------------------------------------------- through VecEnv
def test_vec_env_keeps_channels_first_frames():
    factory, action_space, obs_space = VecEnv.create_factory(
        atari_train_env_factory, {"env_id": PONG, "frame_stack": 4}, vec_env_size=2)
    assert obs_space.shape == (4, 84, 84)  # already channels first: not transposed
    envs = factory("cpu")
    obs = envs.reset()
    assert tuple(obs.shape) == (2, 4, 84, 84)
    obs, rew, term, trunc, _ = envs.step(np.zeros(2, dtype=np.int64))
    assert tuple(obs.shape) == (2, 4, 84, 84)
    envs.close()


# ------------------------------------------------------------- pytorchrl's Atari PPO script


def test_a_configured_atari_run_logs_the_real_games(tmp_path):
    """A run of the atari family built from a configuration records the real game's score and
    length (``game_return``, ``game_length``) in its episode logs, where an episode is one life
    (what benchmarks/zoo scores Atari rows by)."""
    from pytorchrl.config import build_env_factories, validate_config
    from cli_helpers import read_csv

    config = validate_config({"env": {"family": "atari", "id": "BreakoutNoFrameskip-v4", "vec_env_size": 1,
                                      "max_episode_steps": 40, "seed": 0},
                              "algorithm": {"name": "PPO"}, "storage": {"name": "GAEBuffer", "size": 8},
                              "learner": {"target_steps": 100}})
    train_factory, _, _, _ = build_env_factories(config, log_dir=str(tmp_path))
    envs = train_factory("cpu", 0, 0)
    try:
        envs.reset()
        for _ in range(120):    # three games of 40 steps (random play loses lives before)
            envs.step(np.array([[envs.action_space.sample()]]))
    finally:
        envs.close()
    rows = read_csv(tmp_path / "monitor" / "train_monitor_g0_c0.csv")
    games = [r for r in rows if r["game_return"] != ""]
    assert len(games) >= 2 and all(r["game_length"] == "40" for r in games)
