// Drives `mlaserve serve` with the official OpenAI client for Node through the Responses API
// (/v1/responses), on a Kimi K3 checkpoint: responses.create and responses.stream (the think
// channel as a reasoning item), a function tool called by name with valid arguments and its
// function_call_output after previous_response_id, text.format json_schema, retrieve and delete
// of a stored response, and a missing id as the SDK's NotFoundError.
// Usage: node responses_client_test.js WORK_DIR MLASERVE MODEL_DIR
const { check, startServer, stopServer, run } = require("./harness");

const [work, binary, modelDir] = process.argv.slice(2);
const OpenAI = require(require.resolve("openai", { paths: [work] }));

const tools = [{ type: "function", name: "get_weather", description: "Weather for a city", strict: true,
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer", minimum: 1 } },
    required: ["city", "days"], additionalProperties: false } }];

function validArguments(text) {
  try {
    const args = JSON.parse(text);
    return typeof args.city === "string" && [...args.city].length <= 10 && Number.isInteger(args.days) && args.days >= 1;
  } catch (error) {
    return false;
  }
}

async function createAndStream(client) {
  const request = { model: "k3", input: "Why is the sky blue?", max_output_tokens: 10, temperature: 0 };
  const response = await client.responses.create(request);
  const reasoning = response.output.find((item) => item.type === "reasoning");
  check("create: the think channel as a reasoning item", response.object === "response" && response.id.startsWith("resp_") &&
    reasoning && reasoning.content[0].type === "reasoning_text" && reasoning.content[0].text.length > 0 &&
    response.status === "incomplete" && response.incomplete_details.reason === "max_output_tokens" &&
    response.usage.output_tokens === 10 && response.usage.total_tokens === response.usage.input_tokens + 10, JSON.stringify(response));

  const stream = client.responses.stream(request);
  const types = [];
  let sequence = -1, ordered = true, deltas = "", last = null;
  for await (const event of stream) {
    types.push(event.type);
    ordered = ordered && event.sequence_number === sequence + 1;
    sequence = event.sequence_number;
    if (event.type === "response.reasoning_text.delta") deltas += event.delta;
    last = event;
  }
  check("stream: typed events in sequence", ordered && types[0] === "response.created" && types[1] === "response.in_progress" &&
    types.includes("response.output_item.added") && types.includes("response.reasoning_text.delta") &&
    types.includes("response.output_item.done") && types[types.length - 1] === "response.incomplete", JSON.stringify(types));
  // The SDK keeps its snapshot for response.completed only; an incomplete response is in the event.
  const streamedReasoning = last.response.output.find((item) => item.type === "reasoning");
  check("stream and create agree (greedy)", deltas === reasoning.content[0].text && streamedReasoning &&
    streamedReasoning.content[0].text === deltas, JSON.stringify(last));

  const plain = await client.responses.create({ ...request, reasoning: { effort: "none" }, max_output_tokens: 6 });
  check("reasoning effort none: a message item only", plain.output.length === 1 && plain.output[0].type === "message" &&
    plain.output[0].content[0].type === "output_text" && typeof plain.output_text === "string", JSON.stringify(plain));
}

async function functionCalls(client) {
  const called = await client.responses.create({ model: "k3", input: "Weather in Paris for 2 days?", tools,
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 200, temperature: 1 });
  const call = called.output.find((item) => item.type === "function_call");
  check("a named function: a function_call item with valid arguments", called.status === "completed" && call &&
    call.call_id && call.name === "get_weather" && validArguments(call.arguments), JSON.stringify(called));

  // A named call turns K3's thinking off; so does effort none, so the history renders as prompted.
  const answered = await client.responses.create({ model: "k3", previous_response_id: called.id, tools, max_output_tokens: 6,
    temperature: 0, reasoning: { effort: "none" }, input: [{ type: "function_call_output", call_id: call ? call.call_id : "x", output: "18 C, sunny" }] });
  check("function_call_output after previous_response_id", answered.previous_response_id === called.id &&
    answered.usage.input_tokens > called.usage.input_tokens + 10 && answered.usage.input_tokens_details.cached_tokens > 0,
    JSON.stringify(answered.usage));

  const stream = client.responses.stream({ model: "k3", input: "Weather in Oslo?", tools, max_output_tokens: 200,
    tool_choice: { type: "function", name: "get_weather" }, temperature: 1 });
  let pieces = "";
  stream.on("response.function_call_arguments.delta", (event) => { pieces += event.delta; });
  const final = await stream.finalResponse();
  const streamedCall = final.output.find((item) => item.type === "function_call");
  check("streamed function call arguments add up", streamedCall && validArguments(streamedCall.arguments) &&
    pieces === streamedCall.arguments, JSON.stringify([pieces, final.output]));
}

async function structuredAndStored(client) {
  const schema = { type: "object", properties: { answer: { type: "string", maxLength: 8 }, sure: { type: "boolean" } },
    required: ["answer", "sure"], additionalProperties: false };
  const response = await client.responses.create({ model: "k3", input: "Answer in JSON.", reasoning: { effort: "none" },
    text: { format: { type: "json_schema", name: "answer", schema, strict: true } }, max_output_tokens: 80, temperature: 1 });
  let parsed = null;
  try {
    parsed = JSON.parse(response.output_text);
  } catch (error) {
    parsed = null;
  }
  check("text.format json_schema: the output text is a valid document", response.status === "completed" && parsed &&
    typeof parsed.answer === "string" && parsed.answer.length <= 8 && typeof parsed.sure === "boolean", JSON.stringify(response));

  const stored = await client.responses.retrieve(response.id);
  check("retrieve: the stored response", stored.id === response.id &&
    JSON.stringify(stored.output) === JSON.stringify(response.output), JSON.stringify(stored));
  await client.responses.del(response.id);
  try {
    await client.responses.retrieve(response.id);
    check("a deleted response is gone", false, "no error");
  } catch (error) {
    check("a deleted response: NotFoundError", error instanceof OpenAI.NotFoundError && error.status === 404, String(error));
  }
  try {
    await client.responses.create({ model: "k3", input: "x", previous_response_id: "resp_missing" });
    check("an unknown previous_response_id is refused", false, "no error");
  } catch (error) {
    check("an unknown previous_response_id: NotFoundError", error instanceof OpenAI.NotFoundError && /resp_missing/.test(error.message),
      String(error));
  }
  try {
    await client.responses.create({ model: "k3", input: [{ type: "web_search_call" }] });
    check("an unknown item is refused", false, "no error");
  } catch (error) {
    check("an unknown item: BadRequestError", error instanceof OpenAI.BadRequestError && /web_search_call/.test(error.message),
      String(error));
  }
}

async function main() {
  const { proc, url } = await startServer(binary, ["--model", modelDir, "--served-model-name", "k3", "--kv-cache-gb", "0.05"]);
  const client = new OpenAI({ apiKey: "none", baseURL: url + "/v1", maxRetries: 0 });
  try {
    await createAndStream(client);
    await functionCalls(client);
    await structuredAndStored(client);
  } finally {
    await stopServer(proc);
  }
}

run(main);
