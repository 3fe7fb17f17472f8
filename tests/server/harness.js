// What the Node end-to-end tests share: checks that count and report, a server started on a
// random loopback port, and the exit status from the checks.
const { spawn } = require("child_process");

let passed = 0, failed = 0;

function check(label, condition, detail = "") {
  if (condition) passed++;
  else {
    failed++;
    console.log(`FAIL ${label} ${detail}`);
  }
}

// `mlaserve serve ARGS --port 0`, resolved once it prints where it listens: {proc, url, log()}.
function startServer(binary, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ["serve", ...args, "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (chunk) => {
      log += chunk;
      const found = log.match(/ready: serving .* on (http:\/\/127\.0\.0\.1:\d+)/);
      if (found) resolve({ proc, url: found[1], log: () => log });
    });
    proc.on("exit", (code) => reject(new Error(`server exited ${code}: ${log}`)));
    setTimeout(() => reject(new Error("server did not start: " + log)), 120000);
  });
}

// SIGTERM, and a check that the server exits 0.
async function stopServer(proc) {
  const exited = new Promise((resolve) => proc.on("exit", resolve));
  proc.kill("SIGTERM");
  check("server exits 0 on SIGTERM", (await exited) === 0);
}

// Runs the test, then prints the counts (and `note`) and exits 1 if any check failed.
function run(main, note = "") {
  main().catch((error) => {
    console.log("FAIL " + error.stack);
    failed++;
  }).finally(() => {
    console.log(`${passed} passed, ${failed} failed${note}`);
    process.exit(failed ? 1 : 0);
  });
}

module.exports = { check, startServer, stopServer, run };
