"""Nothing silently ignored: a hot-swapped Adam eps reaches every optimizer; scheme options
that the layout never uses are refused by the configuration (warned about by ``Scheme``);
``collect_train_data`` collects exactly what it is asked or says why; ``CWorkerSet`` takes
pytorchrl's positional arguments."""

import copy
import logging

import gymnasium as gym
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO, SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.agent.storages import GAEBuffer, ReplayBuffer
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker, no_envs
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet

from cli_helpers import TINY, pytorchrl_in_process, with_sections, write_config


def cartpole(vec_env_size=2):
    return VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=vec_env_size, seed=0)


def ppo_factories(vec_env_size=2, size=8, **ppo):
    train, action_space, obs_space = cartpole(vec_env_size)
    algo, name = PPO.create_factory(**ppo)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": [8]})
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=GAEBuffer.create_factory(size=size),
                train_envs_factory=train)


def sac_factories(**sac):
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "Pendulum-v1"}, vec_env_size=1)
    algo, name = SAC.create_factory(**sac)
    actor = OffPolicyActor.create_factory(obs_space, action_space, name,
                                          common_feature_extractor_kwargs={"hidden_sizes": [8]})
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=100),
                train_envs_factory=train)


# ------------------------------------------------------------------ eps hot-swap
def random_grads(algo, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=g) * scale for p in algo.trainable_parameters()]


def assert_next_step_uses_eps(algo, eps):
    """Every optimizer reports ``eps`` and its next step is torch.optim.Adam's with that eps
    (from the same state and gradients)."""
    grads = random_grads(algo, seed=2)
    by_param = {id(p): g for p, g in zip(algo.trainable_parameters(), grads)}
    expected = {}
    for name, params in algo.parameter_groups().items():
        opt = algo.optimizers[name]
        assert opt.param_groups[0]["eps"] == eps and opt.state_dict()["param_groups"][0]["eps"] == eps
        clones = [p.detach().clone().requires_grad_() for p in params]
        ref = torch.optim.Adam(clones, lr=opt.param_groups[0]["lr"])
        ref.load_state_dict(copy.deepcopy(opt.state_dict()))   # (torch's shares its state tensors)
        ref.param_groups[0]["eps"] = eps
        for c, p in zip(clones, params):
            c.grad = by_param[id(p)].clone()
        ref.step()
        expected.update({id(p): c.detach() for p, c in zip(params, clones)})
    assert algo.apply_gradients(grads)
    for p in algo.trainable_parameters():
        # Steps of about lr = 1e-2, which eps = 1 halves: float32 rounding is far below.
        torch.testing.assert_close(p.detach(), expected[id(p)], rtol=0, atol=1e-6)


@pytest.mark.parametrize("numpy_update", [True, False], ids=["numpy", "torch"])
@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_a_hot_swapped_eps_reaches_every_optimizer(algo, numpy_update):
    # No clipping: the reference steps are torch.optim.Adam's on the raw gradients.
    factories = ppo_factories(numpy_update=numpy_update, lr=1e-2, max_grad_norm=None) if algo == "PPO" else \
        sac_factories(numpy_update=numpy_update, start_steps=0, lr_q=1e-2, lr_pi=1e-2, lr_alpha=1e-2,
                      max_grad_norm=None)
    with Learner(Scheme(**factories), target_steps=1000) as learner:
        local = learner.update_worker.local_worker.algo
        assert len(local.optimizers) == (1 if algo == "PPO" else 3)
        assert all(isinstance(o, NumpyAdam) == numpy_update for o in local.optimizers.values())
        assert local.apply_gradients(random_grads(local, seed=1))   # the optimizers have a state
        old = local.eps
        assert learner.update_algorithm_parameter("eps", 1.0) == 1.0 != old
        assert_next_step_uses_eps(local, 1.0)
        # The collectors' copies of the algorithm have it too (they share the scheme's path).
        hyper = learner.scheme.get_hyperparameters()
        assert all(w["algorithm"]["eps"] == 1.0 for group in hyper for w in group)


