"""Recurrent on-policy actors (GRU, LSTM memories): state carried and reset by the
collector, sequence mini-batches that re-evaluate exactly what was acted, the numpy fast
paths stepping aside, checkpoints, configuration, and the one-process scheme (two Ray
collectors: tests/distributed/test_recurrent_ray.py). Real gymnasium CartPole, real torch:
no mocks.
"""

import logging
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor, get_memory_network
from pytorchrl.agent.actors.memory_networks import GRU, LSTM
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.config import ConfigError, build_learner, load_config, validate_config
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker

from cli_helpers import REPO, with_sections

from recurrent_helpers import actor_factory, env_factory


#: Episodes of this many steps (time limit): episode ends at known steps of each rollout.
EPISODE = 5


def collector(algo=PPO, net="GRU", shared=True, num_envs=4, size=8, **hyper):
    """A CWorker on CartPole with episodes of ``EPISODE`` steps and a recurrent actor."""
    envs, action_space, obs_space = env_factory(num_envs, max_episode_steps=EPISODE)
    algo_factory, name = algo.create_factory(**hyper)
    return CWorker(0, 0, algo_factory, actor_factory(obs_space, action_space, name, net, shared),
                   GAEBuffer.create_factory(size=size), train_envs_factory=envs)


def memory_from_zero(actor, observations):
    """The state after acting on ``observations`` (T, N, ...) from the initial state."""
    state = actor.initial_state(observations.shape[1])
    for obs in observations:
        _, _, state = actor.act(obs, state)
    return state


# ------------------------------------------------------------------------- names

@pytest.mark.parametrize("net", [GRU, LSTM])
def test_memory_step_is_torch_cell_and_sequence_resets_at_episode_ends(net):
    """One step equals torch's own cell; ``sequence`` equals stepping one at a time with the
    state zeroed after each ended episode (what the collector does while acting)."""
    torch.manual_seed(0)
    memory = net(5, hidden_size=7)
    x, state = torch.randn(6, 3, 5), torch.randn(3, memory.state_size)
    out, next_state = memory(x[0], state)
    if net is GRU:
        expected = memory.cell(x[0], state)
        np.testing.assert_allclose(next_state.detach().numpy(), expected.detach().numpy(), atol=1e-6)
    else:
        expected, cell = memory.cell(x[0], (state[:, :7], state[:, 7:]))
        np.testing.assert_allclose(next_state[:, 7:].detach().numpy(), cell.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), atol=1e-6)

    done = torch.zeros(6, 3, 1)
    done[1, 0] = done[3, 2] = 1.0
    by_steps, h = [], state
    for t in range(6):
        out, h = memory(x[t], h)
        by_steps.append(out)
        h = h * (1.0 - done[t])
    np.testing.assert_allclose(memory.sequence(x, state, done).detach().numpy(),
                               torch.stack(by_steps).detach().numpy(), atol=1e-5)

def test_memory_networks_by_name_and_unknown_names_refused():
    assert get_memory_network("GRU") is GRU and get_memory_network("lstm") is LSTM
    assert get_memory_network(GRU) is GRU
    with pytest.raises(ValueError, match=r"unknown memory network 'RNN'; valid names: GRU, LSTM"):
        get_memory_network("RNN")
    space, actions = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    with pytest.raises(ValueError, match="unknown memory network 'Transformer'"):
        OnPolicyActor.create_factory(space, actions, "PPO", recurrent_net="Transformer")
    with pytest.raises(ValueError, match="hidden_size must be a positive integer"):
        OnPolicyActor("cpu", space, actions, recurrent_net="GRU", recurrent_net_kwargs={"hidden_size": 0})


# ---------------------------------------------------------------- state handling
@pytest.mark.parametrize("net", ["GRU", "LSTM"])
def test_state_is_reset_at_episode_ends_and_carried_across_rollouts(net):
    """Rollouts of 8 steps, episodes of 5: each rollout's stored start state is the state
    reached by the steps since the last episode end, from a zero state."""
    worker = collector(net=net, size=8)
    actor = worker.actor
    first, _ = worker.collect_data()
    second, _ = worker.collect_data()
    third, _ = worker.collect_data()
    assert np.all(first[prl.RHS].numpy() == 0)                    # the very first start is the initial state
    assert first[prl.TRUNC].numpy()[EPISODE - 1].all()             # every episode ended after step 5
    # Rollout 2 starts 3 steps into the second episodes: the state of those 3 steps alone.
    expected = memory_from_zero(actor, first[prl.OBS].numpy()[EPISODE:])
    np.testing.assert_allclose(second[prl.RHS].numpy(), expected, atol=1e-6)
    assert np.abs(second[prl.RHS].numpy()).max() > 1e-3            # carried, not zeroed
    without_reset = memory_from_zero(actor, first[prl.OBS].numpy())
    assert np.abs(without_reset - expected).max() > 1e-4           # a reset actually mattered
    # Rollout 3 starts 1 step into the fourth episodes (ended after steps 10 and 15).
    expected = memory_from_zero(actor, second[prl.OBS].numpy()[7:])
    np.testing.assert_allclose(third[prl.RHS].numpy(), expected, atol=1e-6)


