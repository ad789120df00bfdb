"""Recurrent DQN (R2D2-style): an OffPolicyActor with a memory, RecurrentReplayBuffer
sequences with burn-in, double-DQN sequence targets. The actor's state carried and reset
while acting; stored states equal the states the actor had; burn-in steps without gradient
and outside the loss; n-step windows never crossing an episode end; targets and loss
against a hand computation; prioritized sequences; the numpy fast paths stepping aside;
refusals (Python and YAML); one process; train, resume and evaluate from the command line.
Real gymnasium CartPole, real torch.

(Asynchronous Ray collectors: tests/distributed/test_r2d2_ray.py; learning on the memory
task: tests/learning/test_learning_r2d2.py.)
"""

import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl import cli
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.notices import _said
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.storages import NStepReplayBuffer, PERBuffer, RecurrentReplayBuffer, ReplayBuffer
from pytorchrl.agent.storages.replay import nstep_windows
from pytorchrl.checkpoint import read_checkpoint
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.learner import Learner
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.tools.evaluate import run_episodes

from cli_helpers import assert_one_line_error, pytorchrl_in_process, write_config

from r2d2_helpers import actor_factory, env_factory, r2d2_scheme

#: Episodes of this many steps (time limit): episode ends at known steps of the stream.
EPISODE = 5
OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(2)


def collector(net="GRU", overlap=0.0, sequence_length=4, burn_in=2, n_step=1, num_envs=2, update_every=8,
              **hyper):
    """A CWorker on CartPole with episodes of ``EPISODE`` steps, a recurrent DDQN actor and
    a RecurrentReplayBuffer (rollouts of ``update_every / num_envs`` steps)."""
    envs, action_space, obs_space = env_factory(num_envs, max_episode_steps=EPISODE)
    algo_factory, _ = DDQN.create_factory(**{"update_every": update_every, "start_steps": 0, "num_updates": 1,
                                            "mini_batch_size": 8, "gamma": 0.9, **hyper})
    storage = RecurrentReplayBuffer.create_factory(size=100, sequence_length=sequence_length, burn_in=burn_in,
                                                   n_step=n_step)
    return CWorker(0, 0, algo_factory, actor_factory(obs_space, action_space, net, overlap=overlap), storage,
                   train_envs_factory=envs)


def streams(datas, num_envs):
    """Per environment, its sequences in stream order: a list (one per env) of dicts of
    numpy arrays (num_sequences, ...) gathered from rollouts (rows: start-major)."""
    out = []
    for e in range(num_envs):
        out.append({k: np.concatenate([d[k].numpy()[e::num_envs] for d in datas]) for k in datas[0]})
    return out


def fold_states(actor, obs, done):
    """States the actor has before each step of one environment's stream ``obs`` (L, ...)
    acting from its initial state, reset after ended episodes (``done`` (L,)); and the state
    after the last step."""
    state, before = actor.initial_state(1), []
    for o, d in zip(obs, done):
        before.append(state[0].copy())
        _, _, state = actor.act(o[None], state)
        if d:
            state = actor.reset_state(state, [0])
    return np.stack(before), state[0]


def tiny_ddqn(hidden_size=3, loss="mse"):
    """A recurrent DDQN on 2-d observations and 2 actions, its target network made different
    from the online one."""
    torch.manual_seed(1)
    actor = OffPolicyActor("cpu", OBS_SPACE, ACTIONS, "DDQN", recurrent_net="GRU",
                           recurrent_net_kwargs={"hidden_size": hidden_size},
                           common_feature_extractor_kwargs={"hidden_sizes": [4]})
    algo = DDQN("cpu", actor, gamma=0.9, loss=loss)
    with torch.no_grad():
        for p in algo.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return algo


