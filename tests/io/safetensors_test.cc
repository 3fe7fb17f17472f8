#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// Writes a file with the given header text and `data_bytes` bytes of data after it.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << std::string(data_bytes, '\x01');
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, WriterAndReaderAgree) {
  testing::TempDir dir;
  std::vector<TensorToWrite> tensors = {{"a",
                                         DType::F32,
                                         {2, 3},
                                         [](uint8_t* bytes) {
                                           for (int i = 0; i < 24; ++i) bytes[i] = uint8_t(i);
                                         }},
                                        {"b.weight", DType::BF16, {5}, [](uint8_t* bytes) {
                                           for (int i = 0; i < 10; ++i) bytes[i] = uint8_t(100 + i);
                                         }}};
  write_checkpoint(dir.path(), tensors, 0);
  Checkpoint checkpoint(dir.path());
  const TensorInfo& a = checkpoint.get("a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, DType::F32);
  EXPECT_EQ(a.data[23], 23);
  EXPECT_EQ(checkpoint.get("b.weight").data[9], 109);
  EXPECT_TRUE(checkpoint.unused_names().empty());
  EXPECT_THROW(checkpoint.get("missing"), Error);
}

TEST(Safetensors, ShardedIndex) {
  testing::TempDir dir;
  std::vector<TensorToWrite> tensors;
  const std::vector<std::string> names = {"t0", "t1", "t2", "t3"};
  for (int i = 0; i < 4; ++i)
    tensors.push_back({names[i], DType::U8, {100}, [i](uint8_t* bytes) { bytes[0] = uint8_t(i); }});
  write_checkpoint(dir.path(), tensors, 250);  // two tensors a shard
  Checkpoint checkpoint(dir.path());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(checkpoint.get(names[i]).data[0], i);
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
}

TEST(Safetensors, CorruptHeadersAreErrorsNamingTheProblem) {
  testing::TempDir dir;
  const std::string path = dir.file("x.safetensors");
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_EQ(error_of(path), "");
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})", 16);
  EXPECT_NE(error_of(path).find("not valid JSON"), std::string::npos);
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", 8);
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16);
  EXPECT_NE(error_of(path).find("tensor 'w': shape [2, 3] of F32 needs 24 bytes"), std::string::npos);
  write_raw(path, R"({"w": {"dtype": "Q9", "shape": [2, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_NE(error_of(path).find("unsupported safetensors dtype 'Q9'"), std::string::npos);
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}})", 16);
  EXPECT_NE(error_of(path).find("negative dimension"), std::string::npos);
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 16]}})", 16);
  EXPECT_NE(error_of(path).find("overflows"), std::string::npos);
  write_raw(path, R"([1, 2])", 0);
  EXPECT_NE(error_of(path).find("not a JSON object"), std::string::npos);
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t huge = uint64_t(1) << 40;
    out.write(reinterpret_cast<const char*>(&huge), 8);
  }
  EXPECT_NE(error_of(path).find("exceeds the file"), std::string::npos);
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(error_of(path).find("too short"), std::string::npos);
}

}  // namespace
}  // namespace mlaserve
