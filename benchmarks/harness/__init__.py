"""The benchmark harness: what the orchestrators of every task share, one module per role.

- ``paths``: where the benchmarks live and write (results/, the peers' interpreter);
- ``machine``: machine facts and load (``/proc/stat``, the CPU of a process tree, waiting
  for a quieter machine);
- ``provenance``: the code under test (working-tree snapshot, HEAD export, diff hash), the
  versions an interpreter imports, a run's ``meta`` record;
- ``subprocesses``: running workers in subprocesses (their environments, one run's record,
  runs in turn with a progress line each, interpreter checks, warm-up, the side-by-side
  orchestrators' options and ``main``);
- ``results``: results files (``.jsonl``, ``.md``, the measured diff), also read back;
- ``stats``: medians and paired ratios of run records;
- ``report``: formatting of the reports (numbers, tables, verdicts with the returns compared,
  closing notes);
- ``inprocess``: benchmarks that measure several configurations in one process and one Ray
  instance (re-run in a child that imports the measured code);
- ``schemes``: cheap learners' factories, the scheme benchmarks' measuring loop and the return
  a Learner's training reached (``train_return_fields``: what every benchmark that reports a
  speed reports beside it).

Scripts import it with ``benchmarks/`` on ``sys.path`` (each task's script puts it there).
The modules import the standard library only at the top (psutil when present), so that any
interpreter can import them; nothing is imported here.
"""
