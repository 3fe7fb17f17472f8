// Drives `mlaserve serve` with the official OpenAI client for Node: streaming chat,
// non-streaming completion, usage counts against token counts, a tool-calling round trip
// (streaming and not), errors, and the API key.
// Usage: node openai_client_test.js WORK_DIR MLASERVE MODEL_DIR CHAT_TEMPLATE
const { check, startServer, stopServer, run } = require("./harness");

const [work, binary, modelDir, chatTemplate] = process.argv.slice(2);
const OpenAI = require(require.resolve("openai", { paths: [work] }));
const apiKey = "test-key-123";

// The request names a tool, so its arguments are decoded under the tool's parameters schema;
// the random model's call is then replayed with the tool's result, as an agent would.
async function toolRoundTrip(client) {
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1 } },
      required: ["city", "days"] } } }];
  const ask = { model: "tiny", messages: [{ role: "user", content: "What is the weather in Paris?" }], tools,
    tool_choice: { type: "function", function: { name: "get_weather" } }, temperature: 1, seed: 11, max_tokens: 300 };
  const validArguments = (text) => {
    try {
      const args = JSON.parse(text);
      return typeof args.city === "string" && Number.isInteger(args.days) && args.days >= 1;
    } catch (error) {
      return false;
    }
  };
  const called = await client.chat.completions.create(ask);
  const message = called.choices[0].message, call = (message.tool_calls || [])[0];
  check("named tool_choice: a get_weather call with valid arguments", called.choices[0].finish_reason === "tool_calls" &&
    call && call.id && call.type === "function" && call.function.name === "get_weather" && validArguments(call.function.arguments),
    JSON.stringify(called.choices[0]));

  const stream = await client.chat.completions.create({ ...ask, stream: true });
  let id = null, name = null, args = "", finish = null, deltas = 0;
  for await (const chunk of stream) {
    if (!chunk.choices.length) continue;
    for (const delta of chunk.choices[0].delta.tool_calls || []) {
      deltas++;
      id = id || delta.id;
      name = name || (delta.function && delta.function.name);
      args += (delta.function && delta.function.arguments) || "";
    }
    finish = chunk.choices[0].finish_reason || finish;
  }
  check("streamed tool call: id and name first, then the arguments in pieces", id && name === "get_weather" && deltas > 2 &&
    validArguments(args) && finish === "tool_calls", JSON.stringify({ id, name, args, finish, deltas }));
  check("streamed and whole tool calls agree (same seed)", call && args === call.function.arguments, JSON.stringify([args, call]));

  const replay = { model: "tiny", tools, max_tokens: 8, temperature: 0, messages: [...ask.messages, message,
    { role: "tool", tool_call_id: call ? call.id : "x", content: JSON.stringify({ temperature_c: 18 }) }] };
  const answer = await client.chat.completions.create(replay);
  check("replayed tool result: the turn is answered", answer.choices[0].message.role === "assistant" &&
    answer.usage.prompt_tokens > called.usage.prompt_tokens, JSON.stringify(answer));
  const replayed = await client.chat.completions.create({ ...replay, stream: true });
  let chunks = 0, ended = null;
  for await (const chunk of replayed) {
    chunks++;
    if (chunk.choices.length) ended = chunk.choices[0].finish_reason || ended;
  }
  check("replayed tool result, streaming", chunks > 1 && ["stop", "length", "tool_calls"].includes(ended), String(ended));
}

async function main() {
  const { proc, url } = await startServer(binary, ["--model", modelDir, "--api-key", apiKey, "--served-model-name", "tiny",
    "--kv-cache-gb", "0.25", "--chat-template", chatTemplate]);
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

    await toolRoundTrip(client);

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
    await stopServer(proc);
  }
}

run(main);
