// FP8's epilogue arguments, D = row_scale[m] · (column_scale[n] · acc) + bias in the kernel's rows and columns: a
// scale is one value or, where its rowwise flag is set, a vector; a null bias reads as 0. The stage epilogue's and
// the register-stored epilogue's (sm90_stage_epilogue.hpp, sm90_fp8_gemm.cuh).
#pragma once

namespace cutlass_ext {

template <class ElementD>
struct ScaleBiasArguments {
  float const* row_scale = nullptr;
  bool row_scale_rowwise = false;
  float const* column_scale = nullptr;
  bool column_scale_rowwise = false;
  ElementD const* bias = nullptr;
};

}  // namespace cutlass_ext
