// Fused Adam / AdamW step: kernels and launcher.  See docs/KERNELS.md.
//
// No torch / ATen includes: this file compiles standalone with
//   nvcc -c -arch=sm_90 csrc/fused_adam.cu
// and also under torch's cpp_extension flags (-D__CUDA_NO_HALF_OPERATORS__,
// -D__CUDA_NO_HALF_CONVERSIONS__, -D__CUDA_NO_BFLOAT16_CONVERSIONS__, ...):
// only explicit conversion intrinsics are used.
//
// Memory-bound: per element it reads p, g, m, v and writes p, m, v, i.e.
// 7 * sizeof(T) bytes.  Arithmetic is float32 whatever the storage dtype.

#include "fused_adam.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;       // threads per block
constexpr int kVecBytes = 16;       // one LDG.128 / STG.128 per tensor
#ifndef NB_ADAM_VEC_ILP
#define NB_ADAM_VEC_ILP 2
#endif
constexpr int kVecIlp = NB_ADAM_VEC_ILP;  // 16-byte vectors per tensor per thread per iteration
constexpr int kScalarIlp = 4;       // elements per thread per iteration, scalar path
constexpr int kMaxDevices = 64;

// Hyper-parameters, pre-computed on the host (bias corrections in double,
// then rounded once to float).
struct AdamArgs {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float step_size;     // lr / (1 - beta1^step)
  float bc2_sqrt;      // sqrt(1 - beta2^step)
  float weight_decay;  // L2 coefficient (Adam)
  float decay;         // 1 - lr * weight_decay (AdamW)
  int mode;            // 0: no weight decay, 1: Adam L2, 2: AdamW decoupled
};

// The update, in the exact form torch.optim.Adam / AdamW use.  Every operation
// is an explicitly rounded intrinsic: left to itself nvcc contracts a * b + c
// into an FMA differently in the vector loop and the scalar head/tail, so an
// element's result would depend on the alignment of the view it sits in (a
// chunked step would then differ from a whole-tensor step in a few bits).
__device__ __forceinline__ void adam_update(float& p, float g, float& m, float& v,
                                            const AdamArgs& a) {
  if (a.mode == 1) {
    g = __fmaf_rn(a.weight_decay, p, g);
  } else if (a.mode == 2) {
    p = __fmul_rn(p, a.decay);
  }
  m = __fmaf_rn(a.beta1, m, __fmul_rn(a.one_minus_beta1, g));
  v = __fmaf_rn(a.beta2, v, __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(a.step_size, m), denom));
}

// ---- storage <-> float ------------------------------------------------------

__device__ __forceinline__ float load_f(float x) { return x; }
__device__ __forceinline__ float load_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float load_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T store_f(float x);
template <> __device__ __forceinline__ float store_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half store_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 store_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// A 16-byte register vector of T, unpacked to / packed from floats.
template <typename T> struct Vec;

template <> struct Vec<float> {
  static constexpr int N = 4;
  __device__ static __forceinline__ void unpack(const uint4& r, float (&f)[N]) {
    f[0] = __uint_as_float(r.x); f[1] = __uint_as_float(r.y);
    f[2] = __uint_as_float(r.z); f[3] = __uint_as_float(r.w);
  }
  __device__ static __forceinline__ uint4 pack(const float (&f)[N]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]),
                      __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};

