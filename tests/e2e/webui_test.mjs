// The chat page at / in a real headless browser: Debian's chromium (/usr/bin/chromium, installed
// by scripts/setup.sh) driven by playwright-core, against gem serve with the scripted backend
// (webui_script.json: 10 ms a token, so replies stream visibly and a long one can be stopped).
// Run by `gem agent ... --api-key K -- node webui_test.mjs` (OPENAI_BASE_URL, OPENAI_API_KEY).
// GEM_CHROMIUM overrides the browser; GEM_WEBUI_SHOTS=DIR saves screenshots there.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

const base = process.env.OPENAI_BASE_URL;
const key = process.env.OPENAI_API_KEY;
if (!base || !key) {
  console.error("FAIL: run me through gem agent (OPENAI_BASE_URL and OPENAI_API_KEY unset)");
  process.exit(1);
}
const root = base.replace(/\/v1$/, "");
const exe = process.env.GEM_CHROMIUM || "/usr/bin/chromium";
if (!fs.existsSync(exe)) {
  console.error(`FAIL: no browser at ${exe}: the chat page test needs Debian's chromium package ` +
                "(scripts/setup.sh installs it; GEM_CHROMIUM names another Chromium binary)");
  process.exit(1);
}
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (e) {
  console.error("FAIL: playwright-core is not installed in tests/e2e (run scripts/setup.sh): " + e.message);
  process.exit(1);
}
const shots = process.env.GEM_WEBUI_SHOTS;
if (shots) fs.mkdirSync(shots, { recursive: true });

