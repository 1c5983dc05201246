// ferry._distributed: the pybind11 half of ferry.distributed
// (python/ferry/distributed.py registers the backend and defines the DDP
// hooks over it). Types come from torch's own bindings (ProcessGroup, Work,
// Store), shared through pybind11's registry, so torch/python.h's casters
// and intrusive_ptr holders apply.
//
// Errors are ferry's one family, the classes python/ferry/__init__.py
// defines, which the checkpoint module (_ferry) raises too: comm_error (a
// failed connection or collective) as ferry.CommError with .peer, any
// other ferry::exception (configuration, arguments, an unsupported call)
// as ferry.Error; both with .code, .name and .context (docs/errors.md).
#include <torch/python.h>

#include <pybind11/chrono.h>

#include "ferry/codec/crc32c.h"
#include "ferry/comm/error.h"
#include "ferry/wire/bulk.h"
#include "process_group.h"

namespace py = pybind11;
using ferry::distributed::process_group;

namespace {

// An error's text as str: it may quote bytes that are not UTF-8, shown
// as \x escapes.
py::str text(const std::string& s) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace"));
}

// Raises ferry.<cls>(what, code, name, context[, peer]).
void raise_as(const char* cls, const ferry::exception& e, const py::object& peer) {
  const ferry::error& err = e.error();
  const py::object type = py::module_::import("ferry").attr(cls);
  const py::str what = text(e.what());
  const std::string name(ferry::name(err.code()));
  const py::object exc = peer.is_none() ? type(what, err.code().value(), name, text(err.context()))
                                        : type(what, err.code().value(), name, text(err.context()), peer);
  PyErr_SetObject(type.ptr(), exc.ptr());
}

// For every pybind11 call in the process, torch's own included (Work.wait
// rethrows the collective's exception there).
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ferry::comm::comm_error& e) {
    raise_as("CommError", e, e.peer() ? py::object(py::int_(*e.peer())) : py::object(py::none()));
  } catch (const ferry::exception& e) {
    raise_as("Error", e, py::none());
  }
}

// The group Python passes: ferry's own (torch 1.13), or the ProcessGroup
// holding ferry's backend (torch 2.x).
process_group& ferry_group(c10d::ProcessGroup& group) {
  process_group* ours = nullptr;
  try {
    ours = dynamic_cast<process_group*>(ferry::distributed::torch_api::backend_of(group));
  } catch (const c10::Error&) {  // no backend for CPU tensors
  }
  if (ours == nullptr) {
    throw ferry::exception(ferry::error(ferry::comm_errc::bad_argument,
                                        "ferry: the process group's backend is " + group.getBackendName() + ", not ferry"));
  }
  return *ours;
}

ferry::comm::compression compression_named(const std::string& name) {
  const auto c = ferry::comm::compression_from_name(name);
  if (!c) {
    throw ferry::exception(ferry::error(ferry::comm_errc::bad_argument,
                                        "ferry: compression " + ferry::quote(name) + " is not one of none, bf16, f16"));
  }
  return *c;
}

}  // namespace

PYBIND11_MODULE(_distributed, m) {
  m.doc() = "The C++ half of ferry.distributed: the process group over ferry's ring.";
  // The classes of ferry's package, not classes of this module's own: the
  // checkpoint module raises the same ones (ferry is imported before
  // ferry.distributed, so this import finds it whole).
  const py::module_ ferry_package = py::module_::import("ferry");
  m.attr("Error") = ferry_package.attr("Error");
  m.attr("CommError") = ferry_package.attr("CommError");
  py::register_exception_translator(&translate);
  // comm/'s codes, {name: (number, message)}: the ones the Python half
  // raises (the rendezvous store, _store.py) are these too.
  py::dict comm_codes;
  for (const ferry::error_info& i : ferry::detail::comm_errc_table) {
    comm_codes[py::str(std::string(i.name))] = py::make_tuple(i.value, std::string(i.message));
  }
  m.attr("comm_codes") = comm_codes;
  // True where the creator returns a c10d::Backend, registered for CPU
  // tensors (torch 2.x: torch_api.h).
  m.attr("backend_api") = ferry::distributed::torch_api::backend_api;

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
        if (!tensor.device().is_cpu() || tensor.layout() != at::kStrided) {
          throw ferry::exception(ferry::error(ferry::comm_errc::unsupported, "ferry: crc32c takes a dense CPU tensor"));
        }
        // A subclass with __torch_dispatch__ (DTensor, AsyncCollectiveTensor)
        // may hold no data of its own: its data pointer can be null. Reading
        // its values takes the dispatcher, and so the GIL, released here.
        if (tensor.unsafeGetTensorImpl()->is_python_dispatch()) {
          throw ferry::exception(ferry::error(ferry::comm_errc::unsupported,
                                              "ferry: crc32c takes a plain tensor, not a tensor subclass with "
                                              "__torch_dispatch__ (DTensor.to_local(), AsyncCollectiveTensor.wait())"));
        }
        const at::Tensor t = tensor.contiguous();
        const std::span<const std::byte> bytes(static_cast<const std::byte*>(t.data_ptr()), t.nbytes());
        // A complex element's parts are swapped each on its own.
        const auto width = static_cast<std::size_t>(t.element_size()) / (t.is_complex() ? 2 : 1);
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
