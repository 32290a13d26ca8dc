"""Load test of `bertology serve`: throughput and latency with and without micro-batching, then abuse.

Starts the server as a subprocess on loopback (port picked by the server), sends
`--requests` valid /predict requests (each one real SST-2 dev sentence) at each
concurrency level, for two server settings: micro-batching (the defaults) and
`--max-batch 1` (every text its own forward pass). Prints a markdown table: setting,
concurrency, requests, errors, throughput, p50 and p99 latency (measured by the client)
and the mean batch the server formed. Then sends `--malformed` broken requests, cycling
through 11 kinds, checks every answer is a 4xx and /health is still ok, and stops the
server with SIGTERM, which must exit 0. Exits non-zero if any valid request failed, any
malformed one got anything but a 4xx, or the server did not stop cleanly.

    python bench/serve_load.py --model runs/sst2 --threads 2
    python bench/serve_load.py --model DIR --requests 50 --concurrency 1 8   # a quick check

The client shares the machine with the server: on a small machine it takes CPU time from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
from results_page import slug, write_section  # noqa: E402
SETTINGS = {"micro-batching": [], "max-batch 1": ["--max-batch", "1"]}


def sst2_sentences(path: Path) -> list[str]:
    """The sentences of SST-2's dev.tsv (header `sentence<TAB>label`)."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0] for line in lines if line.strip()]


