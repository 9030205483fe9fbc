// torch binding for the fused Adam / AdamW kernel (csrc/fused_adam.cu).
//
// Only c10/cuda headers (no ATen/cuda/CUDAContext.h, which pulls in the CUDA
// math-library headers such as cusparse.h).
#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>

#include "fused_adam.cuh"

namespace {

const char* kAllowedDtypes = "float32, float16, bfloat16";

// Numbers are formatted with snprintf / std::to_string, never streamed through
// std::ostream: with torch 2.11+cu130 on the H200 image, streaming an integer
// inside this extension's error message segfaulted (seen in
// std::ostream::_M_insert<long>), while string-only messages worked.
std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}

std::string num(int64_t x) { return std::to_string(x); }

std::string dims(c10::IntArrayRef a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a[i]);
  }
  return s + "]";
}

bool dtype_code(at::ScalarType t, nb_adam_dtype* out) {
  switch (t) {
    case at::kFloat: *out = NB_ADAM_FLOAT32; return true;
    case at::kHalf: *out = NB_ADAM_FLOAT16; return true;
    case at::kBFloat16: *out = NB_ADAM_BFLOAT16; return true;
    default: return false;
  }
}

void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& param) {
  TORCH_CHECK(t.defined(), "adam_step_: ", name, " is undefined (None); expected a CUDA tensor");
  TORCH_CHECK(t.is_cuda(), "adam_step_: ", name, " is on device ", t.device().str(),
              "; all four tensors must be CUDA tensors");
  TORCH_CHECK(t.device() == param.device(), "adam_step_: ", name, " is on ", t.device().str(),
              " but param is on ", param.device().str(), "; all four tensors must be on one device");
  TORCH_CHECK(t.scalar_type() == param.scalar_type(), "adam_step_: ", name, " has dtype ",
              c10::toString(t.scalar_type()), " but param has dtype ", c10::toString(param.scalar_type()),
              "; all four tensors must have the same dtype (one of ", kAllowedDtypes, ")");
  TORCH_CHECK(t.layout() == at::kStrided, "adam_step_: ", name, " has layout ", t.layout(),
              "; only dense (strided) tensors are allowed");
  TORCH_CHECK(t.is_contiguous(), "adam_step_: ", name, " is not contiguous (sizes ", dims(t.sizes()),
              ", strides ", dims(t.strides()), "); pass a contiguous tensor or view");
  TORCH_CHECK(t.numel() == param.numel(), "adam_step_: ", name, " has ", num(t.numel()),
              " elements (sizes ", dims(t.sizes()), ") but param has ", num(param.numel()),
              " (sizes ", dims(param.sizes()), "); the sizes must match");
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data_ptr());
  const auto b0 = reinterpret_cast<uintptr_t>(b.data_ptr());
  const auto bytes = static_cast<uintptr_t>(a.numel()) * a.element_size();
  return a0 < b0 + bytes && b0 < a0 + bytes;
}

void adam_step_(at::Tensor param, at::Tensor grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                int64_t step, bool adamw) {
  TORCH_CHECK(param.defined(), "adam_step_: param is undefined (None); expected a CUDA tensor");
  nb_adam_dtype code;
  TORCH_CHECK(dtype_code(param.scalar_type(), &code), "adam_step_: param has dtype ",
              c10::toString(param.scalar_type()), "; allowed dtypes: ", kAllowedDtypes);
  check_tensor(param, "param", param);
  check_tensor(grad, "grad", param);
  check_tensor(exp_avg, "exp_avg", param);
  check_tensor(exp_avg_sq, "exp_avg_sq", param);

  TORCH_CHECK(std::isfinite(lr) && lr >= 0.0, "adam_step_: lr=", num(lr),
              " is invalid; allowed: a finite value >= 0");
  TORCH_CHECK(beta1 >= 0.0 && beta1 < 1.0, "adam_step_: beta1=", num(beta1),
              " is invalid; allowed: 0 <= beta1 < 1");
  TORCH_CHECK(beta2 >= 0.0 && beta2 < 1.0, "adam_step_: beta2=", num(beta2),
              " is invalid; allowed: 0 <= beta2 < 1");
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, "adam_step_: eps=", num(eps),
              " is invalid; allowed: a finite value >= 0");
  TORCH_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0,
              "adam_step_: weight_decay=", num(weight_decay),
              " is invalid; allowed: a finite value >= 0");
  TORCH_CHECK(step >= 1, "adam_step_: step=", num(step),
              " is invalid; allowed: step >= 1 (the number of this step, counting from 1)");

  const int64_t n = param.numel();
  if (n == 0) return;

  const at::Tensor* ts[4] = {&param, &grad, &exp_avg, &exp_avg_sq};
  const char* names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      TORCH_CHECK(!overlaps(*ts[i], *ts[j]), "adam_step_: ", names[i], " and ", names[j],
                  " share memory; the four tensors must not overlap");
    }
  }

  const c10::cuda::CUDAGuard device_guard(param.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(param.device().index()).stream();
  const cudaError_t err = nb_fused_adam_step(
      param.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(), n, code, lr,
      beta1, beta2, eps, weight_decay, step, adamw ? 1 : 0, stream);
  TORCH_CHECK(err == cudaSuccess, "adam_step_: CUDA error ", num(static_cast<int64_t>(err)), " (",
              cudaGetErrorName(err), "): ", cudaGetErrorString(err));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "numabench fused Adam/AdamW CUDA kernel";
  m.def("adam_step_", &adam_step_,
        "In-place fused Adam/AdamW step on contiguous CUDA tensors of one dtype "
        "(float32/float16/bfloat16); launches on the current CUDA stream.",
        py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("exp_avg_sq"),
        py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
        py::arg("weight_decay"), py::arg("step"), py::arg("adamw"));
}
