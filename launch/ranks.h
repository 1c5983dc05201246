// ferry-run's ranks: starting them on this machine, relaying what they
// print line by line, and stopping the others when one fails or when
// ferry-run is told to stop (INTERNAL to ferry-run).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ferry::launch {

struct rank_process {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;             // read ends of the rank's stdout and stderr
  std::string out_partial, err_partial;  // text after the last line end
  std::optional<int> status;          // exit status once reaped
};

/// From now on SIGINT, SIGTERM and SIGHUP are noted for watch_ranks() (which
/// forwards them to the ranks) instead of ending ferry-run, and SIGPIPE is
/// ignored: a closed output must not kill the launcher before its ranks.
void catch_stop_signals();

/// Starts `nproc` ranks of `command` (a program found on PATH and its
/// arguments), ranks node_rank * nproc .. + nproc - 1, each with RANK and
/// LOCAL_RANK set, in its own process group, killed if ferry-run dies, its
/// stdout and stderr piped to ferry-run. The rest of the environment is
/// ferry-run's. Throws std::runtime_error ("pipe: ...", "fork: ...") when
/// a rank cannot be started.
std::vector<rank_process> start_ranks(std::vector<std::string> command, int nproc, int node_rank);

/// Relays the ranks' output (each line prefixed with "[rank] " unless
/// no_prefix) until every rank has ended. When a rank fails, the others get
/// `grace` seconds to exit by themselves, then SIGTERM, then SIGKILL two
/// seconds later; a stop signal is forwarded to the ranks (a second one
/// kills them). Returns ferry-run's exit status: the failed rank's (128 +
/// signal for a signal), 128 + the signal forwarded, or 0.
int watch_ranks(std::vector<rank_process>& ranks, double grace, bool no_prefix);

}  // namespace ferry::launch
