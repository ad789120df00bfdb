"""Checkpoints of the in-process scheme: a resumed run continues exactly like an
uninterrupted one, files are written so that nothing is lost, and are read back without
executing code from them, with one-line causes for every file that cannot be used."""

import copy
import errno
import os
import random

import numpy as np
import pytest
import torch

from pytorchrl import checkpoint as ckpt
from pytorchrl.config import build_learner, validate_config
from pytorchrl.config.build import build_env_factories

from cli_helpers import tiny

# The in-process scheme must run without Ray (DESIGN, principle 2).
pytestmark = pytest.mark.usefixtures("no_ray_import")

#: CartPole, PPO, 2 envs x 16 steps per round, 2 epochs x 2 shuffled mini-batches: 4
#: updates per round; no test environments (their evaluations would not change training).
CONFIG = validate_config(tiny(env={"test_env": False}, learner={"target_steps": 100_000}))
UPDATES_PER_ROUND = 4
N = 3 * UPDATES_PER_ROUND     # updates before the checkpoint
K = 2 * UPDATES_PER_ROUND     # updates compared after it


def train(learner, updates):
    for _ in range(updates):
        learner.step()


def local(learner):
    """The gradient worker of the in-process scheme (its actor is also the collector's)."""
    return learner.update_worker.local_worker


def snapshot(learner):
    """Everything a resumed run must continue from: weights, optimizer, version, counters,
    recent returns, and every random state that acting and mini-batch shuffling use."""
    worker = local(learner)
    return {
        "algo": copy.deepcopy(worker.algo.state_dict()),     # actor, optimizer, hyperparameters, updates
        "version": worker.version,
        "counters": (learner.num_samples_collected, learner.num_updates, learner.num_episodes),
        "returns": (list(learner.metrics.episodes), list(learner.metrics.episode_lengths)),
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                "actor": copy.deepcopy(ckpt.generator_states(worker.actor))},
    }


def assert_same(a, b, where="state"):
    """Exact equality of nested dicts, lists, tuples, tensors and arrays."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def scramble_random_states():
    """What a new process starts from: other random states than the saved run's."""
    torch.manual_seed(12345)
    np.random.seed(12345)
    random.seed(12345)


