"""The update of an algorithm on a CUDA device as captured CUDA graphs.

On a GPU, the update of a small network (two layers of 256 units, a mini-batch of 256) is
bound by the launch of its kernels: a few hundred small kernels, each costing the CPU more
to launch (Python, dispatch, autograd bookkeeping) than the GPU to run. Captured once as a
CUDA graph (``torch.cuda.CUDAGraph``) and replayed, the whole of ``compute_gradients``'
work (the losses, the backward pass of each parameter group, the gradients) is one launch.

``CudaGraphUpdate`` captures ``Algorithm.loss_tensors`` followed by
``Algorithm.write_gradients`` -- the reference computation itself, not a rewrite of it --
once per *signature*: the keys, shapes, dtypes and devices of the mini-batch, the
hyperparameters the loss may read (all but the optimizers' learning rates and eps, so that a
learning-rate schedule does not capture anew) and ``Algorithm.update_variant()`` (TD3's
policy delay). A replay copies the new mini-batch into the graph's static inputs, replays,
points every parameter's ``.grad`` at the graph's gradients and reads the statistics back
once. ``apply_gradients`` (clipping, the non-finite check, Adam) runs after it, uncaptured.

The graph is captured directly (``torch.cuda.CUDAGraph``), not through ``torch.compile``'s
"reduce-overhead" mode: compiling costs seconds per signature and traces a second program
(one that ``torch.autograd.grad`` per parameter group and the fused losses'
``autograd.Function`` would break into pieces), where a direct capture records the very
kernels the eager update launches, so that the self-check below can demand agreement to
float rounding.

- Randomness: SAC's and TD3's noise come from the default CUDA generator, which a capture
  registers: each replay draws fresh numbers from the generator's current state and advances
  it as the eager update would (the same numbers for the same state).
- Self-check: no GPU validated this code where it was written. The first replay of each
  signature is compared with the eager update of the same mini-batch from the same random
  state; if the gradients or statistics differ beyond float rounding, the update says so
  once and stays eager for good. So does a capture that fails (an operation that
  synchronises with the device in a user's loss, say), and an algorithm whose signature
  keeps changing (more captures than replays pay for).
- Where it does not run (said once: a warning on a CUDA device, an info line on a CPU,
  where it never runs): off CUDA; with ``PYTORCHRL_CUDA_GRAPHS=0`` in the environment (each
  graph holds its memory, up to ``MAX_GRAPHS`` per algorithm); for a recurrent actor (its
  sequence batches are left to the eager path, not validated under capture); where
  ``compute_loss`` is overridden (the graph computes ``loss_tensors``: the override would
  not run).
"""

import contextlib
import os
from collections import OrderedDict

import torch

from pytorchrl.agent.accel import Accelerator
from pytorchrl.agent.notices import say_once

#: Environment variable: "0" (or "false", "no", "off") turns CUDA graph updates off.
ENV_SWITCH = "PYTORCHRL_CUDA_GRAPHS"
#: Eager iterations on a side stream before a capture (lazy initialisations -- cuBLAS
#: workspaces, autograd's -- must not happen inside it).
WARMUP = 3
#: Graphs kept per algorithm (least recently used dropped first): each holds its memory.
MAX_GRAPHS = 4
#: Beyond ``MAX_GRAPHS`` captures, a new capture needs this many replays per capture so far.
REPLAYS_PER_CAPTURE = 20
#: Tolerances of the self-check: replayed and eager updates run the same kernels, so they
#: differ at most by the order of atomic additions.
RTOL, ATOL = 1e-4, 1e-6

NAME = "CUDA graph update"
#: The place of a fed hyperparameter in a graph's key: its value is not part of it.
FED = "<fed as a device scalar>"


