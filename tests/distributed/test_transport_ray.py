"""Weight broadcast on Ray: weights over the inline size are put in the object store once per
version (the wire format itself: tests/unit/test_transport.py)."""

import torch

from _util import linear_net


def test_large_weights_are_put_once_per_version(ray_session):
    from pytorchrl.scheme.transport import WeightBroadcast, weights_from_wire
    net = linear_net(8192)                               # 4 x 8192 + 8192 x 2 floats: 224 KiB
    broadcast = WeightBroadcast(net.state_dict)
    ref = broadcast.current(5)
    assert isinstance(ref, ray_session.ObjectRef)
    assert broadcast.current(5) is ref
    got = weights_from_wire(ray_session.get(ref))
    assert all(torch.equal(got[k], v) for k, v in net.state_dict().items())
    assert broadcast.current(6) is not ref
    assert broadcast.stats == {"weight_versions_sent": 2, "weight_puts": 2}
    # The threshold is the owner's choice: 0 puts even the smallest weights.
    assert isinstance(WeightBroadcast(linear_net(2).state_dict, inline_max_bytes=0).current(0),
                      ray_session.ObjectRef)
