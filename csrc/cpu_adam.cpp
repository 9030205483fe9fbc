// CPU Adam / AdamW step (ZeRO-Offload style) for numabench.
//
// One pass over memory per step: read param, grad, exp_avg, exp_avg_sq, write
// param, exp_avg, exp_avg_sq and (optionally) a bf16/fp16 copy of the updated
// param that ZeRO-Offload ships back to the GPU.  All math is fp32.
//
// Storage layouts (P = param, G = grad, S = exp_avg and exp_avg_sq):
//   P=G=S in {fp32, fp16, bf16}                     (everything one dtype)
//   P=S=fp32, G in {bf16, fp16}                      (ZeRO-Offload: fp32 master)
// Optional param_copy_out in {bf16, fp16}.
//
// SIMD: one binary for every x86-64 host.  The AVX-512 and AVX2 kernels are
// compiled with __attribute__((target(...))) and picked at run time with
// __builtin_cpu_supports; a scalar kernel is the fallback (and the only one on
// non-x86 builds).  NUMABENCH_CPU_ADAM_SIMD=scalar|avx2|avx512 forces a level
// (a level this CPU lacks is refused with an error).
//
// Conversions: bf16 is rounded to nearest even in integer arithmetic (works on
// any AVX-512/AVX2 CPU, avx512_bf16 is not required; NaN stays a quiet NaN);
// fp16 uses VCVTPS2PH (F16C / AVX-512F) with round-to-nearest-even.
//
// Threads: OpenMP (the libgomp that torch already loaded), static contiguous
// chunks (NUMABENCH_CPU_ADAM_SCHEDULE=dynamic: chunks taken in turn), chunk
// boundaries at multiples of kAlignElems elements, i.e. 64-byte aligned in
// every tensor when the base pointers are (torch's CPU allocator aligns to 64
// bytes), so no two threads write the same cache line.

#include <torch/extension.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

// Tag types for 16-bit storage (bit patterns only; conversions below).
struct h16 { uint16_t x; };
struct b16 { uint16_t x; };
struct NoCopy { uint16_t x; };

struct Hyper {
  float b1, b2, omb1, omb2, eps, step_size, inv_sqrt_bc2, wd_l2, decay;
};

struct Ptrs {
  void* p;
  const void* g;
  void* m;
  void* v;
  void* c;  // param_copy_out or nullptr
};

// Non-temporal store policy, chosen by measurement (see docs/CPU_ADAM.md):
// bit 0: stream the copy-out (write-only data, so streaming saves the
//        read-for-ownership of its lines: ~5-13% faster step+copy, 1 thread);
// bit 1: stream param/exp_avg/exp_avg_sq (those lines were just read, so it
//        saves no traffic and measured 15-40% slower): off.
// NUMABENCH_CPU_ADAM_NT=0..3 overrides (for experiments).
constexpr int kDefaultNtPolicy = 1;
constexpr int64_t kAlignElems = 32;     // 64 B of 16-bit data, 128 B of fp32
constexpr int64_t kMinPerThread = 1 << 14;  // don't wake threads for tiny work
constexpr int64_t kMaxChunkElems = 1 << 16;  // the dynamic schedule's chunk: 256 KiB of fp32 a stream

