"""Proximal Policy Optimization (Schulman et al., 2017), clipped surrogate objective."""

import torch

from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm


class PPO(OnPolicyAlgorithm):
    """PPO with the clipped surrogate objective.

    Parameters
    ----------
    clip_param : float
        Clipping range of the probability ratio.
    use_clipped_value_loss : bool
        Clip the change of the value estimate to ``clip_param`` around the value the data
        was collected with, taking the larger of the clipped and unclipped errors
        (pytorchrl's default; Stable-Baselines3's ``clip_range_vf=None`` is False).

    All other parameters are those of ``OnPolicyAlgorithm``.
    """

    name = "PPO"
    fused_clip_param = "clip_param"

    def __init__(self, device, actor, envs=None, lr=3e-4, eps=1e-5, gamma=0.99, num_epochs=4,
                 num_mini_batch=1, mini_batch_size=None, clip_param=0.2, entropy_coef=0.0,
                 value_loss_coef=0.5, max_grad_norm=0.5, normalize_advantages=True,
                 test_every=10, num_test_episodes=10, numpy_update=True, use_clipped_value_loss=True):
        super().__init__(device, actor, envs, lr=lr, eps=eps, gamma=gamma, num_epochs=num_epochs,
                         num_mini_batch=num_mini_batch, mini_batch_size=mini_batch_size,
                         entropy_coef=entropy_coef, value_loss_coef=value_loss_coef,
                         max_grad_norm=max_grad_norm, normalize_advantages=normalize_advantages,
                         test_every=test_every, num_test_episodes=num_test_episodes,
                         numpy_update=numpy_update)
        self.clip_param = float(clip_param)
        self.use_clipped_value_loss = bool(use_clipped_value_loss)

    @property
    def value_clip(self):
        """Range of the value clipping (``clip_param``), or None when it is off."""
        return self.clip_param if self.use_clipped_value_loss else None

    def policy_loss(self, logp, old_logp, adv):
        """Clipped surrogate loss; info holds ApproxKL and ClipFraction as 0-d tensors."""
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        surr1 = ratio * adv
        surr2 = torch.clamp(ratio, 1.0 - self.clip_param, 1.0 + self.clip_param) * adv
        loss = -torch.min(surr1, surr2).mean()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
            clip_fraction = ((ratio - 1).abs() > self.clip_param).float().mean()
        return loss, {"ApproxKL": approx_kl, "ClipFraction": clip_fraction}


PPO.fused_policy_loss = PPO.policy_loss
