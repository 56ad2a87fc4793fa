// PaTH attention, CPU reference, by the blockwise UT transform: O(T²·D) per (b, h) for any block
// size, no D×D matrix ever formed. Per (b, h): the UT transform of every block, the T×T logits
// by one right-to-left scan over the key blocks that moves all later queries at once (large
// products), a causal softmax and P V. The backward recomputes the logits, keeping the scan's
// states, and runs the scan in reverse. Memory per thread: O(T² + T²·D / block).
// Formulas and the derivation of the backward: kernels/README.md, "PaTH attention".
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_common.h"
#include "kernels/ops.h"

namespace pb {
namespace {

using Eigen::Dynamic;
template <class S>
using Mat = Eigen::Matrix<S, Dynamic, Dynamic, Eigen::RowMajor>;
template <class S>
using Vec = Eigen::Matrix<S, Dynamic, 1>;
template <class S>
using ConstRows = Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>>;
template <class S>
using Rows = Eigen::Map<Mat<S>, 0, Eigen::OuterStride<>>;
template <class S>
using ConstSeq = Eigen::Map<const Vec<S>, 0, Eigen::InnerStride<>>;
template <class S>
using Seq = Eigen::Map<Vec<S>, 0, Eigen::InnerStride<>>;

// One (b, h) inside a (B, T, H, D) buffer (a (T, D) view) or a (B, T, H) buffer (a (T) view).
struct HeadSlice {
  AttnShape shape;
  int b, h;

  int64_t seq_offset() const { return int64_t(b) * shape.T * shape.H + h; }
  template <class S>
  ConstRows<S> rows(const S* p) const {
    return ConstRows<S>(p + seq_offset() * shape.D, shape.T, shape.D, Eigen::OuterStride<>(shape.H * shape.D));
  }
  template <class S>
  Rows<S> rows(S* p) const {
    return Rows<S>(p + seq_offset() * shape.D, shape.T, shape.D, Eigen::OuterStride<>(shape.H * shape.D));
  }
  template <class S>
  ConstSeq<S> seq(const S* p) const {
    return ConstSeq<S>(p + seq_offset(), shape.T, Eigen::InnerStride<>(shape.H));
  }
  template <class S>
  Seq<S> seq(S* p) const {
    return Seq<S>(p + seq_offset(), shape.T, Eigen::InnerStride<>(shape.H));
  }
};

// Blocks [c·size, c·size + len(c)) of the sequence; the last one may be partial.
struct Blocking {
  int T, size;

