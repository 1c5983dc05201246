// GGUF metadata values to and from Python (gguf_values.h).
#include "gguf_values.h"

#include <pybind11/numpy.h>

#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

namespace ferry::python {
namespace {

namespace py = pybind11;
namespace ckpt = ferry::checkpoint;

py::module_ numpy() { return py::module_::import("numpy"); }

py::str decode(const std::string& s) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape"));
}

std::string encode(const py::handle& s) {
  const py::object b =
      py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(s.ptr(), "utf-8", "surrogateescape"));
  if (!b) throw py::error_already_set();
  return std::string(py::reinterpret_borrow<py::bytes>(b));
}

// One read-only empty array per element type, shared by every empty
// numeric array of a file: 5.6M empty arrays in an array of arrays (12
// bytes each in the file) were 5.6M numpy objects of about 110 bytes.
template <class E>
py::object empty_array() {
  static py::object* shared = [] {
    auto* a = new py::object(py::array_t<E>(0));  // kept for the interpreter's life, like the dtypes it holds
    a->attr("setflags")(py::arg("write") = false);
    return a;
  }();
  return *shared;
}

py::object array_to_python(const ckpt::gguf_array& a) {
  return std::visit(
      [](const auto& elems) -> py::object {
        using E = typename std::decay_t<decltype(elems)>::value_type;
        if constexpr (std::is_same_v<E, std::string>) {
          py::list out;
          for (const auto& s : elems) out.append(decode(s));
          return out;
        } else if constexpr (std::is_same_v<E, ckpt::gguf_array>) {
          py::list out;
          for (const auto& inner : elems) out.append(array_to_python(inner));
          return out;
        } else if (elems.empty()) {
          return empty_array<E>();
        } else if constexpr (std::is_same_v<E, bool>) {
          py::array_t<bool> out(static_cast<py::ssize_t>(elems.size()));
          for (std::size_t i = 0; i < elems.size(); ++i) out.mutable_at(static_cast<py::ssize_t>(i)) = elems[i];
          return out;
        } else {
          return py::array_t<E>(static_cast<py::ssize_t>(elems.size()), elems.data());
        }
      },
      a.values);
}

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw py::type_error("GGUF metadata '" + key + "': " + why);
}

// A Python int as i64; TypeError past 64 bits.
std::int64_t int64_of(const py::handle& v, const std::string& key) {
  try {
    return v.cast<std::int64_t>();
  } catch (const py::cast_error&) {
    refuse(key, "an int outside i64 (numpy.uint64(...) holds the unsigned range)");
  }
}

// The GGUF type of a numpy dtype (any byte order), or -1.
int type_of_numpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'b') return 7;
  const int u = kind == 'u', i = kind == 'i', f = kind == 'f';
  if (size == 1) return u ? 0 : i ? 1 : -1;
  if (size == 2) return u ? 2 : i ? 3 : -1;
  if (size == 4) return u ? 4 : i ? 5 : f ? 6 : -1;
  if (size == 8) return u ? 10 : i ? 11 : f ? 12 : -1;
  return -1;
}

template <class T>
std::vector<T> numbers(const py::array& a) {
  const auto c = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<T>(c.data(), c.data() + c.size());
}

ckpt::gguf_array array_from_numpy(const py::array& a, const std::string& key) {
  if (a.ndim() != 1) refuse(key, "a metadata array is one-dimensional");
  ckpt::gguf_array out;
  switch (type_of_numpy(a.dtype())) {
    case 0: out.values = numbers<std::uint8_t>(a); break;
    case 1: out.values = numbers<std::int8_t>(a); break;
    case 2: out.values = numbers<std::uint16_t>(a); break;
    case 3: out.values = numbers<std::int16_t>(a); break;
    case 4: out.values = numbers<std::uint32_t>(a); break;
    case 5: out.values = numbers<std::int32_t>(a); break;
    case 6: out.values = numbers<float>(a); break;
    case 7: {
      std::vector<bool> v;
      for (const bool b : numbers<bool>(a)) v.push_back(b);
      out.values = std::move(v);
      break;
    }
    case 10: out.values = numbers<std::uint64_t>(a); break;
    case 11: out.values = numbers<std::int64_t>(a); break;
    case 12: out.values = numbers<double>(a); break;
    default: refuse(key, "GGUF holds no array of numpy " + std::string(py::str(a.dtype())));
  }
  return out;
}

