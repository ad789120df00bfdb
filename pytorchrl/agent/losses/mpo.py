"""Maximum a Posteriori Policy Optimisation (Abdolmaleki et al., 2018): the E-step's
temperature (the dual of the non-parametric policy's KL constraint) and its action
weights, and the M-step's weighted maximum-likelihood losses with decoupled KL constraints
(mean and covariance of a diagonal Gaussian; one KL for a categorical policy).

Values only, in torch: MPO runs on the reference path (autograd differentiates the losses).
Gaussian quantities are those of the policy before its tanh squashing (``u``, actions
``tanh(u)``): the squashing's Jacobian does not depend on the policy's parameters, so the
weighted likelihood of ``u`` has the gradient of that of the action, and a KL divergence is
the same before and after an invertible map.
"""

import math

import torch

from pytorchrl.agent.accel.sampling import gaussian_log_density

#: Halvings of the bracket of log(eta) in ``temperature``: it spans 8 decades (log 1e8 =
#: 18.4), so 16 halvings leave eta within a relative 3e-4 of the dual's minimiser.
DUAL_ITERATIONS = 16
#: The bracket of eta, relative to the mean spread (max - min) of the Q-values of a state:
#: below it the weights are one-hot, above it uniform, to within float32.
_ETA_RANGE = (1e-4, 1e4)


def _mean_kl_to_prior(q, log_prior, eta):
    """Mean over states of KL(w || prior) of the weights ``w ~ prior exp(q / eta)``."""
    log_w = torch.log_softmax(log_prior + q / eta, dim=1)
    return (log_w.exp() * (log_w - log_prior)).sum(dim=1).mean()


def temperature(q, epsilon, log_prior=None, iterations=DUAL_ITERATIONS):
    """Solve the E-step: the temperature ``eta`` minimising the dual

        g(eta) = eta epsilon + eta mean_s log sum_j prior_sj exp(Q_sj / eta),

    and the weights ``w_sj = prior_sj exp(Q_sj / eta) / Z_s`` of the non-parametric policy.

    g is convex with ``g'(eta) = epsilon - mean_s KL(w_s || prior_s)``, and that KL falls
    as eta grows: the minimiser is the eta whose weights are ``epsilon`` (in mean KL) away
    from the prior, found by bisection on log(eta) in a bracket scaled by the spread of the
    Q-values. The operations are the same whatever the values (no read-back to the host, no
    branch on a value), so the solve may be captured in a CUDA graph. With ``epsilon`` out
    of reach (above the KL of one-hot weights) eta ends at the bracket's low end.

    Parameters
    ----------
    q : tensor (N, M)
        Target Q-values of M actions at each of N states (outside the gradient).
    epsilon : float
        The E-step's KL bound (``dual_constraint``).
    log_prior : tensor (N, M) or None
        Log-probabilities of the actions under the target policy (categorical policies:
        every action); None: M samples of the target policy, each of prior 1 / M.
    iterations : int
        Halvings of the bracket.

    Returns
    -------
    eta : 0-d tensor
    weights : tensor (N, M)
        Rows sum to 1.
    dual : 0-d tensor
        g(eta).
    """
    q = q.detach()
    if log_prior is None:
        log_prior = torch.full_like(q, -math.log(q.shape[1]))
    log_prior = log_prior.detach()
    log_spread = torch.log((q.amax(dim=1) - q.amin(dim=1)).mean().clamp_min(1e-6))
    lo = log_spread + math.log(_ETA_RANGE[0])
    hi = log_spread + math.log(_ETA_RANGE[1])
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        too_peaked = _mean_kl_to_prior(q, log_prior, mid.exp()) > epsilon   # eta below the minimiser
        lo = torch.where(too_peaked, mid, lo)
        hi = torch.where(too_peaked, hi, mid)
    eta = (0.5 * (lo + hi)).exp()
    logits = log_prior + q / eta
    dual = eta * epsilon + eta * torch.logsumexp(logits, dim=1).mean()
    return eta, torch.softmax(logits, dim=1), dual