def resumed_learner(path):
    learner = build_learner(CONFIG)
    scramble_random_states()
    learner.load_checkpoint(path)
    return learner


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run B's first part (N updates, a checkpoint, stopped) and run A, the uninterrupted
    run: the same N updates, then K more. A resumed job starts new episodes, so run A
    starts new ones at the same point, from the same environment factory (``replace_agent_component``
    builds and resets them as a new job does): from there on both runs see the same data
    only if the weights, optimizer and every random generator came back exactly."""
    path = str(tmp_path_factory.mktemp("ckpt") / "checkpoint.pt")
    first = build_learner(CONFIG)
    train(first, N)
    first.save_checkpoint(path)
    first.stop()

    uninterrupted = build_learner(CONFIG)
    train(uninterrupted, N)
    at_checkpoint = snapshot(uninterrupted)
    uninterrupted.replace_agent_component("envs_train", build_env_factories(CONFIG)[0])
    train(uninterrupted, K)
    after = snapshot(uninterrupted)
    uninterrupted.stop()
    return path, at_checkpoint, after


def test_resume_restores_every_state_and_continues_like_the_uninterrupted_run(runs):
    path, at_checkpoint, after = runs
    learner = resumed_learner(path)
    try:
        # Weights, optimizer, version, counters, recent returns and random states are back...
        assert_same(snapshot(learner), at_checkpoint)
        # ... and the next K updates (new rollouts: sampled actions, shuffled mini-batches)
        # give the uninterrupted run's weights, optimizer, counters, returns and random states.
        train(learner, K)
        assert_same(snapshot(learner), after)
        assert learner.num_episodes > at_checkpoint["counters"][2]   # episodes ended meanwhile
    finally:
        learner.stop()


@pytest.mark.parametrize("forgotten", ["actor generator", "torch generator", "optimizer"])
def test_the_comparison_notices_a_state_that_is_not_restored(runs, forgotten):
    # The test above is meaningful: leaving out any one of these states changes the weights.
    path, at_checkpoint, after = runs
    learner = resumed_learner(path)
    try:
        worker = local(learner)
        if forgotten == "actor generator":   # numpy acting samples the actions from it
            for name in ckpt.generator_states(worker.actor):
                getattr(worker.actor, name).bit_generator.state = np.random.default_rng(7).bit_generator.state
        elif forgotten == "torch generator":  # mini-batches are shuffled with it
            torch.manual_seed(7)
        else:
            worker.algo.optimizer.load_state_dict(build_learner(CONFIG).update_worker.local_worker.algo
                                                  .optimizer.state_dict())
        train(learner, K)
        weights = local(learner).algo.state_dict()["actor"]
        assert any(not torch.equal(weights[k], after["algo"]["actor"][k]) for k in weights)
    finally:
        learner.stop()


# ------------------------------------------------------------------------- format
def test_checkpoint_holds_plain_values_only(runs):
    path = runs[0]
    # Loadable by torch's safe loader: no object of the file is rebuilt by running code.
    state = torch.load(path, map_location="cpu", weights_only=True)
    assert state["format"] == ckpt.FORMAT == 2
    assert state["algorithm"] == "PPO" and state["actor"] == "OnPolicyActor"
    assert isinstance(state["rng"]["numpy"]["keys"], torch.Tensor) and state["rng"]["actor"]
    assert state["learner"]["num_samples_collected"] == 3 * 32


def test_to_plain_converts_numpy_and_refuses_objects():
    plain = ckpt.to_plain({"a": np.float32(1.5), "b": np.arange(3), "c": [np.int64(2), (1, "x")]})
    assert plain["a"] == 1.5 and type(plain["a"]) is float and type(plain["c"][0]) is int
    assert torch.equal(plain["b"], torch.arange(3))
    state_dict = torch.nn.Linear(2, 2).state_dict()
    assert ckpt.to_plain(state_dict) is state_dict          # nothing to convert: kept as it is
    with pytest.raises(TypeError, match=r"extra\.config\.x\[1\]: a builtins.object cannot be saved"):
        ckpt.to_plain({"x": [1, object()]}, "extra.config")


def test_extra_that_cannot_be_stored_plainly_is_refused_before_writing(tmp_path):
    learner = build_learner(CONFIG)
    try:
        with pytest.raises(TypeError, match="extra.handle"):
            learner.save_checkpoint(str(tmp_path / "c.pt"), extra={"handle": object()})
        assert os.listdir(tmp_path) == []
    finally:
        learner.stop()


# ------------------------------------------------------------------------ writing
@pytest.fixture
def learner(tmp_path):
    lrn = build_learner(CONFIG, log_dir=str(tmp_path / "run"))
    train(lrn, UPDATES_PER_ROUND)
    yield lrn
    lrn.stop()


def _steps_in(path):
    return ckpt.read_checkpoint(path)["learner"]["num_samples_collected"]


def test_each_save_keeps_the_previous_checkpoint(learner):
    path = learner.save_checkpoint()
    assert os.path.basename(path) == "checkpoint.pt" and not os.path.exists(ckpt.previous_path(path))
    train(learner, UPDATES_PER_ROUND)
    learner.save_checkpoint()
    assert _steps_in(path) == 64 and _steps_in(os.path.join(learner.log_dir, "checkpoint.prev.pt")) == 32
    assert not [f for f in os.listdir(learner.log_dir) if f.endswith(".tmp")]
    learner.save_checkpoint(keep_previous=False)
    assert _steps_in(ckpt.previous_path(path)) == 32


def _fail(stage, monkeypatch):
    """Make the next save fail at ``stage`` as a full disk would."""
    real_replace = os.replace

    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    if stage == "writing":
        def half_written(obj, f, *args, **kwargs):
            f.write(b"PK\x03\x04 half a checkpoint")
            f.flush()
            disk_full()
        monkeypatch.setattr(torch, "save", half_written)
    elif stage == "syncing":
        monkeypatch.setattr(ckpt, "fsync_file", disk_full)
    else:   # between the renames: checkpoint.pt moved to checkpoint.prev.pt, the new one not in place
        def replace(src, dst):
            if src.endswith(ckpt.TMP_SUFFIX):
                disk_full()
            return real_replace(src, dst)
        monkeypatch.setattr(ckpt.os, "replace", replace)


@pytest.mark.parametrize("stage", ["writing", "syncing", "renaming"])
def test_a_failed_save_loses_nothing(learner, monkeypatch, stage):
    path = learner.save_checkpoint()
    before = open(path, "rb").read()
    train(learner, UPDATES_PER_ROUND)
    _fail(stage, monkeypatch)
    with pytest.raises(ckpt.SaveError) as info:
        learner.save_checkpoint()
    monkeypatch.undo()
    message = str(info.value)
    assert message == f"cannot write {path}: No space left on device" and "\n" not in message
    assert not os.path.exists(path + ckpt.TMP_SUFFIX)
    # The last complete checkpoint is where resume looks for it: checkpoint.pt, or (a save
    # cut between its two renames) checkpoint.prev.pt, byte for byte.
    kept = path if stage != "renaming" else ckpt.previous_path(path)
    assert open(kept, "rb").read() == before and _steps_in(kept) == 32
    # The next save works again.
    learner.save_checkpoint()
    assert _steps_in(path) == 64


def test_a_failed_model_save_keeps_the_previous_model(learner, monkeypatch):
    path = learner.save_model()
    before = open(path, "rb").read()
    _fail("syncing", monkeypatch)
    with pytest.raises(ckpt.SaveError, match="cannot write .*model.state_dict: No space left on device"):
        learner.save_model()
    assert open(path, "rb").read() == before and not os.path.exists(path + ckpt.TMP_SUFFIX)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_loses_nothing(learner):
    # A real ENOSPC, even for root: the temporary file is made a link to /dev/full, the
    # device on which every write fails with "No space left on device".
    path = learner.save_checkpoint()
    model = learner.save_model()
    before, model_before = open(path, "rb").read(), open(model, "rb").read()
    train(learner, UPDATES_PER_ROUND)
    os.symlink("/dev/full", path + ckpt.TMP_SUFFIX)
    with pytest.raises(ckpt.SaveError) as info:
        learner.save_checkpoint()
    assert str(info.value) == f"cannot write {path}: No space left on device"
    os.symlink("/dev/full", model + ckpt.TMP_SUFFIX)
    with pytest.raises(ckpt.SaveError, match=f"cannot write {model}: .* MiB free on its file system"):
        learner.save_model()
    assert open(path, "rb").read() == before and open(model, "rb").read() == model_before
    assert not [f for f in os.listdir(learner.log_dir) if f.endswith(ckpt.TMP_SUFFIX)]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions that apply (root writes anywhere)")
def test_a_directory_that_is_not_writable_loses_nothing(learner):
    path = learner.save_checkpoint()
    before = open(path, "rb").read()
    os.chmod(learner.log_dir, 0o500)
    try:
        with pytest.raises(ckpt.SaveError, match="cannot write .*checkpoint.pt: Permission denied"):
            learner.save_checkpoint()
    finally:
        os.chmod(learner.log_dir, 0o700)
    assert open(path, "rb").read() == before


def test_remove_orphans_removes_only_temporary_files_of_the_given_names(tmp_path):
    for name in ("checkpoint.pt.tmp", "model.state_dict.tmp", "notes.tmp", "checkpoint.pt"):
        (tmp_path / name).write_bytes(b"x")
    assert ckpt.remove_orphans(str(tmp_path), ["checkpoint.pt", "model.state_dict", "config.yaml"]) == \
        ["checkpoint.pt.tmp", "model.state_dict.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt", "notes.tmp"]



def test_a_dead_processs_temporary_file_is_an_orphan_a_live_ones_is_not(tmp_path):
    """``<name>.<pid>.tmp`` (``pytorchrl.tools.process_tmp_path``) is removed when its process
    is gone; another live process's is kept: it may be about to rename it."""
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    live = os.getppid()
    for name in (f"config.yaml.{dead}.tmp", f"config.yaml.{live}.tmp", f"config.yaml.{os.getpid()}.tmp",
                 "config.yaml.notes.tmp"):
        (tmp_path / name).write_bytes(b"x")
    removed = ckpt.remove_orphans(str(tmp_path), ["config.yaml"])
    assert sorted(removed) == sorted([f"config.yaml.{dead}.tmp", f"config.yaml.{os.getpid()}.tmp"])
    assert sorted(os.listdir(tmp_path)) == sorted([f"config.yaml.{live}.tmp", "config.yaml.notes.tmp"])


