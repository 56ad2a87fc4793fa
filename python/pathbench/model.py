"""A plain reference of pathbench's model (models/transformer.cpp, models/position/), numpy float64.

    x = E[tokens];  per layer:  h1 = rmsnorm(x) ⊙ g_attn,  q, k, v = h1 Wq, h1 Wk, h1 Wv
        (with kv_conv: k, v = short_conv(h1 Wk; k_conv), short_conv(h1 Wv; v_conv)),
        x = x + attention_pe(q, k, v; h1) Wo,  h2 = rmsnorm(x) ⊙ g_mlp,  [a | b] = h2 W_up,
        x = x + (silu(a) ⊙ b) W_down;   logits = (rmsnorm(x) ⊙ g_final) W_head
    rmsnorm(x) = x / sqrt(mean(x²) + 1e-6);  vectors are rows, so y = x W with W (in, out).

Attention works on (B, T, H, D) arrays, head h of q being q[..., h, :] = (h1 Wq)[h·D:(h+1)·D];
τ = 1/√D. The formulas are written once against a small `ops` backend (NUMPY here;
torch_model.py passes torch's), without the blockwise algorithms of the C++ kernels.
"""
import math

import numpy as np

NORM_EPS = 1e-6  # RMSNorm, inside the sqrt
L2_EPS = 1e-6    # PaTH's L2 normalisation of w, inside the sqrt
CONV_WIDTH = 3   # PaTH's causal depthwise convolution
ENCODINGS = ("nope", "rope", "alibi", "sba", "fox", "path", "path_fox")
_PATH = {"w_rank": 32, "beta_clip": 0.0, "conv": 1, "beta_max": 2.0}
_DEFAULTS = {"rope": {"base": 10000.0}, "path": _PATH, "path_fox": {**_PATH, "gate_scale": 0}}
_INT_KEYS = ("w_rank", "block", "conv", "gate_scale")


class NumpyOps:
    """What numpy and torch spell differently; the rest is `lib` (einsum, exp, sqrt, cumsum, ...)."""
    lib = np

    def asarray(self, x):
        return np.asarray(x, np.float64)

    def index(self, ids):
        return np.asarray(ids, np.int64)

    def sum_last(self, x):  # Σ over the last axis, kept as a size-1 axis
        return x.sum(-1, keepdims=True)

    def softmax_last(self, x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def sigmoid(self, x):
        return 0.5 * (1 + np.tanh(0.5 * x))

    def softplus(self, x):  # log(1 + e^x)
        return np.logaddexp(0, x)

    def log_sigmoid(self, x):  # log σ(x) = −softplus(−x)
        return -np.logaddexp(0, -x)

    def clip_max(self, x, c):
        return np.minimum(x, c)


NUMPY = NumpyOps()


def parse_pe(spec):
    """"path:w_rank=32,beta_clip=0" -> ("path", {"w_rank": 32, "beta_clip": 0.0}), with defaults."""
    name, _, rest = spec.partition(":")
    keys = dict(_DEFAULTS.get(name, {}))
    for item in filter(None, rest.split(",")):
        key, value = item.split("=")
        keys[key] = int(value) if key in _INT_KEYS else float(value)
    return name, keys


def param_shapes(config, vocab):
    """{name: shape} of the checkpoint of a run (docs/run-format.md, "Weights")."""
    C, H, L = config["d_model"], config["heads"], config["layers"]
    HD, F = C, max(1, math.floor(config["mlp_ratio"] * C + 0.5))  # H·D = C; F = lround(ratio·C)
    pe, keys = parse_pe(config["pe"])
    own = {"fox": {"w_f": (C, H), "b_f": (H,)}}
    if pe in ("path", "path_fox"):
        r = keys["w_rank"]
        own[pe] = {"w_down": (C, r), "w_up": (r, HD), **({"w_conv": (CONV_WIDTH, HD)} if keys["conv"] else {}),
                   "w_beta": (C, H), "b_beta": (H,), **(own["fox"] if pe == "path_fox" else {})}
    shapes = {"embed": (vocab, C), "final_norm": (C,), "head": (C, vocab)}
    for i in range(L):
        layer = {"attn_norm": (C,), "wq": (C, HD), "wk": (C, HD), "wv": (C, HD), "wo": (HD, C),
                 **({"k_conv": (CONV_WIDTH, HD), "v_conv": (CONV_WIDTH, HD)} if config.get("kv_conv") else {}),
                 "mlp_norm": (C,), "w_up": (C, 2 * F), "w_down": (F, C),
                 **{"pe." + n: s for n, s in own.get(pe, {}).items()}}
        shapes.update({f"layers.{i}.{n}": s for n, s in layer.items()})
    return shapes


def causal_bias(T):
    """(T, T): 0 where j ≤ i, −inf above the diagonal."""
    return np.where(np.tri(T, dtype=bool), 0.0, -np.inf)


def softmax_attention(ops, q, k, v, log_f=None):
    """o_i = Σ_{j≤i} softmax_j(s_ij) v_j,  s_ij = τ q_i·k_j + G_i − G_j,  G_t = Σ_{u≤t} log f_u.

    q, k, v (B, T, H, D); log_f (B, T, H) or None (G = 0).
    """
    T, D = q.shape[1], q.shape[3]
    s = ops.lib.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D) + ops.asarray(causal_bias(T))
    if log_f is not None:
        G = ops.lib.swapaxes(ops.lib.cumsum(log_f, 1), 1, 2)  # (B, H, T)
        s = s + G[..., :, None] - G[..., None, :]
    return ops.lib.einsum("bhij,bjhd->bihd", ops.softmax_last(s), v)


