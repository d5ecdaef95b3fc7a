// Output integrity and checked integers for every `fcp` command (issue 18):
// a write error on stdout ends in exit 2 with an `error:` line instead of a
// silent exit 0; integer flags are decimal and range-checked instead of
// wrapping (`--degrees 4294967298` became 2).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "fcp/types.h"

namespace fcp::cli {
namespace {

bool stdout_was_closed = false;

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

}  // namespace

void ReserveStandardStreams() {
  // A closed descriptor 0, 1 or 2 would be taken by the next file the command
  // opens, and stdout text would land in it. Fill the gaps: stdin and stderr
  // with /dev/null, stdout with /dev/full so that writing to it fails (and
  // FinishStdout reports it) instead of vanishing.
  for (int fd = 0; fd <= 2; ++fd) {
    if (IsOpen(fd)) continue;
    if (fd == STDOUT_FILENO) stdout_was_closed = true;
    const char* path = fd == STDOUT_FILENO ? "/dev/full" : "/dev/null";
    int got = ::open(path, fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (got < 0) got = ::open("/dev/null", O_RDWR);
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
  }
}

int FinishStdout(int exit_code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout)) return exit_code;
  std::string why = stdout_was_closed ? "stdout is closed"
                    : error != 0      ? std::strerror(error)
                                      : "write error";
  std::fprintf(stderr, "error: stdout: output lost: %s\n",
               EscapeForMessage(why).c_str());
  return exit_code == 0 ? 2 : exit_code;
}

std::string IntegerFlagError(std::string& text, bool is_unsigned) {
  // Decimal only: CLI11 converts with strtoll(base 0), which reads "010" as
  // 8 and "0x10" as 16, and saturates on overflow. Normalise to plain decimal
  // digits CLI11 then reads exactly; it checks the target type's width.
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return "must be a decimal integer, got '" + EscapeForMessage(text) + "'";
  }
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  if (is_unsigned && negative && digits != "0")
    return "must be >= 0, got '" + EscapeForMessage(text) + "'";
  const std::string normalised =
      (negative && digits != "0" ? "-" : "") + std::string(digits);
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(
      normalised.data(), normalised.data() + normalised.size(), value);
  if (ec != std::errc() || ptr != normalised.data() + normalised.size()) {
    uint64_t unsigned_value = 0;
    const auto [uptr, uec] =
        std::from_chars(normalised.data(),
                        normalised.data() + normalised.size(), unsigned_value);
    if (!is_unsigned || uec != std::errc() ||
        uptr != normalised.data() + normalised.size()) {
      return "integer out of range: '" + EscapeForMessage(text) + "'";
    }
  }
  text = normalised;
  return "";
}

void RequireDecimalIntegers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    const bool is_unsigned = type == "UINT";
    option->transform(CLI::Validator(
        [is_unsigned](std::string& text) {
          return IntegerFlagError(text, is_unsigned);
        },
        "", "decimal integer"));
  }
}

int64_t ParseInteger(std::string_view text, const std::string& field,
                     int64_t lo, int64_t hi) {
  std::string copy(text);
  const std::string error = IntegerFlagError(copy, /*is_unsigned=*/false);
  if (!error.empty()) throw InputError(field, error);
  int64_t value = 0;
  std::from_chars(copy.data(), copy.data() + copy.size(), value);
  if (value < lo || value > hi) {
    throw InputError(field, "must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + copy);
  }
  return value;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

std::vector<int64_t> ParseIntegerList(const std::string& text,
                                      const std::string& field, int64_t lo,
                                      int64_t hi) {
  std::vector<int64_t> out;
  for (const std::string& item : SplitList(text))
    out.push_back(ParseInteger(item, field, lo, hi));
  return out;
}

std::vector<double> ParseNumberList(const std::string& text,
                                    const std::string& field) {
  std::vector<double> out;
  for (const std::string& item : SplitList(text)) {
    size_t pos = 0;
    double x = 0;
    try {
      x = std::stod(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != item.size())
      throw InputError(field, "'" + item + "' is not a number");
    out.push_back(x);
  }
  return out;
}

}  // namespace fcp::cli
