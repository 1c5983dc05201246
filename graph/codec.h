// ferry/graph/codec.h: how a type of your own travels in a graph archive
// when it cannot (or should not) describe its fields.
//
// Most types need nothing from here: structs give themselves a ferry_name
// and a describe() (graph/archive.h), and the standard types ferry knows
// (schema/schema.h lists them) just work. For a type you cannot change, or
// one whose natural encoding is another type, specialise value_codec: the
// type then travels as its `wire_type`, any type ferry can already write,
// and every check the reader makes on that type applies to it.
//
//   // A fixed-point number from a library you do not own.
//   struct q16 { std::int32_t raw; };
//
//   template <>
//   struct ferry::graph::value_codec<q16> {
//     using wire_type = std::int32_t;                  // how it is stored
//     static wire_type to_wire(const q16& v) { return v.raw; }
//     // Reading: `w` passed every check of wire_type; reject what your type
//     // cannot hold with an error (it fails the whole read, nothing leaks).
//     static ferry::result<void> from_wire(wire_type w, q16& v) {
//       v.raw = w;
//       return {};
//     }
//   };
//
//   std::vector<q16> prices = ...;
//   auto bytes = ferry::graph::write(prices);   // described as sequence<i32>
//
// Contract:
// - Specialise in namespace ferry::graph, before the first write or read of
//   the type (the choice of codec is made when a type is first used).
// - wire_type is default-constructible and serialisable by ferry itself
//   (a scalar, a string, a container, a tuple, a struct with describe(), or
//   another type with a value_codec).
// - to_wire(const T&) returns a wire_type (or something convertible to it);
//   from_wire(wire_type&&, T&) returns result<void>: an error code there
//   fails the read with that code.
// - The archive records only wire_type's descriptor: changing wire_type
//   later changes the format of your type (readers then report
//   field_type_mismatch or type_mismatch, never a misread).
// - Objects of T cannot be the target of raw pointers (only structs with
//   describe() are tracked), and T cannot be polymorphic through the
//   registry.
#pragma once

namespace ferry::graph {

/// Specialise for a type of your own (see above). The primary template is
/// never defined.
template <class T>
struct value_codec;

}  // namespace ferry::graph
