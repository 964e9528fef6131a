// One Ozaki-II variant's launchers: operand pass, INT8 GEMM over the moduli, recombination.
#pragma once

#include "cutlass/cutlass.h"

#include "ozaki_abi.h"
#include "ozaki_passes.cuh"
#include "ozaki_sm90_gemm.cuh"

#define CUTLASS_EXT_EXPORT_OZAKI(NAME, COUNT, BUDGET, PRODUCT, ...)                                                   \
  extern "C" int NAME##_ozaki_scale(const cutlass_ext_ozaki_scale_args* args, void* stream) {                         \
    return cutlass_ext::ozaki::run_scale<COUNT, BUDGET>(args, stream);                                                \
  }                                                                                                                   \
  extern "C" size_t NAME##_ozaki_gemm_workspace_size(const cutlass_ext_ozaki_gemm_args* args) {                       \
    return __VA_ARGS__::workspace_size(args);                                                                         \
  }                                                                                                                   \
  extern "C" int NAME##_ozaki_gemm(const cutlass_ext_ozaki_gemm_args* args, void* workspace, void* stream) {          \
    return __VA_ARGS__::run(args, workspace, stream);                                                                 \
  }                                                                                                                   \
  extern "C" int NAME##_ozaki_recombine(const cutlass_ext_ozaki_recombine_args* args, void* stream) {                 \
    return cutlass_ext::ozaki::run_recombine<COUNT, PRODUCT>(args, stream);                                           \
  }

// Once per library: the spelling of the GEMM's cutlass::Status codes.
#define CUTLASS_EXT_EXPORT_OZAKI_LIBRARY()                                                                            \
  extern "C" const char* cutlass_ext_status_string(int status) {                                                      \
    return cutlass::cutlassGetStatusString(cutlass::Status(status));                                                  \
  }
