"""N-step returns of contiguous steps, on the collector (as in Ape-X): the transitions of a
stretch of vectorized steps, each window ending at an episode end (see
``pytorchrl.agent.storages.replay``)."""

import numpy as np

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW


def nstep_transitions(obs, nxt, act, rew, term, trunc, gamma, n):
    """n-step transitions of a contiguous stretch of L vectorized steps.

    Parameters
    ----------
    obs : np.ndarray
        (L, N, *obs_shape): observation each step acted from.
    nxt : np.ndarray
        (L, N, *obs_shape): observation after each step (the final observation where the
        episode ended in that step).
    act : np.ndarray
        (L, N, *act_shape): actions.
    rew, term, trunc : np.ndarray
        (L, N): rewards and episode ends (terminated, truncated by a time limit).
    gamma : float
        Discount factor.
    n : int
        Steps per return.

    Returns
    -------
    dict
        Transitions of the first ``L - n + 1`` steps (each has its whole window inside
        the stretch), flattened step-major to (M, ...): ``OBS``, ``ACT``, ``REW`` (the
        discounted sum of up to n rewards, stopping after an episode end), ``OBS2``
        (observation after the last of those steps), ``DISCOUNT`` (gamma^k for k steps,
        0 if the episode terminated).
    """
    L, N = rew.shape
    E = L - n + 1
    if E <= 0:
        return None
    if n == 1:
        # One-step transitions (the default replay): each step is its own window. Same
        # values as the general case, without its window bookkeeping, which costs more
        # than the step itself when a rollout is one step (SAC's update_every=1).
        flat = L * N
        return {OBS: obs.reshape(flat, *obs.shape[2:]), ACT: act.reshape(flat, *act.shape[2:]),
                REW: rew.astype(np.float32).reshape(flat, 1), OBS2: nxt.reshape(flat, *nxt.shape[2:]),
                DISCOUNT: np.where(term > 0, 0.0, gamma).astype(np.float32).reshape(flat, 1)}
    ret, discount, last = nstep_windows(rew, term, trunc, gamma, n, np.arange(E))
    env = np.arange(N)[None, :]
    flat = E * N
    return {OBS: obs[:E].reshape(flat, *obs.shape[2:]), ACT: act[:E].reshape(flat, *act.shape[2:]),
            REW: ret.astype(np.float32).reshape(flat, 1), OBS2: nxt[last, env].reshape(flat, *nxt.shape[2:]),
            DISCOUNT: discount.astype(np.float32).reshape(flat, 1)}


def nstep_windows(rew, term, trunc, gamma, n, starts):
    """n-step windows of a contiguous stretch of L vectorized steps.

    A window starts at a step of ``starts`` and holds up to n steps: it stops after an
    episode end (terminated or truncated) and at the end of the stretch.

    Parameters
    ----------
    rew, term, trunc : np.ndarray
        (L, N): rewards and episode ends (terminated, truncated by a time limit).
    gamma : float
        Discount factor.
    n : int
        Most steps per window.
    starts : np.ndarray
        (E,) first step of each window, in [0, L).

    Returns
    -------
    ret : np.ndarray
        (E, N) float64: the discounted sum of the window's rewards.
    discount : np.ndarray
        (E, N) float64: factor of the bootstrap value, gamma^k for a window of k steps, 0
        when the episode terminated in it.
    last : np.ndarray
        (E, N) int: the window's last step (whose next observation bootstraps it).
    """
    L, N = rew.shape
    E = len(starts)
    ret = np.zeros((E, N), dtype=np.float64)
    alive = np.ones((E, N), dtype=bool)
    terminated = np.zeros((E, N), dtype=bool)
    last = np.repeat(starts[:, None], N, axis=1)
    for j in range(n):
        idx = starts + j
        alive &= (idx < L)[:, None]
        idx = np.minimum(idx, L - 1)
        ret += np.where(alive, (gamma ** j) * rew[idx], 0.0)
        last = np.where(alive, idx[:, None], last)
        terminated |= alive & (term[idx] > 0)
        alive &= ~((term[idx] > 0) | (trunc[idx] > 0))
    steps = last - starts[:, None] + 1
    return ret, np.where(terminated, 0.0, gamma ** steps), last