  int count() const { return (T + size - 1) / size; }
  int start(int c) const { return c * size; }
  int len(int c) const { return std::min(size, T - c * size); }
};

template <class S>
struct HeadInputs {
  ConstRows<S> q, k, v, w;  // (T, D)
  ConstSeq<S> beta;         // (T)
  Vec<S> g;                 // (T): G_t = Σ_{u≤t} log_f_u, zero without a gate
};

template <class S>
HeadInputs<S> head_inputs(const HeadSlice& at, const S* q, const S* k, const S* v, const S* w,
                          const S* beta, const S* log_f) {
  Vec<S> g(at.shape.T);  // (T)
  attn::gate_prefix(g, log_f, at.shape, at.b, at.h);
  return {at.rows(q), at.rows(k), at.rows(v), at.rows(w), at.seq(beta), std::move(g)};
}

template <class S>
void keep_tril_incl(Mat<S>& m) {
  m.template triangularView<Eigen::StrictlyUpper>().setZero();
}
template <class S>
void keep_strict_lower(Mat<S>& m) {
  m.template triangularView<Eigen::Upper>().setZero();
}

// The UT transform of one block (n rows) and what it gives: queries at the block's left edge,
// keys at its right edge, the intra-block logits. qw, e, tm, m are kept for the backward.
template <class S>
struct UtBlock {
  Mat<S> tm;     // (n, n): Tm = (I + strictLower(diag(β) W Wᵀ))⁻¹
  Mat<S> u;      // (n, D): U = Tm diag(β) W
  Mat<S> qw;     // (n, n): tril_incl(Q Wᵀ)
  Mat<S> e;      // (n, n): E = strictLower(diag(β) W Kᵀ)
  Mat<S> m;      // (n, n): M = Tm E
  Mat<S> q_hat;  // (n, D): Q̃ = Q − QW U
  Mat<S> kw;     // (2n, D): [K̃; W], K̃ = K − Mᵀ W, stacked with W for the scan's fused products
  Mat<S> s_loc;  // (n, n): S_loc = tril_incl(Q Kᵀ) − QW M, unscaled PaTH logits inside the block
};

template <class S>
UtBlock<S> ut_block(const HeadInputs<S>& in, int a, int n) {
  const auto q = in.q.middleRows(a, n), k = in.k.middleRows(a, n), w = in.w.middleRows(a, n);  // (n, D)
  const Mat<S> wb = in.beta.segment(a, n).asDiagonal() * w;  // (n, D): Wb = diag(β) W
  UtBlock<S> ut;
  const Mat<S> a_full = wb * w.transpose();  // (n, n): diag(β) W Wᵀ, its strict lower part is A
  ut.tm = a_full.template triangularView<Eigen::UnitLower>().solve(Mat<S>::Identity(n, n));  // Tm = (I + A)⁻¹
  const auto tm = ut.tm.template triangularView<Eigen::UnitLower>();
  ut.u.noalias() = tm * wb;  // U = Tm diag(β) W
  ut.qw.noalias() = q * w.transpose();
  keep_tril_incl(ut.qw);  // QW = tril_incl(Q Wᵀ)
  ut.e.noalias() = wb * k.transpose();
  keep_strict_lower(ut.e);  // E = strictLower(diag(β) W Kᵀ)
  ut.m.noalias() = tm * ut.e;  // M = Tm E
  ut.q_hat = q;
  const auto qw = ut.qw.template triangularView<Eigen::Lower>();
  ut.q_hat.noalias() -= qw * ut.u;  // Q̃ = Q − QW U
  ut.kw.resize(2 * n, w.cols());
  ut.kw.topRows(n) = k;
  ut.kw.topRows(n).noalias() -= ut.m.transpose().template triangularView<Eigen::StrictlyUpper>() * w;  // K̃ = K − Mᵀ W
  ut.kw.bottomRows(n) = w;
  ut.s_loc.noalias() = q * k.transpose();
  keep_tril_incl(ut.s_loc);
  ut.s_loc.noalias() -= qw * ut.m;  // S_loc = tril_incl(Q Kᵀ) − QW M
  return ut;
}

template <class S>
std::vector<UtBlock<S>> ut_blocks(const HeadInputs<S>& in, const Blocking& bk) {
  std::vector<UtBlock<S>> ut;
  ut.reserve(bk.count());
  for (int c = 0; c < bk.count(); ++c) ut.push_back(ut_block(in, bk.start(c), bk.len(c)));
  return ut;
}

// The scan's states, per key block J < count − 1, for the backward.
template <class S>
struct ScanStates {
  std::vector<Mat<S>> r;  // [J] (T − a_{J+1}, D): R_J, every query after block J at J's right edge
  std::vector<Mat<S>> x;  // [J] (T − a_{J+1}, n_J): X_J = R_J W_Jᵀ (J ≥ 1)
};

// Per-thread buffers, reused across the (b, h) it handles.
template <class S>
struct Scratch {
  Mat<S> z;            // (T, T), lower part: PaTH logits, then probabilities
  Mat<S> dz;           // (T, T), lower part: dP, then the gradient of the PaTH logits
  ScanStates<S> scan;  // backward only
};

// Unscaled PaTH logits z (T, T), lower part incl. the diagonal (the rest is not written): S_loc on
// the diagonal blocks, the right-to-left scan below them. The scan keeps R, all queries after key
// block J moved to J's right edge: block J + 1 enters at its left edge (R = Q̃_{J+1}), then
// Z[·,J] = R K̃_Jᵀ and R ← R P_J = R − (R W_Jᵀ) U_J.
template <class S>
void path_logits(Mat<S>& z, ScanStates<S>* st, const HeadInputs<S>& in,
                 const std::vector<UtBlock<S>>& ut, const Blocking& bk) {
  const int T = bk.T, n_blocks = bk.count();
  z.resize(T, T);
  for (int c = 0; c < n_blocks; ++c) z.block(bk.start(c), bk.start(c), bk.len(c), bk.len(c)) = ut[c].s_loc;
  if (st) {
    st->r.resize(n_blocks);
    st->x.resize(n_blocks);
  }
  Mat<S> r(T, in.q.cols());  // (T, D): rows [a_{J+1}, T) hold R
  Mat<S> zx;                 // (T − a_{J+1}, 2 n_J): [Z[·,J], X_J]
  for (int J = n_blocks - 2; J >= 0; --J) {
    const int a1 = bk.start(J + 1), m = T - a1, aj = bk.start(J), nj = bk.len(J);
    r.middleRows(a1, bk.len(J + 1)) = ut[J + 1].q_hat;  // R_{block J+1} = Q̃_{J+1}
    auto rs = r.bottomRows(m);                          // (m, D)
    if (st) st->r[J] = rs;
    if (J == 0) {
      z.bottomLeftCorner(m, nj).noalias() = rs * ut[0].kw.topRows(nj).transpose();  // Z[·,0] = R K̃_0ᵀ
      break;
    }
    zx.noalias() = rs * ut[J].kw.transpose();  // [Z[·,J], X_J] = R [K̃_J; W_J]ᵀ
    z.block(a1, aj, m, nj) = zx.leftCols(nj);
    rs.noalias() -= zx.rightCols(nj) * ut[J].u;  // R ← R − X_J U_J
    if (st) st->x[J] = zx.rightCols(nj);
  }
}

// Row i of the PaTH logits in place → s_ij = scale·z_ij + G_i − G_j (j ≤ i).
template <class S, class Row>
void scale_and_gate(Row row, int i, const Vec<S>& g, S scale) {
  row.array() = scale * row.array() + g(i) - g.head(i + 1).transpose().array();
}

template <class S>
void forward_head(Rows<S> o, Seq<S> lse, const HeadInputs<S>& in, const Blocking& bk, S scale,
                  Scratch<S>& sc) {
  path_logits<S>(sc.z, nullptr, in, ut_blocks(in, bk), bk);
  for (int i = 0; i < bk.T; ++i) {
    auto row = sc.z.row(i).head(i + 1);
    scale_and_gate(row, i, in.g, scale);
    const S mx = row.maxCoeff();
    row = (row.array() - mx).exp();
    const S sum = row.sum();
    row /= sum;                   // p_ij = softmax_j(s_ij)
    lse(i) = mx + std::log(sum);  // lse_i = log Σ_j exp(s_ij)
  }
  o.noalias() = sc.z.template triangularView<Eigen::Lower>() * in.v;  // o = P V
}

// ---------------------------------------------------------------------------------------------
// Backward

// Gradients of one block's UT quantities, accumulated over the scan.
template <class S>
struct BlockGrad {
  Mat<S> dq_hat;  // (n, D)
  Mat<S> dkw;     // (2n, D): [dK̃; the scan's part of dW]
  Mat<S> du;      // (n, D)
  Mat<S> ds_loc;  // (n, n): d S_loc (tril_incl)
};

template <class S>
std::vector<BlockGrad<S>> zero_block_grads(const Blocking& bk, int D) {
  std::vector<BlockGrad<S>> g(bk.count());
  for (int c = 0; c < bk.count(); ++c) {
    const int n = bk.len(c);
    g[c] = {Mat<S>::Zero(n, D), Mat<S>::Zero(2 * n, D), Mat<S>::Zero(n, D), Mat<S>::Zero(n, n)};
  }
  return g;
}

template <class S>
struct HeadGrads {
  Rows<S> dq, dk, dv, dw;  // (T, D)
  Seq<S> dbeta;            // (T)
  Vec<S> dg;               // (T): dG_i = Σ_j dS_ij − Σ_i' dS_i'i
};

// Softmax backward from the PaTH logits in sc.z: P = exp(s − lse) (into sc.z), dV = Pᵀ dout,
// dS = P ⊙ (dout Vᵀ − δ), dG; leaves dZ = scale·dS in sc.dz.
template <class S>
void softmax_backward(HeadGrads<S>& out, Scratch<S>& sc, ConstRows<S> dout, ConstRows<S> o,
                      ConstSeq<S> lse, const HeadInputs<S>& in, const Blocking& bk, S scale) {
  const Vec<S> delta = (dout.array() * o.array()).rowwise().sum();  // (T): δ_i = dout_i·o_i
  sc.dz.resize(bk.T, bk.T);
  for (int I = 0; I < bk.count(); ++I) {
    const int a = bk.start(I), n = bk.len(I);
    sc.dz.block(a, 0, n, a + n).noalias() = dout.middleRows(a, n) * in.v.topRows(a + n).transpose();  // dP = dout Vᵀ
  }
  out.dg.setZero();
  for (int i = 0; i < bk.T; ++i) {
    auto p = sc.z.row(i).head(i + 1);
    scale_and_gate(p, i, in.g, scale);
    p = (p.array() - lse(i)).exp();  // p_ij = exp(s_ij − lse_i)
    auto ds = sc.dz.row(i).head(i + 1);
    ds.array() = p.array() * (ds.array() - delta(i));  // dS_ij = p_ij (dP_ij − δ_i)
    out.dg(i) += ds.sum();                             // dG_i += Σ_j dS_ij
    out.dg.head(i + 1) -= ds.transpose();              // dG_j −= dS_ij
    ds *= scale;                                       // dZ = scale · dS
  }
  out.dv.noalias() = sc.z.template triangularView<Eigen::Lower>().transpose() * dout;  // dV = Pᵀ dout
}

// Reverse of the scan in path_logits, J = 0 up to count − 2; dR holds the gradient of R.
template <class S>
void scan_backward(std::vector<BlockGrad<S>>& g, const Mat<S>& dz, const ScanStates<S>& st,
                   const std::vector<UtBlock<S>>& ut, const Blocking& bk) {
  const int T = bk.T;
  Mat<S> dr(T, ut[0].u.cols());  // (T, D): rows [a_{J+1}, T) hold dR
  Mat<S> zy;                     // (T − a_{J+1}, 2 n_J): [dZ[·,J], −Y]
  for (int J = 0; J + 1 < bk.count(); ++J) {
    const int a1 = bk.start(J + 1), m = T - a1, aj = bk.start(J), nj = bk.len(J);
    auto drs = dr.bottomRows(m);  // (m, D)
    const auto dz_j = dz.block(a1, aj, m, nj);  // (m, n_J)
    if (J == 0) {
      drs.noalias() = dz_j * ut[0].kw.topRows(nj);                   // dR = dZ[·,0] K̃_0
      g[0].dkw.topRows(nj).noalias() += dz_j.transpose() * st.r[0];  // dK̃_0 += dZ[·,0]ᵀ R_0
    } else {
      zy.resize(m, 2 * nj);
      zy.leftCols(nj) = dz_j;
      zy.rightCols(nj).noalias() = -drs * ut[J].u.transpose();  // −Y = −dR_after U_Jᵀ
      g[J].du.noalias() -= st.x[J].transpose() * drs;           // dU_J −= X_Jᵀ dR_after
      drs.noalias() += zy * ut[J].kw;                           // dR_before = dR_after + dZ[·,J] K̃_J − Y W_J
      g[J].dkw.noalias() += zy.transpose() * st.r[J];           // [dK̃_J; dW_J] += [dZ[·,J], −Y]ᵀ R_J
    }
    g[J + 1].dq_hat = dr.middleRows(a1, bk.len(J + 1));  // block J + 1 entered the scan here
  }
}

// Reverse of ut_block (README): dq, dk, dw, dβ of the block's rows.
template <class S>
void ut_block_backward(HeadGrads<S>& out, const BlockGrad<S>& g, const UtBlock<S>& ut,
                       const HeadInputs<S>& in, int a, int n) {
  const auto q = in.q.middleRows(a, n), k = in.k.middleRows(a, n), w = in.w.middleRows(a, n);  // (n, D)
  const auto beta = in.beta.segment(a, n);             // (n)
  const Mat<S> wb = beta.asDiagonal() * w;             // (n, D): Wb = diag(β) W
  const auto dk_hat = g.dkw.topRows(n);                // (n, D)
  Mat<S> dqw = -g.ds_loc * ut.m.transpose() - g.dq_hat * ut.u.transpose();
  keep_tril_incl(dqw);  // (n, n): dQW = tril_incl(−dS Mᵀ − dQ̃ Uᵀ)
  const Mat<S> du = g.du - ut.qw.transpose() * g.dq_hat;  // (n, D): dU_tot = dU − QWᵀ dQ̃
  const Mat<S> dm = -ut.qw.transpose() * g.ds_loc - w * dk_hat.transpose();  // (n, n): dM = −QWᵀ dS − W dK̃ᵀ
  Mat<S> de = ut.tm.transpose() * dm;
  keep_strict_lower(de);  // (n, n): dE = strictLower(Tmᵀ dM)
  const Mat<S> dtm = du * wb.transpose() + dm * ut.e.transpose();  // (n, n): dTm = dU_tot Wbᵀ + dM Eᵀ
  Mat<S> da = -ut.tm.transpose() * dtm * ut.tm.transpose();
  keep_strict_lower(da);  // (n, n): dA = strictLower(−Tmᵀ dTm Tmᵀ)
  const Mat<S> dwb = ut.tm.transpose() * du + de * k + da * w;  // (n, D): dWb = Tmᵀ dU_tot + dE K + dA W
  out.dq.middleRows(a, n) = g.dq_hat + g.ds_loc * k + dqw * w;  // dQ = dQ̃ + dS K + dQW W
  out.dk.middleRows(a, n) = dk_hat + g.ds_loc.transpose() * q + de.transpose() * wb;  // dK = dK̃ + dSᵀ Q + dEᵀ Wb
  out.dw.middleRows(a, n) = g.dkw.bottomRows(n) + dqw.transpose() * q - ut.m * dk_hat +
                            da.transpose() * wb + beta.asDiagonal() * dwb;  // dW = dW_scan + dQWᵀ Q − M dK̃ + dAᵀ Wb + diag(β) dWb
  out.dbeta.segment(a, n) = (dwb.array() * w.array()).rowwise().sum();  // dβ_r = dWb_r · w_r
}

template <class S>
void backward_head(HeadGrads<S>& out, ConstRows<S> dout, ConstRows<S> o, ConstSeq<S> lse,
                   const HeadInputs<S>& in, const Blocking& bk, S scale, Scratch<S>& sc) {
  const std::vector<UtBlock<S>> ut = ut_blocks(in, bk);
  std::vector<BlockGrad<S>> g = zero_block_grads<S>(bk, int(in.q.cols()));
  path_logits(sc.z, &sc.scan, in, ut, bk);
  softmax_backward(out, sc, dout, o, lse, in, bk, scale);
  for (int c = 0; c < bk.count(); ++c) {
    g[c].ds_loc = sc.dz.block(bk.start(c), bk.start(c), bk.len(c), bk.len(c));
    keep_tril_incl(g[c].ds_loc);
  }
  scan_backward(g, sc.dz, sc.scan, ut, bk);
  for (int c = 0; c < bk.count(); ++c) ut_block_backward(out, g[c], ut[c], in, bk.start(c), bk.len(c));
}

Blocking blocking(const PathAttentionArgs& args) {
  return {args.shape.T, std::max(1, std::min(args.block, args.shape.T))};
}

}  // namespace

template <class S>
void path_attention_forward(S* o, S* lse, const S* q, const S* k, const S* v, const S* w,
                            const S* beta, const S* log_f, const PathAttentionArgs& args) {
  const AttnShape& sh = args.shape;
  attn::for_each_head(sh, [] { return Scratch<S>{}; }, [&](int b, int h, Scratch<S>& sc) {
    const HeadSlice at{sh, b, h};
    forward_head(at.rows(o), at.seq(lse), head_inputs(at, q, k, v, w, beta, log_f), blocking(args),
                 S(args.scale), sc);
  });
}

template <class S>
void path_attention_backward(S* dq, S* dk, S* dv, S* dw, S* dbeta, S* dlog_f, const S* dout,
                             const S* o, const S* lse, const S* q, const S* k, const S* v,
                             const S* w, const S* beta, const S* log_f,
                             const PathAttentionArgs& args) {
  const AttnShape& sh = args.shape;
  attn::for_each_head(sh, [] { return Scratch<S>{}; }, [&](int b, int h, Scratch<S>& sc) {
    const HeadSlice at{sh, b, h};
    HeadGrads<S> out{at.rows(dq), at.rows(dk), at.rows(dv), at.rows(dw), at.seq(dbeta), Vec<S>(sh.T)};
    backward_head(out, at.rows(dout), at.rows(o), at.seq(lse), head_inputs(at, q, k, v, w, beta, log_f),
                  blocking(args), S(args.scale), sc);
    if (dlog_f) attn::gate_backward(dlog_f, out.dg, sh, b, h);  // dlog_f_t = Σ_{i≥t} dG_i
  });
}

template void path_attention_forward<float>(float*, float*, const float*, const float*,
                                            const float*, const float*, const float*,
                                            const float*, const PathAttentionArgs&);
template void path_attention_forward<double>(double*, double*, const double*, const double*,
                                             const double*, const double*, const double*,
                                             const double*, const PathAttentionArgs&);
template void path_attention_backward<float>(float*, float*, float*, float*, float*, float*,
                                             const float*, const float*, const float*,
                                             const float*, const float*, const float*,
                                             const float*, const float*, const float*,
                                             const PathAttentionArgs&);
template void path_attention_backward<double>(double*, double*, double*, double*, double*,
                                              double*, const double*, const double*,
                                              const double*, const double*, const double*,
                                              const double*, const double*, const double*,
                                              const double*, const PathAttentionArgs&);

}  // namespace pb
