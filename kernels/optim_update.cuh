// The per-element update rules of the 16-bit optimizers (seed 004 appendix B, Algorithms 2-5), for host and
// device. Every operation is one IEEE round-to-nearest FP32 operation (the _rn intrinsics on the device, so
// nothing contracts into an FMA), optionally rounded to BF16 after it; cutlass_ext/optim/reference.py performs
// the same operations in the same order.
#pragma once

#include <math.h>

#include "optim_philox.cuh"

namespace cutlass_ext {
namespace optim {

enum class Update { kNearest, kStochastic, kKahan };

// kFp32: FP32 registers, BF16 storage. kBf16: every result rounded to BF16 nearest (the seed's 16-bit FPU).
enum class Arithmetic { kFp32, kBf16 };

// Launch-wide hyperparameters, already rounded to FP32 (or BF16 in kBf16 arithmetic) by the caller.
struct Constants {
  float momentum, one_minus_dampening, weight_decay;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  int32_t nesterov;
  uint32_t seed_low, seed_high;
};

// One tensor's per-step scalars (reference.step_scalars): lr, step, then (first step flag, 0) for SGD or the
// reciprocals of the two bias corrections for AdamW.
struct Scalars {
  float lr, step, extra0, extra1;
};

template <Arithmetic kArithmetic>
struct Fpu {
  OPTIM_HOST_DEVICE static float q(float x) {
    return kArithmetic == Arithmetic::kBf16 ? bf16_to_float(round_nearest(x)) : x;
  }
#if defined(__CUDA_ARCH__)
  OPTIM_HOST_DEVICE static float add(float a, float b) { return q(__fadd_rn(a, b)); }
  OPTIM_HOST_DEVICE static float sub(float a, float b) { return q(__fsub_rn(a, b)); }
  OPTIM_HOST_DEVICE static float mul(float a, float b) { return q(__fmul_rn(a, b)); }
  OPTIM_HOST_DEVICE static float div(float a, float b) { return q(__fdiv_rn(a, b)); }
  OPTIM_HOST_DEVICE static float sqrt(float a) { return q(__fsqrt_rn(a)); }
#else
  // The host build (CPU tests) relies on SSE arithmetic, which is IEEE and has no FMA to contract into.
  OPTIM_HOST_DEVICE static float add(float a, float b) { return q(a + b); }
  OPTIM_HOST_DEVICE static float sub(float a, float b) { return q(a - b); }
  OPTIM_HOST_DEVICE static float mul(float a, float b) { return q(a * b); }
  OPTIM_HOST_DEVICE static float div(float a, float b) { return q(a / b); }
  OPTIM_HOST_DEVICE static float sqrt(float a) { return q(::sqrtf(a)); }
#endif
};

// SGD's update u = lr · d (Algorithms 2-3 lines 3-5, with torch.optim.SGD's dampening, Nesterov and first step,
// which copies the gradient into the buffer). `momentum` holds the old buffer in, the new one (FP32) out.
template <Arithmetic kArithmetic>
OPTIM_HOST_DEVICE float sgd_step(float weight, float grad, float& momentum, const Constants& c, const Scalars& s) {
  using F = Fpu<kArithmetic>;
  float direction = grad;
  if (c.weight_decay != 0.f) direction = F::add(direction, F::mul(c.weight_decay, weight));
  if (c.momentum != 0.f) {
    momentum = s.extra0 != 0.f ? direction
                               : F::add(F::mul(c.momentum, momentum), F::mul(c.one_minus_dampening, direction));
    direction = c.nesterov ? F::add(direction, F::mul(c.momentum, momentum)) : momentum;
  }
  return F::mul(s.lr, direction);
}

// AdamW's update u = lr · m̂ / (√v̂ + eps) + (lr · d) · w (Algorithms 4-5 lines 5-12); the moments are updated in
// place (FP32, stored to BF16 nearest by the caller).
template <Arithmetic kArithmetic>
OPTIM_HOST_DEVICE float adamw_step(float weight, float grad, float& exp_avg, float& exp_avg_sq, const Constants& c,
                                   const Scalars& s) {
  using F = Fpu<kArithmetic>;
  exp_avg = F::add(F::mul(c.beta1, exp_avg), F::mul(c.one_minus_beta1, grad));
  exp_avg_sq = F::add(F::mul(c.beta2, exp_avg_sq), F::mul(c.one_minus_beta2, F::mul(grad, grad)));
  float first_hat = F::mul(exp_avg, s.extra0);  // extra0, extra1: the bias corrections' reciprocals
  float second_hat = F::sqrt(F::mul(exp_avg_sq, s.extra1));
  float ratio = F::div(first_hat, F::add(second_hat, c.eps));
  float decay = F::mul(F::mul(s.lr, c.weight_decay), weight);
  return F::add(F::mul(s.lr, ratio), decay);
}

// w <- w - u rounded as `kUpdate` says (seed 004 section 3.2); returns the new BF16 weight. `compensation`
// (Kahan only) holds the old BF16 buffer in and the new one out; `random` is used by stochastic rounding only.
template <Update kUpdate, Arithmetic kArithmetic>
OPTIM_HOST_DEVICE uint16_t apply_update(float weight, float update, uint16_t& compensation, uint32_t random) {
  using F = Fpu<kArithmetic>;
  // w - u stays in FP32 before the final rounding: a BF16 rounding first would leave stochastic rounding nothing
  float difference = Fpu<Arithmetic::kFp32>::sub(weight, update);
  if (kUpdate == Update::kNearest) return round_nearest(difference);
  if (kUpdate == Update::kStochastic) return round_stochastic(difference, random);
  // Algorithm 3 lines 7-9: the compensated step, the rounded sum, and what rounding lost
  float corrected = F::sub(-update, bf16_to_float(compensation));
  uint16_t total = round_nearest(F::add(weight, corrected));
  compensation = round_nearest(F::sub(F::sub(bf16_to_float(total), weight), corrected));
  return total;
}

enum class Kind { kSgd, kAdamW };

// One element's whole step from its BF16 words: the optimizer's update, the states stored to nearest, and the new
// weight. SGD keeps its momentum buffer in `state0` (untouched when momentum is 0); AdamW its moments in `state0`
// and `state1`.
template <Kind kKind, Update kUpdate, Arithmetic kArithmetic>
OPTIM_HOST_DEVICE uint16_t update_element(uint16_t weight_bits, uint16_t grad_bits, uint16_t& state0,
                                          uint16_t& state1, uint16_t& compensation, uint32_t random,
                                          const Constants& c, const Scalars& s) {
  float weight = bf16_to_float(weight_bits);
  float grad = bf16_to_float(grad_bits);
  float update;
  if (kKind == Kind::kSgd) {
    float momentum = bf16_to_float(state0);
    update = sgd_step<kArithmetic>(weight, grad, momentum, c, s);
    if (c.momentum != 0.f) state0 = round_nearest(momentum);
  } else {
    float exp_avg = bf16_to_float(state0), exp_avg_sq = bf16_to_float(state1);
    update = adamw_step<kArithmetic>(weight, grad, exp_avg, exp_avg_sq, c, s);
    state0 = round_nearest(exp_avg);
    state1 = round_nearest(exp_avg_sq);
  }
  return apply_update<kUpdate, kArithmetic>(weight, update, compensation, random);
}

}  // namespace optim
}  // namespace cutlass_ext
