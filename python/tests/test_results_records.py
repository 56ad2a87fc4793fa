"""The published numbers are what the published run records say: for every results/ folder with a
records.tgz, `pathbench collect` over those records gives the committed runs.csv, evals.csv,
distances.csv and (gzipped) seqstats.csv, history.csv and distance_history.csv, row for row, in
every column the committed file has (a newer collect may add columns). Records of a conversion's
RoPE sources (`runs/*-sources`) are kept for reference and not collected. Needs PATHBENCH (the
binary; CTest sets it)."""
import csv
import glob
import gzip
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CSVS = ["runs.csv", "evals.csv", "distances.csv", "seqstats.csv.gz", "history.csv.gz", "distance_history.csv.gz"]
REQUIRED = ["runs.csv", "evals.csv", "seqstats.csv.gz"]  # every folder's runs have final evaluations


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def mismatches(committed, collected):
    """Where the committed rows differ from the collected ones, on the committed columns."""
    if len(committed) != len(collected):
        return [f"{len(committed)} rows committed, {len(collected)} collected"]
    out = []
    for i, (a, b) in enumerate(zip(committed, collected)):
        for key, value in a.items():
            if b.get(key) != value:
                out.append(f"row {i + 2}, {key}: committed {value!r}, collected {b.get(key)!r}")
    return out[:5]


def recollect(folder, pathbench, tmp):
    """Extracts folder/records.tgz into tmp and collects it; returns the directory of the CSVs."""
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
    with tarfile.open(os.path.join(folder, "records.tgz")) as t:
        t.extractall(tmp, **safe)
    for sources in glob.glob(os.path.join(tmp, "runs", "*-sources")):
        shutil.rmtree(sources)
    out = os.path.join(tmp, "out")
    subprocess.run([pathbench, "collect", os.path.join(tmp, "runs"), "-o", out], check=True, capture_output=True)
    return out


@unittest.skipUnless(os.environ.get("PATHBENCH"), "PATHBENCH (the binary) is not set")
class ResultsRecords(unittest.TestCase):
    def test_published_csvs_are_the_records_collected(self):
        folders = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(REPO, "results", "*", "records.tgz")))
        self.assertGreater(len(folders), 0)
        for folder in folders:
            with self.subTest(folder=os.path.relpath(folder, REPO)), tempfile.TemporaryDirectory() as tmp:
                out = recollect(folder, os.environ["PATHBENCH"], tmp)
                for name in CSVS:
                    if name in REQUIRED:
                        self.assertTrue(os.path.exists(os.path.join(folder, name)), f"{name} is not committed")
                    if os.path.exists(os.path.join(folder, name)):
                        collected = read(os.path.join(out, name.removesuffix(".gz")))
                        self.assertEqual(mismatches(read(os.path.join(folder, name)), collected), [], name)

    def test_the_comparison_catches_an_edit(self):
        rows = [{"run_id": "a", "acc": "0.5"}, {"run_id": "b", "acc": "0.75"}]
        self.assertEqual(mismatches(rows, rows), [])
        self.assertEqual(mismatches(rows, rows + [{"run_id": "c", "acc": "1"}]), ["2 rows committed, 3 collected"])
        edited = [{"run_id": "a", "acc": "0.5"}, {"run_id": "b", "acc": "0.8"}]
        self.assertEqual(mismatches(edited, rows), ["row 3, acc: committed '0.8', collected '0.75'"])
        newer = [dict(r, eval_s="1.0") for r in rows]  # a newer collect adds a column
        self.assertEqual(mismatches(rows, newer), [])


if __name__ == "__main__":
    unittest.main()
