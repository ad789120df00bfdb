"""Q-learning losses: the one-step Bellman target, DQN's TD loss, its targets and dueling
heads, and the critic loss of the actor-critics (SAC, DDPG, TD3).

Gradients are with respect to the Q-values the networks output, per element of the
mini-batch (the 1/N of the mean included).
"""


def bellman_target(rew, discount, next_value):
    """The Bellman target ``r + discount * V(s')``: written once for every algorithm, on
    numpy arrays or torch tensors alike (DQN's, SAC's and TD3's targets, the TD residuals
    of GAE and V-trace).

    ``discount`` carries the episode end: the replay's ``DISCOUNT`` is gamma^n, 0 after a
    termination; the on-policy storages pass gamma and a ``next_value`` already zero after
    a termination (``storages.on_policy.next_values``).
    """
    return rew + discount * next_value


def dueling_q(xp, out):
    """Q-values of a dueling head's output (..., 1 + K): ``V + A - mean(A)`` (Wang et al., 2016)."""
    adv = out[..., 1:]
    return out[..., :1] + adv - adv.mean(axis=-1, keepdims=True)


def next_values(xp, q_target, q_online=None):
    """Values (N, 1) of the next observations from the target network's Q-values
    ``q_target`` (N, K): double Q-learning's ``q_target[argmax q_online]`` when the online
    network's Q-values ``q_online`` (N, K) are given, else DQN's ``max q_target``."""
    if q_online is None:
        return xp.amax(q_target, axis=1)
    return xp.take(q_target, xp.argmax(q_online))


def td_loss(xp, q, target, weights=None, kind="mse", grad=True):
    """DQN's loss: the mean over all elements of the squared ("mse") or Huber ("huber",
    smooth L1 with beta 1) TD error ``q - target``, each weighted by ``weights`` (prioritized
    replay's importance weights, broadcast) when given.

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH``.
    q, target : array
        Q-values of the actions taken and their targets (same shapes: (N, 1), or (T, N, 1)
        for sequences).
    weights : array (N, 1) or None
        Importance-sampling weights.
    kind : str
        "mse" or "huber".
    grad : bool
        Also return the gradient with respect to ``q``.

    Returns
    -------
    loss : 0-d array
    td : array
        The TD errors ``q - target``.
    g_q : array or None
        d loss / d q.
    """
    td = q - target
    if kind == "huber":
        abs_td = xp.abs(td)
        small = abs_td < 1.0
        per_sample = xp.where(small, 0.5 * td * td, abs_td - 0.5)
        g = xp.where(small, td, xp.sign(td)) if grad else None
    else:
        per_sample = td * td
        g = 2.0 * td if grad else None
    if weights is not None:
        per_sample = per_sample * weights
        g = g * weights if grad else None
    loss = per_sample.mean()
    return loss, td, (g / xp.size(td) if grad else None)


def critic_loss(xp, q, target, weights=None, scale=1.0, grad=True):
    """The loss of ``K`` critics fitted to one target: ``scale * sum_k mean(w (q_k - y)^2)``
    (SAC's scale is 1/2, DDPG's and TD3's 1).

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH``.
    q : array (K, N, 1)
        Each critic's Q-values of the actions taken.
    target : array (N, 1)
        The targets y.
    weights : array (N, 1) or None
        Importance-sampling weights.
    scale : float
        Factor of the sum.
    grad : bool
        Also return the gradient with respect to ``q``.

    Returns
    -------
    loss : 0-d array
    td : array (K, N, 1)
        The TD errors ``q - y``.
    g_q : array (K, N, 1) or None
        d loss / d q = 2 scale w td / N.
    """
    td = q - target[None]
    sq = td * td if weights is None else td * td * weights
    loss = scale * sq.mean(axis=(1, 2)).sum()
    if not grad:
        return loss, td, None
    n = q.shape[1]
    return loss, td, (td * (2.0 * scale / n) if weights is None else td * (weights * (2.0 * scale / n)))


__all__ = ["bellman_target", "dueling_q", "next_values", "td_loss", "critic_loss"]