# ---------------------------------------------------------------------------- actor
@pytest.mark.parametrize("net", ["GRU", "LSTM"])
def test_actor_state_is_carried_reset_and_broadcast(net):
    actor = actor_factory(OBS_SPACE, ACTIONS, net)("cpu")
    actor.warmup.fill_(0.0)
    size = 8 if net == "GRU" else 16
    assert actor.is_recurrent and actor.initial_state(3).shape == (3, size)
    assert not actor.initial_state(3).any()
    obs = np.random.default_rng(0).uniform(-1, 1, (4, 3, 2)).astype(np.float32)
    # act() carries the state: two steps equal the memory stepped twice.
    state = actor.initial_state(3)
    for o in obs[:2]:
        action, extras, state = actor.act(o, state, deterministic=True)
    with torch.no_grad():
        h = torch.zeros(3, size)
        for o in obs[:2]:
            q, h = actor.memory_step(torch.as_tensor(o), h)
    assert isinstance(state, np.ndarray) and state.dtype == np.float32 and extras == {}
    np.testing.assert_allclose(state, h.numpy(), atol=1e-6)
    np.testing.assert_array_equal(action, q[0].argmax(-1, keepdim=True).numpy())   # greedy on the memory's Q
    # Random actions (warm-up, epsilon) still advance the memory.
    actor.warmup.fill_(1.0)
    _, _, warm = actor.act(obs[2], state)
    actor.warmup.fill_(0.0)
    _, _, greedy = actor.act(obs[2], state, deterministic=True)
    np.testing.assert_allclose(warm, greedy, atol=1e-6)
    # reset_state zeroes the rows of ended episodes, in a copy.
    reset = actor.reset_state(state, [1])
    assert not reset[1].any() and np.array_equal(reset[[0, 2]], state[[0, 2]]) and state[1].any()
    # The acting weights hold the memory: a collector loading them acts as the learner.
    weights = actor.acting_state_dict()
    assert any(k.startswith("memory.") for k in weights) and "epsilon" in weights
    other = actor_factory(OBS_SPACE, ACTIONS, net)("cpu")
    other.load_acting_state_dict(weights)
    other.warmup.fill_(0.0)
    s1, s2 = actor.initial_state(3), other.initial_state(3)
    for o in obs:
        a1, _, s1 = actor.act(o, s1, deterministic=True)
        a2, _, s2 = other.act(o, s2, deterministic=True)
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_allclose(s1, s2, atol=1e-6)


def test_numpy_fast_paths_step_aside_and_say_so_once(caplog):
    _said.clear()
    algo = tiny_ddqn()
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        for _ in range(2):
            algo.actor.act(np.zeros((1, 2), np.float32), algo.actor.initial_state(1))
        assert algo.update_engine is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["OffPolicyActor: numpy acting not used (recurrent actor (memory state)); acting in torch",
                        "DDQN: numpy update not used (recurrent actor (sequences with a memory)); updating in torch"]


# ----------------------------------------------------------------------- collection
@pytest.mark.parametrize("net", ["GRU", "LSTM"])
def test_stored_states_are_the_states_the_actor_had_reset_at_episode_ends_and_carried(net):
    """Sequences of 2 burn-in + 4 training steps, no overlap (they tile each stream),
    rollouts of 4 steps, episodes of 5: sequence starts, rollout boundaries and episode
    ends all fall at different steps."""
    worker = collector(net, overlap=0.0)
    datas = [worker.collect_data()[0] for _ in range(6)]           # 24 steps: 4 sequences per env
    assert [len(d[prl.REW]) for d in datas] == [0, 2, 2, 0, 2, 2]   # sent once complete
    for env, stream in enumerate(streams(datas, 2)):
        obs, done = stream[prl.OBS].reshape(24, 4), stream[prl.DONE].reshape(24)
        np.testing.assert_array_equal(np.flatnonzero(done), [4, 9, 14, 19])     # time limits
        before, last = fold_states(worker.actor, obs, done)
        np.testing.assert_allclose(stream[prl.RHS], before[::6], atol=1e-5)
        assert not stream[prl.RHS][0].any() and np.abs(stream[prl.RHS][1:]).min(axis=1).max() > 1e-3
        # The collector's state after the 24 steps: carried through every rollout.
        np.testing.assert_allclose(worker.state[env], last, atol=1e-5)
        # OBS2 is the next observation, the final one where an episode ended.
        obs2 = stream[prl.OBS2].reshape(24, 4)
        same = np.all(obs2[:-1] == obs[1:], axis=1)
        np.testing.assert_array_equal(np.flatnonzero(~same), [4, 9, 14, 19])
        # Training steps: the last 4 of each sequence, their actions as taken.
        assert stream[prl.ACT].shape == (4, 4, 1) and stream[prl.REW].shape == (4, 4, 1)


