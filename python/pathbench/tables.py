"""The CSVs of `pathbench collect` (docs/sweeps.md): runs.csv, evals.csv, history.csv, seqstats.csv."""
import csv
import re

# Columns that stay strings even when every value looks like a number (a run id or commit may
# be all digits, "123e4" would read as a float).
STRING_COLUMNS = {"sweep", "run_id", "status", "error", "task", "task_name", "train_task", "pe",
                  "pe_name", "split", "data", "device", "commit", "gpu_name", "precision",
                  "stop_at", "stop", "eval_sizes", "init_from", "bins"}
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.I)


def _column_type(values):
    present = [v for v in values if v != ""]
    if present and all(_INT.fullmatch(v) for v in present):
        return int
    if present and all(_FLOAT.fullmatch(v) for v in present):
        return float
    return str


def read_csv(path, pandas=None):
    """A pandas DataFrame when pandas imports (pandas=None) or pandas=True, else a list of dicts.

    Without pandas, per column: the STRING_COLUMNS stay str; a column whose every non-empty field
    is an integer becomes int, one whose every non-empty field is a number (incl. inf, nan) float,
    any other str; empty fields are None. With pandas: the same STRING_COLUMNS as str, pandas's
    own inference for the others, empty fields NaN.
    """
    if pandas is not False:
        try:
            import pandas as pd
        except ImportError:
            if pandas:
                raise
        else:
            with open(path, newline="") as f:
                columns = next(csv.reader(f), [])
            return pd.read_csv(path, dtype={c: str for c in columns if c in STRING_COLUMNS},
                               keep_default_na=False, na_values=[""])
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return []
    types = {c: str if c in STRING_COLUMNS else _column_type([r[c] for r in rows]) for c in rows[0]}
    return [{c: (None if v == "" else types[c](v)) for c, v in r.items()} for r in rows]


def parse_bins(bins):
    """seqstats.csv `bins` "wrong:scored:sequences ..." -> [(wrong, scored, sequences), ...]."""
    return [tuple(int(x) for x in b.split(":")) for b in bins.split()]
