/* Fused all-reduce + residual + RMSNorm + zero_fill kernel and its launchers (ar_fused.h).
 * Exchange: NCCL's low-latency (LL) idea, written from its description: every 16-byte store to
 * a peer carries 8 data bytes, each 4-byte word followed by the launch's sequence number, so
 * the reader needs no fence and no separate flag; inboxes alternate by sequence parity. */
extern "C" {
#include "core/status.h" /* C header without C++ guards */
}
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/ar_fused.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/kernels/pdl.cuh"

namespace {

struct ArKargs {
  const float *partial;   /* [m,H] ld_p */
  const float *res_in;    /* [m,H] ld_r or NULL */
  float *res_out;         /* [m,H] ld_r */
  const uint16_t *weight; /* [H] bf16 */
  uint16_t *x_norm;       /* [m,H] ld_x bf16 */
  long long ld_p, ld_r, ld_x;
  float eps;
  int m, H, K, slice_quads, donor_ctas;
  int rank, tp, use_seq, proto, cluster;
  long long max_m;
  long long timeout_ns;
  uint4 *inbox[PZ_AR_MAX_TP];
  float4 *raw[PZ_AR_MAX_TP];
  unsigned *flags[PZ_AR_MAX_TP];
  uint2 *ss;
  unsigned *ctrl;
  /* zero_fill */
  char *fill_ptr;
  long long fill_row_bytes, fill_stride_bytes;
  int fill_rows;
};

__device__ __forceinline__ uint4 ld_volatile_v4(const uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile_v4(uint4 *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint2 ld_volatile_v2(const uint2 *p) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile_v2(uint2 *p, uint2 v) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Records a timeout once: flag + row, read back by pz_comm_check. */
__device__ void report_timeout(const ArKargs &a, int row) {
  if (atomicExch(&a.ctrl[2], 1u) == 0u) atomicExch(&a.ctrl[3], (unsigned)row);
}

/* A wait on a peer: start time and poll count (the clock is read every 64th poll). */
struct Wait {
  unsigned long long t0;
  unsigned polls;
};

/* True (and error recorded) when the wait has lasted longer than the timeout. */
__device__ __forceinline__ bool timed_out(const ArKargs &a, Wait *w, int row) {
  if (a.timeout_ns <= 0) return false;
  if ((w->polls++ & 63u) != 0) return false;
  /* Another wait of this rank already gave up (this launch or an earlier one): fail fast, so
   * launches queued behind a timed-out one end at once instead of each waiting again. */
  if (*reinterpret_cast<volatile unsigned *>(&a.ctrl[2]) != 0u) return true;
  unsigned long long now = globaltimer();
  if (w->t0 == 0) { w->t0 = now; return false; }
  if ((long long)(now - w->t0) > a.timeout_ns) { report_timeout(a, row); return true; }
  return false;
}

/* Fill role: zero rows [0, fill_rows) x bytes [0, fill_row_bytes) with 16-byte stores,
 * grid-stride over the whole range (never one CTA per row). Tail of a row: 2-byte stores. */
__device__ void fill_role(const ArKargs &a, int fill_idx, int n_fill) {
  const long long cpr = (a.fill_row_bytes + 15) / 16;
  const long long total = cpr * a.fill_rows;
  const long long stride = (long long)n_fill * blockDim.x;
  for (long long w = (long long)fill_idx * blockDim.x + threadIdx.x; w < total; w += stride) {
    long long row = w / cpr, c = w - row * cpr;
    char *base = a.fill_ptr + row * a.fill_stride_bytes;
    long long b = c * 16;
    if (b + 16 <= a.fill_row_bytes) {
      *reinterpret_cast<uint4 *>(base + b) = make_uint4(0u, 0u, 0u, 0u);
    } else {
      for (; b < a.fill_row_bytes; b += 2) *reinterpret_cast<uint16_t *>(base + b) = 0;
    }
  }
}

__device__ __forceinline__ float4 f4add(float4 a, float4 b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

/* LL layout of one CTA slice inside a row: quad lq (0..len-1) of the slice starting at quad q0
 * travels as packet 2*q0 + lq (x, y) and packet 2*q0 + len + lq (z, w), so a warp's store
 * instruction covers 512 contiguous bytes. */
__device__ __forceinline__ uint4 pk_lo(float4 o, unsigned seq) {
  return make_uint4(__float_as_uint(o.x), seq, __float_as_uint(o.y), seq);
}
__device__ __forceinline__ uint4 pk_hi(float4 o, unsigned seq) {
  return make_uint4(__float_as_uint(o.z), seq, __float_as_uint(o.w), seq);
}

/* Polls this rank's LL inbox slot (row of source src, already offset by 2*q0) until every
 * packet of the thread's quads carries `seq`; returns the data in v[]. */
template <int QPT>
__device__ __forceinline__ void gather_ll(const ArKargs &a, const uint4 *slot, int len, unsigned seq, int row,
                                          float4 (&v)[QPT]) {
  uint4 pk[2 * QPT];
#pragma unroll
  for (int k = 0; k < QPT; k++) {
    int lq = threadIdx.x + k * PZ_AR_THREADS;
    if (lq < len) {
      pk[2 * k] = ld_volatile_v4(slot + lq);
      pk[2 * k + 1] = ld_volatile_v4(slot + len + lq);
    } else {
      pk[2 * k] = pk[2 * k + 1] = make_uint4(0u, seq, 0u, seq);
    }
  }
  Wait wt = {0, 0};
  for (;;) {
    bool ready = true;
#pragma unroll
    for (int j = 0; j < 2 * QPT; j++) ready &= (pk[j].y == seq) & (pk[j].w == seq);
    if (ready) break;
#pragma unroll
    for (int j = 0; j < 2 * QPT; j++) {
      int lq = threadIdx.x + (j >> 1) * PZ_AR_THREADS;
      if (lq < len && (pk[j].y != seq || pk[j].w != seq)) pk[j] = ld_volatile_v4(slot + (j & 1) * len + lq);
    }
    if (timed_out(a, &wt, row)) break;
  }
#pragma unroll
  for (int k = 0; k < QPT; k++)
    v[k] = make_float4(__uint_as_float(pk[2 * k].x), __uint_as_float(pk[2 * k].z),
                       __uint_as_float(pk[2 * k + 1].x), __uint_as_float(pk[2 * k + 1].z));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *g) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async8(void *smem, const void *g) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(sa), "l"(g) : "memory");
}

/* QPT float4 quads per thread; MINB resident CTAs per SM asked of the compiler (2 for
 * QPT <= 4, i.e. H <= 8192 with one CTA per row: at most 64 registers).
 * Dynamic shared memory: slice_quads * 24 bytes (residual float4 + weight 4 x bf16 per quad),
 * filled by cp.async at the start so those loads overlap the exchange. */
template <int QPT, int MINB>
__global__ void __launch_bounds__(PZ_AR_THREADS, MINB) ar_fused_kernel(const ArKargs a) {
  pz_pdl_trigger(); /* a GEMM launched after this kernel may start its weight loads now (kernels/pdl.cuh) */
  __shared__ unsigned s_seq;
  __shared__ float s_red[PZ_AR_THREADS / 32];
  __shared__ float s_inv;
  __shared__ float s_tot; /* this CTA's sum of squares, read by the cluster's other CTAs */
  extern __shared__ __align__(16) unsigned char dsm[];
  const int t = threadIdx.x;
  /* Launch accounting (use_seq): every CTA counts itself in ctrl[1] as it starts (a donor
   * only after it has read the sequence); the CTA that arrives last is the last to have read
   * it, and at its end advances ctrl[0]. The atomic's answer is needed only at the end, so
   * its latency hides behind the kernel. */
  unsigned arrival = 0;

  if ((int)blockIdx.x >= a.donor_ctas) {
    if (a.use_seq && t == 0) arrival = atomicAdd(&a.ctrl[1], 1u);
    fill_role(a, blockIdx.x - a.donor_ctas, gridDim.x - a.donor_ctas);
  } else {
    const int row = blockIdx.x / a.K, part = blockIdx.x - (blockIdx.x / a.K) * a.K;
    const int nq = a.H >> 2;
    const int q0 = part * a.slice_quads;
    const int len = max(0, min(a.slice_quads, nq - q0));
    const float4 *prow = reinterpret_cast<const float4 *>(a.partial + (long long)row * a.ld_p) + q0;
    const float4 *rin = a.res_in ? reinterpret_cast<const float4 *>(a.res_in + (long long)row * a.ld_r) + q0 : nullptr;
    const uint2 *wq = reinterpret_cast<const uint2 *>(a.weight) + q0;
    float4 *res_s = reinterpret_cast<float4 *>(dsm);
    uint2 *w_s = reinterpret_cast<uint2 *>(dsm + (size_t)a.slice_quads * 16);

    /* 1. Residual and weight slices start flowing into shared memory. */
#pragma unroll
    for (int k = 0; k < QPT; k++) {
      int lq = t + k * PZ_AR_THREADS;
      if (lq < len) {
        if (rin) cp_async16(res_s + lq, rin + lq);
        cp_async8(w_s + lq, wq + lq);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    /* 2. This rank's partial slice into registers. */
    float4 acc[QPT];
#pragma unroll
    for (int k = 0; k < QPT; k++) {
      int lq = t + k * PZ_AR_THREADS;
      acc[k] = lq < len ? __ldg(prow + lq) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* 3. The launch's sequence number. */
    unsigned seq = 0;
    if (a.use_seq) {
      if (t == 0) {
        unsigned s = *reinterpret_cast<volatile unsigned *>(&a.ctrl[0]) + 1u;
        s_seq = s == 0u ? 1u : s; /* 0 is the value of freshly zeroed inboxes */
        unsigned z; /* 0, but data-dependent on the read: the count is taken after it */
        asm("and.b32 %0, %1, 0;" : "=r"(z) : "r"(s));
        arrival = atomicAdd(&a.ctrl[1], 1u + z);
      }
      __syncthreads();
      seq = s_seq;
    }
    if (a.tp > 1) {
      const unsigned par = seq & 1u;
      if (a.proto == PZ_AR_PROTO_LL) {
        const long long row_pk = (long long)(a.H >> 1);
        /* 4. Push this rank's slice to every peer's inbox [par][rank][row]. */
        for (int p = 0; p < a.tp; p++) {
          if (p == a.rank) continue;
          uint4 *dst = a.inbox[p] + (((long long)par * a.tp + a.rank) * a.max_m + row) * row_pk + 2 * q0;
#pragma unroll
          for (int k = 0; k < QPT; k++) {
            int lq = t + k * PZ_AR_THREADS;
            if (lq < len) {
              st_volatile_v4(dst + lq, pk_lo(acc[k], seq));
              st_volatile_v4(dst + len + lq, pk_hi(acc[k], seq));
            }
          }
        }
        /* 5. Sum in rank order 0..tp-1 (identical on every rank). This rank's own slice is
         * read again (a cache hit) rather than kept in registers across the wait. */
        for (int src = 0; src < a.tp; src++) {
          float4 v[QPT];
          if (src == a.rank) {
#pragma unroll
            for (int k = 0; k < QPT; k++) {
              int lq = t + k * PZ_AR_THREADS;
              v[k] = lq < len ? __ldg(prow + lq) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
          } else {
            const uint4 *slot = a.inbox[a.rank] + (((long long)par * a.tp + src) * a.max_m + row) * row_pk + 2 * q0;
            gather_ll<QPT>(a, slot, len, seq, row, v);
          }
#pragma unroll
          for (int k = 0; k < QPT; k++) acc[k] = src == 0 ? v[k] : f4add(acc[k], v[k]);
        }
      } else {
        /* 4'. Flag protocol: raw rows, every thread fences its own stores (system scope),
         * the CTA meets, thread 0 raises one flag per peer for this (row, slice). */
        const long long row_q = (long long)(a.H >> 2);
        for (int p = 0; p < a.tp; p++) {
          if (p == a.rank) continue;
          float4 *dst = a.raw[p] + (((long long)par * a.tp + a.rank) * a.max_m + row) * row_q + q0;
#pragma unroll
          for (int k = 0; k < QPT; k++) {
            int lq = t + k * PZ_AR_THREADS;
            if (lq < len) dst[lq] = acc[k];
          }
        }
        __threadfence_system();
        __syncthreads();
        if (t < a.tp && t != a.rank) {
          unsigned *f = a.flags[t] + (((long long)par * a.tp + a.rank) * a.max_m + row) * 16 + part;
          asm volatile("st.volatile.global.u32 [%0], %1;" :: "l"(f), "r"(seq) : "memory");
        }
        /* 5'. Wait for every peer's flag, then read the rows and sum in rank order. */
        if (t < a.tp && t != a.rank) {
          const unsigned *f = a.flags[a.rank] + (((long long)par * a.tp + t) * a.max_m + row) * 16 + part;
          Wait wt = {0, 0};
          for (;;) {
            unsigned v;
            asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
            if (v == seq) break;
            if (timed_out(a, &wt, row)) break;
          }
          __threadfence();
        }
        __syncthreads();
        for (int src = 0; src < a.tp; src++) {
          const uint4 *srow = reinterpret_cast<const uint4 *>(
              a.raw[a.rank] + (((long long)par * a.tp + src) * a.max_m + row) * row_q + q0);
#pragma unroll
          for (int k = 0; k < QPT; k++) {
            int lq = t + k * PZ_AR_THREADS;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (src == a.rank && lq < len) v = __ldg(prow + lq);
            if (src != a.rank && lq < len) {
              uint4 u = ld_volatile_v4(srow + lq);
              v = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
            }
            acc[k] = src == 0 ? v : f4add(acc[k], v);
          }
        }
      }
    }

    /* 6. Residual add (residual_in + s), sum of squares of this CTA's slice. */
    asm volatile("cp.async.wait_all;" ::: "memory"); /* each thread reads back only its own copies */
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < QPT; k++) {
      int lq = t + k * PZ_AR_THREADS;
      if (lq < len) {
        if (rin) acc[k] = f4add(res_s[lq], acc[k]);
        ss = __fadd_rn(ss, __fmul_rn(acc[k].x, acc[k].x));
        ss = __fadd_rn(ss, __fmul_rn(acc[k].y, acc[k].y));
        ss = __fadd_rn(ss, __fmul_rn(acc[k].z, acc[k].z));
        ss = __fadd_rn(ss, __fmul_rn(acc[k].w, acc[k].w));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if ((t & 31) == 0) s_red[t >> 5] = ss;
    __syncthreads();
    if (a.cluster > 1) {
      /* K CTAs of the row form a cluster: publish this slice's sum in shared memory, meet,
       * read all K in rank order through distributed shared memory. */
      namespace cg = cooperative_groups;
      cg::cluster_group cl = cg::this_cluster();
      if (t == 0) {
        float tot = s_red[0];
        for (int w = 1; w < PZ_AR_THREADS / 32; w++) tot = __fadd_rn(tot, s_red[w]);
        s_tot = tot;
      }
      cl.sync();
      if (t == 0) {
        float all = 0.f;
        for (int j = 0; j < a.K; j++) {
          float v = *cl.map_shared_rank(&s_tot, j);
          all = j == 0 ? v : __fadd_rn(all, v);
        }
        s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(all, (float)a.H), a.eps)));
      }
      /* Arrive now (our reads of the peers' s_tot are done after the barrier below); wait at
       * the end so no CTA leaves while another still reads its shared memory. */
      __syncthreads();
      asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    } else if (t == 0) {
      float tot = s_red[0];
      for (int w = 1; w < PZ_AR_THREADS / 32; w++) tot = __fadd_rn(tot, s_red[w]);
      if (a.K > 1) {
        /* Combine the K slices of this row: publish (ss, seq), read all K in order. */
        uint2 *slots = a.ss + (long long)row * 16;
        st_volatile_v2(slots + part, make_uint2(__float_as_uint(tot), seq));
        float all = 0.f;
        for (int j = 0; j < a.K; j++) {
          uint2 v = ld_volatile_v2(slots + j);
          Wait wt = {0, 0};
          while (v.y != seq) {
            if (timed_out(a, &wt, row)) break;
            v = ld_volatile_v2(slots + j);
          }
          all = j == 0 ? __uint_as_float(v.x) : __fadd_rn(all, __uint_as_float(v.x));
        }
        tot = all;
      }
      s_inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(tot, (float)a.H), a.eps)));
    }
    __syncthreads();
    /* 7. x_norm = bf16((r * inv) * w), residual_out = r. */
    const float inv = s_inv;
    float4 *rout = reinterpret_cast<float4 *>(a.res_out + (long long)row * a.ld_r) + q0;
    uint2 *xo = reinterpret_cast<uint2 *>(a.x_norm + (long long)row * a.ld_x) + q0;
#pragma unroll
    for (int k = 0; k < QPT; k++) {
      int lq = t + k * PZ_AR_THREADS;
      if (lq < len) {
        rout[lq] = acc[k];
        uint2 wv = w_s[lq];
        float w0 = __uint_as_float(wv.x << 16), w1 = __uint_as_float(wv.x & 0xffff0000u);
        float w2 = __uint_as_float(wv.y << 16), w3 = __uint_as_float(wv.y & 0xffff0000u);
        __nv_bfloat16 y0 = __float2bfloat16_rn(__fmul_rn(__fmul_rn(acc[k].x, inv), w0));
        __nv_bfloat16 y1 = __float2bfloat16_rn(__fmul_rn(__fmul_rn(acc[k].y, inv), w1));
        __nv_bfloat16 y2 = __float2bfloat16_rn(__fmul_rn(__fmul_rn(acc[k].z, inv), w2));
        __nv_bfloat16 y3 = __float2bfloat16_rn(__fmul_rn(__fmul_rn(acc[k].w, inv), w3));
        uint2 o;
        o.x = (unsigned)__bfloat16_as_ushort(y0) | ((unsigned)__bfloat16_as_ushort(y1) << 16);
        o.y = (unsigned)__bfloat16_as_ushort(y2) | ((unsigned)__bfloat16_as_ushort(y3) << 16);
        xo[lq] = o;
      }
    }
    if (a.cluster > 1) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  }

  /* The CTA that arrived last advances the sequence: every CTA has read it by then, and the
   * next launch on this stream starts only after this one has finished. */
  if (a.use_seq && t == 0 && arrival == gridDim.x - 1) {
    unsigned s = *reinterpret_cast<volatile unsigned *>(&a.ctrl[0]) + 1u;
    a.ctrl[0] = s == 0u ? 1u : s;
    a.ctrl[1] = 0u;
  }
}

typedef void (*KernelFn)(const ArKargs);
KernelFn kernel_for(int qpt) {
  switch (qpt) {
    case 1: return ar_fused_kernel<1, 2>;
    case 2: return ar_fused_kernel<2, 2>;
    case 4: return ar_fused_kernel<4, 2>;
    default: return ar_fused_kernel<8, 1>;
  }
}

/* Cached per device: SM count and fused-kernel occupancy. */
int g_sms[64], g_occ[64];

/* Dynamic shared memory of an instance at its largest slice (QPT quads per thread). */
int smem_for_qpt(int qpt) { return qpt * PZ_AR_THREADS * 24; }

/* Lets every instance use its largest dynamic shared memory on the current device. */
pz_status set_smem_attrs(void) {
  const int q[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; i++)
    PZ_CUDA_CHECK(cudaFuncSetAttribute(kernel_for(q[i]), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_for_qpt(q[i])));
  return PZ_OK;
}

pz_status device_limits(int dev, int *sms, int *occ) {
  if (dev < 0 || dev >= 64) return pz_error(PZ_ERR_INVALID_ARG, "device %d out of range", dev);
  if (!g_sms[dev]) {
    int n = 0, o = 0;
    int cur = 0;
    PZ_CUDA_CHECK(cudaGetDevice(&cur));
    PZ_CUDA_CHECK(cudaSetDevice(dev));
    pz_status st = set_smem_attrs();
    PZ_CUDA_CHECK(cudaSetDevice(cur));
    PZ_CHECK(st);
    PZ_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    PZ_CHECK(pz_ar_fused_occupancy(dev, &o));
    g_occ[dev] = o;
    g_sms[dev] = n;
  }
  *sms = g_sms[dev];
  *occ = g_occ[dev];
  return PZ_OK;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

pz_status check_args(const pz_ar_rmsnorm_args *a) {
  if (!a || !a->partial || !a->residual_out || !a->weight || !a->x_norm)
    return pz_error(PZ_ERR_INVALID_ARG, "ar_rmsnorm: partial, residual_out, weight and x_norm are required");
  if (a->m < 1 || a->H < 8 || a->H % 8 != 0 || a->H > 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT)
    return pz_error(PZ_ERR_SHAPE, "ar_rmsnorm: m=%lld H=%lld (H must be a multiple of 8, <= %d)",
                    (long long)a->m, (long long)a->H, 4 * PZ_AR_THREADS * PZ_AR_MAX_QPT);
  if (a->ld_partial < a->H || a->ld_res < a->H || a->ld_x < a->H || a->ld_partial % 4 || a->ld_res % 4 ||
      a->ld_x % 4)
    return pz_error(PZ_ERR_INVALID_ARG, "ar_rmsnorm: row strides must be >= H and multiples of 4");
  if (!aligned16(a->partial) || !aligned16(a->residual_out) || (a->residual_in && !aligned16(a->residual_in)) ||
      !aligned16(a->x_norm) || ((uintptr_t)a->weight & 7u))
    return pz_error(PZ_ERR_INVALID_ARG, "ar_rmsnorm: pointers must be 16-byte aligned (weight 8-byte)");
  const pz_zero_fill *f = &a->fill;
  if (f->ptr) {
    size_t es = pz_dtype_size(f->dtype);
    if ((f->dtype != PZ_F32 && f->dtype != PZ_BF16) || f->n_base < 0 || f->n_base > f->n_total ||
        f->row_stride < f->n_total || !aligned16(f->ptr) || (f->row_stride * (int64_t)es) % 16)
      return pz_error(PZ_ERR_INVALID_ARG, "zero_fill: dtype f32|bf16, 0 <= n_base <= n_total <= row_stride, "
                      "16-byte aligned pointer and row pitch (n_total=%lld n_base=%lld stride=%lld)",
                      (long long)f->n_total, (long long)f->n_base, (long long)f->row_stride);
  }
  return PZ_OK;
}

void fill_kargs(ArKargs *k, const pz_ar_rmsnorm_args *a) {
  k->partial = a->partial;
  k->res_in = a->residual_in;
  k->res_out = a->residual_out;
  k->weight = a->weight;
  k->x_norm = a->x_norm;
  k->ld_p = a->ld_partial;
  k->ld_r = a->ld_res;
  k->ld_x = a->ld_x;
  k->eps = a->eps;
  k->m = (int)a->m;
  k->H = (int)a->H;
}

} // namespace

extern "C" pz_status pz_ar_fused_occupancy(int device, int *ctas_per_sm) {
  int cur = 0;
  PZ_CUDA_CHECK(cudaGetDevice(&cur));
  PZ_CUDA_CHECK(cudaSetDevice(device));
  int best = 1 << 30;
  pz_status st = set_smem_attrs();
  if (st != PZ_OK) {
    PZ_CUDA_IGNORE(cudaSetDevice(cur)); /* error path: restore the caller's device; st is what counts */
    return st;
  }
  const int q[] = {1, 2, 4}; /* H <= 8192; the QPT=8 instance (larger H) is checked at launch */
  for (int i = 0; i < 3; i++) {
    int n = 0;
    PZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_for(q[i]), PZ_AR_THREADS, smem_for_qpt(q[i])));
    if (n < best) best = n;
  }
  PZ_CUDA_CHECK(cudaSetDevice(cur));
  *ctas_per_sm = best;
  return PZ_OK;
}