// ---------------------------------------------------------------- scalar --
inline float to_f(float x) { return x; }
inline float to_f(h16 x) { return c10::detail::fp16_ieee_to_fp32_value(x.x); }
inline float to_f(b16 x) {
  uint32_t u = static_cast<uint32_t>(x.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t bf16_bits_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline void st_s(float* p, float f) { *p = f; }
inline void st_s(h16* p, float f) { p->x = c10::detail::fp16_ieee_from_fp32_value(f); }
inline void st_s(b16* p, float f) { p->x = bf16_bits_rne(f); }
inline void st_s(NoCopy*, float) {}

// Value of f after a round trip through storage type T.
inline float rt_s(const float*, float f) { return f; }
inline float rt_s(const h16*, float f) { return to_f(h16{c10::detail::fp16_ieee_from_fp32_value(f)}); }
inline float rt_s(const b16*, float f) { return to_f(b16{bf16_bits_rne(f)}); }

template <class P, class G, class S, class C>
inline void adam_scalar_range(P* p, const G* g, S* m, S* v, C* c, int64_t b, int64_t e,
                              const Hyper& h) {
  for (int64_t i = b; i < e; ++i) {
    float pv = to_f(p[i]);
    float gv = to_f(g[i]);
    float mv = to_f(m[i]);
    float vv = to_f(v[i]);
    gv = gv + h.wd_l2 * pv;  // Adam: L2 decay on the gradient (wd_l2 = 0 for AdamW)
    pv = pv * h.decay;       // AdamW: p *= 1 - lr*wd (decay = 1 for Adam)
    mv = h.b1 * mv + h.omb1 * gv;
    vv = h.b2 * vv + h.omb2 * gv * gv;
    const float denom = std::sqrt(vv) * h.inv_sqrt_bc2 + h.eps;
    pv = pv - h.step_size * (mv / denom);
    st_s(&p[i], pv);
    st_s(&m[i], mv);
    st_s(&v[i], vv);
    if constexpr (!std::is_same_v<C, NoCopy>) st_s(&c[i], rt_s(p, pv));
  }
}

using ChunkFn = void (*)(const Ptrs&, int64_t, int64_t, const Hyper&, int);

template <class P, class G, class S, class C>
void chunk_scalar(const Ptrs& q, int64_t b, int64_t e, const Hyper& h, int /*nt*/) {
  adam_scalar_range(static_cast<P*>(q.p), static_cast<const G*>(q.g), static_cast<S*>(q.m),
                    static_cast<S*>(q.v), static_cast<C*>(q.c), b, e, h);
}

#if defined(__x86_64__)
// ---------------------------------------------------------------- AVX-512 --
#define NB_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
namespace v512 {

NB_AVX512 inline __m512 ld(const float* p) { return _mm512_loadu_ps(p); }
NB_AVX512 inline __m512 ld(const h16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
NB_AVX512 inline __m512 ld(const b16* p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
// fp32 -> bf16 bits, round to nearest even, NaN -> quiet NaN.
NB_AVX512 inline __m256i bf16_pack(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
NB_AVX512 inline __m256i fp16_pack(__m512 x) {
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

NB_AVX512 inline void st(float* p, __m512 x, bool nt) {
  if (nt) _mm512_stream_ps(p, x); else _mm512_storeu_ps(p, x);
}
NB_AVX512 inline void st16(void* p, __m256i x, bool nt) {
  if (nt) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), x);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
}
NB_AVX512 inline void st(h16* p, __m512 x, bool nt) { st16(p, fp16_pack(x), nt); }
NB_AVX512 inline void st(b16* p, __m512 x, bool nt) { st16(p, bf16_pack(x), nt); }
NB_AVX512 inline void st(NoCopy*, __m512, bool) {}

NB_AVX512 inline __m512 rt(const float*, __m512 x) { return x; }
NB_AVX512 inline __m512 rt(const h16*, __m512 x) { return _mm512_cvtph_ps(fp16_pack(x)); }
NB_AVX512 inline __m512 rt(const b16*, __m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16_pack(x)), 16));
}

template <class P, class G, class S, class C>
NB_AVX512 void chunk(const Ptrs& q, int64_t b, int64_t e, const Hyper& h, int nt) {
  P* p = static_cast<P*>(q.p);
  const G* g = static_cast<const G*>(q.g);
  S* m = static_cast<S*>(q.m);
  S* v = static_cast<S*>(q.v);
  C* c = static_cast<C*>(q.c);
  const __m512 b1 = _mm512_set1_ps(h.b1), b2 = _mm512_set1_ps(h.b2);
  const __m512 omb1 = _mm512_set1_ps(h.omb1), omb2 = _mm512_set1_ps(h.omb2);
  const __m512 eps = _mm512_set1_ps(h.eps), ss = _mm512_set1_ps(h.step_size);
  const __m512 isb = _mm512_set1_ps(h.inv_sqrt_bc2), wd = _mm512_set1_ps(h.wd_l2);
  const __m512 decay = _mm512_set1_ps(h.decay);
  // Streaming stores need aligned addresses: only when every vector is.
  const bool nt_c = (nt & 1) && c && (reinterpret_cast<uintptr_t>(c + b) % 32 == 0);
  const bool nt_s = (nt & 2) && std::is_same_v<S, float> && std::is_same_v<P, float> &&
                    (reinterpret_cast<uintptr_t>(p + b) % 64 == 0) &&
                    (reinterpret_cast<uintptr_t>(m + b) % 64 == 0) &&
                    (reinterpret_cast<uintptr_t>(v + b) % 64 == 0);
  int64_t i = b;
#pragma GCC unroll 2
  for (; i + 16 <= e; i += 16) {
    __m512 pv = ld(p + i);
    __m512 gv = ld(g + i);
    __m512 mv = ld(m + i);
    __m512 vv = ld(v + i);
    gv = _mm512_fmadd_ps(pv, wd, gv);
    pv = _mm512_mul_ps(pv, decay);
    mv = _mm512_fmadd_ps(b1, mv, _mm512_mul_ps(omb1, gv));
    vv = _mm512_fmadd_ps(b2, vv, _mm512_mul_ps(_mm512_mul_ps(omb2, gv), gv));
    const __m512 den = _mm512_fmadd_ps(_mm512_sqrt_ps(vv), isb, eps);
    pv = _mm512_fnmadd_ps(ss, _mm512_div_ps(mv, den), pv);
    st(p + i, pv, nt_s);
    st(m + i, mv, nt_s);
    st(v + i, vv, nt_s);
    if constexpr (!std::is_same_v<C, NoCopy>) st(c + i, rt(p, pv), nt_c);
  }
  if (nt_c || nt_s) _mm_sfence();
  adam_scalar_range(p, g, m, v, c, i, e, h);
}
}  // namespace v512

// ------------------------------------------------------------------ AVX2 --
#define NB_AVX2 __attribute__((target("avx2,fma,f16c")))
namespace v256 {

NB_AVX2 inline __m256 ld(const float* p) { return _mm256_loadu_ps(p); }
NB_AVX2 inline __m256 ld(const h16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
NB_AVX2 inline __m256 ld(const b16* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
NB_AVX2 inline __m128i bf16_pack(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
  r = _mm256_srli_epi32(r, 16);  // each lane now in [0, 0xffff]: packus is exact
  r = _mm256_packus_epi32(r, r);  // [a0..a3 a0..a3 | a4..a7 a4..a7]
  r = _mm256_permute4x64_epi64(r, 0x08);  // 64-bit lanes 0, 2 -> a0..a7
  return _mm256_castsi256_si128(r);
}
NB_AVX2 inline __m128i fp16_pack(__m256 x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
NB_AVX2 inline void st(float* p, __m256 x, bool nt) {
  if (nt) _mm256_stream_ps(p, x); else _mm256_storeu_ps(p, x);
}
NB_AVX2 inline void st16(void* p, __m128i x, bool nt) {
  if (nt) _mm_stream_si128(reinterpret_cast<__m128i*>(p), x);
  else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), x);
}
NB_AVX2 inline void st(h16* p, __m256 x, bool nt) { st16(p, fp16_pack(x), nt); }
NB_AVX2 inline void st(b16* p, __m256 x, bool nt) { st16(p, bf16_pack(x), nt); }
NB_AVX2 inline void st(NoCopy*, __m256, bool) {}

NB_AVX2 inline __m256 rt(const float*, __m256 x) { return x; }
NB_AVX2 inline __m256 rt(const h16*, __m256 x) { return _mm256_cvtph_ps(fp16_pack(x)); }
NB_AVX2 inline __m256 rt(const b16*, __m256 x) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16_pack(x)), 16));
}

