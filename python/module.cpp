// ferry._ferry: the checkpoint API (ferry/checkpoint) for Python. The
// public face is python/ferry/__init__.py; this module only moves bytes:
//
//   Reader(path, pytorch_order, copy_on_write, gguf_order)   checkpoint::reader
//     .format .order .keys() .info(name) .metadata() .gguf_metadata() .verify()
//     .get(name, dequantize) -> numpy array     .load(dequantize) -> {name: numpy array}
//     .storages(dequantize) -> ([(name, dtype, shape, strides, offset, storage)], [uint8 array])
//   save(path, entries, storages, metadata, format, order, alignment, shared, compress)
//                                         .ferry, safetensors, .pt, .npy, .npz (checkpoint::save)
//   save_gguf(path, entries, storages, metadata, order, ggml_types)            GGUF (gguf_values.h)
//   dtypes                                       {name: code, bytes, numpy and torch names}
//   cpu_info() -> {version, cpu_features, enabled_cpu_features, kernels}   base/cpu.h
//
// Arrays view the reader's storages without copying (the mapping of the
// file, or the byte-swapped copy when the file's order is not the host's):
// each array's base is one uint8 array per storage, whose base owns the
// storage, so views of one storage stay views of one base in numpy, and
// the storage lives as long as any of them. Without copy_on_write the
// arrays are read-only. The GIL is released while files are read, checked
// and written.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/base/cpu.h"
#include "ferry/codec/kernels.h"
#include "ferry/checkpoint/formats.h"
#include "ferry/checkpoint/gguf.h"
#include "ferry/checkpoint/reader.h"
#include "gguf_values.h"

namespace py = pybind11;
namespace ckpt = ferry::checkpoint;

