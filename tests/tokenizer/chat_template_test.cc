// Chat templates as checkpoints ship them: which template a model directory's files select, the
// variables transformers passes (special tokens, tools, documents, kwargs), content parts, and
// continue_final_message; and the built-in formats, whose expected strings are what the models'
// own Jinja templates render (DeepSeek-V3 tokenizer_config.json, Kimi K2 chat_template.jinja).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using ojson = nlohmann::ordered_json;

ChatInput conversation(const ojson& messages, bool add_generation_prompt = true) {
  ChatInput input;
  input.messages = messages;
  input.add_generation_prompt = add_generation_prompt;
  return input;
}

const ojson kConversation = ojson::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}])");

std::string thrown_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ChatTemplate, BuiltInDeepseekV3) {
  const ChatTemplate chat = ChatTemplate::built_in(ChatFormat::DeepseekV3);
  EXPECT_EQ(chat.render(conversation(kConversation)),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>2+2?<｜Assistant｜>");
  EXPECT_EQ(chat.render(conversation(ojson::parse(R"([{"role": "system", "content": "A"},
                {"role": "system", "content": "B"}, {"role": "user", "content": "x"}])"),
                                     false)),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>x");
}

TEST(ChatTemplate, BuiltInKimiK2) {
  const ChatTemplate chat = ChatTemplate::built_in(ChatFormat::KimiK2);
  EXPECT_EQ(chat.render(conversation(kConversation)),
            "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>Hello!<|im_end|><|im_user|>user<|im_middle|>2+2?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
  EXPECT_EQ(chat.render(conversation(ojson::parse(R"([{"role": "user", "content": "x"}])"), false)),
            "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
            "<|im_user|>user<|im_middle|>x<|im_end|>");
}

TEST(ChatTemplate, BuiltInFormatsRefuseWhatTheyCannotRender) {
  const ChatTemplate chat = ChatTemplate::built_in(ChatFormat::DeepseekV3);
  const ChatInput tool_turn = conversation(ojson::parse(R"([{"role": "tool", "content": "x"}])"));
  EXPECT_TRUE(contains(thrown_message([&] { chat.render(tool_turn); }), "role 'tool'"));
  ChatInput with_tools = conversation(kConversation);
  with_tools.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_TRUE(contains(thrown_message([&] { chat.render(with_tools); }), "renders no tools"));
  EXPECT_TRUE(contains(thrown_message([&] { chat.render(conversation(ojson::array())); }), "non-empty"));
}

// make-model's tokenizer ships a Jinja template equal to the built-in DeepSeek-V3 format.
TEST(ChatTemplate, TheCheckpointsTemplateIsRendered) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 1);
  const auto tokenizer = Tokenizer::load(dir.path());
  const ChatTemplate chat = ChatTemplate::load(dir.path(), *tokenizer);
  EXPECT_FALSE(chat.is_built_in());
  EXPECT_TRUE(contains(chat.origin(), "tokenizer_config.json"));
  EXPECT_EQ(chat.render(conversation(kConversation)),
            ChatTemplate::built_in(ChatFormat::DeepseekV3).render(conversation(kConversation)));
}

TEST(ChatTemplate, ChatTemplateJinjaAndTheOverrideTakePrecedence) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 1);
  const auto tokenizer = Tokenizer::load(dir.path());
  const ChatInput input = conversation(ojson::parse(R"([{"role": "user", "content": "x"}])"));
  write_file(dir.file("chat_template.jinja"), "file:{{ messages[0].content }}");
  EXPECT_EQ(ChatTemplate::load(dir.path(), *tokenizer).render(input), "file:x");
  write_file(dir.file("override.jinja"), "override:{{ messages[0].content }}");
  EXPECT_EQ(ChatTemplate::load(dir.path(), *tokenizer, dir.file("override.jinja")).render(input), "override:x");
}

