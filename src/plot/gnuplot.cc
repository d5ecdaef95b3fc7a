// gnuplot without a shell (include/fcp/plot.h): fork/exec with an argument
// vector, a private mkdtemp working directory holding the script and data
// under fixed names, the image on gnuplot's stdout into an AtomicFile.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "fcp/plot.h"

namespace fcp::plot {
namespace {

// A fresh directory from mkdtemp (mode 0700, never an existing one), removed
// with the files written through it.
class PrivateDir {
 public:
  PrivateDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/fcp-plot-XXXXXX";
    if (!::mkdtemp(templ.data()))
      throw PlotError("plot: cannot create a temporary directory: " +
                      std::string(std::strerror(errno)));
    path_ = templ;
  }
  ~PrivateDir() {
    for (const auto& name : files_) ::unlink((path_ + "/" + name).c_str());
    ::rmdir(path_.c_str());
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;

  // Creates `name` exclusively (O_EXCL | O_NOFOLLOW) and returns its fd.
  int Create(const std::string& name) {
    const int fd =
        ::open((path_ + "/" + name).c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      throw PlotError("plot: cannot create a temporary file: " +
                      std::string(std::strerror(errno)));
    files_.push_back(name);
    return fd;
  }
  void Write(const std::string& name, const std::string& contents) {
    const int fd = Create(name);
    size_t done = 0;
    while (done < contents.size()) {
      const ssize_t n =
          ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        throw PlotError("plot: cannot write a temporary file: " +
                        std::string(std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

bool SafeName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Images larger than this are refused (gnuplot's output is held in memory).
constexpr size_t kMaxImageBytes = size_t{1} << 30;

// Runs gnuplot with `args` (argv[0] added), in `cwd` (or here when empty),
// stdout to `out_fd` and stderr to `err_fd` (-1: /dev/null), or, with
// `captured`, stdout through a pipe into *captured (gnuplot ignores its own
// write errors, so fcp writes the image itself and sees every failure).
// Returns the wait status, or -1 when fork (or pipe) failed.
int RunGnuplotProcess(const std::vector<std::string>& args,
                      const std::string& cwd, int out_fd, int err_fd,
                      std::string* captured = nullptr) {
  int pipe_fds[2] = {-1, -1};
  if (captured) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
    out_fd = pipe_fds[1];
  }
  std::vector<std::string> storage = {"gnuplot"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (captured) ::close(pipe_fds[0]), ::close(pipe_fds[1]);
    return -1;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd < 0) ::_exit(127);
    ::dup2(null_fd, 0);
    ::dup2(out_fd >= 0 ? out_fd : null_fd, 1);
    ::dup2(err_fd >= 0 ? err_fd : null_fd, 2);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  if (captured) {
    ::close(pipe_fds[1]);
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (captured->size() + static_cast<size_t>(n) > kMaxImageBytes) {
        ::kill(pid, SIGKILL);  // reaped below; the caller sees the signal
        break;
      }
      captured->append(buf, static_cast<size_t>(n));
    }
    ::close(pipe_fds[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// The last non-empty line of gnuplot's stderr (its error message), escaped.
std::string LastLine(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1 << 16))
      text.append(buf, static_cast<size_t>(n));
    ::close(fd);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  const auto nl = text.rfind('\n');
  std::string line = nl == std::string::npos ? text : text.substr(nl + 1);
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return EscapeForMessage(line);
}

}  // namespace

std::string GnuplotQuote(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\'') {
      out += "''";
    } else if (u < 0x20 || u == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool GnuplotAvailable() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate =
        end > start ? dirs.substr(start, end - start) : std::string(".");
    candidate.append("/gnuplot");
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return true;
    start = end + 1;
  }
  return false;
}

std::string PngTerminal() {
  static const std::string terminal = [] {
    if (!GnuplotAvailable()) return std::string("png");
    const int status =
        RunGnuplotProcess({"-e", "set terminal pngcairo"}, "", -1, -1);
    return std::string(status >= 0 && WIFEXITED(status) &&
                               WEXITSTATUS(status) == 0
                           ? "pngcairo"
                           : "png");
  }();
  return terminal;
}

void RunGnuplot(const GnuplotJob& job, const std::string& out_path) {
  for (const auto& [name, contents] : job.data_files) {
    if (!SafeName(name) || name == "plot.gp" || name == "gnuplot.err")
      throw PlotError("plot: bad data file name '" + EscapeForMessage(name) +
                      "'");
  }
  if (job.terminal.find_first_of("\n\r;") != std::string::npos)
    throw PlotError("plot: bad terminal '" + EscapeForMessage(job.terminal) +
                    "'");
  // The destination first: a bad path is the user's error (exit 2) whether or
  // not gnuplot is installed.
  AtomicFile out(out_path, "plot");
  if (!GnuplotAvailable())
    throw PlotError(
        "plot: gnuplot not found on PATH (install gnuplot to draw figures)");
  PrivateDir dir;
  for (const auto& [name, contents] : job.data_files) dir.Write(name, contents);
  dir.Write("plot.gp",
            "set terminal " + job.terminal + "\n" + job.script + "\n");
  const int err_fd = dir.Create("gnuplot.err");
  std::string image;
  const int status =
      RunGnuplotProcess({"plot.gp"}, dir.path(), -1, err_fd, &image);
  ::close(err_fd);
  if (status < 0)
    throw PlotError("plot: cannot start gnuplot: " +
                    std::string(std::strerror(errno)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string why = LastLine(dir.path() + "/gnuplot.err");
    throw PlotError("plot: gnuplot failed" +
                    (WIFEXITED(status)
                         ? " (exit " + std::to_string(WEXITSTATUS(status)) + ")"
                         : std::string(" (killed by a signal)")) +
                    (why.empty() ? "" : ": " + why));
  }
  if (image.empty()) throw PlotError("plot: gnuplot wrote no image");
  // InputError (exit 2) on a short write, a full disk or a file-size limit;
  // the temporary file is removed and `out_path` left as it was.
  out.Write(image);
  out.Commit();
}

}  // namespace fcp::plot