namespace {

// A ferry error on its way to Python: the translator below raises
// ferry.Error, or OSError (FileNotFoundError, ...) when the OS said why.
struct failure {
  ferry::error e;
};

template <class T>
T value_or_raise(ferry::result<T, ferry::error>&& r) {
  if (!r) throw failure{std::move(r).error()};
  return std::move(r).value();
}
void raise_if_error(const ferry::result<void, ferry::error>& r) {
  if (!r) throw failure{r.error()};
}

// An error's text as str: it may quote bytes of the file that are not
// UTF-8 (a hostile name), shown as \x escapes.
py::str text(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace"));
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const failure& f) {
    const ferry::error& e = f.e;
    if (e.sys_errno() != 0) {
      // OSError(errno, text, filename) is FileNotFoundError for ENOENT,
      // PermissionError for EACCES, and so on.
      const py::object exc =
          py::module_::import("builtins").attr("OSError")(e.sys_errno(), std::strerror(e.sys_errno()), text(e.context()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      return;
    }
    const py::object type = py::module_::import("ferry").attr("Error");
    const py::object exc = type(text(e.what()), e.code().value(), std::string(ferry::name(e.code())), text(e.context()));
    PyErr_SetObject(type.ptr(), exc.ptr());
  }
}

// Every ferry dtype as Python sees it, the one table ferry/__init__.py
// reads (as _ferry.dtypes): numpy's type, "<kind><bytes>" as numpy's
// dtype.kind and itemsize give it; whether numpy holds only the element's
// bits (bf16, the float8s and complex32, which numpy lacks); torch's
// attribute name.
struct python_dtype {
  ferry::codec::dtype dtype;
  const char* numpy;
  bool numpy_bits;
  const char* torch;
};
constexpr python_dtype python_dtypes[] = {
    {ferry::codec::dtype::boolean, "b1", false, "bool"},   {ferry::codec::dtype::u8, "u1", false, "uint8"},
    {ferry::codec::dtype::i8, "i1", false, "int8"},        {ferry::codec::dtype::u16, "u2", false, "uint16"},
    {ferry::codec::dtype::i16, "i2", false, "int16"},      {ferry::codec::dtype::u32, "u4", false, "uint32"},
    {ferry::codec::dtype::i32, "i4", false, "int32"},      {ferry::codec::dtype::u64, "u8", false, "uint64"},
    {ferry::codec::dtype::i64, "i8", false, "int64"},      {ferry::codec::dtype::f16, "f2", false, "float16"},
    {ferry::codec::dtype::bf16, "u2", true, "bfloat16"},   {ferry::codec::dtype::f32, "f4", false, "float32"},
    {ferry::codec::dtype::f64, "f8", false, "float64"},    {ferry::codec::dtype::f8_e4m3, "u1", true, "float8_e4m3fn"},
    {ferry::codec::dtype::f8_e5m2, "u1", true, "float8_e5m2"},
    {ferry::codec::dtype::f8_e4m3fnuz, "u1", true, "float8_e4m3fnuz"},
    {ferry::codec::dtype::f8_e5m2fnuz, "u1", true, "float8_e5m2fnuz"},
    {ferry::codec::dtype::c32, "u4", true, "complex32"},
    {ferry::codec::dtype::c64, "c8", false, "complex64"},
    {ferry::codec::dtype::c128, "c16", false, "complex128"},
};
static_assert(std::size(python_dtypes) == std::size(ferry::codec::all_dtypes), "a dtype without its Python names");

const python_dtype& python_names(ferry::codec::dtype t) {
  for (const auto& d : python_dtypes) {
    if (d.dtype == t) return d;
  }
  throw std::logic_error("ferry: no Python names for dtype code " + std::to_string(ferry::codec::code(t)));
}

// numpy's dtype for a ferry dtype: bf16 and the float8s as their bits.
py::dtype numpy_dtype(ferry::codec::dtype t) { return py::dtype(python_names(t).numpy); }

// What ferry.info() reports: the version, the CPU features found and
// enabled (FERRY_CPU_FEATURES; ferry.Error for an unknown name) and the
// kernel each dispatcher chose (codec/kernels.h).
py::dict cpu_info() {
  namespace base = ferry::base;
  raise_if_error(base::check_cpu_features_env());
  py::dict kernels;
  for (const auto& [dispatcher, kernel] : ferry::codec::kernel_choices()) kernels[py::str(std::string(dispatcher))] = std::string(kernel);
  py::dict d;
  d["version"] = FERRY_VERSION;
  d["cpu_features"] = base::describe_cpu_features(base::detected_cpu_features());
  d["enabled_cpu_features"] = base::describe_cpu_features(base::enabled_cpu_features());
  d["kernels"] = kernels;
  return d;
}

// {ferry dtype name: {"code", "bytes", "numpy", "numpy_bits", "torch"}}, in code order.
py::dict dtype_table() {
  py::dict out;
  for (const auto& d : python_dtypes) {
    py::dict e;
    e["code"] = ferry::codec::code(d.dtype);
    e["bytes"] = ferry::codec::size_of(d.dtype);
    e["numpy"] = d.numpy;
    e["numpy_bits"] = d.numpy_bits;
    e["torch"] = d.torch;
    out[py::str(std::string(ferry::codec::name(d.dtype)))] = e;
  }
  return out;
}

// One uint8 array over a storage's bytes, owning a reference to it:
// writable when the reader hands out copy-on-write storages.
py::array storage_array(const std::shared_ptr<const ckpt::storage_buffer>& s, bool writable) {
  using keeper = std::shared_ptr<const ckpt::storage_buffer>;
  auto keep = std::make_unique<keeper>(s);
  const py::capsule owner(keep.get(), [](void* p) { delete static_cast<keeper*>(p); });
  keep.release();  // the capsule owns it now
  auto* data = const_cast<std::byte*>(s->bytes().data());  // read-only unless writable, below
  py::array a(py::dtype("u1"), {static_cast<py::ssize_t>(s->bytes().size())}, {py::ssize_t{1}}, data, owner);
  if (!writable) {
    // The flag itself, through pybind11's view of the numpy struct (stable
    // across pybind11 2.x): setting a.flags.writeable from Python costs as
    // much as making the array.
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return a;
}

// An array of `t`'s elements over `base` (storage_array of its storage),
// with base's flags: read-only over a read-only base.
py::array tensor_array(const ckpt::tensor_info& t, const py::array& base) {
  const py::dtype dt = numpy_dtype(t.dtype);
  const auto width = static_cast<py::ssize_t>(dt.itemsize());
  std::vector<py::ssize_t> shape, strides;
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    shape.push_back(static_cast<py::ssize_t>(t.shape[i]));
    strides.push_back(static_cast<py::ssize_t>(t.strides[i]) * width);
  }
  // An empty tensor may sit past its storage's end: point at the start.
  const std::uint64_t at = t.numel() == 0 ? 0 : t.offset * static_cast<std::uint64_t>(width);
  auto* data = static_cast<std::byte*>(const_cast<void*>(base.data())) + at;
  return py::array(dt, shape, strides, data, base);
}

py::dict info_dict(const ckpt::reader& r, const ckpt::tensor_info& t) {
  py::dict d;
  d["dtype"] = std::string(ferry::codec::name(t.dtype));
  d["shape"] = py::tuple(py::cast(t.shape));
  d["strides"] = py::tuple(py::cast(t.strides));
  d["offset"] = t.offset;
  d["storage"] = t.storage;
  d["nbytes"] = t.nbytes();
  d["shared_with"] = r.shared_with(t);
  if (const ckpt::gguf_header* h = r.gguf()) {  // GGUF: one storage a tensor
    const ckpt::gguf_tensor& g = h->tensors[t.storage];
    d["ggml_type"] = std::string(ckpt::info(g.type).name);
    d["quantized"] = !ckpt::dtype_of(g.type).has_value();
  }
  return d;
}

std::optional<ferry::wire::byte_order> parse_order(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  if (const auto o = ferry::wire::byte_order_from_name(*s)) return o;
  throw py::value_error("byte order must be 'little' or 'big', not '" + *s + "'");
}

class py_reader {
 public:
  py_reader(const std::string& path, const std::optional<std::string>& pytorch_order, bool copy_on_write,
            const std::optional<std::string>& gguf_order) {
    ckpt::read_options opt;
    opt.pytorch_order = parse_order(pytorch_order);
    opt.gguf_order = parse_order(gguf_order);
    opt.copy_on_write = copy_on_write_ = copy_on_write;
    py::gil_scoped_release unlocked;
    r_ = std::make_unique<ckpt::reader>(value_or_raise(ckpt::open(path, opt)));
  }

  std::string format() const { return std::string(ckpt::format_name(r_->format())); }
  std::string order() const { return std::string(ferry::wire::name(r_->order())); }
  std::string path() const { return r_->path().string(); }

  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(r_->tensors().size());
    for (const auto& t : r_->tensors()) out.push_back(t.name);
    return out;
  }
  const ckpt::tensor_info& find(const std::string& name) const {
    const ckpt::tensor_info* t = r_->find(name);
    if (t == nullptr) throw py::key_error(name);
    return *t;
  }
  py::dict info(const std::string& name) const { return info_dict(*r_, find(name)); }
  std::map<std::string, std::string> metadata() const { return r_->metadata(); }

  // A GGUF file's metadata with each value's type (gguf_values.h), in the
  // file's order; ValueError for other formats.
  py::dict gguf_metadata() const {
    const ckpt::gguf_header* h = r_->gguf();
    if (h == nullptr) throw py::value_error(path() + ": not a GGUF file (" + format() + ")");
    py::dict out;
    for (const auto& kv : h->metadata) out[ferry::python::to_python(ckpt::gguf_value(kv.key))] = ferry::python::to_python(kv.value);
    return out;
  }

  void verify() const {
    raise_if_error([&] {
      py::gil_scoped_release unlocked;
      return r_->verify();
    }());
  }

  py::array get(const std::string& name, bool dequantize) const {
    const ckpt::tensor_info& t = find(name);
    const bool fresh = dequantize && quantized(t);  // values in memory of their own, writable
    const ckpt::tensor tensor = value_or_raise([&] {
      py::gil_scoped_release unlocked;
      return fresh ? ckpt::get_dequantized(*r_, t.name) : r_->get(t);
    }());
    return tensor_array(tensor.info(), storage_array(tensor.storage(), copy_on_write_ || fresh));
  }

  // Every tensor, storages read in parallel without the GIL; with
  // `dequantize`, a GGUF file's quantized tensors as f32 (each then over a
  // storage of its own, numbered after the file's).
  std::vector<ckpt::tensor> get_all(bool dequantize) const {
    return value_or_raise([&]() -> ferry::result<std::vector<ckpt::tensor>, ferry::error> {
      py::gil_scoped_release unlocked;
      FERRY_TRY_ASSIGN(auto all, r_->get_all());
      if (!dequantize) return all;
      for (std::size_t k = 0; k < all.size(); ++k) {
        if (!quantized(all[k].info())) continue;
        FERRY_TRY_ASSIGN(ckpt::tensor d, ckpt::get_dequantized(*r_, all[k].name()));
        ckpt::tensor_info i = d.info();
        i.storage = static_cast<std::uint32_t>(r_->storages().size() + k);
        all[k] = ckpt::tensor(std::move(i), d.storage());
      }
      return all;
    }());
  }

  // One storage_array per storage the tensors use (None for the others;
  // get_all()'s dequantized storages come after the file's).
  std::vector<py::object> bases(const std::vector<ckpt::tensor>& all) const {
    std::vector<py::object> out(r_->storages().size() + all.size());
    for (const auto& t : all) {
      const bool own = t.info().storage >= r_->storages().size();  // dequantized: fresh memory, writable
      if (!out[t.info().storage]) out[t.info().storage] = storage_array(t.storage(), copy_on_write_ || own);
    }
    while (!out.empty() && !out.back()) out.pop_back();
    for (auto& b : out) {
      if (!b) b = py::none();
    }
    return out;
  }

  py::dict load(bool dequantize) const {
    const auto all = get_all(dequantize);
    const auto base = bases(all);
    py::dict out;
    for (const auto& t : all) {
      out[py::str(t.name())] = tensor_array(t.info(), py::reinterpret_borrow<py::array>(base[t.info().storage]));
    }
    return out;
  }

  py::tuple storages(bool dequantize) const {
    const auto all = get_all(dequantize);
    py::list entries;
    for (const auto& t : all) {
      const auto& i = t.info();
      entries.append(py::make_tuple(i.name, std::string(ferry::codec::name(i.dtype)), py::tuple(py::cast(i.shape)),
                                    py::tuple(py::cast(i.strides)), i.offset, i.storage));
    }
    return py::make_tuple(entries, bases(all));
  }

 private:
  // A GGUF tensor held as raw quantized blocks.
  bool quantized(const ckpt::tensor_info& t) const {
    const ckpt::gguf_header* h = r_->gguf();
    return h != nullptr && !ckpt::dtype_of(h->tensors[t.storage].type).has_value();
  }

  std::unique_ptr<ckpt::reader> r_;
  bool copy_on_write_ = false;
};

using entry = std::tuple<std::string, std::string, std::vector<std::uint64_t>, std::vector<std::uint64_t>, std::uint64_t,
                         std::size_t>;

// The tensors Python hands over, as tensor_refs over its buffers (which
// stay requested, so their memory stays put, while the refs are used).
struct python_tensors {
  std::vector<py::buffer_info> buffers;
  std::vector<ckpt::tensor_ref> refs;

