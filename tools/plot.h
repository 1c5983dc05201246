// ferry plot: ferry-train's metrics (JSON lines) as an SVG of its loss and
// accuracy curves.
#pragma once

#include <string>

#include "ferry/base/error.h"

namespace ferry::tools {

/// Reads `metrics` (the records of ferry-train --metrics: "step" records
/// with epoch, step, steps, global_step, loss; "epoch" records with epoch,
/// train_loss, train_acc, test_acc) and writes an SVG with two panels,
/// loss against epochs and accuracy against epochs, axes labelled.
/// Records repeated by a resumed run replace the earlier ones. Errors:
/// io_error, tools_errc::bad_metrics (tools/error.h) naming the line that is not a
/// metrics record.
[[nodiscard]] result<void, error> plot(const std::string& metrics, const std::string& svg);

}  // namespace ferry::tools
