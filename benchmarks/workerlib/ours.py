"""Parts shared by our benchmark workers (the ``worker_ours.py`` of ppo_cartpole/,
distributed_cartpole/, offpolicy/ and atari_ppo/).

torch and pytorchrl are imported inside the functions: each worker counts its import time
from its own first line.
"""

from .common import greedy_returns


def value_loss_scale(algo_factory, actor_factory, obs_space=None):
    """How our algorithm's reported value loss relates to the plain MSE (0.5 for 0.5*MSE),
    measured on a synthetic batch.

    The peers' value coefficients multiply the plain MSE (SB3's ``vf_coef`` multiplies
    ``F.mse_loss``, RLlib's ``vf_loss_coeff`` likewise), so the workers pass ``coef / scale``
    as our ``value_loss_coef`` to train on the same objective, even if the library's loss
    changes. algo_factory, actor_factory: PPO's and the actor's factories (CPU). obs_space:
    the observations' space, sampled for the batch (None: CartPole's 4 floats).
    """
    import numpy as np
    import torch
    import pytorchrl as prl

    actor = actor_factory("cpu")
    algo = algo_factory("cpu", actor, None)
    g = torch.Generator().manual_seed(12345)
    n = 16
    if obs_space is None:
        obs = torch.randn(n, 4, generator=g)
    else:
        obs_space.seed(12345)
        obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(n)]))
    batch = {prl.OBS: obs, prl.ACT: torch.randint(0, 2, (n, 1), generator=g),
             prl.ADV: torch.randn(n, 1, generator=g), prl.LOGP: torch.full((n, 1), -0.69),
             prl.RET: torch.randn(n, 1, generator=g) * 3}
    with torch.no_grad():
        _, info = algo.compute_loss(batch)
        mse = float((batch[prl.RET] - actor.get_value(batch[prl.OBS])).pow(2).mean())
    return info["ValueLoss"] / mse


def zoo_ppo_learner(hp, make_algo, actor_factory, train_envs, steps, seed, obs_space=None):
    """Our PPO ``Learner`` for an SB3 comparison (the ``worker_ours.py`` of ppo_cartpole/ and
    atari_ppo/), in one process: SB3's objective (``hp["vf_coef_on_mse"]`` on the plain MSE,
    our coefficient from ``value_loss_scale``), GAE rollouts of ``hp["n_steps"]``, lr and clip
    linear to 0 over ``steps`` env steps, torch and numpy seeded with ``seed``.

    hp: the hyperparameter set (``common.ZOO_CARTPOLE_PPO``, ``ZOO_ATARI_PPO``);
    make_algo(value_loss_coef): PPO's factory with that coefficient; actor_factory,
    train_envs: the actor's and the environments' factories; steps: the env-step budget;
    seed: the run's seed; obs_space: the observations' space (None: CartPole's). Returns
    (learner, value_loss_coef passed, value-loss form scale).
    """
    import numpy as np
    import torch

    from pytorchrl.agent.storages import GAEBuffer
    from pytorchrl.learner import Learner
    from pytorchrl.schedules import Schedule
    from pytorchrl.scheme import Scheme

    # Same objective as SB3: vf_coef on the plain MSE (ours is 0.5*MSE -> coef / 0.5).
    scale = value_loss_scale(make_algo(1.0), actor_factory, obs_space)
    value_loss_coef = hp["vf_coef_on_mse"] / scale
    torch.manual_seed(seed)
    np.random.seed(seed)
    scheme = Scheme(algo_factory=make_algo(value_loss_coef), actor_factory=actor_factory,
                    storage_factory=GAEBuffer.create_factory(size=hp["n_steps"], gae_lambda=hp["gae_lambda"]),
                    train_envs_factory=train_envs, num_col_workers=1, num_grad_workers=1)
    learner = Learner(scheme, target_steps=steps, schedules=[
        Schedule("lr", kind="linear", start=hp["lr"], end=0.0),
        Schedule("clip_param", kind="linear", start=hp["clip"], end=0.0)])
    return learner, value_loss_coef, scale


def greedy_returns_of(actor, episodes, env_id="CartPole-v1", make_env=None, max_steps=None):
    """Returns of ``episodes`` greedy episodes (``workerlib.common.greedy_returns``, same
    arguments) played by our trained ``actor`` through the public ``Actor.act`` with
    ``deterministic=True`` (PPO's most likely action, DDQN's Q argmax, SAC's squashed
    Gaussian mean), in the actor's own precision."""
    import gymnasium as gym
    import numpy as np
    import torch

    discrete = isinstance(actor.action_space, gym.spaces.Discrete)

    def act(obs):
        obs = np.asarray(obs)
        if obs.dtype == np.float64:     # as the vector envs hand vectors to the actor (pixels stay uint8)
            obs = obs.astype(np.float32)
        env_action = np.asarray(actor.act(obs[None], deterministic=True)[0])[0]
        return int(env_action.reshape(-1)[0]) if discrete else env_action.reshape(-1)

    with torch.inference_mode():
        return greedy_returns(act, episodes, env_id, make_env, max_steps)