def test_overlap_sets_the_stride_between_sequence_starts():
    """overlap 0.5 of 6 steps: a sequence starts every 3 steps and repeats the last 3 of the
    one before."""
    worker = collector(overlap=0.5)
    assert worker.storage.stride == 3
    datas = [worker.collect_data()[0] for _ in range(6)]           # 24 steps: starts 0, 3, ..., 18
    for stream in streams(datas, 2):
        obs, done = stream[prl.OBS], stream[prl.DONE][..., 0]
        assert len(obs) == 7
        np.testing.assert_array_equal(obs[1:, :3], obs[:-1, 3:])
        # The stream: the first sequence, then the 3 new steps of each next one.
        before, _ = fold_states(worker.actor, np.concatenate([obs[0]] + list(obs[1:, 3:])),
                                np.concatenate([done[0]] + list(done[1:, 3:])))
        np.testing.assert_allclose(stream[prl.RHS], before[:19:3], atol=1e-5)
    nearly_all = OffPolicyActor("cpu", OBS_SPACE, ACTIONS, recurrent_net="GRU", sequence_overlap=0.99)
    assert RecurrentReplayBuffer("cpu", nearly_all, worker.algo, None, 10, sequence_length=4,
                                 burn_in=2).stride == 1      # at least one step apart


def test_nstep_windows_by_hand():
    """Terminated after step 2, truncated after step 4, the stretch ends after step 5."""
    rew = np.array([1.0, 2, 3, 4, 5, 6])[:, None]
    term = np.array([0.0, 0, 1, 0, 0, 0])[:, None]
    trunc = np.array([0.0, 0, 0, 0, 1, 0])[:, None]
    ret, discount, last = nstep_windows(rew, term, trunc, 0.5, 3, np.arange(6))
    np.testing.assert_allclose(ret[:, 0], [1 + 1 + 0.75, 2 + 1.5, 3, 4 + 2.5, 5, 6])
    np.testing.assert_allclose(discount[:, 0], [0, 0, 0, 0.25, 0.5, 0.5])
    np.testing.assert_array_equal(last[:, 0], [2, 2, 2, 4, 4, 5])


def test_training_windows_never_cross_an_episode_end():
    gamma, n = 0.9, 3
    worker = collector(overlap=0.5, n_step=n, gamma=gamma)
    datas = [worker.collect_data()[0] for _ in range(8)]
    data = {k: np.concatenate([d[k].numpy() for d in datas]) for k in datas[0]}
    S, T = 6, 4
    done = data[prl.DONE][..., 0]
    for row in range(len(done)):
        for j in range(T):
            t, e = 2 + j, int(data[prl.BOOTSTRAP_STEP][row, j])
            assert t <= e <= min(t + n - 1, S - 1)
            assert not done[row, t:e].any()                          # no episode end before the last step
            if e < min(t + n - 1, S - 1):
                assert done[row, e]                                   # stopped early: by an episode end
            k = e - t + 1                                             # CartPole: reward 1 per step
            assert data[prl.REW][row, j, 0] == pytest.approx(sum(gamma ** i for i in range(k)))
            assert data[prl.DISCOUNT][row, j, 0] == pytest.approx(gamma ** k)   # time limits: bootstrapped
    assert done.any() and (data[prl.BOOTSTRAP_STEP] < np.arange(2, 6) + n - 1).any()


# ------------------------------------------------------------------------- learning
def hand_batch(seed=0):
    """Two sequences of 4 steps (1 burn-in + 3 training steps); the first one's episode
    ends after step 1 (its first training step bootstraps from that step's OBS2)."""
    g = torch.Generator().manual_seed(seed)
    S, B, T = 4, 2, 3
    done = torch.zeros(S, B, 1)
    done[1, 0] = 1.0
    boot = torch.tensor([[1, 2], [3, 3], [3, 3]])
    return {prl.OBS: torch.randn(S, B, 2, generator=g), prl.OBS2: torch.randn(S, B, 2, generator=g),
            prl.DONE: done, prl.RHS: torch.randn(B, 3, generator=g),
            prl.ACT: torch.randint(0, 2, (T, B, 1), generator=g), prl.REW: torch.randn(T, B, 1, generator=g),
            prl.DISCOUNT: torch.rand(T, B, 1, generator=g), prl.BOOTSTRAP_STEP: boot}


