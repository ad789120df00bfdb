"""Advantage Actor-Critic (synchronous A2C; Mnih et al., 2016)."""

from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.losses.actor_critic import a2c_policy_loss
from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm, actor_critic_accelerators


@accelerated(*actor_critic_accelerators())
class A2C(OnPolicyAlgorithm):
    """A2C: one gradient step per rollout on the advantage-weighted log-likelihood.

    As pytorchrl's A2C it has two Adam optimizers, one for the policy network and one for
    the value network, each with its learning rate (``lr_pi``, ``lr_v``), and clips the
    gradients of both together to ``max_grad_norm`` (one global norm over every
    parameter); its value loss is the mean squared error of the value estimates (as
    pytorchrl's and Stable-Baselines3's, twice PPO's ``0.5 mean((v - R)^2)``), weighted
    by ``value_loss_coef``. Parameters are those of ``OnPolicyAlgorithm`` and the ones
    below. The defaults are those of pytorchrl's ``A2C.create_factory``: ``lr_v = lr_pi =
    1e-4``, Adam's ``eps`` 1e-8, ``test_every`` 5000, ``num_test_episodes`` 5, one epoch
    on the whole rollout as one mini-batch, normalised advantages (pytorchrl's storages
    normalise them) and ``value_loss_coef`` 1 (its unweighted loss; Stable-Baselines3's
    ``vf_coef`` is 0.5).

    Parameters
    ----------
    lr : float
        Learning rate of both optimizers (our name): ``lr_pi`` and ``lr_v`` start from it
        unless given. Read back it is their common value, or None once they differ; a
        hot-swap of ``lr`` sets both. Given None (an A2C rebuilt from such hyperparameters),
        the rates are ``lr_pi`` and ``lr_v``.
    lr_v : float or None
        Learning rate of the value optimizer (pytorchrl's name): it trains the value head
        and, when the actor has separate networks, the value network (its own feature
        extractor and memory). None: ``lr``.
    lr_pi : float or None
        Learning rate of the policy optimizer (pytorchrl's name): it trains the policy
        head and the policy network (its feature extractor and memory, also when they are
        shared with the value head). None: ``lr``.

    All other parameters (``policy_loss_addons`` among them, pytorchrl's last argument of
    ``A2C.create_factory``) are those of ``OnPolicyAlgorithm``.
    """

    name = "A2C"
    group_lr = {"policy": "lr_pi", "value": "lr_v"}
    # pytorchrl clips the gradients of both optimizers together (one clip_grad_norm_ over
    # the actor's parameters); clipped apart, A2C on CartPole reached 500 in 0 of 8 seeds.
    clip_groups_together = True
    # pytorchrl's value loss is the mean squared error (Stable-Baselines3's too), not PPO's
    # half of it; weighted by value_loss_coef (1 by default: pytorchrl's; the zoo's vf_coef is 0.5).
    value_loss_scale = 1.0

    def __init__(self, device, actor, envs=None, lr=1e-4, lr_v=None, lr_pi=None, eps=1e-8, gamma=0.99,
                 num_epochs=1, num_mini_batch=1, mini_batch_size=None, entropy_coef=0.0, value_loss_coef=1.0,
                 max_grad_norm=0.5, normalize_advantages=True, test_every=5000, num_test_episodes=5,
                 numpy_update=True, policy_loss_addons=()):
        # (``lr`` sets both rates in the base constructor; the ones given explicitly follow.
        # None, as the hyperparameters of an A2C whose two rates differ read it back, rebuilt
        # with them when its actor is replaced: the rates given decide.)
        if lr is None:
            lr = lr_pi if lr_pi is not None else lr_v if lr_v is not None else 7e-4
        super().__init__(device, actor, envs, lr=lr, eps=eps, gamma=gamma, num_epochs=num_epochs,
                         num_mini_batch=num_mini_batch, mini_batch_size=mini_batch_size,
                         entropy_coef=entropy_coef, value_loss_coef=value_loss_coef,
                         max_grad_norm=max_grad_norm, normalize_advantages=normalize_advantages,
                         test_every=test_every, num_test_episodes=num_test_episodes,
                         numpy_update=numpy_update, policy_loss_addons=policy_loss_addons)
        if lr_v is not None:
            self.lr_v = float(lr_v)
        if lr_pi is not None:
            self.lr_pi = float(lr_pi)
        self.check_hyperparameters()

    @property
    def lr(self):
        """The learning rate of both optimizers, or None when ``lr_pi`` and ``lr_v`` differ."""
        return self.lr_pi if self.lr_pi == self.lr_v else None

    @lr.setter
    def lr(self, value):
        # None is what a state saved with two different rates holds: they follow it.
        if value is not None:
            self.lr_pi = self.lr_v = float(value)

    @property
    def pi_optimizer(self):
        """The policy optimizer (pytorchrl's attribute)."""
        return self.optimizers["policy"]

    @property
    def v_optimizer(self):
        """The value optimizer (pytorchrl's attribute)."""
        return self.optimizers["value"]

    def parameter_groups(self):
        """``policy``: the policy network (its feature extractor and memory) and the policy
        head; ``value``: the value network (its own extractor and memory, when the actor has
        separate ones) and the value head, as pytorchrl's ``pi_optimizer`` and
        ``v_optimizer``. A feature extractor shared by policy and value is the policy's."""
        actor = self.actor
        if getattr(actor, "twin_net", None) is not None:
            raise ValueError("A2C trains the policy and the value networks with one optimizer each: build the "
                             "actor with algorithm_name='A2C' (its separate MLPs are then two networks, not one "
                             "twin holding both)")
        value_modules = [getattr(actor, n, None) for n in ("value_head", "value_net", "value_memory")]
        value = {id(p) for m in value_modules if m is not None for p in m.parameters()}
        params = list(actor.parameters())
        return {"policy": [p for p in params if id(p) not in value], "value": [p for p in params if id(p) in value]}

    def policy_objective(self, xp, logp, old_logp, adv, grad=False):
        """The policy gradient loss (``losses.actor_critic.a2c_policy_loss``)."""
        return a2c_policy_loss(xp, logp, old_logp, adv, grad=grad)