  python_tensors(const std::vector<entry>& entries, const std::vector<py::buffer>& storage_objects) {
    buffers.reserve(storage_objects.size());
    for (const auto& b : storage_objects) {
      buffers.push_back(b.request());
      if (buffers.back().ndim != 1 || buffers.back().itemsize != 1 || buffers.back().strides[0] != 1) {
        throw py::value_error("a storage must be a contiguous buffer of bytes");
      }
    }
    refs.reserve(entries.size());
    for (const auto& [name, dtype, shape, strides, offset, storage] : entries) {
      if (storage >= buffers.size()) throw py::index_error("storage index out of range");
      const auto dt = ferry::codec::dtype_from_name(dtype);
      if (!dt) throw py::value_error("'" + name + "': no ferry dtype '" + dtype + "'");
      refs.push_back({name, *dt, shape, strides, offset,
                      {static_cast<const std::byte*>(buffers[storage].ptr),
                       static_cast<std::size_t>(buffers[storage].size)}});
    }
  }
};

// Runs `write` without the GIL; a ferry error raises.
template <class F>
void write_unlocked(F&& write) {
  raise_if_error([&]() -> ferry::result<void, ferry::error> {
    py::gil_scoped_release unlocked;
    return write();
  }());
}

// Any format the table's writers write (checkpoint::save_as()): .ferry,
// safetensors, .pt, .npy (exactly one tensor), .npz.
void save(const std::string& path, const std::vector<entry>& entries, const std::vector<py::buffer>& storage_objects,
          const std::map<std::string, std::string>& metadata, const std::string& format,
          const std::optional<std::string>& order, std::uint32_t alignment, const std::string& shared, bool compress) {
  const python_tensors in(entries, storage_objects);
  const auto chosen = ckpt::format_to_write(format, path);
  if (!chosen) throw py::value_error(chosen.error().what());
  if (*chosen == ckpt::file_format::npy && in.refs.size() != 1) {
    throw py::value_error(path + ": a .npy file holds one array, not " + std::to_string(in.refs.size()) +
                          " (save an .npz)");
  }
  ckpt::save_options opt;
  opt.order = parse_order(order);
  opt.alignment = alignment;
  opt.shared = shared;
  opt.compress = compress;
  write_unlocked([&] { return ckpt::save_as(*chosen, path, in.refs, metadata, opt); });
}

// A tensor of raw quantized blocks (a uint8 array whose last extent counts
// bytes, as ferry reads them) as the GGUF tensor of ggml type `type_name`.
ckpt::gguf_tensor_ref quantized_tensor(const ckpt::tensor_ref& t, const std::string& type_name) {
  const auto type = ckpt::ggml_type_from_name(type_name);
  if (!type) throw py::value_error("'" + std::string(t.name) + "': no ggml type '" + type_name + "'");
  const ckpt::ggml_type_info& ti = ckpt::info(*type);
  const std::string what = "'" + std::string(t.name) + "' as " + std::string(ti.name) + ": ";
  if (t.dtype != ferry::codec::dtype::u8 || t.shape.empty()) {
    throw py::type_error(what + "quantized blocks are a uint8 array whose last extent counts bytes");
  }
  const auto strides = ckpt::contiguous_strides(std::vector<std::uint64_t>(t.shape.begin(), t.shape.end()));
  if (!t.strides.empty() && !std::equal(t.strides.begin(), t.strides.end(), strides.begin(), strides.end())) {
    throw py::value_error(what + "the array is not contiguous");
  }
  ckpt::gguf_tensor_ref g;
  g.name = t.name;
  g.type = *type;
  g.ne.assign(t.shape.rbegin(), t.shape.rend());
  if (g.ne[0] % ti.block_bytes != 0) {
    throw py::value_error(what + "a row of " + std::to_string(g.ne[0]) + " bytes is not whole blocks of " +
                          std::to_string(ti.block_bytes));
  }
  g.ne[0] = g.ne[0] / ti.block_bytes * ti.block_elements;
  std::uint64_t bytes = 1;
  for (const std::uint64_t d : t.shape) bytes *= d;  // within the buffer Python handed over
  if (t.offset > t.storage.size() || bytes > t.storage.size() - t.offset) throw py::value_error(what + "past its storage");
  g.data = t.storage.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(bytes));
  return g;
}

