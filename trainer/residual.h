// ferry/trainer/residual.h: error-feedback residuals (comm/: what bf16/f16
// compression left out of each rank's gradient, added to its next one)
// carried from a checkpoint to a job of another size.
//
// A residual belongs to a rank: it is the part of that rank's gradients the
// compressed allreduce has not delivered yet. The averaged gradient is the
// mean over ranks, so what the job as a whole still owes its parameters is
// the mean of the residuals. On resume with the same number of ranks each
// rank takes its own row back. With another number, every new rank starts
// from the mean of the saved rows: the first averaged gradient receives
// exactly the mean the saved ranks owed (nothing lost, nothing counted
// twice), and every rank starts from the same values. The mean is summed in
// rank order in double and rounded once, so it has the same bits on every
// host.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace ferry::trainer {

/// The residuals of `new_world` ranks (rank-major, `columns` each) from a
/// checkpoint's `saved` table of `saved_world` rows: the rows themselves
/// when the worlds are equal, else the mean row for every rank.
// Requires: saved.size() == saved_world * columns, saved_world > 0.
[[nodiscard]] std::vector<float> carry_residuals(std::span<const float> saved, std::size_t saved_world,
                                                 std::size_t columns, std::size_t new_world);

}  // namespace ferry::trainer
