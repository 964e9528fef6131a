// The torch binding's ops (torch_binding_registration.cpp registers them): each validates tensors, picks a
// registered kernel variant that can run the problem, and calls its C launcher on the current stream. The op
// schemas live in cutlass_ext/ops.py (so torch.compile's fake kernels exist before this is built); this file gives
// them their CUDA implementation.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/StringUtil.h>

#include "launcher_abi.h"
#include "range_shift_abi.h"
#include "torch_binding.h"

namespace cutlass_ext_binding {

// A variant whose launchers take one argument struct: FP8 (kernels/sm90_fp8_gemm.cuh), the corrected SGEMM from
// split planes (kernels/sm90_corrected_gemm.cuh), or a packed halfhalf product with its unscaling
// (kernels/sm80_gemm.cuh).
template <typename Args>
struct TypedVariant {
  std::string library;
  int (*can_implement)(const Args*);
  size_t (*workspace_size)(const Args*);
  int (*run)(const Args*, void* workspace, void* cuda_stream);
  cutlass_ext_status_string_fn status_string;
};
using Fp8Variant = TypedVariant<cutlass_ext_fp8_args>;
using SplitVariant = TypedVariant<cutlass_ext_split_gemm_args>;
using UnscaledVariant = TypedVariant<cutlass_ext_unscaled_gemm_args>;

struct Variant {
  std::string library;
  int layouts;  // CUTLASS_EXT_A_COLUMN_MAJOR | CUTLASS_EXT_B_COLUMN_MAJOR
  cutlass_ext_can_implement_fn can_implement;
  cutlass_ext_workspace_size_fn workspace_size;
  cutlass_ext_run_fn run;
  cutlass_ext_status_string_fn status_string;
  UnscaledVariant unscaled;
};

// Variants by arch (`80`, `90a`: what Python built the library for), then by name: a process with GPUs of two
// architectures holds a binary of a variant for each, and a call runs the one built for its device's arch.
template <typename VariantT>
using ArchTable = std::unordered_map<std::string, std::unordered_map<std::string, VariantT>>;

// The passes around the products, from the first library loaded for an arch that exports them: halfhalf's
// operand passes (the sm80 libraries), the Hopper split pass (the corrected sm90 ones), the range shifts (both).
struct PassLaunchers {
  cutlass_ext_split_planes_fn split_planes = nullptr;
  cutlass_ext_halfhalf_pack_fn halfhalf_pack = nullptr;
  cutlass_ext_halfhalf_unscale_fn halfhalf_unscale = nullptr;
  cutlass_ext_halfhalf_operands_fn halfhalf_operands = nullptr;
  cutlass_ext_range_shift_fn range_shift = nullptr;
};

std::mutex registry_mutex;
ArchTable<Variant> registry;
ArchTable<Fp8Variant> fp8_registry;
ArchTable<SplitVariant> split_registry;
std::unordered_map<std::string, PassLaunchers> pass_launchers;  // by arch

// The arch string kernels are built for on CUDA device `device` as cutlass_ext.device.info names it (`80`, `86`,
// `90a`: the `a` features from sm_90 on); asked of the runtime once per device.
std::string device_arch(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, std::string> archs;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = archs.find(device);
  if (found != archs.end()) return found->second;
  int major = 0, minor = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return archs[device] = std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

template <typename Fn>
Fn find_symbol(void* handle, const std::string& symbol, const std::string& library) {
  void* address = dlsym(handle, symbol.c_str());
  TORCH_CHECK(address != nullptr, "kernel library ", library, " does not export ", symbol);
  return reinterpret_cast<Fn>(address);
}

// `<name><suffix>_can_implement`, `_workspace_size` and `_run` of a Hopper variant.
template <typename Args>
TypedVariant<Args> load_typed(void* handle, const std::string& prefix, const std::string& library) {
  return TypedVariant<Args>{
      library,
      find_symbol<int (*)(const Args*)>(handle, prefix + "_can_implement", library),
      find_symbol<size_t (*)(const Args*)>(handle, prefix + "_workspace_size", library),
      find_symbol<int (*)(const Args*, void*, void*)>(handle, prefix + "_run", library),
      find_symbol<cutlass_ext_status_string_fn>(handle, "cutlass_ext_status_string", library),
  };
}

// Loads `library`, built for `arch` (once per process), and records the launchers of variant `name` it exports
// for that arch: an FP8 variant if the library exports `<name>_fp8_run`, a Hopper corrected one for
// `<name>_split_run`, an FP32 GEMM (CUTLASS 2.x) variant otherwise.
void register_variant(const std::string& name, const std::string& arch, const std::string& library) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto loaded_from = [&](auto& table) {
    const auto& variants = table[arch];
    auto found = variants.find(name);
    return found != variants.end() && found->second.library == library;
  };
  if (loaded_from(registry) || loaded_from(fp8_registry) || loaded_from(split_registry)) return;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle != nullptr, "cannot load kernel library ", library, ": ", dlerror());
  auto abi_version = find_symbol<cutlass_ext_abi_version_fn>(handle, "cutlass_ext_abi_version", library);
  TORCH_CHECK(abi_version() == CUTLASS_EXT_ABI_VERSION, "kernel library ", library, " has launcher ABI ",
              std::to_string(abi_version()), "; this binding speaks ", std::to_string(CUTLASS_EXT_ABI_VERSION),
              ": rebuild it");
  PassLaunchers& passes = pass_launchers[arch];
  if (dlsym(handle, (name + "_fp8_run").c_str()) != nullptr) {
    fp8_registry[arch][name] = load_typed<cutlass_ext_fp8_args>(handle, name + "_fp8", library);
    return;
  }
  if (passes.range_shift == nullptr) {
    passes.range_shift = find_symbol<cutlass_ext_range_shift_fn>(handle, "cutlass_ext_range_shift", library);
  }
  if (dlsym(handle, (name + "_split_run").c_str()) != nullptr) {
    split_registry[arch][name] = load_typed<cutlass_ext_split_gemm_args>(handle, name + "_split", library);
    if (passes.split_planes == nullptr) {
      passes.split_planes = find_symbol<cutlass_ext_split_planes_fn>(handle, "cutlass_ext_split_planes", library);
    }
    return;
  }
  if (passes.halfhalf_pack == nullptr) {
    passes.halfhalf_pack = find_symbol<cutlass_ext_halfhalf_pack_fn>(handle, "cutlass_ext_halfhalf_pack", library);
    passes.halfhalf_unscale =
        find_symbol<cutlass_ext_halfhalf_unscale_fn>(handle, "cutlass_ext_halfhalf_unscale", library);
    passes.halfhalf_operands =
        find_symbol<cutlass_ext_halfhalf_operands_fn>(handle, "cutlass_ext_halfhalf_operands", library);
  }
  registry[arch][name] = Variant{
      library,
      find_symbol<cutlass_ext_layouts_fn>(handle, name + "_layouts", library)(),
      find_symbol<cutlass_ext_can_implement_fn>(handle, name + "_can_implement", library),
      find_symbol<cutlass_ext_workspace_size_fn>(handle, name + "_workspace_size", library),
      find_symbol<cutlass_ext_run_fn>(handle, name + "_run", library),
      find_symbol<cutlass_ext_status_string_fn>(handle, "cutlass_ext_status_string", library),
      load_typed<cutlass_ext_unscaled_gemm_args>(handle, name + "_unscaled", library),
  };
}