def stick_breaking_attention(ops, q, k, v):
    """Stick-breaking (kernels/cpu/stick_breaking.cpp), z_ij = τ q_i·k_j, for j < i:

    A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)),  i.e. log A_ij = log σ(z_ij) − Σ_{j<l<i} softplus(z_il),
    and the leftover rem_i = ∏_{l<i} (1 − σ(z_il)) goes to v_i:  o_i = Σ_{j<i} A_ij v_j + rem_i v_i.
    """
    T, D = q.shape[1], q.shape[3]
    z = ops.lib.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
    below = ops.asarray(np.tri(T, k=-1))  # (T, T): 1 where j < i
    sp = ops.softplus(z) * below
    csum = ops.lib.cumsum(sp, -1)                 # Σ_{l≤j} softplus(z_il), l < i
    tail = csum[..., -1:] - csum                  # Σ_{j<l<i} softplus(z_il)
    A = ops.lib.exp(ops.log_sigmoid(z) - tail) * below
    A = A + ops.lib.exp(-csum[..., -1:]) * ops.asarray(np.eye(T))  # rem_i on the diagonal
    return ops.lib.einsum("bhij,bjhd->bihd", A, v)


def path_attention(ops, q, k, v, w, beta, log_f=None):
    """PaTH (kernels/README.md, "PaTH attention"), by the definition, O(T² D) per head:

    s_ij = τ q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j + G_i − G_j  (j ≤ i),  H_t = I − β_t w_t w_tᵀ,
    o_i = Σ_j softmax_j(s_ij) v_j.  Step i moves every earlier key by H_i (u_j ← H_i u_j, j < i),
    so u_j = H_i ⋯ H_{j+1} k_j when row i is read. w (B, T, H, D), beta (B, T, H).
    """
    T, D = q.shape[1], q.shape[3]
    u = ops.lib.swapaxes(k, 1, 2)       # (B, H, T, D): u_j, starting at k_j
    earlier = ops.asarray(np.tri(T, k=-1))  # row i: 1 for the keys j < i
    rows = []
    for i in range(T):
        wi, qi = w[:, i][:, :, None, :], q[:, i][:, :, None, :]  # (B, H, 1, D)
        uw = ops.sum_last(u * wi) * (beta[:, i][:, :, None, None] * earlier[i][:, None])
        u = u - uw * wi                                          # u_j ← H_i u_j for j < i
        rows.append(ops.sum_last(u * qi)[..., 0])                # (B, H, T): q_i·u_j
    s = ops.lib.stack(rows, 2) / math.sqrt(D) + ops.asarray(causal_bias(T))  # (B, H, T, T)
    if log_f is not None:
        G = ops.lib.swapaxes(ops.lib.cumsum(log_f, 1), 1, 2)
        s = s + G[..., :, None] - G[..., None, :]
    return ops.lib.einsum("bhij,bjhd->bihd", ops.softmax_last(s), v)


