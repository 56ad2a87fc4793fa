"""Every published run is labelled with the code and the machine that made it: each commit that
stamped a run of a results/ folder (`commit` in its runs.csv) is named in that folder's README.md,
a "-dirty" commit (a binary built from a tree with uncommitted changes) as dirty, and so is each
GPU (`gpu_name`, "NVIDIA " left off) or the CPU. A README that lists a sweep's runs under a clean
commit when some ran from a modified tree fails here."""
import csv
import glob
import os
import re
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def unlabelled(folder):
    """The machines and commits of folder/runs.csv that folder/README.md does not name (as it should)."""
    readme = os.path.join(folder, "README.md")
    if not os.path.exists(readme):
        return ["README.md missing"]
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(folder, "runs.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    commits = {row.get("commit") or "(none)" for row in rows}
    machines = {(row.get("gpu_name") or "").removeprefix("NVIDIA ") or "CPU" for row in rows}
    missing = [f"{m} (machine)" for m in sorted(machines) if m not in text]
    for commit in sorted(commits):
        dirty = commit.endswith("-dirty")
        short = commit.removesuffix("-dirty")[:7]
        if not re.fullmatch(r"[0-9a-f]{7}", short):
            missing.append(f"{commit} (not a commit)")
        elif short not in text:
            missing.append(commit)
        elif dirty and not re.search(re.escape(short) + r"[0-9a-f]*-dirty", text):
            missing.append(f"{commit} (named, but not as dirty)")
    return missing


class ResultsLabels(unittest.TestCase):
    def test_every_published_commit_is_named(self):
        folders = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(REPO, "results", "*", "runs.csv")))
        self.assertGreater(len(folders), 0)
        for folder in folders:
            with self.subTest(folder=os.path.relpath(folder, REPO)):
                self.assertEqual(unlabelled(folder), [])

    def test_the_check_catches_a_mislabel(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "runs.csv"), "w", newline="") as f:
                csv.writer(f).writerows([["run_id", "commit", "gpu_name"], ["a", "c947eb9616ba", "NVIDIA H200"],
                                         ["b", "c947eb9616ba-dirty", "NVIDIA H200"], ["c", "ee3d63554695", ""]])
            readme = os.path.join(d, "README.md")
            with open(readme, "w") as f:
                f.write("| code | commit c947eb9 (2 runs), ee3d635 (1) |\n| machine | H200, a CPU |\n")
            self.assertEqual(unlabelled(d), ["c947eb9616ba-dirty (named, but not as dirty)"])
            with open(readme, "w") as f:
                f.write("| code | commit c947eb9 (1 run), c947eb9-dirty (1) |\n| machine | H100 |\n")
            self.assertEqual(unlabelled(d), ["CPU (machine)", "H200 (machine)", "ee3d63554695"])
            os.remove(readme)
            self.assertEqual(unlabelled(d), ["README.md missing"])


if __name__ == "__main__":
    unittest.main()
