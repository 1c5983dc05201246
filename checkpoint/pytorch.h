// ferry/checkpoint/pytorch.h: PyTorch `.pt` files (torch.save's zip format,
// PyTorch 1.6 on), read by checkpoint::open() (reader.h) without running
// them, and written by save_pt() (WRITING, at the end: a state dict that
// torch.load(weights_only=True) reads). docs/checkpoint-format.md
// repeats these rules for people writing another decoder; MUST and MAY as
// in RFC 2119, the error of a broken rule in brackets.
//
// CONTAINER: a zip (zip/zip.h gives every field checked). torch.save
// writes records stored (method 0), each record's data on a 64-byte
// boundary (its local header padded by an extra field of id 0x4246, "FB"),
// ZIP64 end records, and sizes and CRC-32 after the data (flag bit 3);
// other writers (Python's zipfile) MAY omit the padding and ZIP64. Only
// stored, unencrypted records are read [unsupported_zip_feature: nothing
// is ever inflated]; records MUST NOT overlap [zip_malformed].
//
// RECORDS. Every name MUST lie in the folder P of the first record (the
// saved file's name less its extension, or `archive` for a stream); the
// whole name, P included, MUST have no empty, "." or ".." segment (so no
// leading '/'), no '\' and no NUL, each name once
// [zip_malformed]. A zip without a `P/data.pkl` record is not a .pt file
// [not_a_checkpoint]; one with `P/constants.pkl` or records under `P/code/`
// is a TorchScript archive [unsupported_pytorch], told before any record's
// method is looked at (torch.jit.save deflates its code).
//   P/data.pkl          the pickle (pytorch/pickle.h), protocol 2 from
//                       torch.save (3 to 5 accepted), at most
//                       limits::max_pickle_bytes [limit_exceeded]
//   P/data/<key>        one storage's bytes, in the writer's byte order
//   P/byteorder         since PyTorch 2.1: "little" or "big" exactly
//                       [bad_byte_order]; absent: read_options::
//                       pytorch_order, else little
//   P/version, P/.data/version, P/.data/serialization_id,
//   P/.format_version, P/.storage_alignment   not interpreted
// A file starting with a pickle of the number 0x1950a86a20f9469cfc6c (in
// protocol 2 or 3: 80 0p 8A 0A 6C FC 9C 46 F9 20 6A A8 50 19; 4 or 5: the
// same after a FRAME, 80 0p 95 and 8 bytes; 0 or 1: the text
// "L119547037146038801333356L\n") is a legacy torch.save file (before 1.6,
// or _use_new_zipfile_serialization=False; not a zip) [unsupported_pytorch].
//
// TENSORS. The pickle's persistent id ('storage', T, key, location, numel)
// names record `P/data/<key>`, which MUST exist [record_not_found] and hold
// exactly numel elements of T's size (numel bytes for UntypedStorage)
// [shape_size_mismatch]. A tensor views its storage at offset, size and
// stride, all in elements, through check_view() [view_out_of_bounds,
// shape_overflow, limit_exceeded]. Tensors over one key share one storage
// (tied weights stay tied); an UntypedStorage takes the element type of
// its first tensor, and every tensor over a storage MUST have its element
// size [element_size_mismatch]. A storage of a type ferry cannot hold
// (quantized) is codec_errc::unknown_dtype naming the tensor. The
// storage class is torch.UntypedStorage or, as torch.save writes it
// since 2.0, torch.storage.UntypedStorage; pytorch/pickle.h lists every
// dtype.
// Offsets that are not a multiple of the element size (a zip rewritten
// without padding) are read into aligned memory; aligned storages in the
// host's order are mapped, zero-copy. No CRC is checked when fetching, as
// torch.load checks none; verify() checks every record's CRC-32
// [crc32_mismatch], and reports records whose CRC field is 0 (saved with
// compute_crc32=False) as unchecked (storage_info::crc32 empty).
//
// NAMES. The pickle's value is flattened into names joined by '.':
//   - dicts (OrderedDict too) are walked, keys str or int (in decimal)
//     [pickle_malformed for other keys]; an empty dict below the root is
//     the metadata "{}", an empty root dict (an empty state dict) gives no
//     names: a file with no tensors is a checkpoint of metadata only;
//   - a tensor is a tensor named by its path;
//   - lists and tuples holding a tensor somewhere are walked, indices as
//     names; those holding none, and every other value (int, float, bool,
//     None, str), are metadata under their path, as JSON: floats with 17
//     significant digits (NaN, Infinity and -Infinity as Python's json
//     writes them), str as JSON strings, dicts inside as objects;
//   - a root that is neither a dict nor a list or tuple holding a tensor
//     is named "root" (a tensor, or metadata: torch.save([1, 2.5, "x"])
//     gives the metadata root = [1,2.5,"x"]);
//   - metadata "pytorch.byteorder" says where the order came from:
//     "little" or "big" (the record) or "absent";
//   - metadata "pytorch.raw_dtypes", only in a file with tensors of the
//     torch.bits* dtypes (bits PyTorch gives no meaning; read as U8, U16
//     for bits16): a JSON object of each such tensor's name and its dtype
//     ("torch.bits16").
// A name twice (tensor or metadata) is duplicate_key; a name over
// limits::max_name_bytes or not UTF-8 is bad_name; a structure that
// contains itself is pickle_malformed. Shared references are walked once
// per path, so their cost is bounded before anything is written out:
// tensors by limits::max_tensors, metadata text by
// limits::max_metadata_bytes [limit_exceeded], nesting by
// limits::max_pickle_depth [depth_exceeded].
//
// WRITING (save_pt). The file torch.save(state_dict) writes, but for the
// container: a plain dict (not an OrderedDict) of the tensors by name, in
// order, in a zip of stored records named
// archive/...: data.pkl (a protocol 2 pickle), byteorder ("little"),
// data/<k> for each storage k = 0, 1, ... in order of first use, version
// ("3\n"); each record's data on a 64-byte boundary (zip/zip.h's
// writer), CRC-32s in the headers, ZIP64 where sizes need it. Storages are
// written little-endian on every host. Refs whose storage spans are equal
// (same address and size) share one storage where torch lets them (one
// dtype with a storage class; or dtypes without one, such as float8 views
// of one buffer, of one element size and byte-swap unit), each keeping its
// offset, shape and strides (tied weights stay tied, views stay views);
// other refs over one span get a copy each. Offsets and strides MUST be
// below 2^63 (a pickle's integers are signed) [shape_overflow].
// A dtype with a torch storage class (FloatStorage...: f64 f32 f16 bf16
// i64 i32 i16 i8 u8 bool c64 c128) is written as torch.save writes it,
// _rebuild_tensor_v2 over that class, which every torch since 1.6 reads;
// the others (u16 u32 u64 f8_* c32) as torch 2.x writes them,
// _rebuild_tensor_v3 over a torch.storage.UntypedStorage with the dtype
// global (torch.uint16...), which torch 1.13 cannot read (it has neither
// those dtypes nor v3). Metadata is not written: a state dict holds
// tensors only (so a .pt's torch.bits* tensors, read as U8/U16 with their
// names in "pytorch.raw_dtypes", are written back as uint8/uint16).
#pragma once

#include "ferry/checkpoint/reader.h"

#include <filesystem>
#include <span>

#include "ferry/checkpoint/options.h"
#include "ferry/checkpoint/tensor.h"

namespace ferry::checkpoint {

/// How save_pt() writes.
struct pt_options {
  bool sync = true;    ///< fsync on commit (write_options::sync)
  bool direct = true;  ///< around the page cache (write_options::direct)
  checkpoint::limits limits;
};

/// Writes `tensors` as a .pt file (WRITING above), atomically
/// (base::atomic_file): the target keeps its old content on any error.
/// Errors, each naming the file (and the tensor, but for limit_exceeded on
/// the count and io_error): bad_name, duplicate_key, shape_size_mismatch
/// (a storage that is not whole elements), view_out_of_bounds,
/// shape_overflow, limit_exceeded, io_error; and unknown_dtype for a dtype
/// torch has no name for, which no ferry dtype is today.
[[nodiscard]] result<void, error> save_pt(const std::filesystem::path& target, std::span<const tensor_ref> tensors,
                                          const pt_options& opt = {});

}  // namespace ferry::checkpoint
