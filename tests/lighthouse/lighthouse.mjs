// Lighthouse on a list of pages, in one headless Chromium: what `nox -s site-audit` runs
// (tests/lighthouse/site_audit.py serves the built site, calls this, reads its output).
//
//   node lighthouse.mjs < job.json     # {"urls": [...], "presets": ["mobile", "desktop"],
//                                      #  "reports": "dir or null"}
//
// Prints one JSON line per page and preset: its performance and accessibility scores, its
// Largest Contentful Paint and Total Blocking Time (ms), the accessibility audits it fails,
// and where its main-thread time went. With "reports", each full Lighthouse report (JSON)
// and Chromium's trace of the load are written there too. Chromium is Debian's (CHROME_PATH, default /usr/bin/chromium); the
// pages are on 127.0.0.1, and nothing else is fetched.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as chromeLauncher from "chrome-launcher";
import lighthouse from "lighthouse";
import desktopConfig from "lighthouse/core/config/desktop-config.js";

const job = JSON.parse(readFileSync(0, "utf8"));
const CHROME_FLAGS = [
  "--headless=new",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];
// Lighthouse's own presets: mobile is its default (a mid-range phone on a slow 4G network,
// simulated), desktop its desktop config.
const CONFIGS = { mobile: undefined, desktop: desktopConfig };

const chrome = await chromeLauncher.launch({
  chromePath: process.env.CHROME_PATH || "/usr/bin/chromium",
  chromeFlags: CHROME_FLAGS,
});
let failed = false;
try {
  if (job.reports) mkdirSync(job.reports, { recursive: true });
  for (const url of job.urls) {
    for (const preset of job.presets) {
      const flags = {
        port: chrome.port,
        output: "json",
        logLevel: "error",
        onlyCategories: ["performance", "accessibility"],
        // The screenshot of the whole page only illustrates a report: a quarter of the time
        // an audit of a long page took here.
        disableFullPageScreenshot: true,
      };
      const result = await lighthouse(url, flags, CONFIGS[preset]);
      const lhr = result.lhr;
      if (job.reports) {
        const name = `${new URL(url).pathname.replace(/\W+/g, "_")}${preset}`;
        writeFileSync(join(job.reports, `${name}.json`), JSON.stringify(lhr));
        // Chromium's trace of the page load, for DevTools' Performance panel.
        const trace = result.artifacts.Trace ?? result.artifacts.traces?.defaultPass;
        if (trace) writeFileSync(join(job.reports, `${name}.trace.json`), JSON.stringify(trace));
      }
      process.stdout.write(`${JSON.stringify(summary(url, preset, lhr))}\n`);
    }
  }
} catch (error) {
  failed = true;
  console.error(error);
} finally {
  await chrome.kill();
}
process.exit(failed ? 1 : 0);

function summary(url, preset, lhr) {
  const audits = lhr.audits;
  const score = (category) => {
    const value = lhr.categories[category].score;
    return value === null ? null : Math.round(value * 100);
  };
  const a11yFailures = lhr.categories.accessibility.auditRefs
    .map((ref) => audits[ref.id])
    .filter((audit) => audit.score !== null && audit.score < 1)
    .map((audit) => audit.id);
  const mainThread = (audits["mainthread-work-breakdown"].details?.items ?? [])
    .map((item) => [item.groupLabel ?? item.group, Math.round(item.duration)]);
  const scripts = (audits["bootup-time"].details?.items ?? [])
    .map((item) => [item.url, Math.round(item.total), Math.round(item.scripting)]);
  return {
    url,
    preset,
    performance: score("performance"),
    accessibility: score("accessibility"),
    lcp: audits["largest-contentful-paint"].numericValue,
    tbt: audits["total-blocking-time"].numericValue,
    fcp: audits["first-contentful-paint"].numericValue,
    cls: audits["cumulative-layout-shift"].numericValue,
    si: audits["speed-index"].numericValue,
    a11yFailures,
    mainThread,
    scripts,
    lcpElement: audits["largest-contentful-paint-element"]?.details?.items?.[0]?.items?.[0]
      ?.node?.snippet ?? null,
    bytes: audits["total-byte-weight"].numericValue,
    benchmarkIndex: lhr.environment.benchmarkIndex,
    runWarnings: lhr.runWarnings,
  };
}
