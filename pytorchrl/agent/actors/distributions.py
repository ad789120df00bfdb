"""Policy heads: map features to actions, log-probabilities and entropies.

They are written with plain tensor operations instead of torch.distributions objects,
because building a distribution object costs more than the whole network forward pass on
the acting path (see ANCHORS.md).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from pytorchrl.agent.losses import sac
from pytorchrl.agent.accel.sampling import gaussian_entropy, gaussian_log_density
from pytorchrl.agent.accel.xp import TORCH


class CategoricalHead(nn.Module):
    """Categorical policy over ``num_actions`` discrete actions.

    Parameters
    ----------
    num_inputs : int
        Size of the feature vector.
    num_actions : int
        Number of discrete actions.
    """

    def __init__(self, num_inputs, num_actions):
        super().__init__()
        self.linear = nn.Linear(num_inputs, num_actions)

    def sample(self, features, deterministic=False):
        """Return (action of shape (B, 1), log-probability of shape (B, 1))."""
        logits = self.linear(features)
        log_probs = F.log_softmax(logits, dim=-1)
        if deterministic:
            action = log_probs.argmax(dim=-1, keepdim=True)
        else:
            action = torch.multinomial(log_probs.exp(), 1)
        return action, log_probs.gather(-1, action)

    def log_prob_entropy(self, features, action, entropy_grad=True):
        """Return (log-probability (B, 1), entropy (B, 1)) of ``action`` (B, 1).

        ``entropy_grad=False`` leaves the entropy out of the autograd graph.
        """
        log_probs = F.log_softmax(self.linear(features), dim=-1)
        lp = log_probs if entropy_grad else log_probs.detach()
        entropy = -(lp.exp() * lp).sum(-1, keepdim=True)
        return log_probs.gather(-1, action.long()), entropy

    def distribution(self, features):
        """The policy at ``features`` as a ``torch.distributions.Categorical`` (batch shape
        (B,)), for code that works on distributions (KL divergences: the policy-loss
        add-ons). Gradients flow to the head and the features."""
        return torch.distributions.Categorical(logits=self.linear(features), validate_args=False)


class DiagGaussianHead(nn.Module):
    """Gaussian policy with a state-independent diagonal standard deviation.

    Parameters
    ----------
    num_inputs : int
        Size of the feature vector.
    num_outputs : int
        Dimension of the action.
    log_std_init : float
        Initial log standard deviation.
    """

    def __init__(self, num_inputs, num_outputs, log_std_init=0.0):
        super().__init__()
        self.linear = nn.Linear(num_inputs, num_outputs)
        self.log_std = nn.Parameter(torch.full((num_outputs,), float(log_std_init)))

    def _log_prob(self, mean, action):
        z = (action - mean) * torch.exp(-self.log_std)
        return gaussian_log_density(z, self.log_std)

    def sample(self, features, deterministic=False):
        """Return (action (B, D), log-probability (B, 1))."""
        mean = self.linear(features)
        if deterministic:
            action = mean
        else:
            action = mean + torch.randn_like(mean) * self.log_std.exp()
        return action, self._log_prob(mean, action)

    def log_prob_entropy(self, features, action, entropy_grad=True):
        """Return (log-probability (B, 1), entropy (B, 1)) of ``action`` (B, D)."""
        mean = self.linear(features)
        log_std = self.log_std if entropy_grad else self.log_std.detach()
        entropy = gaussian_entropy(log_std).expand(mean.shape[0], 1)
        return self._log_prob(mean, action), entropy

    def distribution(self, features):
        """The policy at ``features`` as a diagonal Normal whose action dimensions form one
        event (``Independent(Normal, 1)``: batch shape (B,), as the log-probabilities of
        ``log_prob_entropy`` sum over them). Gradients flow to the mean, the log standard
        deviation and the features."""
        mean = self.linear(features)
        normal = torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)
        return torch.distributions.Independent(normal, 1, validate_args=False)


class MultiCategorical(torch.distributions.Distribution):
    """Independent categorical distributions, one per component of a MultiDiscrete action:
    one event (B, K) of integer actions whose log-probability and entropy are the sums
    over the components. Its KL divergence to another of the same components is the sum
    of theirs (registered with ``torch.distributions.kl``).

    Parameters
    ----------
    logits : list of torch.Tensor
        One (B, n_k) tensor of logits per component.
    """

    arg_constraints = {}
    has_enumerate_support = False

    def __init__(self, logits):
        self.components = [torch.distributions.Categorical(logits=lg, validate_args=False) for lg in logits]
        super().__init__(batch_shape=logits[0].shape[:-1], event_shape=torch.Size([len(logits)]),
                         validate_args=False)

    def sample(self, sample_shape=torch.Size()):
        return torch.stack([c.sample(sample_shape) for c in self.components], dim=-1)

    def log_prob(self, value):
        return sum(c.log_prob(value[..., k].long()) for k, c in enumerate(self.components))

    def entropy(self):
        return sum(c.entropy() for c in self.components)

    @property
    def mode(self):
        return torch.stack([c.probs.argmax(-1) for c in self.components], dim=-1)


@torch.distributions.kl.register_kl(MultiCategorical, MultiCategorical)
def _kl_multi_categorical(p, q):
    return sum(torch.distributions.kl_divergence(a, b) for a, b in zip(p.components, q.components))


class MultiCategoricalHead(nn.Module):
    """Independent categorical policies over the components of a MultiDiscrete action:
    ``nvec[k]`` choices for component ``k``. Log-probabilities and entropies are summed
    over the components (the components are independent given the observation).

    Parameters
    ----------
    num_inputs : int
        Size of the feature vector.
    nvec : sequence of int
        Number of choices of every component (a flattened ``MultiDiscrete.nvec``).
    """

    def __init__(self, num_inputs, nvec):
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        # One linear layer for all components: their logits are cut out of its output.
        self.linear = nn.Linear(num_inputs, sum(self.nvec))

    def _log_probs(self, features):
        return [F.log_softmax(lg, dim=-1) for lg in self.linear(features).split(self.nvec, dim=-1)]

    def sample(self, features, deterministic=False):
        """Return (action (B, K) int64, log-probability (B, 1))."""
        actions, logp = [], 0
        for lp in self._log_probs(features):
            a = lp.argmax(dim=-1, keepdim=True) if deterministic else torch.multinomial(lp.exp(), 1)
            actions.append(a)
            logp = logp + lp.gather(-1, a)
        return torch.cat(actions, dim=-1), logp

    def log_prob_entropy(self, features, action, entropy_grad=True):
        """Return (log-probability (B, 1), entropy (B, 1)) of ``action`` (B, K), summed
        over the components; ``entropy_grad=False`` leaves the entropy out of the graph."""
        action = action.long()
        logp = entropy = 0
        for k, lp in enumerate(self._log_probs(features)):
            logp = logp + lp.gather(-1, action[:, k:k + 1])
            e = lp if entropy_grad else lp.detach()
            entropy = entropy - (e.exp() * e).sum(-1, keepdim=True)
        return logp, entropy

    def distribution(self, features):
        """The policy at ``features`` as a ``MultiCategorical`` (batch shape (B,))."""
        return MultiCategorical(list(self.linear(features).split(self.nvec, dim=-1)))


class BernoulliHead(nn.Module):
    """Independent Bernoulli policies over the ``num_outputs`` bits of a MultiBinary
    action; log-probabilities and entropies are summed over the bits.

    Parameters
    ----------
    num_inputs : int
        Size of the feature vector.
    num_outputs : int
        Number of bits (a flattened ``MultiBinary.n``).
    """

    def __init__(self, num_inputs, num_outputs):
        super().__init__()
        self.linear = nn.Linear(num_inputs, num_outputs)

    @staticmethod
    def _log_prob(logits, action):
        # log p(a) = -BCE(logits, a): softplus form, stable for large logits.
        return -F.binary_cross_entropy_with_logits(logits, action.float(), reduction="none").sum(-1, keepdim=True)

    def sample(self, features, deterministic=False):
        """Return (action (B, N) float32 of 0/1, log-probability (B, 1))."""
        logits = self.linear(features)
        if deterministic:
            action = (logits > 0).float()
        else:
            action = torch.bernoulli(torch.sigmoid(logits))
        return action, self._log_prob(logits, action)

    def log_prob_entropy(self, features, action, entropy_grad=True):
        """Return (log-probability (B, 1), entropy (B, 1)) of ``action`` (B, N)."""
        logits = self.linear(features)
        lg = logits if entropy_grad else logits.detach()
        # H = softplus(l) - sigmoid(l) * l for a Bernoulli of logit l.
        entropy = (F.softplus(lg) - torch.sigmoid(lg) * lg).sum(-1, keepdim=True)
        return self._log_prob(logits, action), entropy

    def distribution(self, features):
        """The policy at ``features`` as ``Independent(Bernoulli, 1)`` (batch shape (B,))."""
        bern = torch.distributions.Bernoulli(logits=self.linear(features), validate_args=False)
        return torch.distributions.Independent(bern, 1, validate_args=False)


class StateDependentNoiseHead(nn.Module):
    """Generalized state-dependent exploration (gSDE; Raffin et al., 2021) of a tanh-squashed
    Gaussian policy, as Stable-Baselines3's SAC defines it.

    The action before the squash is ``u = mean(latent) + latent @ W``: the exploration
    weights ``W`` (latent_dim, action_dim) are drawn from N(0, std) and kept for many steps,
    so the noise is a smooth function of the state instead of independent at every step.
    Given the latent features, ``u`` is Gaussian with the variance ``(latent^2) @ std^2``
    (+ ``epsilon``). Gradients flow through the latent features into the network below
    (SB3's SAC learns them: ``learn_features=True``) and through ``std`` into ``log_std``.

    Parameters
    ----------
    latent_dim : int
        Size of the latent features (the policy network's last hidden layer).
    action_dim : int
        Dimension of the action.
    log_std_init : float
        Initial value of every entry of ``log_std``.
    full_std : bool
        True: one log standard deviation per (latent feature, action dimension) pair;
        False: one per latent feature, shared by the action dimensions.
    use_expln : bool
        Map ``log_std`` to the standard deviation with ``expln`` (``exp`` below 0,
        ``log1p(x) + 1`` above: it grows slowly) instead of ``exp``.
    clip_mean : float
        The mean is clipped to [-clip_mean, clip_mean] (a hard tanh) before the squash;
        0: not clipped.
    epsilon : float
        Added to the variance (and to ``expln``'s argument) for numerical safety.
    """

    def __init__(self, latent_dim, action_dim, log_std_init=-3.0, full_std=True, use_expln=False, clip_mean=2.0,
                 epsilon=1e-6):
        super().__init__()
        self.latent_dim, self.action_dim = int(latent_dim), int(action_dim)
        self.full_std, self.use_expln = bool(full_std), bool(use_expln)
        self.clip_mean, self.epsilon = float(clip_mean), float(epsilon)
        self.mu = nn.Linear(self.latent_dim, self.action_dim)
        columns = self.action_dim if self.full_std else 1
        self.log_std = nn.Parameter(torch.full((self.latent_dim, columns), float(log_std_init)))

    def std(self):
        """Standard deviations (latent_dim, action_dim) of the exploration weights."""
        log_std = self.log_std
        if self.use_expln:
            # torch.where evaluates both branches: each reads a clamped input so that
            # neither produces an infinite value (or gradient) on the side it does not serve.
            below = torch.exp(log_std.clamp(max=0.0))
            above = torch.log1p(log_std.clamp(min=0.0) + self.epsilon) + 1.0
            std = torch.where(log_std <= 0, below, above)
        else:
            std = torch.exp(log_std)
        return std if self.full_std else std.expand(self.latent_dim, self.action_dim)

    def mean(self, latent):
        """Mean (B, action_dim) of the Gaussian before the squash."""
        m = self.mu(latent)
        return F.hardtanh(m, -self.clip_mean, self.clip_mean) if self.clip_mean > 0 else m

    def sample(self, latent, eps):
        """A squashed sample and its log-probability.

        Parameters
        ----------
        latent : torch.Tensor
            Latent features (B, latent_dim).
        eps : torch.Tensor
            Standard normal draws of the exploration weights: (latent_dim, action_dim),
            one matrix for every row, or (B, latent_dim, action_dim), one per row (an
            environment each). The weights are ``eps * std()``: gradients reach
            ``log_std`` through them (reparametrization).

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            The action ``tanh(u)`` (B, action_dim) in [-1, 1] and its log-probability
            (B, 1) with the tanh correction.
        """
        std = self.std()
        mean = self.mean(latent)
        weights = eps * std
        noise = latent @ weights if weights.dim() == 2 else torch.bmm(latent.unsqueeze(1), weights).squeeze(1)
        u = mean + noise
        return torch.tanh(u), self.log_prob_unsquashed(latent, mean, std, u) - sac.tanh_log_det(TORCH, u)

    def log_prob_unsquashed(self, latent, mean, std, u):
        """Log-density (B, 1) of pre-squash actions ``u`` (B, action_dim) under the Gaussian
        of mean ``mean`` and variance ``(latent^2) @ std^2 + epsilon``."""
        log_sigma = 0.5 * torch.log((latent * latent) @ (std * std) + self.epsilon)
        return gaussian_log_density((u - mean) * torch.exp(-log_sigma), log_sigma)