template <class P, class G, class S, class C>
NB_AVX2 void chunk(const Ptrs& q, int64_t b, int64_t e, const Hyper& h, int nt) {
  P* p = static_cast<P*>(q.p);
  const G* g = static_cast<const G*>(q.g);
  S* m = static_cast<S*>(q.m);
  S* v = static_cast<S*>(q.v);
  C* c = static_cast<C*>(q.c);
  const __m256 b1 = _mm256_set1_ps(h.b1), b2 = _mm256_set1_ps(h.b2);
  const __m256 omb1 = _mm256_set1_ps(h.omb1), omb2 = _mm256_set1_ps(h.omb2);
  const __m256 eps = _mm256_set1_ps(h.eps), ss = _mm256_set1_ps(h.step_size);
  const __m256 isb = _mm256_set1_ps(h.inv_sqrt_bc2), wd = _mm256_set1_ps(h.wd_l2);
  const __m256 decay = _mm256_set1_ps(h.decay);
  const bool nt_c = (nt & 1) && c && (reinterpret_cast<uintptr_t>(c + b) % 16 == 0);
  const bool nt_s = (nt & 2) && std::is_same_v<S, float> && std::is_same_v<P, float> &&
                    (reinterpret_cast<uintptr_t>(p + b) % 32 == 0) &&
                    (reinterpret_cast<uintptr_t>(m + b) % 32 == 0) &&
                    (reinterpret_cast<uintptr_t>(v + b) % 32 == 0);
  int64_t i = b;
#pragma GCC unroll 2
  for (; i + 8 <= e; i += 8) {
    __m256 pv = ld(p + i);
    __m256 gv = ld(g + i);
    __m256 mv = ld(m + i);
    __m256 vv = ld(v + i);
    gv = _mm256_fmadd_ps(pv, wd, gv);
    pv = _mm256_mul_ps(pv, decay);
    mv = _mm256_fmadd_ps(b1, mv, _mm256_mul_ps(omb1, gv));
    vv = _mm256_fmadd_ps(b2, vv, _mm256_mul_ps(_mm256_mul_ps(omb2, gv), gv));
    const __m256 den = _mm256_fmadd_ps(_mm256_sqrt_ps(vv), isb, eps);
    pv = _mm256_fnmadd_ps(ss, _mm256_div_ps(mv, den), pv);
    st(p + i, pv, nt_s);
    st(m + i, mv, nt_s);
    st(v + i, vv, nt_s);
    if constexpr (!std::is_same_v<C, NoCopy>) st(c + i, rt(p, pv), nt_c);
  }
  if (nt_c || nt_s) _mm_sfence();
  adam_scalar_range(p, g, m, v, c, i, e, h);
}
}  // namespace v256
#endif  // __x86_64__

