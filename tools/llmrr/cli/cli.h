// Small helpers shared by the llmrr subcommands: argument parsing with the house exit
// codes, error printing, human-readable sizes.
//
// Exit codes everywhere: 0 ok / same, 1 runs differ, 2 bad input or usage, 3 internal error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "llmrr/format/status.h"

namespace llmrr::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDiffer = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

// Parses argv (argv[0] is the subcommand name). Returns -1 when the command should run;
// otherwise the exit code to return right away: 0 after --help (printed to stdout), 2 after
// a usage error (printed to stderr with a hint to --help).
int parse(CLI::App& app, int argc, char** argv);

// Exit code for a status: 0 ok, 2 bad input or environment, 3 internal error.
int exit_code(const Status& status);

// Prints "llmrr <command>: error: <code name> (<number>): <message>" as one line on stderr
// (newlines in the message are replaced) and returns exit_code(status).
int report(std::string_view command, const Status& status);

// Prints "llmrr <command>: warning: <text>" on stderr.
void warn(std::string_view command, std::string_view text);

// A CLI11 check for an unsigned option (--seed): "-1" is refused ("expected an integer >= 0,
// found -1") instead of wrapping around to 2^64 - 1.
CLI::Validator non_negative();

// "0 B", "512 B", "1.5 KiB", "12.3 MiB", "2.0 GiB".
std::string human_bytes(uint64_t bytes);

// `--request R` (the same id in both traces) or `RA:RB` (A's id, B's id): request ids are
// decimal, at most 19 digits. Errors name the option and the text.
Result<std::pair<uint64_t, uint64_t>> parse_request_pair(const std::string& text);

// "1.00", "12.3", "1234" — a ratio or average with 3 significant digits.
std::string human_number(double v);

// Parses "A:B", "A:", ":B", "A" into an inclusive range; false on malformed input.
bool parse_range(std::string_view text, int64_t* first, int64_t* last);

}  // namespace llmrr::cli
