// Test helper: encodes every string of a JSON array with mlaserve's tokenizer and writes the
// id lists as JSON, for comparison with reference encoders written by others.
//   tokenizer_dump hf MODEL_DIR CORPUS.json OUT.json
//   tokenizer_dump tiktoken RANKS_FILE PATTERN_FILE CORPUS.json OUT.json
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "base/mmap_file.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace mlaserve;
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    std::unique_ptr<Tokenizer> tokenizer;
    int next = 3;
    if (mode == "hf" && argc == 5) {
      tokenizer = Tokenizer::load(argv[2]);
    } else if (mode == "tiktoken" && argc == 6) {
      tokenizer = Tokenizer::from_tiktoken(read_text_file(argv[2]), read_text_file(argv[3]), {});
      next = 4;
    } else {
      std::cerr << "usage: tokenizer_dump hf MODEL_DIR CORPUS OUT | tiktoken RANKS PATTERN CORPUS OUT\n";
      return 2;
    }
    const auto corpus = nlohmann::json::parse(read_text_file(argv[next]));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& text : corpus) out.push_back(tokenizer->encode(text.get<std::string>(), mode == "hf"));
    std::ofstream(argv[next + 1]) << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
