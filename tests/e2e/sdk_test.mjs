// The official OpenAI Node SDK (openai@6) against gem serve (scripted backend): model listing,
// streamed text with reasoning, a tool-call round trip, a non-streamed call, a 400, an abort.
// Run by `gem agent ... -- node sdk_test.mjs`, which sets OPENAI_BASE_URL and OPENAI_API_KEY.
import OpenAI from "openai";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 });
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Get the current weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
  },
}];

async function collect(stream) {
  const out = { content: "", reasoning: "", calls: [], finish: null, usage: null, roles: 0, ids: new Set() };
  for await (const chunk of stream) {
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    const d = choice.delta;
    if (d.role) out.roles++;
    if (d.content) out.content += d.content;
    if (d.reasoning_content) out.reasoning += d.reasoning_content;  // not in the SDK's types
    for (const tc of d.tool_calls ?? []) {
      const call = (out.calls[tc.index] ??= { id: "", name: "", arguments: "" });
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.name = tc.function.name;
      if (tc.function?.arguments) call.arguments += tc.function.arguments;
    }
    if (choice.finish_reason) out.finish = choice.finish_reason;
  }
  return out;
}

const models = await client.models.list();
assert.equal(models.data[0].id, "gem-e2e");
assert.equal(models.data[0].status, undefined);

// Streamed text with reasoning.
let r = await collect(await client.chat.completions.create({
  model: "gem-e2e", stream: true, stream_options: { include_usage: true },
  messages: [{ role: "user", content: "Say hello" }],
}));
assert.equal(r.content, "Hello there, friend!");
assert.equal(r.reasoning, "The user greets me.");
assert.equal(r.finish, "stop");
assert.equal(r.roles, 1);
assert.equal(r.ids.size, 1);
assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
console.log("ok: streamed text and reasoning");

// Tool-call round trip.
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
r = await collect(await client.chat.completions.create({
  model: "gem-e2e", stream: true, stream_options: { include_usage: true }, messages, tools,
}));
assert.equal(r.finish, "tool_calls");
assert.equal(r.calls.length, 1);
assert.equal(r.calls[0].name, "get_weather");
assert.deepEqual(JSON.parse(r.calls[0].arguments), { city: "Paris", days: 2 });
const firstPrompt = r.usage.prompt_tokens;
messages.push({ role: "assistant", content: null, tool_calls: r.calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) });
messages.push({ role: "tool", tool_call_id: r.calls[0].id, content: "18C cloudy" });
r = await collect(await client.chat.completions.create({
  model: "gem-e2e", stream: true, stream_options: { include_usage: true }, messages, tools,
}));
assert.equal(r.content, "It is 18C and cloudy in Paris.");
assert.equal(r.finish, "stop");
assert.equal(r.usage.prompt_tokens_details.cached_tokens, firstPrompt);
console.log("ok: tool-call round trip (second prompt reused %d cached tokens)", firstPrompt);

// The SDK's own stream helper accumulates tool calls the same way.
const helper = client.chat.completions.stream({ model: "gem-e2e", messages: [{ role: "user", content: "weather in Paris" }], tools });
const final = await helper.finalChatCompletion();
assert.equal(final.choices[0].message.tool_calls[0].function.name, "get_weather");
assert.deepEqual(JSON.parse(final.choices[0].message.tool_calls[0].function.arguments), { city: "Paris", days: 2 });
console.log("ok: SDK stream helper");

// Non-streamed.
const done = await client.chat.completions.create({
  model: "gem-e2e", messages: [{ role: "user", content: "Count to ten" }], max_tokens: 4,
  temperature: 0.2, seed: 1, reasoning_effort: "none",
});
assert.equal(done.object, "chat.completion");
assert.equal(done.choices[0].finish_reason, "length");
assert.equal(done.usage.completion_tokens, 4);
assert.equal(done.choices[0].message.content, "one two three four");
console.log("ok: non-streamed");

// A client mistake is a BadRequestError carrying the server's message.
await assert.rejects(
  client.chat.completions.create({ model: "gem-e2e", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] }),
  (e) => e.status === 400 && /image input is not supported/.test(e.message));
console.log("ok: 400 for image input");

// Abort mid-stream, then the server still answers.
// Leaving the loop is the SDK's documented way to abort: its iterator's return() aborts the
// request. (Calling AbortController.abort() inside the loop can leave the SDK's next() pending
// forever when the abort lands between buffered chunks: node then exits 13, seen under load.)
const aborted = await client.chat.completions.create({ model: "gem-e2e", stream: true, messages: [{ role: "user", content: "Count" }] });
let seen = 0;
for await (const _ of aborted) { if (++seen === 1) break; }
assert.equal(seen, 1);
assert.ok(aborted.controller.signal.aborted, "leaving the loop aborts the request");
const after = await client.chat.completions.create({ model: "gem-e2e", messages: [{ role: "user", content: "Say hello" }] });
assert.equal(after.choices[0].message.content, "Hello there, friend!");
console.log("ok: abort, then served again");
