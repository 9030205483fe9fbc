// STREAM-style host bandwidth kernels (copy, scale, add, triad) over fp32
// arrays, OpenMP threads with a static split, so the memory-bandwidth ceiling
// is measured by code as good as the Adam kernels it judges (torch's copy_
// and add(..., out=) reached only ~60% of what the CPU Adam kernel moves).
// Bytes counted by the caller: copy/scale 8 B per element, add/triad 12 B,
// adam_pattern 28 B; write-allocate traffic is not counted.
#include <torch/extension.h>
#include <omp.h>

namespace {

void check(const torch::Tensor& t, const char* name, int64_t n) {
  TORCH_CHECK(t.device().is_cpu(), "stream kernels take CPU tensors; ", name, " is not");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "stream kernels take float32; ", name, " is not");
  TORCH_CHECK(t.is_contiguous(), "stream kernels take contiguous tensors; ", name, " is not");
  TORCH_CHECK(t.numel() == n, "all stream arrays need the same number of elements");
}

template <typename F>
void parallel_for(int64_t n, int threads, F&& body) {
  if (threads <= 0) threads = at::get_num_threads();
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // 16-element (64-byte) aligned split: threads never share a cache line.
    const int64_t blocks = (n + 15) / 16;
    const int64_t lo = std::min(n, (blocks * t / nt) * 16);
    const int64_t hi = std::min(n, (blocks * (t + 1) / nt) * 16);
    body(lo, hi);
  }
}

void copy(torch::Tensor dst, torch::Tensor src, int64_t threads) {
  const int64_t n = src.numel();
  check(dst, "dst", n); check(src, "src", n);
  float* __restrict__ d = dst.data_ptr<float>();
  const float* __restrict__ s = src.data_ptr<float>();
  parallel_for(n, (int)threads, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) d[i] = s[i];
  });
}

void scale(torch::Tensor dst, torch::Tensor src, double q, int64_t threads) {
  const int64_t n = src.numel();
  check(dst, "dst", n); check(src, "src", n);
  float* __restrict__ d = dst.data_ptr<float>();
  const float* __restrict__ s = src.data_ptr<float>();
  const float qf = (float)q;
  parallel_for(n, (int)threads, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) d[i] = qf * s[i];
  });
}

void add(torch::Tensor dst, torch::Tensor a, torch::Tensor b, int64_t threads) {
  const int64_t n = a.numel();
  check(dst, "dst", n); check(a, "a", n); check(b, "b", n);
  float* __restrict__ d = dst.data_ptr<float>();
  const float* __restrict__ x = a.data_ptr<float>();
  const float* __restrict__ y = b.data_ptr<float>();
  parallel_for(n, (int)threads, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) d[i] = x[i] + y[i];
  });
}

void triad(torch::Tensor dst, torch::Tensor a, torch::Tensor b, double q, int64_t threads) {
  const int64_t n = a.numel();
  check(dst, "dst", n); check(a, "a", n); check(b, "b", n);
  float* __restrict__ d = dst.data_ptr<float>();
  const float* __restrict__ x = a.data_ptr<float>();
  const float* __restrict__ y = b.data_ptr<float>();
  const float qf = (float)q;
  parallel_for(n, (int)threads, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) d[i] = x[i] + qf * y[i];
  });
}

// Adam's memory pattern without its arithmetic: read p, g, m, v; write p, m, v
// (28 B per element in fp32). A core's bandwidth depends on how many streams it
// keeps in flight, so this, not copy or triad, is the ceiling for an Adam step.
void adam_pattern(torch::Tensor p, torch::Tensor g, torch::Tensor m, torch::Tensor v, int64_t threads) {
  const int64_t n = p.numel();
  check(p, "p", n); check(g, "g", n); check(m, "m", n); check(v, "v", n);
  float* __restrict__ pp = p.data_ptr<float>();
  const float* __restrict__ gg = g.data_ptr<float>();
  float* __restrict__ mm = m.data_ptr<float>();
  float* __restrict__ vv = v.data_ptr<float>();
  parallel_for(n, (int)threads, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float gi = gg[i], mi = mm[i], vi = vv[i];
      pp[i] = pp[i] + gi;
      mm[i] = mi + vi;
      vv[i] = vi + gi;
    }
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("copy", &copy, "dst = src");
  m.def("scale", &scale, "dst = q * src");
  m.def("add", &add, "dst = a + b");
  m.def("triad", &triad, "dst = a + q * b");
  m.def("adam_pattern", &adam_pattern, "p += g; m += v; v += g (Adam's 4 reads, 3 writes)");
}
