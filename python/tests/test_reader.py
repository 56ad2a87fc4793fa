"""The Python package against the binary in $PATHBENCH: one small run per encoding (and per ablation
of RUNS: PaTH's spec keys, k and v convolved), its evaluation recomputed from the checkpoint by the
numpy model, dataset files, collect CSVs, checksums.

Evaluation data: `pathbench gen --split S` defaults to the evaluation seed (pb::kEvalSeed), and
`evaluate` scores examples 0..eval_n−1 of that stream, so the generated file holds exactly the
evaluated sequences. The runs train with --lr 0.003 --warmup 5, so that after 30 steps the
encodings' own parameters have moved enough for a wrong formula to change the loss well beyond
LOSS_RTOL (a wrong sign of PaTH's β or a dropped RoPE rotation moves it by ≥ 2e-5 relative).
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    raise ImportError("the python_reader test needs numpy: apt-get install python3-numpy "
                      "(scripts/install-deps.sh installs the project's packages)") from None

import pathbench as pb

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILT = [os.path.join(REPO, d, "pathbench") for d in ("build", "build-dev")]
EXE = os.environ.get("PATHBENCH") or next((p for p in BUILT if os.path.exists(p)), BUILT[0])
TRAIN = ["--task", "flipflop:len=16", "--layers", "2", "--d-model", "32", "--heads", "2",
         "--steps", "30", "--batch", "8", "--lr", "0.003", "--warmup", "5", "--eval-n", "32",
         "--threads", "2", "--device", "cpu"]
LOSS_RTOL = 1e-6  # float32 C++ against float64 numpy: measured ≤ 4e-8
# Run name: (pe spec, further train options); every encoding, then the ablations.
RUNS = {**{pe: (pe, []) for pe in pb.ENCODINGS},
        "path_conv0": ("path:conv=0", []), "path_beta1": ("path:beta_max=1", []),
        "path_fox_gate_scale": ("path_fox:gate_scale=1", []),
        "rope_kv_conv": ("rope", ["--kv-conv", "1"]), "path_fox_kv_conv": ("path_fox", ["--kv-conv", "1"])}
try:
    import torch
except ImportError:
    torch = None


def pathbench(*args):
    done = subprocess.run([EXE, *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pathbench {' '.join(args)} failed ({done.returncode}): {done.stderr}")


class Reader(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(EXE):
            raise RuntimeError(f"no pathbench binary at {EXE!r}: set PATHBENCH to the built binary")
        cls.tmp = tempfile.mkdtemp(prefix="pathbench_py_")
        cls.runs = {}
        for name, (pe, options) in RUNS.items():
            out = os.path.join(cls.tmp, "runs", name)
            pathbench("train", *TRAIN, "--pe", pe, *options, "--out", out)
            cls.runs[name] = pb.load_run(out)
        config = cls.runs["nope"].config
        cls.splits = sorted({e["split"] for e in cls.runs["nope"].evals})
        cls.data = {}
        for split in cls.splits:
            path = os.path.join(cls.tmp, split + ".bin")
            pathbench("gen", "--task", config["task"], "--split", split, "--n", str(config["eval_n"]),
                      "--out", path)
            cls.data[split] = pb.read_dataset(path)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_load_run(self):
        for name, run in self.runs.items():
            with self.subTest(run=name):
                self.assertEqual(pb.parse_pe(run.config["pe"])[0], pb.parse_pe(RUNS[name][0])[0])
                self.assertEqual(run.result["status"], "ok")
                self.assertEqual([m["step"] for m in run.metrics], list(range(1, 31)))
                self.assertEqual(run.last_eval("val")["step"], 30)
                shapes = {n: a.shape for n, a in run.weights.items()}
                self.assertEqual(shapes, pb.param_shapes(run.config, vocab=5))
                self.assertTrue(all(a.dtype == np.float32 for a in run.weights.values()))

    def test_forward_reproduces_eval(self):
        """loss within LOSS_RTOL, acc / seq_acc / n exactly, on every evaluated split."""
        for name, run in self.runs.items():
            for split, d in self.data.items():
                with self.subTest(run=name, split=split):
                    logits = pb.forward(run.weights, run.config, d.input)
                    self.assertEqual(logits.shape, (32, 16, 5))
                    got, want = pb.metrics(logits, d.target, d.scored), run.last_eval(split)
                    self.assertLess(abs(got["loss"] / want["loss"] - 1), LOSS_RTOL)
                    for key in ("acc", "seq_acc", "n", "n_seqs"):
                        self.assertEqual(got[key], want[key], key)

    def test_dataset_matches_jsonl(self):
        d = self.data["val"]
        self.assertEqual((d.spec, d.split, d.seed, d.vocab_size),
                         ("flipflop:len=16,p_ignore=0.8", "val", 0x5EED5EED, 5))
        path = os.path.join(self.tmp, "val.jsonl")
        pathbench("gen", "--task", d.spec, "--split", "val", "--n", "32", "--format", "jsonl",
                  "--out", path)
        with open(path) as f:
            rows = [json.loads(line) for line in f]
        for key in ("input", "target", "scored"):
            np.testing.assert_array_equal(getattr(d, key), np.array([r[key] for r in rows]), key)

    def test_dataset_checksums(self):
        with open(os.path.join(self.tmp, "val.bin"), "rb") as f:
            good = f.read()
        bad = os.path.join(self.tmp, "bad.bin")
        for offset, message in ((len(good) - 100, "payload checksum"), (70, "header checksum")):
            blob = bytearray(good)
            blob[offset] ^= 1
            with open(bad, "wb") as f:
                f.write(blob)
            with self.assertRaisesRegex(ValueError, message):
                pb.read_dataset(bad)
        with open(bad, "wb") as f:
            f.write(good[:-1])
        with self.assertRaisesRegex(ValueError, "bytes of records"):
            pb.read_dataset(bad)

    def test_checkpoint_checksum(self):
        path = os.path.join(self.runs["path"].path, "model.safetensors")
        with open(path, "rb") as f:
            good = f.read()
        self.assertIn(b'"xxh3_64":"', good[:4096])
        bad = os.path.join(self.tmp, "bad.safetensors")
        for blob, error in ((bytearray(good), "xxh3_64"), (bytearray(good.replace(b'"xxh3_64"', b'"xxh3_xx"', 1)), None)):
            blob[-5] ^= 1  # a bit of the last tensor
            with open(bad, "wb") as f:
                f.write(blob)
            if error:
                with self.assertRaisesRegex(ValueError, error):
                    pb.read_safetensors(bad)
            else:  # no checksum in the file: read unchecked
                self.assertEqual(set(pb.read_safetensors(bad)), set(self.runs["path"].weights))

    def test_xxh3_vectors(self):
        """Against XXH3_64bits of libxxhash, one length per code path."""
        data = bytes((7 * i + 3) % 256 for i in range(2048))
        want = {0: 0x2D06800538D394C2, 3: 0xA9088DDA485B481C, 8: 0x60539DB630471163,
                16: 0xB8C859B0F030B585, 100: 0xB5937857F0D78C9F, 200: 0x746CD0025327BF5B,
                2048: 0xABE604813BA62ED1}
        for n, h in want.items():
            self.assertEqual(pb.xxh3_64(data[:n]), h, n)

    def test_read_csv(self):
        out = os.path.join(self.tmp, "collected")
        pathbench("collect", os.path.join(self.tmp, "runs"), "-o", out)
        runs = pb.read_csv(os.path.join(out, "runs.csv"), pandas=False)
        self.assertEqual(len(runs), len(RUNS))
        for row in runs:  # run_id: the run directory's name
            run = self.runs[row["run_id"]]
            self.assertEqual((row["pe_name"], row["layers"], row["error"]),
                             (pb.parse_pe(run.config["pe"])[0], 2, None))
            self.assertEqual(row["acc_val"], run.result["eval"]["val"]["acc"])
        evals = pb.read_csv(os.path.join(out, "evals.csv"), pandas=False)
        evals = {(r["run_id"], r["split"]): r for r in evals}
        self.assertEqual(len(evals), len(runs) * len(self.splits))
        self.assertTrue(all(isinstance(r["loss"], float) and isinstance(r["n"], int)
                            for r in evals.values()))
        history = pb.read_csv(os.path.join(out, "history.csv"), pandas=False)
        self.assertEqual(len(history), len(evals))
        for row in pb.read_csv(os.path.join(out, "seqstats.csv"), pandas=False):
            bins = pb.parse_bins(row["bins"])
            ev = evals[(row["run_id"], row["split"])]
            self.assertEqual(sum(c for _, _, c in bins), ev["n_seqs"])
            self.assertEqual(sum(s * c for _, s, c in bins), ev["n"])
            self.assertEqual(sum(c for w, _, c in bins if w == 0) / ev["n_seqs"], ev["seq_acc"])
        try:
            import pandas  # noqa: F401
        except ImportError:
            return
        frame = pb.read_csv(os.path.join(out, "runs.csv"))
        self.assertEqual(sorted(frame["run_id"]), sorted(r["run_id"] for r in runs))

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_module(self):
        from pathbench.torch_model import PathbenchModel
        ids = self.data["val"].input
        for name, run in self.runs.items():
            with self.subTest(run=name):
                net = PathbenchModel.from_run(run.path)
                logits = net(torch.as_tensor(ids))
                want = pb.forward(run.weights, run.config, ids)
                self.assertLess(np.abs(logits.detach().numpy() - want).max(), 1e-10)
                logits.logsumexp(-1).sum().backward()
                self.assertTrue(all(p.grad is not None for p in net.params))


if __name__ == "__main__":
    unittest.main()