// `<name> sm_<arch>` for every variant loaded.
std::vector<std::string> registered_variants() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<std::string> names;
  auto add = [&](const auto& table) {
    for (const auto& [arch, variants] : table) {
      for (const auto& entry : variants) names.push_back(entry.first + " sm_" + arch);
    }
  };
  add(registry);
  add(fp8_registry);
  add(split_registry);
  return names;
}

// A variant list names the preferred variant first and fallbacks after it; Python loads only the first, so a
// fallback that is not loaded is skipped and, if nothing ran, named after this marker: Python then loads the rest
// and calls again (a first call builds only the kernel that runs).
constexpr const char* kUnloadedMarker = "[cutlass_ext:unloaded]";

// Variant `name` loaded for `arch`, or nullptr.
template <typename VariantT>
const VariantT* find_in(const ArchTable<VariantT>& table, const std::string& arch, const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto variants = table.find(arch);
  if (variants == table.end()) return nullptr;
  auto found = variants->second.find(name);
  return found == variants->second.end() ? nullptr : &found->second;  // never erased: the pointer stays valid
}

void check_unloaded(const std::vector<std::string>& unloaded) {
  TORCH_CHECK(unloaded.empty(), kUnloadedMarker, " ", c10::Join(",", unloaded));
}

// Runs `variant` on the current stream with a workspace from the caching allocator; false (nothing launched) if
// it cannot implement `args`. Works for FP32 GEMM and FP8 variants alike.
template <typename VariantT, typename Args>
bool run_if_implementable(const VariantT& variant, Args& args, const std::string& name,
                          const at::TensorOptions& options) {
  if (variant.can_implement(&args) != 0) return false;
  size_t workspace_bytes = variant.workspace_size(&args);
  at::Tensor workspace;  // most variants need none: no allocator round trip for them
  if (workspace_bytes) workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, options.dtype(at::kByte));
  int status = variant.run(&args, workspace_bytes ? workspace.data_ptr() : nullptr,
                           c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "kernel ", name, " failed: ", variant.status_string(status));
  return true;
}

// CUTLASS 2.x runs a batch on the grid's z dimension, at most 65535 problems a launch.
constexpr int64_t kMaxLaunchBatch = 65535;

// Problems [start, start + count) of a batched launch: every operand's pointer moved by start batch strides (all
// elements are 4 bytes: FP32, or halfhalf's packed words).
cutlass_ext_gemm_args batch_slice(const cutlass_ext_gemm_args& args, int64_t start, int64_t count) {
  auto moved = [start](const void* p, int64_t stride) {
    return p == nullptr ? nullptr : static_cast<const char*>(p) + start * stride * 4;
  };
  cutlass_ext_gemm_args slice = args;
  slice.batch = count;
  slice.a = moved(args.a, args.batch_stride_a);
  slice.b = moved(args.b, args.batch_stride_b);
  slice.c = moved(args.c, args.batch_stride_c);
  slice.d = const_cast<void*>(static_cast<const void*>(moved(args.d, args.batch_stride_d)));
  return slice;
}

cutlass_ext_unscaled_gemm_args batch_slice(const cutlass_ext_unscaled_gemm_args& args, int64_t start, int64_t count) {
  cutlass_ext_unscaled_gemm_args slice = args;
  slice.gemm = batch_slice(args.gemm, start, count);
  slice.row_shift = args.row_shift + start * args.row_shift_batch_stride;
  slice.column_shift = args.column_shift + start * args.column_shift_batch_stride;
  return slice;
}

int64_t batch_of(const cutlass_ext_gemm_args& args) { return args.batch; }
int64_t batch_of(const cutlass_ext_unscaled_gemm_args& args) { return args.gemm.batch; }

