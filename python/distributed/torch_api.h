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
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

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

}  // namespace ferry::distributed::torch_api
