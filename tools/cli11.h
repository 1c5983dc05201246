// tools/cli11.h: how ferry's programs read their command line with CLI11
// (ferry, ferry-run, ferry-train; for the last two the CMake target
// ferry_cli11 gives CLI11 and this header). A repeated option's last value
// wins and --help shows defaults; --help (of the program or a subcommand)
// and --version print to stdout and exit 0; a usage error is one line on
// stderr, "<program>: <what> (see <program> --help)", and exit status 2.
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
/// main() to return at once (0 after --help or --version, 2 after a usage
/// error).
[[nodiscard]] inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // the help of the subcommand asked, if any
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const char* name = app.get_name().c_str();
    std::fprintf(stderr, "%s: %s (see %s --help)\n", name, e.what(), name);
    return 2;
  }
  return std::nullopt;
}

}  // namespace ferry::tools
