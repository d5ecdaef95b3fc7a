// Dataset length readers (fcp lengths). The .idx files here are written byte
// by byte from the format's description (header, int32 lengths, int64
// pointers, int64 document indices); tests/python/test_lengths.py checks the
// same reader against files written by megatron-core's own
// IndexedDatasetBuilder.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fcp/io.h"
#include "fcp/lengths.h"
#include "testing/temp_dir.h"

namespace fcp {
namespace {

namespace fs = std::filesystem;

using fcp::testing::TempDir;

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// An .idx as Megatron-Core lays it out, for int32 tokens (dtype code 4).
std::string IdxBytes(const std::vector<int32_t>& seq_lengths,
                     const std::vector<int64_t>& doc_idx, bool modes = false) {
  std::string out("MMIDIDX\0\0", 9);
  PutLe(out, 1, 8);  // version
  PutLe(out, 4, 1);  // dtype code: int32
  PutLe(out, seq_lengths.size(), 8);
  PutLe(out, doc_idx.size(), 8);
  for (int32_t v : seq_lengths) PutLe(out, static_cast<uint32_t>(v), 4);
  uint64_t ptr = 0;
  for (int32_t v : seq_lengths) {
    PutLe(out, ptr, 8);
    ptr += 4 * static_cast<uint64_t>(v);
  }
  for (int64_t d : doc_idx) PutLe(out, static_cast<uint64_t>(d), 8);
  if (modes)
    for (size_t i = 0; i < seq_lengths.size(); ++i) PutLe(out, 0, 1);
  return out;
}

TEST(MegatronIdx, DocumentsSumTheirSequencesAndSequencesAreReadAsIs) {
  TempDir dir;
  // Three documents: {5, 7}, {0}, {9, 1, 2}.
  const std::string idx =
      dir.Write("d.idx", IdxBytes({5, 7, 0, 9, 1, 2}, {0, 2, 3, 6}));
  EXPECT_EQ(ReadMegatronIdxLengths(idx, true),
            (std::vector<int64_t>{12, 0, 12}));
  EXPECT_EQ(ReadMegatronIdxLengths(idx, false),
            (std::vector<int64_t>{5, 7, 0, 9, 1, 2}));
  // Given the .bin, the .idx beside it is read.
  EXPECT_EQ(ReadMegatronIdxLengths((dir.path() / "d.bin").string(), true),
            (std::vector<int64_t>{12, 0, 12}));
  // Multimodal datasets append one mode byte per sequence.
  const std::string mm = dir.Write("m.idx", IdxBytes({3, 4}, {0, 1, 2}, true));
  EXPECT_EQ(ReadMegatronIdxLengths(mm, true), (std::vector<int64_t>{3, 4}));
}

TEST(MegatronIdx, CorruptFilesAreRejectedNamingTheFile) {
  TempDir dir;
  const std::string good = IdxBytes({5, 7}, {0, 2});
  auto rejects = [&](const std::string& name, const std::string& bytes,
                     bool docs = true) {
    const std::string path = dir.Write(name, bytes);
    try {
      ReadMegatronIdxLengths(path, docs);
      ADD_FAILURE() << name << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos)
          << e.what();
    }
  };
  rejects("magic.idx", "MMIDIDY" + good.substr(7));
  rejects("short.idx", good.substr(0, 20));
  rejects("truncated.idx", good.substr(0, good.size() - 1));
  rejects("longer.idx", good + std::string(7, '\0'));
  std::string version = good;
  version[9] = 2;
  rejects("version.idx", version);
  std::string count = good;
  count[18] = static_cast<char>(0xff);  // 255 sequences announced
  rejects("count.idx", count);
  rejects("negative.idx", IdxBytes({5, -1}, {0, 2}), false);
  rejects("order.idx", IdxBytes({5, 7, 1}, {0, 2, 1}));
  rejects("tail.idx",
          IdxBytes({5, 7, 1}, {0, 2}));  // sequence 2 in no document
  EXPECT_THROW(ReadMegatronIdxLengths((dir.path() / "none.idx").string()),
               InputError);
}

TEST(Jsonl, CountsIdsAndTextNeedingATokenizer) {
  TempDir dir;
  const std::string path =
      dir.Write("a.jsonl",
                "{\"tokens\": 12, \"text\": \"hi\"}\n\n{\"tokens\": [1, 2, 3], "
                "\"x\": 1}\n"
                "{\"tokens\": 0}\n");
  EXPECT_EQ(ReadJsonlLengths(path, "tokens"), (std::vector<int64_t>{12, 3, 0}));
  try {
    ReadJsonlLengths(path, "text");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ReadJsonlLengths(path, "x"), InputError);  // missing on line 1
  EXPECT_THROW(
      ReadJsonlLengths(dir.Write("b.jsonl", "{\"tokens\": -1}\n"), "tokens"),
      InputError);
  EXPECT_THROW(ReadJsonlLengths(dir.Write("c.jsonl", "[1]\n"), "tokens"),
               InputError);
  EXPECT_THROW(
      ReadJsonlLengths(dir.Write("d.jsonl", "{\"tokens\": 1.5}\n"), "tokens"),
      InputError);
  EXPECT_THROW(
      ReadJsonlLengths(dir.Write("e.jsonl", "{\"tokens\": 1}{\n"), "tokens"),
      InputError);
}

TEST(Csv, NamedColumnWithQuotes) {
  TempDir dir;
  const std::string path = dir.Write(
      "a.csv", "id,\"name, quoted\",n_tok\r\n1,\"a, b\",100\r\n2,c,7\r\n");
  EXPECT_EQ(ReadCsvLengths(path, "n_tok"), (std::vector<int64_t>{100, 7}));
  EXPECT_THROW(ReadCsvLengths(path, "tokens"), InputError);
  EXPECT_THROW(ReadCsvLengths(dir.Write("b.csv", "tokens\nx\n"), "tokens"),
               InputError);
  EXPECT_THROW(ReadCsvLengths(dir.Write("c.csv", "a,tokens\n1\n"), "tokens"),
               InputError);
}

TEST(DetectDatasetFormat, ByExtension) {
  EXPECT_EQ(DetectDatasetFormat("x/train_text_document.idx"),
            DatasetFormat::kMegatronIdx);
  EXPECT_EQ(DetectDatasetFormat("a.BIN"), DatasetFormat::kMegatronIdx);
  EXPECT_EQ(DetectDatasetFormat("a.jsonl"), DatasetFormat::kJsonl);
  EXPECT_EQ(DetectDatasetFormat("a.csv"), DatasetFormat::kCsv);
  EXPECT_EQ(DetectDatasetFormat("a.parquet"), DatasetFormat::kParquet);
  EXPECT_EQ(DetectDatasetFormat("data-00000-of-00001.arrow"),
            DatasetFormat::kArrow);
  EXPECT_EQ(DetectDatasetFormat("dir.v2/lengths"), DatasetFormat::kText);
  EXPECT_TRUE(NeedsPython(DatasetFormat::kParquet));
  EXPECT_FALSE(NeedsPython(DatasetFormat::kJsonl));
}

TEST(LengthReport, SummaryAndPowerOfTwoHistogram) {
  const std::vector<int64_t> lengths = {1001, 3, 1, 3};
  const std::string expected =
      "4 sequences, 1008 tokens (2 empty records skipped)\n"
      "min 1  p50 3  p90 1001  p99 1001  max 1001  mean 252.0 (tokens)\n"
      "length (tokens)               count   share\n"
      "[1, 2)                            1   25.0% ####################\n"
      "[2, 4)                            2   50.0% "
      "########################################\n"
      "[4, 8)                            0    0.0% \n"
      "[8, 16)                           0    0.0% \n"
      "[16, 32)                          0    0.0% \n"
      "[32, 64)                          0    0.0% \n"
      "[64, 128)                         0    0.0% \n"
      "[128, 256)                        0    0.0% \n"
      "[256, 512)                        0    0.0% \n"
      "[512, 1024)                       1   25.0% ####################\n";
  EXPECT_EQ(LengthReport(lengths, 2), expected);
  EXPECT_EQ(LengthReport({}), "0 sequences, 0 tokens\n");
}

TEST(LengthFileText, ReadsBackAsTheSameLengths) {
  const std::vector<int64_t> lengths = {5, 131072, 1};
  EXPECT_EQ(ParseLengths(LengthFileText(lengths)), lengths);
}

TEST(AtomicFile, CommitsOrLeavesNothing) {
  TempDir dir;
  const std::string path = (dir.path() / "out.txt").string();
  {
    AtomicFile f(path, "out");
    f.Write("half");
  }  // not committed
  EXPECT_TRUE(fs::is_empty(dir.path()));
  WriteFileAtomically(path, "whole\n", "out");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "whole");
  // Devices are written in place, never replaced (the tests run as root).
  WriteFileAtomically("/dev/null", "discarded\n", "out");
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  try {
    WriteFileAtomically((dir.path() / "no\x1b[31m" / "x").string(), "x", "out");
    ADD_FAILURE();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\x1b'), std::string::npos)
        << "control characters escaped";
    EXPECT_NE(what.find("\\x1b"), std::string::npos) << what;
    EXPECT_EQ(what.rfind("out: cannot write", 0), 0u) << what;
  }
}

}  // namespace
}  // namespace fcp
