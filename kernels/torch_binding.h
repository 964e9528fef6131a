// The torch binding's ops, implemented in torch_binding.cpp and registered with the dispatcher in
// torch_binding_registration.cpp: two units compiled side by side, so that only the second parses
// torch/library.h (a third of the binding's compile) and only the first the ATen ops it calls.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

namespace cutlass_ext_binding {

at::Tensor gemm_cuda(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& c, double alpha,
                     double beta, std::vector<std::string> variants);
at::Tensor gemm_fp8_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                         std::vector<std::string> variants);
at::Tensor halfhalf_pack_cuda(const at::Tensor& x, const at::Tensor& shift);
at::Tensor halfhalf_unscale_cuda(const at::Tensor& c, const at::Tensor& row_shift, const at::Tensor& column_shift);
std::tuple<at::Tensor, at::Tensor> split_planes_cuda(const at::Tensor& x, const c10::optional<at::Tensor>& shift,
                                                     int64_t format);
at::Tensor range_shift_cuda(const at::Tensor& x, int64_t dim);
at::Tensor halfhalf_gemm_cuda(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& c,
                              double alpha, double beta, std::vector<std::string> variants);
at::Tensor gemm_split_cuda(const at::Tensor& a_hi, const at::Tensor& a_lo, const at::Tensor& b_hi,
                           const at::Tensor& b_lo, const c10::optional<at::Tensor>& row_shift,
                           const c10::optional<at::Tensor>& column_shift, std::vector<std::string> variants,
                           const c10::optional<at::Tensor>& bias, double alpha);
void register_variant(const std::string& name, const std::string& arch, const std::string& library);
std::vector<std::string> registered_variants();

}  // namespace cutlass_ext_binding
