// Expected strings are what the models' own Jinja templates render for these messages
// (DeepSeek-V3 tokenizer_config.json chat_template; Kimi K2 chat_template.jinja).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace mlaserve {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};

TEST(ChatTemplate, DeepseekV3) {
  EXPECT_EQ(apply_chat_template(ChatFormat::DeepseekV3, kConversation, true),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>2+2?<｜Assistant｜>");
  EXPECT_EQ(apply_chat_template(ChatFormat::DeepseekV3, {{"system", "A"}, {"system", "B"}, {"user", "x"}}, false),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>x");
}

TEST(ChatTemplate, KimiK2) {
  EXPECT_EQ(apply_chat_template(ChatFormat::KimiK2, kConversation, true),
            "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>Hello!<|im_end|><|im_user|>user<|im_middle|>2+2?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
  EXPECT_EQ(apply_chat_template(ChatFormat::KimiK2, {{"user", "x"}}, false),
            "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
            "<|im_user|>user<|im_middle|>x<|im_end|>");
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  EXPECT_THROW(apply_chat_template(ChatFormat::DeepseekV3, {{"tool", "x"}}, true), Error);
  EXPECT_THROW(apply_chat_template(ChatFormat::KimiK2, {{"robot", "x"}}, true), Error);
}

}  // namespace
}  // namespace mlaserve