class Server:
    """`python -m bertology serve` in a subprocess; the URL is read from the line it prints when ready."""

    def __init__(self, model: str, flags: list[str], threads: int | None):
        command = [sys.executable, "-m", "bertology", "serve", "--model", model, "--port", "0", *flags]
        if threads:
            command += ["--threads", str(threads)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=120)
        if not line or " at http" not in line[0]:
            self.process.kill()
            raise SystemExit(f"the server did not start: {line[0].strip() if line else 'no answer in 120 s'}")
        self.url = line[0].split(" at ", 1)[1].split()[0]

    def stop(self) -> int:
        """SIGTERM, then the exit status (None if it had to be killed after 30 s)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


def request_body(info: dict, sentences: list[str], i: int) -> dict:
    """A valid /predict (or, for a bare encoder, /embed) body for sentence i."""
    body = {"texts": [sentences[i % len(sentences)]]}
    if info["takes_pairs"]:
        body["text_pairs"] = [sentences[(i + 1) % len(sentences)]]
    return body


async def drive(url: str, route: str, bodies: list[dict], concurrency: int) -> tuple[list[float], int, float]:
    """Send `bodies` with `concurrency` requests in flight; (latencies in s, errors, wall seconds)."""
    latencies: list[float] = []
    errors = 0
    queue = iter(bodies)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def worker() -> None:
            nonlocal errors
            for body in queue:
                start = time.perf_counter()
                try:
                    response = await client.post(route, json=body)
                    errors += response.status_code != 200
                except httpx.HTTPError:
                    errors += 1
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, errors, time.perf_counter() - start


def malformed_requests(info: dict, route: str) -> list[tuple[str, str, str, bytes]]:
    """(kind, method, path, body) of each kind of broken request, sized by the server's limits."""
    limits = info["limits"]
    pairs = {"texts": ["a fine film"]} if info["takes_pairs"] else {"texts": ["a fine film"], "text_pairs": ["x"]}
    kinds = {
        "malformed JSON": {"texts": ["a fine film"]},
        "wrong type": {"texts": "a fine film"},
        "missing field": {"sentences": ["a fine film"]},
        "empty list": {"texts": []},
        "empty text": {"texts": ["a fine film", "   "]},
        "too many texts": {"texts": ["a fine film"] * (limits["max_texts"] + 1)},
        "too long text": {"texts": ["x" * (limits["max_text_chars"] + 1)]},
        "oversized body": {"texts": ["x " * (limits["max_body_bytes"] // 2)]},
        "text_pairs misuse": pairs,
    }
    out = [(kind, "POST", route, json.dumps(body).encode()) for kind, body in kinds.items()]
    out[0] = ("malformed JSON", "POST", route, out[0][3][:-3])  # cut off: '{"texts": ["a fine f'
    return [*out, ("unknown route", "POST", f"{route}/v2", b"{}"), ("wrong method", "GET", route, b"")]


async def abuse(url: str, route: str, info: dict, count: int) -> tuple[Counter, Counter]:
    """Send `count` broken requests cycling through the kinds; (status counts, kinds answered non-4xx)."""
    kinds = malformed_requests(info, route)
    statuses: Counter = Counter()
    failures: Counter = Counter()
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i in range(count):
            kind, method, path, body = kinds[i % len(kinds)]
            try:
                status = (await client.request(method, path, content=body,
                                               headers={"content-type": "application/json"})).status_code
            except httpx.HTTPError as err:
                status = type(err).__name__
            statuses[status] += 1
            if not (isinstance(status, int) and 400 <= status < 500):
                failures[kind] += 1
    return statuses, failures


def main() -> int:
    """Run both settings at every concurrency, then the malformed requests; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model directory (e.g. a fine-tuned SST-2 classifier)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/glue/SST-2/dev.tsv",
                        help="SST-2 dev.tsv, whose sentences are the requests")
    parser.add_argument("--requests", type=int, default=2000, help="valid requests per setting and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--malformed", type=int, default=200, help="broken requests sent at the end")
    parser.add_argument("--threads", type=int, help="the server's PyTorch threads (--threads)")
    args = parser.parse_args()

    sentences = sst2_sentences(args.data)
    rows, problems = [], []
    for setting, flags in SETTINGS.items():
        server = Server(args.model, flags, args.threads)
        try:
            info = httpx.get(f"{server.url}/info").json()
            route = "/embed" if info["kind"] == "encoder" else "/predict"
            asyncio.run(drive(server.url, route, [request_body(info, sentences, i) for i in range(16)], 4))  # warm up
            for concurrency in args.concurrency:
                before = httpx.get(f"{server.url}/info").json()["batching"][route[1:]]
                bodies = [request_body(info, sentences, i) for i in range(args.requests)]
                latencies, errors, seconds = asyncio.run(drive(server.url, route, bodies, concurrency))
                after = httpx.get(f"{server.url}/info").json()["batching"][route[1:]]
                batches = max(after["batches"] - before["batches"], 1)
                ms = np.array(latencies) * 1000
                rows.append((setting, concurrency, args.requests, errors, args.requests / seconds,
                             np.percentile(ms, 50), np.percentile(ms, 99), (after["items"] - before["items"]) / batches))
                if errors:
                    problems.append(f"{setting}, concurrency {concurrency}: {errors} valid requests failed")
            if setting == "micro-batching" and args.malformed:
                statuses, failures = asyncio.run(abuse(server.url, route, info, args.malformed))
                health = httpx.get(f"{server.url}/health").json()
        finally:
            status = server.stop()
        if status != 0:
            problems.append(f"{setting}: the server exited with {status} after SIGTERM (expected 0)")

    lines = [f"model {args.model} ({info['kind']}), {os.cpu_count()} CPUs shared with the load generator, server "
             f"threads {args.threads or 'default'}", "",
             "| setting | concurrency | requests | errors | throughput (req/s) | p50 (ms) | p99 (ms) | mean batch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for setting, concurrency, count, errors, rate, p50, p99, batch in rows:
        lines.append(f"| {setting} | {concurrency} | {count:,} | {errors} | {rate:.1f} | {p50:.1f} | {p99:.1f} "
                     f"| {batch:.1f} |")
    if args.malformed:
        kinds = ", ".join(kind for kind, *_ in malformed_requests(info, route))
        lines += ["", f"{args.malformed} malformed requests ({kinds}): status counts "
                      f"{dict(sorted(statuses.items(), key=str))}; /health afterwards: {health}"]
        if failures:
            problems.append(f"malformed requests answered with a non-4xx: {dict(failures)}")
        if health.get("status") != "ok":
            problems.append(f"/health after the malformed requests: {health}")
    print("\n" + "\n".join(lines))
    if not problems:  # a failed run is reported on stderr, not published
        write_section("serve-load", slug(Path(args.model).name, *args.concurrency), f"{Path(args.model).name} behind "
                      "`bertology serve`", "\n".join(lines))
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
