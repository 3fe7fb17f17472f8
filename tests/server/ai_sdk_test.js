// Drives `mlaserve serve` (models/kjv) with the Vercel AI SDK's generateObject through
// @ai-sdk/openai-compatible (structured outputs: response_format json_schema from zod 4's own
// JSON Schema), on 20 zod schemas with bounds, regexes, emails, UUIDs, datetimes, unions,
// nullable fields and nested arrays: every object comes back, and the SDK has validated it with
// the same zod schema, so every output is valid.
// Usage: node ai_sdk_test.js WORK_DIR MLASERVE MODEL_DIR
const { pathToFileURL } = require("url");
const { check, startServer, stopServer, run } = require("./harness");

const [work, binary, modelDir] = process.argv.slice(2);
const load = (name) => import(pathToFileURL(require.resolve(name, { paths: [work] })).href);

function schemas(z) {
  const word = z.string().regex(/^[a-z]{1,8}$/);
  return {
    bounded_numbers: z.object({ age: z.number().int().min(0).max(120), score: z.number().min(0).max(1) }),
    positive_integers: z.object({ count: z.number().int().positive(), below: z.number().int().lt(-3).gte(-50) }),
    exclusive_bounds: z.object({ ratio: z.number().gt(0).lt(1), temperature: z.number().gte(-40.5).lte(50.25) }),
    string_lengths: z.object({ code: z.string().min(2).max(6), note: z.string().max(20) }),
    regex: z.object({ sku: z.string().regex(/^[A-Z]{3}-\d{4}$/), version: z.string().regex(/^v\d{1,2}\.\d{1,2}(\.\d{1,2})?$/) }),
    email: z.object({ to: z.email(), cc: z.array(z.email()).max(2) }),
    uuid: z.object({ id: z.uuid(), parent: z.uuid().nullable() }),
    datetime: z.object({ at: z.iso.datetime(), day: z.iso.date() }),
    enums: z.object({ color: z.enum(["red", "green", "blue"]), size: z.literal("large") }),
    union_of_primitives: z.object({ value: z.union([z.number().int().max(99), z.boolean(), z.literal("none")]) }),
    union_of_objects: z.object({ shape: z.union([z.object({ kind: z.literal("circle"), r: z.number().int().min(1).max(9) }),
      z.object({ kind: z.literal("square"), side: z.number().int().min(1).max(9) })]) }),
    nullable: z.object({ title: word.nullable(), pages: z.number().int().min(1).max(999).nullable() }),
    optional: z.object({ a: word, b: word.optional(), c: z.boolean().optional() }),
    nested_arrays: z.object({ grid: z.array(z.array(z.number().int().min(0).max(9)).min(1).max(3)).min(1).max(3) }),
    array_bounds: z.object({ tags: z.array(word).min(1).max(4) }),
    nested_objects: z.object({ author: z.object({ name: word, born: z.number().int().min(1000).max(2024) }),
      publisher: z.object({ city: word }) }),
    records: z.object({ counts: z.record(word, z.number().int().min(0).max(9)) }),
    tuples: z.object({ point: z.tuple([z.number().int().min(-9).max(9), z.number().int().min(-9).max(9)]) }),
    mixed: z.object({ id: z.uuid(), email: z.email(), when: z.iso.datetime(), level: z.number().int().min(1).max(5),
      labels: z.array(z.enum(["a", "b"])).max(2), parent: z.object({ id: z.uuid() }).nullable() }),
    booleans_and_null: z.object({ ok: z.boolean(), nothing: z.null(), maybe: z.boolean().nullable() }),
  };
}

async function main() {
  const { generateObject } = await load("ai");
  const { createOpenAICompatible } = await load("@ai-sdk/openai-compatible");
  const { z } = await load("zod");
  const { proc, url } = await startServer(binary, ["--model", modelDir, "--served-model-name", "kjv", "--kv-cache-gb", "0.1"]);
  const provider = createOpenAICompatible({ name: "mlaserve", baseURL: url + "/v1", supportsStructuredOutputs: true });
  try {
    const all = schemas(z);
    check("20 schemas", Object.keys(all).length === 20, String(Object.keys(all).length));
    let seed = 0;
    for (const [name, schema] of Object.entries(all)) {
      try {
        const { object } = await generateObject({ model: provider("kjv"), schema, schemaName: name, prompt: "And the king said",
          temperature: 1, seed: ++seed, maxOutputTokens: 900, maxRetries: 0 });
        check(`${name}: a valid object`, schema.safeParse(object).success, JSON.stringify(object));
      } catch (error) {
        check(`${name}: a valid object`, false, `${error.name}: ${error.message} ${error.text || ""}`);
      }
    }
  } finally {
    await stopServer(proc);
  }
}

run(main);
