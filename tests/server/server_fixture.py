"""Starts `mlaserve serve` on a random loopback port for a test and stops it with SIGTERM."""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time


class Server:
    def __init__(self, binary, model_dir, *extra_args, launcher=(), env=None):
        """launcher: a command the server runs under, e.g. ("mpirun", "-np", "2"); env: variables
        added to the server's environment."""
        self.log_lines = []
        self.proc = subprocess.Popen([*launcher, binary, "serve", "--model", model_dir, "--port", "0", *extra_args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                                     env={**os.environ, **(env or {})})
        self.port = None
        ready = threading.Event()

        def read_log():
            for line in self.proc.stderr:
                self.log_lines.append(line)
                found = re.search(r"ready: serving .* on http://127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read_log, daemon=True).start()
        if not ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log_lines))

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, parsed JSON or text) of one request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        payload = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        data = response.read().decode("utf-8", "replace")
        conn.close()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data

    def stream(self, path, body, timeout=300):
        """The SSE payloads of a streaming request (without "data: ")."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            return response.status, [response.read().decode()]
        events = []
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data: "):
                events.append(line[6:])
        conn.close()
        return 200, events

    def metric(self, name, labels=""):
        status, text = self.request("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") and labels in line:
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        """SIGTERM; returns the exit code (0 expected)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1


def make_tiny_model(binary, directory, seed=7):
    if not os.path.exists(os.path.join(directory, "config.json")):
        subprocess.run([binary, "make-model", "--preset", "tiny", "--dtype", "bf16", "--seed", str(seed), directory],
                       check=True, capture_output=True)
    return directory


def wait_until(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
