"""pathbench's model as a torch.nn.Module: the formulas of model.py run on torch tensors, so the
module is differentiable and reproduces `model.forward` (float64 by default). Needs torch.

    net = PathbenchModel.from_run("runs/quick/<run_id>")
    logits = net(torch.as_tensor(tokens))  # (B, T, V)
"""
import numpy as np
import torch

from . import model
from .run import load_run


class TorchOps:
    """model.NumpyOps for torch tensors of one dtype and device."""
    lib = torch

    def __init__(self, dtype, device):
        self.dtype, self.device = dtype, device

    def asarray(self, x):
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def index(self, ids):
        return torch.as_tensor(ids, dtype=torch.long, device=self.device)

    def sum_last(self, x):
        return x.sum(-1, keepdim=True)

    def softmax_last(self, x):
        return torch.softmax(x, -1)

    def sigmoid(self, x):
        return torch.sigmoid(x)

    def softplus(self, x):  # log(1 + e^x) without torch's linear cut-off at x > 20
        return torch.logaddexp(x, torch.zeros_like(x))

    def log_sigmoid(self, x):
        return torch.nn.functional.logsigmoid(x)

    def clip_max(self, x, c):
        return torch.clamp(x, max=c)


class PathbenchModel(torch.nn.Module):
    """The checkpoint's tensors as parameters (`names[i]` is the checkpoint name of params[i])."""

    def __init__(self, weights, config, dtype=torch.float64):
        super().__init__()
        self.config = dict(config)
        self.names = sorted(weights)
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.as_tensor(
            np.asarray(weights[n]), dtype=dtype)) for n in self.names])

    @classmethod
    def from_run(cls, path, dtype=torch.float64):
        run = load_run(path)
        return cls(run.weights, run.config, dtype)

    def forward(self, input_ids):
        """Logits (B, T, V) for tokens (B, T)."""
        p0 = self.params[0]
        ops = TorchOps(p0.dtype, p0.device)
        return model.forward(dict(zip(self.names, self.params)), self.config, input_ids, ops)