// run_if_implementable in launches of at most kMaxLaunchBatch problems; false (nothing launched) if the variant
// cannot implement the first.
template <typename VariantT, typename Args>
bool run_batches(const VariantT& variant, Args& args, const std::string& name, const at::TensorOptions& options) {
  const int64_t batch = batch_of(args);
  if (batch <= kMaxLaunchBatch) return run_if_implementable(variant, args, name, options);
  for (int64_t start = 0; start < batch; start += kMaxLaunchBatch) {
    Args slice = batch_slice(args, start, std::min(kMaxLaunchBatch, batch - start));
    bool ran = run_if_implementable(variant, slice, name, options);
    TORCH_CHECK(ran || start == 0, "kernel ", name, " declined a later part of a batch it had begun");
    if (!ran) return false;
  }
  return true;
}

// "[16, 64]" for error messages, built here. Error messages in this file pass integers as strings: on the lent
// H100 (torch 2.11, the binding built by g++ 13) an error message with an integer streamed into it crashes the
// process when it is thrown (tested there: int64 and IntArrayRef crash; strings, dtypes and devices do not).
std::string shape_string(at::IntArrayRef values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// Whether a kernel reading `column_major` (unit stride down each column) or row-major matrices can read the
// matrices of t as they are stored.
bool readable(const at::Tensor& t, bool column_major) {
  int64_t rows = t.size(-2), columns = t.size(-1);
  if (column_major) return (rows <= 1 || t.stride(-2) == 1) && (columns <= 1 || t.stride(-1) >= rows);
  return (columns <= 1 || t.stride(-1) == 1) && (rows <= 1 || t.stride(-2) >= columns);
}

// The stride between rows (row-major) or columns (column-major); any valid value where there is only one.
int64_t leading_dimension(const at::Tensor& t, bool column_major) {
  if (column_major) return t.size(-1) > 1 ? t.stride(-1) : t.size(-2);
  return t.size(-2) > 1 ? t.stride(-2) : t.size(-1);
}

// 0 for a 2-D operand: every batch reads the same matrix.
int64_t batch_stride(const at::Tensor& t) { return t.dim() == 3 && t.size(0) > 1 ? t.stride(0) : 0; }

// Runs the first variant that reads a and b as stored and can implement the problem; false if none could.
// `epilogue` carries D, C, alpha and beta; this fills in the operands.
bool run_first_fitting(const std::vector<std::string>& variants, const std::string& arch, const at::Tensor& a,
                       const at::Tensor& b, cutlass_ext_gemm_args epilogue, std::vector<std::string>& unloaded) {
  for (const auto& name : variants) {
    const Variant* found = find_in(registry, arch, name);
    if (found == nullptr) {
      if (std::find(unloaded.begin(), unloaded.end(), name) == unloaded.end()) unloaded.push_back(name);
      continue;
    }
    const Variant& variant = *found;
    bool a_columns = variant.layouts & CUTLASS_EXT_A_COLUMN_MAJOR,
         b_columns = variant.layouts & CUTLASS_EXT_B_COLUMN_MAJOR;
    if (!readable(a, a_columns) || !readable(b, b_columns)) continue;
    cutlass_ext_gemm_args args = epilogue;
    args.a = a.data_ptr();
    args.lda = leading_dimension(a, a_columns);
    args.batch_stride_a = batch_stride(a);
    args.b = b.data_ptr();
    args.ldb = leading_dimension(b, b_columns);
    args.batch_stride_b = batch_stride(b);
    if (run_batches(variant, args, name, a.options())) return true;
  }
  return false;
}

// The epilogue's source c broadcast to d's shape, row-major with unit column stride (a bias (n) reads with row
// stride 0); an undefined tensor where there is none to read.
at::Tensor epilogue_source(const c10::optional<at::Tensor>& c, double beta, const at::Tensor& d) {
  if (!c || beta == 0.0) return at::Tensor();
  TORCH_CHECK_TYPE(c->scalar_type() == at::kFloat, "c must be float32; got ", c->scalar_type());
  TORCH_CHECK_VALUE(c->device() == d.device(), "c must be on ", d.device().str(), "; got ", c->device().str());
  at::Tensor source = c->expand(d.sizes());
  if (d.size(-1) <= 1 || source.stride(-1) == 1) return source;
  source = c->contiguous().expand(d.sizes());  // a strided bias: a copy of n values, not of the broadcast
  return source.stride(-1) == 1 ? source : source.contiguous();
}

// The checks of gemm's operands (float32 CUDA, 2-D or 3-D, one batch size); returns the batch size.
int64_t check_operands(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "a and b must be CUDA tensors");
  TORCH_CHECK(a.device() == b.device(), "a and b must be on one device; got ", a.device().str(), " and ",
              b.device().str());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "a and b must be float32; got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3), "a and b must be 2-D or 3-D (batched)");
  TORCH_CHECK(a.size(-1) == b.size(-2), "a is ", shape_string(a.sizes()), " and b is ", shape_string(b.sizes()),
              ": a.shape[-1] must equal b.shape[-2]");
  int64_t batch = a.dim() == 3 ? a.size(0) : (b.dim() == 3 ? b.size(0) : 1);
  TORCH_CHECK((a.dim() == 2 || a.size(0) == batch) && (b.dim() == 2 || b.size(0) == batch), "a is ",
              shape_string(a.sizes()), " and b is ", shape_string(b.sizes()), ": batch sizes must match");
  return batch;
}

