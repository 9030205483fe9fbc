// Fused Adam / AdamW optimizer step: launcher API.
//
// Plain C/CUDA declarations only (no torch / ATen), so that the kernel file
// compiles standalone with nvcc and the torch binding can call it.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Storage dtype of all four tensors (param, grad, exp_avg, exp_avg_sq).
// Arithmetic is always float32.
typedef enum nb_adam_dtype {
  NB_ADAM_FLOAT32 = 0,
  NB_ADAM_FLOAT16 = 1,
  NB_ADAM_BFLOAT16 = 2,
} nb_adam_dtype;

// One in-place Adam (adamw == 0) or AdamW (adamw != 0) step over `numel`
// contiguous elements, step number `step` (>= 1), matching torch.optim:
//
//   Adam : g = g + weight_decay * p                      (L2 penalty)
//   AdamW: p = p * (1 - lr * weight_decay)               (decoupled decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//   p = p - lr / (1 - beta1^step) * m / denom
//
// Pointers may have any element offset (views / slices): the launcher picks
// 16-byte vector access when it can (same misalignment on all four pointers,
// handled with a scalar head) and a scalar path otherwise.  The four ranges
// must not overlap (the kernel uses __restrict__).  The grad is not modified.
//
// Launches on `stream` on the current device (the caller selects the device
// the pointers live on).  Returns cudaSuccess, cudaErrorInvalidValue for bad
// arguments (null pointer, negative numel, step < 1, unknown dtype), or the
// error of the first failing CUDA call / the launch.  numel == 0 is a no-op.
cudaError_t nb_fused_adam_step(void* param, const void* grad, void* exp_avg,
                               void* exp_avg_sq, int64_t numel,
                               nb_adam_dtype dtype, double lr, double beta1,
                               double beta2, double eps, double weight_decay,
                               int64_t step, int adamw, cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif
