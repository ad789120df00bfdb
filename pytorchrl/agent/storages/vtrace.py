"""V-trace: on-policy rollouts whose targets correct for the policy lag of their collector.

With asynchronous collectors (IMPALA, Espeholt et al. 2018) a rollout reaches the learner
after the learner's policy has moved on: it was acted by a behaviour policy ``mu`` older
than the current policy ``pi``. ``VTraceBuffer`` records rollouts like the other on-policy
storages (the behaviour log-probabilities are among the algorithm's acting extras) and,
on the learner, just before training on them, evaluates the current actor on the whole
rollout (log-probabilities of the actions taken, values of every observation, of the
observation after the last step and of the final observations of truncated episodes) and
computes

- the truncated importance weights ``rho_t = min(rho_bar, pi/mu)`` and
  ``c_t = lambda * min(c_bar, pi/mu)``;
- the V-trace value targets ``v_s`` by the backward recursion
  ``v_s - V(x_s) = rho_s (r_s + gamma V(x_{s+1}) - V(x_s)) + gamma c_s (v_{s+1} - V(x_{s+1}))``;
- the policy-gradient advantages ``min(rho_pg_bar, pi/mu) (r_s + gamma v_{s+1} - V(x_s))``.

They go to the batch keys ``RET`` and ``ADV`` that the PPO and A2C losses read, so IMPALA
is A2C trained from this storage. Episode ends are handled as in ``GAEBuffer``: nothing is
bootstrapped after a termination; after a truncation (a time limit) and at the end of a
rollout the current critic's value of the final or last observation is.

Recurrent actors: a rollout also carries ``RHS``, the actor's state at its start (computed
by the behaviour policy, as R2D2 and IMPALA store it). The learner re-runs the current
actor's memory over the whole rollout from that state, zeroing it after each episode end
as the collector did (``OnPolicyActor.evaluate_sequence``); the observation after the last
step and the final observations of truncated episodes are valued from the states that
reached them. Mini-batches are then sequences, as in ``VanillaOnPolicyBuffer``: subsets of
the environments with all their steps.
"""

import math

import numpy as np
import torch

from pytorchrl import ACT, ADV, DONE, IVAL, LOGP, OBS, RET, REW, RHS, TERM, TRUNC, VAL
from pytorchrl.agent.losses.q_learning import bellman_target
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.storages.on_policy import VanillaOnPolicyBuffer, next_values, reverse_scan

#: Rollout keys of ``VTraceBuffer.get_data`` besides the per-step ones: the observation
#: after the last step (N, *obs_shape), the final observations of the truncated episodes
#: (M, *obs_shape) and where each of them ended, as (step, env index) rows (M, 2).
NEXT_OBS = "next_obs"
TRUNC_OBS = "trunc_obs"
TRUNC_INDEX = "trunc_index"

#: Thresholds of ``VTraceBuffer`` (None: that ratio is not truncated).
_THRESHOLDS = ("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold")

#: Log-ratio margin within which a ratio above ``clip_rho_threshold`` counts as rounding,
#: not as truncated, in the ``VTraceClippedRho`` statistic (0.01%).
_ROUNDING = 1e-4


def _truncated(ratio, threshold):
    return ratio if threshold is None else ratio.clamp(max=threshold)


def compute_vtrace(rew, val, term, trunc, trunc_val, log_ratio, gamma, vtrace_lambda=1.0,
                   clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, clip_c_threshold=1.0):
    """V-trace value targets and policy-gradient advantages of one rollout.

    Parameters
    ----------
    rew, term, trunc, trunc_val : torch.Tensor
        Shape (T, N, 1): rewards, termination and truncation flags (0/1) after each step,
        and the value of the final observation where the step was truncated (else 0).
    val : torch.Tensor
        Shape (T + 1, N, 1): value of every observation under the current critic, the last
        one being the observation reached after the final step (the bootstrap).
    log_ratio : torch.Tensor
        Shape (T, N, 1): log pi(a_t | x_t) - log mu(a_t | x_t), current over behaviour policy.
    gamma : float
        Discount factor.
    vtrace_lambda : float
        Scale of the traces ``c_t`` (the paper's lambda; 1: plain V-trace).
    clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold : float or None
        Truncation levels rho_bar (value targets), rho_bar of the policy-gradient
        advantages and c_bar (traces); None leaves that ratio untruncated.

    Returns
    -------
    adv, vs : torch.Tensor
        Policy-gradient advantages and value targets ``v_s``, shape (T, N, 1).
    """
    ratio = log_ratio.exp()
    rho = _truncated(ratio, clip_rho_threshold)
    c = vtrace_lambda * _truncated(ratio, clip_c_threshold)
    not_ended = 1.0 - torch.maximum(term, trunc)
    delta = rho * (bellman_target(rew, gamma, next_values(val[1:], not_ended, trunc, trunc_val)) - val[:-1])
    # Traces stop at episode ends: what follows belongs to another episode.
    vs = val[:-1] + reverse_scan(delta, gamma * c * not_ended)
    # v_{s+1} of the advantage: the next target while the episode goes on; past the last
    # step and at a truncation nothing more is known than the critic's value.
    next_vs = next_values(torch.cat([vs[1:], val[-1:]]), not_ended, trunc, trunc_val)
    adv = _truncated(ratio, clip_pg_rho_threshold) * (bellman_target(rew, gamma, next_vs) - val[:-1])
    return adv, vs