def by_hand(net, batch, detach_before=0):
    """States after each step (the GRU cell stepped one at a time, zeroed after episode
    ends) and the Q-network's MLP written out."""
    h, states = batch[prl.RHS], []
    for p in range(batch[prl.OBS].shape[0]):
        if p == detach_before and p > 0:
            h = h.detach()
        h = net.memory.cell(batch[prl.OBS][p], h)
        states.append(h)
        h = h * (1.0 - batch[prl.DONE][p])
    w, b = net.critics.weights, net.critics.biases

    def q(x):
        return torch.relu(x @ w[0][0] + b[0][0]) @ w[1][0] + b[1][0]

    def q_next(o, h):
        return q(net.memory.cell(o, h))
    return states, q, q_next


@pytest.mark.parametrize("double_q", [True, False])
def test_sequence_targets_and_loss_against_a_hand_computation(double_q):
    algo = tiny_ddqn()
    algo.double_q = double_q
    batch = hand_batch()
    online, q_on, next_on = by_hand(algo.actor, batch)
    target, _, next_tg = by_hand(algo.target, batch)
    expected_q, expected_target = torch.zeros(3, 2), torch.zeros(3, 2)
    with torch.no_grad():
        for j in range(3):
            for b in range(2):
                e = int(batch[prl.BOOTSTRAP_STEP][j, b])
                o2 = batch[prl.OBS2][e, b][None]
                q2 = next_tg(o2, target[e][b][None])[0]
                # Double Q: the online memory picks the next action; DQN: the target's maximum.
                value = q2[next_on(o2, online[e][b][None]).argmax()] if double_q else q2.max()
                expected_target[j, b] = batch[prl.REW][j, b, 0] + batch[prl.DISCOUNT][j, b, 0] * value
                expected_q[j, b] = q_on(online[1 + j][b][None])[0, batch[prl.ACT][j, b, 0]]
    _, states = algo.actor.memory_unroll(batch[prl.OBS], batch[prl.RHS], batch[prl.DONE], 1)
    np.testing.assert_allclose(algo.sequence_targets(batch, states.detach())[..., 0].numpy(),
                               expected_target.numpy(), atol=1e-5)
    loss, info = algo.compute_loss(batch)
    assert loss.item() == pytest.approx(((expected_q - expected_target) ** 2).mean().item(), rel=1e-5)
    assert info["QMean"] == pytest.approx(expected_q.mean().item(), rel=1e-5)


def test_burn_in_steps_get_no_gradient_and_are_not_in_the_loss():
    algo = tiny_ddqn()
    batch = hand_batch()
    obs = batch[prl.OBS].clone().requires_grad_(True)
    loss, _ = algo.compute_loss({**batch, prl.OBS: obs})
    loss.backward()
    assert not obs.grad[0].any() and obs.grad[1:].abs().sum() > 0
    # The parameters' gradients: the hand loss over the 3 training steps, the state after
    # the burn-in detached.
    grads = [p.grad.clone() for p in algo.trainable_parameters()]
    states, q, _ = by_hand(algo.actor, batch, detach_before=1)
    with torch.no_grad():
        _, unrolled = algo.actor.memory_unroll(batch[prl.OBS], batch[prl.RHS], batch[prl.DONE], 1)
        target = algo.sequence_targets(batch, unrolled)
    taken = torch.stack([q(states[1 + j]).gather(1, batch[prl.ACT][j]) for j in range(3)])
    hand = ((taken - target) ** 2).mean()
    expected = torch.autograd.grad(hand, algo.trainable_parameters())
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-4)
    # The burn-in steps still bring the state up to date: they change the loss.
    changed = batch[prl.OBS].clone()
    changed[0] += 1.0
    assert algo.compute_loss({**batch, prl.OBS: changed})[0].item() != pytest.approx(loss.item(), rel=1e-6)


