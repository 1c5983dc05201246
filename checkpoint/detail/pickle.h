// ferry/checkpoint/detail/pickle.h: INTERNAL. A pickle interpreter that
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
//   torch.{Double,Float,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage,
//   torch.UntypedStorage                             storage types
//   torch.{ComplexFloat,ComplexDouble,QUInt8,QInt8,QInt32,QUInt4x2,
//   QUInt2x4}Storage                                 storage types ferry
//                                                    cannot hold: a tensor
//                                                    over one is
//                                                    unknown_dtype
//   torch.{float8_e4m3fn,float8_e5m2,uint16,uint32,uint64}  dtypes (v3)
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
// (the memo is sparse: slot 2^32-16 costs what slot 0 does).
//
// Values live in an arena owned by the program: containers refer to each
// other by pointer, so shared and cyclic structures cost nothing to build
// or free. Consumers walking them bound their depth (a pickle can make a
// list contain itself).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
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
  std::int64_t i = 0;  ///< boolean (0, 1), integer
  double f = 0;        ///< floating
  /// string: the text (UTF-8 not yet checked); global: "module.name";
  /// storage: the key.
  std::string s;
  std::vector<value*> items;                       ///< tuple, list
  std::vector<std::pair<value*, value*>> entries;  ///< dict, in insertion order

  // global
  global_kind g = global_kind::ordered_dict;
  /// global (storage type, dtype), storage, tensor: the element type; none
  /// for a storage type ferry cannot hold (complex, quantized).
  std::optional<codec::dtype> dtype;
  bool untyped = false;  ///< global, storage: torch.UntypedStorage (numel in bytes)

  // storage
  const value* type = nullptr;  ///< storage, tensor: the storage type global
  std::uint64_t numel = 0;      ///< storage: elements (bytes if untyped)

  // tensor
  const value* storage = nullptr;
  std::uint64_t offset = 0;  ///< in elements
  std::vector<std::uint64_t> shape, strides;
};

struct program {
  /// Every value the program made; pointers into it stay valid while the
  /// program lives (it is moved by its unique_ptr).
  std::unique_ptr<std::deque<value>> arena = std::make_unique<std::deque<value>>();
  const value* root = nullptr;
  /// Distinct storages in order of first appearance.
  std::vector<const value*> storages;
};

/// Runs a pickle. Errors (contexts "offset N: ..."): pickle_bad_opcode,
/// pickle_forbidden_global, pickle_malformed, unsupported_pytorch,
/// truncated, trailing_bytes, depth_exceeded, limit_exceeded.
[[nodiscard]] result<program, error> run(std::span<const std::byte> pickle, const limits& lim);

}  // namespace ferry::checkpoint::detail::pickle
