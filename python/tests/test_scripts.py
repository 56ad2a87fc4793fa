"""scripts/first_step.py on a hand-made history.csv: the first step each run reached a value,
including a run stopped by its stop_at rule at its last step, whose periodic value that met the
rule is only in the `stop` column (the history keeps the final evaluation at that step). And
scripts/slow_calls.py on a hand-made log in core/slow_call.h's format, scripts/metric_windows.py on
hand-made run records, and scripts/mqrar_errors.py on a hand-made `eval --errors` CSV, with hand-made sequences and
with the ones `pathbench gen` regenerates."""
import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
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

    def test_a_range_of_distances_ignores_the_whole_splits_stop_value(self):
        # distance_history.csv: the same evaluations, one row per range of recall distances; the stop
        # rule's 0.990234375 is the whole split's, so the range at 0.986 has not reached 0.99 by 1500
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "distance_history.csv")
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(COLUMNS + ["distance_from"])
                w.writerows(row + ("512",) for row in ROWS)
            out = subprocess.run([sys.executable, SCRIPT, path, "--split", "val", "--metric", "seq_acc", "--at", "0.99",
                                  "--rows", "pe,distance_from"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| path | 512 | 0 | not by 1500 |", out.stdout)

    def test_cols_takes_one_threshold(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "0.99", "--cols", "lr")
        self.assertEqual(out.returncode, 2)

    def test_where_keeps_the_matching_runs(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "--where", "pe=rope")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertEqual(rows[1:], ["| rope | 0.001 | 0 | 1000 |"])

    def test_order_puts_the_listed_values_first_in_their_order(self):
        def rows(*order):
            out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", *order)
            self.assertEqual(out.returncode, 0, out.stderr)
            return [line.split(" | ")[0] for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertEqual(rows()[1:], ["| path", "| rope"])
        self.assertEqual(rows("--order", "pe=rope,path")[1:], ["| rope", "| path"])
        self.assertEqual(rows("--order", "pe=rope")[1:], ["| rope", "| path"])  # unlisted values after

    def test_a_malformed_option_is_an_error(self):
        out = self.run_script("--split", "val", "--metric", "seq_acc", "--at", "0.9", "--order", "pe")
        self.assertEqual(out.returncode, 2)
        self.assertIn("'pe' is not COLUMN=VALUE", out.stderr)

    def test_a_missing_file_is_an_error(self):
        out = subprocess.run([sys.executable, SCRIPT, "/nonexistent/history.csv", "--split", "val", "--metric",
                              "seq_acc", "--at", "0.9"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().splitlines(), ["first_step.py: cannot read /nonexistent/history.csv: "
                                                           "No such file or directory"])

    def test_a_missing_column_is_an_error(self):
        out = self.run_script("--split", "val", "--metric", "loss", "--at", "1")
        self.assertEqual(out.returncode, 2)
        self.assertIn("no column 'loss'", out.stderr)


class MetricWindows(unittest.TestCase):
    # Two runs' metrics.jsonl: run "a" logs steps 0, 200, ..., 2000 with grad_norm = step / 100;
    # run "b" logs only steps 0 and 2000.
    RUNS = [("a", "fox", "0"), ("b", "sba", "1")]
    LOGS = {"a": range(0, 2001, 200), "b": (0, 2000)}

    def run_script(self, *args, runs=RUNS, members=("a", "b")):
        with tempfile.TemporaryDirectory() as d:
            records, runs_csv = os.path.join(d, "records.tgz"), os.path.join(d, "runs.csv")
            with tarfile.open(records, "w:gz") as tar:
                for run in members:
                    data = "".join(json.dumps({"step": s, "grad_norm": s / 100}) + "\n" for s in self.LOGS[run]).encode()
                    info = tarfile.TarInfo(f"runs/sweep/{run}/metrics.jsonl")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            with open(runs_csv, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["run_id", "pe", "seed"])
                w.writerows(runs)
            script = os.path.join(REPO, "scripts", "metric_windows.py")
            return subprocess.run([sys.executable, script, records, runs_csv, "--metric", "grad_norm", "--rows", "pe",
                                   *args], capture_output=True, text=True)

    def test_medians_by_window(self):
        out = self.run_script("--windows", "0", "1000", "2000")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
        # a: steps 0..800 -> 0..8, median 4; steps 1000..2000 (the last window includes its end) -> median 15
        # b: step 0 alone, then step 2000 alone
        self.assertEqual(rows, ["| pe | seed | 0–1,000 | 1,000–2,000 |", "| fox | 0 | 4 | 15 |", "| sba | 1 | 0 | 20 |"])

    def test_a_window_without_logged_steps_and_where(self):
        out = self.run_script("--windows", "100", "1000", "--where", "pe=sba")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines()[2:], ["| sba | 1 | - |"])

    def test_a_run_missing_from_the_records_is_an_error(self):
        out = self.run_script("--windows", "0", "1000", members=("a",))
        self.assertEqual(out.returncode, 2)
        self.assertIn("run b of", out.stderr)

    def test_windows_must_increase(self):
        out = self.run_script("--windows", "1000", "1000")
        self.assertEqual(out.returncode, 2)
        self.assertIn("increasing", out.stderr)


class MqrarErrors(unittest.TestCase):
    # One MQRAR stream, N = 2, as `pathbench gen --format jsonl` writes it (token ids; names in the
    # meta's vocab): k0 is assigned v1, v2, v3, then k1 v4, then k0 v5, v6. The scored reads:
    # position 4 (target v1), 8 (target v2), 10 (target v3).
    TASK = "mqrar:n_keys=2,n_values=9,len=12,n_back=2"
    VOCAB = ["k0", "k1"] + [f"v{i}" for i in range(9)]
    INPUT = "k0 v1 k0 v2 k0 v3 k1 v4 k0 v5 k0 v6"
    TARGET = {4: "v1", 8: "v2", 10: "v3"}

    def sequences(self, d, task=TASK, n=2):
        path = os.path.join(d, "test.jsonl")
        ids = [self.VOCAB.index(t) for t in self.INPUT.split()]
        target = [self.VOCAB.index(self.TARGET[t]) if t in self.TARGET else -1 for t in range(12)]
        with open(path, "w") as f:
            for _ in range(n):
                f.write(json.dumps({"input": ids, "target": target, "scored": [int(t >= 0) for t in target]}) + "\n")
        with open(path + ".meta.json", "w") as f:
            json.dump({"task": task, "split": "test", "n": n, "vocab": self.VOCAB,
                       "task_meta": {"n_back": 2}}, f)
        return path

    def run_script(self, rows, *args, gz=False, task=TASK, sequences=True):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "errors.csv" + (".gz" if gz else ""))
            with (gzip.open if gz else open)(path, "wt", newline="") as f:
                w = csv.writer(f)
                w.writerow(["split", "index", "task", "wrong", "scored", "positions", "prediction"])
                w.writerows(rows)
            more = ["--sequences", self.sequences(d, task)] if sequences else []
            script = os.path.join(REPO, "scripts", "mqrar_errors.py")
            return subprocess.run([sys.executable, script, path, *more, *args], capture_output=True, text=True)

    def rows(self, task=TASK):
        # Sequence 0: the key's value 1 back at 4, another key's value (v4) at 8, the key's value 3
        # back at 10. Sequence 1: a value not in the context (v8) at 4, a key token at 10.
        return [("test", 0, task, 3, 3, "4 8 10", "v2 v4 v2"), ("test", 1, task, 2, 3, "4 10", "v8 k1")]

    def test_each_kind_of_answer(self):
        out = self.run_script(self.rows())
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertEqual(rows, ["| answer (N = 2) | wrong reads | share % |",
                                "| the key's value 1 back | 1 | 20.0 |", "| the key's value 3 back | 1 | 20.0 |",
                                "| other key | 1 | 20.0 |", "| not in context | 1 | 20.0 |",
                                "| not a value | 1 | 20.0 |", "| all wrong reads | 5 | 100 |"])

    def test_gzipped_csv_reads_the_same(self):
        plain, gz = self.run_script(self.rows()), self.run_script(self.rows(), gz=True)
        self.assertEqual(gz.returncode, 0, gz.stderr)
        self.assertIn("| all wrong reads | 5 | 100 |", gz.stdout)
        self.assertEqual(gz.stdout, plain.stdout)

    def test_split_selects_the_sequences(self):
        out = self.run_script(self.rows(), "--split", "val")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "no wrong reads")

    def test_another_n_is_an_error(self):
        out = self.run_script(self.rows(), "--n-back", "3")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--n-back 3, but the task", out.stderr)

    def test_a_target_that_is_not_the_nth_value_back_is_an_error(self):
        self.TARGET = {4: "v1", 8: "v1", 10: "v3"}  # position 8's value 2 back is v2
        out = self.run_script(self.rows())
        self.assertEqual(out.returncode, 2)
        self.assertIn("test sequence 0: position 8: the target v1 is not the key's value 2 back", out.stderr)

    def test_a_right_answer_listed_as_wrong_is_an_error(self):
        out = self.run_script([("test", 0, self.TASK, 1, 3, "8", "v2")])
        self.assertEqual(out.returncode, 2)
        self.assertIn("position 8: the prediction v2 is the target", out.stderr)

    def test_sequences_of_another_task_are_an_error(self):
        out = self.run_script(self.rows(task=self.TASK.replace("len=12", "len=14")))
        self.assertEqual(out.returncode, 2)
        self.assertIn("not the first 2 of mqrar:n_keys=2,n_values=9,len=14,n_back=2 test", out.stderr)

    @unittest.skipUnless(os.environ.get("PATHBENCH"), "PATHBENCH (the binary) is not set")
    def test_the_sequences_regenerated_by_pathbench_gen(self):
        # Sequence 3 of a generated split: every scored read answered with the key's value 1 back
        # (where it is not the target), found by the script in the regenerated stream.
        task = "mqrar:n_keys=4,n_values=16,len=64,n_back=2"
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.jsonl")
            subprocess.run([os.environ["PATHBENCH"], "gen", "--task", task, "--split", "test", "--n", "4",
                            "--format", "jsonl", "--out", path], check=True, capture_output=True)
            with open(path + ".meta.json") as f:
                meta = json.load(f)
            with open(path) as f:
                seq = [json.loads(line) for line in f][3]
        tokens = [meta["vocab"][i] for i in seq["input"]]
        at, preds = [], []
        for t, target in enumerate(seq["target"]):
            latest = next(tokens[i + 1] for i in range(t - 2, -1, -2) if tokens[i] == tokens[t]) if target >= 0 else None
            if target >= 0 and latest != meta["vocab"][target]:
                at.append(str(t))
                preds.append(latest)
        self.assertGreater(len(at), 3)
        out = self.run_script([("test", 3, meta["task"], len(at), sum(seq["scored"]), " ".join(at), " ".join(preds))],
                              task=meta["task"], sequences=False)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(f"| the key's value 1 back | {len(at)} | 100.0 |", out.stdout)

    def test_another_csv_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "runs.csv")
            with open(path, "w") as f:
                f.write("run_id,pe\na,rope\n")
            script = os.path.join(REPO, "scripts", "mqrar_errors.py")
            out = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("is not an errors CSV", out.stderr)