def test_huber_loss_and_a_replay_mini_batch_train_the_memory():
    """Sequences collected by a CWorker, sampled from the ring: every Q-network parameter
    (memory included) gets a gradient, the target network follows the memory too."""
    worker = collector(n_step=2, loss="huber", mini_batch_size=8, polyak=0.0)
    for _ in range(6):
        worker.storage.add_data(worker.collect_data()[0])
    storage, algo = worker.storage, worker.algo
    batch = storage.sample(8)                                        # 2 sequences of 4 training steps
    assert batch[prl.OBS].shape == (6, 2, 4) and batch[prl.RHS].shape == (2, 8)
    assert batch[prl.ACT].shape == (4, 2, 1) and batch[prl.BOOTSTRAP_STEP].shape == (4, 2)
    _, info = algo.compute_gradients(batch, return_grads=False)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in algo.trainable_parameters())
    assert any(p is q for p in algo.trainable_parameters() for q in algo.actor.memory.parameters())
    assert math.isfinite(info["Loss"]) and info[prl.TD_ERROR].shape == (8,)
    storage.after_update(batch, info)
    assert algo.apply_gradients()
    for o, t in zip(algo.actor.memory.parameters(), algo.target.memory.parameters()):
        assert torch.equal(o, t)                                     # hard copy after the update


def test_prioritized_sequences_mix_max_and_mean_of_their_errors():
    worker = collector()
    learner_side = RecurrentReplayBuffer("cpu", worker.actor, worker.algo, None, 50, sequence_length=4, burn_in=2,
                                         alpha=0.5, epsilon=0.01, priority_eta=0.9)
    for _ in range(6):
        learner_side.add_data(worker.collect_data()[0])
    assert learner_side.num_items == 8 and learner_side.num_inserted == 8 * 6    # stride 6 steps each
    batch = learner_side.sample(12)                                # ceil(12 / 4) = 3 sequences
    assert batch[prl.WEIGHT].shape == (3, 1)
    errors = np.array([1.0, -2.0, 0.5, 0.0, 3.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4])
    info = {prl.TD_ERROR: errors.copy(), "Loss": 1.0}
    learner_side.after_update(batch, info)
    assert prl.TD_ERROR not in info
    e = np.abs(errors).reshape(3, 4)
    expected = (0.9 * e.max(1) + 0.1 * e.mean(1) + 0.01) ** 0.5
    idx = np.asarray(batch[prl.INDEX])
    for i, p in zip(idx, expected):      # (a sequence drawn twice gets the later priority)
        if list(idx).count(i) == 1:
            assert learner_side.tree.get(np.array([i]))[0] == pytest.approx(p)


# ------------------------------------------------------------------------ refusals
def test_refusals_name_the_cause():
    envs, action_space, obs_space = env_factory(1)
    recurrent = actor_factory(obs_space, action_space)("cpu")
    plain = OffPolicyActor("cpu", obs_space, action_space, "DDQN")
    algo = DDQN("cpu", recurrent)
    for cls in (ReplayBuffer, NStepReplayBuffer, PERBuffer):
        with pytest.raises(ValueError, match=f"^{cls.__name__} stores single transitions; a recurrent actor learns "
                                             f"from sequences: use RecurrentReplayBuffer$"):
            cls("cpu", recurrent, algo, None, 100)
    with pytest.raises(ValueError, match="^RecurrentReplayBuffer stores sequences for a recurrent actor"):
        RecurrentReplayBuffer("cpu", plain, DDQN("cpu", plain), None, 100)
    with pytest.raises(ValueError, match="burn_in must be an integer >= 0, got -1"):
        RecurrentReplayBuffer("cpu", recurrent, algo, None, 100, burn_in=-1)
    with pytest.raises(ValueError, match="sequence_length must be an integer >= 1, got 0"):
        RecurrentReplayBuffer("cpu", recurrent, algo, None, 100, sequence_length=0)
    with pytest.raises(ValueError, match="priority_eta must be in"):
        RecurrentReplayBuffer("cpu", recurrent, algo, None, 100, priority_eta=1.5)
    storage = RecurrentReplayBuffer("cpu", recurrent, algo, None, 100)
    with pytest.raises(ValueError, match="'burn_in' is fixed once the buffer is built"):
        storage.update_storage_parameter("burn_in", 3)
    storage.update_storage_parameter("priority_eta", 0.5)
    assert storage.priority_eta == 0.5
    with pytest.raises(ValueError, match="targets_on_collector=True\\) computes targets of single transitions"):
        DDQN("cpu", recurrent, targets_on_collector=True)
    from pytorchrl.scheme.servers.replay_server import check_data_path
    with pytest.raises(ValueError, match="^data_path='replay_server' holds single transitions; RecurrentReplayBuffer"):
        check_data_path("replay_server", None, RecurrentReplayBuffer.create_factory(size=10))