at::Tensor gemm_cuda(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& c, double alpha,
                     double beta, std::vector<std::string> variants) {
  const int64_t batch = check_operands(a, b);
  c10::cuda::CUDAGuard device_guard(a.device());
  const int64_t m = a.size(-2), n = b.size(-1), k = a.size(-1);
  bool batched = a.dim() == 3 || b.dim() == 3;
  at::Tensor d = batched ? at::empty({batch, m, n}, a.options()) : at::empty({m, n}, a.options());
  const at::Tensor source = epilogue_source(c, beta, d);
  if (m == 0 || n == 0 || batch == 0) return d;
  if (k == 0) return source.defined() ? at::mul_out(d, source, beta) : d.zero_();
  cutlass_ext_gemm_args epilogue{};
  epilogue.m = m;
  epilogue.n = n;
  epilogue.k = k;
  epilogue.batch = batch;
  epilogue.d = d.data_ptr();
  epilogue.ldd = n;
  epilogue.batch_stride_d = m * n;
  if (source.defined()) {
    epilogue.c = source.data_ptr();
    epilogue.ldc = m > 1 ? source.stride(-2) : 0;
    epilogue.batch_stride_c = batched && batch > 1 ? source.stride(0) : 0;
  }
  epilogue.alpha = float(alpha);
  epilogue.beta = source.defined() ? float(beta) : 0.0f;
  // Views the variants read as stored run without a copy; anything else is made contiguous (row-major).
  const std::string arch = device_arch(a.get_device());
  std::vector<std::string> unloaded;
  if (run_first_fitting(variants, arch, a, b, epilogue, unloaded)) return d;
  if (run_first_fitting(variants, arch, a.contiguous(), b.contiguous(), epilogue, unloaded)) return d;
  check_unloaded(unloaded);
  TORCH_CHECK(false, "none of the kernel variants ", c10::Join(", ", variants), " can run a ", shape_string(a.sizes()),
              " x ", shape_string(b.sizes()), " product with strides ", shape_string(a.strides()), " and ",
              shape_string(b.strides()));
}

// The persistent kernels' grid size; asked of the runtime once per device.
int sm_count(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = counts.find(device);
  if (found != counts.end()) return found->second;
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return counts[device] = count;
}

// The checks of gemm_fp8's arguments that can change from call to call with one signature: devices, strides,
// alignment, scale and bias shapes. cutlass_ext.fp8 checks dtypes and shapes once per signature; doing these
// here saves its eager callers ~15 µs of Python attribute reads per call. Each names the argument, as a
// ValueError (TORCH_CHECK_VALUE) or TypeError (TORCH_CHECK_TYPE) in Python.
constexpr int64_t kTmaBytes = 16;  // TMA moves rows whose start and stride are multiples of 16 bytes

void check_fp8_operand(const at::Tensor& t, const char* name, const at::Device& device) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kFloat8_e5m2, name,
                   " must be float8_e4m3fn or float8_e5m2; got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == device, name, " must be on ", device.str(), " with a; got ", t.device().str());
  TORCH_CHECK_VALUE(t.dim() == 2, name, " must be 2-D; got shape ", shape_string(t.sizes()));
  const int64_t rows = t.size(0), k = t.size(1);
  TORCH_CHECK_VALUE(k <= 1 || t.stride(1) == 1, name, " must have unit stride along K (row-major ",
                    shape_string(t.sizes()), "); got strides ", shape_string(t.strides()), ": pass ", name,
                    ".contiguous()");
  TORCH_CHECK_VALUE(rows <= 1 || t.stride(0) % kTmaBytes == 0, name, "'s row stride ", std::to_string(t.stride(0)),
                    " must be a multiple of 16 elements");
  TORCH_CHECK_VALUE(rows == 0 || k == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % kTmaBytes == 0, name,
                    " must start on a 16-byte boundary (a view with an offset?): pass a copy");
}

// One float32 value (per tensor) or `length` (per row: (length, 1) or (length,), and (1, length) for scale_b),
// contiguous.
at::Tensor checked_scale(const at::Tensor& scale, const char* name, int64_t length, bool row_vector_too,
                         const at::Device& device) {
  TORCH_CHECK_TYPE(scale.scalar_type() == at::kFloat, name, " must be float32; got ", scale.scalar_type());
  TORCH_CHECK_VALUE(scale.device() == device, name, " must be on ", device.str(), " (or a CPU scalar); got ",
                    scale.device().str());
  const auto shape = scale.sizes();
  const bool per_tensor = scale.numel() == 1 && scale.dim() <= 2;
  const bool per_row = (shape.size() == 2 && shape[0] == length && shape[1] == 1) ||
                       (shape.size() == 1 && shape[0] == length) ||
                       (row_vector_too && shape.size() == 2 && shape[0] == 1 && shape[1] == length);
  TORCH_CHECK_VALUE(per_tensor || per_row, name, " has shape ", shape_string(shape),
                    ": expected one value (per tensor) or ", std::to_string(length), " values (per row), shaped (",
                    std::to_string(length), ", 1) or (", std::to_string(length), ",)",
                    row_vector_too ? " or (1, " + std::to_string(length) + ")" : "");
  return scale.contiguous();  // read in order: any contiguous shape of the values will do
}

// (n,) or (1, n) of the output dtype, as a contiguous vector on a 16-byte boundary (the epilogue reads it in
// 16-byte vectors).
at::Tensor checked_bias(const at::Tensor& bias, int64_t n, at::ScalarType out_dtype, const at::Device& device) {
  TORCH_CHECK_TYPE(bias.scalar_type() == out_dtype, "bias must have out_dtype ", out_dtype, "; got ",
                   bias.scalar_type());
  TORCH_CHECK_VALUE(bias.device() == device, "bias must be on ", device.str(), "; got ", bias.device().str());
  TORCH_CHECK_VALUE(
      (bias.dim() == 1 && bias.size(0) == n) || (bias.dim() == 2 && bias.size(0) == 1 && bias.size(1) == n),
      "bias must have shape (", std::to_string(n), ",), one value per output column; got ", shape_string(bias.sizes()));
  at::Tensor vector = bias.reshape({n}).contiguous();
  return reinterpret_cast<uintptr_t>(vector.data_ptr()) % kTmaBytes ? vector.clone() : vector;
}

