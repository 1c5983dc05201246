// tools/cli11.h: how ferry's programs read their command line with CLI11
// (ferry-run, ferry-train; the CMake target ferry_cli11 gives CLI11 and this
// header). A repeated option's last value wins and --help shows defaults;
// --help prints to stdout and exits 0; a usage error is one line on stderr,
// "<program>: <what> (see --help)", and exit status 2.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

namespace ferry::tools {

/// Sets the option defaults ferry's programs share. Call before adding options.
inline void share_option_defaults(CLI::App& app) {
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

/// Parses argv into `app`. nullopt: go on; otherwise the exit status for
/// main() to return at once (0 after --help, 2 after a usage error).
[[nodiscard]] inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace ferry::tools