def test_memory_settings_without_a_memory_are_said_to_have_no_effect(caplog):
    _said.clear()
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        OffPolicyActor.create_factory(OBS_SPACE, ACTIONS, "DDQN", sequence_overlap=0.5)      # pytorchrl's default
        assert not caplog.records
        OffPolicyActor.create_factory(OBS_SPACE, ACTIONS, "DDQN", recurrent_net_kwargs={"hidden_size": 8})
    assert [r.getMessage() for r in caplog.records] == [
        "OffPolicyActor: sequence_overlap and recurrent_net_kwargs have no effect without recurrent_net (a "
        "feed-forward actor)"]


def masked(**sections):
    config = {"env": {"id": "MaskedCartPole-v1"}, "algorithm": {"name": "DDQN"},
              "actor": {"recurrent_net": "GRU"}, "storage": {"size": 100}, "learner": {"target_steps": 1000}}
    for name, value in sections.items():
        config[name] = {**config.get(name, {}), **value} if isinstance(value, dict) else value
    return config


@pytest.mark.parametrize("raw,expected", [
    (masked(algorithm={"name": "SAC"}, env={"id": "Pendulum-v1"}),
     "actor.recurrent_net: recurrent off-policy actors are supported for DDQN only (R2D2-style); SAC actors are "
     "feed-forward"),
    (masked(storage={"name": "PERBuffer"}),
     "storage.name: a recurrent DDQN (actor.recurrent_net) learns from sequences: RecurrentReplayBuffer, got "
     "'PERBuffer'"),
    (masked(actor={"recurrent_net": None}, storage={"name": "RecurrentReplayBuffer"}),
     "storage.name: RecurrentReplayBuffer stores sequences for a recurrent actor: set actor.recurrent_net"),
    (masked(actor={"recurrent_net": None, "sequence_overlap": 0.25}),
     "actor.sequence_overlap: applies to recurrent actors (actor.recurrent_net); remove it"),
    (masked(actor={"sequence_overlap": 1.0}), "actor.sequence_overlap: must be in [0, 1), got 1.0"),
    (masked(algorithm={"targets_on_collector": True}),
     "algorithm.targets_on_collector: computes targets of single transitions; a recurrent DDQN trains on sequences"),
    (masked(scheme={"data_path": "replay_server", "num_col_workers": 2, "col_workers_communication": "async"},
            algorithm={"start_steps": 100}),
     "scheme.data_path: replay_server holds single transitions; a recurrent DDQN (RecurrentReplayBuffer) uses "
     "data_path direct or queues"),
    (masked(storage={"name": "RecurrentReplayBuffer", "burn_in": -1}), "storage.burn_in: must be >= 0, got -1"),
    ({**masked(algorithm={"name": "PPO"}), "storage": {"name": "RecurrentReplayBuffer", "size": 10}},
     "storage.name: PPO learns from an on-policy storage"),
    ({**masked(algorithm={"name": "PPO"}), "storage": {"name": "GAEBuffer", "size": 16},
      "actor": {"sequence_overlap": 0.2}},
     "actor.sequence_overlap: applies to off-policy algorithms"),
], ids=["sac", "per", "no-memory", "overlap-without-memory", "overlap-1", "collector-targets", "replay-server",
        "burn-in", "ppo-storage", "ppo-overlap"])
def test_yaml_mistakes_are_one_line_errors(raw, expected):
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert str(info.value).startswith(f"config error: {expected}") and "\n" not in str(info.value), str(info.value)