def gaussian_mstep_loss(mean, log_std, target_mean, target_log_std, samples, weights, alpha_mean, alpha_var):
    """The M-step of a diagonal Gaussian policy with decoupled KL constraints (Abdolmaleki
    et al., 2018b, sec. 4.2): the weighted log-likelihood of the E-step's samples under two
    policies, one with the online mean and the target's standard deviations, one with the
    target's mean and the online standard deviations, less the Lagrangian terms
    ``alpha_mean KL_mean + alpha_var KL_var``:

        loss = -mean_s sum_j w_sj [log N(u_sj; mu, sigma_t) + log N(u_sj; mu_t, sigma)]
               + alpha_mean KL_mean + alpha_var KL_var,
        KL_mean = mean_s KL(N(mu_t, sigma_t) || N(mu, sigma_t)),
        KL_var = mean_s KL(N(mu_t, sigma_t) || N(mu_t, sigma)).

    Parameters
    ----------
    mean, log_std : tensor (N, D)
        The online policy's mean and log standard deviations (with gradients).
    target_mean, target_log_std : tensor (N, D)
        The target policy's, which sampled ``samples`` (outside the gradient).
    samples : tensor (M, N, D)
        The E-step's actions (before the tanh squashing).
    weights : tensor (N, M)
        Their E-step weights (``temperature``).
    alpha_mean, alpha_var : float or 0-d tensor
        The Lagrange multipliers (outside the gradient).

    Returns
    -------
    loss : 0-d tensor
    kl_mean, kl_var : 0-d tensors
        The two KL divergences (with gradients to ``mean``, resp. ``log_std``).
    """
    std_t = target_log_std.exp()
    ll_mean = gaussian_log_density((samples - mean[None]) / std_t[None], target_log_std[None])
    ll_var = gaussian_log_density((samples - target_mean[None]) / log_std.exp()[None], log_std[None])
    loglik = (weights.t()[..., None] * (ll_mean + ll_var)).sum(dim=0).mean()
    kl_mean = (0.5 * ((mean - target_mean) / std_t) ** 2).sum(dim=-1).mean()
    kl_var = (log_std - target_log_std + 0.5 * torch.exp(2.0 * (target_log_std - log_std)) - 0.5).sum(dim=-1).mean()
    return -loglik + alpha_mean * kl_mean + alpha_var * kl_var, kl_mean, kl_var


def categorical_mstep_loss(log_probs, target_log_probs, weights, alpha):
    """The M-step of a categorical policy: the weighted log-likelihood of every action less
    the Lagrangian term of its KL constraint,

        loss = -mean_s sum_a w_sa log pi(a|s) + alpha mean_s KL(pi_t(.|s) || pi(.|s)).

    Parameters
    ----------
    log_probs : tensor (N, A)
        The online policy's log-probabilities (with gradients).
    target_log_probs : tensor (N, A)
        The target policy's (outside the gradient).
    weights : tensor (N, A)
        The E-step weights (``temperature`` with the target policy as prior).
    alpha : float or 0-d tensor
        The Lagrange multiplier (outside the gradient).

    Returns
    -------
    loss, kl : 0-d tensors
    """
    loglik = (weights * log_probs).sum(dim=1).mean()
    kl = (target_log_probs.exp() * (target_log_probs - log_probs)).sum(dim=1).mean()
    return -loglik + alpha * kl, kl


def multiplier_loss(alpha, epsilon, kl):
    """The loss whose gradient ``epsilon - KL`` moves a Lagrange multiplier of the M-step by
    gradient descent: up while the KL exceeds its bound ``epsilon``, down below it.

    Parameters
    ----------
    alpha : 0-d tensor
        The multiplier (a parameter).
    epsilon : float
        The KL bound.
    kl : 0-d tensor
        The KL divergence (outside the gradient).
    """
    return alpha * (epsilon - kl.detach())


__all__ = ["DUAL_ITERATIONS", "temperature", "gaussian_mstep_loss", "categorical_mstep_loss", "multiplier_loss"]
