"""Parts shared by our PPO benchmark workers (_ours_ppo.py, _ours_dist_ppo.py).

torch and pytorchrl are imported inside the functions: each worker counts its import time
from its own first line.
"""

from _worker_common import greedy_returns


def value_loss_scale(algo_factory, actor_factory):
    """How our algorithm's reported value loss relates to the plain MSE (0.5 for 0.5*MSE),
    measured on a synthetic CartPole batch.

    The peers' value coefficients multiply the plain MSE (SB3's ``vf_coef`` multiplies
    ``F.mse_loss``, RLlib's ``vf_loss_coeff`` likewise), so the workers pass ``coef / scale``
    as our ``value_loss_coef`` to train on the same objective, even if the library's loss
    changes. algo_factory, actor_factory: PPO's and the actor's factories (CPU).
    """
    import torch
    import pytorchrl as prl

    actor = actor_factory("cpu")
    algo = algo_factory("cpu", actor, None)
    g = torch.Generator().manual_seed(12345)
    n = 16
    batch = {prl.OBS: torch.randn(n, 4, generator=g), prl.ACT: torch.randint(0, 2, (n, 1), generator=g),
             prl.ADV: torch.randn(n, 1, generator=g), prl.LOGP: torch.full((n, 1), -0.69),
             prl.RET: torch.randn(n, 1, generator=g) * 3}
    with torch.no_grad():
        _, info = algo.compute_loss(batch)
        mse = float((batch[prl.RET] - actor.get_value(batch[prl.OBS])).pow(2).mean())
    return info["ValueLoss"] / mse


def greedy_returns_of(actor, episodes):
    """Returns of ``episodes`` greedy CartPole episodes (``_worker_common.greedy_returns``)
    played by our trained ``actor`` (its deterministic action)."""
    import torch

    def act(obs):
        _, env_action, _, _ = actor.get_action(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0),
                                               deterministic=True)
        return int(env_action.reshape(-1)[0])

    with torch.inference_mode():
        return greedy_returns(act, episodes)
