"""Read pathbench's outputs in Python: run directories, collect CSVs, dataset files, and a
numpy reference of the model (pathbench.torch_model has a PyTorch module, needs torch)."""
from .dataset import Dataset, read_dataset
from .model import ENCODINGS, forward, metrics, param_shapes, parse_pe
from .run import Run, load_run, read_safetensors
from .tables import parse_bins, read_csv
from .xxh3 import xxh3_64

__all__ = ["Dataset", "ENCODINGS", "Run", "forward", "load_run", "metrics", "param_shapes",
           "parse_bins", "parse_pe", "read_csv", "read_dataset", "read_safetensors", "xxh3_64"]