# ---------------------------------------------------------- ineffective options
REFUSED = [
    ({"num_col_workers": 2, "col_workers_communication": "async", "fraction_samples": 0.8},
     "scheme.fraction_samples: 0.8 has no effect with scheme.col_workers_communication: async (stragglers are "
     "cut in synchronous rounds only); remove it, or set scheme.col_workers_communication: sync"),
    ({"fraction_workers": 0.5},
     "scheme.fraction_workers: 0.5 has no effect with scheme.num_col_workers: 1 (one collection worker has no "
     "stragglers to cut); remove it, or set scheme.num_col_workers: 2 or more"),
    ({"num_col_workers": 2, "max_policy_lag": 3},
     "scheme.max_policy_lag: 3 has no effect with scheme.col_workers_communication: sync (synchronous rounds "
     "collect with the current weights: the lag is always 0); remove it, or set "
     "scheme.col_workers_communication: async"),
    ({"col_workers_communication": "async", "max_policy_lag": 3},
     "scheme.max_policy_lag: 3 has no effect with scheme.num_col_workers: 1"),
    ({"num_grad_workers": 2, "max_grad_lag": 2},
     "scheme.max_grad_lag: 2 has no effect with scheme.grad_workers_communication: sync (synchronous gradients "
     "are computed from the current weights); remove it, or set scheme.grad_workers_communication: async"),
    ({"grad_workers_communication": "async", "max_grad_lag": 2},
     "scheme.max_grad_lag: 2 has no effect with scheme.num_grad_workers: 1"),
    ({"preset": "sync-collectors-preemptive", "col_workers_communication": "async"},
     "scheme.fraction_samples: 0.75 has no effect with scheme.col_workers_communication: async"),
    ({"decentralized_update_execution": True},
     "scheme.decentralized_update_execution: true has no effect with scheme.num_grad_workers: 1 (one gradient "
     "worker has no peer to all-reduce its gradients with: it applies its updates itself); remove it, or set "
     "scheme.num_grad_workers: 2 or more"),
    ({"col_workers_resources": {"num_cpus": 64, "num_gpus": 4}},
     "scheme.col_workers_resources: {'num_cpus': 64, 'num_gpus': 4} has no effect with scheme.num_col_workers: 1 "
     "(one collection worker runs in its gradient worker's process, which no Ray resources are reserved for); "
     "remove it, or set scheme.num_col_workers: 2 or more"),
    ({"grad_workers_resources": {"num_cpus": 1}},
     "scheme.grad_workers_resources: {'num_cpus': 1} has no effect with scheme.num_grad_workers: 1 (one gradient "
     "worker runs in the learner's process"),
]


@pytest.mark.parametrize("scheme, message", REFUSED)
def test_options_the_layout_never_uses_are_refused(scheme, message):
    with pytest.raises(ConfigError) as info:
        validate_config(with_sections(TINY, scheme=scheme))
    assert str(info.value).startswith(f"config error: {message}")


@pytest.mark.parametrize("scheme", [
    {"num_col_workers": 2, "col_workers_communication": "async", "fraction_samples": 1.0, "fraction_workers": 1,
     "max_policy_lag": None, "max_grad_lag": None},          # defaults written out: nothing to ignore
    {"num_col_workers": 2, "fraction_samples": 0.5, "fraction_workers": 0.5},
    {"num_col_workers": 2, "col_workers_communication": "async", "max_policy_lag": 3},
    {"num_grad_workers": 2, "grad_workers_communication": "async", "max_grad_lag": 2},
    {"preset": "sync-collectors-preemptive"},
])
def test_options_that_act_are_accepted_and_a_resolved_config_passes_again(scheme):
    config = validate_config(with_sections(TINY, scheme=scheme))
    assert validate_config(config) == config


