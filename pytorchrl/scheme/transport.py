"""Packing of rollouts and gradients for the wire: optional lz4 per array, byte accounting.

Workers never compress or serialize by hand: they call ``pack`` before sending and
``unpack`` after receiving. Arrays travel as numpy arrays (Ray moves them without an extra
pickle) or, when compressed, as one lz4 frame each; there is no base64 and no pickling
inside the payload.

Compression modes:

- ``False``: never compress.
- ``True``: compress every array.
- ``"auto"``: compress only arrays where lz4 pays off: integer images and other uint8
  arrays of at least ``AUTO_MIN_BYTES`` (lz4 gains 1.0-1.35x on float observations, which
  is not worth the time, and 37-100x on Atari frames: see ANCHORS.md).
"""

import sys
import warnings

import lz4.frame
import numpy as np

AUTO_MIN_BYTES = 64 * 1024


def is_tensor(value):
    """Whether ``value`` (any object) is a torch tensor, without importing torch: a process
    that has not imported it (a queue server) holds none, since unpickling a tensor imports
    torch first."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _from_numpy(arr):
    import torch
    return torch.from_numpy(arr)


class Packed:
    """A packed dict of arrays; ``raw_bytes`` and ``sent_bytes`` count the payload.

    Attributes
    ----------
    items : dict
        key -> (kind, payload, dtype, shape); kind is "lz4", "np" or "obj".
    raw_bytes : int
        Size of the arrays before compression.
    sent_bytes : int
        Size of the arrays as sent.
    """

    __slots__ = ("items", "raw_bytes", "sent_bytes")

    def __init__(self, items, raw_bytes, sent_bytes):
        self.items = items
        self.raw_bytes = raw_bytes
        self.sent_bytes = sent_bytes

    @property
    def ratio(self):
        """Compression ratio (raw / sent), 1.0 for an empty payload."""
        return self.raw_bytes / self.sent_bytes if self.sent_bytes else 1.0


def _should_compress(arr, compress):
    if compress is True:
        return True
    if compress == "auto":
        return arr.dtype == np.uint8 and arr.nbytes >= AUTO_MIN_BYTES
    return False


def pack(data, compress=False):
    """Pack a dict of tensors/arrays (other values pass through unchanged).

    Parameters
    ----------
    data : dict
        Values: torch tensors (moved to CPU), numpy arrays, or any picklable object.
    compress : bool or "auto"
        Compression mode (see the module docstring).

    Returns
    -------
    Packed
    """
    if compress not in (True, False, "auto"):
        raise ValueError(f"compress must be True, False or 'auto', got {compress!r}")
    items, raw, sent = {}, 0, 0
    for key, value in data.items():
        if is_tensor(value):
            value = value.detach().cpu().numpy()
        if isinstance(value, np.ndarray):
            # ascontiguousarray makes 0-d arrays 1-d: keep the shape (a scalar parameter's gradient).
            arr = np.ascontiguousarray(value).reshape(value.shape)
            raw += arr.nbytes
            if _should_compress(arr, compress):
                payload = lz4.frame.compress(arr.data, compression_level=0, store_size=True)
                items[key] = ("lz4", payload, arr.dtype.str, arr.shape)
                sent += len(payload)
            else:
                items[key] = ("np", arr, None, None)
                sent += arr.nbytes
        else:
            items[key] = ("obj", value, None, None)
    return Packed(items, raw, sent)


def unpack(packed, to_torch=True):
    """Inverse of ``pack``: a dict of tensors (or numpy arrays with ``to_torch=False``).

    Plain dicts (data that was never packed) are returned as they are.
    """
    if not isinstance(packed, Packed):
        return packed
    out = {}
    for key, (kind, payload, dtype, shape) in packed.items.items():
        if kind == "lz4":
            arr = np.frombuffer(lz4.frame.decompress(payload), dtype=np.dtype(dtype)).reshape(shape).copy()
        elif kind == "np":
            arr = payload if payload.flags.writeable else payload.copy()
        else:
            out[key] = payload
            continue
        out[key] = _from_numpy(arr) if to_torch else arr
    return out


def payload_bytes(data):
    """Bytes of the arrays and tensors among the values of ``data`` (a dict), as ``pack``
    counts them uncompressed: what a rollout handed over without packing weighs."""
    total = 0
    for value in data.values():
        if is_tensor(value):
            total += value.numel() * value.element_size()
        elif isinstance(value, np.ndarray):
            total += value.nbytes
    return total


def weights_to_wire(state_dict):
    """Actor weights as a dict of numpy arrays, the form in which they are ``ray.put``.

    Ray stores numpy buffers as they are and hands readers zero-copy views, where a dict of
    torch tensors is pickled on the way in and out: 2.5x cheaper to put and 10x cheaper to
    get (measured on the PPO CartPole actor). Tensors numpy cannot hold (bfloat16) stay
    tensors.

    Parameters
    ----------
    state_dict : dict of torch.Tensor
        Actor weights (on any device).
    """
    out = {}
    for key, value in state_dict.items():
        if is_tensor(value):
            value = value.detach().cpu()
            try:
                value = value.numpy()
            except TypeError:  # a dtype numpy lacks
                pass
        out[key] = value
    return out


def weights_from_wire(weights):
    """Inverse of ``weights_to_wire``: a dict of tensors ready for ``load_state_dict``.

    Arrays read from Ray's object store are read-only views; the tensors wrapping them are
    only copied from (``load_state_dict`` copies into the parameters), so no copy is made
    here. Dicts of tensors pass through unchanged.
    """
    out = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for key, value in weights.items():
            out[key] = _from_numpy(value) if isinstance(value, np.ndarray) else value
    return out


class WeightBroadcast:
    """The weights a worker set sends with its requests, prepared once per version.

    Large weights are ``ray.put`` once per version and the same reference goes with every
    request made with that version, so Ray reads them once per node. Weights of at most
    ``inline_max_bytes`` ride inside the requests instead: Ray copies small arguments into
    the task itself, while a put costs an object-store round trip on the sending side and
    a fetch on every receiving side. On CartPole-sized actors with 8 asynchronous
    collectors on 2 cores that round trip cost 10-15 % of the env steps/s
    (benchmarks/scaling_latency/run.py).

    Parameters
    ----------
    get_weights : callable
        ``get_weights()`` -> the current actor state dict (tensors).
    inline_max_bytes : int
        Largest weights (in bytes) sent inside the requests; Ray's own limit for arguments
        it copies into a task is 100 KiB. 0 always puts.
    stats : dict or None
        Where to count ``weight_versions_sent`` and ``weight_puts`` (the owner's statistics
        dict; None: a dict of its own, ``self.stats``).
    """

    INLINE_MAX_BYTES = 100 * 1024

    def __init__(self, get_weights, inline_max_bytes=None, stats=None):
        self.get_weights = get_weights
        self.inline_max_bytes = self.INLINE_MAX_BYTES if inline_max_bytes is None else int(inline_max_bytes)
        self.stats = {} if stats is None else stats
        self.stats.update(weight_versions_sent=0, weight_puts=0)
        self._payload = None
        self._version = None
        self.nbytes = 0   # size of the prepared weights (what each request carries)

    def current(self, version):
        """What to send as ``weights`` with a request made at ``version``: a dict of numpy
        arrays (small weights) or an ObjectRef to one (large weights; Ray hands the actor
        the dict either way)."""
        if self._version != version:
            wire = weights_to_wire(self.get_weights())
            size = sum(v.nbytes for v in wire.values() if isinstance(v, np.ndarray))
            self.nbytes = size
            if size <= self.inline_max_bytes:
                # Copies: the arrays of weights_to_wire may share memory with parameters
                # an optimizer will change in place before the request is serialized.
                self._payload = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in wire.items()}
            else:
                from pytorchrl.scheme.base.ray_runtime import require_ray
                self._payload = require_ray().put(wire)
                self.stats["weight_puts"] += 1
            self._version = version
            self.stats["weight_versions_sent"] += 1
        return self._payload

    def invalidate(self):
        """Forget the prepared weights: the actor changed without a new version number (a
        restored checkpoint, a replaced actor)."""
        self._payload = None
        self._version = None
