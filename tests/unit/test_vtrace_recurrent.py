"""V-trace with recurrent actors (IMPALA with memory): the learner re-runs its current
actor over each rollout as a sequence from the stored start state, resetting it at the
episode ends inside the rollout as the collector did; the targets equal a direct
step-by-step run of that actor; the importance ratio is 1 when behaviour and target
weights are the same; the configuration accepts the combination; a resumed run's collectors
start new episodes with their memories at the initial state (learning MaskedCartPole-v1
with a GRU and asynchronous collectors on Ray: tests/learning/test_learning_vtrace.py).

Real gymnasium CartPole, real torch: no mocks.
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pytorchrl as prl
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.storages import VTraceBuffer
from pytorchrl.agent.storages.vtrace import NEXT_OBS, TRUNC_INDEX, TRUNC_OBS
from pytorchrl.config import ConfigError, build_learner, validate_config
from pytorchrl.scheme.collection.c_worker import CWorker

from cli_helpers import with_sections
from recurrent_helpers import actor_factory, env_factory
from test_recurrent import MASKED
from test_vtrace import paper_vtrace

#: Time limit of the episodes and steps of a rollout: with the policy leaning left
#: (``lean_left``) a rollout of 16 steps holds terminations (the pole falls after about 9
#: steps) and truncations (episodes that last 10) inside it.
LIMIT, T, N = 10, 16, 4
GAMMA = 0.95
#: Non-default V-trace parameters, so that every one of them acts in the comparison.
VTRACE = dict(vtrace_lambda=0.9, clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9, clip_c_threshold=1.1)


def lean_left(actor, bias=1.0):
    """Bias the categorical policy towards action 0 (in place)."""
    with torch.no_grad():
        actor.dist.linear.bias.copy_(torch.tensor([bias, -bias]))


def recurrent_collector(net="GRU", shared=True, algo=PPO, **hyper):
    """A CWorker with a VTraceBuffer of T steps on N CartPole envs (episodes of at most
    LIMIT steps) and a recurrent actor leaning left."""
    envs, action_space, obs_space = env_factory(N, max_episode_steps=LIMIT)
    algo_factory, name = algo.create_factory(gamma=GAMMA, **hyper)
    worker = CWorker(0, 0, algo_factory, actor_factory(obs_space, action_space, name, net, shared),
                     VTraceBuffer.create_factory(size=T, **VTRACE), train_envs_factory=envs)
    lean_left(worker.actor)
    return worker, algo_factory


def second_rollout(worker):
    """The second rollout of ``worker``: it starts mid-episode, from a non-zero state."""
    worker.collect_data()
    data, _ = worker.collect_data()
    assert np.abs(data[prl.RHS].numpy()).max() > 1e-2
    return data


def step_by_step(actor, data):
    """The actor run one step at a time over the rollout ``data`` from its stored start
    state, the state zeroed after every episode end as the collector does.

    Returns the log-probabilities (T, N) of the actions taken, the values (T + 1, N) of
    every observation and of the one after the last step, and the values (T, N) of the
    final observations of the truncated episodes (valued from the state their last
    step reached, before the reset)."""
    obs, act = data[prl.OBS], data[prl.ACT]
    ended = torch.maximum(data[prl.TERM], data[prl.TRUNC])[..., 0].numpy().astype(bool)
    finals = {(int(t), int(i)): o for (t, i), o in zip(data[TRUNC_INDEX].tolist(), data[TRUNC_OBS])}
    state = data[prl.RHS].numpy()
    logp, val, trunc_val = np.zeros((T, N)), np.zeros((T + 1, N)), np.zeros((T, N))
    with torch.no_grad():
        for t in range(T):
            logits, value = actor.logits_and_value(obs[t][None], torch.as_tensor(state), torch.zeros(1, N, 1))
            logp[t] = F.log_softmax(logits, dim=-1).gather(-1, act[t]).reshape(N).numpy()
            val[t] = value.reshape(N).numpy()
            _, extras, next_state = actor.act_torch(obs[t], torch.as_tensor(state))
            np.testing.assert_allclose(extras[prl.VAL].reshape(N).numpy(), val[t], atol=1e-6)
            for i in range(N):
                if (t, i) in finals:
                    trunc_val[t, i] = actor.get_value(finals[(t, i)][None], next_state[i:i + 1]).item()
            state = actor.reset_state(next_state.numpy(), np.flatnonzero(ended[t]))
        val[T] = actor.get_value(data[NEXT_OBS], torch.as_tensor(state)).reshape(N).numpy()
    return logp, val, trunc_val


def prepared_batch(storage, data):
    """The learner side's one mini-batch of ``data`` (num_mini_batch 1, one epoch) and the
    update metrics it reports."""
    storage.add_data(data)
    batches = list(storage.batches())
    assert len(batches) == 1
    info = {}
    storage.after_update(batches[0], info)
    return batches[0], info


# ------------------------------------------------------------------- the targets
@pytest.mark.parametrize("net,shared", [("GRU", True), ("LSTM", False)])
def test_targets_equal_a_step_by_step_run_of_the_current_actor(net, shared):
    """Off-policy: the learner's weights differ from the collector's. RET, ADV, LOGP and
    VAL of the sequence batch are V-trace by its definition (tests/unit/test_vtrace.py's
    ``paper_vtrace``) over the learner actor's outputs computed one step at a time, the
    state reset at the terminations and truncations inside the rollout."""
    worker, algo_factory = recurrent_collector(net, shared, num_mini_batch=1, num_epochs=1)
    data = second_rollout(worker)
    term, trunc = data[prl.TERM][..., 0].numpy(), data[prl.TRUNC][..., 0].numpy()
    assert term.sum() >= 2 and trunc.sum() >= 2                    # both kinds of episode end inside
    target = copy.deepcopy(worker.actor)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.2 * torch.randn_like(p))
    lean_left(target, 0.0)               # the behaviour policy leans left, this one does not
    learner = VTraceBuffer.create_factory(size=T, **VTRACE)("cpu", target, algo_factory("cpu", target, None), None)
    batch, info = prepared_batch(learner, data)

    logp, val, trunc_val = step_by_step(target, data)
    ratio = np.exp(logp - data[prl.LOGP].reshape(T, N).numpy())
    for bar in (1.2, 0.9, 1.1):                                    # every truncation acts
        assert (ratio > bar).any() and (ratio < bar).any()
    adv, vs = paper_vtrace(data[prl.REW], val, term, trunc, trunc_val, ratio, GAMMA, lam=0.9, rho_bar=1.2,
                           pg_rho_bar=0.9, c_bar=1.1)
    # Sequence batch: OBS and DONE (T, N, ...), RHS (N, ...), the rest (T * N, ...) time first.
    assert batch[prl.OBS].shape[:2] == (T, N)
    torch.testing.assert_close(batch[prl.RHS], data[prl.RHS])
    np.testing.assert_allclose(batch[prl.LOGP].reshape(T, N).numpy(), logp, atol=1e-5)
    np.testing.assert_allclose(batch[prl.VAL].reshape(T, N).numpy(), val[:T], atol=1e-5)
    np.testing.assert_allclose(batch[prl.RET].reshape(T, N).numpy(), vs, atol=1e-4)
    np.testing.assert_allclose(batch[prl.ADV].reshape(T, N).numpy(), adv, atol=1e-4)
    assert info["VTraceAbsLogRatio"] == pytest.approx(np.abs(np.log(ratio)).mean(), rel=1e-4)
    assert info["VTraceClippedRho"] == pytest.approx((ratio > 1.2).mean())

    # The resets mattered: run over without them, the memory gives other values.
    with torch.no_grad():
        _, _, no_reset = target.evaluate_actions(data[prl.OBS], batch[prl.ACT], rhs=data[prl.RHS],
                                                 done=torch.zeros(T, N, 1))
    assert np.abs(no_reset.reshape(T, N).numpy() - val[:T]).max() > 1e-3


@pytest.mark.parametrize("net", ["GRU", "LSTM"])
def test_the_ratio_is_one_when_behaviour_and_target_weights_are_the_same(net):
    """The collector's own storage trains on its rollout with the weights that acted it:
    the log-probabilities re-computed over the sequence are the behaviour ones, every
    ratio is 1 and none is truncated; the update then moves the memory's weights."""
    worker, _ = recurrent_collector(net, algo=A2C)
    data = second_rollout(worker)
    batch, info = prepared_batch(worker.storage, data)
    torch.testing.assert_close(batch[prl.LOGP], data[prl.LOGP].reshape(T * N, 1), atol=1e-5, rtol=0)
    assert info["VTraceAbsLogRatio"] < 1e-5 and info["VTraceClippedRho"] == 0.0
    before = [p.detach().clone() for p in worker.actor.memory.parameters()]
    grads, _ = worker.algo.compute_gradients(batch)
    assert worker.algo.apply_gradients(grads)
    assert any(not torch.equal(a, b) for a, b in zip(before, worker.actor.memory.parameters()))


