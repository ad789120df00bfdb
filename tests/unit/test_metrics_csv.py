"""metrics.csv read back on resume: a file another writer left malformed still resumes."""

import csv

from pytorchrl.tools.metrics import MetricsCSV


def test_a_row_longer_than_the_header_resumes_with_its_known_columns(tmp_path):
    # Seen under Ray Tune's PBT: a session appended a row with more columns than the header
    # of the file it continued; resuming from it raised "dict contains fields not in fieldnames".
    path = tmp_path / "metrics.csv"
    path.write_text("Scheme/EnvSteps,Algorithm/Loss\n100,1.0\n200,0.5,7.0\n300,0.2\n")
    log = MetricsCSV(str(path), continue_from_step=200)
    log.append({"Scheme/EnvSteps": 250, "Algorithm/Loss": 0.4})
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["Scheme/EnvSteps"], r["Algorithm/Loss"]) for r in rows] == [("100", "1.0"), ("200", "0.5"), ("250", "0.4")]
    assert all(None not in r for r in rows)