// ------------------------------------------------------------- dispatch --
enum Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* level_name(int l) {
  return l == kAvx512 ? "avx512" : l == kAvx2 ? "avx2" : "scalar";
}

int best_level() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return kAvx2;
#endif
  return kScalar;
}

std::string supported_list(int best) {
  std::string s;
  for (int l = best; l >= 0; --l) {
    if (!s.empty()) s += ", ";
    s += level_name(l);
  }
  return s;
}

// Level to run: NUMABENCH_CPU_ADAM_SIMD if set (and not "auto"), else the best.
int resolve_level() {
  static const int best = best_level();
  const char* env = std::getenv("NUMABENCH_CPU_ADAM_SIMD");
  if (env == nullptr || env[0] == '\0' || std::strcmp(env, "auto") == 0) return best;
  int want;
  if (std::strcmp(env, "scalar") == 0) want = kScalar;
  else if (std::strcmp(env, "avx2") == 0) want = kAvx2;
  else if (std::strcmp(env, "avx512") == 0) want = kAvx512;
  else
    TORCH_CHECK(false, "NUMABENCH_CPU_ADAM_SIMD='", env,
                "' is not a SIMD level; allowed: auto, scalar, avx2, avx512");
  TORCH_CHECK(want <= best, "NUMABENCH_CPU_ADAM_SIMD='", env,
              "' but this CPU (or this non-x86 build) lacks it; available here: ",
              supported_list(best));
  return want;
}

