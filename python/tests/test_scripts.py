"""scripts/first_step.py on a hand-made history.csv: the first step each run reached a value,
including a run stopped by its stop_at rule at its last step, whose periodic value that met the
rule is only in the `stop` column (the history keeps the final evaluation at that step)."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "first_step.py")
COLUMNS = ["run_id", "pe", "lr", "seed", "split", "step", "seq_acc", "stop"]
STOPPED = "stop_at val:seq_acc>=0.99 (0.990234375 at step 1500)"
ROWS = [  # (run_id, pe, lr, seed, split, step, seq_acc, stop)
    ("a", "path", "0.001", "0", "val", 500, 0.2, STOPPED),
    ("a", "path", "0.001", "0", "val", 1000, 0.95, STOPPED),
    ("a", "path", "0.001", "0", "val", 1500, 0.986, STOPPED),  # the final evaluation, on the whole split
    ("a", "path", "0.001", "0", "test", 1500, 0.999, STOPPED),
    ("b", "rope", "0.001", "0", "val", 500, 0.1, "steps"),
    ("b", "rope", "0.001", "0", "val", 1000, 0.91, "steps"),
    ("b", "rope", "0.001", "0", "val", 2000, 0.93, "steps"),
]


class FirstStep(unittest.TestCase):
    def run_script(self, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "history.csv")
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(COLUMNS)
                w.writerows(ROWS)
            return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True)

    def test_thresholds_and_the_stop_rule(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "0.99")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| path") or line.startswith("| rope")]
        self.assertEqual(rows, ["| path | 0.001 | 0 | 1000 | 1500 |", "| rope | 0.001 | 0 | 1000 | not by 2000 |"])

    def test_the_stop_rule_counts_only_for_its_own_split_and_metric(self):
        out = self.run_script("--split", "test", "--metric", "seq_acc", "--at", "0.9999")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| path | 0.001 | 0 | not by 1500 |", out.stdout)

    def test_one_cell_per_row_and_column_value(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "--rows", "pe", "--cols", "lr")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| pe \\ lr | 0.001 |", out.stdout)
        self.assertIn("| path | 1 |", out.stdout)
        self.assertIn("| rope | 1 |", out.stdout)
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.99", "--rows", "pe", "--cols", "lr")
        self.assertIn("| path | 1.5 |", out.stdout)  # the stop rule's periodic value at its last step
        self.assertIn("| rope | +1 not |", out.stdout)

    def test_cols_takes_one_threshold(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "0.99", "--cols", "lr")
        self.assertEqual(out.returncode, 2)

    def test_a_missing_column_is_an_error(self):
        out = self.run_script("--split", "val", "--metric", "loss", "--at", "1")
        self.assertEqual(out.returncode, 2)
        self.assertIn("no column 'loss'", out.stderr)


if __name__ == "__main__":
    unittest.main()
