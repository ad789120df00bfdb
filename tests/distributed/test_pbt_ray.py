"""Population-based training with members as Ray actors whose own schemes are distributed:
a copy goes from actor to actor through the object store, the copied member's weights equal
its source's, the perturbed values are in force on every worker of its scheme, and no
process restarts. (The pbt section, decisions, resume and Ctrl-C: tests/cli/test_cli_pbt.py.)"""

import torch

from cli_helpers import read_csv, tiny, write_config
from pytorchrl import cli
from pytorchrl.config import load_config
from pytorchrl.pbt import Population, member_name

#: Two members, each a scheme of a local and a remote collection worker; everything fits
#: the 2 CPUs of the session's Ray instance.
PBT = {"population": 2, "interval": 128, "quantile": 0.5, "execution": "ray", "member_resources": {"num_cpus": 0.25},
       "mutations": {"lr": {"factors": [0.5, 2.0]}, "storage.gae_lambda": {"values": [0.9, 0.99]}},
       "initial": {"lr": [1.0e-4, 3.0e-3]}}
SCHEME = {"num_col_workers": 2, "col_workers_resources": {"num_cpus": 0.25}}


def _config(tmp_path, target_steps=512, scheme=SCHEME):
    return write_config(tmp_path, tiny(learner={"target_steps": target_steps}, scheme=scheme, pbt=PBT), "pbt.yaml")


def test_a_copy_between_actors_brings_the_weights_and_the_values_reach_every_worker(ray_session, tmp_path):
    ray = ray_session
    config = load_config(_config(tmp_path))
    config["run_dir"] = str(tmp_path / "population")
    (tmp_path / "population").mkdir()
    population = Population(config, config["run_dir"], progress="quiet")
    try:
        population.start()
        population._call("train_until", lambda i: (128,))
        source, loser = population.members.members[0], population.members.members[1]
        pids = ray.get([source.process_info.remote(), loser.process_info.remote()])
        changes = {"algorithm.lr": 0.0042, "storage.gae_lambda": 0.99}
        answer = population.members.exploit(1, 0, changes)
        expected, copied = ray.get([source.get_weights.remote(), loser.get_weights.remote()])
        assert expected.keys() == copied.keys()
        assert all(torch.equal(copied[k], v) for k, v in expected.items())
        assert answer["values"]["algorithm.lr"] == 0.0042
        workers = [w for group in ray.get(loser.get_hyperparameters.remote()) for w in group]
        assert [w["role"] for w in workers] == ["gradient", "collection", "collection"]   # remote ones answer
        for worker in workers:
            assert worker["algorithm"]["lr"] == 0.0042 and worker["storage"]["gae_lambda"] == 0.99, worker
        # The member goes on training in the same processes, with the perturbed values.
        (report, error), = population.members.call({1: ("train_until", (256,))}).values()
        assert error is None and report["env_steps"] >= 256 and report["values"]["algorithm.lr"] == 0.0042
        assert ray.get([source.process_info.remote(), loser.process_info.remote()]) == pids
    finally:
        population.close()


def test_pbt_with_ray_actors_end_to_end(ray_session, tmp_path, capsys):
    run_dir = tmp_path / "population"
    assert cli.main(["pbt", _config(tmp_path), "--run-dir", str(run_dir), "--progress", "plain"]) == 0
    out = capsys.readouterr().out
    assert "side by side as Ray actors" in out and "best member: member-" in out
    rows = read_csv(run_dir / "population.csv")
    assert rows
    for row in rows:
        swaps = read_csv(run_dir / member_name(int(row["to"])) / "hot_swaps.csv")
        assert any(s["source"] == "pbt" and s["detail"] == f"copied member-{row['from']}" for s in swaps)


def test_a_member_whose_actor_dies_is_dropped_and_the_rest_go_on(ray_session, tmp_path, capsys):
    # (One collector, in its member's process: no resources of its own to ask for.)
    config = load_config(_config(tmp_path, target_steps=384, scheme={"num_col_workers": 1}))
    config["pbt"]["population"], config["pbt"]["initial"] = 3, {"lr": [1.0e-4, 1.0e-3, 3.0e-3]}
    config["run_dir"] = str(tmp_path / "population")
    (tmp_path / "population").mkdir()
    population = Population(config, config["run_dir"], progress="plain")
    try:
        population.start()
        ray_session.kill(population.members.members[2])
        assert population.train() == "done"
        summary = population.finish()
    finally:
        population.close()
    dropped = [line for line in capsys.readouterr().out.splitlines() if "dropped" in line]
    assert len(dropped) == 1 and dropped[0].startswith("member-2 dropped from the population: the process of "
                                                        "member-2") and "2 members go on" in dropped[0], dropped
    assert set(summary["members"]) == {"member-0", "member-1"} and list(summary["dropped"]) == ["member-2"]
