"""``pytorchrl evaluate``: deterministic episodes of a run's saved model, optionally filmed.

The model is rebuilt from the run's ``config.yaml`` (environment, actor) and its weights
from ``model.state_dict``; episodes run in one environment of this process, with the
mode of the policy as action. Videos use gymnasium's ``rgb_array`` rendering: GIF with
Pillow (or imageio), MP4 with imageio and imageio-ffmpeg.
"""

import importlib
import importlib.util
import os

import numpy as np

from pytorchrl.checkpoint import CheckpointError, read_torch
from pytorchrl.tools import CONFIG, MODEL

#: Video formats and the packages that write them (the first available is used).
VIDEO_FORMATS = {".gif": ("PIL", "imageio"), ".mp4": ("imageio_ffmpeg",)}
#: Widest GIF frame: GIFs hold every frame in memory and on disk uncompressed between frames.
GIF_MAX_WIDTH = 480


class EvaluationError(Exception):
    """A problem the user can fix (missing file, missing video dependency), in one line."""


def _has(module):
    return importlib.util.find_spec(module) is not None


def check_video_path(path):
    """Refuse a video file name whose format is unknown or whose writer is not installed.

    Called before any episode runs, so that a missing package costs nothing.

    Parameters
    ----------
    path : str
        Output file: ``.gif`` or ``.mp4``.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in VIDEO_FORMATS:
        raise EvaluationError(f"unsupported video format {ext or path!r}: use a .gif or .mp4 file name")
    if ext == ".gif" and not (_has("PIL") or _has("imageio")):
        raise EvaluationError("writing a GIF needs Pillow or imageio: pip install pillow")
    if ext == ".mp4" and not (_has("imageio") and _has("imageio_ffmpeg")):
        raise EvaluationError("writing an MP4 needs imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg "
                              "(or pip install 'pytorchrl[video]')")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise EvaluationError(f"cannot write {path}: no directory {directory}")


class VideoWriter:
    """Writes frames (H, W, 3 uint8 arrays) to a GIF or MP4 file.

    Parameters
    ----------
    path : str
        Output file (``.gif`` or ``.mp4``; see ``check_video_path``).
    fps : float
        Frames per second of the video.
    """

    def __init__(self, path, fps):
        check_video_path(path)
        self.path = path
        self.fps = float(fps)
        self.ext = os.path.splitext(path)[1].lower()
        self.frames = 0
        self._gif = []
        self._mp4 = None
        if self.ext == ".mp4":
            import imageio.v2 as imageio
            # libx264 wants even sizes; frames are padded to them (macro_block_size=2).
            self._mp4 = imageio.get_writer(path, fps=self.fps, codec="libx264", quality=7, macro_block_size=2)

    def add(self, frame):
        """Append one frame."""
        frame = np.asarray(frame, dtype=np.uint8)
        self.frames += 1
        if self._mp4 is not None:
            h, w = frame.shape[:2]
            if h % 2 or w % 2:
                frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
            self._mp4.append_data(frame)
        else:
            from PIL import Image
            image = Image.fromarray(frame)
            if image.width > GIF_MAX_WIDTH:
                scale = GIF_MAX_WIDTH / image.width
                image = image.resize((GIF_MAX_WIDTH, max(1, round(image.height * scale))), Image.BILINEAR)
            # Palette now: one byte per pixel held until the file is written.
            self._gif.append(image.quantize(colors=255))

    def close(self):
        """Finish the file; returns its path."""
        if self._mp4 is not None:
            self._mp4.close()
        elif self._gif:
            # GIF frame durations are in hundredths of a second; below 2 viewers slow down.
            duration = max(20, int(round(1000 / self.fps / 10)) * 10)
            self._gif[0].save(self.path, save_all=True, append_images=self._gif[1:], duration=duration, loop=0)
        return self.path


def load_run_config(run_dir):
    """The resolved configuration of a run (its ``config.yaml``), validated."""
    from pytorchrl.config import load_config
    path = os.path.join(run_dir, CONFIG)
    if not os.path.isfile(path):
        raise EvaluationError(f"{run_dir} is not a run directory (no {CONFIG})")
    return load_config(path)


def build_env(config, render=False):
    """One environment of a run's ``env`` section, as its actor sees them (packed spaces).

    Parameters
    ----------
    config : dict
        Resolved configuration.
    render : bool
        Build it with ``render_mode="rgb_array"``.
    """
    from pytorchrl.agent.vec_env import ChannelsFirst
    from pytorchrl.agent.spaces import looks_like_hwc_image, pack_env
    from pytorchrl.envs import make_gym_env
    from pytorchrl.envs.families import ENV_FAMILIES

    env_id = config["env"]["id"]
    kwargs = dict(config["env"]["kwargs"])
    if render:
        # Frames are drawn off screen: keep SDL (pygame's renderer) from looking for a
        # display and a sound card, and from complaining about them on stderr.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        kwargs["render_mode"] = "rgb_array"
    family = ENV_FAMILIES[config["env"]["family"]]
    if family.name != "gym":
        # Evaluation plays whole games with the test factory (no episodic life, no clipping).
        options = {k: config["env"][k] for k in family.options if config["env"][k] is not None}
        env = family.test_factory(env_id, 0, 0, render_mode=kwargs.get("render_mode"), **options)
    else:
        if ":" in env_id:
            module, _, env_id = env_id.partition(":")
            importlib.import_module(module)
        env = make_gym_env(env_id, **kwargs)
    # (H, W, C) images are moved channels first, as the training envs (VecEnv) move them;
    # Dict and Tuple observations are packed as they packed them.
    if looks_like_hwc_image(env.observation_space):
        return ChannelsFirst(env)
    return pack_env(env)


def build_policy(config, model_path, render=False):
    """The environment and the actor of a run, with the saved weights loaded.

    Parameters
    ----------
    config : dict
        Resolved configuration of the run.
    model_path : str
        ``model.state_dict`` written by the run, or one of its checkpoints
        (``checkpoint.pt``, ``checkpoint.prev.pt``), whose actor weights are used.
    render : bool
        Build the environment with ``render_mode="rgb_array"``.

    Returns
    -------
    (gymnasium.Env, OnPolicyActor)
    """
    from pytorchrl.config import build_actor_factory

    if not os.path.isfile(model_path):
        raise EvaluationError(f"no model at {model_path}: the run saves it at the end, on Ctrl-C and "
                              f"every learner.save_every seconds")
    env = build_env(config, render)
    # The algorithm's name only: its factory would build the behaviours of policy-loss add-ons.
    actor = build_actor_factory(config, env.observation_space, env.action_space, config["algorithm"]["name"])("cpu")
    try:
        # weights_only: tensors and plain values only, no code from the file is executed.
        weights = read_torch(model_path, "model")
    except CheckpointError as exc:
        env.close()
        raise EvaluationError(f"cannot read {model_path}: not a saved model (or damaged): {exc.cause}") from None
    if isinstance(weights, dict) and "format" in weights and "worker" in weights:
        # A full checkpoint (checkpoint.pt, checkpoint.prev.pt): the actor's weights in it.
        weights = weights["worker"]["algo"]["actor"]
    if isinstance(weights, dict):
        # The learner's weights hold its own networks too (targets: "algo.<name>.*").
        weights = {k: v for k, v in weights.items() if not str(k).startswith("algo.")}
    try:
        actor.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:
        env.close()
        detail = " ".join(str(exc).split())
        raise EvaluationError(f"{model_path} does not match the actor of {CONFIG}: "
                              f"{detail[:300] + ('...' if len(detail) > 300 else '')}") from None
    actor.eval()
    return env, actor


def _render(env):
    from gymnasium.error import DependencyNotInstalled
    try:
        return env.render()
    except DependencyNotInstalled as exc:
        raise EvaluationError(f"cannot render {env.spec.id if env.spec else 'the environment'}: {exc}") from None


def load_policy(run_dir, model=None):
    """The saved policy of a run, to call from Python (as Stable-Baselines3's ``PPO.load``)::

        policy = load_policy("runs/ppo")
        env = policy.make_env()
        obs, _ = env.reset(seed=0)
        action, state = policy.predict(obs, deterministic=True)

    Parameters
    ----------
    run_dir : str
        Run directory (``config.yaml``, and ``model.state_dict`` unless ``model`` is given).
    model : str or None
        Weights to load instead: a saved model or a checkpoint of the run.

    Returns
    -------
    Policy
        ``pytorchrl.agent.actors.Policy`` with ``config`` (the run's resolved configuration)
        and ``make_env(render=False)`` (one environment of the run, as the policy sees it).
    """
    from pytorchrl.agent.actors import Policy

    config = load_run_config(run_dir)
    env, actor = build_policy(config, model or os.path.join(run_dir, MODEL))
    env.close()
    policy = Policy(actor)
    policy.config = config
    policy.make_env = lambda render=False: build_env(config, render)
    return policy


def run_episodes(env, actor, episodes, seed=None, video=None, video_episodes=1, on_episode=None):
    """Run deterministic episodes; returns ``(returns, lengths)``.

    Parameters
    ----------
    env : gymnasium.Env
        The environment (built with ``render_mode="rgb_array"`` when filming).
    actor : Actor or Policy
        The policy; its mode is used as action.
    episodes : int
        Episodes to run.
    seed : int or None
        Seed of the first reset (later resets continue the environment's generator).
    video : VideoWriter or None
        Receives the frames of the first ``video_episodes`` episodes.
    video_episodes : int
        Episodes filmed.
    on_episode : callable or None
        ``on_episode(index, return, length)`` after each episode.
    """
    from pytorchrl.agent.actors import Policy

    policy = actor if isinstance(actor, Policy) else Policy(actor)
    returns, lengths = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed if i == 0 else None)
        filming = video is not None and i < video_episodes
        if filming:
            video.add(_render(env))
        total, length, done = 0.0, 0, False
        state = None   # a recurrent actor's memory, carried through the episode
        while not done:
            action, state = policy.predict(obs, state, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            length += 1
            done = terminated or truncated
            if filming:
                video.add(_render(env))
        returns.append(total)
        lengths.append(length)
        if on_episode is not None:
            on_episode(i, total, length)
    return returns, lengths


def evaluate_run(run_dir, episodes=10, video=None, video_episodes=1, seed=None, model=None, on_episode=None):
    """Evaluate the saved model of ``run_dir``.

    Parameters
    ----------
    run_dir : str
        Run directory (``config.yaml`` and ``model.state_dict``).
    episodes : int
        Deterministic episodes to run.
    video : str or None
        ``.gif`` or ``.mp4`` file to film the first ``video_episodes`` episodes into.
    video_episodes : int
        Episodes filmed.
    seed : int or None
        Seed of the environment (None: the run's seed + 1000, away from training's seeds).
    model : str or None
        Weights to load (default: ``<run_dir>/model.state_dict``): a saved model or a
        checkpoint of the run.
    on_episode : callable or None
        ``on_episode(index, return, length)`` after each episode.

    Returns
    -------
    dict
        ``returns``, ``lengths``, ``mean``, ``std``, ``video`` (path or None), ``frames``.
    """
    if video is not None:
        check_video_path(video)
    config = load_run_config(run_dir)
    if seed is None:
        base = config["env"]["seed"] if config["env"]["seed"] is not None else config["seed"]
        seed = None if base is None else base + 1000
    env, actor = build_policy(config, model or os.path.join(run_dir, MODEL), render=video is not None)
    writer = None
    try:
        if video is not None:
            fps = (env.metadata or {}).get("render_fps") or 30
            writer = VideoWriter(video, fps)
        returns, lengths = run_episodes(env, actor, episodes, seed, writer, video_episodes, on_episode)
    finally:
        env.close()
        if writer is not None:
            writer.close()
    return {"returns": returns, "lengths": lengths, "mean": float(np.mean(returns)),
            "std": float(np.std(returns)), "video": video, "frames": writer.frames if writer else 0,
            "seed": seed}


__all__ = ["EvaluationError", "VideoWriter", "check_video_path", "build_env", "build_policy", "load_policy", "run_episodes",
           "evaluate_run", "load_run_config"]
