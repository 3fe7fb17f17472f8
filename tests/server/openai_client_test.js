// Drives `mlaserve serve` with the official OpenAI client for Node: streaming chat,
// non-streaming completion, usage counts against token counts, errors, and the API key.
// Usage: node openai_client_test.js WORK_DIR MLASERVE MODEL_DIR
const { spawn } = require("child_process");
const path = require("path");

const [work, binary, modelDir] = process.argv.slice(2);
const OpenAI = require(require.resolve("openai", { paths: [work] }));
const apiKey = "test-key-123";
let passed = 0, failed = 0;

function check(label, condition, detail = "") {
  if (condition) passed++;
  else {
    failed++;
    console.log(`FAIL ${label} ${detail}`);
  }
}

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ["serve", "--model", modelDir, "--port", "0", "--api-key", apiKey,
      "--served-model-name", "tiny", "--kv-cache-gb", "0.25"], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (chunk) => {
      log += chunk;
      const found = log.match(/ready: serving .* on (http:\/\/127\.0\.0\.1:\d+)/);
      if (found) resolve({ proc, url: found[1] });
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${log}`)));
    setTimeout(() => reject(new Error("server did not start: " + log)), 120000);
  });
}

async function main() {
  const { proc, url } = await startServer();
  const client = new OpenAI({ apiKey, baseURL: url + "/v1", maxRetries: 0 });
  try {
    const models = await client.models.list();
    check("models.list", models.data.some((m) => m.id === "tiny"), JSON.stringify(models.data));

    const request = { model: "tiny", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello there" }],
      max_tokens: 12, temperature: 0, ignore_eos: true };
    const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let streamed = "", finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.choices.length) {
        streamed += chunk.choices[0].delta.content || "";
        finish = chunk.choices[0].finish_reason || finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    check("streaming chat finished by length", finish === "length", String(finish));
    check("streaming chat usage", usage && usage.completion_tokens === 12 && usage.total_tokens === usage.prompt_tokens + 12,
      JSON.stringify(usage));
    check("streaming chat streamed several chunks", chunks >= 12, String(chunks));
    const whole = await client.chat.completions.create(request);
    check("streaming and non-streaming greedy agree", whole.choices[0].message.content === streamed,
      JSON.stringify([whole.choices[0].message.content, streamed]));
    check("chat usage prompt tokens agree", whole.usage.prompt_tokens === usage.prompt_tokens, JSON.stringify(whole.usage));

    const promptIds = [5, 77, 901, 4000, 12, 31999, 250];
    const completion = await client.completions.create({ model: "tiny", prompt: promptIds, max_tokens: 9, logprobs: 2,
      temperature: 0, ignore_eos: true });
    const choice = completion.choices[0];
    check("completion usage counts prompt tokens", completion.usage.prompt_tokens === promptIds.length, JSON.stringify(completion.usage));
    check("completion usage counts generated tokens", completion.usage.completion_tokens === choice.logprobs.tokens.length &&
      choice.logprobs.tokens.length === 9, JSON.stringify(completion.usage));
    check("completion text is the concatenated tokens", choice.text === choice.logprobs.tokens.join("") || choice.text.includes("\uFFFD"),
      JSON.stringify([choice.text, choice.logprobs.tokens]));
    check("completion logprobs are log-probabilities", choice.logprobs.token_logprobs.every((lp) => lp <= 0) &&
      choice.logprobs.top_logprobs.every((top) => Object.keys(top).length >= 1), JSON.stringify(choice.logprobs.token_logprobs));

    const stopped = await client.completions.create({ model: "tiny", prompt: "count", max_tokens: 40, temperature: 0,
      ignore_eos: true, stop: [choice.text.slice(3, 6) || "zzz"] });
    check("stop string ends the completion", ["stop", "length"].includes(stopped.choices[0].finish_reason), stopped.choices[0].finish_reason);

    try {
      await client.completions.create({ model: "tiny", prompt: "x", max_tokens: -1 });
      check("negative max_tokens is rejected", false, "no error");
    } catch (error) {
      check("negative max_tokens is a 400 BadRequestError", error instanceof OpenAI.BadRequestError && error.status === 400 &&
        /max_tokens/.test(error.message), String(error));
    }
    try {
      await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] });
      check("unknown model is rejected", false, "no error");
    } catch (error) {
      check("unknown model is a 400", error.status === 400, String(error));
    }
    const badClient = new OpenAI({ apiKey: "wrong", baseURL: url + "/v1", maxRetries: 0 });
    try {
      await badClient.models.list();
      check("wrong API key is rejected", false, "no error");
    } catch (error) {
      check("wrong API key is a 401", error instanceof OpenAI.AuthenticationError && error.status === 401, String(error));
    }
    const health = await fetch(url + "/health");
    check("health needs no key", health.status === 200, String(health.status));
  } finally {
    const exited = new Promise((resolve) => proc.on("exit", resolve));
    proc.kill("SIGTERM");
    check("server exits 0 on SIGTERM", (await exited) === 0);
  }
}

main().catch((error) => {
  console.log("FAIL " + error.stack);
  failed++;
}).finally(() => {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
