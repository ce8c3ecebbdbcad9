// response_format against the tiny test model (random weights, real CPU forward) through the
// official OpenAI SDK: whatever the model would say, the JSON constraint makes every reply parse
// and validate against its schema, checked with Ajv (an independent JSON Schema validator),
// streamed and not, also when max_tokens cuts the reply short. Also logprobs through the SDK, a
// text completion, and a schema with an unsupported keyword (400 naming it). Run by
// `gem agent -m tiny-q4_0.gguf --backend cpu -- node json_schema_test.mjs`.
import OpenAI from "openai";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 });
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const model = "gem-json";

const schemas = {
  person: {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 24 },
      age: { type: "integer" },
      email: { anyOf: [{ type: "string" }, { type: "null" }] },
      tags: { type: "array", items: { type: "string", enum: ["admin", "user", "guest"] }, maxItems: 3 },
    },
    required: ["name", "age", "email"],
    additionalProperties: false,
  },
  points: {
    $defs: { point: { type: "object", properties: { x: { type: "number" }, y: { type: "number" } }, required: ["x", "y"] } },
    type: "array", items: { $ref: "#/$defs/point" }, minItems: 1, maxItems: 4,
  },
  flags: {
    type: "object",
    properties: { ok: { type: "boolean" }, level: { enum: [1, 2, 3] }, note: { const: "fixed" } },
    required: ["ok", "level", "note"],
  },
  nested: {
    type: "object",
    properties: {
      meta: { type: "object", properties: { id: { type: "string", minLength: 2 } }, required: ["id"] },
      items: { type: "array", items: { type: ["integer", "null"] } },
    },
    required: ["meta", "items"],
  },
  bounded: {
    type: "object",
    properties: {
      score: { type: "number", exclusiveMinimum: 0, maximum: 10 },
      rank: { type: "integer", minimum: 1, maximum: 100 },
      code: { type: "string", pattern: "^[A-Z]{3}-\\d{2}$" },
      day: { type: "string", format: "date" },
      mail: { type: "string", format: "email" },
    },
    required: ["score", "rank", "code", "day", "mail"],
    additionalProperties: false,
  },
  shapes: {
    $defs: {
      shape: {
        oneOf: [
          { type: "object", properties: { kind: { const: "circle" }, r: { type: "number", minimum: 0 } }, required: ["kind", "r"] },
          { type: "object", properties: { kind: { const: "group" }, parts: { type: "array", items: { $ref: "#/$defs/shape" }, maxItems: 3 } }, required: ["kind", "parts"] },
        ],
      },
    },
    allOf: [{ $ref: "#/$defs/shape" }],
  },
};

async function ask(schema, { stream, max_tokens, thinking }) {
  const body = {
    model, max_tokens,
    messages: [{ role: "user", content: `Reply in JSON. (${Math.random()})` }],
    response_format: { type: "json_schema", json_schema: { name: "reply", schema } },
    chat_template_kwargs: { enable_thinking: thinking },
  };
  if (!stream) {
    const r = await client.chat.completions.create(body);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  let text = "", finish = null;
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish };
}

let n = 0;
for (const [name, schema] of Object.entries(schemas)) {
  const validate = ajv.compile(schema);
  for (const stream of [false, true]) {
    for (const max_tokens of [48, 200]) {
      for (const thinking of [false, true]) {
        const { text, finish } = await ask(schema, { stream, max_tokens, thinking });
        let value;
        try {
          value = JSON.parse(text);
        } catch (e) {
          assert.fail(`${name} (stream ${stream}, max_tokens ${max_tokens}): not JSON: ${text}`);
        }
        assert.ok(validate(value), `${name}: ${JSON.stringify(validate.errors)} in ${text}`);
        assert.equal(finish, "stop", `${name}: finish ${finish}`);
        n++;
      }
    }
  }
}
console.log(`ok: ${n} constrained replies parse and validate (Ajv)`);

// json_object: an object, whatever it holds.
{
  const r = await client.chat.completions.create({
    model, max_tokens: 64, messages: [{ role: "user", content: "any object" }],
    response_format: { type: "json_object" },
  });
  const v = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof v, "object");
  assert.ok(v !== null && !Array.isArray(v));
  console.log("ok: json_object");
}

// An unsupported keyword, a bad pattern, overlapping oneOf options: a 400 naming the path.
for (const [schema, want] of [
  [{ type: "object", patternProperties: { a: {} } }, /response_format\.json_schema\.schema\.patternProperties/],
  [{ type: "string", pattern: "(a)\\1" }, /response_format\.json_schema\.schema\.pattern: backreferences/],
  [{ oneOf: [{ type: "number" }, { type: "integer" }] }, /response_format\.json_schema\.schema\.oneOf: options 0 and 1/],
]) {
  await assert.rejects(
    client.chat.completions.create({
      model, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "n", schema } },
    }),
    (e) => e.status === 400 && want.test(e.message),
  );
}
console.log("ok: unsupported keyword, bad pattern and overlapping oneOf named in a 400");

// logprobs through the SDK: the entries' tokens join to the content.
{
  const r = await client.chat.completions.create({
    model, max_tokens: 12, messages: [{ role: "user", content: "hello" }], logprobs: true, top_logprobs: 2,
    chat_template_kwargs: { enable_thinking: false },
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
  for (const e of content) {
    assert.ok(e.logprob <= 0 && e.top_logprobs.length === 2);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  console.log(`ok: logprobs (${content.length} tokens)`);
}

// A text completion (the legacy endpoint).
{
  const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8 });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  assert.equal(r.usage.completion_tokens, 8);
  console.log("ok: /v1/completions");
}
