// ferry/checkpoint/error.h: the error codes of checkpoints (checkpoint/).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next free
// number of the 400..499 block. Failures every format shares are
// ferry::errc: truncated (a file cut short, or under 9 bytes), unsupported_version,
// bad_byte_order, duplicate_key (a tensor or metadata name twice),
// trailing_bytes, limit_exceeded (a limits field), checksum_mismatch and
// io_error (with the OS's errno). A dtype code or name that does not exist
// is codec_errc::unknown_dtype. checksum_mismatch is always CRC32C (.ferry);
// a .pt file's zip CRC-32 is crc32_mismatch.
//
// Functions that take or give a file return result<T, error>, whose context
// names the file and, where there is one, the tensor: "model.ferry: tensor
// 'fc.weight'".
#pragma once

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_CHECKPOINT_ERRORS(X)                                                                         \
  X(not_a_checkpoint, 400, "neither a ferry checkpoint or set, a safetensors, PyTorch .pt, NumPy .npy/.npz nor GGUF file") \
  X(bad_alignment, 401, "alignment is not a power of two in the allowed range")                            \
  X(bad_layout, 402, "storages overlap, leave a gap, or lie outside the data area")                        \
  X(view_out_of_bounds, 403, "tensor view reaches past the end of its storage")                            \
  X(bad_storage_reference, 404, "tensor refers to a storage that does not exist")                          \
  X(shape_overflow, 405, "shape or byte count overflows 64 bits")                                          \
  X(shape_size_mismatch, 406, "tensor byte count disagrees with its shape and dtype")                      \
  X(bad_name, 407, "name is empty, too long or not valid UTF-8")                                           \
  X(tensor_not_found, 408, "no tensor of this name")                                                       \
  X(header_too_large, 409, "safetensors header length exceeds the limit")                                 \
  X(bad_json, 410, "safetensors header is not JSON of the specified grammar")                              \
  X(bad_metadata, 411, "metadata is not a map of strings to strings")                                      \
  X(shared_storage, 412, "tensors share storage, which safetensors cannot express")                        \
  X(element_size_mismatch, 413, "tensors over one storage have different element sizes or byte-order units") \
  X(storage_too_large, 414, "storage does not fit this machine's address space")                           \
  X(header_mismatch, 415, "the file's header and trailer disagree")                                        \
  X(bad_padding, 416, "padding between storages is not zero")                                             \
  X(bad_utf8, 417, "text that must be UTF-8 is not")                                                      \
  X(pickle_forbidden_global, 418, "not on the allowed list: ferry runs no pickle code")                   \
  X(pickle_bad_opcode, 419, "pickle opcode that ferry does not interpret")                                \
  X(pickle_malformed, 420, "pickle does not describe a state dict of tensors")                            \
  X(unsupported_pytorch, 421, "a kind of PyTorch file that ferry does not read")                          \
  X(zip_malformed, 422, "zip structure is inconsistent")                                                  \
  X(unsupported_zip_feature, 423, "zip feature that ferry does not read (only stored, and in .npz deflated, records)")           \
  X(record_not_found, 424, "the zip has no record of this name")                                          \
  X(crc32_mismatch, 425, "zip CRC-32 does not match the record's bytes")                                 \
  X(bad_shard, 426, "a shard is missing, from another save, or disagrees with the set's index")          \
  X(bad_pieces, 427, "a tensor's pieces overlap, leave a hole, or reach past it")                         \
  X(bad_index, 428, "a checkpoint set's index breaks a rule of its format")                               \
  X(bad_npy_header, 429, ".npy header is not a dictionary of the specified grammar")                        \
  X(unsupported_npy_dtype, 430, "a NumPy dtype ferry does not hold (structured, object, ...)")     \
  X(bad_deflate, 431, "deflated zip record does not inflate to exactly its declared size")  \
  X(unknown_ggml_type, 432, "ggml tensor type number that ggml does not define, or has removed")           \
  X(bad_gguf_value_type, 433, "GGUF metadata value type number that GGUF does not define")                 \
  X(misaligned_tensor, 434, "tensor data does not start on a multiple of the file's alignment")           \
  X(out_of_memory, 435, "the machine has not the memory to hold the storage")
FERRY_DEFINE_ERRORS(checkpoint_errc, FERRY_CHECKPOINT_ERRORS);

}  // namespace ferry
