// Issue 18 regressions of the readers and writers: escaped one-line errors,
// NUL bytes, streaming parse (same result as a whole-document parse), inputs
// that are directories, FIFOs or too large, cost-model files with extra keys,
// output files that cannot be written completely.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/types.h"
#include "testing/temp_dir.h"

namespace fcp {
namespace {

namespace fs = std::filesystem;

template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

// True if `s` is valid UTF-8 without C0 controls or DEL: what a terminal can
// show on one line.
bool IsOneLinePrintable(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    size_t len = c < 0x80    ? 1
                 : c >= 0xf0 ? 4
                 : c >= 0xe0 ? 3
                 : c >= 0xc2 ? 2
                             : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    // C1 controls (U+0080..U+009F) are C2 80..C2 9F.
    if (c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) return false;
    i += len;
  }
  return true;
}

using testing::TempDir;

// `name` inside `dir`, as the string the readers and writers take.
std::string In(const TempDir& dir, const std::string& name) {
  return (dir.path() / name).string();
}

TEST(EscapeTest, ControlCharactersBecomeVisible) {
  EXPECT_EQ(EscapeForMessage("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(EscapeForMessage(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(EscapeForMessage("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");
  EXPECT_EQ(EscapeForMessage("\xc2\x9b"
                             "2J"),
            "\\u009b2J");  // C1 CSI
  EXPECT_EQ(EscapeForMessage("line\xe2\x80\xa8sep"), "line\\u2028sep");
  EXPECT_EQ(EscapeForMessage("bidi\xe2\x80\xaeoverride"),
            "bidi\\u202eoverride");
  EXPECT_EQ(EscapeForMessage("bad \xff\xfe utf8 \xc3\x28"),
            "bad \\xff\\xfe utf8 \\xc3(");
  EXPECT_EQ(EscapeForMessage("overlong \xc0\xaf"), "overlong \\xc0\\xaf");
  // Printable text, backslashes and valid UTF-8 stay as they are.
  EXPECT_EQ(EscapeForMessage("qwen3-8b \\n caf\xc3\xa9 \xe2\x82\xac"),
            "qwen3-8b \\n caf\xc3\xa9 \xe2\x82\xac");
}

TEST(EscapeTest, RandomBytesGiveOneIdempotentLine) {
  std::mt19937 rng(18);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const std::string once = EscapeForMessage(s);
    EXPECT_TRUE(IsOneLinePrintable(once)) << once;
    EXPECT_EQ(EscapeForMessage(once), once);
  }
}

TEST(EscapeTest, LongTextsAreCutOnce) {
  const std::string once = EscapeForMessage(std::string(100000, '\n'));
  EXPECT_LT(once.size(), 4200u);
  EXPECT_NE(once.find("[truncated]"), std::string::npos);
  EXPECT_EQ(EscapeForMessage(once), once);
}

TEST(EscapeTest, InputErrorIsOneLine) {
  const InputError e("model\n", "unknown preset \"a\r\x1b[2Jb\"");
  EXPECT_STREQ(e.what(), "model\\n: unknown preset \"a\\r\\x1b[2Jb\"");
  EXPECT_EQ(e.field(), "model\\n");
  // Re-wrapping an escaped message does not escape it again.
  EXPECT_STREQ(InputError::FromMessage(e.what()).what(), e.what());
  const std::string msg = ErrorOf([] {
    ParseBatchJson("{\"model\": \"a\\nb\\u001b\", \"sequences\": [1]}");
  });
  EXPECT_TRUE(IsOneLinePrintable(msg)) << msg;
  EXPECT_NE(msg.find("a\\nb\\x1b"), std::string::npos) << msg;
}

TEST(StreamingParseTest, NulByteEndsNothingSilently) {
  // nlohmann's lexer stops at NUL: `{...}\0garbage` was accepted.
  const std::string text("{\"sequences\": [5]}\0garbage", 26);
  const std::string msg = ErrorOf([&] { ParseBatchJson(text); });
  EXPECT_EQ(msg, "input: NUL byte at offset 18 (JSON text cannot contain one)");
  EXPECT_NE(ErrorOf([&] {
              ParseCostModelJson(std::string("{}\0", 3), CostModel{});
            }).find("NUL byte"),
            std::string::npos);
}

// Oracle: nlohmann's whole-document parse of the same text.
TEST(StreamingParseTest, SameSequencesAsAWholeDocumentParse) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    nlohmann::json doc;
    doc["cluster"] = {{"ranks", 16 + rng() % 64},
                      {"ranks_per_node", 1 + rng() % 8}};
    nlohmann::json seqs = nlohmann::json::array();
    const int k = 1 + static_cast<int>(rng() % 50);
    for (int i = 0; i < k; ++i) {
      const int64_t len = 1 + static_cast<int64_t>(rng() % 100000);
      switch (rng() % 4) {
        case 0:
          seqs.push_back(len);
          break;
        case 1:
          seqs.push_back(
              {{"length", len}, {"attention", rng() % 2 ? "full" : "causal"}});
          break;
        case 2:
          seqs.push_back({{"eta", (rng() % 101) / 100.0}, {"length", len}});
          break;
        default:
          seqs.push_back(static_cast<double>(len));
          break;
      }
    }
    // "sequences" first or last: the streaming path must not depend on order.
    if (rng() % 2) doc["sequences"] = seqs;
    doc["model"] = "qwen3-8b";
    if (!doc.contains("sequences")) doc["sequences"] = seqs;
    const BatchInput in = ParseBatchJson(doc.dump(rng() % 2 ? -1 : 2));
    ASSERT_EQ(in.request.sequences.size(), seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const nlohmann::json& s = seqs[i];
      const int64_t want_len = s.is_object()
                                   ? s["length"].get<int64_t>()
                                   : static_cast<int64_t>(s.get<double>());
      double want_eta = 0;
      if (s.is_object() && s.contains("eta")) want_eta = s["eta"].get<double>();
      if (s.is_object() && s.contains("attention"))
        want_eta = s["attention"] == "full" ? 1 : 0;
      EXPECT_EQ(in.request.sequences[i].length_tokens, want_len) << i;
      EXPECT_EQ(in.request.sequences[i].eta, want_eta) << i;
    }
    EXPECT_EQ(in.request.cluster.num_ranks, doc["cluster"]["ranks"].get<int>());
  }
}

