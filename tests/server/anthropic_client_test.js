// Drives `mlaserve serve` with Anthropic's official client for Node through /v1/messages, on a
// Kimi K3 checkpoint (thinking on by default, so its think channel arrives as thinking blocks):
// messages.create and messages.stream, a tool-use round trip with tool_result, a forced tool
// whose input validates, countTokens against the usage of the same prompt, a stop sequence, the
// API key as x-api-key, and errors surfaced as the SDK's error classes.
// Usage: node anthropic_client_test.js WORK_DIR MLASERVE MODEL_DIR
const { check, startServer, stopServer, run } = require("./harness");

const [work, binary, modelDir] = process.argv.slice(2);
const sdk = require(require.resolve("@anthropic-ai/sdk", { paths: [work] }));
const Anthropic = sdk.Anthropic || sdk.default || sdk;
const apiKey = "anthropic-key-7";

const weather = { name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer", minimum: 1 } },
    required: ["city", "days"] } };

async function createAndStream(client) {
  const request = { model: "k3", max_tokens: 10, messages: [{ role: "user", content: "Why is the sky blue?" }], temperature: 0 };
  const message = await client.messages.create(request);
  check("create: a message whose thinking block holds the think channel", message.type === "message" &&
    message.id.startsWith("msg_") && message.role === "assistant" && message.content.length >= 1 &&
    message.content[0].type === "thinking" && message.content[0].thinking.length > 0 && message.stop_reason === "max_tokens" &&
    message.usage.output_tokens === 10, JSON.stringify(message));

  const stream = client.messages.stream(request);
  const types = [];
  let thinking = "";
  stream.on("streamEvent", (event) => types.push(event.type));
  stream.on("thinking", (delta) => { thinking += delta; });
  const final = await stream.finalMessage();
  check("stream: Anthropic's event sequence", types[0] === "message_start" && types.includes("content_block_start") &&
    types.includes("content_block_delta") && types.includes("content_block_stop") &&
    types[types.length - 2] === "message_delta" && types[types.length - 1] === "message_stop", JSON.stringify(types));
  check("stream and create agree (greedy)", final.content[0].thinking === message.content[0].thinking &&
    thinking === message.content[0].thinking && final.stop_reason === "max_tokens", JSON.stringify([final, thinking]));

  const counted = await client.messages.countTokens({ model: "k3", messages: request.messages });
  check("countTokens is the prompt the message was billed for", counted.input_tokens ===
    message.usage.input_tokens + (message.usage.cache_read_input_tokens || 0), JSON.stringify([counted, message.usage]));

  const plain = await client.messages.create({ ...request, thinking: { type: "disabled" }, max_tokens: 6 });
  check("thinking disabled: text only", plain.content.every((block) => block.type === "text"), JSON.stringify(plain.content));
  const text = plain.content.map((block) => block.text).join(""), stop = text.slice(2, 5);
  const stopped = await client.messages.create({ ...request, thinking: { type: "disabled" }, max_tokens: 6, stop_sequences: [stop] });
  check("a stop sequence ends the message and is named", stop.length === 3 && stopped.stop_reason === "stop_sequence" &&
    stopped.stop_sequence === stop && stopped.content.map((block) => block.text).join("") === text.slice(0, text.indexOf(stop)),
    JSON.stringify([text, stop, stopped]));
}

function validInput(input) {
  return input && typeof input.city === "string" && [...input.city].length <= 10 && Number.isInteger(input.days) && input.days >= 1;
}

async function toolRoundTrip(client) {
  const ask = { model: "k3", max_tokens: 200, tools: [weather], tool_choice: { type: "tool", name: "get_weather" },
    messages: [{ role: "user", content: "Weather in Paris for 2 days?" }], temperature: 1 };
  const called = await client.messages.create(ask);
  const use = called.content.find((block) => block.type === "tool_use");
  check("a forced tool: a tool_use block whose input validates", called.stop_reason === "tool_use" && use &&
    use.id.startsWith("toolu_") && use.name === "get_weather" && validInput(use.input), JSON.stringify(called));

  const stream = client.messages.stream(ask);
  let partial = "";
  stream.on("inputJson", (delta) => { partial += delta; });
  const streamed = await stream.finalMessage();
  const streamedUse = streamed.content.find((block) => block.type === "tool_use");
  check("streamed tool_use: input_json_delta pieces add up to the input", streamedUse && validInput(streamedUse.input) &&
    JSON.stringify(JSON.parse(partial)) === JSON.stringify(streamedUse.input), JSON.stringify([partial, streamed]));

  const answer = await client.messages.create({ model: "k3", max_tokens: 6, tools: [weather], temperature: 0,
    messages: [...ask.messages, { role: "assistant", content: called.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use ? use.id : "x", content: "18 C, sunny" }] }] });
  check("tool_result answered", answer.type === "message" && answer.usage.input_tokens + (answer.usage.cache_read_input_tokens || 0) >
    called.usage.input_tokens + (called.usage.cache_read_input_tokens || 0), JSON.stringify(answer));
}

async function errors(client, url) {
  try {
    await client.messages.create({ model: "k3", messages: [{ role: "user", content: "x" }] });
    check("missing max_tokens is refused", false, "no error");
  } catch (error) {
    check("missing max_tokens: the SDK's BadRequestError naming it", error instanceof Anthropic.BadRequestError &&
      error.status === 400 && /max_tokens/.test(error.message), String(error));
  }
  try {
    await client.messages.create({ model: "k3", max_tokens: 5, messages: [{ role: "user", content: [
      { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] });
    check("an image is refused", false, "no error");
  } catch (error) {
    check("an image: a BadRequestError", error instanceof Anthropic.BadRequestError && /vision tower/.test(error.message), String(error));
  }
  const wrong = new Anthropic({ apiKey: "wrong", baseURL: url, maxRetries: 0 });
  try {
    await wrong.messages.create({ model: "k3", max_tokens: 5, messages: [{ role: "user", content: "x" }] });
    check("a wrong key is refused", false, "no error");
  } catch (error) {
    check("a wrong key: the SDK's AuthenticationError", error instanceof Anthropic.AuthenticationError && error.status === 401,
      String(error));
  }
  const raw = await fetch(url + "/v1/messages", { method: "POST", headers: { "x-api-key": apiKey, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: "k3", max_tokens: 5, messages: [{ role: "robot", content: "x" }] }) });
  const body = await raw.json();
  check("errors in Anthropic's shape", raw.status === 400 && body.type === "error" && body.error.type === "invalid_request_error",
    JSON.stringify(body));
}

async function main() {
  const { proc, url } = await startServer(binary, ["--model", modelDir, "--served-model-name", "k3", "--api-key", apiKey,
    "--kv-cache-gb", "0.05"]);
  const client = new Anthropic({ apiKey, baseURL: url, maxRetries: 0 });
  try {
    await createAndStream(client);
    await toolRoundTrip(client);
    await errors(client, url);
  } finally {
    await stopServer(proc);
  }
}

run(main);