def test_truncated_episodes_are_valued_with_the_state_that_reached_them():
    worker = collector(size=8)
    data, _ = worker.collect_data()
    obs = data[prl.OBS].numpy()
    state = memory_from_zero(worker.actor, obs[:EPISODE])             # the state before the reset
    # The final observation of each truncated episode is not in OBS (the next episode's
    # first one is): rebuild it by stepping identical environments with the same actions.
    envs, _, _ = env_factory(4, max_episode_steps=EPISODE)
    replay = envs("cpu", 0, 0, "train")
    replay.reset_numpy()
    for t in range(EPISODE):
        _, _, _, _, final = replay.step_numpy(data[prl.ACT].numpy()[t].reshape(-1))
    final_obs = np.stack([final[i] for i in range(4)])
    expected = worker.actor.values(final_obs, state)
    np.testing.assert_allclose(data[prl.TRUNC_VAL].numpy()[EPISODE - 1], expected, atol=1e-6)


# ------------------------------------------------------------- sequence batches
@pytest.mark.parametrize("net,shared", [("GRU", True), ("GRU", False), ("LSTM", True), ("LSTM", False)])
def test_sequence_mini_batches_reevaluate_exactly_what_was_acted(net, shared):
    """First epoch, before any update: log-probabilities and values recomputed over the
    sequences (from the stored start state, with the resets) are the acting ones: ratio 1."""
    worker = collector(net=net, shared=shared, num_envs=4, size=12, num_mini_batch=2, num_epochs=1)
    worker.collect_data()                                           # start the next one mid-episode
    data, _ = worker.collect_data()
    storage, algo = worker.storage, worker.algo
    storage.add_data(data)
    seen = []
    for batch in storage.batches():
        T, B = batch[prl.OBS].shape[:2]
        assert (T, B) == (12, 2) and batch[prl.RHS].shape[0] == 2 and batch[prl.ACT].shape[0] == T * B
        seen += [tuple(batch[prl.RHS][b].tolist()) for b in range(B)]
        with torch.no_grad():
            logp, _, value = worker.actor.evaluate_actions(batch[prl.OBS], batch[prl.ACT], rhs=batch[prl.RHS],
                                                           done=batch[prl.DONE])
        torch.testing.assert_close(logp, batch[prl.LOGP], atol=1e-5, rtol=0)
        torch.testing.assert_close(value, batch[prl.VAL], atol=1e-5, rtol=0)
        _, info = algo.compute_gradients(batch, return_grads=False)
        assert info["ClipFraction"] == 0.0 and abs(info["ApproxKL"]) < 1e-7
    # Each environment's whole rollout is in exactly one mini-batch of the epoch.
    assert sorted(seen) == sorted(tuple(r) for r in data[prl.RHS].tolist())


def test_a2c_trains_on_the_whole_rollout_as_one_sequence_batch():
    worker = collector(algo=A2C, num_envs=3, size=6)
    data, _ = worker.collect_data()
    worker.storage.add_data(data)
    batches = list(worker.storage.batches())
    assert len(batches) == 1 and batches[0][prl.OBS].shape[:2] == (6, 3)
    before = [p.detach().clone() for p in worker.actor.memory.parameters()]
    grads, _ = worker.algo.compute_gradients(batches[0])
    assert worker.algo.apply_gradients(grads)
    assert any(not torch.equal(a, b) for a, b in zip(before, worker.actor.memory.parameters()))


def test_more_mini_batches_than_environments_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"num_mini_batch=5 with a recurrent actor.*only 4 \(vec_env_size\)"):
        collector(num_envs=4, num_mini_batch=5)


class MemoryActor(OnPolicyActor):
    """A recurrent actor of its own name: its notices are new to this process."""


class MemoryPPO(PPO):
    """PPO under a name of its own (same loss): its notices are new to this process."""


