#!/usr/bin/env node
// The web console in a real browser (headless Chromium, driven by
// playwright-core), for `console_browser.rs`, which prepares the store,
// starts `tinyagents console` and checks the store afterwards.
//
//   SCENARIO=approve|deny|doubt|guard|withheld node console.spec.mjs
//
// Environment: CONSOLE_URL (the URL the console printed, with its token),
// CHROMIUM (the browser), PLAYWRIGHT_CORE (a node_modules holding
// playwright-core), RUN (the run the scenario acts on), and by scenario
// SESSION, KEY (the idempotency key of the call in doubt), SECRET (an
// argument value that must not be shown), SHOTS (where screenshots go).
// Exits 0 when every check held; otherwise prints the failed check.

import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const { chromium } = await import(
  pathToFileURL(path.join(env("PLAYWRIGHT_CORE"), "playwright-core", "index.mjs")).href
);

const url = new URL(env("CONSOLE_URL"));
const origin = url.origin;
const run = process.env.RUN ?? "";
const step = (text) => console.log(`- ${text}`);

// A full-page screenshot, 1280 wide, when SHOTS names a directory.
async function shot(page, name) {
  if (!process.env.SHOTS) return;
  fs.mkdirSync(process.env.SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(process.env.SHOTS, `${name}.png`), fullPage: true });
  step(`screenshot ${name}.png`);
}

// Opens the console with its token: the token becomes a cookie and
// leaves the address.
async function signIn(page) {
  await page.goto(url.href);
  assert.equal(new URL(page.url()).search, "", "the token leaves the address");
}

// Clicks the form's button; its POST to `action` must be taken (a 303 to
// the next page).
async function submit(page, form, action) {
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && new URL(r.url()).pathname === action),
    form.locator("button.record").click(),
  ]);
  const sent = await answer.request().headerValue("origin");
  const said = await answer.text().catch(() => "");
  assert.equal(answer.status(), 303, `POST ${action} (Origin: ${sent}) answered ${answer.status()}: ${said}`);
}

const html = (page) => page.content();
const text = (locator) => locator.innerText();

// Opens the inbox and returns the waiting run's form.
async function inboxForm(page) {
  await page.goto(`${origin}/inbox`);
  const form = page.locator(`section.waiting-run[data-run="${run}"] form.decide`);
  await form.waitFor();
  return form;
}