extern "C" pz_status pz_ar_rmsnorm_launch(const pz_comm *c, int rank, const pz_ar_rmsnorm_args *a,
                                          const pz_device_desc *dev, cudaStream_t s) {
  if (!c || rank < 0 || rank >= pz_comm_tp(c)) return pz_error(PZ_ERR_INVALID_ARG, "ar_rmsnorm: bad comm or rank %d", rank);
  return pz_ar_rmsnorm_launch_view(pz_comm_view(c, rank), a, dev, s);
}

extern "C" pz_status pz_ar_rmsnorm_launch_view(const pz_comm_rank_view *v, const pz_ar_rmsnorm_args *a,
                                               const pz_device_desc *dev, cudaStream_t s) {
  if (!v || v->rank < 0 || v->rank >= v->tp || !v->ctrl || !v->ss)
    return pz_error(PZ_ERR_INVALID_ARG, "ar_rmsnorm: bad rank view");
  const int rank = v->rank;
  PZ_CHECK(check_args(a));
  if (a->m > v->max_m || a->H > v->max_H)
    return pz_error(PZ_ERR_SHAPE, "ar_rmsnorm: m=%lld H=%lld beyond the communicator's max_m=%lld max_H=%lld",
                    (long long)a->m, (long long)a->H, (long long)v->max_m, (long long)v->max_H);
  pz_device_desc dd;
  if (!dev) { pz_device_desc_default(&dd); dev = &dd; }
  pz_ar_plan plan;
  if (!pz_ar_plan_for_dev(a->m, a->H, v->tp, dev, &plan)) return pz_error(PZ_ERR_SHAPE, "ar_rmsnorm: no plan for H=%lld", (long long)a->H);
  if (plan.ctas_per_row > 16) return pz_error(PZ_ERR_SHAPE, "ar_rmsnorm: at most 16 CTAs per row");
  int sms = 0, occ = 0;
  PZ_CHECK(device_limits(v->device, &sms, &occ));
  if (plan.quads_per_thread == 8) occ = 1; /* the H > 8192 instance holds one CTA per SM */
  if (plan.donor_ctas > (int64_t)sms * occ)
    return pz_error(PZ_ERR_SHAPE, "ar_rmsnorm: %lld donor CTAs exceed one wave (%d SMs x %d); lower max_m",
                    (long long)plan.donor_ctas, sms, occ);
  ArKargs k;
  memset(&k, 0, sizeof k);
  fill_kargs(&k, a);
  k.K = plan.ctas_per_row;
  k.slice_quads = (int)plan.slice_quads;
  k.donor_ctas = (int)plan.donor_ctas;
  k.rank = rank;
  k.tp = v->tp;
  k.cluster = plan.cluster;
  k.use_seq = v->tp > 1 || (plan.ctas_per_row > 1 && plan.cluster == 1);
  k.proto = plan.proto;
  k.max_m = v->max_m;
  k.timeout_ns = v->timeout_ns;
  for (int r = 0; r < v->tp; r++) {
    k.inbox[r] = v->inbox[r];
    k.raw[r] = v->raw[r];
    k.flags[r] = v->flags[r];
  }
  k.ss = v->ss;
  k.ctrl = v->ctrl;
  int64_t fill_ctas = 0;
  if (a->fill.ptr) {
    int64_t cols = a->fill_all ? a->fill.n_total : a->fill.n_base;
    int64_t es = (int64_t)pz_dtype_size(a->fill.dtype);
    k.fill_ptr = (char *)a->fill.ptr;
    k.fill_row_bytes = cols * es;
    k.fill_stride_bytes = a->fill.row_stride * es;
    k.fill_rows = (int)a->m;
    if (cols > 0) fill_ctas = pz_ar_plan_fill_ctas(dev, &plan, a->m * cols * es);
  }
  dim3 grid((unsigned)(plan.donor_ctas + fill_ctas));
  size_t smem = (size_t)plan.slice_quads * 24;
  if (plan.cluster > 1) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = dim3(PZ_AR_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)plan.cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    PZ_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_for(plan.quads_per_thread), k));
  } else {
    kernel_for(plan.quads_per_thread)<<<grid, PZ_AR_THREADS, smem, s>>>(k);
  }
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_ar_rmsnorm_launch_all(const pz_comm *c, const pz_ar_rmsnorm_args *args,
                                              const pz_device_desc *dev, const cudaStream_t *streams) {
  for (int r = 0; r < pz_comm_tp(c); r++) {
    PZ_CUDA_CHECK(cudaSetDevice(pz_comm_device(c, r)));
    PZ_CHECK(pz_ar_rmsnorm_launch(c, r, &args[r], dev, streams[r]));
  }
  return PZ_OK;
}

