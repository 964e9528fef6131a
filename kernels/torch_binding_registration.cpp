// The binding's ops registered with torch's dispatcher (their schemas are defined in cutlass_ext/ops.py): the one
// unit that parses torch/library.h, compiled beside torch_binding.cpp.
#include <torch/library.h>

#include "torch_binding.h"

using namespace cutlass_ext_binding;

TORCH_LIBRARY_IMPL(cutlass_ext, CUDA, m) {
  m.impl("gemm", &gemm_cuda);
  m.impl("gemm_fp8", &gemm_fp8_cuda);
  m.impl("halfhalf_pack", &halfhalf_pack_cuda);
  m.impl("halfhalf_unscale", &halfhalf_unscale_cuda);
  m.impl("split_planes", &split_planes_cuda);
  m.impl("range_shift", &range_shift_cuda);
  m.impl("halfhalf_gemm", &halfhalf_gemm_cuda);
  m.impl("gemm_split", &gemm_split_cuda);
}

// Plain ops rather than a Python module: no pybind11 or torch/extension.h to compile on a user's first call.
TORCH_LIBRARY_FRAGMENT(cutlass_ext, m) {
  m.def("register_variant(str name, str arch, str library) -> ()", &register_variant);
  m.def("registered_variants() -> str[]", &registered_variants);
}
