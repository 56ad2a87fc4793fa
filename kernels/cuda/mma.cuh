// Warp-level tensor-core building blocks for the bf16 attention kernels (sm_80+ mma.sync, also
// the fastest portable path on sm_90). One warp computes C(16×8) += A(16×16) B(16×8) per mma,
// fp32 accumulators. Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = 4·g + t (g = lane / 4,
// t = lane % 4):
//   A (row-major 16×16, 4 × b32 = 8 halves): a0 = A[g][2t..2t+1],   a1 = A[g+8][2t..2t+1],
//                                            a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]
//   B (16×8, "col-major": B[k][n] with n = g): b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16×8 fp32):                            c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// So the C fragments of two adjacent n-tiles (columns 16j … 16j+15) are exactly the A fragment of
// k-tile j (the FlashAttention-2 register trick: P = softmax(S) feeds P·V without shared memory).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pb::cuda::mma {

struct Bf16 {};  // operand types of mma_16816
struct F16 {};

// c += a b for one 16×8 tile.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, Bf16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats → one b32 of two bf16 / f16 (x in the low half: the lower column index).
template <class T>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (std::is_same_v<T, Bf16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The A fragment of k-tile j from the C fragments c[2j], c[2j+1] of a 16×N fp32 tile, times s.
template <class T>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4],
                                       float s = 1.f) {
  a[0] = pack2<T>(s * c0[0], s * c0[1]);
  a[1] = pack2<T>(s * c0[2], s * c0[3]);
  a[2] = pack2<T>(s * c1[0], s * c1[1]);
  a[3] = pack2<T>(s * c1[2], s * c1[3]);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
// ldmatrix: four 8×8 b16 matrices; lane l supplies the row address of matrix l / 8, row l % 8.
// Without .trans, register r holds matrix r in the "A/B fragment" layout (thread 4g + t gets row g,
// columns 2t, 2t+1); with .trans each matrix is transposed on the way.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
}

// Fragments from a row-major b16 tile X in shared memory (row stride `ld` elements, 16-byte
// aligned rows), for a warp (every lane calls):
//   load_a(a, X, ld, r0, k0):      A = X[r0 .. r0+15][k0 .. k0+15]
//   load_b_nk(b, X, ld, n0, k0):   B[k][n] = X[n0 + n][k0 + k]   (X stores Bᵀ: keys × d, as for Q Kᵀ)
//                                  b[0], b[1] for n-tile n0 … n0+7, b[2], b[3] for n0+8 … n0+15
//   load_b_kn(b, X, ld, k0, n0):   B[k][n] = X[k0 + k][n0 + n]   (X stores B: keys × d, as for P V)
//                                  same register order as load_b_nk
//   load_a_t(a, X, ld, r0, k0):    A[r][c] = X[k0 + c][r0 + r]   (X stores Aᵀ, as dSᵀ keys × queries
//                                  for dS K)
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* x, int ld, int r0, int k0) {
  const int l = threadIdx.x & 31;
  ldmatrix_x4(a, x + (r0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
}
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const uint16_t* x, int ld, int n0, int k0) {
  const int l = threadIdx.x & 31;  // matrices: (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8)
  ldmatrix_x4(b, x + (n0 + (l & 7) + ((l >> 4) << 3)) * ld + k0 + ((l >> 3) & 1) * 8);
}
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const uint16_t* x, int ld, int k0, int n0) {
  const int l = threadIdx.x & 31;  // transposed matrices: (k0, n0), (k0+8, n0), (k0, n0+8), (k0+8, n0+8)
  ldmatrix_x4_trans(b, x + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
}
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const uint16_t* x, int ld, int r0, int k0) {
  const int l = threadIdx.x & 31;  // transposed matrices: (k0, r0), (k0, r0+8), (k0+8, r0), (k0+8, r0+8)
  ldmatrix_x4_trans(a, x + (k0 + (l & 7) + (l >> 4) * 8) * ld + r0 + ((l >> 3) & 1) * 8);
}

// Row reductions over the 4 threads (t = 0..3) that share a fragment row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Column sums over the 8 threads (g = 0..7) that share a fragment column t, of N values each, by
// halving exchanges (N/2 + N/4 + N/8 shuffles instead of 3N, and no idle lanes): afterwards thread
// 4g + t holds in x[0 .. N/8) the sums over g' of what x[(N/8)·g + i] held in thread 4g' + t.
template <int K, int M, int N>
__device__ __forceinline__ void halve_exchange(float (&x)[N]) {  // x[0 .. K) → x[0 .. K/2)
  const bool hi = threadIdx.x & M;
#pragma unroll
  for (int i = 0; i < K / 2; ++i) {
    const float send = hi ? x[i] : x[i + K / 2], keep = hi ? x[i + K / 2] : x[i];
    x[i] = keep + __shfl_xor_sync(0xffffffffu, send, M);
  }
}
template <int N>
__device__ __forceinline__ void column_sum8(float (&x)[N]) {
  static_assert(N % 8 == 0, "N values per thread, a multiple of 8");
  halve_exchange<N, 16>(x);      // g bit 2 picks the half (lane bit 4)
  halve_exchange<N / 2, 8>(x);   // g bit 1
  halve_exchange<N / 4, 4>(x);   // g bit 0
}

// 16-byte asynchronous global → shared copy (cp.async.cg, L2 only), and its fences.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace pb::cuda::mma