// Chromium on a machine with no outside network: no background connections, no GPU, no sandbox
// (tests run as root); playwright gives it a fresh, empty user-data-dir.
const browser = await chromium.launch({
  executablePath: exe, headless: true, timeout: 60000,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"],  // containers often have a tiny /dev/shm
});
const problems = [];
let failed = true;
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
  page.setDefaultTimeout(20000);
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => {
    // 401s before the key is entered and the 400 of step 8 are expected; anything else (a CSP refusal above all) is not.
    if (m.type() === "error" && !/status of 40[01]/.test(m.text())) problems.push("console: " + m.text());
  });
  const bodies = [];
  page.on("request", (r) => { if (r.method() === "POST") bodies.push(JSON.parse(r.postData())); });
  const shot = async (name) => { if (shots) await page.screenshot({ path: path.join(shots, name + ".png"), fullPage: true }); };
  const last = (sel) => page.locator(sel).last();
  const send = async (text) => {
    await page.fill("#input", text);
    await page.press("#input", "Enter");
  };
  // The newest assistant reply once it is complete.
  const settled = async () => {
    const box = last(".msg.assistant");
    await page.waitForFunction(() => {
      const all = document.querySelectorAll(".msg.assistant");
      const b = all[all.length - 1];
      return b && !b.classList.contains("streaming");
    });
    return box;
  };

  // 1. The page: HTML with a strict CSP, served without the API key (it holds no data).
  const res = await page.goto(root + "/");
  assert.equal(res.status(), 200);
  assert.match(res.headers()["content-type"], /^text\/html/);
  const csp = res.headers()["content-security-policy"];
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /connect-src 'self'/);
  assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/]+=*'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  const html = await res.text();
  assert.ok(html.length < 40000, `page is ${html.length} bytes`);
  assert.doesNotMatch(html, /(src|href)="(https?:)?\/\//, "an external URL in the page");
  console.log("ok: page served (%d bytes) with CSP", html.length);

  // 2. The server wants a key: the page says so; with the key from Settings it shows the model.
  await page.waitForFunction(() => /401/.test(document.getElementById("status-text").textContent));
  assert.equal(await page.locator("#settings").evaluate((d) => d.open), true, "settings open on 401");
  await page.fill("#api-key", key);
  await page.press("#api-key", "Tab");  // change event
  await page.waitForFunction(() => document.getElementById("status-text").textContent === "ready");
  assert.equal(await page.textContent("#model"), "gem-webui");
  assert.match(await page.textContent("#ctx"), /^4,096/);
  await page.locator("#settings summary").click();  // close it again
  await shot("1-ready");
  console.log("ok: API key, model name and context shown");

  // 3. A streamed reply with reasoning, shown collapsed.
  await send("Say hello");
  let box = await settled();
  assert.equal(await box.locator(":scope > .text").textContent(), "Hello there, friend!");
  const reasoning = box.locator("details.reasoning");
  assert.equal(await reasoning.isVisible(), true);
  assert.equal(await reasoning.evaluate((d) => d.open), false, "reasoning starts collapsed");
  assert.equal(await reasoning.locator(".text").isVisible(), false);
  await reasoning.locator("summary").click();
  assert.equal(await reasoning.locator(".text").textContent(), "The user greets me.");
  await shot("2-reasoning-open");
  assert.equal(await last(".msg.user .text").textContent(), "Say hello");
  assert.equal(bodies.at(-1).stream, true);
  assert.equal(bodies.at(-1).messages.at(-1).content, "Say hello");
  await page.waitForFunction(() => !document.getElementById("usage-wrap").hidden);
  assert.match(await page.textContent("#usage"), /\/ 4,096 tokens/);
  console.log("ok: streamed reply, reasoning collapsed");

  // 3b. A long prompt: the page shows the server's progress through it (return_progress; the
  //     server reads prompts in tiles of 32 tokens here, 10 ms a token).
  await send("Say hello, " + "please ".repeat(200));
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll(".msg.assistant")].pop();
    return b && b.classList.contains("streaming") && /reading the prompt: \d+% of/.test(b.querySelector(".meta").textContent);
  });
  box = await settled();
  assert.equal(await box.locator(":scope > .text").textContent(), "Hello there, friend!");
  assert.equal(bodies.at(-1).return_progress, true);
  console.log("ok: prompt progress shown");

  // 4. Model text is text: markup in a reply is shown, never run.
  await send("Show markup");
  box = await settled();
  assert.equal(await box.locator(":scope > .text").textContent(),
               "<img src=x onerror=\"document.title='pwned'\"> & <b>bold</b>");
  assert.equal(await page.locator("#log img, #log b").count(), 0);
  assert.notEqual(await page.title(), "pwned");
  console.log("ok: markup in replies shown as text");

  // 5. A tool call (tools from Settings), shown with its name and arguments; the next message
  //    is its result, and the model answers from it.
  await page.click("#new-chat");
  assert.equal(await page.locator(".msg").count(), 0);
  await page.locator("#settings summary").click();
  await page.fill("#tools", "[not json");
  await send("What is the weather in Paris?");
  await page.waitForFunction(() => /Tools: not valid JSON/.test(document.getElementById("hint").textContent));
  assert.equal(await page.locator(".msg").count(), 0, "nothing sent with broken tools");
  await page.fill("#tools", JSON.stringify([{ type: "function", function: {
    name: "get_weather", description: "Get the current weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] } } }]));
  await page.press("#input", "Enter");  // the text is still there
  box = await settled();
  const call = box.locator(".tool-call");
  assert.equal(await call.count(), 1);
  assert.equal(await call.locator(".name").textContent(), "get_weather");
  assert.deepEqual(JSON.parse(await call.locator(".args").textContent()), { city: "Paris", days: 2 });
  assert.match(await box.locator(".meta").textContent(), /finish: tool_calls/);
  assert.match(await page.textContent("#hint"), /get_weather/);
  assert.equal(await page.textContent("#send"), "Send result");
  await shot("3-tool-call");
  await send("18C cloudy");
  box = await settled();
  assert.equal(await box.locator(":scope > .text").textContent(), "It is 18C and cloudy in Paris.");
  assert.equal(await last(".msg.tool .text").textContent(), "18C cloudy");
  const sentMsgs = bodies.at(-1).messages;
  assert.equal(sentMsgs.at(-2).role, "assistant");
  assert.equal(sentMsgs.at(-2).tool_calls[0].function.name, "get_weather");
  assert.equal(sentMsgs.at(-1).role, "tool");
  assert.equal(sentMsgs.at(-1).tool_call_id, sentMsgs.at(-2).tool_calls[0].id);
  assert.equal(bodies.at(-1).tools[0].function.name, "get_weather");
  console.log("ok: tool call shown, tool result round trip");

  // 6. Stop: text streams in while the reply is still running, Stop ends it, the server keeps
  //    serving (the next reply comes at once, not after the rest of the stopped one: the server
  //    cancelled it when the browser hung up).
  await page.fill("#tools", "");
  await page.click("#new-chat");
  await send("Tell me a long story");
  box = last(".msg.assistant");
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll(".msg.assistant")].pop();
    return b && b.classList.contains("streaming") && b.querySelector(":scope > .text").textContent.length > 40;
  });
  const partial = await box.locator(":scope > .text").textContent();
  assert.match(partial, /^Once upon a time, the quick/);
  assert.equal(await box.evaluate((b) => b.classList.contains("streaming")), true, "still streaming");
  assert.equal(await page.isEnabled("#stop"), true);
  assert.equal(await page.isEnabled("#send"), false);
  await shot("4-streaming");
  await page.click("#stop");
  const stoppedAt = Date.now();
  await settled();
  assert.match(await box.locator(".meta").textContent(), /stopped/);
  assert.equal(await page.isEnabled("#stop"), false);
  const kept = await box.locator(":scope > .text").textContent();
  await page.waitForTimeout(500);
  assert.equal(await box.locator(":scope > .text").textContent(), kept, "no text after Stop");
  assert.ok(kept.length < 3000, `stopped after ${kept.length} characters (the whole story is ~5,700)`);
  await send("Say hello");
  box = await settled();
  assert.equal(await box.locator(":scope > .text").textContent(), "Hello there, friend!");
  const after = Date.now() - stoppedAt;
  // The whole story takes over 10 s at 10 ms a token; the new reply must not wait for it.
  assert.ok(after < 8000, `the reply after Stop took ${after} ms`);
  assert.equal(bodies.at(-1).messages.at(-2).content, kept, "the stopped text stays in the conversation");
  console.log("ok: streamed text seen mid-reply, Stop, served again after %d ms", after);

  // 7. System prompt and thinking switch reach the request.
  await page.fill("#system", "You are terse.");
  await page.uncheck("#thinking");
  await send("Say hello");
  await settled();
  assert.deepEqual(bodies.at(-1).messages[0], { role: "system", content: "You are terse." });
  assert.deepEqual(bodies.at(-1).chat_template_kwargs, { enable_thinking: false });
  console.log("ok: system prompt and thinking off sent");

  // 8. A request the server refuses: its message is shown and the text comes back to edit.
  await page.click("#new-chat");
  const huge = "lorem ipsum ".repeat(6000);
  await send(huge);
  box = await settled();
  await page.waitForSelector(".msg.assistant .error[role=alert]");
  assert.match(await box.locator(".error").textContent(), /HTTP 400: .*context/);
  assert.equal(await page.inputValue("#input"), huge);
  assert.match(await last(".msg.user .role").textContent(), /not sent/);
  await shot("5-error");
  console.log("ok: server error shown");

  // 9. Narrow screens: nothing wider than the viewport.
  await page.setViewportSize({ width: 360, height: 720 });
  await page.click("#new-chat");
  await page.fill("#system", "");
  await page.check("#thinking");
  await page.locator("#settings summary").click();  // closed
  await send("Say hello");
  await settled();
  await shot("6-narrow");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(overflow <= 0, `page ${overflow}px wider than a 360px screen`);
  console.log("ok: fits a 360px screen");

  assert.deepEqual(problems, [], "browser errors");
  failed = false;
} finally {
  if (failed && problems.length) console.error(problems.join("\n"));
  await browser.close();
}
console.log("ok: chat page");