__device__ __forceinline__ unsigned word_of(unsigned short lo, unsigned short hi) {
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

template <> struct Vec<__half> {
  static constexpr int N = 8;
  __device__ static __forceinline__ void unpack_word(unsigned w, float& lo, float& hi) {
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
  __device__ static __forceinline__ unsigned pack_word(float lo, float hi) {
    return word_of(__half_as_ushort(__float2half_rn(lo)), __half_as_ushort(__float2half_rn(hi)));
  }
  __device__ static __forceinline__ void unpack(const uint4& r, float (&f)[N]) {
    unpack_word(r.x, f[0], f[1]); unpack_word(r.y, f[2], f[3]);
    unpack_word(r.z, f[4], f[5]); unpack_word(r.w, f[6], f[7]);
  }
  __device__ static __forceinline__ uint4 pack(const float (&f)[N]) {
    return make_uint4(pack_word(f[0], f[1]), pack_word(f[2], f[3]),
                      pack_word(f[4], f[5]), pack_word(f[6], f[7]));
  }
};

template <> struct Vec<__nv_bfloat16> {
  static constexpr int N = 8;
  // bf16 -> f32 is exact: the bf16 bits are the top half of the f32 bits.
  __device__ static __forceinline__ void unpack_word(unsigned w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
  }
  __device__ static __forceinline__ unsigned pack_word(float lo, float hi) {
    return word_of(__bfloat16_as_ushort(__float2bfloat16_rn(lo)),
                   __bfloat16_as_ushort(__float2bfloat16_rn(hi)));
  }
  __device__ static __forceinline__ void unpack(const uint4& r, float (&f)[N]) {
    unpack_word(r.x, f[0], f[1]); unpack_word(r.y, f[2], f[3]);
    unpack_word(r.z, f[4], f[5]); unpack_word(r.w, f[6], f[7]);
  }
  __device__ static __forceinline__ uint4 pack(const float (&f)[N]) {
    return make_uint4(pack_word(f[0], f[1]), pack_word(f[2], f[3]),
                      pack_word(f[4], f[5]), pack_word(f[6], f[7]));
  }
};

template <typename T>
__device__ __forceinline__ void scalar_step(T* __restrict__ p, const T* __restrict__ g,
                                            T* __restrict__ m, T* __restrict__ v,
                                            int64_t i, const AdamArgs& a) {
  float pf = load_f(p[i]);
  float mf = load_f(m[i]);
  float vf = load_f(v[i]);
  adam_update(pf, load_f(g[i]), mf, vf, a);
  p[i] = store_f<T>(pf);
  m[i] = store_f<T>(mf);
  v[i] = store_f<T>(vf);
}

// ---- kernels ----------------------------------------------------------------

// Vector path.  Elements [0, head) and the tail after the last whole vector are
// done with scalar accesses; [head, head + nvec * N) with 16-byte accesses.
// Requires (p + head), (g + head), (m + head), (v + head) 16-byte aligned.
// Grid-stride loop; each thread has kVecIlp vectors of each of the four tensors
// (4 * kVecIlp independent 16-byte loads) in flight before the first use.
template <typename T>
__global__ void __launch_bounds__(kThreads)
fused_adam_vec_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                      T* __restrict__ v, int64_t n, int head, AdamArgs a) {
  constexpr int N = Vec<T>::N;
  const int64_t nvec = (n - head) / N;
  uint4* __restrict__ pv = reinterpret_cast<uint4*>(p + head);
  const uint4* __restrict__ gv = reinterpret_cast<const uint4*>(g + head);
  uint4* __restrict__ mv = reinterpret_cast<uint4*>(m + head);
  uint4* __restrict__ vv = reinterpret_cast<uint4*>(v + head);

  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  for (int64_t base = tid; base < nvec; base += stride * kVecIlp) {
    uint4 rp[kVecIlp], rg[kVecIlp], rm[kVecIlp], rv[kVecIlp];
#pragma unroll
    for (int k = 0; k < kVecIlp; ++k) {
      const int64_t idx = base + k * stride;
      if (idx < nvec) {
        rp[k] = pv[idx];
        rg[k] = __ldg(gv + idx);
        rm[k] = mv[idx];
        rv[k] = vv[idx];
      }
    }
#pragma unroll
    for (int k = 0; k < kVecIlp; ++k) {
      const int64_t idx = base + k * stride;
      if (idx < nvec) {
        float fp[N], fg[N], fm[N], fv[N];
        Vec<T>::unpack(rp[k], fp);
        Vec<T>::unpack(rg[k], fg);
        Vec<T>::unpack(rm[k], fm);
        Vec<T>::unpack(rv[k], fv);
#pragma unroll
        for (int j = 0; j < N; ++j) adam_update(fp[j], fg[j], fm[j], fv[j], a);
        pv[idx] = Vec<T>::pack(fp);
        mv[idx] = Vec<T>::pack(fm);
        vv[idx] = Vec<T>::pack(fv);
      }
    }
  }

  // Scalar head (< N elements) and tail (< N elements): at most 2N - 2 < kThreads
  // elements, taken by the first threads of the grid.
  const int64_t tail_start = head + nvec * N;
  const int64_t tail = n - tail_start;
  if (tid < head) {
    scalar_step(p, g, m, v, tid, a);
  } else if (tid - head < tail) {
    scalar_step(p, g, m, v, tail_start + (tid - head), a);
  }
}

// Scalar path (pointers with different misalignments).  Grid-stride loop with
// kScalarIlp independent elements per thread per iteration.
template <typename T>
__global__ void __launch_bounds__(kThreads)
fused_adam_scalar_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                         T* __restrict__ v, int64_t n, AdamArgs a) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = tid; base < n; base += stride * kScalarIlp) {
    float fp[kScalarIlp], fg[kScalarIlp], fm[kScalarIlp], fv[kScalarIlp];
#pragma unroll
    for (int k = 0; k < kScalarIlp; ++k) {
      const int64_t idx = base + k * stride;
      if (idx < n) {
        fp[k] = load_f(p[idx]);
        fg[k] = load_f(__ldg(g + idx));
        fm[k] = load_f(m[idx]);
        fv[k] = load_f(v[idx]);
      }
    }
#pragma unroll
    for (int k = 0; k < kScalarIlp; ++k) {
      const int64_t idx = base + k * stride;
      if (idx < n) {
        adam_update(fp[k], fg[k], fm[k], fv[k], a);
        p[idx] = store_f<T>(fp[k]);
        m[idx] = store_f<T>(fm[k]);
        v[idx] = store_f<T>(fv[k]);
      }
    }
  }
}

