"""RND-PPO with Ray collectors: short runs of the synchronous, asynchronous and DD-PPO layouts,
and resumed remote collectors that start from the saved normalisation statistics."""

import math

import pytest

from pytorchrl.config import build_learner

from rnd_ppo_helpers import ROLLOUT, WARM_UP, short_config, train_rnd, train_and_save, assert_same_statistics


@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset", ["sync-collectors", "async-collectors", "dd-ppo"])
def test_rnd_ppo_runs_with_ray_collectors(ray_session, tmp_path, preset):
    """Ray collectors (synchronous, asynchronous) and remote gradient workers (DD-PPO's
    decentralized updates: the predictor's gradients are all-reduced with the actor's)."""
    # (The resources of the level the preset spreads over Ray: a worker of the learner's
    # process takes none, and the configuration refuses them there.)
    level = "grad" if preset == "dd-ppo" else "col"
    learner, infos = train_rnd(short_config(f"scheme.preset={preset}",
                                            f"scheme.{level}_workers_resources={{num_cpus: 0.25}}"))
    assert learner.scheme.uses_ray and learner.scheme.num_col_workers >= 1
    assert infos and all(math.isfinite(i["Loss"]) for i in infos)
    assert any(i["IntrinsicReward"] > 0 for i in infos)


@pytest.mark.timeout(300)
def test_resumed_ray_collectors_start_from_the_first_collectors_statistics(ray_session, tmp_path):
    ray_scheme = ("scheme.preset=sync-collectors", "scheme.col_workers_resources={num_cpus: 0.25}")
    # Two collectors of 2 environments: a round is 2 rollouts.
    saved = train_and_save(short_config("learner.target_steps=128", *ray_scheme), tmp_path / "checkpoint.pt")
    assert saved["obs_rms"]["count"] == WARM_UP + ROLLOUT
    resumed = build_learner(short_config("learner.target_steps=256", *ray_scheme))
    try:
        resumed.load_checkpoint(str(tmp_path / "checkpoint.pt"))
        remotes = resumed.update_worker.local_worker.col_workers.remote_workers()
        assert len(remotes) == 2
        for state in ray_session.get([w.get_collector_state.remote() for w in remotes]):
            assert_same_statistics(state, saved)
        resumed.step()
        counts = [s["obs_rms"]["count"] for s in ray_session.get([w.get_collector_state.remote() for w in remotes])]
    finally:
        resumed.stop()
    assert counts == [saved["obs_rms"]["count"] + ROLLOUT] * 2