extern "C" pz_status pz_rmsnorm_residual_launch(const pz_ar_rmsnorm_args *a, cudaStream_t s) {
  PZ_CHECK(check_args(a));
  ArKargs k;
  memset(&k, 0, sizeof k);
  fill_kargs(&k, a);
  int64_t quads = a->H / 4;
  int qpt = (int)((quads + PZ_AR_THREADS - 1) / PZ_AR_THREADS);
  qpt = qpt <= 1 ? 1 : qpt <= 2 ? 2 : qpt <= 4 ? 4 : 8;
  k.K = 1;
  k.slice_quads = (int)quads;
  k.donor_ctas = (int)a->m;
  k.tp = 1;
  int dev = 0, sms = 0, occ = 0;
  PZ_CUDA_CHECK(cudaGetDevice(&dev));
  PZ_CHECK(device_limits(dev, &sms, &occ)); /* sets the shared-memory attributes once */
  kernel_for(qpt)<<<(unsigned)a->m, PZ_AR_THREADS, (size_t)quads * 24, s>>>(k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}

extern "C" pz_status pz_zero_fill_launch(const pz_zero_fill *f, int64_t m, int64_t cols, int n_ctas,
                                         cudaStream_t s) {
  if (!f || !f->ptr || n_ctas < 1 || cols < 0 || cols > f->row_stride || !aligned16(f->ptr) ||
      (f->row_stride * (int64_t)pz_dtype_size(f->dtype)) % 16)
    return pz_error(PZ_ERR_INVALID_ARG, "zero_fill: bad buffer, columns or CTA count");
  ArKargs k;
  memset(&k, 0, sizeof k);
  int64_t es = (int64_t)pz_dtype_size(f->dtype);
  k.fill_ptr = (char *)f->ptr;
  k.fill_row_bytes = cols * es;
  k.fill_stride_bytes = f->row_stride * es;
  k.fill_rows = (int)m;
  k.donor_ctas = 0;
  kernel_for(1)<<<(unsigned)n_ctas, PZ_AR_THREADS, 0, s>>>(k);
  PZ_CUDA_CHECK(cudaGetLastError());
  return PZ_OK;
}