def test_sequence_batches_split_the_environments_and_refuse_more_than_there_are():
    worker, _ = recurrent_collector(num_mini_batch=2, num_epochs=2)
    data = second_rollout(worker)
    worker.storage.add_data(data)
    batches = list(worker.storage.batches())
    assert len(batches) == 4 and all(b[prl.OBS].shape[:2] == (T, 2) and b[prl.RHS].shape[0] == 2 for b in batches)
    with pytest.raises(ValueError, match=r"num_mini_batch=5 with a recurrent actor.*only 4 \(vec_env_size\)"):
        recurrent_collector(num_mini_batch=5)


# ------------------------------------------------------------------ configuration
def test_configuration_accepts_a_recurrent_actor_with_vtrace_and_trains(tmp_path):
    raw = with_sections(MASKED, algorithm={"name": "A2C", "num_epochs": 1, "num_mini_batch": 1},
                        storage={"name": "VTraceBuffer", "size": 8})
    config = validate_config(raw)
    assert config["storage"]["name"] == "VTraceBuffer" and config["actor"]["recurrent_net"] == "GRU"
    learner = build_learner(config, log_dir=str(tmp_path))
    infos = []
    try:
        while not learner.done():
            infos += learner.step()
    finally:
        learner.stop()
    ratios = [info["algo"]["VTraceAbsLogRatio"] for info in infos if "algo" in info]
    assert ratios and max(ratios) < 1e-5                    # one process: on-policy
    with pytest.raises(ConfigError, match="algorithm.num_mini_batch: 3 with a recurrent actor"):
        validate_config(with_sections(raw, algorithm={"num_mini_batch": 3}))