void save_gguf(const std::string& path, const std::vector<entry>& entries, const std::vector<py::buffer>& storage_objects,
               const py::dict& metadata, const std::optional<std::string>& order,
               const std::map<std::string, std::string>& ggml_types, bool nested_arrays) {
  const python_tensors in(entries, storage_objects);
  std::vector<ckpt::gguf_kv> md;
  for (const auto& [k, v] : metadata) {
    const std::string key = py::cast<std::string>(k);
    md.push_back({key, ferry::python::from_python(v, key)});
  }
  std::vector<ckpt::gguf_tensor_ref> tensors;
  for (const auto& t : in.refs) {
    if (const auto q = ggml_types.find(std::string(t.name)); q != ggml_types.end()) {
      tensors.push_back(quantized_tensor(t, q->second));
    } else {
      tensors.push_back(value_or_raise(ckpt::to_gguf_tensor(t)));
    }
  }
  ckpt::gguf_write_options opt;
  opt.order = parse_order(order).value_or(ferry::wire::host_order);
  opt.nested_arrays = nested_arrays;
  write_unlocked([&] { return ckpt::save_gguf(path, md, tensors, opt); });
}

}  // namespace

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "ferry's checkpoint reader and writer (use the ferry package, not this module)";
  py::register_exception_translator(&translate);
  py::class_<py_reader>(m, "Reader")
      .def(py::init<const std::string&, const std::optional<std::string>&, bool, const std::optional<std::string>&>(),
           py::arg("path"), py::arg("pytorch_order") = py::none(), py::arg("copy_on_write") = false,
           py::arg("gguf_order") = py::none())
      .def_property_readonly("format", &py_reader::format)
      .def_property_readonly("order", &py_reader::order)
      .def_property_readonly("path", &py_reader::path)
      .def("keys", &py_reader::keys)
      .def("info", &py_reader::info)
      .def("metadata", &py_reader::metadata)
      .def("gguf_metadata", &py_reader::gguf_metadata)
      .def("verify", &py_reader::verify)
      .def("get", &py_reader::get, py::arg("name"), py::arg("dequantize") = false)
      .def("load", &py_reader::load, py::arg("dequantize") = false)
      .def("storages", &py_reader::storages, py::arg("dequantize") = false);
  m.attr("dtypes") = dtype_table();
  m.def("cpu_info", &cpu_info);
  m.def("save", &save, py::arg("path"), py::arg("entries"), py::arg("storages"), py::arg("metadata"),
        py::arg("format"), py::arg("order"), py::arg("alignment"), py::arg("shared"), py::arg("compress"));
  m.def("save_gguf", &save_gguf, py::arg("path"), py::arg("entries"), py::arg("storages"), py::arg("metadata"),
        py::arg("order"), py::arg("ggml_types"), py::arg("nested_arrays"));
}