// D (m, n) = scale_a · scale_b · a (m, k) · b (n, k)ᵀ + bias for FP8 a and b with unit stride along K. A scale
// with one element is per tensor; with m (scale_a) or n (scale_b) elements, per row of a or b.
at::Tensor gemm_fp8_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                         std::vector<std::string> variants) {
  TORCH_CHECK_VALUE(a.is_cuda(), "a must be a CUDA tensor; got device ", a.device().str());
  const at::Device device = a.device();
  check_fp8_operand(a, "a", device);
  check_fp8_operand(b, "b", device);
  // fp8._plan says this at length; here it guards direct torch.ops callers
  TORCH_CHECK_VALUE(b.size(1) == a.size(1), "a (M, K) and b (N, K) must share K; got ", shape_string(a.sizes()),
                    " and ", shape_string(b.sizes()));
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  const at::Tensor scales_a = checked_scale(scale_a, "scale_a", m, false, device);
  const at::Tensor scales_b = checked_scale(scale_b, "scale_b", n, true, device);
  const at::Tensor bias_vector = bias ? checked_bias(*bias, n, out_dtype, device) : at::Tensor();
  c10::cuda::CUDAGuard device_guard(device);
  at::Tensor d = at::empty({m, n}, a.options().dtype(out_dtype));
  if (m == 0 || n == 0) return d;
  if (k == 0) {
    d.zero_();
    return bias ? d.add_(bias_vector) : d;
  }
  const int device_index = device.index();
  cutlass_ext_fp8_args args{};
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a.data_ptr();
  args.lda = m > 1 ? a.stride(0) : k;
  args.b = b.data_ptr();
  args.ldb = n > 1 ? b.stride(0) : k;
  args.d = d.data_ptr();
  args.ldd = n;
  args.scale_a = scales_a.data_ptr<float>();
  args.scale_a_rowwise = scales_a.numel() != 1;
  args.scale_b = scales_b.data_ptr<float>();
  args.scale_b_rowwise = scales_b.numel() != 1;
  args.bias = bias ? bias_vector.data_ptr() : nullptr;
  args.device = device_index;
  args.sm_count = sm_count(device_index);
  const std::string arch = device_arch(device_index);
  std::vector<std::string> unloaded;
  for (const auto& name : variants) {
    const Fp8Variant* variant = find_in(fp8_registry, arch, name);
    if (variant == nullptr) {
      unloaded.push_back(name);
    } else if (run_if_implementable(*variant, args, name, a.options())) {
      return d;
    }
  }
  check_unloaded(unloaded);
  TORCH_CHECK(false, "none of the FP8 kernel variants ", c10::Join(", ", variants), " can run a ",
              shape_string(a.sizes()), " x ", shape_string(b.sizes()), "^T product with row strides ",
              std::to_string(args.lda), " and ", std::to_string(args.ldb),
              " (TMA needs 16-byte aligned rows: k a multiple of 16, n of 16 / the output's element size)");
}

// The pass launcher `member` of the libraries loaded for `device`'s arch.
template <typename Launcher>
Launcher loaded(Launcher PassLaunchers::*member, int device) {
  const std::string arch = device_arch(device);
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto passes = pass_launchers.find(arch);
  Launcher launcher = passes == pass_launchers.end() ? nullptr : passes->second.*member;
  TORCH_CHECK(launcher != nullptr, "no kernel library is loaded for sm_", arch, " yet; cutlass_ext.gemm loads them");
  return launcher;
}

void check_launch(int status, const char* what) {
  TORCH_CHECK(status == 0, what, " failed: ", cudaGetErrorString(cudaError_t(status)));
}

// x (float32, 2-D or 3-D, any strides) · 2^shift, split into FP16 hi and lo·2^11 packed per 32-bit word, written
// row-major; shift (int32) broadcasts against x.
at::Tensor halfhalf_pack_cuda(const at::Tensor& x, const at::Tensor& shift) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && (x.dim() == 2 || x.dim() == 3),
              "x must be a 2-D or 3-D float32 CUDA tensor; got ", x.scalar_type(), " ", shape_string(x.sizes()), " on ",
              x.device().str());
  TORCH_CHECK(shift.device() == x.device() && shift.scalar_type() == at::kInt && shift.dim() == x.dim(),
              "shift must be an int32 tensor on x's device with x's number of dimensions; got ", shift.scalar_type(),
              " ", shape_string(shift.sizes()), " on ", shift.device().str());
  c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  const at::Tensor source = x.dim() == 3 ? x : x.unsqueeze(0);
  const at::Tensor shifts = (shift.dim() == 3 ? shift : shift.unsqueeze(0)).expand(source.sizes());
  cutlass_ext_pack_args args{source.data_ptr<float>(),
                             source.size(0),
                             source.size(1),
                             source.size(2),
                             source.stride(0),
                             source.stride(1),
                             source.stride(2),
                             shifts.data_ptr<int32_t>(),
                             shifts.stride(0),
                             shifts.stride(1),
                             shifts.stride(2),
                             out.data_ptr()};
  check_launch(loaded(&PassLaunchers::halfhalf_pack, x.get_device())(&args, c10::cuda::getCurrentCUDAStream().stream()),
               "halfhalf_pack");
  return out;
}

// Launches the unscaling pass of `args` (product, out, sizes and shifts filled in) with gemm's epilogue:
// alpha · unscaled + beta · source, source (undefined: none) broadcast to (batch, m, n), on `device`.
void unscale(cutlass_ext_unscale_args& args, const at::Tensor& source, float alpha, float beta, int device) {
  if (source.defined()) {
    at::Tensor sources = source.expand({args.batch, args.m, args.n});
    args.source = sources.data_ptr<float>();
    args.source_batch_stride = sources.stride(0);
    args.source_row_stride = sources.stride(1);
    args.source_column_stride = sources.stride(2);
  }
  args.alpha = alpha;
  args.beta = beta;
  check_launch(loaded(&PassLaunchers::halfhalf_unscale, device)(&args, c10::cuda::getCurrentCUDAStream().stream()),
               "halfhalf_unscale");
}

