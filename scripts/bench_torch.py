#!/usr/bin/env python3
"""PyTorch reference for pathbench's training-step benchmark.

Measures, on a CUDA GPU, the time of one training step of the PyTorch equivalent of pathbench's
RoPE transformer on random tokens: zero_grad(set_to_none) + forward + backward +
clip_grad_norm_(1.0) + AdamW, with the batch drawn by torch.randint on the GPU inside the step.
The configs are those of docs/anchors.md "Training step", so that pathbench's CUDA
trainer and PyTorch can be timed side by side in one run on one machine.

The model mirrors models/transformer.cpp (with models/params.cpp, kernels/cpu/rope.cpp,
kernels/cpu/adamw.cpp and the defaults of runners/train_config.h):
token embedding (V, C) -> L x [RMSNorm -> q, k, v = h Wq, h Wk, h Wv (no biases) -> RoPE on q, k
(rotate-half: channel m pairs with m + D/2, angle t * 10000^(-2m/D)) -> causal softmax attention,
scale 1/sqrt(D) -> x += att Wo; RMSNorm -> [a | b] = h W_up (C, 2F) -> x += (silu(a) * b) W_down]
-> RMSNorm -> untied head (C, V) -> mean cross-entropy over all positions (every random target is
>= 0). RMSNorm eps 1e-6 with a weight, F = round(4 * C), weights N(0, 0.02^2), norm weights 1.
AdamW: lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the matrices only.

Run it where PyTorch and a GPU exist:
    python3 scripts/bench_torch.py --config all --precision fp32
    python3 scripts/bench_torch.py --config all --precision all --compile both --out torch.csv
    python3 scripts/bench_torch.py --check-shapes    # CPU only: builds the models, counts parameters

stdout gets a CSV header and one row per (config, precision, compiled); ms_per_step is the median
of the timed steps (torch.cuda.Event around each step) and tokens_per_s = batch * seq_len / median.
Progress, the mean step time and the vocabulary sizes go to stderr. Errors: one line, exit 2.
"""
import argparse
import csv
import inspect
import math
import os
import statistics
import sys
import warnings
from dataclasses import dataclass


