"""Proximal Policy Optimization (Schulman et al., 2017), clipped surrogate objective."""

from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.losses.actor_critic import ppo_policy_loss
from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm, actor_critic_accelerators


@accelerated(*actor_critic_accelerators())
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
    kl_coef : float
        Weight of a penalty on the sample estimate of KL(behaviour policy || policy),
        the mean of ``(r - 1) - log r`` over the mini-batch (PPO's KL penalty with a fixed
        coefficient, on top of the clipped surrogate; 0: none).

    All other parameters are those of ``OnPolicyAlgorithm``. The defaults are those of
    pytorchrl's ``PPO.create_factory`` (``lr`` 1e-4, Adam's ``eps`` 1e-8, ``entropy_coef``
    0.01, ``test_every`` 1000, ``num_test_episodes`` 5, ...; docs/agents.md lists them).
    """

    name = "PPO"

    def __init__(self, device, actor, envs=None, lr=1e-4, eps=1e-8, gamma=0.99, num_epochs=4,
                 num_mini_batch=1, mini_batch_size=None, clip_param=0.2, entropy_coef=0.01,
                 value_loss_coef=0.5, max_grad_norm=0.5, normalize_advantages=True,
                 test_every=1000, num_test_episodes=5, numpy_update=True, use_clipped_value_loss=True, kl_coef=0.0,
                 policy_loss_addons=()):
        super().__init__(device, actor, envs, lr=lr, eps=eps, gamma=gamma, num_epochs=num_epochs,
                         num_mini_batch=num_mini_batch, mini_batch_size=mini_batch_size,
                         entropy_coef=entropy_coef, value_loss_coef=value_loss_coef,
                         max_grad_norm=max_grad_norm, normalize_advantages=normalize_advantages,
                         test_every=test_every, num_test_episodes=num_test_episodes,
                         numpy_update=numpy_update, policy_loss_addons=policy_loss_addons)
        self.clip_param = float(clip_param)
        self.use_clipped_value_loss = bool(use_clipped_value_loss)
        self.kl_coef = float(kl_coef)
        self.check_hyperparameters()

    @property
    def value_clip(self):
        """Range of the value clipping (``clip_param``), or None when it is off."""
        return self.clip_param if self.use_clipped_value_loss else None

    def policy_objective(self, xp, logp, old_logp, adv, grad=False):
        """The clipped surrogate (``losses.actor_critic.ppo_policy_loss``); stats hold
        ApproxKL and ClipFraction."""
        return ppo_policy_loss(xp, logp, old_logp, adv, self.clip_param, self.kl_coef, grad=grad)