const scenarios = {
  // Approve in the inbox; the console resumes the run; its tree follows live.
  async approve(page) {
    await page.goto(`${origin}/`);
    await page.locator(`tr[data-run="${run}"][data-status="waiting"]`).waitFor();
    await shot(page, "runs");
    const form = await inboxForm(page);
    const call = form.locator('fieldset.waiting[data-call="p1"]');
    assert.match(await text(call.locator("div.arguments")), /"to": "acme"/);
    // Nothing is chosen for a person: a lone call must be approved or denied.
    const approve = call.locator('input[name="call:p1"][value="approve"]');
    assert.ok(!(await approve.isChecked()), "no decision is chosen beforehand");
    assert.ok(await approve.evaluate((input) => input.required), "a choice is required");
    await approve.check();
    await shot(page, "inbox");
    // The run page's script fetches the tree again on each change.
    let fragments = 0;
    page.on("response", (r) => (fragments += r.url() === `${origin}/runs/${run}/tree` ? 1 : 0));
    await form.locator('input[name="reason"]').fill("invoice 42 checked");
    await submit(page, form, "/decide");
    await page.waitForURL(`${origin}/runs/${run}`);
    step("recorded; on the run page");
    assert.match(await text(page.locator("p#host-said")), /resuming in process \d+/);
    const p1 = page.locator('li.node.call[data-call="p1"]');
    const first = await p1.getAttribute("data-state");
    assert.notEqual(first, "done", "the slow payment is not done when the page opens");
    assert.equal(await page.locator("section#live").getAttribute("data-live"), "on");
    // A mark on this document: it is gone once the page reloads itself.
    await page.evaluate(() => (window.stillTheSamePage = true));
    await page.locator('li.node.call[data-call="p1"][data-state="running"]').waitFor({ timeout: 20_000 });
    assert.ok(await page.evaluate(() => window.stillTheSamePage), "running is shown by the live tree");
    step(`p1 went from ${first} to running without a reload`);
    await page.locator('li.node.call[data-call="p1"][data-state="done"]').waitFor({ timeout: 30_000 });
    await page.waitForFunction(
      () => document.getElementById("run-status")?.textContent === "finished",
      null,
      { timeout: 30_000 },
    );
    assert.ok(fragments > 0, "the tree was never fetched live");
    step(`p1 done, the run finished (${fragments} live updates of the tree)`);
    assert.equal(await page.locator("section#live").getAttribute("data-live"), null);
    const decided = page.locator('table.decisions tr[data-call="p1"]');
    assert.match(await text(decided), /approved\s+alice\s.*invoice 42 checked/s);
    await page.locator("details.arguments").first().waitFor();
    await shot(page, "run");
    await page.goto(`${origin}/sessions/${env("SESSION")}`);
    const transcript = await text(page.locator("ol.transcript"));
    assert.match(transcript, /acme/);
    assert.match(transcript, /paid/);
    await shot(page, "session");
  },

  // Deny in the inbox: the call fails with the denial, nothing is paid.
  async deny(page) {
    const form = await inboxForm(page);
    await form.locator('input[name="call:p1"][value="deny"]').check();
    await form.locator('input[name="reason"]').fill("acme is not a customer");
    await submit(page, form, "/decide");
    await page.waitForURL(`${origin}/runs/${run}`);
    await page.waitForFunction(
      () => document.getElementById("run-status")?.textContent === "finished",
      null,
      { timeout: 30_000 },
    );
    const p1 = page.locator('li.node.call[data-call="p1"][data-state="failed"]');
    await p1.waitFor();
    assert.match(await text(p1.locator(".why.failed")), /acme is not a customer/);
    const decided = page.locator('table.decisions tr[data-call="p1"]');
    assert.match(await text(decided), /denied\s+alice\s.*acme is not a customer/s);
    step("p1 failed with the denial");
  },

  // A call in doubt: listed with its key, resolved in the page, gone.
  async doubt(page) {
    await page.goto(`${origin}/doubt`);
    const doubt = page.locator(`section.doubt[data-run="${run}"][data-call="p2"]`);
    await doubt.waitFor();
    assert.equal(await text(doubt.locator("code.key")), env("KEY"));
    assert.equal(await doubt.locator("button.reconcile").count(), 1);
    await shot(page, "doubt");
    const form = doubt.locator("form.resolve");
    await form.locator('input[name="effect"][value="happened"]').check();
    await form.locator('input[name="result"]').fill("paid acme");
    await form.locator('input[name="note"]').fill("seen in the bank statement");
    await submit(page, form, "/resolve");
    await page.waitForURL(`${origin}/doubt`);
    await page.locator("#doubt-empty").waitFor();
    assert.equal(await doubt.count(), 0);
    step("resolved; /doubt is empty");
    await page.goto(`${origin}/runs/${run}`);
    const found = page.locator('li.node.call[data-call="p2"] .why.found').first();
    assert.match(await text(found), /found by alice.*seen in the bank statement/);
  },

  // No token: 401. A form of another site posting to /decide: refused,
  // nothing recorded.
  async guard(page, browser) {
    const stranger = await browser.newPage(); // a context of its own: no cookie
    const answer = await stranger.goto(`${origin}/inbox`);
    assert.equal(answer.status(), 401);
    assert.match(await stranger.title(), /^This console needs its token/);
    assert.doesNotMatch(await html(stranger), new RegExp(run));
    await stranger.close();
    step("no token: 401");

    const evil = http.createServer((_, res) => {
      res.setHeader("content-type", "text/html");
      res.end(`<!doctype html><title>win a prize</title>
<form method="post" action="${origin}/decide">
<input name="run" value="${run}"><input name="call:p1" value="approve">
<input name="reason" value="from another site"></form>
<script>document.forms[0].submit()</script>`);
    });
    await new Promise((done) => evil.listen(0, "127.0.0.1", done));
    try {
      const evilOrigin = `http://127.0.0.1:${evil.address().port}`;
      const posted = page.waitForResponse((r) => r.url() === `${origin}/decide`);
      await page.goto(`${evilOrigin}/`);
      const response = await posted;
      assert.equal(response.status(), 403);
      await page.waitForURL(`${origin}/decide`);
      assert.match(await page.title(), /^Refused: another site/);
      step("a form of another site: 403");
    } finally {
      evil.close();
    }
    const form = await inboxForm(page);
    assert.ok(await form.locator('input[name="call:p1"][value="approve"]').isVisible());
    step("the run still waits");
  },

  // Capture off: no argument value in the inbox or the run page.
  async withheld(page) {
    const secret = env("SECRET");
    const form = await inboxForm(page);
    assert.match(await text(form.locator("p.withheld")), /Arguments withheld/);
    assert.equal(await form.locator("div.arguments").count(), 0);
    assert.ok(!(await html(page)).includes(secret), "the inbox shows the argument");
    await page.goto(`${origin}/runs/${run}`);
    await page.locator('li.node.call[data-call="p1"]').waitFor();
    assert.match(await text(page.locator("p.withheld")), /Arguments withheld/);
    assert.match(await text(page.locator("#tree-summary")), /payloads not captured/);
    assert.equal(await page.locator("details.arguments").count(), 0);
    assert.ok(!(await html(page)).includes(secret), "the run page shows the argument");
    step("no argument shown");
  },
};

const scenario = scenarios[env("SCENARIO")];
if (!scenario) throw new Error(`no scenario ${process.env.SCENARIO}`);
const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  headless: true,
  args: ["--no-sandbox"],
});
const bound = setTimeout(() => {
  console.error("timed out after 90 s");
  browser.close().finally(() => process.exit(2));
}, 90_000);
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
context.setDefaultTimeout(15_000);
const page = await context.newPage();
try {
  await signIn(page);
  await scenario(page, browser);
  step(`${process.env.SCENARIO}: every check held`);
} catch (error) {
  console.error(error);
  // Where the browser was, and what it showed.
  const shown = await page.locator("body").innerText({ timeout: 1_000 }).catch(() => "?");
  console.error(`\nthe page at ${page.url()} shows:\n${shown}`);
  process.exitCode = 1;
} finally {
  clearTimeout(bound);
  await browser.close();
}