TEST(ChatTemplate, NamedTemplatesChooseToolUseForRequestsWithTools) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 1);
  const auto tokenizer = Tokenizer::load(dir.path());
  const std::string config_path = dir.file("tokenizer_config.json");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(config_path));
  config["chat_template"] = {{{"name", "default"}, {"template", "plain"}},
                             {{"name", "tool_use"}, {"template", "{{ tools | length }} tools"}}};
  write_file(config_path, config.dump());
  const ChatTemplate chat = ChatTemplate::load(dir.path(), *tokenizer);
  ChatInput input = conversation(kConversation);
  EXPECT_EQ(chat.render(input), "plain");
  input.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(chat.render(input), "1 tools");
  config["chat_template"] = {{{"name", "tool_use"}, {"template", "x"}}};
  write_file(config_path, config.dump());
  EXPECT_TRUE(contains(thrown_message([&] { ChatTemplate::load(dir.path(), *tokenizer); }), "'default'"));
}

TEST(ChatTemplate, AnUnsupportedConstructFailsAtLoadNamingFileAndLine) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 1);
  const auto tokenizer = Tokenizer::load(dir.path());
  write_file(dir.file("chat_template.jinja"), "{{ bos_token }}\n{% include 'other.jinja' %}");
  const std::string message = thrown_message([&] { ChatTemplate::load(dir.path(), *tokenizer); });
  EXPECT_TRUE(contains(message, "chat_template.jinja"));
  EXPECT_TRUE(contains(message, "line 2"));
}

TEST(ChatTemplate, SpecialTokensToolsDocumentsAndKwargsAreVariables) {
  const nlohmann::json special = nlohmann::json::parse(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null})");
  const ChatTemplate chat = ChatTemplate::from_source(
      "{{ bos_token }}{{ tools[0].function.name }}|{{ documents | length }}|{{ thinking }}"
      "|{{ pad_token is defined }}{{ eos_token }}",
      special);
  ChatInput input = conversation(kConversation);
  input.tools = ojson::parse(R"([{"type": "function", "function": {"name": "lookup"}}])");
  input.documents = ojson::parse(R"([{"text": "a"}, {"text": "b"}])");
  input.kwargs = ojson::parse(R"({"thinking": true})");
  EXPECT_EQ(chat.render(input), "<s>lookup|2|True|False</s>");
  input.kwargs = ojson::parse(R"({"messages": []})");
  EXPECT_TRUE(contains(thrown_message([&] { chat.render(input); }), "'messages'"));
}

// A template that loops over content receives the parts; one that does not receives their text
// joined by newlines.
TEST(ChatTemplate, ContentPartsAreFlattenedUnlessTheTemplateIteratesOverThem) {
  const ojson messages =
      ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  const ChatTemplate flat = ChatTemplate::from_source("[{{ messages[0]['content'] }}]", {});
  EXPECT_EQ(flat.render(conversation(messages)), "[a\nb]");
  const ChatTemplate parts = ChatTemplate::from_source(
      "{% for m in messages %}{% for part in m['content'] %}<{{ part.text }}>{% endfor %}{% endfor %}", {});
  EXPECT_EQ(parts.render(conversation(messages)), "<a><b>");
  const ojson image = ojson::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])");
  EXPECT_TRUE(contains(thrown_message([&] { flat.render(conversation(image)); }), "not a text part"));
}

TEST(ChatTemplate, ContinueFinalMessageLeavesTheLastTurnOpen) {
  const ChatTemplate chat = ChatTemplate::from_source(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      {});
  ChatInput input = conversation(
      ojson::parse(R"([{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue is "}])"),
      false);
  input.continue_final_message = true;
  EXPECT_EQ(chat.render(input), "<user>Name a colour.</user><assistant>Blue is");
  input.add_generation_prompt = true;
  EXPECT_TRUE(contains(thrown_message([&] { chat.render(input); }), "cannot both"));
}

}  // namespace
}  // namespace mlaserve