// ---- launcher ---------------------------------------------------------------

// Multiprocessor count of `device`, queried once per device and cached.
cudaError_t sm_count(int device, int* out) {
  static std::atomic<int> cache[kMaxDevices];
  if (device >= 0 && device < kMaxDevices) {
    const int c = cache[device].load(std::memory_order_relaxed);
    if (c > 0) { *out = c; return cudaSuccess; }
  }
  int c = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  if (c <= 0) return cudaErrorInvalidDevice;
  if (device >= 0 && device < kMaxDevices) cache[device].store(c, std::memory_order_relaxed);
  *out = c;
  return cudaSuccess;
}

// Resident blocks per SM of `kernel` (one instantiation per template), cached
// per device.  Depends on the kernel's registers only, so the same on every
// device of one architecture, but cached per device to stay correct on mixed
// systems.
template <typename Kernel>
cudaError_t blocks_per_sm(Kernel kernel, int device, int* out) {
  static std::atomic<int> cache[kMaxDevices];
  if (device >= 0 && device < kMaxDevices) {
    const int c = cache[device].load(std::memory_order_relaxed);
    if (c > 0) { *out = c; return cudaSuccess; }
  }
  int c = 0;
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c, kernel, kThreads, 0);
  if (err != cudaSuccess) return err;
  if (c <= 0) c = 1;
  if (device >= 0 && device < kMaxDevices) cache[device].store(c, std::memory_order_relaxed);
  *out = c;
  return cudaSuccess;
}