def test_scheme_warns_once_per_option_it_ignores(caplog):
    caplog.set_level(logging.WARNING, logger="pytorchrl")
    scheme = Scheme(**ppo_factories(), col_preemption_thresholds={"fraction_samples": 0.8}, max_grad_lag=2,
                    max_policy_lag=None)
    scheme.stop()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Scheme:")]
    assert lines == [
        "Scheme: col_preemption_thresholds['fraction_samples']=0.8 has no effect with num_col_workers=1 (one "
        "collection worker has no stragglers to cut); it is ignored (it acts with num_col_workers=2 or more)",
        "Scheme: max_grad_lag=2 has no effect with grad_workers_communication=prl.SYNC (synchronous gradients are "
        "computed from the current weights); it is ignored (it acts with grad_workers_communication=prl.ASYNC)"]


def test_scheme_warns_of_resources_and_all_reduce_a_worker_in_this_process_never_uses(caplog):
    # Impossible resources on this machine (no GPU, 2 CPUs), asked of workers that run in the
    # learner's process, and DD-PPO's all-reduce with no peer: each warned about, then the
    # scheme runs in this process (an episode budget, refused with decentralized updates of
    # several gradient workers, is taken).
    caplog.set_level(logging.WARNING, logger="pytorchrl")
    scheme = Scheme(**ppo_factories(), col_workers_resources={"num_cpus": 64, "num_gpus": 4},
                    grad_workers_resources={"num_cpus": 64}, decentralized_update_execution=True)
    try:
        assert not scheme.uses_ray and not scheme.update_worker.decentralized
        learner = Learner(scheme, target_steps=10 ** 6, target_episodes=2)
        while not learner.done():
            learner.step()
        assert learner.num_episodes >= 2
    finally:
        scheme.stop()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Scheme:")]
    assert lines == [
        "Scheme: decentralized_update_execution=True has no effect with num_grad_workers=1 (one gradient worker has "
        "no peer to all-reduce its gradients with: it applies its updates itself); it is ignored (it acts with "
        "num_grad_workers=2 or more)",
        "Scheme: col_workers_resources={'num_cpus': 64, 'num_gpus': 4} has no effect with num_col_workers=1 (one "
        "collection worker runs in its gradient worker's process, which no Ray resources are reserved for); it is "
        "ignored (it acts with num_col_workers=2 or more)",
        "Scheme: grad_workers_resources={'num_cpus': 64} has no effect with num_grad_workers=1 (one gradient worker "
        "runs in the learner's process, which no Ray resources are reserved for); it is ignored (it acts with "
        "num_grad_workers=2 or more)"]


def test_cli_refuses_an_option_the_layout_never_uses(tmp_path):
    result = pytorchrl_in_process("train", write_config(tmp_path), "scheme.max_grad_lag=2", "--run-dir", tmp_path / "run",
                                  cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "config error: scheme.max_grad_lag: 2 has no effect with scheme.grad_workers_communication: sync "
        "(synchronous gradients are computed from the current weights); remove it, or set "
        "scheme.grad_workers_communication: async"), result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


# ------------------------------------------------------------ collect_train_data
class CountSteps(gym.Wrapper):
    """Counts the steps taken in it (across episodes); every instance is listed in ``BUILT``."""

    BUILT = []

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0
        CountSteps.BUILT.append(self)

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


def counted_cartpole():
    return CountSteps(gym.make("CartPole-v1"))


