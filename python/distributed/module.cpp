// ferry._distributed: the pybind11 half of ferry.distributed
// (python/ferry/distributed.py registers the backend and defines the DDP
// hooks over it). Types come from torch's own bindings (ProcessGroup, Work,
// Store), shared through pybind11's registry, so torch/python.h's casters
// and intrusive_ptr holders apply.
#include <torch/python.h>

#include <pybind11/chrono.h>

#include "ferry/codec/crc32c.h"
#include "ferry/wire/bulk.h"
#include "process_group.h"

namespace py = pybind11;
using ferry::distributed::process_group;

namespace {

process_group& ferry_group(c10d::ProcessGroup& group) {
  auto* ours = dynamic_cast<process_group*>(&group);
  TORCH_CHECK(ours != nullptr, "ferry: the process group's backend is ", group.getBackendName(),
              ", not ferry");
  return *ours;
}

ferry::comm::compression compression_named(const std::string& name) {
  const auto c = ferry::comm::compression_from_name(name);
  TORCH_CHECK(c.has_value(), "ferry: compression '", name, "' is not one of none, bf16, f16");
  return *c;
}

}  // namespace

PYBIND11_MODULE(_distributed, m) {
  m.doc() = "The C++ half of ferry.distributed: the process group over ferry's ring.";
  py::register_exception<ferry::comm::comm_error>(m, "CommError", PyExc_RuntimeError);

  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return process_group::create(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The creator torch.distributed calls for backend 'ferry': forms the ring (process_group.h).");

  m.def(
      "check_environment",
      [](int rank, int size) { (void)process_group::config_for(rank, size); },
      py::arg("rank"), py::arg("world_size"),
      "Raises the error of ferry's variables (FERRY_SECRET, FERRY_AUTH, ...) before any rendezvous.");

  m.def(
      "allreduce_compressed",
      [](c10d::ProcessGroup& group, const at::Tensor& tensor, const std::string& compression, std::int64_t key) {
        return ferry_group(group).allreduce_compressed(tensor, compression_named(compression), key);
      },
      py::arg("group"), py::arg("tensor"), py::arg("compression"), py::arg("key"),
      py::call_guard<py::gil_scoped_release>(),
      "Averages an f32 tensor over the group, sent as bf16 or f16 with error feedback kept per key; "
      "returns a Work.");

  m.def("drain", &process_group::drain_all, py::call_guard<py::gil_scoped_release>(),
        "Waits until every ferry group's queued collectives have run (ferry.distributed calls it at exit).");

  m.def(
      "crc32c",
      [](const at::Tensor& tensor) {
        TORCH_CHECK(tensor.device().is_cpu() && tensor.layout() == at::kStrided, "ferry: crc32c takes a dense CPU tensor");
        const at::Tensor t = tensor.contiguous();
        const std::span<const std::byte> bytes(static_cast<const std::byte*>(t.data_ptr()), t.nbytes());
        const auto width = static_cast<std::size_t>(t.element_size());
        if (ferry::wire::byte_order::native == ferry::wire::byte_order::little || width == 1) {
          return ferry::codec::crc32c(bytes);
        }
        std::vector<std::byte> little(bytes.size());
        ferry::wire::convert(bytes, ferry::wire::byte_order::native, little, ferry::wire::byte_order::little, width);
        return ferry::codec::crc32c(little);
      },
      py::arg("tensor"), py::call_guard<py::gil_scoped_release>(),
      "CRC32C of a tensor's values stored little-endian: the same number on every architecture for the same "
      "values (what the tests compare across ranks).");

  m.def(
      "describe",
      [](c10d::ProcessGroup& group) {
        const ferry::comm::communicator& comm = ferry_group(group).communicator();
        py::dict d;
        d["rank"] = comm.rank();
        d["world_size"] = comm.world_size();
        d["timeout_s"] = std::chrono::duration<double>(comm.config().timeout).count();
        d["auth"] = std::string(ferry::comm::name(comm.config().auth));
        d["chunk_bytes"] = comm.config().chunk_bytes;
        return d;
      },
      py::arg("group"), "The ring's configuration as this rank sees it.");
}
