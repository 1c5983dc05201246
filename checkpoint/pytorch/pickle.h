// ferry/checkpoint/pytorch/pickle.h: INTERNAL. A pickle interpreter that
// treats the program as data: it builds values, imports nothing and calls
// nothing. It understands what torch.save writes into `data.pkl` and stops
// at anything else. Not part of the API (pytorch.h states the rules).
//
// OPCODES (pickle protocols 2 to 5; others are pickle_bad_opcode, INST and
// OBJ included):
//   PROTO STOP MARK GLOBAL STACK_GLOBAL REDUCE BUILD BINPERSID
//   EMPTY_DICT EMPTY_LIST EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3
//   APPEND APPENDS SETITEM SETITEMS NONE NEWTRUE NEWFALSE
//   BININT BININT1 BININT2 LONG1 (at most 8 bytes) BINFLOAT
//   BINUNICODE SHORT_BINUNICODE SHORT_BINSTRING
//   BINGET LONG_BINGET BINPUT LONG_BINPUT MEMOIZE FRAME
//
// GLOBALS: only those below may be named (GLOBAL or STACK_GLOBAL); any
// other stops the program at once [pickle_forbidden_global], a torch.nn
// module [unsupported_pytorch: a pickled module, not a state dict].
//   collections.OrderedDict                          called with (): a dict
//   torch._utils._rebuild_tensor_v2                  a tensor (below)
//   torch._utils._rebuild_tensor_v3                  a tensor with a dtype
//   torch._utils._rebuild_parameter                  its tensor argument
//   torch.{Double,Float,Half,BFloat16,Long,Int,Short,Char,Byte,Bool,
//   ComplexFloat,ComplexDouble}Storage,
//   torch.UntypedStorage, torch.storage.UntypedStorage  storage types
//   torch.{QUInt8,QInt8,QInt32,QUInt4x2,QUInt2x4}Storage  storage types
//                                                    ferry cannot hold: a
//                                                    tensor over one is
//                                                    unknown_dtype
//   torch.{float8_e4m3fn,float8_e5m2,float8_e4m3fnuz,float8_e5m2fnuz,
//   uint16,uint32,uint64,complex32,complex64,complex128}  dtypes (v3)
//   torch.{bits8,bits16,bits1x8,bits2x4,bits4x2}      dtypes (v3) read as
//                                                    U8 (U16 for bits16),
//                                                    the tensor keeping
//                                                    the name
//
// VALUES. A persistent id (BINPERSID) MUST be the tuple ('storage', storage
// type, key: str, location: str, numel: int >= 0); numel counts elements
// (bytes for UntypedStorage); one key always names one storage, of one type
// and size. _rebuild_tensor_v2(storage, offset, size, stride,
// requires_grad, hooks[, metadata]) and _rebuild_tensor_v3(storage, offset,
// size, stride, requires_grad, hooks, dtype[, metadata]): offset >= 0, size
// and stride tuples of equal length of ints >= 0. BUILD is accepted on a
// dict only (an OrderedDict's attributes; dropped). APPEND(S) only on
// lists, SETITEM(S) only on dicts. The program MUST end with STOP leaving
// exactly one value, at the end of the record [pickle_malformed,
// trailing_bytes]. Every length is checked against the bytes left
// [truncated]. Limits: MARKs open at once <= max_pickle_depth
// [depth_exceeded]; memo slots filled <= max_pickle_memo [limit_exceeded]
// (the memo is sparse: slot 2^32-16 costs what slot 0 does); memory below.
//
// MEMORY. Every value the program makes lives in an arena owned by the
// program: containers refer to each other by pointer, so shared and cyclic
// structures cost nothing to build or free. None, True, False and the
// integers 0..255 are made once and shared. What the values take (each
// value value_bytes, each item of a container a pointer, each GLOBAL's
// name, each stack slot and memo slot) is counted as it is made, and a
// program whose values would take more than limits::max_pickle_memory is
// stopped [limit_exceeded, naming the limit]: a one-byte opcode that makes
// a 64-byte value cannot turn a 256 MiB pickle into 16 GiB of memory.
// Consumers walking the values bound their depth (a pickle can make a list
// contain itself).
#pragma once