template <class P, class G, class S, class C>
ChunkFn pick_level(int level) {
#if defined(__x86_64__)
  if (level == kAvx512) return &v512::chunk<P, G, S, C>;
  if (level == kAvx2) return &v256::chunk<P, G, S, C>;
#endif
  (void)level;
  return &chunk_scalar<P, G, S, C>;
}

template <class P, class G, class S>
ChunkFn pick_copy(c10::optional<at::ScalarType> c, int level) {
  if (!c) return pick_level<P, G, S, NoCopy>(level);
  if (*c == at::kBFloat16) return pick_level<P, G, S, b16>(level);
  if (*c == at::kHalf) return pick_level<P, G, S, h16>(level);
  TORCH_CHECK(false, "param_copy_out dtype ", *c, " not supported; allowed: bfloat16, float16");
}

ChunkFn pick(at::ScalarType p, at::ScalarType g, at::ScalarType s,
             c10::optional<at::ScalarType> c, int level) {
  using at::kBFloat16;
  using at::kFloat;
  using at::kHalf;
  if (p == kFloat && s == kFloat) {
    if (g == kFloat) return pick_copy<float, float, float>(c, level);
    if (g == kBFloat16) return pick_copy<float, b16, float>(c, level);
    if (g == kHalf) return pick_copy<float, h16, float>(c, level);
  } else if (p == kHalf && g == kHalf && s == kHalf) {
    return pick_copy<h16, h16, h16>(c, level);
  } else if (p == kBFloat16 && g == kBFloat16 && s == kBFloat16) {
    return pick_copy<b16, b16, b16>(c, level);
  }
  TORCH_CHECK(false, "unsupported dtype combination param=", p, " grad=", g, " exp_avg=", s,
              "; allowed: all float32, all float16, all bfloat16, or float32 param/exp_avg/"
              "exp_avg_sq with a float32, bfloat16 or float16 grad");
}

int nt_policy() {
  const char* env = std::getenv("NUMABENCH_CPU_ADAM_NT");
  if (env == nullptr || env[0] == '\0') return kDefaultNtPolicy;
  return std::atoi(env) & 3;
}

// Threads' shares of a step: static (default: one contiguous range a thread) or, with
// NUMABENCH_CPU_ADAM_SCHEDULE=dynamic, chunks taken in turn by whichever thread is free, so a
// thread the OS or a hypervisor holds back delays the step by a chunk, not by its whole range
// (for experiments: docs/CPU_ADAM.md has what it measured).
bool dynamic_schedule() {
  const char* env = std::getenv("NUMABENCH_CPU_ADAM_SCHEDULE");
  if (env == nullptr || env[0] == '\0' || std::strcmp(env, "static") == 0) return false;
  TORCH_CHECK(std::strcmp(env, "dynamic") == 0, "NUMABENCH_CPU_ADAM_SCHEDULE='", env,
              "' is not a schedule; allowed: static, dynamic");
  return true;
}

void check_tensor(const at::Tensor& t, const char* name, int64_t n) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be on the CPU, got device ", t.device());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.numel() == n, name, " has ", t.numel(), " elements, param has ", n);
}

