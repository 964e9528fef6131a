// The C names every kernel library exports (launcher_abi.h), written once for the three families.
#pragma once

#include "cutlass/cutlass.h"

#include "launcher_abi.h"

// A variant's launchers `<NAME><FAMILY>_can_implement`, `_workspace_size` and `_run` over the family's argument
// struct ARGS; FAMILY is empty (CUTLASS 2.x), _fp8 or _split. The rest names the variant's launcher class.
#define CUTLASS_EXT_EXPORT_LAUNCHERS(NAME, FAMILY, ARGS, ...)                                           \
  extern "C" int NAME##FAMILY##_can_implement(const ARGS* args) { return __VA_ARGS__::can_implement(args); } \
  extern "C" size_t NAME##FAMILY##_workspace_size(const ARGS* args) {                                   \
    return __VA_ARGS__::workspace_size(args);                                                           \
  }                                                                                                     \
  extern "C" int NAME##FAMILY##_run(const ARGS* args, void* workspace, void* stream) {                  \
    return __VA_ARGS__::run(args, workspace, stream);                                                   \
  }

// Once per library: the launcher ABI it speaks and the spelling of its status codes.
#define CUTLASS_EXT_EXPORT_ABI()                                                                        \
  extern "C" int cutlass_ext_abi_version() { return CUTLASS_EXT_ABI_VERSION; }                          \
  extern "C" const char* cutlass_ext_status_string(int status) {                                        \
    return cutlass::cutlassGetStatusString(cutlass::Status(status));                                    \
  }