def test_collect_train_data_takes_exactly_the_steps_asked_or_says_why():
    """A step is one step of every environment of the vector (pytorchrl's meaning): 100
    steps of 2 environments are 200 samples, all kept in the storage."""
    train, action_space, obs_space = VecEnv.create_factory(counted_cartpole, vec_env_size=2)
    f = ppo_factories(size=100)
    CountSteps.BUILT.clear()
    worker = CWorker(0, 0, f["algo_factory"], f["actor_factory"], f["storage_factory"], train_envs_factory=train)
    try:
        envs = list(CountSteps.BUILT)
        assert len(envs) == 2
        col_time, _ = worker.collect_train_data(100)
        data = worker.storage.get_data()
        assert data[prl.OBS].shape[:2] == (100, 2) and data[prl.REW].numel() == 200 and col_time > 0
        assert [e.steps for e in envs] == [100, 100]
        worker.collect_train_data(40)
        assert worker.storage.get_data()[prl.OBS].shape[:2] == (40, 2) and [e.steps for e in envs] == [140, 140]
        worker.collect_train_data()
        assert worker.storage.get_data()[prl.OBS].shape[:2] == (100, 2)
        with pytest.raises(ValueError, match=r"collect_train_data\(num_steps=101\): the storage holds one rollout "
                                             r"of 100 steps \(of 2 environments each\); the steps beyond it would "
                                             r"be collected and lost"):
            worker.collect_train_data(101)
        for bad in (0, -5, 2.5, True):
            with pytest.raises(ValueError, match="needs num_steps >= 1"):
                worker.collect_train_data(bad)
        assert [e.steps for e in envs] == [240, 240]   # the refused requests took no step
    finally:
        worker.stop()


# ---------------------------------------------------------- CWorkerSet signature
def test_cworkerset_takes_pytorchrl_positional_arguments():
    """As pytorchrl documents them: CWorkerSet(num_workers, index_parent, algo_factory,
    actor_factory, storage_factory, local_device, initial_weights, fraction_samples,
    total_parent_workers, compress_data_to_send, train_envs_factory, test_envs_factory,
    worker_remote_config) and create_factory(num_workers, algo_factory, actor_factory,
    storage_factory, test_envs_factory, train_envs_factory, total_parent_workers,
    col_fraction_samples, compress_data_to_send, col_worker_resources)."""
    f = ppo_factories()
    resources = {"num_cpus": 0.5}
    s = CWorkerSet(0, 3, f["algo_factory"], f["actor_factory"], f["storage_factory"], "cpu", None, 0.5, 2, "auto",
                   f["train_envs_factory"], no_envs, resources)
    try:
        assert (s.index_parent, s.fraction_samples, s.total_parent_workers, s.compress_data_to_send) == \
            (3, 0.5, 2, "auto")
        assert s.remote_config["num_cpus"] == 0.5 and s.fraction_workers == 1.0
        assert s.local_worker().envs_train is not None and s.local_worker().envs_test is None
        (data, info), = s.collect()[0]
        assert info["collected_samples"] == 16
    finally:
        s.stop()
    factory = CWorkerSet.create_factory(0, f["algo_factory"], f["actor_factory"], f["storage_factory"], no_envs,
                                        f["train_envs_factory"], 2, 0.5, "auto", resources)
    s = factory("cpu", None, 1)
    try:
        assert (s.index_parent, s.fraction_samples, s.total_parent_workers, s.compress_data_to_send) == \
            (1, 0.5, 2, "auto")
        assert s.remote_config["num_cpus"] == 0.5 and s.local_worker().envs_train is not None
    finally:
        s.stop()


def test_workers_take_their_torch_threads_from_pytorchrl_torch_threads(monkeypatch):
    """Collection and gradient workers run torch on one thread unless
    PYTORCHRL_TORCH_THREADS asks for more (convolutional learners that have the cores to
    themselves); a value that is not a positive integer is refused, not ignored."""
    try:
        monkeypatch.setenv("PYTORCHRL_TORCH_THREADS", "2")
        with Learner(Scheme(**ppo_factories()), target_steps=16) as learner:
            assert torch.get_num_threads() == 2
            learner.step()
            assert torch.get_num_threads() == 2
        monkeypatch.delenv("PYTORCHRL_TORCH_THREADS")
        with Learner(Scheme(**ppo_factories()), target_steps=16):
            assert torch.get_num_threads() == 1
        for bad in ("0", "two", "-1"):
            monkeypatch.setenv("PYTORCHRL_TORCH_THREADS", bad)
            with pytest.raises(ValueError, match=f"PYTORCHRL_TORCH_THREADS must be a positive integer .*{bad!r}"):
                Scheme(**ppo_factories())
    finally:
        torch.set_num_threads(1)
