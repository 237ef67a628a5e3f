// The web console in a real browser (Debian's chromium, driven by playwright-core), against a
// daemon of its own (needs root, as CI runs): the page goes live, the matrix shows two jobs
// taking turns with the running slice marked and the slot clock moving, a click without a
// token changes nothing, and with the user's token a click suspends a job (checked through
// `cosched ps`) and another changes a job's class. Screenshots are kept in target/browser/.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const binary = process.env.COSCHED || path.join(repo, "target/debug/cosched");
const artifacts = path.join(repo, "target/browser");
const parent = `cosched-browser-${process.pid}`;
const NOBODY = 65534;

let dir, socket, daemon, url;

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

function cosched(args, options = {}) {
  return execFileSync(binary, args, {
    env: { ...process.env, COSCHED_SOCKET: socket },
    encoding: "utf8",
    ...options,
  });
}

function job(id) {
  return JSON.parse(cosched(["ps", "--all", "--json"])).find((j) => j.id === id);
}

before(async () => {
  assert.equal(process.getuid(), 0, "the daemon needs root");
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "cosched-browser-"));
  fs.chmodSync(dir, 0o755);
  socket = path.join(dir, "cosched.sock");
  const logPath = path.join(dir, "daemon.log");
  const log = fs.openSync(logPath, "w");
  daemon = spawn(
    binary,
    ["daemon", "--state-dir", path.join(dir, "state"), "--socket", socket,
     "--cgroup-parent", parent, "--quantum-ms", "100", "--on-stop", "cancel", "--http", "0"],
    { stdio: ["ignore", "ignore", log] },
  );
  const deadline = Date.now() + 20_000;
  while (!url || !fs.existsSync(socket)) {
    const said = fs.readFileSync(logPath, "utf8");
    url = said.match(/web console at (http:\/\/\S+\/),/)?.[1];
    if (daemon.exitCode !== null || Date.now() > deadline) throw new Error(`no daemon: ${said}`);
    await sleep(50);
  }
});

after(async () => {
  const exited = new Promise((done) => daemon.once("exit", done));
  daemon.kill("SIGTERM");
  await exited;
  // A stop that cancels (--on-stop cancel) leaves no cgroup: the jobs' nor their parent.
  const left = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpuset",
                "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpuacct"]
    .map((root) => path.join(root, parent))
    .filter((mine) => fs.existsSync(mine));
  for (const mine of left) {
    for (const entry of fs.readdirSync(mine, { withFileTypes: true })) {
      if (entry.isDirectory()) await removeBusy(path.join(mine, entry.name));
    }
    await removeBusy(mine);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  assert.deepEqual(left, [], "cgroups left by the daemon's stop");
});

// A cgroup is busy until its last process has exited.
async function removeBusy(group) {
  for (let tries = 0; ; tries++) {
    try {
      return fs.rmdirSync(group);
    } catch (error) {
      if (error.code !== "EBUSY" || tries >= 100) throw error;
      await sleep(20);
    }
  }
}

test("the console shows two jobs taking turns and suspends one with a click", async () => {
  const spin = path.join(repo, "crates/cli/tests/workloads/spin.py");
  const submit = (name) => Number(cosched(
    ["run", "-n", "2", "--detach", "--output", "/dev/null", "--name", name, "--",
     "python3", spin, "2", "60", "0"]).trim());
  const left = submit("left");
  const right = submit("<b>right</b>");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const problems = [];
    page.on("pageerror", (error) => problems.push(String(error)));
    // (A refused action's status is logged by the browser too: those are checked below.)
    page.on("console", (message) => message.type() === "error" &&
      !message.text().startsWith("Failed to load resource") && problems.push(message.text()));
    await page.goto(url);
    await page.waitForSelector('body[data-live="yes"]');

    // The slot clock moves, and the running slice is marked.
    const slot = await page.textContent("#slot");
    await page.waitForFunction((was) => document.querySelector("#slot").textContent !== was, slot);
    assert.equal(await page.locator("#matrix tr.running").count(), 1);

    // Both jobs are in the matrix, each in a slice of its own, on both processors.
    const cells = await page.$$eval("#matrix td.job", (tds) =>
      tds.map((td) => [Number(td.closest("tr").dataset.slice), Number(td.dataset.job)]));
    const sliceOf = (id) => new Set(cells.filter(([, j]) => j === id).map(([s]) => s));
    assert.equal(cells.filter(([, j]) => j === left).length, 2, JSON.stringify(cells));
    assert.equal(cells.filter(([, j]) => j === right).length, 2, JSON.stringify(cells));
    assert.notDeepEqual([...sliceOf(left)], [...sliceOf(right)]);
    fs.mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: path.join(artifacts, "console-two-jobs.png"), fullPage: true });
    // A name is shown as text, never as markup.
    assert.equal(await page.textContent(`#jobs tr[data-job="${right}"] td:nth-child(2)`), "<b>right</b>");

    // Without a token, a click changes nothing and says why.
    await page.click(`button[data-act="suspend"][data-job="${left}"]`);
    await page.waitForFunction(() => document.querySelector("#said").textContent.includes("token"));
    assert.equal(job(left).state, "running");

    // nobody's token does not reach root's job.
    const nobodys = cosched(["console-token"], { uid: NOBODY, gid: NOBODY }).trim();
    await page.fill("#token", nobodys);
    await page.click("#token-form button");
    await page.click(`button[data-act="suspend"][data-job="${left}"]`);
    await page.waitForFunction(() => document.querySelector("#said").textContent.includes("refused"));
    assert.match(await page.textContent("#said"), /only its owner or root may suspend it/);
    assert.equal(job(left).state, "running");

    // With root's token, the click suspends it, as `cosched ps` shows, and so does the page.
    await page.fill("#token", cosched(["console-token"]).trim());
    await page.click("#token-form button");
    await page.click(`button[data-act="suspend"][data-job="${left}"]`);
    await page.waitForFunction((id) =>
      document.querySelector("#said").textContent.includes(`job ${id} suspended`), left);
    assert.equal(job(left).state, "suspended");
    await page.waitForSelector(`#jobs tr[data-job="${left}"][data-state="suspended"]`);

    // A class picked from the list and set.
    await page.selectOption(`select[data-class-of="${right}"]`, "standby");
    await page.click(`button[data-act="class"][data-job="${right}"]`);
    await page.waitForFunction(() => document.querySelector("#said").textContent.includes("standby"));
    assert.equal(job(right).class, "standby");
    await page.waitForFunction((id) => document.querySelector(
      `#jobs tr[data-job="${id}"] td:nth-child(4)`)?.textContent === "standby", right);

    await page.screenshot({ path: path.join(artifacts, "console.png"), fullPage: true });
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
    cosched(["cancel", String(left)]);
    cosched(["cancel", String(right)]);
  }
});
