"""Transport layer: pack/unpack round trips are bit-exact, and bytes are counted right."""

import pickle

import numpy as np
import pytest
import torch

from pytorchrl.scheme.transport import AUTO_MIN_BYTES, Packed, pack, unpack

from _util import linear_net


def _payload():
    rng = np.random.default_rng(0)
    return {
        "obs": torch.from_numpy(rng.standard_normal((64, 8, 4)).astype(np.float32)),
        "val": torch.from_numpy(rng.standard_normal((65, 8, 1))),          # float64
        "frames": torch.from_numpy(rng.integers(0, 4, (16, 4, 84, 84), dtype=np.uint8)),  # Atari-like
        "act": torch.from_numpy(rng.integers(0, 6, (64, 8, 1))),           # int64
        "done": torch.zeros(64, 8, 1, dtype=torch.bool),
        "np_int": rng.integers(-5, 5, (10, 3)).astype(np.int32),           # numpy stays numpy-able
        "empty": torch.zeros(0, 8, 4),
        "nan": torch.tensor([float("nan"), float("inf"), -0.0, 1e-45]),    # special floats keep their bits
        "meta": {"version": 3},                                             # non-array passes through
    }


def _assert_bit_exact(a, b):
    assert set(a) == set(b)
    for key, value in a.items():
        got = b[key]
        if isinstance(value, (torch.Tensor, np.ndarray)):
            va = value.numpy() if isinstance(value, torch.Tensor) else value
            vb = got.numpy() if isinstance(got, torch.Tensor) else got
            assert va.dtype == vb.dtype, key
            assert va.shape == vb.shape, key
            assert va.tobytes() == vb.tobytes(), key
        else:
            assert got == value, key


@pytest.mark.parametrize("mode", [False, True, "auto"])
def test_round_trip_is_bit_exact(mode):
    data = _payload()
    packed = pack(data, compress=mode)
    # What a remote worker sends goes through pickling (Ray's serializer is pickle-based).
    packed = pickle.loads(pickle.dumps(packed, protocol=5))
    out = unpack(packed)
    _assert_bit_exact(data, out)
    assert all(isinstance(v, torch.Tensor) for k, v in out.items() if k != "meta")
    for key in ("obs", "frames", "act"):
        out[key].view(-1)[0] = 1  # received arrays are writable (storages modify them in place)


@pytest.mark.parametrize("mode", [False, True, "auto"])
def test_byte_accounting(mode):
    data = _payload()
    raw = sum(v.numel() * v.element_size() if isinstance(v, torch.Tensor) else v.nbytes
              for v in data.values() if isinstance(v, (torch.Tensor, np.ndarray)))
    packed = pack(data, compress=mode)
    assert packed.raw_bytes == raw
    kinds = {k: item[0] for k, item in packed.items.items()}
    if mode is False:
        assert packed.sent_bytes == raw and packed.ratio == 1.0
        assert set(kinds.values()) <= {"np", "obj"}
    elif mode is True:
        assert all(kinds[k] == "lz4" for k in data if k != "meta")
        # Low-entropy uint8 frames compress well, so the whole payload shrinks.
        assert packed.sent_bytes < raw and packed.ratio > 1.5
    else:
        # "auto": only uint8 arrays of at least AUTO_MIN_BYTES are compressed.
        assert data["frames"].numel() >= AUTO_MIN_BYTES
        assert kinds["frames"] == "lz4"
        assert all(kinds[k] == "np" for k in ("obs", "val", "act", "done", "np_int", "empty", "nan"))
        assert packed.sent_bytes < raw


def test_unpack_to_numpy_and_plain_dicts_pass_through():
    data = {"x": np.arange(12, dtype=np.uint8).reshape(3, 4)}
    out = unpack(pack(data, compress=True), to_torch=False)
    assert isinstance(out["x"], np.ndarray) and out["x"].tobytes() == data["x"].tobytes()
    plain = {"y": torch.ones(2)}
    assert unpack(plain) is plain


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="compress must be"):
        pack({"x": torch.zeros(2)}, compress="yes")


def test_packed_ratio_of_empty_payload():
    assert Packed({}, 0, 0).ratio == 1.0


def test_weights_travel_as_numpy_and_come_back_bit_exact():
    from pytorchrl.scheme.transport import weights_from_wire, weights_to_wire
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    state = net.state_dict()
    state["steps"] = torch.tensor(7)                       # an integer buffer
    state["half"] = torch.ones(3, dtype=torch.bfloat16)    # numpy has no bfloat16: stays a tensor
    wire = pickle.loads(pickle.dumps(weights_to_wire(state), protocol=5))
    assert all(isinstance(v, np.ndarray) for k, v in wire.items() if k != "half")
    assert isinstance(wire["half"], torch.Tensor)
    for arr in wire.values():  # what Ray hands a reader: read-only views
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False
    back = weights_from_wire(wire)
    for k, v in state.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    other.load_state_dict({k: v for k, v in back.items() if k not in ("steps", "half")})
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), other.parameters()))
    assert weights_from_wire(state)["steps"] is state["steps"]  # tensors pass through


def test_small_weights_ride_inside_requests_and_are_detached_from_the_parameters():
    from pytorchrl.scheme.transport import WeightBroadcast
    net = linear_net(8)
    stats = {"other": 1}
    broadcast = WeightBroadcast(net.state_dict, stats=stats)
    sent = broadcast.current(0)
    assert isinstance(sent, dict) and all(isinstance(v, np.ndarray) for v in sent.values())
    assert broadcast.current(0) is sent                   # one copy per version
    before = {k: v.copy() for k, v in sent.items()}
    with torch.no_grad():                                 # an optimizer step, in place
        for p in net.parameters():
            p.add_(1.0)
    for k, v in before.items():                           # the prepared copy did not move
        assert np.array_equal(sent[k], v), k
    newer = broadcast.current(1)
    assert newer is not sent and np.array_equal(newer["0.bias"], net[0].bias.detach().numpy())
    broadcast.invalidate()
    assert broadcast.current(1) is not newer              # same number, rebuilt after invalidate
    assert stats == {"other": 1, "weight_versions_sent": 3, "weight_puts": 0}
