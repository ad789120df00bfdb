"""The decisions of population-based training, apart from any training: which members copy
which (exploit), and how the copied values are perturbed (explore).

Both take a numpy ``Generator``: a population seeds one and saves its state with the
population, so a resumed population draws what the uninterrupted one would have.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """A parameter a population perturbs.

    Parameters
    ----------
    key : str
        The key as written in ``pbt.mutations`` ("lr", "storage.gae_lambda").
    target : str
        "algorithm" or "storage".
    name : str
        The parameter's name in its component ("lr").
    kind : str
        Its kind in the configuration schema ("int", "number", "bool", ...).
    low, high : float or None
        Its range (``low`` exclusive when ``low_inclusive`` is False).
    low_inclusive : bool
        Whether ``low`` itself is allowed.
    spec : dict
        Its resolved ``pbt.mutations`` entry: ``factors``, ``values``, ``log_uniform``,
        ``resample_probability``.
    """

    key: str
    target: str
    name: str
    kind: str
    low: object
    high: object
    low_inclusive: bool
    spec: dict

    @property
    def qualified(self):
        """``target.name`` ("algorithm.lr")."""
        return f"{self.target}.{self.name}"


def perturb(parameter, value, rng):
    """A perturbed copy of ``value`` and how it was made.

    With factors and a distribution (``values`` or ``log_uniform``) the value is resampled
    with probability ``resample_probability`` and multiplied by one of the factors
    otherwise; with only one of them, that one is used. A multiplied integer is rounded;
    a multiplied number stays in the parameter's range and in ``log_uniform``'s.

    Parameters
    ----------
    parameter : Parameter
        The parameter and its mutation.
    value : object
        The value copied from the source member.
    rng : numpy.random.Generator
        Source of the draws.

    Returns
    -------
    (object, str, str or None)
        The new value; "x<factor>" or "resampled"; and, when the multiplied value left its
        range and was moved back in, which bound it was clipped to ("the upper bound of
        log_uniform", "the parameter's lower bound"), else None.
    """
    spec = parameter.spec
    factors = spec["factors"]
    distribution = spec["values"] is not None or spec["log_uniform"] is not None
    if distribution and (factors is None or rng.random() < spec["resample_probability"]):
        if spec["values"] is not None:
            return spec["values"][int(rng.integers(len(spec["values"])))], "resampled", None
        low, high = spec["log_uniform"]
        return float(math.exp(rng.uniform(math.log(low), math.log(high)))), "resampled", None
    factor = factors[int(rng.integers(len(factors)))]
    new = value * factor
    clipped = None
    if spec["log_uniform"] is not None:
        low, high = spec["log_uniform"]
        if new > high:
            new, clipped = high, "the upper bound of log_uniform"
        elif new < low:
            new, clipped = low, "the lower bound of log_uniform"
    new, clipped = _in_range(parameter, new, clipped)
    if parameter.kind == "int":
        rounded = int(round(new))
        if parameter.low is not None and rounded < parameter.low:
            rounded, clipped = int(math.ceil(parameter.low)), "the parameter's lower bound"
        new = rounded
    else:
        new = float(new)
    return new, f"x{factor:g}", clipped


def _in_range(parameter, value, clipped=None):
    """``(value, clipped)``: ``value`` moved into the parameter's range (an exclusive lower
    bound is kept out of), and ``clipped`` replaced by the bound it was moved to, if any."""
    if parameter.high is not None and value > parameter.high:
        value, clipped = parameter.high, "the parameter's upper bound"
    if parameter.low is not None:
        if parameter.low_inclusive and value < parameter.low:
            value, clipped = parameter.low, "the parameter's lower bound"
        elif not parameter.low_inclusive and value <= parameter.low:
            # A factor never takes a positive number to 0; this only guards rounding.
            value, clipped = math.nextafter(parameter.low, math.inf), "the parameter's lower bound"
    return value, clipped


def plan_exploits(metrics, quantile, rng):
    """Which members copy which at a decision.

    Members are ranked by their metric; each of the bottom ``ceil(quantile * n)`` (at most
    half of them) copies a member drawn at random from as many at the top, if that one's
    metric is higher. Members without a value (no episode finished yet) take no part.

    Parameters
    ----------
    metrics : dict
        Member index -> metric (None: no value yet).
    quantile : float
        Fraction replaced, in (0, 0.5].
    rng : numpy.random.Generator
        Source of the draws.

    Returns
    -------
    list of (int, int)
        ``(member replaced, member copied)`` pairs, in order of the members replaced.
    """
    ranked = sorted((i for i, m in metrics.items() if m is not None and math.isfinite(m)),
                    key=lambda i: (metrics[i], i))
    count = min(int(math.ceil(quantile * len(ranked))), len(ranked) // 2)
    if count == 0:
        return []
    top = ranked[-count:]
    plan = []
    for loser in ranked[:count]:
        source = top[int(rng.integers(count))]
        if metrics[loser] < metrics[source]:
            plan.append((loser, source))
    return plan


__all__ = ["Parameter", "perturb", "plan_exploits"]