def test_yaml_recurrent_ddqn_defaults_to_sequence_replay():
    config = validate_config(masked())
    assert config["storage"]["name"] == "RecurrentReplayBuffer" and config["actor"]["sequence_overlap"] == 0.5
    assert validate_config(config) == config


# -------------------------------------------------------------------------- layouts


def train_and_check(scheme, steps):
    learner = Learner(scheme, target_steps=steps)
    try:
        infos = []
        while not learner.done():
            infos += [i["algo"] for i in learner.step()]
        assert learner.num_samples_collected >= steps and learner.num_updates > 0
        assert infos and all(math.isfinite(i["Loss"]) for i in infos)
        local = scheme.update_worker.local_worker
        assert local.storage.num_items > 0 and local.actor.is_recurrent
        return learner
    finally:
        learner.stop()


@pytest.mark.usefixtures("no_ray_import")
def test_one_process_trains_a_recurrent_ddqn():
    train_and_check(r2d2_scheme(), 640)


# ------------------------------------------------------------------ command line
R2D2_YAML = {"seed": 0, "env": {"id": "MaskedCartPole-v1", "vec_env_size": 2, "test_env": True},
             "algorithm": {"name": "DDQN", "update_every": 32, "num_updates": 2, "start_steps": 64,
                           "mini_batch_size": 16, "num_test_episodes": 1, "test_every": 100},
             "actor": {"recurrent_net": "LSTM", "recurrent_hidden_size": 8, "hidden_sizes": [16]},
             "storage": {"name": "RecurrentReplayBuffer", "size": 200, "sequence_length": 4, "burn_in": 2,
                         "n_step": 2, "alpha": 0.6},
             "learner": {"target_steps": 256, "checkpoint_replay": True, "log_every": 1}}


def test_train_resume_and_evaluate_a_recurrent_ddqn_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", write_config(tmp_path, R2D2_YAML), "--run-dir", str(run), "--progress", "quiet"]) == 0
    saved = read_checkpoint(str(run / "checkpoint.pt"))
    held = saved["replay"]["contents"]["num_items"]
    assert held > 0 and saved["replay"]["contents"]["arrays"][prl.RHS].shape[1:] == (16,)   # LSTM: h and c
    assert cli.main(["resume", str(run), "learner.target_steps=384", "--progress", "quiet"]) == 0
    resumed = read_checkpoint(str(run / "checkpoint.pt"))
    assert resumed["learner"]["num_samples_collected"] >= 384
    assert resumed["replay"]["contents"]["num_items"] > held        # continued from the saved replay
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out


class RecordingActor(OffPolicyActor):
    """A recurrent DDQN actor that keeps the states it is given and returns."""

    def act(self, obs, state=None, deterministic=False):
        action, extras, next_state = super().act(obs, state, deterministic)
        self.calls.append((None if state is None else state.copy(), next_state.copy()))
        return action, extras, next_state


def test_evaluation_carries_the_memory_through_each_episode():
    """`pytorchrl evaluate`'s episodes: each step acts from the state the previous step
    returned, each episode from the initial state."""
    env = gym.make("MaskedCartPole-v1")
    actor = RecordingActor("cpu", env.observation_space, env.action_space, recurrent_net="GRU",
                           recurrent_net_kwargs={"hidden_size": 16})
    actor.calls = []
    _, lengths = run_episodes(env, actor, 2, seed=3)
    assert len(actor.calls) == sum(lengths)
    first = {0, lengths[0]}
    for t, (given, returned) in enumerate(actor.calls):
        if t in first:
            assert given is not None and not given.any()
        else:
            np.testing.assert_array_equal(given, actor.calls[t - 1][1])
            assert given.any()


def test_a_config_mistake_on_the_command_line_is_one_line(tmp_path):
    path = write_config(tmp_path, {**R2D2_YAML, "storage": {"name": "ReplayBuffer", "size": 100}})
    assert_one_line_error(pytorchrl_in_process("train", path, "--dry-run", cwd=tmp_path),
                                     "storage.name: a recurrent DDQN (actor.recurrent_net) learns from sequences")