def graphs_enabled(environ=None):
    """False when ``PYTORCHRL_CUDA_GRAPHS`` says "0", "false", "no" or "off".

    Parameters
    ----------
    environ : mapping or None
        The environment (None: ``os.environ``).
    """
    value = (os.environ if environ is None else environ).get(ENV_SWITCH, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


def graph_accelerator(refuses=None):
    """The "graph" fast path a reference algorithm class declares (``accel.accelerated``):
    ``CudaGraphUpdate``, which needs the declaring class's ``compute_loss`` (it captures
    ``loss_tensors``, which that ``compute_loss`` calls). Off a CUDA device, where it never
    applies, its reason is said at info level: a CPU run's log is as it was.

    Parameters
    ----------
    refuses : callable or None
        The ``Accelerator``'s ``refuses``: instances the class's loss cannot be captured
        for (None: every instance may be).
    """
    return Accelerator("graph", NAME, CudaGraphUpdate.build, ("compute_loss",), fallback="updating eagerly",
                       routine=lambda algo: algo.device.type != "cuda", refuses=refuses)


def batch_signature(batch):
    """What of a mini-batch a captured graph is specific to: a hashable tuple of (key, shape,
    dtype, device) of each tensor, in key order, then the names of the values that are not
    tensors (a replay buffer's sample indices, say: read by the storage after the update,
    and left out of the graph, see ``graph_inputs``).

    Parameters
    ----------
    batch : dict
        The mini-batch.
    """
    items, others = [], []
    for key in sorted(batch):
        value = batch[key]
        if isinstance(value, torch.Tensor):
            items.append((key, tuple(value.shape), value.dtype, value.device))
        else:
            others.append(key)
    return tuple(items), tuple(others)


def graph_inputs(batch):
    """The tensors of ``batch``: what a graph is captured on and what a replay copies in. The
    other values (a replay buffer's numpy indices, which the storage reads after the update
    for its priorities) stay out: a loss that reads one fails its capture (a missing key),
    which then steps aside, so no value is frozen into a graph."""
    return {key: value for key, value in batch.items() if isinstance(value, torch.Tensor)}


def static_copy(batch):
    """New contiguous tensors holding the values of ``batch`` (a dict of tensors): the static
    inputs a graph is captured on."""
    return {key: torch.empty(value.shape, dtype=value.dtype, device=value.device).copy_(value)
            for key, value in batch.items()}


def copy_into(static, batch):
    """Copy every tensor of ``batch`` into the tensor of the same key of ``static`` (same
    shapes), in the stream order of the replay that follows.

    Parameters
    ----------
    static : dict of tensors
        A graph's static inputs.
    batch : dict of tensors
        The new mini-batch (of the same signature).
    """
    for key, value in static.items():
        value.copy_(batch[key])


def too_many_captures(captures, replays, max_graphs=MAX_GRAPHS, per_capture=REPLAYS_PER_CAPTURE):
    """True when one more capture would not pay: ``max_graphs`` captures made already and
    fewer than ``per_capture`` replays per capture (a signature that changes every few
    updates, such as a loss coefficient scheduled at every update).

    Parameters
    ----------
    captures : int
        Captures made so far.
    replays : int
        Replays made so far.
    max_graphs, per_capture : int
        The thresholds.
    """
    return captures >= max_graphs and replays < per_capture * captures


def _close(a, b):
    # Relative to the largest finite magnitude of b: a gradient's small entries carry the
    # rounding of its large ones.
    scale = float(torch.nan_to_num(b.detach(), nan=0.0, posinf=0.0, neginf=0.0).abs().max()) if b.numel() else 0.0
    return a.shape == b.shape and bool(torch.isclose(a, b, rtol=RTOL, atol=ATOL * (1.0 + scale), equal_nan=True).all())


def first_difference(replayed_grads, eager_grads, replayed_info, eager_info):
    """How a replayed update differs from the eager one beyond float rounding, or None.

    Parameters
    ----------
    replayed_grads, eager_grads : list of tensors or None
        The gradients of every trainable parameter (None where a parameter got none).
    replayed_info, eager_info : dict
        The statistics as ``compute_loss`` returns them (numbers, numpy arrays).
    """
    for i, (r, e) in enumerate(zip(replayed_grads, eager_grads)):
        if (r is None) != (e is None):
            return f"parameter {i} gets a gradient on one path only"
        if r is not None and not _close(r, e):
            return f"the gradient of parameter {i} {tuple(e.shape)} differs"
    if list(replayed_info) != list(eager_info):
        return f"statistics {sorted(replayed_info)} instead of {sorted(eager_info)}"
    for key, e in eager_info.items():
        if not _close(torch.as_tensor(replayed_info[key]), torch.as_tensor(e)):
            return f"statistic {key} differs"
    return None


class _Captured:
    """One captured update: the graph, its static inputs and its outputs (the gradient of
    every trainable parameter, None where none, and the statistics as tensors), and the
    device scalars it reads its fed hyperparameters from (name: 0-d tensor)."""

    def __init__(self, graph, inputs, grads, info, scalars=None):
        self.graph = graph
        self.inputs = inputs
        self.grads = grads
        self.info = info
        self.scalars = scalars or {}


class CudaGraphUpdate:
    """``compute_gradients``' work as CUDA graphs (see the module's docstring): calling it
    with a mini-batch fills every trainable parameter's ``.grad`` and returns the info, as
    ``Algorithm.eager_gradients`` does.

    Parameters
    ----------
    algo : Algorithm
        The algorithm (checked by ``build``).
    """

    def __init__(self, algo):
        self.algo = algo
        self.device = algo.device
        optimizer_settings = set(algo.group_lr.values()) | {"eps"}
        # Those fixed once built cannot tell two graphs apart (and some are lists: A2C's
        # policy_loss_addons would make every key unhashable).
        skipped = optimizer_settings | set(algo.fixed_hyperparameters)
        self.loss_hyperparameters = [n for n in algo.hyperparameter_names() if n not in skipped]
        modules = [algo.actor, *algo.learner_modules.values()]
        self.watched = [t for m in modules for t in (*m.parameters(), *m.buffers())]
        self.addresses = self._addresses()
        self.graphs = OrderedDict()
        self.captures = 0
        self.replays = 0
        #: Float hyperparameters whose value changed between two captures of one mini-batch
        #: shape (a schedule's clip_param, say): captured as device scalars, filled before
        #: each replay, so that a new value needs no new graph.
        self.fed = set()
        #: Those that failed a capture as device scalars (a loss that branches on the
        #: value in Python): captured by value.
        self.by_value = set()
        #: Why the update stepped aside for good (None while it captures and replays).
        self.off = None

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)``."""
        if algo.device.type != "cuda":
            return None, f"device {algo.device}: CUDA graphs run on CUDA devices"
        if not graphs_enabled():
            return None, f"{ENV_SWITCH}={os.environ.get(ENV_SWITCH)}"
        if not torch.cuda.is_available():
            return None, "CUDA is not available"
        if getattr(algo.actor, "memory", None) is not None:
            return None, "recurrent actor (the CUDA graph update runs feed-forward actors)"
        return cls(algo), None

    def _addresses(self):
        return tuple(t.data_ptr() for t in self.watched)

    def signature(self, batch):
        """The key of the graph that computes ``batch``'s update now (``batch_signature``,
        the loss's hyperparameters, ``update_variant()``), or None (an unhashable
        hyperparameter) for an eager update."""
        shapes = batch_signature(batch)
        algo = self.algo
        values = tuple(FED if n in self.fed else getattr(algo, n) for n in self.loss_hyperparameters)
        key = shapes, values, tuple(algo.update_variant())
        try:
            hash(key)
        except TypeError:   # a hyperparameter that is a list, say: no key, the eager update
            return None
        return key

    def __call__(self, batch):
        """Fill every trainable parameter's ``.grad`` with the gradients of ``batch``; return the info."""
        algo = self.algo
        if self.off is not None:
            return algo.eager_gradients(batch)
        key = self.signature(batch)
        if key is None:
            cls = type(algo).__name__
            say_once((NAME, cls, "no key"), f"{cls}: {NAME} computes eagerly any update while a hyperparameter "
                                            f"is unhashable")
            return algo.eager_gradients(batch)
        addresses = self._addresses()
        if addresses != self.addresses:
            # A network moved or was given new tensors: the graphs read the old memory.
            self.graphs.clear()
            self.addresses = addresses
        captured = self.graphs.get(key)
        if captured is None:
            if self._feed_changed_scalars(key):
                return self(batch)
            return self._capture_and_check(key, batch)
        self.graphs.move_to_end(key)
        copy_into(captured.inputs, graph_inputs(batch))
        for name, scalar in captured.scalars.items():
            scalar.fill_(getattr(algo, name))
        captured.graph.replay()
        self.replays += 1
        return self._publish(captured)

    def _feed_changed_scalars(self, key):
        """When ``key`` differs from the last graph's only in float hyperparameters (a
        schedule moved them), feed those as device scalars from now on; True if any."""
        if not self.graphs:
            return False
        last = next(reversed(self.graphs))
        if (last[0], last[2]) != (key[0], key[2]):
            return False
        changed = {n for n, old, new in zip(self.loss_hyperparameters, last[1], key[1])
                   if old != new and type(old) is float and type(new) is float and n not in self.by_value
                   and n in vars(self.algo)}
        self.fed |= changed
        return bool(changed)

    def _publish(self, captured):
        """Point ``.grad`` at the graph's gradients; the statistics, read back once."""
        for p, g in zip(self.algo.trainable_parameters(), captured.grads):
            p.grad = g
        return self.algo.info_to_host(captured.info)

    def step_aside(self, kind, reason):
        """Stop capturing for good (the graphs' memory is released): say why once.

        Parameters
        ----------
        kind : str
            What happened, the identity of the notice (e.g. "self-check").
        reason : str
            Words for the message.
        """
        self.off = reason
        self.graphs.clear()
        cls = type(self.algo).__name__
        say_once((NAME, cls, kind), f"{cls}: {NAME} stepped aside ({reason}); updating eagerly from now on")

    def _capture_and_check(self, key, batch):
        """Capture the update of ``batch``'s signature ``key``, check its first replay against
        the eager update of ``batch`` and keep it, or step aside; returns the eager info."""
        algo = self.algo
        if too_many_captures(self.captures, self.replays):
            self.step_aside("churn", f"{self.captures} captures for {self.replays} replays: the hyperparameters or "
                                     f"the mini-batch shapes keep changing")
            return algo.eager_gradients(batch)
        rng = _rng_state(self.device)
        inputs = static_copy(graph_inputs(batch))
        stream = torch.cuda.Stream(self.device)
        scalars = {n: torch.tensor(float(getattr(algo, n)), device=self.device) for n in sorted(self.fed)}
        try:
            with _fed(algo, scalars):
                self._warm_up(inputs, stream)
                captured = self._capture(inputs, stream)
        except KeyError as error:       # the loss reads a value left out of the graph's inputs
            _set_rng_state(rng, self.device)
            self.step_aside("capture", f"capture failed: the loss reads {error}, which is not a tensor")
            return algo.eager_gradients(batch)
        except RuntimeError as error:   # an operation capture does not allow: the eager path computes it
            _set_rng_state(rng, self.device)
            if scalars:
                # Perhaps the loss branches on one of them in Python: capture by value.
                self.by_value |= self.fed
                self.fed.clear()
                cls = type(algo).__name__
                say_once((NAME, cls, "by value"), f"{cls}: {NAME} captures {sorted(scalars)} by value (as device "
                                                  f"scalars the capture failed: {str(error).splitlines()[0]}); "
                                                  f"each new value is a new graph")
                return self(batch)
            self.step_aside("capture", f"capture failed: {str(error).splitlines()[0]}")
            return algo.eager_gradients(batch)
        captured.scalars = scalars
        self.captures += 1
        _set_rng_state(rng, self.device)
        captured.graph.replay()
        replayed = self._publish(captured)
        _set_rng_state(rng, self.device)      # the eager update draws the same numbers
        info = algo.eager_gradients(batch)
        difference = first_difference(captured.grads, [p.grad for p in algo.trainable_parameters()],
                                      replayed, info)
        if difference is not None:
            self.step_aside("self-check", f"self-check: {difference} between the replayed and the eager update")
            return info
        self.graphs[key] = captured
        while len(self.graphs) > MAX_GRAPHS:
            self.graphs.popitem(last=False)
        return info

    def _warm_up(self, inputs, stream):
        """``WARMUP`` eager updates of the static ``inputs`` on ``stream`` (the capture's)."""
        algo = self.algo
        current = torch.cuda.current_stream(self.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            for _ in range(WARMUP):
                loss, _ = algo.loss_tensors(inputs)
                algo.write_gradients(loss)
        current.wait_stream(stream)

    def _capture(self, inputs, stream):
        """A ``_Captured`` update of the static ``inputs``, captured on ``stream``; raises
        RuntimeError where the capture fails."""
        algo = self.algo
        params = algo.trainable_parameters()
        for p in params:    # gradients allocated inside the capture, from the graph's memory
            p.grad = None
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        # capture_begin/end by hand rather than torch.cuda.graph: when capture_end raises
        # (an operation the capture refused), that context manager leaves its side stream
        # current; here the stream context is left whatever happens.
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            graph.capture_begin()
            try:
                loss, info = algo.loss_tensors(inputs)
                algo.write_gradients(loss)
            except BaseException:
                try:
                    graph.capture_end()
                except RuntimeError:
                    # The capture is void already (the first error says why), and
                    # capture_end stopped before releasing the CUDA generator.
                    _release_generator(self.device, stream)
                raise
            graph.capture_end()
        grads = [p.grad for p in params]
        python_values = [k for k, v in info.items() if not isinstance(v, torch.Tensor)]
        if python_values:
            # A replay would repeat the value the capture saw: host_stats is where they go.
            raise RuntimeError(f"loss_tensors returned {python_values} as Python values")
        return _Captured(graph, inputs, grads, {k: v.detach() for k, v in info.items()})


@contextlib.contextmanager
def _fed(algo, scalars):
    """``algo``'s hyperparameters named in ``scalars`` read as those device scalars inside
    the block (a capture reads the tensor, which each replay refills), as before after it."""
    saved = {n: vars(algo)[n] for n in scalars}
    vars(algo).update(scalars)
    try:
        yield
    finally:
        vars(algo).update(saved)


def _release_generator(device, stream):
    """Capture a trivial graph on ``stream`` of ``device`` to completion.

    Every capture marks the default CUDA generator as capturing, and only a capture that
    ends clears the mark: after a failed one, every random draw outside a capture raises
    ("Offset increment outside graph capture"), the eager updates of SAC and TD3 included.
    The capture of one addition, which ends, clears it (it leaves the generator's seed and
    offset, and the graphs registered with it, as they were).
    """
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.stream(stream):
        scratch = torch.zeros(1, device=device)
        graph.capture_begin()
        scratch.add_(1.0)
        graph.capture_end()


def _rng_state(device):
    """The states of the CPU generator and of ``device``'s CUDA generator."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device)


def _set_rng_state(state, device):
    cpu, cuda = state
    torch.set_rng_state(cpu)
    torch.cuda.set_rng_state(cuda, device)


__all__ = ["CudaGraphUpdate", "ENV_SWITCH", "MAX_GRAPHS", "batch_signature", "copy_into", "first_difference",
           "graph_accelerator", "graphs_enabled", "static_copy", "too_many_captures"]
