#!/usr/bin/env node
// For benches/page.rs: loads a run's page in headless Chromium (driven by
// playwright-core) REPS times and prints the median time from the start
// of the navigation to the load event, and to the first paint of content.
//
// Environment: CONSOLE_URL (the console's URL with its token), PAGE (the
// run page's path), CHROMIUM, PLAYWRIGHT_CORE (a node_modules holding
// playwright-core), REPS.

import path from "node:path";
import { pathToFileURL } from "node:url";

const { chromium } = await import(
  pathToFileURL(path.join(process.env.PLAYWRIGHT_CORE, "playwright-core", "index.mjs")).href
);
const reps = Number(process.env.REPS ?? "10");
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(process.env.CONSOLE_URL);
  const target = new URL(process.env.PAGE, process.env.CONSOLE_URL).href;
  const loads = [];
  const paints = [];
  for (let i = 0; i < reps + 2; i++) {
    await page.goto(target, { waitUntil: "load" });
    const [nav] = await page.evaluate(() =>
      performance.getEntriesByType("navigation").map((n) => n.toJSON()),
    );
    const paint = await page.evaluate(
      () => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? 0,
    );
    if (i >= 2) {
      loads.push(nav.loadEventEnd - nav.startTime);
      paints.push(paint);
    }
  }
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(
    `chromium: median ${median(loads).toFixed(0)} ms to the load event, ` +
      `${median(paints).toFixed(0)} ms to the first contentful paint, over ${reps} loads`,
  );
} finally {
  await browser.close();
}