TEST(StreamingParseTest, ErrorOrderIsThatOfAWholeDocumentParse) {
  // A bad sequence before a bad cluster: the cluster is reported, as before.
  EXPECT_EQ(ErrorOf([] {
              ParseBatchJson(R"({"sequences": [0], "cluster": {"ranks": 0}})");
            }).substr(0, 14),
            "cluster.ranks:");
  // A bad sequence before a syntax error: the syntax error is reported.
  EXPECT_NE(ErrorOf([] {
              ParseBatchJson(R"({"sequences": [0, 1] x})");
            }).find("invalid JSON"),
            std::string::npos);
  // The first bad sequence is the one named.
  EXPECT_EQ(ErrorOf([] {
              ParseBatchJson(R"({"sequences": [1, -3, 0]})");
            }).substr(0, 13),
            "sequences[1]:");
  EXPECT_EQ(ErrorOf([] { ParseBatchJson(R"({"sequences": []})"); }),
            "sequences: must not be empty");
  EXPECT_EQ(ErrorOf([] { ParseBatchJson(R"({"sequences": {"a": 1}})"); }),
            "sequences: must be an array, got object");
}

TEST(StreamingParseTest, BoundedOutsideSequences) {
  // Values outside "sequences" build a DOM; it is capped at 2^16 values.
  std::string big = "{\"cost_model\": [";
  for (int i = 0; i < 70000; ++i) big += "1,";
  big += "1], \"sequences\": [1]}";
  EXPECT_NE(ErrorOf([&] {
              ParseBatchJson(big);
            }).find("cost_model: more than 65536 JSON values"),
            std::string::npos);
  // A nested element of "sequences" may not grow without bound either.
  std::string nested = "{\"sequences\": [[";
  for (int i = 0; i < 70000; ++i) nested += "1,";
  nested += "1]]}";
  EXPECT_NE(
      ErrorOf([&] {
        ParseBatchJson(nested);
      }).find("sequences[0]: more than 65536 JSON values in one sequence"),
      std::string::npos);
  // Sequences themselves are not limited by that cap.
  std::string many = "{\"sequences\": [";
  for (int i = 0; i < 100000; ++i) many += "{\"length\": 3},";
  many += "7]}";
  EXPECT_EQ(ParseBatchJson(many).request.sequences.size(), 100001u);
}