class VTraceBuffer(VanillaOnPolicyBuffer):
    """Rollout storage with V-trace targets computed by the learner's current actor.

    The mini-batches hold ``RET`` (the V-trace targets ``v_s``) and ``ADV`` (the
    policy-gradient advantages), and, for PPO's ratio and value clipping, the current
    policy's log-probabilities (``LOGP``) and values (``VAL``) of the rollout before the
    update: the off-policy correction is in the advantages already. The training metrics
    gain ``VTraceAbsLogRatio`` (mean |log pi/mu| of the rollouts trained on: 0 on-policy)
    and ``VTraceClippedRho`` (fraction of their steps whose ratio exceeds
    ``clip_rho_threshold``).

    Parameters
    ----------
    device, actor, algorithm, envs, size
        As in ``VanillaOnPolicyBuffer`` (the algorithm must record the behaviour
        log-probabilities, ``LOGP``, among its acting extras, as PPO and A2C do). A
        recurrent actor gets sequence mini-batches (``num_mini_batch`` at most the
        number of environments of a collector) and must offer ``evaluate_sequence``
        (``OnPolicyActor`` does).
    vtrace_lambda : float
        Scale of the traces c_t, in [0, 1] (the paper's lambda; 1: plain V-trace).
    clip_rho_threshold : float or None
        rho_bar: truncation of the importance ratios of the value targets (None: none).
    clip_pg_rho_threshold : float or None
        Truncation of the importance ratios of the policy-gradient advantages (None: none).
    clip_c_threshold : float or None
        c_bar: truncation of the ratios of the traces (None: none).
    """

    def __init__(self, device, actor, algorithm, envs, size, vtrace_lambda=1.0, clip_rho_threshold=1.0,
                 clip_pg_rho_threshold=1.0, clip_c_threshold=1.0):
        if LOGP not in algorithm.acting_extras:
            raise ValueError(f"VTraceBuffer needs the behaviour log-probabilities ({LOGP!r}) among the acting "
                             f"extras of {type(algorithm).__name__}, which records {algorithm.acting_extras}")
        if IVAL in algorithm.acting_extras:
            raise ValueError(f"VTraceBuffer computes no intrinsic returns, which {type(algorithm).__name__} trains "
                             f"on; use GAEBuffer")
        super().__init__(device, actor, algorithm, envs, size)
        self.vtrace_lambda = float(vtrace_lambda)
        self.check_parameter_value("vtrace_lambda", self.vtrace_lambda)
        for name, value in zip(_THRESHOLDS, (clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold)):
            value = None if value is None else float(value)
            self.check_parameter_value(name, value)
            setattr(self, name, value)
        self._stats = {}

    @classmethod
    def create_factory(cls, size, vtrace_lambda=1.0, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                       clip_c_threshold=1.0):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, vtrace_lambda=vtrace_lambda, clip_rho_threshold=clip_rho_threshold,
                                clip_pg_rho_threshold=clip_pg_rho_threshold, clip_c_threshold=clip_c_threshold)

    @property
    def hyperparameters(self):
        return {"size": self.size, "vtrace_lambda": self.vtrace_lambda,
                **{name: getattr(self, name) for name in _THRESHOLDS}}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name == "vtrace_lambda" and not 0.0 <= value <= 1.0:
            raise ValueError(f"vtrace_lambda must be in [0, 1], got {value}")
        if name in _THRESHOLDS and value is not None and not value > 0.0:
            raise ValueError(f"{name} must be > 0 (or None: no truncation), got {value}")

    # ------------------------------------------------------------ collection side
    def finish(self, state=None):
        """Nothing to ask the algorithm: the learner values the last observation and the
        final observations of truncated episodes itself, with its current critic."""

    def get_data(self, data_to_cpu=True):
        """The recorded steps (possibly fewer than ``size``, if cut) as a dict of tensors:
        ``OBS``, ``ACT``, ``LOGP`` (behaviour), ``REW``, ``TERM``, ``TRUNC`` (k, N, ...),
        ``NEXT_OBS``, ``TRUNC_OBS`` and ``TRUNC_INDEX`` (see their definitions), and for a
        recurrent actor ``RHS``, its state at the start of the rollout."""
        data = self.recorded_steps((ACT, LOGP))
        if self._start_state is not None:
            data[RHS] = self._start_state
        obs = self._rec[OBS]
        truncated = [(t, i, o) for t, i, o, was_trunc in self._final_obs if was_trunc]
        data[NEXT_OBS] = obs[self.step]
        data[TRUNC_OBS] = np.stack([o for _, _, o in truncated]) if truncated else \
            np.zeros((0,) + obs.shape[2:], dtype=obs.dtype)
        data[TRUNC_INDEX] = np.array([(t, i) for t, i, _ in truncated], dtype=np.int64).reshape(-1, 2)
        return self.rollout_tensors(data, data_to_cpu)

    # -------------------------------------------------------------- learner side
    def prepare(self):
        """Compute the V-trace targets of every received rollout with the current actor,
        flatten them (recurrent actors: keep them as sequences), and note the ratio
        statistics reported with each update."""
        super().prepare()
        prepared = [self.flat] if self.flat is not None else self.sequences or []
        if prepared:
            log_ratio = torch.cat([p.pop("log_ratio").reshape(-1) for p in prepared])
            # The learner recomputes the log-probabilities the collector computed (in numpy or
            # in another batch): on-policy they still differ by rounding, which must not
            # count as truncation, hence the margin.
            clipped = 0.0 if self.clip_rho_threshold is None else \
                (log_ratio > math.log(self.clip_rho_threshold) + _ROUNDING).float().mean().item()
            self._stats = {"VTraceAbsLogRatio": log_ratio.abs().mean().item(), "VTraceClippedRho": clipped}

    def rollout_samples(self, c, gamma):
        """The samples of rollout ``c`` with V-trace targets (see ``VanillaOnPolicyBuffer``),
        plus ``"log_ratio"`` (log pi/mu of each step, for the statistics)."""
        T, n = c[REW].shape[:2]
        obs, act = c[OBS].reshape(T * n, *c[OBS].shape[2:]), c[ACT].reshape(T * n, *c[ACT].shape[2:])
        done = torch.maximum(c[TERM], c[TRUNC])
        index = c[TRUNC_INDEX]
        with torch.no_grad():
            if RHS in c:
                # A recurrent actor re-runs its memory over the rollout from the stored start
                # state, zeroed after each episode end as the collector did; the observation
                # after the last step is valued from the state then, a truncated episode's
                # final observation from the state its last step reached.
                logp, val, states = self.actor.evaluate_sequence(c[OBS], act, c[RHS], done)
                boot_state = torch.cat([states[-1] * (1.0 - done[-1]), states[index[:, 0], index[:, 1]]])
            else:
                logp, _, val = self.actor.evaluate_actions(obs, act, entropy_grad=False)
                boot_state = None
            boot_obs = torch.cat([c[NEXT_OBS], c[TRUNC_OBS]])
            boot = self.actor.get_value(boot_obs) if boot_state is None else self.actor.get_value(boot_obs, boot_state)
            trunc_val = torch.zeros_like(c[REW])
            trunc_val[index[:, 0], index[:, 1]] = boot[n:]
            logp, val = logp.reshape(T, n, 1), val.reshape(T, n, 1)
            log_ratio = logp - c[LOGP].reshape(T, n, 1)
            adv, vs = compute_vtrace(c[REW], torch.cat([val, boot[None, :n]]), c[TERM], c[TRUNC], trunc_val,
                                     log_ratio, gamma, self.vtrace_lambda, self.clip_rho_threshold,
                                     self.clip_pg_rho_threshold, self.clip_c_threshold)
        return {OBS: c[OBS], ACT: c[ACT], LOGP: logp, VAL: val, RET: vs, ADV: adv, DONE: done,
                "log_ratio": log_ratio}

    def after_update(self, batch, info):
        """Add the ratio statistics of the data trained on to the update's metrics."""
        info.update(self._stats)
