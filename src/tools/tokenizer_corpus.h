// Text that make-model learns its BPE merges from: English prose, code, numbers and a little
// CJK, written for this project.
#pragma once

namespace mlaserve {

extern const char* const kTokenizerCorpus;

}  // namespace mlaserve
