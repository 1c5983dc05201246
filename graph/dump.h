// ferry/graph/dump.h: prints any graph archive as JSON using only the schema
// embedded in it, without the C++ types.
//
// Output shape:
//   {"format": "ferry graph archive", "version": 2, "byte_order": "little",
//    "schema": [{"name": ..., "version": ..., "abstract": false,
//                "fields": [{"tag": 1, "name": ..., "type": "sequence<f32>"}]}],
//    "root": VALUE,
//    "objects": [{"id": 1, "ownership": "shared", "type": ..., "value": VALUE}]}
// Values: structs as {"$type": name, field: value, ...}; sequences, sets,
// arrays and tuples as arrays; maps as arrays of [key, value]; absent
// optionals and null pointers as null; references as {"$ref": id},
// {"$unique": id}, {"$weak": id} or {"$raw": reference} (ids index
// "objects"; a raw reference above the object count is the k-th struct held
// by value, see archive.h); variants as {"$variant": index, "value": VALUE};
// floats in shortest round-trip form, non-finite ones as "NaN", "Infinity",
// "-Infinity". Strings are written as UTF-8; bytes that are not well-formed
// UTF-8 appear as \u00XX escapes of their value, so the output is always
// valid JSON.
#pragma once

#include <ostream>
#include <span>

#include "ferry/graph/options.h"
#include "ferry/base/error.h"

namespace ferry::graph {

/// Errors: every error the archive's structure can have (as read()).
result<void> dump_json(std::span<const std::byte> archive, std::ostream& out, const options& opt = {});

}  // namespace ferry::graph