// c · 2^-(row_shift + column_shift) for c (m, n) or (batch, m, n); row_shift broadcasts as (…, m, 1) and
// column_shift as (…, 1, n).
at::Tensor halfhalf_unscale_cuda(const at::Tensor& c, const at::Tensor& row_shift, const at::Tensor& column_shift) {
  TORCH_CHECK(c.is_cuda() && c.scalar_type() == at::kFloat && (c.dim() == 2 || c.dim() == 3),
              "c must be a 2-D or 3-D float32 CUDA tensor; got ", c.scalar_type(), " ", shape_string(c.sizes()));
  for (const at::Tensor* shift : {&row_shift, &column_shift}) {
    TORCH_CHECK(shift->device() == c.device() && shift->scalar_type() == at::kInt && shift->dim() >= 2 &&
                    shift->dim() <= c.dim(),
                "shifts must be 2-D or 3-D int32 tensors on c's device, at most as many dimensions as c; got ",
                shift->scalar_type(), " ", shape_string(shift->sizes()));
  }
  c10::cuda::CUDAGuard device_guard(c.device());
  at::Tensor product = c.contiguous();
  at::Tensor out = at::empty_like(product);
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1);
  at::Tensor rows = row_shift.expand({batch, m, 1}), columns = column_shift.expand({batch, 1, n});
  cutlass_ext_unscale_args args{};
  args.c = product.data_ptr<float>();
  args.out = out.data_ptr<float>();
  args.batch = batch;
  args.m = m;
  args.n = n;
  args.row_shift = rows.data_ptr<int32_t>();
  args.row_shift_batch_stride = rows.stride(0);
  args.row_shift_stride = rows.stride(1);
  args.column_shift = columns.data_ptr<int32_t>();
  args.column_shift_batch_stride = columns.stride(0);
  args.column_shift_stride = columns.stride(2);
  unscale(args, at::Tensor(), 1.0f, 0.0f, c.get_device());
  return out;
}

// halfhalf's range shifts of x (float32, 2-D or 3-D, any strides): per row (dim -1, reduced along the columns:
// (…, rows, 1)) or per column (dim -2: (…, 1, columns)), int32; what cutlass_ext.scaling.fp16_range_shift computes
// with torch ops, in one launch.
at::Tensor range_shift_cuda(const at::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && (x.dim() == 2 || x.dim() == 3),
              "x must be a 2-D or 3-D float32 CUDA tensor; got ", x.scalar_type(), " ", shape_string(x.sizes()));
  TORCH_CHECK(dim == -1 || dim == -2, "dim must be -1 (one shift per row) or -2 (per column); got ", dim);
  c10::cuda::CUDAGuard device_guard(x.device());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[shape.size() + dim] = 1;
  at::Tensor out = at::empty(shape, x.options().dtype(at::kInt));
  const at::Tensor source = x.dim() == 3 ? x : x.unsqueeze(0);
  cutlass_ext_range_shift_args args{source.data_ptr<float>(),
                                    source.size(0),
                                    source.size(1),
                                    source.size(2),
                                    source.stride(0),
                                    source.stride(1),
                                    source.stride(2),
                                    dim == -2,
                                    out.data_ptr<int32_t>()};
  check_launch(loaded(&PassLaunchers::range_shift, x.get_device())(&args, c10::cuda::getCurrentCUDAStream().stream()),
               "range_shift");
  return out;
}

// The operand pass's view of x (2-D or 3-D, any strides), its shifts per row or per column.
cutlass_ext_operand_pass operand_pass(const at::Tensor& x, bool per_column, void* shift, void* packed) {
  cutlass_ext_operand_pass pass{};
  pass.x = x.data_ptr<float>();
  pass.batch = x.dim() == 3 ? x.size(0) : 1;
  pass.rows = x.size(-2);
  pass.columns = x.size(-1);
  pass.x_stride_batch = x.dim() == 3 ? x.stride(0) : 0;
  pass.x_stride_row = x.stride(-2);
  pass.x_stride_column = x.stride(-1);
  pass.per_column = per_column;
  pass.shift = static_cast<int32_t*>(shift);
  pass.packed = packed;
  return pass;
}

