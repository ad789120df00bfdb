"""Memory networks: recurrent cells that give an actor a state carried between steps.

A memory network sits after an actor's feature extractor. It runs one step at a time
while acting (``forward``: the features of N environments and their state) and over
whole sequences while training (``sequence``: T steps of B environments from the state
stored at the start of the sequence, reset where an episode ended), with the same cell,
so that the values and log-probabilities recomputed at update time are those computed
while acting.

The state of N environments is one float32 array (N, ``state_size``): the hidden state
of a GRU, the hidden and cell states of an LSTM side by side. It travels as numpy
between the collector, the storage and the actor.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class MemoryNetwork(nn.Module):
    """Base class of memory networks (subclasses set ``cell`` and ``state_size``).

    Parameters
    ----------
    input_size : int
        Size of the features the memory reads (the feature extractor's ``num_outputs``).
    hidden_size : int
        Size of the memory's output (and of its hidden state).
    """

    def __init__(self, input_size, hidden_size=64):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"memory network hidden_size must be a positive integer, got {hidden_size!r}")
        self.input_size = int(input_size)
        self.hidden_size = hidden_size
        self.num_outputs = hidden_size

    #: Floats of state per environment.
    state_size = None

    def forward(self, x, state):
        """One step: features ``x`` (N, input_size) and ``state`` (N, state_size) ->
        (output (N, hidden_size), next state (N, state_size))."""
        return self._advance(self._project_inputs(x), state)

    def _project_inputs(self, x):
        """The part of a step that reads only the input (..., input_size): done for a whole
        sequence at once by ``sequence``. Default: the input itself."""
        return x

    def _advance(self, projected, state):
        """One step from ``_project_inputs``'s output -> (output, next state)."""
        raise NotImplementedError

    def sequence(self, x, state, done, return_states=False):
        """Run the memory over sequences.

        Parameters
        ----------
        x : torch.Tensor
            Features (T, B, input_size), time first.
        state : torch.Tensor
            State (B, state_size) before the first step.
        done : torch.Tensor
            (T, B, 1) 1 where the episode ended after step t: the state is zeroed before
            step t + 1, as the collector did.
        return_states : bool
            Also return the state after every step, before the zeroing that follows an
            episode end: the state that values the observation after that step (the
            final one of an episode that ended there).

        Returns
        -------
        torch.Tensor
            Outputs (T, B, hidden_size); with ``return_states``, (outputs, states
            (T, B, state_size)).
        """
        inputs = self._project_inputs(x)
        keep = 1.0 - done
        outs, states = [], []
        for t in range(x.shape[0]):
            if t > 0:
                state = state * keep[t - 1]
            out, state = self._advance(inputs[t], state)
            outs.append(out)
            states.append(state)
        if return_states:
            return torch.stack(outs), torch.stack(states)
        return torch.stack(outs)


class GRU(MemoryNetwork):
    """Gated recurrent unit memory (``torch.nn.GRUCell``); state (N, hidden_size).

    Parameters
    ----------
    input_size, hidden_size
        As in ``MemoryNetwork``.
    """

    def __init__(self, input_size, hidden_size=64):
        super().__init__(input_size, hidden_size)
        # GRUCell holds the parameters (its usual initialisation and state-dict names);
        # the arithmetic is written out so that a sequence projects all its inputs in
        # one product, and acting and training share ``_advance`` exactly.
        self.cell = nn.GRUCell(self.input_size, hidden_size)
        self.state_size = hidden_size

    def _project_inputs(self, x):
        return F.linear(x, self.cell.weight_ih, self.cell.bias_ih)

    def _advance(self, gi, h):
        """GRUCell's update from the projected input ``gi`` (N, 3 * hidden_size)."""
        gh = F.linear(h, self.cell.weight_hh, self.cell.bias_hh)
        size = 2 * self.hidden_size
        r, z = torch.sigmoid(gi[:, :size] + gh[:, :size]).chunk(2, dim=1)
        n = torch.tanh(gi[:, size:] + r * gh[:, size:])
        h = n + z * (h - n)
        return h, h


class LSTM(MemoryNetwork):
    """Long short-term memory (``torch.nn.LSTMCell``); state (N, 2 * hidden_size): the
    hidden state, then the cell state.

    Parameters
    ----------
    input_size, hidden_size
        As in ``MemoryNetwork``.
    """

    def __init__(self, input_size, hidden_size=64):
        super().__init__(input_size, hidden_size)
        self.cell = nn.LSTMCell(self.input_size, hidden_size)
        self.state_size = 2 * hidden_size

    def _advance(self, x, state):
        h, c = self.cell(x, (state[:, :self.hidden_size], state[:, self.hidden_size:]))
        return h, torch.cat([h, c], dim=1)


MEMORY_NETWORKS = {"gru": GRU, "lstm": LSTM}


def get_memory_network(name):
    """Return the memory network class called ``name``.

    Parameters
    ----------
    name : str or type
        "GRU" or "LSTM", in any case; a ``MemoryNetwork`` subclass is returned unchanged.

    Returns
    -------
    type
        The class; actors build it as ``cls(num_features, **recurrent_net_kwargs)``.

    Raises
    ------
    ValueError
        If ``name`` is not one of the names above.
    """
    if isinstance(name, type) and issubclass(name, MemoryNetwork):
        return name
    key = name.lower() if isinstance(name, str) else None
    if key not in MEMORY_NETWORKS:
        raise ValueError(f"unknown memory network {name!r}; valid names: GRU, LSTM "
                         f"(or a MemoryNetwork subclass)")
    return MEMORY_NETWORKS[key]
