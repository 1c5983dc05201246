// ferry/trainer/error.h: the error codes of the trainer (trainer/): its
// dataset decoder (IDX files, 500..519) and the training loop of
// ferry-train (train/, 520..).
//
// Numbers are stable (see ferry/base/error.h); new codes take the next free
// number of the 500..599 block: 500..519 the data decoders, 520.. the
// trainer. Failures every format shares are ferry::errc: bad_magic,
// truncated, trailing_bytes, limit_exceeded, size_mismatch, io_error.
#pragma once

#include "ferry/base/error.h"

namespace ferry {

#define FERRY_TRAINER_ERRORS(X)                                                            \
  X(bad_idx_type, 500, "IDX element type code is not one the format defines")              \
  X(bad_idx_dimensions, 501, "IDX dimension count or size is zero or out of range")        \
  X(bad_gzip, 502, "gzip stream is corrupt")                                               \
  X(count_mismatch, 503, "images and labels disagree on the number of samples")           \
  X(bad_label, 504, "label is not below the number of classes")                          \
  X(replica_mismatch, 520, "ranks' parameters or buffers are no longer identical")                \
  X(bad_checkpoint, 522, "checkpoint cannot be resumed by this run")                               \
  X(save_failed, 523, "checkpoint not published: a rank could not write its part")
FERRY_DEFINE_ERRORS(trainer_errc, FERRY_TRAINER_ERRORS);

}  // namespace ferry
