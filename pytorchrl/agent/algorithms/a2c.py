"""Advantage Actor-Critic (synchronous A2C; Mnih et al., 2016)."""

from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.accel.losses.actor_critic import a2c_policy_loss
from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm, actor_critic_accelerators


@accelerated(*actor_critic_accelerators())
class A2C(OnPolicyAlgorithm):
    """A2C: one gradient step per rollout on the advantage-weighted log-likelihood.

    Parameters are those of ``OnPolicyAlgorithm``; the defaults follow the usual A2C
    settings (one epoch, the whole rollout as one mini-batch, no advantage normalisation).
    """

    name = "A2C"

    def __init__(self, device, actor, envs=None, lr=7e-4, eps=1e-5, gamma=0.99, num_epochs=1,
                 num_mini_batch=1, mini_batch_size=None, entropy_coef=0.0, value_loss_coef=0.5,
                 max_grad_norm=0.5, normalize_advantages=False, test_every=10, num_test_episodes=10,
                 numpy_update=True):
        super().__init__(device, actor, envs, lr=lr, eps=eps, gamma=gamma, num_epochs=num_epochs,
                         num_mini_batch=num_mini_batch, mini_batch_size=mini_batch_size,
                         entropy_coef=entropy_coef, value_loss_coef=value_loss_coef,
                         max_grad_norm=max_grad_norm, normalize_advantages=normalize_advantages,
                         test_every=test_every, num_test_episodes=num_test_episodes,
                         numpy_update=numpy_update)

    def policy_objective(self, xp, logp, old_logp, adv, grad=False):
        """The policy gradient loss (``losses.actor_critic.a2c_policy_loss``)."""
        return a2c_policy_loss(xp, logp, old_logp, adv, grad=grad)
