"""Population-based training in place (``pytorchrl pbt``): the pbt section refused when it
names what cannot be perturbed, the decisions (who copies whom, the perturbed values), and
populations interleaved in this process: a copy in place, population.csv and the members'
hot_swaps.csv, Ctrl-C and ``pytorchrl resume``. Members as Ray actors, with distributed
schemes of their own: tests/distributed/test_pbt_ray.py."""

import math
import re
import signal

import numpy as np
import pytest
import torch
import yaml

from cli_helpers import PBT, pbt_config, png_size, read_csv, start_pytorchrl, tiny, write_config
from pytorchrl import cli
from pytorchrl.config import load_config
from pytorchrl.config.schema import MUTATION_KEYS
from pytorchrl.pbt import Parameter, Population, member_name, perturb, plan_exploits

# ------------------------------------------------------------------ refused configurations
BAD = {
    "another section": ({"mutations": {"actor.hidden_sizes": {"values": [[8]]}}},
                        "pbt.mutations.actor.hidden_sizes: only algorithm and storage parameters"),
    "fixed once built": ({"mutations": {"numpy_update": {"values": [True]}}},
                         "algorithm.numpy_update is fixed once PPO is built"),
    "unknown": ({"mutations": {"lrr": {"factors": [2.0]}}}, "pbt.mutations.lrr"),
    "no rule": ({"mutations": {"lr": {}}}, "says nothing: give factors, values or log_uniform"),
    "factors of a bool": ({"mutations": {"use_clipped_value_loss": {"factors": [2.0]}}}, "multiply numbers"),
    "values out of range": ({"mutations": {"clip_param": {"values": [0.1, -1.0]}}},
                            "pbt.mutations.clip_param.values.1"),
    "initial per member": ({"initial": {"lr": [1.0e-4, 1.0e-3]}}, "one value per member (3, pbt.population)"),
    "population of one": ({"population": 1}, "pbt.population"),
    "interval": ({"interval": 100000}, "no decision would ever be made"),
    "unknown pbt key": ({"intervall": 100}, "pbt.intervall"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_pbt_section_is_refused_with_exit_2_and_one_line(tmp_path, capsys, case):
    changes, expected = BAD[case]
    code = cli.main(["pbt", pbt_config(tmp_path, **changes), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "run").exists()


def test_a_scheduled_parameter_cannot_be_perturbed(tmp_path, capsys):
    config = tiny(pbt=PBT, schedules=[{"name": "lr", "target": "algorithm", "kind": "linear", "start": 1e-3,
                                      "end": 0.0}])
    code = cli.main(["pbt", write_config(tmp_path, config), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "algorithm.lr is driven by schedules.0" in err, err


def test_train_refuses_a_population_and_pbt_needs_mutations(tmp_path, capsys):
    assert cli.main(["train", pbt_config(tmp_path), "--run-dir", str(tmp_path / "run")]) == 2
    assert "pytorchrl pbt" in capsys.readouterr().err
    assert cli.main(["pbt", write_config(tmp_path), "--run-dir", str(tmp_path / "run")]) == 2
    assert "names no parameter to perturb" in capsys.readouterr().err


def test_population_on_the_command_line_and_the_keys_listed(tmp_path, capsys):
    assert cli.main(["pbt", pbt_config(tmp_path, initial={}), "--population", "5", "--dry-run"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["pbt"]["population"] == 5
    assert cli.main(["keys"]) == 0
    out = capsys.readouterr().out
    assert "pbt:" in out and all(f"  {key}:" in out for key in ("interval", "mutations", "quantile"))
    assert all(f"    {key}:" in out for key in MUTATION_KEYS)


# ------------------------------------------------------------------------ decisions
def _lr(spec):
    return Parameter("lr", "algorithm", "lr", "number", 0.0, None, False,
                     {"factors": None, "values": None, "log_uniform": None, "resample_probability": 0.25, **spec})


def test_perturbations_stay_in_their_ranges_and_say_how_and_when_clipped():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        value, how, clipped = perturb(_lr({"factors": [0.5, 2.0], "log_uniform": [1e-4, 1e-2]}), 8e-3, rng)
        assert 1e-4 <= value <= 1e-2 and how in ("x0.5", "x2", "resampled")
        # 8e-3 x 2 leaves the range: moved back to its top, and said so.
        assert clipped == ("the upper bound of log_uniform" if how == "x2" else None), (value, how, clipped)
        seen.add(how)
    assert seen == {"x0.5", "x2", "resampled"}
    assert perturb(_lr({"values": [0.9, 0.95]}), 0.5, rng)[0] in (0.9, 0.95)
    steps = Parameter("k", "storage", "k", "int", 1, None, True,
                      {"factors": [0.5], "values": None, "log_uniform": None, "resample_probability": 0.25})
    # Rounded to 0, kept at the parameter's lower bound, and said so.
    assert perturb(steps, 1, rng) == (1, "x0.5", "the parameter's lower bound")
    fraction = Parameter("gae_lambda", "storage", "gae_lambda", "number", 0.0, 1.0, True,
                         {"factors": [2.0], "values": None, "log_uniform": None, "resample_probability": 0.25})
    assert perturb(fraction, 0.9, rng) == (1.0, "x2", "the parameter's upper bound")
    assert perturb(fraction, 0.4, rng) == (0.8, "x2", None)


def test_the_bottom_quantile_copies_the_top_and_members_without_a_return_wait():
    rng = np.random.default_rng(0)
    assert plan_exploits({0: 10.0, 1: 50.0, 2: 30.0, 3: 20.0}, 0.25, rng) == [(0, 1)]
    plan = plan_exploits({0: 10.0, 1: 50.0, 2: 30.0, 3: 20.0}, 0.5, rng)
    assert [loser for loser, _ in plan] == [0, 3] and all(source in (1, 2) for _, source in plan)
    assert plan_exploits({0: None, 1: 5.0, 2: math.nan}, 0.5, rng) == []
    assert plan_exploits({0: 5.0, 1: 5.0}, 0.5, rng) == []      # no better member to copy


# --------------------------------------------------------------- interleaved populations
def test_a_copied_member_has_its_sources_weights_optimizer_and_perturbed_values(tmp_path):
    config = load_config(pbt_config(tmp_path))
    config["run_dir"] = str(tmp_path / "population")
    (tmp_path / "population").mkdir()
    population = Population(config, config["run_dir"], progress="quiet")
    try:
        population.start()
        population._call("train_until", lambda i: (128,))
        members = population.members.members
        source, loser = members[0], members[2]
        steps_before = loser.session.learner.num_samples_collected
        expected = source.state()
        answer = population.members.exploit(2, 0, {"algorithm.lr": 0.0042, "storage.gae_lambda": 0.9})
        copied = loser.session.learner
        weights = copied.update_worker.get_weights()
        assert weights.keys() == source.get_weights().keys()
        assert all(torch.equal(weights[k], v) for k, v in source.get_weights().items())
        saved, mine = _tensors(expected["worker"]["algo"]["optimizers"]), _tensors(
            copied.training_state()["worker"]["algo"]["optimizers"])
        assert saved and len(saved) == len(mine) and all(torch.equal(a, b) for a, b in zip(saved, mine))
        # The env steps stay the member's own; the update count comes with the policy.
        assert copied.num_samples_collected == steps_before
        assert copied.num_updates == source.session.learner.num_updates
        assert answer["values"]["algorithm.lr"] == 0.0042 and answer["values"]["storage.gae_lambda"] == 0.9
        for worker in copied.update_worker.get_hyperparameters()[0]:
            assert worker["algorithm"]["lr"] == 0.0042 and worker["storage"]["gae_lambda"] == 0.9
        # Training goes on from there, with the perturbed values.
        report = loser.train_until(192)
        assert report["env_steps"] >= 192 and report["values"]["algorithm.lr"] == 0.0042
    finally:
        population.close()
    swaps = read_csv(tmp_path / "population" / member_name(2) / "hot_swaps.csv")
    assert {(s["name"], s["source"], s["detail"]) for s in swaps} >= {("lr", "pbt", "copied member-0"),
                                                                      ("gae_lambda", "pbt", "copied member-0")}


def _tensors(state):
    """The tensors of a nested state (an optimizer's), in a fixed order."""
    out = []

    def walk(value):
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(value[key])
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
    walk(state)
    return out


def test_pbt_writes_the_population_and_names_the_best_member(tmp_path, capsys):
    run_dir = tmp_path / "population"
    # Every copy doubles lr (no resampling), and every member's lr is above half the top of
    # its range: each perturbed lr leaves the range and is clipped to 0.01, which the line
    # and population.csv say. (A progress line every learner.log_every s while the members
    # train: here between any two of their updates.)
    mutations = {"lr": {"factors": [2.0], "log_uniform": [1.0e-5, 1.0e-2], "resample_probability": 0.0},
                 "storage.gae_lambda": PBT["mutations"]["storage.gae_lambda"]}
    config = pbt_config(tmp_path, mutations=mutations, initial={"lr": [6.0e-3, 7.0e-3, 8.0e-3]})
    assert cli.main(["pbt", config, "learner.log_every=1e-6", "--run-dir", str(run_dir),
                     "--progress", "plain"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("training a population of 3"))
    decision = next(i for i, line in enumerate(lines) if line.startswith("128/384 env steps |"))
    progress = re.compile(r"\[ *\d+s\] env steps [\d,]+(-[\d,]+)?/384 \| [\d,]+ steps/s \| train_return: member-0 "
                          r"(-|[\d.]+), member-1 (-|[\d.]+), member-2 (-|[\d.]+) \| next decision at 128")
    assert any(progress.fullmatch(line) for line in lines[start + 1:decision]), "\n".join(lines[:decision + 1])
    rows = read_csv(run_dir / "population.csv")
    assert rows, out
    lr_rows = [row for row in rows if row["name"] == "algorithm.lr"]
    assert lr_rows and all(row["how"] == "x2, clipped" and float(row["new"]) == 0.01 for row in lr_rows), lr_rows
    decisions = [line for line in out.splitlines() if " copies member-" in line]
    assert len(decisions) == len(lr_rows) and all(
        ", clipped to the upper bound of log_uniform); storage.gae_lambda" in line for line in decisions), decisions
    best = yaml.safe_load((run_dir / "summary.yaml").read_text())["best"]
    assert f"best member: {best}" in out
    for index in range(3):
        member = run_dir / member_name(index)
        assert (member / "metrics.csv").is_file() and (member / "checkpoint.pt").is_file()
        assert "pbt" not in yaml.safe_load((member / "config.yaml").read_text())
    # Every perturbation of population.csv is a row of the replaced member's hot_swaps.csv.
    for row in rows:
        swaps = read_csv(run_dir / member_name(int(row["to"])) / "hot_swaps.csv")
        target, _, name = row["name"].partition(".")
        assert any(s["kind"] == target and s["name"] == name and s["source"] == "pbt"
                   and float(s["value"]) == float(row["new"]) and s["detail"] == f"copied member-{row['from']}"
                   for s in swaps), (row, swaps)
        assert float(row["to_metric"]) < float(row["from_metric"])
    # pytorchrl plot draws the members and marks the copies.
    copies = len({(row["step"], row["to"]) for row in rows})
    assert cli.main(["plot", str(run_dir), "-o", str(tmp_path / "curves.png")]) == 0
    out = capsys.readouterr().out
    assert "member-0 (1 run); member-1 (1 run); member-2 (1 run)" in out
    assert f"{copies} cop{'y' if copies == 1 else 'ies'} of a population marked" in out, out
    assert png_size(tmp_path / "curves.png")[0] > 0


def test_resume_continues_the_population(tmp_path, capsys):
    run_dir = tmp_path / "population"
    assert cli.main(["pbt", pbt_config(tmp_path, target_steps=256), "--run-dir", str(run_dir)]) == 0
    rows = read_csv(run_dir / "population.csv")
    assert cli.main(["resume", str(run_dir), "learner.target_steps=512"]) == 0
    out = capsys.readouterr().out
    assert "resuming a population of 3" in out
    more = read_csv(run_dir / "population.csv")
    assert more[:len(rows)] == rows and len(more) > len(rows)
    # The decisions go on from there: the one at 256 env steps, which the end of the first
    # run left unmade (as a population trained to 512 at once would have made it), then later ones.
    assert min(int(r["step"]) for r in more[len(rows):]) >= 256 > max(int(r["step"]) for r in rows)
    for index in range(3):
        metrics = read_csv(run_dir / member_name(index) / "metrics.csv")
        assert int(metrics[-1]["Scheme/EnvSteps"]) >= 512
    # A finished population asks for more steps, in one line.
    assert cli.main(["resume", str(run_dir)]) == 2
    assert "learner.target_steps" in capsys.readouterr().err


def test_ctrl_c_saves_every_member_and_resume_goes_on(tmp_path):
    run_dir = tmp_path / "population"
    proc = start_pytorchrl("pbt", pbt_config(tmp_path, target_steps=10_000_000), "--run-dir", run_dir,
                           "--progress", "plain", cwd=tmp_path)
    try:
        for line in proc.stdout:
            if " copies member-" in line:        # a decision was made
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "every member saved" in out and f"pytorchrl resume {run_dir}" in out
    for index in range(3):
        assert (run_dir / member_name(index) / "checkpoint.pt").is_file()
    state = yaml.safe_load((run_dir / "population.json").read_text())
    assert cli.main(["resume", str(run_dir), f"learner.target_steps={state['env_steps'] + 256}"]) == 0
    assert len(read_csv(run_dir / "population.csv")) >= state["rows"]


def test_a_member_whose_run_fails_is_dropped_with_one_line_and_the_rest_go_on(tmp_path, capsys):
    from pytorchrl.scheme.base.ray_runtime import WorkerFailure
    config = load_config(pbt_config(tmp_path))
    config["run_dir"] = str(tmp_path / "population")
    (tmp_path / "population").mkdir()
    population = Population(config, config["run_dir"], progress="plain")
    try:
        population.start()
        learner = population.members.members[1].session.learner

        def failing():
            raise WorkerFailure("collection worker 1 died 3 times (its restart limit): EOFError")
        learner.step = failing
        assert population.train() == "done"
        population.finish()
    finally:
        population.close()
    out = capsys.readouterr().out
    dropped = [line for line in out.splitlines() if "dropped" in line]
    assert len(dropped) == 1 and dropped[0].startswith("member-1 dropped from the population: collection worker 1 "
                                                        "died 3 times") and "2 members go on" in dropped[0], out
    summary = yaml.safe_load((tmp_path / "population" / "summary.yaml").read_text())
    assert set(summary["members"]) == {"member-0", "member-2"} and "member-1" in summary["dropped"]
    assert all(int(row["to"]) != 1 and int(row["from"]) != 1 for row in read_csv(tmp_path / "population" /
                                                                                   "population.csv"))
