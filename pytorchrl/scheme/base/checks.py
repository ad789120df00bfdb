"""Checks of the scheme's numeric options, shared by ``Scheme`` (which checks everything
before any worker or Ray starts) and the worker sets (which are public too)."""


def check_int(name, value, low, optional=False):
    """Raise ValueError unless ``value`` is an integer >= ``low`` (a bool is not one).

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : object
        The value given.
    low : int
        Smallest valid value (0 or 1).
    optional : bool
        None is valid too.
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
        raise ValueError(f"{name} must be {'None or ' if optional else ''}{kind}, got {value!r}")


def check_fraction(name, value):
    """Raise ValueError unless ``value`` is a number in (0, 1].

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : object
        The value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
