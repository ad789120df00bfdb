"""Deterministic policy gradients (DDPG, TD3): the policy loss and TD3's target smoothing."""


def smoothed_actions(xp, actions, noise, target_noise, noise_clip):
    """TD3's target policy smoothing: ``clip(a + clip(noise target_noise, -c, c), -1, 1)``
    with standard normal ``noise`` (N, D) and actions in [-1, 1] units."""
    return xp.clip(actions + xp.clip(noise * target_noise, -noise_clip, noise_clip), -1.0, 1.0)


def policy_loss(xp, q_pi, grad=True):
    """DDPG's policy loss ``-mean(Q_1(s, pi(s)))`` from the first critic's values ``q_pi``
    (N, 1); its gradient w.r.t. them is -1 / N."""
    return -q_pi.mean(), (-1.0 / q_pi.shape[0] if grad else None)


__all__ = ["smoothed_actions", "policy_loss"]