// Grid size: enough blocks to cover the work once (never more), at most one
// full wave of resident blocks.
template <typename Kernel>
cudaError_t grid_for(Kernel kernel, int64_t work_items, int* grid) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int sms = 0, per_sm = 0;
  if ((err = sm_count(device, &sms)) != cudaSuccess) return err;
  if ((err = blocks_per_sm(kernel, device, &per_sm)) != cudaSuccess) return err;
  const int64_t wave = static_cast<int64_t>(sms) * per_sm;
  int64_t need = (work_items + kThreads - 1) / kThreads;
  if (need < 1) need = 1;
  *grid = static_cast<int>(need < wave ? need : wave);
  return cudaSuccess;
}

template <typename T>
cudaError_t launch(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                   int64_t n, const AdamArgs& a, cudaStream_t stream) {
  T* p = static_cast<T*>(param);
  const T* g = static_cast<const T*>(grad);
  T* m = static_cast<T*>(exp_avg);
  T* v = static_cast<T*>(exp_avg_sq);
  constexpr int N = Vec<T>::N;

  // The vector path needs the same misalignment on all four pointers, and a
  // whole number of elements up to the next 16-byte boundary.
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p) % kVecBytes;
  const bool same_mis = reinterpret_cast<uintptr_t>(g) % kVecBytes == mis &&
                        reinterpret_cast<uintptr_t>(m) % kVecBytes == mis &&
                        reinterpret_cast<uintptr_t>(v) % kVecBytes == mis &&
                        mis % sizeof(T) == 0;
  const int head =
      same_mis ? static_cast<int>(((kVecBytes - mis) % kVecBytes) / sizeof(T)) : 0;

  cudaError_t err;
  int grid = 0;
  if (same_mis && n >= head + N) {
    // Threads needed: one per vector per kVecIlp, and at least the 2N - 2
    // scalar head / tail elements.
    const int64_t nvec = (n - head) / N;
    int64_t items = (nvec + kVecIlp - 1) / kVecIlp;
    if (items < 2 * N) items = 2 * N;
    if ((err = grid_for(fused_adam_vec_kernel<T>, items, &grid)) != cudaSuccess) return err;
    fused_adam_vec_kernel<T><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, head, a);
  } else {
    const int64_t items = (n + kScalarIlp - 1) / kScalarIlp;
    if ((err = grid_for(fused_adam_scalar_kernel<T>, items, &grid)) != cudaSuccess) return err;
    fused_adam_scalar_kernel<T><<<grid, kThreads, 0, stream>>>(p, g, m, v, n, a);
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t nb_fused_adam_step(void* param, const void* grad, void* exp_avg,
                                          void* exp_avg_sq, int64_t numel,
                                          nb_adam_dtype dtype, double lr, double beta1,
                                          double beta2, double eps, double weight_decay,
                                          int64_t step, int adamw, cudaStream_t stream) {
  if (numel < 0 || step < 1) return cudaErrorInvalidValue;
  if (numel == 0) return cudaSuccess;
  if (!param || !grad || !exp_avg || !exp_avg_sq) return cudaErrorInvalidValue;

  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  AdamArgs a;
  a.beta1 = static_cast<float>(beta1);
  a.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  a.beta2 = static_cast<float>(beta2);
  a.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  a.eps = static_cast<float>(eps);
  a.step_size = static_cast<float>(lr / bc1);
  a.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  a.weight_decay = static_cast<float>(weight_decay);
  a.decay = static_cast<float>(1.0 - lr * weight_decay);
  a.mode = weight_decay == 0.0 ? 0 : (adamw ? 2 : 1);

  switch (dtype) {
    case NB_ADAM_FLOAT32:
      return launch<float>(param, grad, exp_avg, exp_avg_sq, numel, a, stream);
    case NB_ADAM_FLOAT16:
      return launch<__half>(param, grad, exp_avg, exp_avg_sq, numel, a, stream);
    case NB_ADAM_BFLOAT16:
      return launch<__nv_bfloat16>(param, grad, exp_avg, exp_avg_sq, numel, a, stream);
  }
  return cudaErrorInvalidValue;
}