def die(message):
    print(f"bench_torch: error: {message}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    die("PyTorch is not installed here (run this script where torch exists)")

NORM_EPS = 1e-6        # models/transformer.cpp kNormEps
ROPE_BASE = 10000.0    # rope:base=10000
MLP_RATIO = 4.0        # runners/train_config.h mlp_ratio
INIT_STD = 0.02        # models/params.cpp Init::Normal
LR, BETAS, ADAM_EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


@dataclass(frozen=True)
class Config:
    name: str
    task: str      # the pathbench task spec the config stands for
    layers: int
    d_model: int
    heads: int
    seq_len: int
    batch: int
    vocab: int     # the task's vocab_size()


# Vocabulary sizes as tasks/*.cpp define vocab_size(): flipflop 5 (w r i 0 1), mqrar
# n_keys + n_values = 32 + 8160, wordproblem the group's order (|A5| = 60; bos=0 keeps the
# benchmark's shape T = 64, V = 60 of the earlier measurements).
CONFIGS = {
    "flipflop": Config("flipflop", "flipflop:len=512", 1, 128, 2, 512, 64, 5),
    "mqrar": Config("mqrar", "mqrar:n_keys=32,n_values=8160,len=768", 2, 256, 2, 768, 64, 32 + 8160),
    "a5": Config("a5", "wordproblem:group=a5,len=64,bos=0", 4, 128, 4, 64, 256, 60),
}
PRECISIONS = ("fp32", "tf32", "bf16")
CSV_HEADER = ("framework,config,pe,precision,compiled,layers,d_model,heads,seq_len,batch,vocab,"
              "ms_per_step,tokens_per_s,gpu,torch").split(",")


def rope_tables(seq_len, head_dim):
    """cos and sin of t * base^(-2m/D), (T, D/2), computed in float64 and stored in float32."""
    theta = ROPE_BASE ** (-2.0 * torch.arange(head_dim // 2, dtype=torch.float64) / head_dim)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta
    return angle.cos().float(), angle.sin().float()


def rope(x, cos, sin):
    """Rotate-half RoPE of x (B, T, H, D): the pair (m, m + D/2) turns by the angle of (t, m)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)  # (T, 1, D/2)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def normal_param(*shape):
    return nn.Parameter(torch.randn(*shape) * INIT_STD)


class RMSNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, NORM_EPS)


class Block(nn.Module):
    """x += attention(RoPE) of RMSNorm(x); x += SwiGLU MLP of RMSNorm(x). Weights are (in, out)."""

    def __init__(self, d_model, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(d_model)
        self.wq, self.wk, self.wv = (normal_param(d_model, d_model) for _ in range(3))
        self.wo = normal_param(d_model, d_model)
        self.mlp_norm = RMSNorm(d_model)
        self.w_up = normal_param(d_model, 2 * ffn)  # [gate | up]
        self.w_down = normal_param(ffn, d_model)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        D = C // self.heads
        h = self.attn_norm(x)
        q, k, v = ((h @ w).view(B, T, self.heads, D) for w in (self.wq, self.wk, self.wv))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, scale=1.0 / math.sqrt(D))
        x = x + att.transpose(1, 2).reshape(B, T, C) @ self.wo
        a, b = (self.mlp_norm(x) @ self.w_up).chunk(2, dim=-1)
        return x + (F.silu(a) * b) @ self.w_down


class Transformer(nn.Module):
    """forward(tokens, targets) -> mean cross-entropy; tokens and targets are (B, T) int64."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.d_model
        self.embed = normal_param(cfg.vocab, C)
        self.layers = nn.ModuleList(
            Block(C, cfg.heads, max(1, round(MLP_RATIO * C))) for _ in range(cfg.layers))
        self.final_norm = RMSNorm(C)
        self.head = normal_param(C, cfg.vocab)
        cos, sin = rope_tables(cfg.seq_len, C // cfg.heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = F.embedding(tokens, self.embed)
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T])
        logits = self.final_norm(x) @ self.head
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make_optimizer(model):
    """AdamW as pathbench's: decay on the matrices, none on the norm weights; fused if possible."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    impl = {"fused": True} if "fused" in inspect.signature(torch.optim.AdamW).parameters else {"foreach": True}
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=ADAM_EPS, **impl)


def set_precision(precision):
    """fp32 and bf16: fp32 matmuls in full fp32; tf32: fp32 matmuls on the TF32 tensor cores."""
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    # torch.compile's hint to enable TF32: fp32 without TF32 is what --precision fp32 asks for.
    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")


def time_steps(model, opt, cfg, precision, warmup, steps, seed):
    """Runs warmup + steps training steps; returns the GPU-event time of each timed step in ms."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (cfg.batch, cfg.seq_len)

    def step():
        tokens = torch.randint(0, cfg.vocab, shape, device="cuda", generator=gen)
        targets = torch.randint(0, cfg.vocab, shape, device="cuda", generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()

    for _ in range(warmup):
        step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(steps)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def bench(cfg, precision, compiled, args):
    """Times one (config, precision, compiled) case; returns its CSV row."""
    set_precision(precision)
    torch.manual_seed(args.seed)
    model = Transformer(cfg).cuda()
    opt = make_optimizer(model)
    if compiled:
        torch._dynamo.reset()
        model = torch.compile(model)
    label = f"{cfg.name} {precision} {'compiled' if compiled else 'eager'}"
    log(f"{label}: {cfg.task}, vocab {cfg.vocab}, {count_params(model):,} parameters, "
        f"{args.warmup} warm-up + {args.steps} timed steps")
    ms = time_steps(model, opt, cfg, precision, args.warmup, args.steps, args.seed)
    median, mean = statistics.median(ms), statistics.fmean(ms)
    tokens = cfg.batch * cfg.seq_len
    log(f"{label}: median {median:.3f} ms/step, mean {mean:.3f} ms/step, "
        f"{tokens / median * 1e3:,.0f} tokens/s")
    return ["pytorch", cfg.name, "rope", precision, int(compiled), cfg.layers, cfg.d_model, cfg.heads,
            cfg.seq_len, cfg.batch, cfg.vocab, f"{median:.4f}", f"{tokens / median * 1e3:.0f}",
            torch.cuda.get_device_name(), torch.__version__]


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def check_shapes(configs, seed):
    """Builds each model on the CPU, prints its parameter count and the loss of one sequence."""
    for cfg in configs:
        torch.manual_seed(seed)
        model = Transformer(cfg)
        tokens, targets = (torch.randint(0, cfg.vocab, (1, cfg.seq_len)) for _ in range(2))
        loss = model(tokens, targets)
        loss.backward()
        assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
        print(f"{cfg.name:9s} {cfg.task:40s} layers={cfg.layers} d_model={cfg.d_model} heads={cfg.heads} "
              f"seq_len={cfg.seq_len} batch={cfg.batch} vocab={cfg.vocab} params={count_params(model)} "
              f"loss={loss.item():.4f} (ln vocab {math.log(cfg.vocab):.4f})")


def log(message):
    print(f"bench_torch: {message}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    p.add_argument("--precision", choices=[*PRECISIONS, "all"], default="fp32",
                   help="fp32: no TF32; tf32: TF32 matmuls; bf16: bf16 autocast (default fp32)")
    p.add_argument("--compile", nargs="?", const="on", default="off", choices=["off", "on", "both"],
                   help="torch.compile the model: bare --compile or 'on'; 'both' times eager and compiled")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    p.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the tokens (default 0)")
    p.add_argument("--out", help="also append the rows to this CSV file (header written if it is new)")
    p.add_argument("--check-shapes", action="store_true",
                   help="build the models on the CPU and print their parameter counts; no GPU needed")
    args = p.parse_args()
    if args.warmup < 0 or args.steps < 1:
        die(f"--warmup must be >= 0 and --steps >= 1, got {args.warmup} and {args.steps}")
    return args


def main():
    args = parse_args()
    configs = list(CONFIGS.values()) if args.config == "all" else [CONFIGS[args.config]]
    if args.check_shapes:
        check_shapes(configs, args.seed)
        return
    if not torch.cuda.is_available():
        die("no CUDA device visible to PyTorch (torch.cuda.is_available() is False)")
    precisions = PRECISIONS if args.precision == "all" else (args.precision,)
    compiles = {"off": (False,), "on": (True,), "both": (False, True)}[args.compile]
    try:
        out_file = open(args.out, "a", newline="") if args.out else None
    except OSError as e:
        die(f"cannot open --out {args.out}: {e.strerror}")
    writers = [csv.writer(f, lineterminator="\n") for f in (sys.stdout, out_file) if f]
    writers[0].writerow(CSV_HEADER)
    if out_file and os.path.getsize(args.out) == 0:
        writers[1].writerow(CSV_HEADER)
    for cfg in configs:
        for precision in precisions:
            for compiled in compiles:
                row = bench(cfg, precision, compiled, args)
                for w in writers:
                    w.writerow(row)
                sys.stdout.flush()
                if out_file:
                    out_file.flush()


if __name__ == "__main__":
    main()
