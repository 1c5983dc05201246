// GGUF metadata values (checkpoint/gguf.h's gguf_value) to and from Python,
// for ferry._ferry (module.cpp). Typed both ways so a file read and written
// again keeps every value's GGUF type:
//
//   u8 .. f64 scalars   numpy scalars of that type (numpy.uint32(32), ...)
//   bool                bool
//   str                 str (bytes that are not UTF-8 as surrogate escapes,
//                       which encode back to the same bytes)
//   arrays              a numpy array of the element type; a list of str;
//                       a list of arrays for nested ones
//
// Going in, numpy scalars and arrays keep their type; plain Python values
// follow gguf-py's GGUFWriter: bool -> bool, int -> i32 (i64 when it does
// not fit), float -> f32, str -> str, a list -> an array of its elements
// by the same rules (all of one type).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "ferry/checkpoint/gguf.h"

namespace ferry::python {

/// The Python value of one GGUF value.
pybind11::object to_python(const checkpoint::gguf_value& v);

/// A GGUF value from a Python one (the rules above); `key` names it in
/// the ValueError or TypeError raised for a value GGUF cannot hold.
checkpoint::gguf_value from_python(const pybind11::handle& v, const std::string& key);

}  // namespace ferry::python
