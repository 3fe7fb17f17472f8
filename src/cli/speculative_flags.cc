#include <spdlog/spdlog.h>

#include "base/error.h"
#include "cli/commands.h"

namespace mlaserve {

void add_speculative_flags(CLI::App* cmd, SpeculativeFlags& flags) {
  cmd->add_option("--speculative", flags.speculative,
                  "speculative decoding's drafter: ngram (prompt lookup: continues the latest earlier occurrence of "
                  "the last 1-4 tokens) | mtp (the model's own multi-token-prediction layer, DeepSeek-V3) | draft:DIR "
                  "(a smaller model with the same tokenizer, greedy) | dflash:DIR (a DFlash block draft: one forward "
                  "drafts a block from the model's hidden states) | dspark:DIR (DFlash with its Markov head); "
                  "lossless: the output is what the model alone "
                  "would give");
  cmd->add_option("--num-draft-tokens", flags.num_draft_tokens, "tokens a drafter proposes a step at most")
      ->capture_default_str();
  cmd->add_option("--draft-policy", flags.draft_policy,
                  "adaptive: each step drafts as many tokens (0 to --num-draft-tokens) as measured costs and "
                  "acceptance say pay best | fixed: always --num-draft-tokens")
      ->check(CLI::IsMember({"adaptive", "fixed"}))
      ->capture_default_str();
}

void check_speculative_flags(const SpeculativeFlags& flags) {
  if (flags.speculative.empty()) return;
  MLA_CHECK(flags.num_draft_tokens >= 1 && flags.num_draft_tokens <= EngineMetrics::kMaxDraftTokens,
            "--num-draft-tokens must be 1 to {}, got {}", EngineMetrics::kMaxDraftTokens, flags.num_draft_tokens);
  check_drafter_spec(flags.speculative);
}

void apply_speculative_flags(const SpeculativeFlags& flags, const CausalLM& model, EngineConfig& config) {
  if (flags.speculative.empty()) return;
  check_speculative_flags(flags);
  config.drafter = make_drafter(flags.speculative, &model);
  config.num_draft_tokens = flags.num_draft_tokens;
  config.draft_policy = flags.draft_policy == "fixed" ? DraftPolicyKind::Fixed : DraftPolicyKind::Adaptive;
  spdlog::info("speculative decoding: {}, up to {} tokens a step ({})", config.drafter->describe(),
               flags.num_draft_tokens, flags.draft_policy);
}

}  // namespace mlaserve