// A list's elements, all of one kind, by gguf-py's rules.
ckpt::gguf_array array_from_list(const py::sequence& seq, const std::string& key) {
  ckpt::gguf_array out;
  const auto all = [&](auto pred) {
    for (const auto& e : seq) {
      if (!pred(e)) return false;
    }
    return true;
  };
  const auto is_str = [](const py::handle& e) { return py::isinstance<py::str>(e); };
  const auto is_bool = [](const py::handle& e) { return py::isinstance<py::bool_>(e); };
  const auto is_int = [](const py::handle& e) { return py::isinstance<py::int_>(e) && !py::isinstance<py::bool_>(e); };
  const auto is_number = [&](const py::handle& e) { return is_int(e) || py::isinstance<py::float_>(e); };
  const auto is_nested = [](const py::handle& e) {
    return py::isinstance<py::list>(e) || py::isinstance<py::tuple>(e) || py::isinstance<py::array>(e);
  };
  if (seq.size() == 0 || all(is_str)) {
    std::vector<std::string> v;
    for (const auto& e : seq) v.push_back(encode(e));
    out.values = std::move(v);
  } else if (all(is_bool)) {
    std::vector<bool> v;
    for (const auto& e : seq) v.push_back(e.cast<bool>());
    out.values = std::move(v);
  } else if (all(is_int)) {
    // i32 when every element fits, else i64.
    std::vector<std::int64_t> wide;
    for (const auto& e : seq) wide.push_back(int64_of(e, key));
    bool fits = true;
    for (const std::int64_t x : wide) {
      fits = fits && x >= std::numeric_limits<std::int32_t>::min() && x <= std::numeric_limits<std::int32_t>::max();
    }
    if (fits) {
      out.values = std::vector<std::int32_t>(wide.begin(), wide.end());
    } else {
      out.values = std::move(wide);
    }
  } else if (all(is_number)) {
    std::vector<float> v;
    for (const auto& e : seq) v.push_back(e.cast<float>());
    out.values = std::move(v);
  } else if (all(is_nested)) {
    std::vector<ckpt::gguf_array> v;
    for (const auto& e : seq) {
      v.push_back(py::isinstance<py::array>(e) ? array_from_numpy(py::reinterpret_borrow<py::array>(e), key)
                                               : array_from_list(py::reinterpret_borrow<py::sequence>(e), key));
    }
    out.values = std::move(v);
  } else {
    refuse(key, "a list's elements must all be str, bool, int, float or lists (numpy arrays for other types)");
  }
  return out;
}

}  // namespace

py::object to_python(const ckpt::gguf_value& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) {
          return decode(x);
        } else if constexpr (std::is_same_v<X, ckpt::gguf_array>) {
          return array_to_python(x);
        } else if constexpr (std::is_same_v<X, bool>) {
          return py::bool_(x);
        } else {
          // Element 0 of a one-element array: a numpy scalar with x's exact
          // bits (a float through a Python float would quiet a signalling NaN).
          return py::array_t<X>(1, &x).attr("__getitem__")(0);
        }
      },
      v);
}

ckpt::gguf_value from_python(const py::handle& v, const std::string& key) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::str>(v)) return encode(v);
  if (py::isinstance<py::bytes>(v)) return std::string(py::reinterpret_borrow<py::bytes>(v));
  if (py::isinstance(v, numpy().attr("generic"))) {  // a numpy scalar: its own type
    const py::array a = numpy().attr("asarray")(v).attr("reshape")(1);
    return std::visit(
        [&](const auto& elems) -> ckpt::gguf_value {
          using E = typename std::decay_t<decltype(elems)>::value_type;
          if constexpr (std::is_same_v<E, std::string> || std::is_same_v<E, ckpt::gguf_array>) {
            refuse(key, "not a number");  // numpy scalars are numbers or bools
          } else {
            return static_cast<E>(elems[0]);
          }
        },
        array_from_numpy(a, key).values);
  }
  if (py::isinstance<py::int_>(v)) {
    const auto x = int64_of(v, key);
    if (x >= std::numeric_limits<std::int32_t>::min() && x <= std::numeric_limits<std::int32_t>::max()) {
      return static_cast<std::int32_t>(x);
    }
    return x;
  }
  if (py::isinstance<py::float_>(v)) return v.cast<float>();
  if (py::isinstance<py::array>(v)) return array_from_numpy(py::reinterpret_borrow<py::array>(v), key);
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    return array_from_list(py::reinterpret_borrow<py::sequence>(v), key);
  }
  refuse(key, "GGUF holds no " + std::string(py::str(v.get_type().attr("__name__"))));
}

}  // namespace ferry::python