constexpr int64_t aligned16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// halfhalf on the sm80 kernels in one call: the fused operand pass (range shifts, packed operands, into one
// workspace), then the product with the unscaling and gemm's epilogue in its epilogue (two launches), or where that
// kernel declines (serial split-K) the product and the unscaling pass in place (three).
at::Tensor halfhalf_gemm_cuda(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& c,
                              double alpha, double beta, std::vector<std::string> variants) {
  if (a.numel() == 0 || b.numel() == 0) return gemm_cuda(a, b, c, alpha, beta, std::move(variants));  // no kernel
  const int64_t batch = check_operands(a, b);
  c10::cuda::CUDAGuard device_guard(a.device());
  const int64_t m = a.size(-2), n = b.size(-1), k = a.size(-1);
  const int64_t batch_a = a.dim() == 3 ? batch : 1, batch_b = b.dim() == 3 ? batch : 1;
  const int64_t packed_a = aligned16(batch_a * m * k * 4), packed_b = aligned16(batch_b * k * n * 4);
  const int64_t shifts_a = aligned16(batch_a * m * 4);
  at::Tensor workspace = at::empty({packed_a + packed_b + shifts_a + batch_b * n * 4}, a.options().dtype(at::kByte));
  char* base = static_cast<char*>(workspace.data_ptr());
  int32_t* row_shift = reinterpret_cast<int32_t*>(base + packed_a + packed_b);
  int32_t* column_shift = reinterpret_cast<int32_t*>(base + packed_a + packed_b + shifts_a);
  cutlass_ext_halfhalf_operands_args operands{operand_pass(a, false, row_shift, base),
                                              operand_pass(b, true, column_shift, base + packed_a)};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  check_launch(loaded(&PassLaunchers::halfhalf_operands, a.get_device())(&operands, stream), "halfhalf_operands");

  const bool batched = a.dim() == 3 || b.dim() == 3;
  at::Tensor d = batched ? at::empty({batch, m, n}, a.options()) : at::empty({m, n}, a.options());
  cutlass_ext_gemm_args args{};
  args.m = m;
  args.n = n;
  args.k = k;
  args.batch = batch;
  args.a = base;
  args.lda = k;
  args.batch_stride_a = batch_a > 1 ? m * k : 0;
  args.b = base + packed_a;
  args.ldb = n;
  args.batch_stride_b = batch_b > 1 ? k * n : 0;
  args.d = d.data_ptr();
  args.ldd = n;
  args.batch_stride_d = m * n;
  args.alpha = 1.0f;
  const at::Tensor source = epilogue_source(c, beta, d);
  // The packed kernel with the unscaling in its epilogue where it takes the problem (two launches in all), else
  // the kernel and the unscaling pass.
  cutlass_ext_unscaled_gemm_args fused{args, row_shift, batch_a > 1 ? m : 0, column_shift, batch_b > 1 ? n : 0};
  fused.gemm.alpha = float(alpha);
  if (source.defined()) {
    fused.gemm.c = source.data_ptr();
    fused.gemm.ldc = m > 1 ? source.stride(-2) : 0;
    fused.gemm.batch_stride_c = batched && batch > 1 ? source.stride(0) : 0;
    fused.gemm.beta = float(beta);
  }
  const std::string arch = device_arch(a.get_device());
  std::vector<std::string> unloaded;
  bool ran = false;
  for (const auto& name : variants) {  // the packed operands are row-major
    const Variant* variant = find_in(registry, arch, name);
    if (variant == nullptr) {
      unloaded.push_back(name);
      continue;
    }
    if (variant->layouts != 0) continue;
    if (run_batches(variant->unscaled, fused, name, a.options())) return d;
    if (run_batches(*variant, args, name, a.options())) {
      ran = true;
      break;
    }
  }
  if (!ran) {
    check_unloaded(unloaded);
    TORCH_CHECK(false, "none of the kernel variants ", c10::Join(", ", variants), " can run packed halfhalf operands ",
                shape_string(a.sizes()), " x ", shape_string(b.sizes()));
  }

  cutlass_ext_unscale_args unscaling{};
  unscaling.c = d.data_ptr<float>();
  unscaling.out = d.data_ptr<float>();
  unscaling.batch = batch;
  unscaling.m = m;
  unscaling.n = n;
  unscaling.row_shift = row_shift;
  unscaling.row_shift_batch_stride = batch_a > 1 ? m : 0;
  unscaling.row_shift_stride = 1;
  unscaling.column_shift = column_shift;
  unscaling.column_shift_batch_stride = batch_b > 1 ? n : 0;
  unscaling.column_shift_stride = 1;
  unscale(unscaling, source, float(alpha), source.defined() ? float(beta) : 0.0f, a.get_device());
  return d;
}

// x (float32, 2-D or 3-D, any strides) · 2^shift (shift optional, int32, broadcast against x) split into hi and
// lo planes of `format` (launcher_abi.h), (…, rows, ld) row-major: columns padded with zeros to 16 bytes, as TMA
// wants rows, so that the planes' product over the padded K is the product over K.
std::tuple<at::Tensor, at::Tensor> split_planes_cuda(const at::Tensor& x, const c10::optional<at::Tensor>& shift,
                                                     int64_t format) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && (x.dim() == 2 || x.dim() == 3),
              "x must be a 2-D or 3-D float32 CUDA tensor; got ", x.scalar_type(), " ", shape_string(x.sizes()), " on ",
              x.device().str());
  TORCH_CHECK(format == CUTLASS_EXT_PLANES_TF32 || format == CUTLASS_EXT_PLANES_HALF, "unknown plane format ",
              std::to_string(format));
  TORCH_CHECK(!shift || (shift->device() == x.device() && shift->scalar_type() == at::kInt && shift->dim() == x.dim()),
              "shift must be an int32 tensor on x's device with x's number of dimensions");
  c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor source = x.dim() == 3 ? x : x.unsqueeze(0);
  const int64_t batch = source.size(0), rows = source.size(1), columns = source.size(2);
  const at::ScalarType type = format == CUTLASS_EXT_PLANES_HALF ? at::kHalf : at::kFloat;
  const int64_t per_16_bytes = 16 / at::elementSize(type);
  const int64_t ld = std::max<int64_t>(per_16_bytes, (columns + per_16_bytes - 1) / per_16_bytes * per_16_bytes);
  at::Tensor hi = at::empty({batch, rows, ld}, x.options().dtype(type));
  at::Tensor lo = at::empty({batch, rows, ld}, x.options().dtype(type));
  at::Tensor shifts;
  cutlass_ext_planes_args args{};
  if (shift) {
    shifts = (shift->dim() == 3 ? *shift : shift->unsqueeze(0)).expand(source.sizes());
    args.shift = shifts.data_ptr<int32_t>();
    args.shift_stride_batch = shifts.stride(0);
    args.shift_stride_row = shifts.stride(1);
    args.shift_stride_column = shifts.stride(2);
  }
  args.x = source.data_ptr<float>();
  args.batch = batch;
  args.rows = rows;
  args.columns = columns;
  args.x_stride_batch = source.stride(0);
  args.x_stride_row = source.stride(1);
  args.x_stride_column = source.stride(2);
  args.hi = hi.data_ptr();
  args.lo = lo.data_ptr();
  args.ld = ld;
  args.format = int32_t(format);
  check_launch(loaded(&PassLaunchers::split_planes, x.get_device())(&args, c10::cuda::getCurrentCUDAStream().stream()),
               "split_planes");
  if (x.dim() == 2) return {hi.squeeze(0), lo.squeeze(0)};
  return {hi, lo};
}