# ------------------------------------------------------------------ learning


# ------------------------------------------------------------------ resume
def local_collector(learner):
    return learner.update_worker.local_worker.col_workers.local_worker()


def test_a_resumed_recurrent_run_starts_new_episodes_with_initial_memories(tmp_path):
    """A checkpoint holds no environment state: the resumed run's collectors are built
    anew, reset their environments (the seeded first observations again) and start their
    memories from the initial state with them, never a saved memory on a new episode nor
    a zero memory mid-episode. The run being saved is mid-episode with non-zero memories;
    loading the checkpoint into that running learner keeps both."""
    raw = with_sections(MASKED, algorithm={"name": "A2C", "num_mini_batch": 1},
                        storage={"name": "VTraceBuffer", "size": 8}, env={"id": "CartPole-v1"},
                        learner={"target_steps": 160})
    learner = build_learner(validate_config(raw), log_dir=str(tmp_path / "first"))
    try:
        first_obs = local_collector(learner).obs.copy()
        while not learner.done():
            learner.step()
        collector = local_collector(learner)
        assert np.abs(collector.state).max() > 1e-2                 # memories mid-episode
        assert np.abs(collector.obs - first_obs).max() > 1e-3
        path = learner.save_checkpoint(str(tmp_path / "checkpoint.pt"))
        saved = learner.update_worker.local_worker.actor.state_dict()
        # Loaded into the learner that is running, the checkpoint leaves its collectors'
        # episodes alone: environments and memories go on together.
        state, obs = collector.state.copy(), collector.obs.copy()
        learner.load_checkpoint(path)
        np.testing.assert_array_equal(collector.state, state)
        np.testing.assert_array_equal(collector.obs, obs)
    finally:
        learner.stop()

    resumed = build_learner(validate_config(with_sections(raw, learner={"target_steps": 320})),
                            log_dir=str(tmp_path / "resumed"))
    try:
        resumed.load_checkpoint(path)
        collector = local_collector(resumed)
        assert all(torch.equal(saved[k], v) for k, v in collector.actor.state_dict().items())
        assert np.all(collector.state == 0.0)
        np.testing.assert_array_equal(collector.obs, first_obs)      # new episodes
        data, _ = collector.collect_data()
        assert np.all(data[prl.RHS].numpy() == 0.0)
        np.testing.assert_array_equal(data[prl.OBS][0].numpy(), first_obs)
        while not resumed.done():                                   # and it trains on
            resumed.step()
    finally:
        resumed.stop()
