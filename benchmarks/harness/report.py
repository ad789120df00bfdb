"""Formatting of the reports: numbers, shares, markdown tables, ratios and goal verdicts,
and the notes that end a report (the machine's load, the failed runs)."""

import statistics


def fmt(v, digits=0, suffix="", inf="∞"):
    """``v`` with thousands separators, ``digits`` decimals and ``suffix`` after it; "–" for
    None, ``inf`` for infinity."""
    if v is None:
        return "–"
    if v == float("inf"):
        return inf
    return f"{v:,.{digits}f}{suffix}"


def fmt_return(ret, episodes=None, digits=1):
    """A return for a table cell: ``ret`` with ``digits`` decimals, followed by the number of
    ``episodes`` it was measured over when given, e.g. "21.4 (37 ep.)"; "– (no episode
    ended)" when ``ret`` is None."""
    if ret is None:
        return "– (no episode ended)" if episodes is not None else "–"
    return fmt(ret, digits) + (f" ({fmt(episodes)} ep.)" if episodes is not None else "")


def fmt_share(v):
    """The share ``v`` (0-1) as a whole percentage; "–" for None."""
    return "–" if v is None else f"{100 * v:.0f}%"


def md_table(headers, rows, align=None):
    """A markdown table of ``headers`` (the column names) and ``rows`` (lists of cells);
    ``align`` is a string of 'l'/'r' per column (default: first left, rest right)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def series_table(headers, rows, load_share=None, caption=None):
    """The table of a series measured on one Ray instance (``inprocess.run_series_on_local_ray``):
    ``caption`` (a paragraph above the table, e.g. what its return column can show; None:
    none), then ``headers`` (the column names) and ``rows`` (lists of cells), every column
    left-aligned, then, when ``load_share`` (0-1) is given, the share of the machine's CPU
    that other processes used just before the runs."""
    table = (caption + "\n\n" if caption else "") + md_table(headers, rows, align="l" * len(headers))
    if load_share is not None:
        table += f"\n\nOther processes used {100 * load_share:.0f}% of the machine's CPU just before the runs."
    return table


def load_warning(shares, limit=0.15):
    """A sentence warning that other processes used the CPU, or '' if they hardly did.
    shares: the runs' ``others_cpu_share_during`` (None: not measured); limit: the share above
    which a run counts as disturbed."""
    shares = [s for s in shares if s is not None]
    if shares and max(shares) > limit:
        spread = (f"{100 * min(shares):.0f}–{100 * max(shares):.0f}%" if len(shares) > 1 else f"{100 * shares[0]:.0f}%")
        return (f"Warning: other processes used {spread} of the machine's "
                f"CPU during these runs (median {100 * statistics.median(shares):.0f}%); wall-clock figures are "
                "inflated and noisier than on an idle machine (rerun with --wait-idle 0.1 for cleaner ones).")
    return ""


def closing_notes(records, run_name):
    """The lines that end a report (each after an empty line): ``load_warning`` if other
    processes used the CPU during the runs, then the failed runs, each named by
    ``run_name(record)``."""
    lines = []
    warning = load_warning([r.get("others_cpu_share_during") for r in records])
    if warning:
        lines += ["", warning]
    failed = [r for r in records if "error" in r]
    if failed:
        lines += ["", "Failed runs: " + "; ".join(f"{run_name(r)}: {r['error']}" for r in failed)]
    return lines


def speedup(ours, peer, key):
    """'N.NNx': how many times less ``key`` (a time) ``ours`` took than ``peer`` (dicts of
    medians, e.g. a summary's per system); '–' when either is missing or infinite."""
    if ours.get(key) in (None, float("inf")) or peer.get(key) in (None, float("inf")):
        return "–"
    return f"{peer[key] / ours[key]:.2f}x"


def return_ok(ret, ref, tolerance=0.0):
    """Whether the return ``ret`` is as good as the reference return ``ref``: both measured
    and ``ret`` no more than ``tolerance`` (in return units) below ``ref``."""
    return ret is not None and ref is not None and ret >= ref - tolerance


def return_verdict(ret, ref, digits=1, tolerance=0.0, ref_name=None, label="return"):
    """'LABEL A vs B (REF_NAME): ok', '...: ok (within T)' (lower, but by no more than the
    ``tolerance`` T), '...: lower' (lower by more, see ``return_ok``) or '...: not measured'
    (either is None): the return part of a verdict, so that a faster run that learns worse
    reads as what it is.

    ret, ref: the returns compared (the run's and the reference's); digits: decimals shown;
    tolerance: how far below ``ref`` still counts as ok (the return's noise in that
    benchmark, in return units); ref_name: what the reference is (shown in brackets; None:
    nothing); label: the name of the figure (e.g. "train return")."""
    if ret is None or ref is None:
        judged = "not measured"
    elif ret >= ref:
        judged = "ok"
    else:
        judged = f"ok (within {fmt(tolerance, digits)})" if return_ok(ret, ref, tolerance) else "lower"
    ref_shown = fmt(ref, digits) + (f" ({ref_name})" if ref_name else "")
    return f"{label} {fmt(ret, digits)} vs {ref_shown}: {judged}"


def goal_verdict(system, ratio, target, ours_return, peer_return, digits=1):
    """'SYSTEM: MET (...)' or 'SYSTEM: NOT MET (...)': whether ``system`` reaches ``target``
    times the peer's throughput (``ratio``) at an equal or better return (``ours_return`` >=
    ``peer_return``; a missing return is not), with both reasons; the returns shown with
    ``digits`` decimals."""
    ok_speed = ratio >= target
    ok_return = return_ok(ours_return, peer_return)
    return (f"{system}: {'MET' if ok_speed and ok_return else 'NOT MET'} (speed {ratio:.2f}x: "
            f"{'ok' if ok_speed else 'short'}; {return_verdict(ours_return, peer_return, digits)})")
