"""Soft Actor-Critic (Haarnoja et al., 2018): the tanh-squashed Gaussian policy of Box
actions, the soft target, and the policy and entropy-coefficient losses of Box and Discrete
actions (Christodoulou, 2019).

Gradients are with respect to the policy network's output (mean and raw log-std), the
critics' outputs and log(alpha), per sample of a mini-batch of N. Discrete SAC runs on the
reference path only (autograd differentiates its losses).
"""

import math

from pytorchrl.agent.losses.q_learning import bellman_target
from pytorchrl.agent.accel.sampling import gaussian_log_density

#: Range of the policy's log standard deviation.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_LOG2 = math.log(2.0)


def squashed_gaussian(xp, out, noise):
    """A reparametrized sample ``a = tanh(mean + std noise)`` of the policy whose output is
    ``out`` (N, 2 D: means, then raw log-stds clipped to [-20, 2]), with its
    log-probability ``log N(u) - sum log(1 - tanh(u)^2)`` (the latter written stably).

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH`` (differentiable: the reference path back-propagates through it).
    out : array (N, 2 D)
        The policy network's output.
    noise : array (N, D)
        Standard normal draws.

    Returns
    -------
    action : array (N, D)
        In [-1, 1].
    logp : array (N, 1)
    cache : tuple
        What ``squashed_gaussian_grad`` needs.
    """
    d = noise.shape[1]
    mean, raw = out[:, :d], out[:, d:]
    log_std = xp.clip(raw, LOG_STD_MIN, LOG_STD_MAX)
    std = xp.exp(log_std)
    u = mean + std * noise
    a = xp.tanh(u)
    z = (u - mean) / std
    logp = gaussian_log_density(z, log_std) - tanh_log_det(xp, u)
    return a, logp, (raw, std, noise, a)


def tanh_log_det(xp, u):
    """``sum_d log(1 - tanh(u)^2)`` (N, 1) of pre-squash actions ``u`` (N, D), written
    stably as ``2 (log 2 - u - softplus(-2 u))``: what squashing a Gaussian sample with
    tanh subtracts from its log-density."""
    return (2.0 * (_LOG2 - u - xp.softplus(-2.0 * u))).sum(axis=1, keepdims=True)


def squashed_gaussian_grad(xp, cache, g_action, g_logp):
    """d loss / d out of ``squashed_gaussian``'s output given d loss / d action (N, D) and
    d loss / d logp (N, 1) (or a number): with d logp / d u = 2 tanh(u) and
    d u / d log_std = std noise, where the raw log-std lies inside its clipping range."""
    raw, std, noise, a = cache
    g_u = g_action * (1.0 - a * a) + (2.0 * g_logp) * a
    g_log_std = g_u * noise * std - g_logp
    g_log_std = g_log_std * ((raw >= LOG_STD_MIN) & (raw <= LOG_STD_MAX))
    return xp.concatenate([g_u, g_log_std])


def soft_target(rew, discount, q_next, logp_next, alpha, probs_next=None):
    """SAC's target ``r + discount V(s')`` with the soft value ``V(s') = min_k Q_target(s',
    a') - alpha log pi(a'|s')``.

    Box actions: ``q_next`` (N, 1), the target critics' minimum at the sampled next actions,
    and ``logp_next`` (N, 1) their log-probability. Discrete actions (``probs_next`` (N, A)
    given): ``q_next`` and ``logp_next`` (N, A) over every action, and the value is their
    exact expectation under the policy's probabilities ``probs_next``.
    """
    value = q_next - alpha * logp_next
    if probs_next is not None:
        value = (probs_next * value).sum(axis=-1, keepdims=True)
    return bellman_target(rew, discount, value)


def _alpha_loss(log_alpha, entropy, target_entropy):
    """The entropy-coefficient loss ``log_alpha mean(H - target)`` and its gradient
    ``mean(H - target)`` with respect to ``log_alpha`` (``entropy`` outside the gradient)."""
    gap = (entropy - target_entropy).mean()
    return log_alpha * gap, gap


def policy_and_alpha_losses(xp, q_pi, logp_pi, log_alpha, alpha, target_entropy, grad=True):
    """SAC's policy loss ``mean(alpha logp - min_k Q_k(s, a_pi))`` and entropy-coefficient
    loss ``log_alpha mean(H - target)`` with the entropy estimate ``H = -logp`` (outside
    the gradient).

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH``.
    q_pi : array (K, N, 1)
        The critics' Q-values at the policy's actions.
    logp_pi : array (N, 1)
        Their log-probabilities.
    log_alpha : 0-d array
        log(alpha) (a parameter: the alpha loss trains it).
    alpha : float or 0-d array
        exp(log_alpha), outside the gradient.
    target_entropy : float
        The entropy the tuning aims at.
    grad : bool
        Also return the gradients.

    Returns
    -------
    pi_loss, alpha_loss : 0-d arrays
    entropy : array (N, 1)
    grads : tuple or None
        ``(g_logp, g_q_pi_min, best, g_log_alpha)``: d pi_loss / d logp (alpha / N),
        d pi_loss / d min_k Q_k (-1 / N, reaching the critic ``best`` (N,) of each sample's
        minimum) and d alpha_loss / d log_alpha.
    """
    entropy = -xp.stop(logp_pi)
    pi_loss = (alpha * logp_pi - xp.amin(q_pi, axis=0)).mean()
    alpha_loss, gap = _alpha_loss(log_alpha, entropy, target_entropy)
    if not grad:
        return pi_loss, alpha_loss, entropy, None
    n = logp_pi.shape[0]
    best = q_pi.argmin(axis=0)[:, 0]
    return pi_loss, alpha_loss, entropy, (alpha * (1.0 / n), -1.0 / n, best, gap)


def discrete_policy_and_alpha_losses(xp, q_all, log_probs, probs, log_alpha, alpha, target_entropy):
    """Discrete SAC's policy loss ``mean_s sum_a pi(a|s) (alpha log pi(a|s) - min_k Q_k(s, a))``
    (the expectation over the actions computed exactly, the critics outside the gradient)
    and the entropy-coefficient loss of ``policy_and_alpha_losses`` with the exact entropy
    ``H = -sum_a pi log pi`` (outside the gradient). Values only: the reference path
    differentiates them.

    Parameters
    ----------
    xp : namespace
        ``TORCH`` (or ``NUMPY``).
    q_all : array (K, N, A)
        The critics' Q-values of every action.
    log_probs, probs : array (N, A)
        The policy's log-probabilities and probabilities.
    log_alpha, alpha, target_entropy
        As in ``policy_and_alpha_losses``.

    Returns
    -------
    pi_loss, alpha_loss : 0-d arrays
    entropy : array (N, 1)
    """
    q_pi = xp.amin(xp.stop(q_all), axis=0)
    pi_loss = (probs * (alpha * log_probs - q_pi)).sum(axis=-1).mean()
    entropy = -xp.stop((probs * log_probs).sum(axis=-1, keepdims=True))
    alpha_loss, _ = _alpha_loss(log_alpha, entropy, target_entropy)
    return pi_loss, alpha_loss, entropy


__all__ = ["LOG_STD_MIN", "LOG_STD_MAX", "squashed_gaussian", "squashed_gaussian_grad", "tanh_log_det",
           "soft_target", "policy_and_alpha_losses", "discrete_policy_and_alpha_losses"]