def test_numpy_fast_paths_step_aside_and_say_so_once(caplog):
    envs, action_space, obs_space = env_factory(2)
    algo_factory, name = MemoryPPO.create_factory(num_epochs=1)
    make_actor = MemoryActor.create_factory(obs_space, action_space, name, recurrent_net="GRU")
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        for _ in range(2):
            worker = CWorker(0, 0, algo_factory, make_actor, GAEBuffer.create_factory(size=4),
                             train_envs_factory=envs)
            data, _ = worker.collect_data()
            worker.storage.add_data(data)
            for batch in worker.storage.batches():
                worker.algo.compute_gradients(batch)
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "numpy acting not used" in m] == \
        ["MemoryActor: numpy acting not used (recurrent actor (numpy runs feed-forward networks)); "
         "acting in torch"]
    assert [m for m in messages if "numpy update not used" in m] == \
        ["MemoryPPO: numpy update not used (recurrent actor (numpy runs feed-forward networks)); updating in torch"]


# ------------------------------------------------------------------ checkpoints
def test_recurrent_actor_weights_and_checkpoints_restore(tmp_path):
    envs, action_space, obs_space = env_factory(2, env_id="MaskedCartPole-v1")
    algo_factory, name = PPO.create_factory(num_epochs=1, test_every=10 ** 9)
    make = dict(algo_factory=algo_factory, actor_factory=actor_factory(obs_space, action_space, name, "LSTM"),
                storage_factory=GAEBuffer.create_factory(size=8), train_envs_factory=envs)
    learner = Learner(Scheme(**make), target_steps=64, log_dir=str(tmp_path))
    try:
        while not learner.done():
            learner.step()
        path = learner.save_checkpoint(str(tmp_path / "checkpoint.pt"))
        learner.save_model()
        trained = learner.update_worker.local_worker.actor.state_dict()
    finally:
        learner.stop()
    assert any(k.startswith("memory.") for k in trained)
    resumed = Learner(Scheme(**make), target_steps=128, log_dir=str(tmp_path / "resumed"))
    try:
        resumed.load_checkpoint(path)
        restored = resumed.update_worker.local_worker.actor.state_dict()
        assert all(torch.equal(trained[k], restored[k]) for k in trained)
        while not resumed.done():                                     # and it trains on
            resumed.step()
    finally:
        resumed.stop()
    # The saved model restarts a fresh actor (restart_model), memory included.
    fresh = actor_factory(obs_space, action_space, name, "LSTM")("cpu")
    fresh.load_restart_model(str(tmp_path / "model.state_dict"))
    assert all(torch.equal(trained[k], v) for k, v in fresh.state_dict().items())


# ------------------------------------------------------------------ configuration
MASKED = {"seed": 0, "env": {"id": "MaskedCartPole-v1", "vec_env_size": 2},
          "algorithm": {"name": "PPO", "num_epochs": 1, "num_mini_batch": 2, "test_every": 10 ** 9},
          "actor": {"recurrent_net": "GRU", "recurrent_hidden_size": 8, "hidden_sizes": [8]},
          "storage": {"name": "GAEBuffer", "size": 8}, "learner": {"target_steps": 32}}


def test_yaml_recurrent_actor_builds_and_trains(tmp_path):
    learner = build_learner(validate_config(MASKED), log_dir=str(tmp_path))
    try:
        actor = learner.update_worker.local_worker.actor
        assert isinstance(actor.memory, GRU) and actor.memory.hidden_size == 8
        assert actor.input_space.shape == (2,)                       # positions only
        while not learner.done():
            learner.step()
    finally:
        learner.stop()


def test_shipped_masked_cartpole_example_is_a_gru_ppo():
    config = load_config(os.path.join(REPO, "examples", "configs", "ppo_cartpole_masked_gru.yaml"))
    assert config["env"]["id"] == "MaskedCartPole-v1" and config["actor"]["recurrent_net"] == "GRU"
    assert config["algorithm"]["name"] == "PPO"


@pytest.mark.parametrize("raw,expected", [
    (with_sections(MASKED, actor={"recurrent_net": "RNN"}),
     "actor.recurrent_net: expected one of 'GRU', 'LSTM' or null"),
    (with_sections(MASKED, algorithm={"num_mini_batch": 3}), "algorithm.num_mini_batch: 3 with a recurrent actor"),
    ({**MASKED, "algorithm": {"name": "DDQN"}, "storage": {"name": "ReplayBuffer", "size": 100}},
     "storage.name: a recurrent DDQN (actor.recurrent_net) learns from sequences: RecurrentReplayBuffer, got "
     "'ReplayBuffer'"),
], ids=["unknown name", "too many mini-batches", "off-policy"])
def test_yaml_recurrent_mistakes_are_one_line_errors(raw, expected):
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert expected in str(info.value) and "\n" not in str(info.value)