void adam_step(at::Tensor param, at::Tensor grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               int64_t step, bool adamw, c10::optional<at::Tensor> copy_out,
               int64_t num_threads) {
  const int64_t n = param.numel();
  check_tensor(param, "param", n);
  check_tensor(grad, "grad", n);
  check_tensor(exp_avg, "exp_avg", n);
  check_tensor(exp_avg_sq, "exp_avg_sq", n);
  TORCH_CHECK(exp_avg.scalar_type() == exp_avg_sq.scalar_type(),
              "exp_avg and exp_avg_sq must have one dtype, got ", exp_avg.scalar_type(), " and ",
              exp_avg_sq.scalar_type());
  TORCH_CHECK(step >= 1, "step must be >= 1, got ", step);
  c10::optional<at::ScalarType> cdt;
  if (copy_out.has_value()) {
    check_tensor(*copy_out, "param_copy_out", n);
    cdt = copy_out->scalar_type();
  }
  const int level = resolve_level();
  const ChunkFn fn =
      pick(param.scalar_type(), grad.scalar_type(), exp_avg.scalar_type(), cdt, level);
  if (n == 0) return;

  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  Hyper h;
  h.b1 = static_cast<float>(beta1);
  h.b2 = static_cast<float>(beta2);
  h.omb1 = static_cast<float>(1.0 - beta1);
  h.omb2 = static_cast<float>(1.0 - beta2);
  h.eps = static_cast<float>(eps);
  h.step_size = static_cast<float>(lr / bc1);
  h.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  h.wd_l2 = adamw ? 0.0f : static_cast<float>(weight_decay);
  h.decay = adamw ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;

  Ptrs q{param.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(),
         copy_out.has_value() ? copy_out->data_ptr() : nullptr};
  const int nt = nt_policy();
  const bool dynamic = dynamic_schedule();  // a bad value refused whatever the threads

  int64_t threads = num_threads > 0 ? num_threads : at::get_num_threads();
  const int64_t by_size = (n + kMinPerThread - 1) / kMinPerThread;
  if (threads > by_size) threads = by_size;
  if (threads < 1) threads = 1;

  pybind11::gil_scoped_release no_gil;
  if (threads == 1) {
    fn(q, 0, n, h, nt);
    return;
  }
  if (dynamic) {
    // chunks of at most kMaxChunkElems, at least 8 a thread, each a multiple of kAlignElems
    int64_t chunk = (n + 8 * threads - 1) / (8 * threads);
    chunk = std::min(kMaxChunkElems, (chunk + kAlignElems - 1) / kAlignElems * kAlignElems);
    const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(static_cast<int>(threads)) schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) fn(q, c * chunk, std::min(n, (c + 1) * chunk), h, nt);
    return;
  }
  const int64_t blocks = (n + kAlignElems - 1) / kAlignElems;
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    const int64_t t = omp_get_thread_num();
    const int64_t T = omp_get_num_threads();
    const int64_t per = (blocks + T - 1) / T;
    const int64_t b = std::min(n, t * per * kAlignElems);
    const int64_t e = std::min(n, (t + 1) * per * kAlignElems);
    if (b < e) fn(q, b, e, h, nt);
  }
}

std::string simd_level() { return level_name(resolve_level()); }
std::string simd_best() { return level_name(best_level()); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "numabench CPU Adam/AdamW step (fp32 math, fp32/fp16/bf16 storage)";
  m.def("adam_step", &adam_step, "In-place Adam/AdamW step", pybind11::arg("param"),
        pybind11::arg("grad"), pybind11::arg("exp_avg"), pybind11::arg("exp_avg_sq"),
        pybind11::arg("lr"), pybind11::arg("beta1"), pybind11::arg("beta2"),
        pybind11::arg("eps"), pybind11::arg("weight_decay"), pybind11::arg("step"),
        pybind11::arg("adamw"), pybind11::arg("param_copy_out"), pybind11::arg("num_threads"));
  m.def("simd_level", &simd_level, "SIMD level the run-time dispatch picks now");
  m.def("simd_best", &simd_best, "best SIMD level this CPU supports");
}