def test_two_processes_write_the_configuration_of_one_run_directory_at_once(tmp_path):
    """Ray Tune may start a trial in a new actor while the previous one still writes the
    trial's run directory: each process writes config.yaml through a temporary file of its
    own, so neither renames the other's away (with one shared config.yaml.tmp the second
    rename failed with FileNotFoundError: measured in a Tune PBT run). The other process is
    held between writing its temporary file and renaming it while this one writes."""
    from pytorchrl.tools.session import write_config
    written_r, written_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        status = 1
        try:
            rename = os.replace

            def held(src, dst):
                os.write(written_w, b"w")
                os.read(go_r, 1)
                rename(src, dst)

            os.replace = held
            write_config(str(tmp_path), {"seed": 1}, "(the other process)")
            status = 0
        finally:
            os._exit(status)
    os.close(written_w)    # (so that a child that fails before it writes ends the read below)
    try:
        assert os.read(written_r, 1) == b"w"       # its temporary file written, not renamed yet
        write_config(str(tmp_path), {"seed": 2}, "(this process)")
    finally:
        os.write(go_w, b"g")
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "(the other process)" in (tmp_path / "config.yaml").read_text()      # renamed last
    assert os.listdir(tmp_path) == ["config.yaml"]

# ------------------------------------------------------------------------ reading
def _damage(path, kind):
    data = open(path, "rb").read()
    if kind == "empty":
        data = b""
    elif kind == "random bytes":
        data = np.random.default_rng(0).bytes(4096)
    elif kind == "truncated":
        data = data[:len(data) // 2]
    elif kind == "flipped byte":   # in the middle of the tensors: only the checksums see it
        middle = len(data) // 2
        data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
    with open(path, "wb") as f:
        f.write(data)


DAMAGE = [("empty", "the file is empty"),
          ("random bytes", "the file is not an archive written by torch.save"),
          ("truncated", "the file is truncated"),
          ("flipped byte", "fails its checksum")]


@pytest.mark.parametrize("kind,cause", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_checkpoint_is_refused_before_anything_changes(learner, kind, cause):
    path = learner.save_checkpoint()
    _damage(path, kind)
    before = snapshot(learner)
    with pytest.raises(ckpt.CheckpointError) as info:
        learner.load_checkpoint(path)
    assert info.value.damaged and cause in info.value.cause and "\n" not in str(info.value)
    assert str(info.value).startswith(path + ": ")
    assert_same(snapshot(learner), before)


def test_an_older_or_newer_format_is_named(learner, tmp_path):
    old = str(tmp_path / "format1.pt")
    # What pytorchrl 0.2.0 wrote: numpy's random state pickled as an array.
    torch.save({"format": 1, "worker": {}, "rng": {"numpy": np.random.get_state()}}, old)
    with pytest.raises(ckpt.CheckpointError, match="written by an older pytorchrl \\(checkpoint format 1; "
                                                   "this version reads format 2") as info:
        learner.load_checkpoint(old)
    assert not info.value.damaged
    new = str(tmp_path / "format9.pt")
    torch.save({"format": 9}, new)
    with pytest.raises(ckpt.CheckpointError, match="written by a newer pytorchrl \\(checkpoint format 9"):
        learner.load_checkpoint(new)
    other = str(tmp_path / "weights.pt")
    torch.save({"x": torch.zeros(2)}, other)
    with pytest.raises(ckpt.CheckpointError, match="not a pytorchrl checkpoint"):
        learner.load_checkpoint(other)


def _other_agent(change):
    config = tiny(env={"test_env": False})
    if change == "other network":
        config["actor"] = {"hidden_sizes": [8]}
    else:
        config["algorithm"] = {"name": "A2C"}
    return build_learner(validate_config(config))


@pytest.mark.parametrize("change,cause", [
    ("other network", "its network does not match this run's actor: "),
    ("other algorithm", "saved by algorithm PPO; this run's algorithm is A2C"),
])
def test_a_checkpoint_of_another_agent_is_refused_before_anything_changes(learner, change, cause):
    path = learner.save_checkpoint()
    other = _other_agent(change)
    try:
        before = snapshot(other)
        with pytest.raises(ckpt.CheckpointError) as info:
            other.load_checkpoint(path)
        assert cause in info.value.cause and not info.value.damaged and "\n" not in str(info.value)
        assert_same(snapshot(other), before)
    finally:
        other.stop()
