// The path `mlaserve logits` takes through a checkpoint (load_causal_lm, an executor, one
// sequence's forward) as a binary of its own, so that the corrupt-checkpoint test can run it
// under ASan/UBSan without building the whole CLI with them. Errors are reported as the CLI
// reports them: one line and exit 1 for a named problem, exit 2 for anything else.
//
// Usage: checkpoint_probe MODEL_DIR ID[,ID...]
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/single_sequence.h"

int main(int argc, char** argv) {
  using namespace mlaserve;
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_probe MODEL_DIR ID[,ID...]\n");
    return 2;
  }
  try {
    std::vector<int32_t> ids;
    std::stringstream list(argv[2]);
    for (std::string id; std::getline(list, id, ',');) ids.push_back(int32_t(std::stol(id)));
    auto model = load_causal_lm(argv[1], ActivationQuant::Int8);
    auto executor = create_executor(*model, ExecutorOptions{});
    const int64_t n = int64_t(ids.size());
    std::vector<float> logits(static_cast<size_t>(n * model->config().vocab_size));
    SingleSequence sequence(*executor, n);
    sequence.forward(ids, 0, true, logits.data());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