int64_t batch_stride_or_zero(const at::Tensor& t) { return t.dim() == 3 ? t.stride(0) : 0; }

// C (…, m, n) float32 from the planes of A (…, m, k) and Bᵀ (…, n, k) (unit stride along k), unscaled by the
// optional halfhalf shifts row_shift (…, m, 1) and column_shift (…, 1, n).
at::Tensor gemm_split_cuda(const at::Tensor& a_hi, const at::Tensor& a_lo, const at::Tensor& b_hi,
                           const at::Tensor& b_lo, const c10::optional<at::Tensor>& row_shift,
                           const c10::optional<at::Tensor>& column_shift, std::vector<std::string> variants,
                           const c10::optional<at::Tensor>& bias, double alpha) {
  for (const at::Tensor* t : {&a_lo, &b_hi, &b_lo}) {
    TORCH_CHECK(t->device() == a_hi.device() && t->scalar_type() == a_hi.scalar_type(),
                "the planes must share one CUDA device and dtype");
  }
  TORCH_CHECK(a_hi.is_cuda() && a_hi.sizes() == a_lo.sizes() && a_hi.strides() == a_lo.strides() &&
                  b_hi.sizes() == b_lo.sizes() && b_hi.strides() == b_lo.strides(),
              "hi and lo planes of an operand must have one shape and strides");
  TORCH_CHECK((a_hi.dim() == 2 || a_hi.dim() == 3) && a_hi.dim() == b_hi.dim() && a_hi.size(-1) == b_hi.size(-1) &&
                  a_hi.stride(-1) == 1 && b_hi.stride(-1) == 1,
              "planes must be a (…, m, k) and b (…, n, k), both with unit stride along k");
  const bool batched = a_hi.dim() == 3;
  const int64_t batch = batched ? a_hi.size(0) : 1, m = a_hi.size(-2), n = b_hi.size(-2), k = a_hi.size(-1);
  TORCH_CHECK(!batched || b_hi.size(0) == batch, "a and b planes must have one batch size");
  c10::cuda::CUDAGuard device_guard(a_hi.device());
  at::Tensor d = batched ? at::empty({batch, m, n}, a_hi.options().dtype(at::kFloat))
                         : at::empty({m, n}, a_hi.options().dtype(at::kFloat));
  if (m == 0 || n == 0 || batch == 0) return d;
  if (k == 0) return d.zero_();
  cutlass_ext_split_gemm_args args{};
  args.m = m;
  args.n = n;
  args.k = k;
  args.batch = batch;
  args.a_hi = a_hi.data_ptr();
  args.a_lo = a_lo.data_ptr();
  args.lda = m > 1 ? a_hi.stride(-2) : k;
  args.batch_stride_a = batch_stride_or_zero(a_hi);
  args.b_hi = b_hi.data_ptr();
  args.b_lo = b_lo.data_ptr();
  args.ldb = n > 1 ? b_hi.stride(-2) : k;
  args.batch_stride_b = batch_stride_or_zero(b_hi);
  args.d = d.data_ptr<float>();
  args.ldd = n;
  args.batch_stride_d = batched ? m * n : 0;
  at::Tensor rows, columns;
  if (row_shift && column_shift) {
    rows = row_shift->contiguous();
    columns = column_shift->contiguous();
    TORCH_CHECK(rows.scalar_type() == at::kInt && columns.scalar_type() == at::kInt && rows.numel() == batch * m &&
                    columns.numel() == batch * n,
                "row_shift must hold (…, m, 1) and column_shift (…, 1, n) int32 values");
    args.row_shift = rows.data_ptr<int32_t>();
    args.row_shift_batch_stride = batched ? m : 0;
    args.column_shift = columns.data_ptr<int32_t>();
    args.column_shift_batch_stride = batched ? n : 0;
  }
  at::Tensor bias_vector;
  if (bias) {
    TORCH_CHECK_VALUE(bias->scalar_type() == at::kFloat && bias->device() == a_hi.device() && bias->dim() == 1 &&
                          bias->size(0) == n,
                      "bias must be a float32 vector of n = ", std::to_string(n), " values on the planes' device");
    // the kernels read the bias 16 bytes at a time
    const bool aligned = bias->is_contiguous() && reinterpret_cast<uintptr_t>(bias->data_ptr()) % 16 == 0;
    bias_vector = aligned ? *bias : bias->clone(at::MemoryFormat::Contiguous);
    args.bias = bias_vector.data_ptr<float>();
  }
  args.alpha = float(alpha);
  args.device = a_hi.get_device();
  args.sm_count = sm_count(args.device);
  const std::string arch = device_arch(args.device);
  std::vector<std::string> unloaded;
  for (const auto& name : variants) {
    const SplitVariant* variant = find_in(split_registry, arch, name);
    if (variant == nullptr) {
      unloaded.push_back(name);
    } else if (run_if_implementable(*variant, args, name, a_hi.options())) {
      return d;
    }
  }
  check_unloaded(unloaded);
  TORCH_CHECK(false, "none of the Hopper corrected kernel variants ", c10::Join(", ", variants), " can run planes ",
              shape_string(a_hi.sizes()), " x ", shape_string(b_hi.sizes()),
              " (TMA needs 16-byte aligned rows and n a multiple of 4)");
}

}  // namespace cutlass_ext_binding