#include <bit>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/error.h"
#include "ferry/checkpoint/options.h"
#include "ferry/codec/dtype.h"

namespace ferry::checkpoint::detail::pickle {

enum class kind : std::uint8_t { none, boolean, integer, floating, string, tuple, list, dict, global, storage, tensor };

/// What an allowed global is.
enum class global_kind : std::uint8_t { ordered_dict, rebuild_tensor_v2, rebuild_tensor_v3, rebuild_parameter,
                                        storage_type, dtype };

struct value {
  kind k = kind::none;
  global_kind g = global_kind::ordered_dict;  ///< global
  bool untyped = false;  ///< global, storage: torch.UntypedStorage (numel in bytes)
  /// global (dtype): bits PyTorch gives no meaning (torch.bits16...),
  /// carried as unsigned integers of their size.
  bool raw_bits = false;
  /// global (storage type, dtype), storage, tensor: the element type; none
  /// for a storage type ferry cannot hold (complex, quantized).
  std::optional<codec::dtype> dtype;
  /// The value's place in the arena, 0, 1, 2... in the order values were
  /// made (for consumers' tables of what they know about each value).
  std::uint32_t id = 0;
  /// boolean (0, 1), integer; floating: its bits (floating());
  /// storage: numel (elements, or bytes if untyped); tensor: the offset in
  /// elements.
  std::int64_t i = 0;
  /// string: the text, as the pickle holds it (UTF-8 not yet checked),
  /// viewing the pickle's bytes; global: "module.name"; storage: the key;
  /// tensor: the raw_bits dtype's "module.name", else empty.
  std::string_view s;
  /// tuple, list: the items; dict: keys and values alternating, in
  /// insertion order; storage: {the storage type global}; tensor:
  /// {storage, size tuple, stride tuple} (tuples of integers >= 0 of one
  /// length, checked when the tensor is made).
  std::vector<value*> items;

  [[nodiscard]] double floating() const noexcept { return std::bit_cast<double>(i); }
  [[nodiscard]] std::size_t dict_size() const noexcept { return items.size() / 2; }
  [[nodiscard]] const value* storage_type() const noexcept { return items[0]; }  ///< storage, tensor's storage
};

/// What one value is counted as (its arena slot and what a consumer keeps
/// per value), for limits::max_pickle_memory.
inline constexpr std::size_t value_bytes = sizeof(value) + 64;

struct program {
  /// Every value the program made; pointers into it stay valid while the
  /// program lives (it is moved by its unique_ptr).
  std::unique_ptr<std::deque<value>> arena = std::make_unique<std::deque<value>>();
  /// GLOBALs' "module.name" texts, which values' s view.
  std::unique_ptr<std::deque<std::string>> texts = std::make_unique<std::deque<std::string>>();
  const value* root = nullptr;
  /// Distinct storages in order of first appearance.
  std::vector<const value*> storages;
  /// The most memory the values took at once, as counted against
  /// limits::max_pickle_memory (the smallest limit this program runs in).
  std::uint64_t memory = 0;
};

/// How torch.save names a dtype's storage: a storage class of module
/// `torch` (FloatStorage: _rebuild_tensor_v2, numel in elements), or, for
/// dtypes that have none (uint16, float8_*, complex32...), the dtype
/// global itself (torch.uint16: _rebuild_tensor_v3 over a
/// torch.storage.UntypedStorage, numel in bytes). Empty for a dtype torch
/// has no name for. The allow-list above, read the other way (save_pt).
struct torch_name {
  std::string_view module, name;
  bool is_dtype = false;  ///< a dtype global (v3), not a storage class (v2)
};
[[nodiscard]] std::optional<torch_name> torch_name_of(codec::dtype d) noexcept;

/// Runs a pickle. Strings view `pickle`, which must outlive the program.
/// Errors (contexts "offset N: ..."): pickle_bad_opcode,
/// pickle_forbidden_global, pickle_malformed, unsupported_pytorch,
/// truncated, trailing_bytes, depth_exceeded, limit_exceeded.
[[nodiscard]] result<program, error> run(std::span<const std::byte> pickle, const limits& lim);

}  // namespace ferry::checkpoint::detail::pickle