TEST(StreamingParseTest, CostModelFileRejectsUnknownKeysBesideCostModel) {
  const std::string cm = CostModelToJson(
      CostModel{1e-11, 1e-6, 1e-3, 1e5, 1e-4, 2e11, 5e10, 5e5, 2e10, 6.4e10});
  EXPECT_EQ(ErrorOf([&] {
              ParseCostModelJson("{\"cost_model\": " + cm + ", \"alpha1\": 5}",
                                 {});
            }).substr(0, 8),
            "alpha1: ");
  EXPECT_EQ(ErrorOf([&] {
              ParseCostModelJson("{\"cost_model\": " + cm + ", \"bogus\": 1}",
                                 {});
            }).substr(0, 7),
            "bogus: ");
  // The keys of an `fcp profile` report are accepted, with their types.
  EXPECT_EQ(ErrorOf([&] {
              ParseCostModelJson(
                  "{\"target\": \"sim:x\", \"samples\": 40, \"cost_model\": " +
                      cm + "}",
                  {});
            }),
            "<no error>");
  EXPECT_EQ(ErrorOf([&] {
              ParseCostModelJson(
                  "{\"samples\": \"many\", \"cost_model\": " + cm + "}", {});
            }),
            "samples: must be a non-negative integer, got string");
}

TEST(InputFileTest, DirectoryFifoAndSize) {
  TempDir dir;
  const std::string root = dir.path().string();
  EXPECT_EQ(ErrorOf([&] { ReadFileOrStdin(root); }),
            root + ": is a directory, not a file");
  EXPECT_EQ(ErrorOf([&] { ReadBatchJson(root); }),
            root + ": is a directory, not a file");
  EXPECT_NE(ErrorOf([&] {
              ReadBatchJson(In(dir, "missing.json"));
            }).find("cannot open: No such file"),
            std::string::npos);

  // A FIFO has no size; it is read to its end (as /dev/stdin from a pipe).
  const std::string fifo = In(dir, "batch.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer(
      [&] {
        std::ofstream(fifo)
            << R"({"cluster": {"ranks": 8}, "sequences": [4096, 17]})";
      });
  const BatchInput in = ReadBatchJson(fifo);
  writer.join();
  EXPECT_EQ(in.request.sequences.size(), 2u);
  EXPECT_EQ(in.request.cluster.num_ranks, 8);

  // A sparse file just over 2 GiB is refused by its size, without reading it.
  const std::string big = In(dir, "big.json");
  {
    const int fd = ::open(big.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, (off_t{1} << 31) + 1), 0);
    ::close(fd);
  }
  EXPECT_EQ(ErrorOf([&] { ReadBatchJson(big); }), big + ": larger than 2 GiB");
}

TEST(OutputFileTest, WritesOrFailsWithoutLeavingAPartialFile) {
  TempDir dir;
  const std::string path = In(dir, "out.json");
  WriteTextFile(path, "{\"a\": 1}\n");
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}),
            "{\"a\": 1}\n");

  EXPECT_NE(ErrorOf([] {
              WriteTextFile("/dev/full", "x");
            }).find("/dev/full: cannot write '/dev/full': No space"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              WriteTextFile(In(dir, "no/such/dir/x"), "x");
            }).find("cannot write"),
            std::string::npos);

  // A write cut short (file size limit, as a full disk would): an error and
  // no partial file. Run in a child so the limit does not stay.
  const std::string partial = In(dir, "partial.json");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 3;
    try {
      WriteTextFile(partial, std::string(1000, 'x'));
    } catch (const InputError& e) {
      code = std::string(e.what()).find("cannot write") != std::string::npos
                 ? 0
                 : 4;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(partial));

  // An existing file survives a failed write (the policy of AtomicFile).
  { std::ofstream(partial) << "old"; }
  const pid_t again = ::fork();
  ASSERT_GE(again, 0);
  if (again == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      WriteTextFile(partial, std::string(1000, 'x'));
    } catch (const InputError&) {
      ::_exit(0);
    }
    ::_exit(3);
  }
  ASSERT_EQ(::waitpid(again, &status, 0), again);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream old_file(partial);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old_file), {}), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()),
                          fs::directory_iterator{}),
            2)
      << "a temporary file was left behind";
}

}  // namespace
}  // namespace fcp
