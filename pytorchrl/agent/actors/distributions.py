"""Policy heads: map features to actions, log-probabilities and entropies.

They are written with plain tensor operations instead of torch.distributions objects,
because building a distribution object costs more than the whole network forward pass on
the acting path (see ANCHORS.md).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

_LOG_2PI = math.log(2 * math.pi)


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
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1, keepdim=True)

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
        entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum().expand(mean.shape[0], 1)
        return self._log_prob(mean, action), entropy

    def distribution(self, features):
        """The policy at ``features`` as a diagonal Normal whose action dimensions form one
        event (``Independent(Normal, 1)``: batch shape (B,), as the log-probabilities of
        ``log_prob_entropy`` sum over them). Gradients flow to the mean, the log standard
        deviation and the features."""
        mean = self.linear(features)
        normal = torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)
        return torch.distributions.Independent(normal, 1, validate_args=False)
