"""Statistics of run records: medians that skip missing values, ratios of paired runs."""

import statistics


def median(values):
    """The median of ``values`` without the None among them (None if none is left)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def paired_ratios(records, system, peer, key, where=None):
    """``system``/``peer`` ratios of ``key`` (a field of the run records) for the runs of the
    same seed (run back to back), among the successful ``records`` for which
    ``where(record)`` holds (default: all); in the order of the seeds."""
    by = {(r["system"], r["seed"]): r for r in records
          if "error" not in r and r.get(key) is not None and (where is None or where(r))}
    return [by[(system, s)][key] / by[(peer, s)][key] for (sys_, s) in sorted(by)
            if sys_ == system and (peer, s) in by and by[(peer, s)][key]]