def rope(ops, x, base):
    """Rotate-half RoPE: pairs (m, m + D/2) of position t turn by t·base^(−2m/D),
    out_m = x_m cos − x_{m+D/2} sin,  out_{m+D/2} = x_{m+D/2} cos + x_m sin.  x (B, T, H, D)."""
    T, D = x.shape[1], x.shape[3]
    m = np.arange(D // 2)
    angle = np.arange(T)[:, None] * base ** (-2.0 * m / D)  # (T, D/2)
    R = np.zeros((T, D, D))                                 # out = x R_t
    R[:, m, m] = R[:, m + D // 2, m + D // 2] = np.cos(angle)
    R[:, m + D // 2, m], R[:, m, m + D // 2] = -np.sin(angle), np.sin(angle)
    return ops.lib.einsum("bthd,tde->bthe", x, ops.asarray(R))


def short_conv(ops, u, a):
    """c_t = SiLU(Σ_{k<3} a_k ⊙ u_{t−k}) over u (B, T, C), u = 0 before t = 0 (kernels/ops.h)."""
    T = u.shape[1]
    shift = [ops.asarray(np.eye(T, k=-j)) for j in range(CONV_WIDTH)]  # (S_j u)_t = u_{t−j}
    c = sum(ops.lib.einsum("ts,bsc->btc", shift[j], u) * a[j] for j in range(CONV_WIDTH))
    return c * ops.sigmoid(c)


def path_inputs(ops, p, x, H, keys):
    """PaTH's w and β from the normalised layer input x (B, T, C), models/position/path.h:

    u = x W_down W_up,  c = short_conv(u; w_conv) (c = u with conv=0),
    w = c / sqrt(‖c‖² + 1e-6) per head,  β = beta_max σ(x W_β + b_β), min(β, 2 − beta_clip) if beta_clip > 0.
    """
    B, T = x.shape[:2]
    u = x @ p["w_down"] @ p["w_up"]  # (B, T, H·D)
    c = (short_conv(ops, u, p["w_conv"]) if keys["conv"] else u).reshape(B, T, H, -1)
    w = c / ops.lib.sqrt(ops.sum_last(c * c) + L2_EPS)
    beta = keys["beta_max"] * ops.sigmoid(x @ p["w_beta"] + p["b_beta"])
    return w, ops.clip_max(beta, 2 - keys["beta_clip"]) if keys["beta_clip"] > 0 else beta


def attention(ops, pe, keys, p, x, q, k, v):
    """The attention output (B, T, H, D) of encoding `pe`; p holds the layer's "pe.*" weights."""
    H = q.shape[2]
    gated = pe in ("fox", "path_fox")
    log_f = ops.log_sigmoid(x @ p["w_f"] + p["b_f"]) if gated else None  # (B, T, H)
    if keys.get("gate_scale"):  # path_fox:gate_scale=1: the gate scaled with the logit, by τ
        log_f = log_f / math.sqrt(q.shape[3])
    if pe == "nope" or pe == "fox":
        return softmax_attention(ops, q, k, v, log_f)
    if pe == "rope":
        return softmax_attention(ops, rope(ops, q, keys["base"]), rope(ops, k, keys["base"]), v)
    if pe == "alibi":  # log f = −m_h, m_h = 2^(−8h/H), h = 1..H
        slopes = -(2.0 ** (-8.0 * np.arange(1, H + 1) / H))
        log_f = ops.asarray(np.tile(slopes, (q.shape[0], q.shape[1], 1)))  # (B, T, H)
        return softmax_attention(ops, q, k, v, log_f)
    if pe == "sba":
        return stick_breaking_attention(ops, q, k, v)
    if pe in ("path", "path_fox"):
        w, beta = path_inputs(ops, p, x, H, keys)
        return path_attention(ops, q, k, v, w, beta, log_f)
    raise ValueError(f"unknown position encoding {pe!r}; known: {', '.join(ENCODINGS)}")


def forward(weights, config, input_ids, ops=NUMPY):
    """Logits (B, T, V) of the model of `config` (config.json) with `weights` for tokens (B, T)."""
    pe, keys = parse_pe(config["pe"])
    W = {n: ops.asarray(a) for n, a in weights.items()}
    H = config["heads"]

    def rmsnorm(x, g):
        return x / ops.lib.sqrt(ops.sum_last(x * x) / x.shape[-1] + NORM_EPS) * g

    x = W["embed"][ops.index(input_ids)]  # (B, T, C)
    B, T, _ = x.shape
    for i in range(config["layers"]):
        p = {n[len(f"layers.{i}."):]: a for n, a in W.items() if n.startswith(f"layers.{i}.")}
        h1 = rmsnorm(x, p["attn_norm"])
        q, k, v = (h1 @ p[n] for n in ("wq", "wk", "wv"))
        if config.get("kv_conv"):
            k, v = short_conv(ops, k, p["k_conv"]), short_conv(ops, v, p["v_conv"])
        q, k, v = (a.reshape(B, T, H, -1) for a in (q, k, v))
        pe_p = {n[3:]: a for n, a in p.items() if n.startswith("pe.")}
        x = x + attention(ops, pe, keys, pe_p, h1, q, k, v).reshape(B, T, -1) @ p["wo"]
        ab = rmsnorm(x, p["mlp_norm"]) @ p["w_up"]  # (B, T, 2F): [a | b]
        a, b = ab[..., :ab.shape[-1] // 2], ab[..., ab.shape[-1] // 2:]
        x = x + (a * ops.sigmoid(a) * b) @ p["w_down"]
    return rmsnorm(x, W["final_norm"]) @ W["head"]


def metrics(logits, target, scored):
    """The metrics of eval.jsonl from logits (B, T, V), target (B, T) (−1: none), scored (B, T):

    loss = mean cross-entropy over the targets ≥ 0, acc = accuracy of the argmax (lowest index on
    ties) over the scored targets, seq_acc = fraction of sequences with every scored target right.
    """
    logits, target = np.asarray(logits, np.float64), np.asarray(target)
    scored = np.asarray(scored, bool)
    has = target >= 0
    mx = logits.max(-1)
    lse = mx + np.log(np.exp(logits - mx[..., None]).sum(-1))
    picked = np.take_along_axis(logits, np.where(has, target, 0)[..., None], -1)[..., 0]
    wrong = (logits.argmax(-1) != target) & scored
    n = int(scored.sum())
    return {"loss": float((lse - picked)[has].mean()) if has.any() else 0.0,
            "acc": (n - int(wrong.sum())) / n if n else 0.0,
            "seq_acc": float((~wrong.any(1)).mean()), "n": n, "n_seqs": int(target.shape[0])}
