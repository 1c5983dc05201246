// ferry/python/distributed/torch_api.h: what differs between the c10d API of
// torch 1.13 and that of torch 2.x, in one place, so that one
// implementation (process_group.h) serves both.
//
//                      torch 1.13                 torch >= 2.0
//   the class ferry    c10d::ProcessGroup         c10d::Backend, which a
//   derives from                                  c10d::ProcessGroup holds per
//                                                 device type (ferry: CPU)
//   what Python hands  that ProcessGroup, ferry's the ProcessGroup around it
//   to ferry's calls   own                        (backend_of() finds ferry's)
//   registration       register_backend(name, f)  register_backend(name, f,
//                                                 devices=["cpu"])
//                                                 (python/ferry/distributed.py)
//   coalesced tensor   none                       allgather_into_tensor_ and
//   collectives                                   reduce_scatter_tensor_
//                                                 coalesced (FERRY_OVERRIDE_2)
//   a collective's     getFuture()                also (torch >= 2.6)
//   outcome                                       getFutureResult(): a
//                                                 c10d::WorkResult, never an
//                                                 error (FERRY_OVERRIDE_2_6)
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <cstdint>

namespace ferry::distributed::torch_api {

#if TORCH_VERSION_MAJOR >= 2
/// The class a torch.distributed backend derives from.
using base = c10d::Backend;
/// True where register_backend takes `devices` (the backend API).
inline constexpr bool backend_api = true;
/// The backend serving CPU tensors in `group`: where ferry's is, if any.
inline base* backend_of(c10d::ProcessGroup& group) {
  return group.getBackend(c10::DeviceType::CPU).get();
}
/// `override` on the virtuals torch 2.x added; nothing on 1.13, where they
/// are plain members no one calls.
#define FERRY_OVERRIDE_2 override
#else
using base = c10d::ProcessGroup;
inline constexpr bool backend_api = false;
inline base* backend_of(c10d::ProcessGroup& group) { return &group; }
#define FERRY_OVERRIDE_2
#endif

/// What a collective's getFutureResult() future holds: c10d::WorkResult's
/// values, as torch >= 2.6 declares them (and where older releases have
/// no such type).
enum class work_result : std::int64_t { success = 0, timeout = 1, comm_error = 2 };
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
static_assert(static_cast<int>(c10d::WorkResult::SUCCESS) == static_cast<int>(work_result::success) &&
              static_cast<int>(c10d::WorkResult::TIMEOUT) == static_cast<int>(work_result::timeout) &&
              static_cast<int>(c10d::WorkResult::COMM_ERROR) == static_cast<int>(work_result::comm_error));
#define FERRY_OVERRIDE_2_6 override
#else
#define FERRY_OVERRIDE_2_6
#endif

}  // namespace ferry::distributed::torch_api