SLOW_LOG = """sweep x: 3/24 done
pathbench: slow call: waiting for the capture fence took 2.500 s on thread 3, run ab12 (at 5.5 s after the process started; held alone for nothing, 2 threads capturing)
pathbench: slow call: waiting for the capture fence took 1.500 s on thread 4, run cd34 (at 6.0 s after the process started; held alone for cudaMallocAsync, 0 threads capturing)
pathbench: slow call: cudaGraphInstantiate took 4.000 s on thread 5 (at 7.0 s after the process started)
pathbench: slow call: waiting for the capture fence took 0.700 s on thread 6, run ef56 (at 8.0 s after the process started; held alone for nothing, 1 threads capturing)
"""


class SlowCalls(unittest.TestCase):
    def run_script(self, text):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sweep.log")
            with open(path, "w") as f:
                f.write(text)
            script = os.path.join(REPO, "scripts", "slow_calls.py")
            return subprocess.run([sys.executable, script, path], capture_output=True, text=True)

    def test_counts_seconds_and_holders(self):
        out = self.run_script(SLOW_LOG)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
        self.assertEqual(rows[1:3], ["| waiting for the capture fence | 3 | 4.7 | 2.50 |",
                                     "| cudaGraphInstantiate | 1 | 4.0 | 4.00 |"])
        self.assertIn("| nothing; captures in flight | 2 |", rows)
        self.assertIn("| cudaMallocAsync; no capture | 1 |", rows)

    def test_stalled_calls_with_their_stacks(self):
        stalled = (SLOW_LOG
                   + "pathbench: stalled call: launching a run's first step open for 60.0 s, run ab12; the stack"
                     " of its thread follows\n"
                   + "build/pathbench(_ZN2pb12run_trainingERKNS_11TrainConfigE+0x4c)[0x55883a26f195]\n"
                   + "/lib/x86_64-linux-gnu/libc.so.6(nanosleep+0x13)[0x7f94282f1e53]\n"
                   + "sweep x: 4/24 done\n"
                   + "build/pathbench(+0x4c195)[0x55883a26f195]\n")  # after another line: not a frame of it
        out = self.run_script(stalled)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("### stalled: launching a run's first step open for 60.0 s, run ab12", out.stdout)
        block = out.stdout.split("### stalled:")[1].split("```")[1].strip().splitlines()
        self.assertEqual(len(block), 2)
        self.assertIn("nanosleep+0x13", block[1])
        if shutil.which("c++filt"):
            self.assertIn("pb::run_training(pb::TrainConfig const&)", block[0])
        self.assertIn("| waiting for the capture fence | 3 | 4.7 | 2.50 |", out.stdout)  # the table still counts

    def test_a_log_without_slow_calls(self):
        out = self.run_script("sweep x: 24 of 24 runs done, 0 failed\n")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("no slow calls", out.stdout)


if __name__ == "__main__":
    unittest.main()
